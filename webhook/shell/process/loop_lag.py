"""How long work that has become ready waits for the event loop: the wait a review meets.

One loop answers `/mutate` and `/validate`, applies watch events and runs the reconciler
(`process.turns` keeps the last two in short turns). What the API server times as our latency
is our handler's own time plus the time the request waited before the loop got to it, and only
the first is in `policy_webhook_admission_duration_seconds`. This probe measures the second the
way a request meets it: a timer due at a known moment, and how late the loop runs it. It wakes
`interval` seconds after its last run, so its samples fall at moments unrelated to the work
under way — the wait of a request arriving at a random moment.

Late by more than a few milliseconds means one of: a step of background work longer than a
turn, a garbage collection, or the process waiting for a CPU (on a busy node the loop is ready
but not running). The histogram cannot tell those apart; a profile can
(docs/troubleshooting.md, "Timeouts").

Cost: one timer a `interval` (50 a second by default, a few tens of microseconds each).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

DEFAULT_INTERVAL = 0.02  # seconds between probes: 50 samples a second, ~0.1 % of a core


async def probe(observe: Callable[[float], None], *, interval: float = DEFAULT_INTERVAL) -> None:
    """Forever: sleep `interval`, then `observe` how many seconds late the loop woke us."""
    while True:
        due = time.monotonic() + interval  # the clock of asyncio's timers
        await asyncio.sleep(interval)
        # asyncio runs a timer up to its clock resolution early; that is not a wait.
        observe(max(0.0, time.monotonic() - due))
