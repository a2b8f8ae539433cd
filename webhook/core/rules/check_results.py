"""What `policy-webhook check` found, as data: the policies judged, the documents skipped, the
objects written twice; the versioned document `-o json|yaml` print, and the capped lines a
person reads.

Pure: the shell reads the files and says where each object was written; this module only
counts, caps and shapes. The document's schema is `docs/cli.md`'s; scripts depend on it, so
fields are only ever added.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from webhook.core.model.refs import ObjectKey
from webhook.core.rules.findings import MAX_WARNINGS, Judged, Verdict

API_VERSION = "cli.policy-attachment.dev/v1"
KIND = "CheckResult"

Outcome = Literal["denied", "warned", "clean"]


@dataclass(frozen=True, slots=True)
class Where:
    """A place in the input: a file (or `<stdin>`) and the line a document or field starts on."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"

    def as_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line}


@dataclass(frozen=True, slots=True)
class CheckedPolicy:
    """One policy admitted as a CREATE, and where it was written."""

    key: ObjectKey
    where: Where
    verdict: Verdict
    # The line of each judged finding's field, in `verdict.judged` order; the document's
    # line where a field cannot be placed (or was not looked for).
    finding_lines: tuple[int, ...] = ()

    @property
    def outcome(self) -> Outcome:
        if not self.verdict.allowed:
            return "denied"
        return "warned" if self.verdict.warnings else "clean"

    def shown(self) -> Iterator[tuple[Judged, int]]:
        """Each finding that is not switched off, with its line."""
        for i, judged in enumerate(self.verdict.judged):
            if judged.action != "off":
                line = self.finding_lines[i] if i < len(self.finding_lines) else self.where.line
                yield judged, line


@dataclass(frozen=True, slots=True)
class Skipped:
    """A document that is not a Kubernetes object (a kustomization, Helm values, …)."""

    where: Where
    reason: str


@dataclass(frozen=True, slots=True)
class Duplicate:
    """The same object written twice: the later copy is the one used, as `kubectl apply` of
    both would leave it."""

    key: ObjectKey
    used: Where
    ignored: Where


@dataclass(frozen=True, slots=True)
class CheckRun:
    """Everything one `check` found, in file order."""

    policies: tuple[CheckedPolicy, ...]
    skipped: tuple[Skipped, ...] = ()
    duplicates: tuple[Duplicate, ...] = ()

    @property
    def denied(self) -> bool:
        return any(p.outcome == "denied" for p in self.policies)

    def count(self, outcome: Outcome) -> int:
        return sum(1 for p in self.policies if p.outcome == outcome)

    def findings_by_action(self) -> dict[str, int]:
        counts = {"deny": 0, "warn": 0, "audit": 0}
        for policy in self.policies:
            for judged, _ in policy.shown():
                counts[judged.action] += 1
        return counts


# --- for machines --------------------------------------------------------------------------


def document(run: CheckRun) -> dict[str, Any]:
    """The `-o json|yaml` document: every finding, never capped, and full counts."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "summary": summary(run),
        "policies": [_policy_entry(p) for p in run.policies],
        "skipped": [{**s.where.as_json(), "reason": s.reason} for s in run.skipped],
        "duplicates": [
            {**_object_fields(d.key), "used": d.used.as_json(), "ignored": d.ignored.as_json()}
            for d in run.duplicates
        ],
    }


def summary(run: CheckRun) -> dict[str, Any]:
    return {
        "checked": len(run.policies),
        "denied": run.count("denied"),
        "warned": run.count("warned"),
        "clean": run.count("clean"),
        "findings": run.findings_by_action(),
        "skipped": len(run.skipped),
        "duplicates": len(run.duplicates),
    }


def _object_fields(key: ObjectKey) -> dict[str, Any]:
    return {"kind": key.kind, "group": key.group, "namespace": key.namespace, "name": key.name}


def _policy_entry(policy: CheckedPolicy) -> dict[str, Any]:
    return {
        **_object_fields(policy.key),
        **policy.where.as_json(),
        "verdict": policy.outcome,
        "allowed": policy.verdict.allowed,
        "findings": [
            {
                "rule": judged.finding.rule_id,
                "action": judged.action,
                "field": judged.finding.field,
                "line": line,
                "message": judged.finding.message,
            }
            for judged, line in policy.shown()
        ],
    }


# --- for people ----------------------------------------------------------------------------


def human_lines(run: CheckRun, *, show_all: bool = False) -> list[str]:
    """One line per finding, `file:line: object ACTION text`; per policy at most MAX_WARNINGS
    lines that are not denials (as the webhook caps its warnings, SPEC §2.5) unless
    `show_all`; then duplicates and the counts."""
    lines: list[str] = []
    for policy in run.policies:
        lines.extend(_policy_lines(policy, show_all))
    for duplicate in run.duplicates:
        lines.append(
            f"{duplicate.used}: {duplicate.key} DUPLICATE also written at {duplicate.ignored};"
            " this later copy is the one checked"
        )
    lines.append(_counts_line(run))
    return lines


def _policy_lines(policy: CheckedPolicy, show_all: bool) -> list[str]:
    denials: list[str] = []
    others: list[str] = []
    for judged, line in policy.shown():
        text = f"{policy.where.file}:{line}: {policy.key} {judged.action.upper()} {judged.finding.text}"
        (denials if judged.action == "deny" else others).append(text)
    if not show_all and len(others) > MAX_WARNINGS:
        left_out = len(others) - (MAX_WARNINGS - 1)
        others = others[: MAX_WARNINGS - 1]
        others.append(
            f"{policy.where}: {policy.key} ... and {left_out} more warnings (--all shows them)"
        )
    return denials + others


def _counts_line(run: CheckRun) -> str:
    line = (
        f"{len(run.policies)} policies checked: {run.count('denied')} denied, "
        f"{run.count('warned')} allowed with warnings, {run.count('clean')} clean"
    )
    extra = []
    if run.skipped:
        extra.append(_plural(len(run.skipped), "document skipped", "documents skipped"))
    if run.duplicates:
        extra.append(_plural(len(run.duplicates), "duplicate", "duplicates"))
    return line + ("; " + ", ".join(extra) if extra else "")


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"
