"""A de-duplicating work queue and a token bucket: the reconciler's flow control.

The same semantics as client-go's `workqueue` and `flowcontrol` packages, for one event loop:
a key is queued at most once however often it changes, a key that changes while a worker holds
it runs again afterwards, retries wait out a delay, and writes to the API server are spread to
a steady rate with a bounded burst. Knows nothing of Kubernetes objects beyond their keys.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from webhook.core.refs import ObjectKey


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
        if key in self._later:
            return
        loop = asyncio.get_running_loop()
        self._later[key] = loop.call_later(delay, self._due, key)

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
