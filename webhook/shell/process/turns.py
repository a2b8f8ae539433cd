"""Background work takes turns on the loop that answers admission; requests go between them.

One event loop serves `/mutate` and `/validate` and also applies watch events and runs the
reconciler. asyncio runs whatever is ready in order, and neither kind of background work has to
suspend: a watch stream whose next lines are already buffered is read without waiting, and a
summary is computed synchronously. So a burst of watch events (a bulk create) or a queue of
computations (a fan-out) would hold the loop, and a review that arrived meanwhile would wait
for all of it — the API server times that wait as our latency.

`Turns` bounds it: background work runs in turns of `length` seconds (plus the step under way);
when a turn is over, the next step first lets the loop make `passes` passes — a request the loop
has just read needs two more to be answered (its handler's task is woken, then runs) — and then
opens a new turn. One `Turns` is shared by every kind of background work of a process, so that
together, not each on its own, they keep within a turn: a request waits behind one step at most.
"""

from __future__ import annotations

import asyncio
import time

# Seconds: ~2 watch events or one modest computation per turn. 1 ms rather than 2: on a
# 3,000-route bulk create the API server's p99 for our calls went 11.5 -> 8.8 ms, at the same
# CPU (bench/e2e-findings.md).
DEFAULT_LENGTH = 0.001
PASSES = 3


class Turns:
    """`await take()` before each step of background work (pure bookkeeping and sleeps)."""

    def __init__(self, length: float = DEFAULT_LENGTH, passes: int = PASSES) -> None:
        self.length, self.passes = length, passes
        self.count = 0  # turns opened: a test's and a benchmark's reading
        self._ends = 0.0  # `time.perf_counter()` after which a step waits for the loop first

    async def take(self) -> None:
        """Return at once within a turn; otherwise after the loop's passes, in a new turn."""
        while time.perf_counter() >= self._ends:
            opened = self.count
            for _ in range(self.passes):
                await asyncio.sleep(0)
            if self.count == opened:  # nobody else opened one meanwhile: this step's
                self.count += 1
                self._ends = time.perf_counter() + self.length
                return
