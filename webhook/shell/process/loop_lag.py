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

Cost: a wake-up of an idle process costs about a quarter of a millisecond of CPU here (the
kernel's timer, scheduling the process in, a pass of the loop), so the probe samples 50 times a
second only while the process works, and 4 times a second while it idles. Measured on an idle
leader in cluster mode: 1.3 % of a core at 50 probes a second, 0.2 % at one a second (most of
the rest is leader election). "Works" is read from the process's own CPU time since the
previous probe: above `BUSY_SHARE` of the wall time, the next probe comes after `interval`,
else after `idle_interval`. The samples are denser where reviews meet a busy loop, which is
where the wait is worth knowing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

DEFAULT_INTERVAL = 0.02  # seconds between probes while the process works: 50 a second
IDLE_INTERVAL = 0.25  # ... while it idles: 4 a second
# CPU time over wall time since the previous probe above which the process counts as working.
# Above the probe's own share at `interval` (about 1.2 % here, more on a slower core), so that
# the probe alone does not keep it sampling fast; a review (about half a millisecond) every
# 10 ms does.
BUSY_SHARE = 0.05


async def probe(
    observe: Callable[[float], None],
    *,
    interval: float = DEFAULT_INTERVAL,
    idle_interval: float = IDLE_INTERVAL,
    cpu_clock: Callable[[], float] = time.process_time,
) -> None:
    """Forever: sleep, then `observe` how many seconds late the loop woke us; the sleep is
    `interval` while the process spent more than `BUSY_SHARE` of the last one on the CPU, else
    `idle_interval`."""
    step = interval
    while True:
        slept_at, cpu_at = time.monotonic(), cpu_clock()  # monotonic: asyncio's timers' clock
        due = slept_at + step
        await asyncio.sleep(step)
        woke = time.monotonic()
        # asyncio runs a timer up to its clock resolution early; that is not a wait.
        observe(max(0.0, woke - due))
        busy = cpu_clock() - cpu_at > BUSY_SHARE * (woke - slept_at)
        step = interval if busy else idle_interval
