"""The report documents (SPEC §8.3) and the kind findings (SPEC §8.4): the same findings make
the same document, so nothing is written; a new finding is stamped, an old one keeps its
time; a report stays a size the API server takes; PA-K02 and PA-K03 say what they must.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fixtures.engine import CRDS, store_of
from webhook.core.audit import reports
from webhook.core.audit.kind_findings import KindFacts, audit_kinds
from webhook.core.model.settings import Settings
from webhook.core.model.webhook_rules import PolicyResource
from webhook.core.rules.findings import Finding, Judged
from webhook.core.rules.ruletable import RULES


def result(rule: str = "PA-T06", name: str = "p", message: str = "gone") -> dict[str, Any]:
    return reports.result_of(
        Judged(Finding(rule, "spec.targetRefs[0]", message), "warn"),
        {"apiVersion": "policies.example.com/v1alpha1", "kind": "RetryPolicy", "name": name},
    )


def from_server(document: dict[str, Any]) -> dict[str, Any]:
    """As the API server sends it back: other metadata, keys in another order."""
    back = json.loads(json.dumps(document, sort_keys=True))
    back["metadata"] |= {"resourceVersion": "42", "uid": "u", "creationTimestamp": "2024-01-01T00:00:00Z"}  # fmt: skip
    return dict(back)


def test_the_same_findings_make_the_same_content_whatever_the_time() -> None:
    first = from_server(reports.report("apps", [result()], now=1000))
    again = reports.report("apps", [result()], now=2000, previous=first)
    assert again["results"][0]["timestamp"] == {"seconds": 1000, "nanos": 0}  # first seen
    assert reports.same_content(again, first)


def test_a_new_finding_is_new_content_stamped_now_beside_the_old_ones() -> None:
    first = from_server(reports.report("apps", [result()], now=1000))
    more = reports.report(
        "apps", [result(), result("PA-C01", "q", "twin")], now=2000, previous=first
    )
    assert not reports.same_content(more, first)
    assert [r["timestamp"]["seconds"] for r in more["results"]] == [1000, 2000]
    assert more["summary"] == {"pass": 0, "fail": 0, "warn": 2, "error": 0, "skip": 0}


@pytest.mark.parametrize(
    "change",
    [
        lambda doc: doc["results"].pop(),
        lambda doc: doc["results"][0].update(message="other"),
        lambda doc: doc["summary"].update(warn=7),
        lambda doc: doc["metadata"]["labels"].clear(),
    ],
    ids=["a result gone", "a message changed", "a count changed", "our label gone"],
)
def test_a_report_changed_by_someone_else_is_not_the_same_content(change: Any) -> None:
    wanted = reports.report("apps", [result(), result("PA-C01")], now=1)
    held = from_server(wanted)
    assert reports.same_content(wanted, held)
    change(held)
    assert not reports.same_content(wanted, held)


def test_no_report_held_is_never_the_same_content() -> None:
    assert not reports.same_content(reports.report("apps", [], now=0), None)


def test_a_huge_report_keeps_the_first_results_and_counts_them_all() -> None:
    many = [result(name=f"p{i:05d}") for i in range(reports.MAX_RESULTS + 5)]
    document = reports.report("apps", many, now=0)
    assert len(document["results"]) == reports.MAX_RESULTS
    assert document["summary"]["warn"] == reports.MAX_RESULTS + 5
    assert document["metadata"]["annotations"] == {reports.OMITTED_ANNOTATION: "5"}
    assert len(json.dumps(document)) < 1_000_000  # etcd takes objects up to 1.5 MB


def test_every_rule_is_reported_under_one_of_the_five_categories_by_its_letter() -> None:
    """SPEC §8.3: `category` is Shape, Target, Conflict, Impact or Kind; what a policy does to
    others (PA-C03…C05) is Impact, policies meeting on one field (PA-C01, PA-C02) Conflict."""
    by_category: dict[str, set[str]] = {}
    for rule in RULES:
        by_category.setdefault(rule.category, set()).add(rule.id)
    assert set(by_category) == {"Shape", "Target", "Conflict", "Impact", "Kind"}
    letter = {"Shape": "S", "Target": "T", "Conflict": "C", "Impact": "C", "Kind": "K"}
    for category, ids in by_category.items():
        assert {i[3] for i in ids} == {letter[category]}, category
    assert by_category["Conflict"] == {"PA-C01", "PA-C02"}
    assert by_category["Impact"] == {"PA-C03", "PA-C04", "PA-C05"}


def test_the_findings_gauge_counts_by_rule_and_result() -> None:
    counted = reports.counts([result(), result(name="q"), result("PA-C01")])
    assert counted == {("PA-T06", "warn"): 2, ("PA-C01", "warn"): 1}


# --- PA-K02, PA-K03 ------------------------------------------------------------------------------

RETRY = PolicyResource("policies.example.com", "retrypolicies", "RetryPolicy")
COLOR = PolicyResource("policies.example.com", "colorpolicies", "ColorPolicy")
HOOK = "policies.policy-attachment.dev"


def configuration(*rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "policy-webhook"},
        "webhooks": [
            {"name": HOOK, "rules": list(rules)},
            {"name": "policy-deletes.policy-attachment.dev", "rules": [
                {"apiGroups": ["*"], "resources": ["*"], "operations": ["DELETE"]}]},
        ],
    }  # fmt: skip


def kind_findings(
    facts: KindFacts, settings: Settings | None = None
) -> dict[str, list[tuple[str, str]]]:
    store = store_of(CRDS)
    return {
        audit.crd_name: [(j.finding.rule_id, j.action) for j in audit.findings]
        for audit in audit_kinds(facts, profile=store.profile, settings=settings or Settings())
    }


def facts(
    config: dict[str, Any] | None,
    judged: set[PolicyResource],
    unreadable: frozenset[PolicyResource] = frozenset(),
) -> KindFacts:
    return KindFacts("policy-webhook", config, frozenset(judged), unreadable)


def test_a_kind_no_rule_sends_is_pa_k02_and_one_a_rule_sends_is_not() -> None:
    only_retry = configuration({"apiGroups": ["policies.example.com"], "apiVersions": ["*"],
                                "operations": ["CREATE", "UPDATE"], "resources": ["retrypolicies"]})  # fmt: skip
    assert kind_findings(facts(only_retry, {RETRY, COLOR})) == {
        "colorpolicies.policies.example.com": [("PA-K02", "warn")]
    }


@pytest.mark.parametrize(
    "rule",
    [
        {"apiGroups": ["*"], "resources": ["*"], "operations": ["*"]},
        {"apiGroups": ["policies.example.com"], "resources": ["*/*"], "operations": ["CREATE", "UPDATE"]},
    ],
)  # fmt: skip
def test_wildcards_send_every_kind(rule: dict[str, Any]) -> None:
    assert kind_findings(facts(configuration(rule), {RETRY, COLOR})) == {}


def test_a_rule_for_creates_only_does_not_send_the_kind() -> None:
    creates = configuration({"apiGroups": ["*"], "resources": ["*"], "operations": ["CREATE"]})
    assert kind_findings(facts(creates, {RETRY})) == {
        "retrypolicies.policies.example.com": [("PA-K02", "warn")]
    }


def test_nothing_is_said_of_pa_k02_without_the_configuration_or_for_a_kind_not_yet_judged() -> None:
    assert kind_findings(facts(None, {RETRY})) == {}
    assert kind_findings(facts(configuration(), set())) == {}  # served, not judged yet


def test_an_unreadable_kind_is_pa_k03_with_the_rule_to_add() -> None:
    (audit,) = audit_kinds(
        facts(None, set(), frozenset({RETRY})), profile=store_of(CRDS).profile, settings=Settings()
    )
    (judged,) = audit.findings
    assert judged.finding.rule_id == "PA-K03"
    message = judged.finding.message
    assert "retrypolicies.policies.example.com" in message
    assert (
        'resources: ["retrypolicies"]' in message and "aggregate-to-policy-webhook=true" in message
    )
    (row,) = reports.kind_results([audit])
    assert row["resources"] == [{"apiVersion": "apiextensions.k8s.io/v1",
                                 "kind": "CustomResourceDefinition",
                                 "name": "retrypolicies.policies.example.com"}]  # fmt: skip
    assert row["category"] == "Kind"


def test_pa_k02_of_a_kind_the_webhook_may_not_read_does_not_say_its_policies_are_annotated() -> (
    None
):
    def k02_message(unreadable: frozenset[PolicyResource]) -> str:
        (audit,) = audit_kinds(
            facts(configuration(), {RETRY}, unreadable),
            profile=store_of(CRDS).profile,
            settings=Settings(),
        )
        return next(j.finding.message for j in audit.findings if j.finding.rule_id == "PA-K02")

    assert k02_message(frozenset()).endswith("its policies are annotated but never checked")
    unread = k02_message(frozenset({RETRY}))
    assert "annotated but" not in unread and "not annotated either" in unread
    assert "PA-K03" in unread


def test_kind_findings_follow_the_configured_actions() -> None:
    silent = Settings(rule_actions={"PA-K02": "off", "PA-K03": "off"})
    assert kind_findings(facts(configuration(), {RETRY}, frozenset({RETRY})), silent) == {}
    loud = Settings(strict=True)
    assert kind_findings(facts(configuration(), {RETRY}), loud) == {
        "retrypolicies.policies.example.com": [("PA-K02", "deny")]
    }
