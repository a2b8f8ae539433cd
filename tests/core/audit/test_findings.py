"""What the background audit reports (SPEC §8.3): every kind of result, read from the report
documents an admin would get, from states written as a user writes them; and the audit's
verdicts are admission's, for every stored policy of random states.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.fixtures.budget import whole_clusters
from tests.fixtures.changes import OPS, Op, apply, base_store, policy_docs
from tests.fixtures.engine import CLUSTER, CRDS, policy, store_of
from webhook.core.admission import validation
from webhook.core.audit import reports
from webhook.core.audit.findings import audit_store
from webhook.core.model.settings import Settings
from webhook.core.state.overlay import OverlayView
from webhook.core.state.store import Store

UID = "metadata: {name: on-gone, namespace: apps, uid: 1f0c2a4e-0000-4000-8000-000000000001}"


def results_by_namespace(store: Store, settings: Settings | None = None) -> dict[str, list[Any]]:
    """Every namespace's report results, as the leader would write them (no timestamps)."""
    audits = audit_store(store, settings or Settings())
    found: dict[str, list[Any]] = {}
    for audit in audits.values():
        found.setdefault(audit.key.namespace, [])
    for namespace in found:
        found[namespace] = reports.policy_results(
            a for a in audits.values() if a.key.namespace == namespace
        )
    return found


def only_result(results: list[Any], rule: str) -> dict[str, Any]:
    (found,) = [r for r in results if r["policy"] == rule]
    return dict(found)


RETRY_ON_R = policy("on-r", "HTTPRoute/apps/r", "default: {maxRetries: 3}")


def test_a_clean_policy_has_no_result_and_its_namespace_an_empty_report() -> None:
    store = store_of(CRDS, CLUSTER, RETRY_ON_R)
    results = results_by_namespace(store)
    assert results == {"apps": []}
    document = reports.report("apps", results["apps"], now=0)
    assert document["kind"] == "PolicyReport" and document["metadata"]["namespace"] == "apps"
    assert document["summary"] == {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0}
    assert document["results"] == []


def test_a_missing_target_is_a_target_warning_on_the_policy_pa_t06() -> None:
    gone = policy("on-gone", "HTTPRoute/apps/gone", "default: {maxRetries: 3}")
    gone = gone.replace("metadata: {name: on-gone, namespace: apps}", UID)
    store = store_of(CRDS, CLUSTER, gone)
    result = only_result(results_by_namespace(store)["apps"], "PA-T06")
    assert result == {
        "source": "policy-attachment-webhook",
        "policy": "PA-T06",
        "category": "Target",
        "severity": "medium",
        "result": "warn",
        "scored": False,
        "message": "HTTPRoute/apps/gone does not exist (yet); no effect until it does",
        "resources": [
            {
                "apiVersion": "policies.example.com/v1alpha1",
                "kind": "RetryPolicy",
                "name": "on-gone",
                "namespace": "apps",
                "uid": "1f0c2a4e-0000-4000-8000-000000000001",
            }
        ],
        "properties": {"field": "spec.targetRefs[0]", "action": "warn"},
    }


def test_a_stored_policy_that_breaks_a_shape_rule_fails_and_is_judged_no_further() -> None:
    both = policy("both", "HTTPRoute/apps/r", "default: {maxRetries: 3}\ntargetRef: {group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}")  # fmt: skip
    store = store_of(
        CRDS, CLUSTER, both, policy("twin", "HTTPRoute/apps/r", "default: {maxRetries: 1}")
    )
    results = [
        r for r in results_by_namespace(store)["apps"] if r["resources"][0]["name"] == "both"
    ]
    assert [r["policy"] for r in results] == [
        "PA-S01"
    ]  # no PA-C01: a denied policy counts for nothing
    (result,) = results
    assert (result["result"], result["severity"], result["category"], result["scored"]) == (
        "fail",
        "high",
        "Shape",
        True,
    )
    assert result["properties"]["field"] == "spec.targetRef"


def test_two_direct_policies_on_one_service_show_pa_c01_on_both() -> None:
    older = policy(
        "older",
        "Service/apps/foo",
        "path: /healthz",
        kind="HealthCheckPolicy",
        created="2024-01-01T00:00:00Z",
    )
    newer = policy("newer", "Service/apps/foo", "path: /ready", kind="HealthCheckPolicy", created="2024-01-01T00:00:01Z")  # fmt: skip
    results = results_by_namespace(store_of(CRDS, CLUSTER, older, newer))["apps"]
    by_policy = {r["resources"][0]["name"]: r for r in results if r["policy"] == "PA-C01"}
    assert set(by_policy) == {"older", "newer"}
    assert "this one wins" in by_policy["older"]["message"]
    assert by_policy["newer"]["message"] == (
        "older targets it too and wins (older); this one is Conflicted"
    )
    assert {r["category"] for r in by_policy.values()} == {"Conflict"}


def test_an_override_above_a_default_shows_on_both_policies() -> None:
    over = policy("over", "Gateway/infra/gw", "override: {maxRetries: 5}")
    results = results_by_namespace(store_of(CRDS, CLUSTER, over, RETRY_ON_R))
    dead = only_result(results["apps"], "PA-C02")
    assert (
        dead["category"] == "Conflict" and dead["properties"]["field"] == "spec.default.maxRetries"
    )
    assert "infra/over" in dead["message"]
    beats = only_result(results["infra"], "PA-C03")
    assert beats["category"] == "Impact" and "apps/on-r" in beats["message"]


def test_a_cluster_scoped_policy_goes_to_the_cluster_report() -> None:
    limit = """
apiVersion: policies.example.com/v1alpha1
kind: ConnectionLimitPolicy
metadata: {name: everywhere}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: nope, namespace: infra}]
  default: {maxConnections: 10}
"""
    results = results_by_namespace(store_of(CRDS, CLUSTER, limit))
    assert set(results) == {""}
    assert only_result(results[""], "PA-T06")["resources"][0].keys() == {
        "apiVersion",
        "kind",
        "name",
    }
    assert reports.report("", results[""], now=0)["kind"] == "ClusterPolicyReport"


def test_a_kind_of_unknown_class_is_a_kind_finding_pa_k01() -> None:
    mystery = """
apiVersion: vendor.example.org/v1
kind: MysteryPolicy
metadata: {name: m, namespace: apps}
spec:
  targetRefs: [{group: '', kind: Service, name: foo}]
  default: {x: 1}
"""
    result = only_result(results_by_namespace(store_of(CRDS, CLUSTER, mystery))["apps"], "PA-K01")
    assert (result["category"], result["result"]) == ("Kind", "warn")


def test_configured_actions_decide_the_result_off_is_not_reported_audit_is_low() -> None:
    gone = policy("on-gone", "HTTPRoute/apps/gone", "default: {maxRetries: 3}")
    store = store_of(CRDS, CLUSTER, gone)
    assert results_by_namespace(store, Settings(rule_actions={"PA-T06": "off"})) == {"apps": []}
    audited = only_result(results_by_namespace(store, Settings(rule_actions={"PA-T06": "audit"}))["apps"], "PA-T06")  # fmt: skip
    assert (audited["result"], audited["severity"], audited["properties"]["action"]) == (
        "warn",
        "low",
        "audit",
    )
    strict = only_result(results_by_namespace(store, Settings(strict=True))["apps"], "PA-T06")
    assert (strict["result"], strict["severity"], strict["scored"]) == ("fail", "high", True)


def test_the_impact_preview_is_never_reported() -> None:
    """PA-C04 describes a change; a stored policy's admission would carry one (it changes the
    route's values), its audit does not."""
    store = store_of(CRDS, CLUSTER, RETRY_ON_R)
    key = next(iter(audit_store(store, Settings())))
    obj = store.get(key)
    assert obj is not None
    as_created = validation.check_policy(
        obj, key.group_kind, view=OverlayView(store, deletes=[key]), settings=Settings()
    )
    assert "PA-C04" in as_created.rule_ids
    assert all(not r for r in results_by_namespace(store).values())


# --- one source of truth: the audit judges as admission does -----------------------------------


@whole_clusters(100)
@given(ops=st.lists(st.one_of(st.tuples(st.just("upsert"), policy_docs()), OPS), max_size=10))
def test_every_stored_policy_is_judged_as_its_create_against_the_others(ops: list[Op]) -> None:
    store = base_store()
    for op in ops:
        apply(store, op)
    for key, audit in audit_store(store, Settings()).items():
        obj = store.get(key)
        assert obj is not None
        created = validation.check_policy(
            obj, key.group_kind, view=OverlayView(store, deletes=[key]), settings=Settings()
        )
        expected = tuple(j for j in created.judged if j.finding.rule_id != "PA-C04")
        assert audit.findings == expected, key
