"""Effective-policy summaries, cached per object and dropped when any of their inputs change.

SPEC §5.8: a cached summary MUST equal a fresh computation on the same state. Every store
write drops the entries `dependencies.affected_by_change` names (computed on the views just
before and just after the write); the TTL is a safety net only, never what keeps answers right.
Pure and synchronous: use it from one thread (the event loop's), as the store itself.

Decision: one entry per object — the whole annotation value, `None` for
"no annotation" — not per context. The value is what the reconciler compares and patches, and
contexts of one object are computed together anyway (they share rungs and policies).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from cachetools import TTLCache

from webhook.core import dependencies, hierarchy, summary
from webhook.core.overlay import OverlayView
from webhook.core.refs import ObjectKey
from webhook.core.settings import Settings
from webhook.core.store import Store

# Called after each store write with (changed key, old, new, annotated objects it affects).
AffectedListener = Callable[
    [ObjectKey, Mapping[str, Any] | None, Mapping[str, Any] | None, frozenset[ObjectKey]], None
]

DEFAULT_MAXSIZE = 65_536  # objects; an entry is one annotation string (≤ 16 KiB, most far less)
DEFAULT_TTL = 600.0  # seconds; a safety net only, so long: correctness never waits for it

_MISSING: Final = object()


class SummaryCache:
    """`get(key)` is `summary.summarize(key, store, settings)`, remembered until it may change.

    `hits`/`misses` are plain counters the shell exports as metrics; `dropped` counts entries
    removed by dependency tracking. Listeners added with `add_listener` hear, after every
    write, which annotated objects it affects — the reconciler's work list, computed once.
    """

    def __init__(
        self,
        store: Store,
        settings: Settings,
        *,
        maxsize: int = DEFAULT_MAXSIZE,
        ttl: float = DEFAULT_TTL,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        # The hierarchy index of a store is marked stale by a store listener of its own, and
        # the store calls listeners in the order they subscribed: make sure that one runs
        # before ours, or our "after" view would read the index of the state before the write.
        hierarchy.index_for(store)
        self._store = store
        self._settings = settings
        self._entries: TTLCache[ObjectKey, str | None] = TTLCache(maxsize, ttl, timer=timer)
        self._listeners: list[AffectedListener] = []
        self.hits = 0
        self.misses = 0
        self.dropped = 0
        store.subscribe(self._on_change)

    def get(self, key: ObjectKey) -> str | None:
        """The annotation value for `key` (None: no policy reaches it, or no such object)."""
        try:
            value = self._entries[key]  # an expired entry raises KeyError as a missing one
        except KeyError:
            self.misses += 1
            value = self._entries[key] = summary.summarize(key, self._store, self._settings)
        else:
            self.hits += 1
        return value

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def invalidate_all(self) -> None:
        """Forget everything (new operator config or settings; a test's fresh start)."""
        self.dropped += len(self._entries)
        self._entries.clear()

    def add_listener(self, listener: AffectedListener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: AffectedListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _on_change(
        self, key: ObjectKey, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None
    ) -> None:
        if not self._entries and not self._listeners:
            return  # nothing cached can go stale, nobody waits for work: skip the fan-out
        # The store calls us after the write: put the old object back (or take the new one
        # out) to see the cluster as it was just before.
        before = OverlayView(
            self._store,
            upserts=[old] if old is not None else (),
            deletes=[key] if old is None else (),
        )
        affected = frozenset(
            dependencies.affected_by_change(key, old, new, before=before, after=self._store)
        )
        for stale in affected:
            if self._entries.pop(stale, _MISSING) is not _MISSING:
                self.dropped += 1
        for listener in list(self._listeners):
            listener(key, old, new, affected)
