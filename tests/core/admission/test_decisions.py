"""The decision log's record (SPEC §8.1): its fields by verdict, its level, and what
`--log-decisions` writes. Built from reviews as the API server sends them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fixtures.https import review_of
from webhook.core.admission import decisions
from webhook.core.admission.decisions import LogDecisions
from webhook.core.admission.reviews import Request
from webhook.core.rules.findings import Finding, Judged, Outcome, Verdict

POLICY: dict[str, Any] = {
    "apiVersion": "policies.example.com/v1alpha1",
    "kind": "RetryPolicy",
    "metadata": {"name": "retry-everything", "namespace": "apps"},
    "spec": {"targetRefs": [{"group": "", "kind": "Service", "name": "secret-backend"}],
             "default": {"maxRetries": 7, "token": "s3cr3t"}},
}  # fmt: skip
DENIED = Verdict((
    Judged(Finding("PA-C04", "", "changes maxRetries on 1 Service"), "warn"),
    Judged(Finding("PA-S01", "spec", "both targetRef and targetRefs are set"), "deny"),
    Judged(Finding("PA-T06", "spec.targetRefs[0]", "Service apps/x does not exist"), "audit"),
    Judged(Finding("PA-T09", "spec.targetRefs[0].kind", "looks like a typo"), "off"),
))  # fmt: skip
WARNED = Verdict((Judged(Finding("PA-T06", "spec.targetRefs[0]", "not there yet"), "warn"),))
AUDITED = Verdict((Judged(Finding("PA-T06", "spec.targetRefs[0]", "not there yet"), "audit"),))
CLEAN = Verdict()
SECTION_8_1 = ["uid", "operation", "dryRun", "kind", "namespace", "name", "user", "groups",
               "verdict", "rules", "causes", "latencyMs"]  # fmt: skip


def request(**changes: Any) -> Request:
    review = review_of(POLICY, uid="uid-1", **changes)["request"]
    review["userInfo"] = {"username": "dev@example.com", "uid": "42",
                          "groups": ["developers", "system:authenticated"]}  # fmt: skip
    return review  # type: ignore[no-any-return]


def test_a_denial_names_the_user_the_object_and_every_cause_that_reached_the_user() -> None:
    decision = decisions.decision_of(request(), DENIED)
    fields = decisions.log_fields(decision, 1.25)
    assert list(fields) == SECTION_8_1
    assert fields == {
        "uid": "uid-1",
        "operation": "CREATE",
        "dryRun": False,
        "kind": "RetryPolicy.policies.example.com",
        "namespace": "apps",
        "name": "retry-everything",
        "user": "dev@example.com",
        "groups": ["developers", "system:authenticated"],
        "verdict": "denied",
        "rules": ["PA-C04", "PA-S01", "PA-T06"],  # audited ones too; off ones never
        # Denials first, then warnings; audited and switched-off findings reach no user.
        "causes": [
            {"rule": "PA-S01", "field": "spec", "message": "both targetRef and targetRefs are set"},
            {"rule": "PA-C04", "field": "", "message": "changes maxRetries on 1 Service"},
        ],
        "latencyMs": 1.25,
    }


def test_a_warning_is_a_warned_verdict_with_its_causes() -> None:
    fields = decisions.log_fields(decisions.decision_of(request(), WARNED), 0.5)
    assert fields["verdict"] == "warned"
    assert fields["causes"] == [
        {"rule": "PA-T06", "field": "spec.targetRefs[0]", "message": "not there yet"}
    ]


@pytest.mark.parametrize("verdict", [CLEAN, AUDITED], ids=["clean", "audit-only"])
def test_an_allow_has_no_causes_field(verdict: Verdict) -> None:
    fields = decisions.log_fields(decisions.decision_of(request(), verdict), 0.1)
    assert fields["verdict"] == "allowed"
    assert "causes" not in fields
    assert list(fields) == [name for name in SECTION_8_1 if name != "causes"]


def test_the_line_never_holds_the_request_body() -> None:
    fields = decisions.log_fields(decisions.decision_of(request(), DENIED), 0.1)
    text = json.dumps(fields)
    assert "s3cr3t" not in text and 'maxRetries": 7' not in text and "secret-backend" not in text


def test_an_update_carries_the_stored_objects_uid_and_a_dry_run_says_so() -> None:
    stored = {**POLICY, "metadata": {**POLICY["metadata"], "uid": "0f5e-uid"}}
    review = review_of(POLICY, operation="UPDATE", old=stored, dry_run=True)["request"]
    decision = decisions.decision_of(review, DENIED)
    assert decision.object_uid == "0f5e-uid"
    assert decisions.log_fields(decision, 0.1)["dryRun"] is True
    # A CREATE's object carries the uid chosen for it, but a denied one never exists.
    created = {**POLICY, "metadata": {**POLICY["metadata"], "uid": "never-stored"}}
    assert decisions.decision_of(review_of(created)["request"], DENIED).object_uid == ""


def test_a_review_without_user_info_or_with_odd_groups_still_makes_a_line() -> None:
    review = request()
    del review["userInfo"]
    assert decisions.decision_of(review, DENIED).user == ""
    review["userInfo"] = {"username": "u", "groups": "not-a-list"}
    assert decisions.decision_of(review, DENIED).groups == ()
    review["userInfo"] = {"username": "u", "groups": ["dev", 7, None, "ops"]}
    assert decisions.decision_of(review, DENIED).groups == ("dev", "ops")


@pytest.mark.parametrize("user_info", [True, ["dev"], 7, "dev", None])
def test_user_info_that_is_not_an_object_makes_a_line_with_no_user(user_info: Any) -> None:
    """Found by the HTTPS property test: `userInfo: true` made the decision log raise after the
    verdict, and the review was answered 500."""
    review = request()
    review["userInfo"] = user_info
    decision = decisions.decision_of(review, DENIED)
    assert (decision.user, decision.groups) == ("", ())
    assert decisions.request_fields(review, "patched", 0.1)["user"] == ""


def test_a_cause_is_one_line_however_the_finding_was_written() -> None:
    verdict = Verdict((Judged(Finding("PA-S04", "spec.x\ny", "bad\nvalue " + "v" * 900), "deny"),))
    (cause,) = decisions.decision_of(request(), verdict).causes
    assert "\n" not in cause.field + cause.message
    assert cause == Finding("PA-S04", "spec.x y", cause.message) and len(cause.message) <= 512


@pytest.mark.parametrize(
    ("verdict", "level"),
    [("denied", "WARNING"), ("warned", "INFO"), ("allowed", "DEBUG")],
)
def test_levels_by_verdict(verdict: Outcome, level: str) -> None:
    import logging  # the shell writes at these numbers: they must be logging's own

    assert decisions.LEVELS[verdict] == logging.getLevelName(level)


@pytest.mark.parametrize(
    ("mode", "written"),
    [
        ("denied", {"denied"}),
        ("warned", {"denied", "warned"}),
        ("all", {"denied", "warned", "allowed"}),
        ("none", set()),
    ],
)
def test_log_decisions_writes_its_verdicts_and_no_others(
    mode: LogDecisions, written: set[str]
) -> None:
    verdicts: tuple[Outcome, ...] = ("denied", "warned", "allowed")
    assert {v for v in verdicts if decisions.logged(v, mode)} == written


def test_the_default_writes_denials_and_warnings() -> None:
    assert decisions.DEFAULT_LOG_DECISIONS == "warned"
    assert set(decisions.LOG_DECISIONS) == set(decisions.THRESHOLDS)


def test_a_mutation_line_has_the_request_fields_and_no_body() -> None:
    fields = decisions.request_fields(request(), "patched", 0.2)
    assert fields == {
        "uid": "uid-1", "operation": "CREATE", "dryRun": False,
        "kind": "RetryPolicy.policies.example.com", "namespace": "apps",
        "name": "retry-everything", "user": "dev@example.com", "verdict": "patched",
        "latencyMs": 0.2,
    }  # fmt: skip


def test_a_core_kind_is_named_without_a_group() -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "a"}}
    review = review_of(None, operation="DELETE", old=service)["request"]
    decision = decisions.decision_of(review, WARNED)
    assert decision.kind_group == "Service"
    assert not decision.is_policy_write  # PA-C05 on a target's delete: not a policy write
    assert decisions.decision_of(request(), WARNED).is_policy_write
