"""Readiness: named conditions that must all hold before `/readyz` says 200.

Kubernetes removes a pod from its Service's endpoints while its readiness probe fails, so the
API server stops calling a replica that has no certificate, has not synced state, or drains.
"""

from __future__ import annotations

from dataclasses import dataclass

TLS = "tls"
STATE_SYNCED = "state-synced"
NOT_DRAINING = "not-draining"
STATE_FRESH = "state-fresh"


@dataclass(frozen=True, slots=True)
class Condition:
    ok: bool
    reason: str


class Readiness:
    """Ready when every declared condition is ok; `Readiness()` with none is always ready.

    Conditions named at construction start not ok ("pending"), so a replica is never ready
    by omission. Writes come from the event loop thread; reads are plain dict lookups.
    """

    def __init__(self, *names: str) -> None:
        self._conditions: dict[str, Condition] = {
            name: Condition(False, "pending") for name in names
        }

    def set(self, name: str, ok: bool, reason: str = "") -> None:
        self._conditions[name] = Condition(ok, reason)

    def __call__(self) -> bool:
        return all(condition.ok for condition in self._conditions.values())

    def reasons(self) -> dict[str, str]:
        """The conditions that fail, name → reason, in the order they were declared."""
        return {name: c.reason for name, c in self._conditions.items() if not c.ok}

    def conditions(self) -> dict[str, Condition]:
        return dict(self._conditions)
