"""A de-duplicating work queue, per-key backoff and a token bucket: the reconciler's flow control.

The same semantics as client-go's `workqueue` and `flowcontrol` packages, for one event loop:
a key is queued at most once however often it changes, a key that changes while a worker holds
it runs again afterwards, a key that keeps failing waits longer each time (capped, never
dropped), and writes to the API server are spread to a steady rate with a bounded burst. One
addition: a key can be *held* (`hold`), so that adds within a window coalesce into one run at
its end. Knows nothing of Kubernetes objects beyond their keys.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

from webhook.core.model.refs import ObjectKey

_PRUNE_HELD_AT = 1024  # held windows kept (at least) before expired ones are swept out


class WorkQueue:
    """Keys to reconcile, each at most once in the queue (client-go's workqueue semantics).

    A key added while waiting is not queued twice; a key added while a worker holds it is
    queued again when the worker is `done`, so a change during a patch is never lost.

    A held key (`hold`) is not queued when added: one run is scheduled for the end of its
    window instead, however many adds come meanwhile — also for an add that came while a
    worker held the key and opened the window. Nothing is dropped — the last add of a
    window is served by that run, which reads the state as it is then — only delayed.
    """

    def __init__(self) -> None:
        self._queue: asyncio.Queue[ObjectKey] = asyncio.Queue()
        self._dirty: set[ObjectKey] = set()  # waiting to be processed
        self._processing: set[ObjectKey] = set()
        self._later: dict[ObjectKey, asyncio.TimerHandle] = {}  # retries (`add_after`)
        self._held: dict[ObjectKey, float] = {}  # key → loop time its window ends
        self._deferred: dict[ObjectKey, asyncio.TimerHandle] = {}  # adds held to a window's end
        self._prune_at = _PRUNE_HELD_AT

    def add(self, key: ObjectKey) -> None:
        if key in self._dirty or key in self._deferred:
            return
        until = self._held.get(key)
        if until is not None:
            loop = asyncio.get_running_loop()
            if loop.time() < until:
                self._deferred[key] = loop.call_at(until, self._released, key)
                return
            del self._held[key]
        self._enqueue(key)

    def _enqueue(self, key: ObjectKey) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.put_nowait(key)

    def hold(self, key: ObjectKey, seconds: float) -> None:
        """Adds of `key` in the next `seconds` wait for the window's end, then run once."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        if len(self._held) > self._prune_at:  # windows of keys never added again: expired
            self._held = {k: t for k, t in self._held.items() if t > now or k in self._deferred}
            self._prune_at = max(_PRUNE_HELD_AT, 2 * len(self._held))
        self._held[key] = max(self._held.get(key, now), now + seconds)

    def _released(self, key: ObjectKey) -> None:
        # Queued whatever the clock says: a timer may fire a hair before its time.
        del self._deferred[key]
        self._held.pop(key, None)
        self._enqueue(key)

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
        self.add(key)  # a retry of a held key waits for the window too

    async def get(self) -> ObjectKey:
        key = await self._queue.get()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: ObjectKey) -> None:
        """The worker is through with `key`; an add that came meanwhile runs now, or at the end
        of a window the work opened (the add could not know of it when it came)."""
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)  # `add` knows held windows: queued now, or deferred to the window's end

    def clear(self) -> None:
        for handle in (*self._later.values(), *self._deferred.values()):
            handle.cancel()
        self._later.clear()
        self._deferred.clear()
        self._held.clear()
        self._dirty.clear()
        while not self._queue.empty():
            self._queue.get_nowait()

    @property
    def idle(self) -> bool:
        """Nothing waiting, nothing being worked on, no retry or held add scheduled."""
        return not self._dirty and not self._processing and not self._later and not self._deferred

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
    """At most `rate` acquisitions per second on average, `burst` at once (client-go's QPS/burst).

    `rate` may change at any time (`set_rate`, the adaptive rate's decision); tokens earned
    so far are kept at the old rate.
    """

    def __init__(
        self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"need rate > 0 and burst >= 1, got {rate}, {burst}")
        self.rate, self.burst, self._clock = rate, burst, clock
        self._tokens = float(burst)
        self._stamp = clock()

    def set_rate(self, rate: float) -> None:
        if rate <= 0:
            raise ValueError(f"need rate > 0, got {rate}")
        self._refill()
        self.rate = rate

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    async def acquire(self) -> None:
        while True:
            self._refill()
            if self._tokens >= 1:
                self._tokens -= 1
                return
            await asyncio.sleep((1 - self._tokens) / self.rate)
