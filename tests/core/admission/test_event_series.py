"""Events of decisions (SPEC §8.2), before anything is sent: which decision records which
Event, identical ones folded into a series within 10 minutes, at most 25 writes per policy
per 10 minutes. The clock is an argument: every test says what time it is."""

from __future__ import annotations

from dataclasses import replace

import pytest

from webhook.core.admission import event_series
from webhook.core.admission.decisions import Decision
from webhook.core.admission.event_series import (
    LIMIT,
    WINDOW,
    EventSeries,
    Occurrence,
    Regarding,
    occurrence_of,
)
from webhook.core.rules.findings import Finding

DENIAL = Decision(
    uid="u1", operation="CREATE", dry_run=False, group="policies.example.com",
    version="v1alpha1", kind="RetryPolicy", namespace="apps", name="retry-everything",
    object_uid="", user="dev", groups=("developers",), verdict="denied",
    rules=("PA-S01",), causes=(Finding("PA-S01", "spec", "both targetRef and targetRefs are set"),),
)  # fmt: skip
T0 = 1_700_000_000.0


def occurrence(name: str = "retry-everything", note: str = "[PA-S01] spec: x") -> Occurrence:
    regarding = Regarding("policies.example.com/v1alpha1", "RetryPolicy", "apps", name, "")
    return Occurrence("apps", regarding, "PolicyDenied", note)


# --- which decision records which Event --------------------------------------------------------


def test_a_denied_policy_write_records_a_policy_denied_event_about_the_policy() -> None:
    found = occurrence_of(DENIAL)
    assert found == Occurrence(
        "apps",
        Regarding("policies.example.com/v1alpha1", "RetryPolicy", "apps", "retry-everything", ""),
        "PolicyDenied",
        "[PA-S01] spec: both targetRef and targetRefs are set",
    )


PREVIEW = Finding("PA-C04", "", "changes maxRetries on 2 HTTPRoutes")
CONFLICT = Finding("PA-C01", "spec.default.retry", "conflicts with apps/other on 1 HTTPRoute")


def test_a_warned_update_records_a_policy_warned_event_with_the_policys_uid() -> None:
    warned = replace(DENIAL, verdict="warned", operation="UPDATE", object_uid="uid-7",
                     causes=(CONFLICT, PREVIEW))  # fmt: skip
    found = occurrence_of(warned)
    assert found is not None
    assert (found.reason, found.regarding.uid) == ("PolicyWarned", "uid-7")
    assert found.note == (
        "[PA-C01] spec.default.retry: conflicts with apps/other on 1 HTTPRoute; "
        "[PA-C04] changes maxRetries on 2 HTTPRoutes"
    )


def test_a_warning_that_only_previews_the_impact_records_no_event() -> None:
    previewed = replace(DENIAL, verdict="warned", causes=(PREVIEW,))
    assert occurrence_of(previewed) is None


@pytest.mark.parametrize(
    "decision",
    [
        replace(DENIAL, dry_run=True),
        replace(DENIAL, verdict="allowed", causes=()),
        replace(DENIAL, group="", version="v1", kind="Service", verdict="warned"),
    ],
    ids=["dry-run", "allowed", "target-delete"],
)
def test_no_event_for_a_dry_run_an_allow_or_a_write_that_is_not_a_policys(
    decision: Decision,
) -> None:
    assert occurrence_of(decision) is None


def test_a_cluster_scoped_policys_event_lives_in_default() -> None:
    found = occurrence_of(replace(DENIAL, namespace=""))
    assert found is not None
    assert (found.namespace, found.regarding.namespace) == ("default", "")


def test_the_note_holds_every_cause_within_1_kib_of_utf8() -> None:
    causes = tuple(Finding(f"PA-T0{i % 9 + 1}", f"spec.targetRefs[{i}]", "ünïcödé " * 20)
                   for i in range(16))  # fmt: skip
    found = occurrence_of(replace(DENIAL, causes=causes))
    assert found is not None
    assert len(found.note.encode()) <= 1024
    assert found.note.startswith("[PA-T01] spec.targetRefs[0]: ünïcödé")
    assert found.note.endswith("…")
    short = occurrence_of(DENIAL)
    assert short is not None and not short.note.endswith("…")


def test_event_names_are_dns_subdomains_unique_per_instant() -> None:
    regarding = occurrence("Weird_Name").regarding
    first = event_series.event_name(regarding, T0)
    assert first.startswith("weird-name.") and first == first.lower()
    assert first != event_series.event_name(regarding, T0 + 1e-6)
    long = replace(regarding, name="a" * 253)
    assert len(event_series.event_name(long, T0)) <= 253


# --- series ------------------------------------------------------------------------------------


def test_identical_occurrences_within_ten_minutes_are_one_event_with_a_growing_count() -> None:
    series = EventSeries()
    first = series.plan(occurrence(), T0)
    assert (first.action, first.count, first.first_seen) == ("create", 1, T0)
    for n, at in enumerate((T0 + 1, T0 + 300, T0 + WINDOW - 1), start=2):
        plan = series.plan(occurrence(), at)
        assert (plan.action, plan.name, plan.count, plan.first_seen) == (
            "patch", first.name, n, T0,
        )  # fmt: skip


def test_after_ten_minutes_an_identical_occurrence_starts_a_new_event() -> None:
    series = EventSeries()
    first = series.plan(occurrence(), T0)
    series.plan(occurrence(), T0 + 60)
    later = series.plan(occurrence(), T0 + WINDOW)
    assert (later.action, later.count) == ("create", 1)
    assert later.name != first.name
    assert series.plan(occurrence(), T0 + WINDOW + 1).name == later.name


def test_a_series_ends_after_ten_minutes_even_between_two_sweeps() -> None:
    series = EventSeries()
    first = series.plan(occurrence(), T0)
    assert series.plan(occurrence(), T0 + WINDOW - 10).action == "patch"  # swept: still young
    later = series.plan(occurrence(), T0 + WINDOW + 10)  # too soon after for another sweep
    assert (later.action, later.count) == ("create", 1) and later.name != first.name


def test_a_different_note_or_policy_is_a_different_event() -> None:
    series = EventSeries()
    first = series.plan(occurrence(), T0)
    other_note = series.plan(occurrence(note="[PA-S02] spec: no target"), T0 + 1)
    other_policy = series.plan(occurrence(name="other"), T0 + 2)
    assert other_note.action == other_policy.action == "create"
    assert len({first.name, other_note.name, other_policy.name}) == 3


def test_a_series_whose_event_is_gone_restarts_with_a_new_event() -> None:
    series = EventSeries()
    series.plan(occurrence(), T0)
    series.plan(occurrence(), T0 + 1)
    again = series.restart(occurrence(), T0 + 2)
    assert (again.action, again.count) == ("create", 1)
    assert series.plan(occurrence(), T0 + 3) == replace(again, action="patch", count=2)


def test_a_create_that_failed_is_forgotten_and_the_next_one_creates() -> None:
    series = EventSeries()
    series.plan(occurrence(), T0)
    series.forget(occurrence())
    assert series.plan(occurrence(), T0 + 1).action == "create"


# --- the limit ---------------------------------------------------------------------------------


def test_at_most_25_writes_per_policy_in_ten_minutes_then_one_announcement() -> None:
    series = EventSeries()
    plans = [series.plan(occurrence(), T0 + i) for i in range(LIMIT + 10)]
    assert [p.action for p in plans[:LIMIT]] == ["create"] + ["patch"] * (LIMIT - 1)
    assert all(p.action == "limited" for p in plans[LIMIT:])
    assert [p.announce for p in plans[LIMIT:]] == [True] + [False] * 9
    # Limited occurrences are not counted into the Event: the count stops at the writes.
    assert plans[LIMIT - 1].count == LIMIT


def test_the_limit_is_per_policy() -> None:
    series = EventSeries()
    for i in range(LIMIT + 1):
        series.plan(occurrence(note=f"[PA-S01] spec: try {i}"), T0 + i)
    assert series.plan(occurrence(), T0 + 30).action == "limited"
    assert series.plan(occurrence(name="another-policy"), T0 + 31).action == "create"


def test_the_window_slides_and_a_new_run_of_refusals_is_announced_again() -> None:
    series = EventSeries(limit=2, window=100.0)
    assert [series.plan(occurrence(), T0 + t).action for t in (0, 10, 20)] == [
        "create", "patch", "limited",
    ]  # fmt: skip
    # The write at T0 has left the window (and so has its series: a new Event).
    assert series.plan(occurrence(), T0 + 100).action == "create"
    refused = series.plan(occurrence(), T0 + 105)
    assert (refused.action, refused.announce) == ("limited", True)


def test_memory_holds_only_the_last_window() -> None:
    series = EventSeries()
    for i in range(500):
        series.plan(occurrence(name=f"p-{i}"), T0 + i * 0.1)
    assert series.tracked() == (500, 500)
    series.plan(occurrence(name="late"), T0 + 50 + WINDOW)
    assert series.tracked() == (1, 1)
