"""Conflict and impact findings (SPEC §2.3): PA-C01…PA-C05, through the admission entry points.

Each test admits a policy as a user writes it against the engine fixtures' cluster (Gateway
`infra/gw` with listeners http/https, route `apps/r` on https, Services foo and bar behind it).
"""

from __future__ import annotations

from typing import Any

from tests.fixtures.engine import CLUSTER, CRDS, docs, store_of
from webhook.core.admission import validation as admission
from webhook.core.admission.reviews import Request
from webhook.core.model.refs import GroupKind, key_of
from webhook.core.model.settings import Settings
from webhook.core.rules.findings import Verdict
from webhook.core.state.store import Store


def admit(
    store: Store, text: str, *, old: dict[str, Any] | None = None, settings: Settings | None = None
) -> Verdict:
    (obj,) = docs(text)
    key = key_of(obj)
    assert key is not None
    return admission.check_policy(
        obj, key.group_kind, view=store, settings=settings or Settings(), old=old
    )


def lines(verdict: Verdict, rule: str) -> list[str]:
    return [f.text for f in verdict.warnings if f.rule_id == rule]


def retry(
    name: str, ns: str, target: str, stanza: str, created: str = "2026-01-01T00:00:00Z"
) -> str:
    return f"""
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {{name: {name}, namespace: {ns}, creationTimestamp: "{created}"}}
spec:
  targetRefs: [{target}]
  {stanza}
"""


GW = "{group: gateway.networking.k8s.io, kind: Gateway, name: gw}"
ROUTE = "{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}"


def health(name: str, created: str, section: str = "") -> str:
    extra = f", sectionName: {section}" if section else ""
    return f"""
apiVersion: policies.example.com/v1alpha1
kind: HealthCheckPolicy
metadata: {{name: {name}, namespace: apps, creationTimestamp: "{created}"}}
spec:
  targetRefs: [{{group: "", kind: Service, name: foo{extra}}}]
  path: /{name}
"""


def test_e10_second_direct_policy_is_told_the_first_wins_and_it_is_conflicted() -> None:
    store = store_of(CRDS, CLUSTER, health("p1", "2026-01-01T00:00:00Z"))
    verdict = admit(store, health("p2", "2026-01-01T00:00:01Z"))
    assert verdict.allowed
    (line,) = lines(verdict, "PA-C01")
    assert line == (
        "[PA-C01] spec.targetRefs[0]: p1 targets it too and wins (older); this one is Conflicted"
    )


def test_a_direct_conflict_between_policies_of_one_age_is_settled_by_name() -> None:
    """SPEC §4.4: on equal timestamps `namespace/name` in byte order wins, and PA-C01 says so,
    whichever of the two is being applied."""
    same = "2026-01-01T00:00:00Z"
    store = store_of(CRDS, CLUSTER, health("p1", same))
    (line,) = lines(admit(store, health("p2", same)), "PA-C01")
    assert line == (
        "[PA-C01] spec.targetRefs[0]: p1 targets it too and wins (same age, by name); "
        "this one is Conflicted"
    )
    (line,) = lines(admit(store, health("p0", same)), "PA-C01")
    assert line == (
        "[PA-C01] spec.targetRefs[0]: p1 targets it too; this one wins (same age, by name): "
        "that one is Conflicted"
    )


def test_e12_direct_policies_on_different_sections_do_not_conflict() -> None:
    store = store_of(CRDS, CLUSTER, health("p1", "2026-01-01T00:00:00Z"))
    assert (
        lines(admit(store, health("p2", "2026-01-01T00:00:01Z", section="https")), "PA-C01") == []
    )


def test_inherited_conflict_names_the_fields_the_other_policy_wins() -> None:
    store = store_of(
        CRDS, CLUSTER, retry("older", "apps", ROUTE, "default: {maxRetries: 2, retryOn: ['502']}")
    )
    verdict = admit(
        store,
        retry(
            "newer",
            "apps",
            ROUTE,
            "default: {maxRetries: 5, backoff: {baseInterval: 1s}}",
            "2026-02-01T00:00:00Z",
        ),
    )
    (line,) = lines(verdict, "PA-C01")
    assert line == "[PA-C01] spec.targetRefs[0]: older targets it too and wins on maxRetries"


def test_an_override_wins_over_a_default_at_the_same_rung_whatever_the_age() -> None:
    store = store_of(CRDS, CLUSTER, retry("older", "apps", ROUTE, "default: {maxRetries: 2}"))
    verdict = admit(
        store, retry("newer", "apps", ROUTE, "override: {maxRetries: 5}", "2026-02-01T00:00:00Z")
    )
    (line,) = lines(verdict, "PA-C01")
    assert "this one wins on maxRetries" in line


def test_policies_that_set_different_fields_do_not_conflict() -> None:
    store = store_of(CRDS, CLUSTER, retry("older", "apps", ROUTE, "default: {maxRetries: 2}"))
    assert (
        lines(admit(store, retry("newer", "apps", ROUTE, "default: {retryOn: ['503']}")), "PA-C01")
        == []
    )


def test_dead_default_names_the_override_that_always_wins() -> None:
    store = store_of(CRDS, CLUSTER, retry("gw-retry", "infra", GW, "override: {maxRetries: 3}"))
    verdict = admit(
        store, retry("r-retry", "apps", ROUTE, "default: {maxRetries: 5, retryOn: ['504']}")
    )
    (line,) = lines(verdict, "PA-C02")
    assert line.startswith(
        "[PA-C02] spec.default.maxRetries: can never take effect: overridden by infra/gw-retry"
    )
    assert "retryOn" not in line


def test_a_default_that_applies_somewhere_is_not_dead() -> None:
    # The override sits on the https listener only; the route also attaches via http.
    store = store_of(CRDS, CLUSTER.replace("sectionName: https}", "}"))
    store.upsert(
        docs(
            retry(
                "gw-retry",
                "infra",
                GW.replace("gw}", "gw, sectionName: https}"),
                "override: {maxRetries: 3}",
            )
        )[0]
    )
    verdict = admit(store, retry("r-retry", "apps", ROUTE, "default: {maxRetries: 5}"))
    assert lines(verdict, "PA-C02") == []


def test_override_that_beats_more_specific_policies_names_them() -> None:
    store = store_of(CRDS, CLUSTER, retry("r-retry", "apps", ROUTE, "default: {maxRetries: 5}"))
    verdict = admit(store, retry("gw-retry", "infra", GW, "override: {maxRetries: 3}"))
    assert lines(verdict, "PA-C03") == [
        "[PA-C03] spec.override: beats 1 more specific policy: apps/r-retry"
    ]


def test_impact_preview_shows_before_and_after_per_field() -> None:
    store = store_of(CRDS, CLUSTER, retry("gw-retry", "infra", GW, "override: {maxRetries: 3}"))
    old = docs(retry("gw-retry", "infra", GW, "override: {maxRetries: 3}"))[0]
    verdict = admit(store, retry("gw-retry", "infra", GW, "override: {maxRetries: 2}"), old=old)
    (line,) = lines(verdict, "PA-C04")
    assert line.startswith("[PA-C04] changes maxRetries on 1 Gateway, 1 HTTPRoute, 2 Services (")
    assert "HTTPRoute/apps/r 3→2" in line


def test_an_update_that_changes_nothing_previews_nothing() -> None:
    text = retry("gw-retry", "infra", GW, "override: {maxRetries: 3}")
    store = store_of(CRDS, CLUSTER, text)
    assert lines(admit(store, text, old=docs(text)[0]), "PA-C04") == []


def test_impact_lines_are_bounded() -> None:
    store = store_of(CRDS, CLUSTER)
    stanza = "default: {maxRetries: 1, retryOn: ['5'], backoff: {baseInterval: 1s, maxInterval: 2s}, headers: {a: b}}"
    verdict = admit(
        store, retry("many", "infra", GW, stanza), settings=Settings(max_impact_lines=2)
    )
    found = lines(verdict, "PA-C04")
    assert len(found) == 3
    assert found[-1] == "[PA-C04] ... and 3 more changed fields"


def review(operation: str, obj: dict[str, Any]) -> Request:
    key = key_of(obj)
    assert key is not None
    return {
        "uid": "u-1",
        "kind": {"group": key.group, "version": "v1", "kind": key.kind},
        "resource": {"group": key.group, "version": "v1", "resource": key.kind.lower() + "s"},
        "operation": operation,  # type: ignore[typeddict-item]
        "object": None,
        "oldObject": obj,
    }


def test_deleting_a_policy_previews_what_goes_back() -> None:
    text = retry("gw-retry", "infra", GW, "override: {maxRetries: 3}")
    store = store_of(CRDS, CLUSTER, text)
    verdict = admission.validate(review("DELETE", docs(text)[0]), view=store, settings=Settings())
    assert verdict.allowed
    (line,) = lines(verdict, "PA-C04")
    assert "HTTPRoute/apps/r 3→unset" in line


def test_deleting_a_target_names_the_policies_left_without_it() -> None:
    store = store_of(
        CRDS, CLUSTER, health("p1", "2026-01-01T00:00:00Z"), health("p2", "2026-01-01T00:00:01Z")
    )
    foo = store.get(next(k for k in store.keys(GroupKind("", "Service")) if k.name == "foo"))
    assert foo is not None
    verdict = admission.validate(
        review("DELETE", dict(foo)), view=store, settings=Settings(strict=True)
    )
    assert verdict.allowed, "a DELETE is never denied, even with --strict"
    assert lines(verdict, "PA-C05") == [
        "[PA-C05] Service/apps/foo is still targeted by HealthCheckPolicy apps/p1, HealthCheckPolicy apps/p2; "
        "they become TargetNotFound"
    ]


def test_a_denied_policy_gets_no_conflict_or_impact_findings() -> None:
    store = store_of(CRDS, CLUSTER, retry("older", "apps", ROUTE, "default: {maxRetries: 2}"))
    verdict = admit(
        store, retry("bad", "apps", ROUTE, "default: {maxRetries: 5}\n  override: {maxRetries: 1}")
    )
    assert not verdict.allowed
    assert not [j for j in verdict.judged if j.finding.rule_id.startswith("PA-C")]


def test_a_map_value_is_one_change_in_the_preview() -> None:
    """SPEC §2.5: a map (`additionalProperties`) is one value, as PA-S11 compares it."""
    store = store_of(CRDS, CLUSTER)
    verdict = admit(store, retry("h", "infra", GW, "default: {headers: {x-a: '1', x-b: '2'}}"))
    changed = lines(verdict, "PA-C04")
    assert changed and all(line.startswith("[PA-C04] changes headers on ") for line in changed)
    assert '{"x-a":"1","x-b":"2"}' in changed[0]


def test_every_preview_line_fits_in_120_characters() -> None:
    long_names = "".join(
        f"""
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: a-rather-long-route-name-for-the-checkout-service-{i}, namespace: apps}}
spec:
  parentRefs: [{{name: gw, namespace: infra}}]
"""
        for i in range(4)
    )
    store = store_of(CRDS, CLUSTER, long_names)
    value = "x" * 60
    verdict = admit(
        store, retry("h", "infra", GW, f"default: {{retryOn: ['{value}'], maxRetries: 2}}")
    )
    previews = lines(verdict, "PA-C04")
    assert len(previews) >= 2
    assert all(len(line) <= 120 for line in previews), [len(line) for line in previews]
    assert all("Gateway/infra/gw unset→" in line for line in previews)  # still an example each


def test_a_route_sent_to_validate_by_a_wide_rule_is_not_judged_as_a_policy() -> None:
    """An admin who adds `gateway.networking.k8s.io` with `resources: ["*"]` to the policy
    webhook's rules (for BackendTLSPolicy) must not get every HTTPRoute denied."""
    store = store_of(CRDS, CLUSTER)
    (route,) = [doc for doc in docs(CLUSTER) if doc["kind"] == "HTTPRoute"]
    route["spec"] = {"parentRefs": []}  # no targetRefs: a policy would be PA-S02
    request: Request = {**review("UPDATE", route), "object": route}
    verdict = admission.validate(request, view=store, settings=Settings())
    assert verdict.allowed and not verdict.judged


# --- how many objects a preview covers --------------------------------------------------------

R2 = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r2, namespace: apps}
spec:
  parentRefs: [{name: gw, namespace: infra, sectionName: http}]
  rules:
  - backendRefs: [{name: foo, port: 80}]
"""
ROUTE2 = "{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r2}"


def test_a_preview_over_its_bound_shows_the_least_specific_and_counts_all() -> None:
    store = store_of(CRDS, CLUSTER)
    verdict = admit(
        store,
        retry("gw-retry", "infra", GW, "override: {maxRetries: 3}"),
        settings=Settings(max_impact_objects=2),
    )
    changes, covers = lines(verdict, "PA-C04")
    assert changes.startswith("[PA-C04] changes maxRetries on 1 Gateway, 1 HTTPRoute (")
    assert covers == "[PA-C04] preview covers 2 of 4 affected objects"  # gw, r, foo, bar


def test_deleting_a_policy_over_the_bound_counts_every_object_it_leaves() -> None:
    """SPEC §2.3: PA-C04 on DELETE too, bounded as on a write."""
    text = retry("gw-retry", "infra", GW, "override: {maxRetries: 3}")
    store = store_of(CRDS, CLUSTER, text)
    verdict = admission.validate(
        review("DELETE", docs(text)[0]), view=store, settings=Settings(max_impact_objects=2)
    )
    changes, covers = lines(verdict, "PA-C04")
    assert changes.startswith("[PA-C04] changes maxRetries on 1 Gateway, 1 HTTPRoute (")
    assert covers == "[PA-C04] preview covers 2 of 4 affected objects"


def test_a_preview_counts_once_what_two_targets_share() -> None:
    """r reaches foo and bar, r2 reaches foo: three objects below them, four with r2."""
    store = store_of(CRDS, CLUSTER, R2)
    targets = f"{ROUTE}, {ROUTE2}"
    verdict = admit(
        store,
        retry("two", "apps", targets, "default: {maxRetries: 3}"),
        settings=Settings(max_impact_objects=1),
    )
    changes, covers = lines(verdict, "PA-C04")
    assert changes.endswith("on 1 HTTPRoute (apps/r unset→3)")  # r before r2 and the Services
    assert covers == "[PA-C04] preview covers 1 of 4 affected objects"


def test_a_policy_moved_to_another_target_previews_both_reaches() -> None:
    before = retry("mv", "apps", ROUTE2, "default: {maxRetries: 3}")
    store = store_of(CRDS, CLUSTER, R2, before)
    verdict = admit(
        store,
        retry("mv", "apps", ROUTE, "default: {maxRetries: 3}"),
        old=docs(before)[0],
        settings=Settings(max_impact_objects=1),
    )
    changes, covers = lines(verdict, "PA-C04")
    assert changes.endswith("on 1 HTTPRoute (apps/r unset→3)")
    assert covers == "[PA-C04] preview covers 1 of 4 affected objects"  # r, foo, bar; r2


def test_preview_values_are_spelled_as_json_writes_them() -> None:
    """A number as itself, a boolean as `true` (not Python's `True`), a string unquoted."""
    store = store_of(CRDS, CLUSTER)
    text = "default: {maxRetries: 3, perTryTimeout: 2s, retryOnReset: true}"
    verdict = admit(store, retry("h", "infra", GW, text))
    changed = " ".join(lines(verdict, "PA-C04"))
    assert "unset→3" in changed
    assert "unset→2s" in changed
    assert "unset→true" in changed
