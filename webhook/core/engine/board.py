"""One context's board: leaves offered in precedence order, first taker wins (SPEC §5).

The engine (`effective`) decides who offers what, in which order — overrides root first, the
object's own values, defaults target first; the board only keeps the first claim on each leaf
(or on a prefix of it: a whole object or list taken as one) and records what lost, to whom and
why, for `explain`. Also the values that come out of it: sources, losers, context results.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from webhook.core.engine import hierarchy
from webhook.core.engine.hierarchy import Context
from webhook.core.model import leaves
from webhook.core.model.policy import Policy

StanzaName = Literal["override", "default", "direct", "object"]
WHOLE = "*"  # a Loser's `field` when a policy lost as a whole (Direct, atomic)


@dataclass(frozen=True, slots=True)
class Source:
    """Where one leaf of `effective` came from (SPEC §3.3 `sources`)."""

    policy: str | None  # `namespace/name`; None for the object's own value (stanza "object")
    stanza: StanzaName
    at: str  # the rung the policy is attached to, e.g. `Gateway/infra/gw`, `Namespace/apps`

    def as_json(self) -> dict[str, str | None]:
        return {"policy": self.policy, "stanza": self.stanza, "at": self.at}


@dataclass(frozen=True, slots=True)
class Loser:
    """A policy's setting that does not apply in a context, and why (for `explain`)."""

    policy: str
    stanza: StanzaName
    at: str
    field: str  # `backoff.maxInterval`, or WHOLE
    reason: str  # "overridden by infra/a", "lost tie-break to ns/zz (older)", …
    by: Source | None = None  # what won instead; None when nothing single did


class ContextResult(NamedTuple):
    """One context's answer. Contexts meeting the same policies share `effective`/`sources`.

    A named tuple: one is made per context and policy kind (20,000 for a busy Service), and a
    tuple is built faster than a frozen dataclass (docs/performance.md).
    """

    context: Context
    path: tuple[str, ...]
    effective: Mapping[str, Any]
    sources: Mapping[str, Source]  # JSON pointer into `effective` → its source
    losers: tuple[Loser, ...] = ()


@dataclass(frozen=True, slots=True)
class Claim:
    source: Source
    policy: Policy | None


@dataclass(slots=True)
class Board:
    """Leaves taken so far in one context; first taker wins, later ones are recorded as losers."""

    won: dict[leaves.Path, tuple[Any, Claim]] = field(default_factory=dict)
    below: dict[leaves.Path, leaves.Path] = field(default_factory=dict)  # prefix → a leaf under it
    losers: dict[tuple[str, str, str, str], Loser] | None = None

    def offer(self, path: leaves.Path, value: Any, claim: Claim) -> None:
        blocker = self._blocker(path)
        if blocker is None:
            self.won[path] = (value, claim)
            for i in range(1, len(path)):
                self.below.setdefault(path[:i], path)
            return
        if is_presence(path) and blocker != path:
            return  # a list-map item already present through one of its fields
        winner = self.won[blocker][1]
        if (
            self.losers is not None
            and claim.policy is not None
            and winner.policy is not claim.policy
        ):
            self.lose(claim, leaves.top_fields(path), reason(claim, winner), by=winner.source)

    def lose(self, claim: Claim, what: str, reason: str, *, by: Source | None = None) -> None:
        if self.losers is None or claim.policy is None:
            return
        src = claim.source
        self.losers.setdefault(
            (claim.policy.ref, src.stanza, src.at, what),
            Loser(claim.policy.ref, src.stanza, src.at, what, reason, by),
        )

    def _blocker(self, path: leaves.Path) -> leaves.Path | None:
        if path in self.won:
            return path
        for i in range(1, len(path)):
            prefix = path[:i]
            if prefix in self.won and not is_presence(prefix):
                return prefix
        return self.below.get(path)

    def result(self, context: Context) -> ContextResult:
        final = {p: v for p, (v, _) in self.won.items() if not (is_presence(p) and p in self.below)}
        built = leaves.build(final)
        pointer = leaves.Pointers(built)
        sources = {pointer(p): self.won[p][1].source for p in final}
        losers = tuple(sorted(self.losers.values(), key=loser_order)) if self.losers else ()
        return ContextResult(context, hierarchy.path_of(context), built, sources, losers)


def is_presence(path: leaves.Path) -> bool:
    return bool(path) and isinstance(path[-1], tuple)


def loser_order(loser: Loser) -> tuple[str, str, str, str]:
    return (loser.policy, loser.stanza, loser.at, loser.field)


def reason(loser: Claim, winner: Claim) -> str:
    w = winner.source
    if w.stanza == "object":
        return f"the object's own value wins ({w.at})"
    assert winner.policy is not None and loser.policy is not None
    if w.at == loser.source.at and w.stanza == loser.source.stanza:
        return tie(loser.policy, winner.policy)
    if w.stanza == "override" and loser.source.stanza == "default":
        return f"overridden by {w.policy}"
    if w.stanza == "override":
        return f"overridden by {w.policy} (less specific override, at {w.at})"
    return f"{w.policy} is more specific (default at {w.at})"


def tie(loser: Policy, winner: Policy) -> str:
    return f"lost tie-break to {winner.ref} ({tie_why(loser, winner)})"


def tie_why(loser: Policy, winner: Policy, *, same_age: str = "same age, alphabetical") -> str:
    """SPEC §4.4: the older one wins; on equal timestamps, `namespace/name` in byte order
    (said as `same_age`)."""
    return "older" if winner.created < loser.created else same_age
