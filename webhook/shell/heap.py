"""Keep the garbage collector's full passes off the long-lived state.

The store, the derived memos and the summary cache are millions of container objects (2.6
million at 4x the benchmark's cluster). CPython's full collection walks every one of them on
the event loop, and no admission review is answered meanwhile: measured on the benchmark's
machine on a slow day (docs/performance.md, Choices), 0.94 s at 1x and 4.1 s at 4x.

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
"""

from __future__ import annotations

import gc
import logging
import time

from webhook.shell.logs import fields

log = logging.getLogger(__name__)


def settle(reason: str) -> float:
    """Collect what is not frozen, then freeze everything that is left; the pause, in seconds."""
    started = time.perf_counter()
    collected = gc.collect()
    gc.freeze()
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
