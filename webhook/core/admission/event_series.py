"""Which Kubernetes Event a decision records, and whether to write it now (SPEC §8.2).

`occurrence_of` turns a denied or warned policy write (never a dry run) into the Event it
asks for. `EventSeries` decides what to send for it: a new Event, a series count on the Event
of an identical occurrence within `WINDOW`, or nothing when the policy has had `LIMIT` writes
in the last `WINDOW`. Pure: the clock is an argument; the shell sends.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from webhook.core.admission.decisions import Decision
from webhook.core.rules.ruletable import PREVIEW_RULES

WINDOW = 600.0  # seconds: identical occurrences within it are one Event; the limit's window
LIMIT = 25  # Event writes (new ones and series counts) per policy per WINDOW
REPORTING_CONTROLLER = "policy-attachment.dev/webhook"
ACTION = "Admit"
REASONS = {"denied": "PolicyDenied", "warned": "PolicyWarned"}
# The API server's Event validation caps the note at 1024 bytes (`NoteLengthLimit`), and
# requires an Event about a cluster-scoped object to live in `default` (or `kube-system`)
# whenever `eventTime` is set — which events.k8s.io/v1 always requires. Node events live
# there for the same reason.
MAX_NOTE_BYTES = 1024
CLUSTER_SCOPED_NAMESPACE = "default"
MAX_NAME_BASE = 200  # characters of the policy's name in the Event's name (≤ 253 in all)
_NOT_IN_NAME = re.compile(r"[^a-z0-9.-]+")


@dataclass(frozen=True, slots=True)
class Regarding:
    """The policy an Event is about (`regarding` in events.k8s.io/v1)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str  # "" before the object exists (a denied CREATE)

    @property
    def policy(self) -> tuple[str, str, str, str]:
        """(group, kind, namespace, name): one policy whatever the version or uid."""
        return self.api_version.rpartition("/")[0], self.kind, self.namespace, self.name


@dataclass(frozen=True, slots=True)
class Occurrence:
    """What one decision asks to record; two equal occurrences are the same Event."""

    namespace: str  # where the Event is written
    regarding: Regarding
    reason: str
    note: str


def occurrence_of(decision: Decision) -> Occurrence | None:
    """The Event a decision records; None for a clean allow, a dry run, a write that is not
    of a policy (a target's delete), or a warning that only previews the change's impact."""
    reason = REASONS.get(decision.verdict)
    if reason is None or decision.dry_run or not decision.is_policy_write:
        return None
    if all(cause.rule_id in PREVIEW_RULES for cause in decision.causes):
        return None
    api_version = f"{decision.group}/{decision.version}" if decision.group else decision.version
    regarding = Regarding(
        api_version, decision.kind, decision.namespace, decision.name, decision.object_uid
    )
    note = "; ".join(cause.text for cause in decision.causes)
    return Occurrence(
        decision.namespace or CLUSTER_SCOPED_NAMESPACE, regarding, reason, cut_bytes(note)
    )


def cut_bytes(text: str, limit: int = MAX_NOTE_BYTES) -> str:
    """`text` in at most `limit` bytes of UTF-8, ending in `…` when cut."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[: limit - 3].decode(errors="ignore") + "…"  # `…` is 3 bytes


def event_name(regarding: Regarding, now: float) -> str:
    """`<policy name>.<nanoseconds, hex>`, as client-go names Events: unique per instant."""
    base = _NOT_IN_NAME.sub("-", (regarding.name or regarding.kind).lower())
    base = base[:MAX_NAME_BASE].strip(".-") or "policy"
    return f"{base}.{int(now * 1e9):x}"


@dataclass(frozen=True, slots=True)
class Plan:
    """What to send for one occurrence.

    - `create`: a new Event `name` (its series begins, count 1);
    - `patch`: the Event `name` gets series count `count`;
    - `limited`: nothing; `announce` on the first refusal of a run, for one log line.
    """

    action: Literal["create", "patch", "limited"]
    name: str = ""
    count: int = 0
    first_seen: float = 0.0  # when the series began: the Event's `eventTime`
    announce: bool = False


@dataclass(slots=True)
class _Series:
    name: str
    first_seen: float
    count: int


@dataclass(slots=True)
class _Writes:
    times: deque[float] = field(default_factory=deque)
    announced: bool = False


class EventSeries:
    """Series of identical occurrences, and the per-policy limit on writes.

    Memory follows the last `window` of traffic: entries older than that are swept, at most
    once per tenth of a window.
    """

    def __init__(self, *, window: float = WINDOW, limit: int = LIMIT) -> None:
        self.window, self.limit = window, limit
        self._series: dict[Occurrence, _Series] = {}
        self._writes: dict[tuple[str, str, str, str], _Writes] = {}
        self._swept = float("-inf")

    def plan(self, occurrence: Occurrence, now: float) -> Plan:
        self._sweep(now)
        writes = self._writes.setdefault(occurrence.regarding.policy, _Writes())
        while writes.times and writes.times[0] <= now - self.window:
            writes.times.popleft()
        if len(writes.times) >= self.limit:
            announce, writes.announced = not writes.announced, True
            return Plan("limited", announce=announce)
        writes.times.append(now)
        writes.announced = False
        series = self._series.get(occurrence)
        if series is not None and now - series.first_seen < self.window:
            series.count += 1
            return Plan("patch", series.name, series.count, series.first_seen)
        return self.restart(occurrence, now)

    def restart(self, occurrence: Occurrence, now: float) -> Plan:
        """A new Event for a series whose Event is gone (expired, deleted), in place of the
        patch planned: the same write for the limit, so not counted again."""
        name = event_name(occurrence.regarding, now)
        self._series[occurrence] = _Series(name, now, 1)
        return Plan("create", name, 1, now)

    def forget(self, occurrence: Occurrence) -> None:
        """The Event was never written (its create failed): the next occurrence creates."""
        self._series.pop(occurrence, None)

    def tracked(self) -> tuple[int, int]:
        """(series, policies) held in memory."""
        return len(self._series), len(self._writes)

    def _sweep(self, now: float) -> None:
        if now - self._swept < self.window / 10:
            return
        self._swept = now
        horizon = now - self.window
        for occurrence in [o for o, s in self._series.items() if s.first_seen <= horizon]:
            del self._series[occurrence]
        for policy in [p for p, w in self._writes.items() if not w.times or w.times[-1] <= horizon]:
            del self._writes[policy]
