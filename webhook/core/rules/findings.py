"""Findings and the verdict they add up to (SPEC §2.4, §2.5).

Rules produce `Finding`s with no opinion on their weight; a `Judge` applies the configured
action of each rule (kind profile > global config > table default, then `--strict`), and the
judged findings make the `Verdict` the HTTP layer and the CLI both render.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from webhook.core.model.profiles import Action
from webhook.core.rules.ruletable import RULES_BY_ID

MAX_WARNINGS = 10  # SPEC §2.5
# SPEC §2.5: a warning is one line of at most 120 characters, rule ID and field included. The
# rules write their messages to fit (`line_room`, `listed`); a line that quotes a long name
# (a Kubernetes name may have 253 characters) is cut to fit where it is sent as a warning.
MAX_WARNING_LINE = 120
# A line quotes what the user wrote (a name, a key, a value) and that may be megabytes long:
# the bound of a line kept whole (a denial's cause, the decision log, `check`).
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
        """At most MAX_WARNINGS lines of at most MAX_WARNING_LINE characters; the last one says
        how many were left out (SPEC §2.5)."""
        # Warnings reach the user as HTTP `Warning` headers, which cannot hold a line break.
        lines = [fit_line(f.text) for f in self.warnings]
        if len(lines) <= MAX_WARNINGS:
            return lines
        kept = lines[: MAX_WARNINGS - 1]
        kept.append(
            f"... and {len(lines) - len(kept)} more warnings (run `policy-webhook check` to see all)"
        )
        return kept


def line_room(rule_id: str, field: str) -> int:
    """How many characters a finding's message has on a warning line (SPEC §2.5), after the
    rule ID and the field."""
    return MAX_WARNING_LINE - len(Finding(rule_id, field, "").text)


def listed(items: Sequence[str], room: int, *, sep: str = ", ") -> str:
    """`items` joined, or as many as fit in `room` characters followed by `+N more`; at least
    one is shown, however long: a list in a message that must fit its line (SPEC §2.5)."""
    whole = sep.join(items)
    if len(whole) <= room:
        return whole
    shown: list[str] = []
    for item in items:
        more = len(items) - len(shown) - 1
        if shown and len(sep.join([*shown, item]) + f" +{more} more") > room:
            break
        shown.append(item)
    more = len(items) - len(shown)
    return sep.join(shown) + (f" +{more} more" if more else "")


KEPT_END = 48  # of a warning cut to its line: its last characters, which say what follows


def fit_line(text: str, limit: int = MAX_WARNING_LINE) -> str:
    """`text` on one line of at most `limit` characters: where it is longer (a quoted name too
    long for any wording), cut in the middle, so that the rule, the field and what the line
    concludes stay."""
    if len(text) > limit:  # cut first: the end kept is the text's own, and one_line reads less
        end = min(KEPT_END, limit // 2)
        text = text[: limit - end - 1] + "…" + text[-end:]
    return one_line(text, limit)


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
