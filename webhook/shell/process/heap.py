"""Keep the garbage collector's full passes off the long-lived state.

The store, the engine's memos and the summary cache are millions of container objects on a
large cluster. CPython's full collection walks every one of them on the event loop, and no
admission review is answered meanwhile (how long that takes: docs/performance.md, Choices).

That state is acyclic data (JSON trees, tuples, dicts) that lives until it is replaced, and a
replaced object is freed by reference counting, frozen or not. So once it has settled it is
frozen (`gc.freeze`): later collections walk only what was made after, and a full pass costs
what the churn since then costs, not what the cluster's size does.

When: once the state is first synced, before the replica reports ready, so that this pause
comes before the API server sends reviews (before that there is little to freeze); once more
after the reconciler's first full pass, which fills the cache and memos. Each time, what is not
yet frozen is collected first, so no garbage present then is kept for good. What a freeze does
keep: cyclic objects alive at that moment that die later (an open connection's), until the
process ends; with two freezes per process, that is what was alive at two moments.

`held()` is the other tool: no automatic collection during one synchronous step that builds
only acyclic data, such as decoding a review's JSON.

`tune()` is the third: full passes a hundred times rarer than CPython's default. What a
bulk create adds after a freeze (thousands of routes, their memos) is walked by every full pass
until the next freeze; measured in ours during a 3,000-route `kubectl create` on the shared
2-core machine, full passes took 30 to 124 ms each, every few seconds, and found 15 to 505
objects of garbage each — cycles that die young are freed by the young passes, which stay as
they were. Measured in one run each (bench/e2e.py, the same harness and machine): our slowest
`/mutate` 60.8 ms with the default, 6.2 ms tuned; the API server's calls within 5 ms 91.1 % and
97.3 %. What it costs: cyclic garbage that outlives two young passes waits longer for a full
pass (a few hundred objects per former pass, as measured).

`settle` also gives the C allocator's free pages back to the system (`release`): what CPython
does not serve from its own arenas (blocks over 512 bytes) comes from the C heap, whose free
space stays resident until reused; a settled heap has little to reuse it for.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from webhook.shell.process.logs import fields

log = logging.getLogger(__name__)


def settle(reason: str) -> float:
    """Collect what is not frozen, freeze everything that is left, and give the pages the C
    allocator holds free back to the system (`release`); the pause, in seconds."""
    started = time.perf_counter()
    collected = gc.collect()
    gc.freeze()
    release()
    pause = time.perf_counter() - started
    frozen = gc.get_freeze_count()
    log.info(
        "heap settled (%s): %d objects frozen, %.3fs",
        reason,
        frozen,
        pause,
        extra=fields(
            reason=reason,
            frozen=frozen,
            collected=collected,
            pause_s=round(pause, 3),
        ),
    )
    return pause


def release() -> bool:
    """Give the pages the C allocator holds free back to the system (glibc's `malloc_trim`);
    False where the C library has no such call (musl, macOS).

    CPython serves objects of up to 512 bytes from arenas of its own and takes anything larger
    from the C heap. What a large load makes and drops there (decoded lists, a value while it
    is written) leaves the heap as large as it ever was, and its free pages stay resident until
    something reuses them: glibc returns free space from the top of the heap only. Once the
    state has settled, the free pages anywhere in it can go; what later reuses them is faulted
    in again, page by page. Measured at the benchmark's default scale (`bench.memory`), once
    every summary was computed, the annotation values kept in fragments that CPython's own
    arenas hold: resident 184 MB above the interpreter's start without this call at each
    settle, 144 MB with it (a few milliseconds each).
    """
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:  # the symbols the interpreter was linked with: glibc's, where it is glibc
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


FULL_PASS_AFTER = 1000  # young-generation passes per full pass; CPython's default: 10


def tune() -> None:
    """Make full collections rarer (module docstring); the young generations as they were."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_PASS_AFTER)


@contextmanager
def held() -> Iterator[None]:
    """No automatic collection while the block runs; the collector's state as before after it.

    For one synchronous step that builds a tree of new containers and no cycle (decoding JSON):
    each collection during it walks the growing tree and can free none of it. A 6.7 MiB body of
    small objects, next to a settled heap: 0.62 s to decode with the collector on, 0.25 s held;
    the whole review, its denial included, 0.68 s and 0.39 s. The tree is walked once after,
    by the next young collection, instead of by every one during it.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
