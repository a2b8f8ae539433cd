"""`check`'s results as data: counts that add up, and warnings capped as the webhook caps them."""

from __future__ import annotations

import pytest

from webhook.core.model.refs import ObjectKey
from webhook.core.rules.check_results import CheckedPolicy, CheckRun, Where, document, human_lines
from webhook.core.rules.findings import MAX_WARNINGS, Finding, Judged, Verdict

KEY = ObjectKey("policies.example.com", "RetryPolicy", "apps", "p")


def checked(*actions: str) -> CheckedPolicy:
    judged = tuple(
        Judged(Finding("PA-T06", f"spec.targetRefs[{i}]", "does not exist"), action)  # type: ignore[arg-type]
        for i, action in enumerate(actions)
    )
    return CheckedPolicy(
        KEY, Where("p.yaml", 1), Verdict(judged), tuple(range(10, 10 + len(actions)))
    )


@pytest.mark.parametrize(
    ("warnings", "shown", "summary_line"),
    [
        (MAX_WARNINGS, MAX_WARNINGS, False),
        (MAX_WARNINGS + 1, MAX_WARNINGS, True),
        (17, MAX_WARNINGS, True),
    ],
)
def test_at_most_ten_lines_of_warnings_per_policy(
    warnings: int, shown: int, summary_line: bool
) -> None:
    lines = human_lines(CheckRun((checked(*["warn"] * warnings),)))[:-1]
    assert len(lines) == shown
    assert lines[-1].endswith("(--all shows them)") is summary_line
    if summary_line:
        assert f"and {warnings - (MAX_WARNINGS - 1)} more warnings" in lines[-1]


def test_denials_are_never_capped() -> None:
    lines = human_lines(CheckRun((checked(*["deny"] * 12, *["warn"] * 12),)))[:-1]
    assert sum(" DENY " in line for line in lines) == 12
    assert sum(" WARN " in line for line in lines) == MAX_WARNINGS - 1


def test_each_finding_points_at_its_own_line() -> None:
    lines = human_lines(CheckRun((checked("warn", "deny"),)), show_all=True)
    assert lines[0].startswith("p.yaml:11: RetryPolicy/apps/p DENY")
    assert lines[1].startswith("p.yaml:10: RetryPolicy/apps/p WARN")


def test_the_document_counts_every_outcome_and_action() -> None:
    run = CheckRun((checked("deny", "warn"), checked("warn", "audit"), checked("off")))
    summary = document(run)["summary"]
    assert (summary["denied"], summary["warned"], summary["clean"]) == (1, 1, 1)
    assert summary["findings"] == {"deny": 1, "warn": 2, "audit": 1}
