"""How fast the reconciler may patch: AIMD between a floor and `--reconcile-qps`, the ceiling.

Additive increase, multiplicative decrease (TCP's congestion control): every patch that goes
through at a usual latency raises the rate a little, so that it climbs by `increase` patches/s
per second of smooth sending; a 429 (the API server's priority and fairness shedding load)
halves it, and so does, less sharply, a latency that has risen well above the lowest recently
seen (requests queue in the API server before it sheds any). A decrease starts from the rate
patches actually went at in the last second when that is lower: a ceiling far above what the
API server takes would otherwise need many halvings before it slowed anything. At most one
decrease per `cooldown`: the answers to patches already in flight report the same congestion
once. Pure: the caller measures latencies and applies the rate.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

_ACHIEVED_OVER = 1.0  # seconds of outcomes that say how fast patches actually went

# The defaults of --reconcile-qps (the ceiling), --reconcile-burst and --reconcile-workers
# (patches in flight). Why these values: docs/reliability.md, "Why these defaults", measured
# with bench/e2e.py's fan-out. This module imports nothing heavy: `serve`'s flags read them.
DEFAULT_CEILING = 300.0
DEFAULT_BURST = 40
DEFAULT_IN_FLIGHT = 4


class AdaptiveRate:
    """The patch rate to use now (`rate`), from the outcome of each patch.

    `succeeded(latency)` after a patch went through, `throttled()` after a 429 or a timeout.
    Latencies are smoothed (an exponentially weighted mean, weight `smoothing` for the newest)
    and compared with the lowest seen in the last one to two `window`s: above `slow_factor`
    times that, and above `slow_floor` seconds, the API server is taken to be queueing.
    """

    def __init__(
        self,
        ceiling: float,
        *,
        floor: float | None = None,
        increase: float | None = None,
        decrease: float = 0.5,
        slow_decrease: float = 0.8,
        slow_factor: float = 4.0,
        slow_floor: float = 0.25,
        smoothing: float = 0.1,
        cooldown: float = 1.0,
        window: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        floor = min(1.0, ceiling) if floor is None else floor  # a patch a second, if allowed
        if not 0 < floor <= ceiling:
            raise ValueError(f"need 0 < floor <= ceiling, got {floor}, {ceiling}")
        if not (0 < decrease < 1 and 0 < slow_decrease < 1 and 0 < smoothing <= 1):
            raise ValueError("decreases must lie in (0, 1) and smoothing in (0, 1]")
        self.ceiling, self.floor = ceiling, floor
        self.increase = increase if increase is not None else max(1.0, ceiling / 10)
        self.decrease, self.slow_decrease = decrease, slow_decrease
        self.slow_factor, self.slow_floor = slow_factor, slow_floor
        self.smoothing, self.cooldown, self.window = smoothing, cooldown, window
        self._clock = clock
        self.rate = ceiling  # nothing known yet: the ceiling is what the operator allowed
        self.latency: float | None = None  # smoothed
        self._lowest = (float("inf"), float("inf"))  # (this window's, the previous one's)
        self._window_ends = clock() + window
        self._calm_after = float("-inf")  # no decrease before this time
        self._outcomes: deque[float] = deque()  # times of the last second's outcomes
        self._first_outcome: float | None = None
        self.decreases = 0

    @property
    def baseline(self) -> float:
        """The lowest latency seen lately (the API server when it is not queueing us)."""
        return min(self._lowest)

    @property
    def achieved(self) -> float | None:
        """Patches per second that got an answer lately (None before the first)."""
        if self._first_outcome is None:
            return None
        span = min(_ACHIEVED_OVER, self._clock() - self._first_outcome)
        return len(self._outcomes) / span if span > 0 else None

    def succeeded(self, latency: float) -> None:
        """A patch went through after `latency` seconds."""
        self._count()
        self._observe(latency)
        if self.slow:
            self._decrease(self.slow_decrease)
        else:
            self.rate = min(self.ceiling, self.rate + self.increase / self.rate)

    def throttled(self) -> None:
        """The API server refused a patch for load (429), or did not answer in time."""
        self._count()
        self._decrease(self.decrease)

    @property
    def slow(self) -> bool:
        if self.latency is None:
            return False
        return self.latency > max(self.slow_floor, self.slow_factor * self.baseline)

    def _observe(self, latency: float) -> None:
        now = self._clock()
        if now >= self._window_ends:  # keep two windows: a minimum that can also rise again
            self._lowest = (float("inf"), self._lowest[0])
            self._window_ends = now + self.window
        self._lowest = (min(self._lowest[0], latency), self._lowest[1])
        if self.latency is None:
            self.latency = latency
        else:
            self.latency += self.smoothing * (latency - self.latency)

    def _count(self) -> None:
        now = self._clock()
        if self._first_outcome is None:
            self._first_outcome = now
        self._outcomes.append(now)
        while self._outcomes[0] < now - _ACHIEVED_OVER:
            self._outcomes.popleft()

    def _decrease(self, factor: float) -> None:
        now = self._clock()
        if now < self._calm_after:
            return
        achieved = self.achieved
        start = self.rate if achieved is None else min(self.rate, achieved)
        self.rate = max(self.floor, start * factor)
        self._calm_after = now + self.cooldown
        self.decreases += 1
