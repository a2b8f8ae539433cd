"""The `auditAnnotations` of a `/validate` answer (SPEC §2.4, §2.5, §8): what the API server's
audit log keeps of it, under `<webhook name>/<key>`. Denied and warned answers, and answers with
findings of rules set to `audit`, carry them; a clean allow carries none."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from tests.fixtures.https import review_of
from tests.fixtures.paths import REPO
from webhook.core.admission import decisions, reviews
from webhook.core.admission.reviews import Request
from webhook.core.model.profiles import Action
from webhook.core.rules.findings import Finding, Judged, Verdict

POLICY: dict[str, Any] = {
    "apiVersion": "policies.example.com/v1alpha1",
    "kind": "RetryPolicy",
    "metadata": {"name": "retry-everything", "namespace": "apps"},
    "spec": {"targetRef": {"group": "", "kind": "Service", "name": "cart"}},
}
PREVIEW = Finding("PA-C04", "", "changes maxRetries on 1 Service")
SHAPE = Finding("PA-S01", "spec.targetRef", "set together with spec.targetRefs; keep one of them")
MISSING = Finding("PA-T06", "spec.targetRefs[0]", "Service/apps/cart does not exist (yet)")
TYPO = Finding("PA-T09", "spec.targetRefs[0].kind", "looks like a typo")
KEYS = (reviews.AUDIT_VERDICT, reviews.AUDIT_RULES, reviews.AUDIT_CAUSES, reviews.AUDIT_FINDINGS)


def verdict(*judged: tuple[Finding, Action]) -> Verdict:
    return Verdict(tuple(Judged(finding, action) for finding, action in judged))


def request() -> Request:
    return review_of(POLICY, uid="uid-1")["request"]  # type: ignore[no-any-return]


def answer(judged: Verdict) -> dict[str, Any]:
    """The response as the API server reads it: encoded, then decoded."""
    encoded = reviews.encode_review(reviews.from_verdict("uid-1", judged, request=request()))
    response: dict[str, Any] = json.loads(encoded)["response"]
    return response


@pytest.mark.parametrize(
    "judged",
    [verdict(), verdict((TYPO, "off"))],
    ids=["no-finding", "only-rules-switched-off"],
)
def test_a_clean_allow_leaves_nothing_for_the_audit_log(judged: Verdict) -> None:
    response = answer(judged)
    assert response == {"uid": "uid-1", "allowed": True}


def test_a_denial_says_verdict_rules_and_every_line_the_user_read() -> None:
    response = answer(verdict((PREVIEW, "warn"), (SHAPE, "deny"), (MISSING, "audit"),
                              (TYPO, "off")))  # fmt: skip
    assert response["allowed"] is False
    assert response["auditAnnotations"] == {
        "verdict": "denied",
        "rules": "PA-C04,PA-S01,PA-T06",  # sorted; audited ones too, switched-off ones never
        # Denials first, then warnings (the decision log's order); no impact preview.
        "causes": "[PA-S01] spec.targetRef: set together with spec.targetRefs; keep one of them",
        "audit-findings": "[PA-T06] spec.targetRefs[0]: Service/apps/cart does not exist (yet)",
    }


def test_a_warning_is_recorded_with_its_line_since_the_audit_log_keeps_no_warning() -> None:
    response = answer(verdict((MISSING, "warn")))
    assert response["allowed"] is True
    assert response["warnings"] == [MISSING.text]
    assert response["auditAnnotations"] == {
        "verdict": "warned",
        "rules": "PA-T06",
        "causes": MISSING.text,
    }


def test_an_impact_preview_is_named_but_its_lines_are_left_out() -> None:
    """Nearly every policy write has a preview: two short values, no text. The verdict stays
    the one the decision log and the metrics give (`warned`), so the sources agree."""
    assert answer(verdict((PREVIEW, "warn")))["auditAnnotations"] == {
        "verdict": "warned",
        "rules": "PA-C04",
    }
    both = answer(verdict((PREVIEW, "warn"), (MISSING, "warn")))["auditAnnotations"]
    assert both["causes"] == MISSING.text


def test_an_impact_preview_made_a_denial_by_strict_is_a_cause() -> None:
    assert answer(verdict((PREVIEW, "deny")))["auditAnnotations"] == {
        "verdict": "denied",
        "rules": "PA-C04",
        "causes": PREVIEW.text,
    }


def test_a_finding_of_a_rule_set_to_audit_is_recorded_though_no_user_sees_it() -> None:
    response = answer(verdict((MISSING, "audit")))
    assert "warnings" not in response
    assert response["auditAnnotations"] == {
        "verdict": "allowed",
        "rules": "PA-T06",
        "audit-findings": MISSING.text,
    }


@pytest.mark.parametrize(
    ("judged", "expected"),
    [
        (verdict((SHAPE, "deny"), (MISSING, "warn")), "denied"),
        (verdict((MISSING, "warn"), (TYPO, "audit")), "warned"),
        (verdict((MISSING, "audit")), "allowed"),
        (verdict((TYPO, "off")), "allowed"),
        (verdict(), "allowed"),
    ],
    ids=["denied", "warned", "audited", "off", "clean"],
)
def test_the_verdict_annotation_is_the_decision_logs_verdict(
    judged: Verdict, expected: str
) -> None:
    logged = decisions.decision_of(request(), judged).verdict
    annotations = reviews.audit_annotations(judged)
    assert annotations.get("verdict", "allowed") == logged == expected


def test_values_stay_one_short_line_however_many_and_long_the_findings() -> None:
    long = Finding("PA-S04", "spec.targetRefs[0].group", "x\n" * 5000)
    many: list[tuple[Finding, Action]] = [
        (Finding("PA-T06", f"spec.targetRefs[{i}]", "missing " * 40), "warn") for i in range(16)
    ]
    annotations = reviews.audit_annotations(verdict((long, "deny"), *many, (long, "audit")))
    assert set(annotations) == set(KEYS)
    for value in annotations.values():
        assert len(value) <= reviews.MAX_AUDIT_VALUE
        assert value.isprintable()


# The API server's test of a prefixed key (k8s.io/apiserver admission/attributes.go,
# `checkKeyFormat`): exactly one `/`, and a qualified name — a DNS subdomain prefix of at most
# 253 characters, and a name of at most 63, alphanumeric at both ends with `-_.` inside.
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_qualified_with_one_slash(key: str) -> bool:
    if key.count("/") != 1:
        return False
    prefix, name = key.split("/")
    return (
        len(prefix) <= 253
        and _SUBDOMAIN.fullmatch(prefix) is not None
        and len(name) <= 63
        and _NAME.fullmatch(name) is not None
    )


def shipped_validating_webhook_names() -> list[str]:
    docs = yaml.safe_load_all((REPO / "manifests" / "base" / "webhooks.yaml").read_text())
    return [
        hook["name"]
        for doc in docs
        if doc and doc["kind"] == "ValidatingWebhookConfiguration"
        for hook in doc["webhooks"]
    ]


@pytest.mark.parametrize("webhook", shipped_validating_webhook_names())
@pytest.mark.parametrize("key", KEYS)
def test_every_key_survives_the_api_servers_check_under_every_shipped_webhook(
    webhook: str, key: str
) -> None:
    assert is_qualified_with_one_slash(f"{webhook}/{key}")


@pytest.mark.parametrize(
    "key", ["policies.policy-attachment.dev/", "a/b/c", "a/-verdict", "a/" + "x" * 64, "A_B/x"]
)
def test_the_key_check_refuses_what_the_api_server_refuses(key: str) -> None:
    assert not is_qualified_with_one_slash(key)
