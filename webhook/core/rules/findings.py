"""Findings and the verdict they add up to (SPEC §2.4, §2.5).

Rules produce `Finding`s with no opinion on their weight; a `Judge` applies the configured
action of each rule (kind profile > global config > table default, then `--strict`), and the
judged findings make the `Verdict` the HTTP layer and the CLI both render.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from webhook.core.model.profiles import Action
from webhook.core.rules.ruletable import RULES_BY_ID

MAX_WARNINGS = 10  # SPEC §2.5
# A line quotes what the user wrote (a name, a key, a value) and that may be megabytes long.
# SPEC §2.5 wants ≤ 120 characters where possible; this bounds the cases where it is not.
MAX_LINE = 512
# What one admission came to, in the words of the decision log, the metrics and the audit
# annotations (SPEC §8.1).
Outcome = Literal["allowed", "warned", "denied"]


@dataclass(frozen=True, slots=True)
class Finding:
    rule_id: str
    field: str  # field path in the object, e.g. spec.targetRefs[1].kind
    message: str  # without the "[PA-XXX] " prefix; one line

    @property
    def text(self) -> str:
        return (
            f"[{self.rule_id}] {self.field}: {self.message}"
            if self.field
            else f"[{self.rule_id}] {self.message}"
        )


@dataclass(frozen=True, slots=True)
class Judged:
    finding: Finding
    action: Action

    def softened(self) -> Judged:
        """This finding at most a warning (a DELETE is never denied)."""
        return Judged(self.finding, "warn") if self.action == "deny" else self


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of one admission: what was found and what it means."""

    judged: tuple[Judged, ...] = ()

    @property
    def allowed(self) -> bool:
        return not self.denials

    @property
    def denials(self) -> tuple[Finding, ...]:
        return tuple(j.finding for j in self.judged if j.action == "deny")

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(j.finding for j in self.judged if j.action == "warn")

    @property
    def audited(self) -> tuple[Finding, ...]:
        return tuple(j.finding for j in self.judged if j.action == "audit")

    @property
    def outcome(self) -> Outcome:
        """`denied` if any finding denies, `warned` if any warns, else `allowed` (audit-only and
        switched-off findings reach no user, so they do not make a warning)."""
        if not self.allowed:
            return "denied"
        return "warned" if any(j.action == "warn" for j in self.judged) else "allowed"

    @property
    def rule_ids(self) -> tuple[str, ...]:
        """Every rule that fired and was not switched off, sorted and unique."""
        return tuple(sorted({j.finding.rule_id for j in self.judged if j.action != "off"}))

    def warning_lines(self) -> list[str]:
        """At most MAX_WARNINGS lines; the last one says how many were left out (SPEC §2.5)."""
        # Warnings reach the user as HTTP `Warning` headers, which cannot hold a line break.
        lines = [one_line(f.text) for f in self.warnings]
        if len(lines) <= MAX_WARNINGS:
            return lines
        kept = lines[: MAX_WARNINGS - 1]
        kept.append(
            f"... and {len(lines) - len(kept)} more warnings (run `policy-webhook check` to see all)"
        )
        return kept


def one_line(text: str, limit: int = MAX_LINE) -> str:
    """`text` on one line (control characters become spaces), cut to `limit` with an ellipsis."""
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else " " for c in text)


@dataclass(frozen=True, slots=True)
class Judge:
    """The configured weight of each rule for one policy kind: its profile's actions, then
    the global ones, then the rule table's default; `strict` turns a WARN into a DENY."""

    kind_actions: Mapping[str, Action]
    global_actions: Mapping[str, Action]
    strict: bool = False

    def action(self, rule_id: str) -> Action:
        action = (
            self.kind_actions.get(rule_id)
            or self.global_actions.get(rule_id)
            or RULES_BY_ID[rule_id].default_action
        )
        return "deny" if self.strict and action == "warn" else action

    def __call__(self, finding: Finding) -> Judged:
        return Judged(finding, self.action(finding.rule_id))
