"""A de-duplicating work queue, per-key backoff and a token bucket: the reconciler's flow control.

The same semantics as client-go's `workqueue` and `flowcontrol` packages, for one event loop:
a key is queued at most once however often it changes, a key that changes while a worker holds
it runs again afterwards, a key that keeps failing waits longer each time (capped, never
dropped), and writes to the API server are spread to a steady rate with a bounded burst. Knows
nothing of Kubernetes objects beyond their keys.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

from webhook.core.model.refs import ObjectKey


class WorkQueue:
    """Keys to reconcile, each at most once in the queue (client-go's workqueue semantics).

    A key added while waiting is not queued twice; a key added while a worker holds it is
    queued again when the worker is `done`, so a change during a patch is never lost.
    """

    def __init__(self) -> None:
        self._queue: asyncio.Queue[ObjectKey] = asyncio.Queue()
        self._dirty: set[ObjectKey] = set()  # waiting to be processed
        self._processing: set[ObjectKey] = set()
        self._later: dict[ObjectKey, asyncio.TimerHandle] = {}

    def add(self, key: ObjectKey) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.put_nowait(key)

    def add_after(self, key: ObjectKey, delay: float) -> None:
        """Add once `delay` seconds have passed (retries with backoff); the earliest wins."""
        loop = asyncio.get_running_loop()
        scheduled = self._later.get(key)
        if scheduled is not None:
            if scheduled.when() <= loop.time() + delay:
                return
            scheduled.cancel()
        self._later[key] = loop.call_later(delay, self._due, key)

    def cancel_later(self, key: ObjectKey) -> None:
        """Drop what `add_after` scheduled for `key` (its work is no longer needed)."""
        scheduled = self._later.pop(key, None)
        if scheduled is not None:
            scheduled.cancel()

    def _due(self, key: ObjectKey) -> None:
        self._later.pop(key, None)
        self.add(key)

    async def get(self) -> ObjectKey:
        key = await self._queue.get()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: ObjectKey) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.put_nowait(key)

    def clear(self) -> None:
        for handle in self._later.values():
            handle.cancel()
        self._later.clear()
        self._dirty.clear()
        while not self._queue.empty():
            self._queue.get_nowait()

    @property
    def idle(self) -> bool:
        """Nothing waiting, nothing being worked on, no retry scheduled."""
        return not self._dirty and not self._processing and not self._later

    def __len__(self) -> int:
        return len(self._dirty)


class ItemBackoff:
    """Per-key exponential backoff, capped: client-go's `ItemExponentialFailureRateLimiter`.

    Each failure of a key doubles the delay before its next try, from `base` up to `cap`, for
    as long as it keeps failing: a key given up on would stay wrong until something else
    queues it. `forget` (it worked, or there is nothing left to do) starts the key afresh. A
    delay d is drawn from [(1 - jitter) d, d], so keys that failed together (an API outage)
    do not all come back in the same instant.
    """

    def __init__(self, base: float, cap: float, *, jitter: float = 0.5) -> None:
        if not 0 < base <= cap or not 0 <= jitter < 1:
            raise ValueError(
                f"need 0 < base <= cap and 0 <= jitter < 1, got {base}, {cap}, {jitter}"
            )
        self.base, self.cap, self.jitter = base, cap, jitter
        self._failures: dict[ObjectKey, int] = {}

    def when(self, key: ObjectKey) -> float:
        """Count one more failure of `key`; the seconds to wait before trying it again."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = min(self.cap, self.base * 2.0 ** min(failures, 30))  # 2^30 · base > any cap
        return delay * random.uniform(1 - self.jitter, 1.0)

    def failures(self, key: ObjectKey) -> int:
        """Failures of `key` since it was last forgotten."""
        return self._failures.get(key, 0)

    def forget(self, key: ObjectKey) -> int:
        """Start `key` afresh; returns the failures it had."""
        return self._failures.pop(key, 0)

    def clear(self) -> None:
        self._failures.clear()

    def __len__(self) -> int:
        """Keys failing now: their last try failed and they wait for the next."""
        return len(self._failures)


class TokenBucket:
    """At most `rate` acquisitions per second on average, `burst` at once (client-go's QPS/burst)."""

    def __init__(
        self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"need rate > 0 and burst >= 1, got {rate}, {burst}")
        self.rate, self.burst, self._clock = rate, burst, clock
        self._tokens = float(burst)
        self._stamp = clock()

    async def acquire(self) -> None:
        while True:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            if self._tokens >= 1:
                self._tokens -= 1
                return
            await asyncio.sleep((1 - self._tokens) / self.rate)
