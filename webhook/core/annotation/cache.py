"""Effective-policy summaries, cached per object and dropped when any of their inputs change.

SPEC §5.8: a cached summary MUST equal a fresh computation on the same state. After every
store write the `AffectedFeed` names the annotated objects whose summary may differ
(`dependencies.affected_by_change`) and the cache drops exactly those; the TTL is a safety
net only, never what keeps answers right. Pure and synchronous: use it from one thread (the
event loop's), as the store itself.

Decision: one entry per object — the whole annotation value, `None` for
"no annotation" — not per context. The value is what the reconciler compares and patches, and
contexts of one object are computed together anyway (they share rungs and policies). The entry
knows where each policy kind's piece lies in the value: a policy's write marks only its kind
stale on the objects it affects, and the next `get` recomputes that kind alone (kinds never
interact, SPEC §5) — a RetryPolicy edit on a busy Gateway leaves its thousands of objects'
other kinds as they were. A Service behind many routes is computed from its pieces by route
(`hubs`), so that a route's write does not make it cost all its routes again.

A value `/mutate` computed for an object about to be written is handed over (`admitted`): when
the store's very next write is that object, as it was shown, the entry is that value — the
leader's reconciler, asked about the new route, then finds it without computing it again.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cachetools import Cache

from webhook.core.annotation import hubs, summary
from webhook.core.annotation.dependencies import AffectedFeed
from webhook.core.model.refs import GroupKind, ObjectKey
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store
from webhook.core.state.trim import as_admitted

# Objects (--cache-max-objects); an entry is one annotation string (≤ 16 KiB, most far less).
# Past it entries are evicted, least recently used first: still right, but a policy change on
# an evicted object costs a whole recomputation instead of its kind's piece.
DEFAULT_MAXSIZE = 65_536
DEFAULT_TTL = 600.0  # seconds; a safety net only, so long: correctness never waits for it
# Values /mutate handed over and not yet written. Every write outdates all of them (each is
# good only for the write that comes next), so a few are ever waiting; the bound is for a
# cache whose writes it does not hear (an empty cache asks for none).
MAX_ADMITTED = 64


@dataclass(slots=True)
class _Entry:
    # The value in fragments that other values share (`summary.Fragments`: the values were
    # most of what a leader held); joined when asked for. A truncated value (no spans) is one
    # text of nearly the cap, its own, so it is kept compressed (`_packed`). None: no annotation.
    value: summary.Fragments | bytes | None
    spans: summary.Spans | None  # None: a truncated value, whose pieces cannot be replaced
    # Kinds to recompute before use; None until one is (an empty set per entry, on every
    # object a leader annotates, was a few percent of its memory).
    stale: set[GroupKind] | None = None
    # The second it was stored (`SummaryCache._second`), for the TTL. Kept here, not in a
    # TTL cache's links: a link and a float per entry besides its place in the LRU order were
    # 88 bytes per annotated object (docs/performance.md, *Choices*).
    born: int = 0


class SummaryCache:
    """`get(key)` is `summary.summarize(key, store, settings)`, remembered until it may change.

    `hits`/`misses` are plain counters the shell exports as metrics. It hears what each write
    affects from `feed` (its own when none is given: a test's, a benchmark's).
    """

    def __init__(
        self,
        store: Store,
        settings: Settings,
        *,
        feed: AffectedFeed | None = None,
        maxsize: int = DEFAULT_MAXSIZE,
        ttl: float = DEFAULT_TTL,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._settings = settings
        # Evicts in its order of insertion; a use re-inserts an entry (`_used`), so that order
        # is the order of use: least recently used first, without the per-entry links of an
        # `LRUCache`'s ordered dict (88 bytes per annotated object, docs/performance.md).
        self._entries: Cache[ObjectKey, _Entry] = Cache(maxsize)
        self._ttl, self._timer = ttl, timer
        self._now = 0  # the last second read (`_second`): one int for every entry born in it
        self.hits = 0
        self.misses = 0
        self.adopted = 0  # values handed over by /mutate and kept (`admitted`)
        # key → (store revision the value was computed on, the object as shown, its entry)
        self._admitted: dict[ObjectKey, tuple[int, dict[str, Any], _Entry]] = {}
        self.feed = feed if feed is not None else AffectedFeed(store)
        self.feed.subscribe(self._drop, wanted=lambda: bool(self._entries or self._admitted))

    def get(self, key: ObjectKey) -> str | None:
        """The annotation value for `key` (None: no policy reaches it, or no such object)."""
        entry = self._live(key)
        if entry is not None and not entry.stale:
            self.hits += 1
            self._used(key, entry)
            return _text(entry.value)
        self.misses += 1
        if entry is not None and entry.spans is not None:
            entry = self._refreshed(key, entry)
        else:
            entry = self._computed(key)
        self._store_entry(key, entry)
        return _text(entry.value)

    def _live(self, key: ObjectKey) -> _Entry | None:
        """The entry of `key`; None when there is none or it has outlived the TTL (and is gone)."""
        entry = self._entries.get(key)
        if entry is not None and self._second() - entry.born >= self._ttl:
            del self._entries[key]
            return None
        return entry

    def _store_entry(self, key: ObjectKey, entry: _Entry) -> None:
        entry.born = self._second()
        self._used(key, entry)

    def _used(self, key: ObjectKey, entry: _Entry) -> None:
        """`entry` made the most recently used: last in the order of insertion."""
        if key in self._entries:
            del self._entries[key]
        self._entries[key] = entry

    def _second(self) -> int:
        """Now, in whole seconds of the timer: the same int object while the second lasts, so
        that entries born in it share it."""
        now = int(self._timer())
        if now != self._now:
            self._now = now
        return self._now

    def prepare(self, key: ObjectKey) -> bool:
        """Some of the work of the next `get(key)` ahead of it, in a bounded step; True while
        more remains. Only a Service behind many routes has such work (`hubs.advance`): after
        a burst of route writes, the pieces of those routes. `get` returns the same value
        whether or not this was called; an asynchronous caller calls it between turns of its
        loop, so that no single step holds the loop for the whole computation."""
        return key not in self and hubs.advance(key, self._store, limit=hubs.ADVANCE_ROUTES)

    def admitted(
        self,
        key: ObjectKey,
        obj: Mapping[str, Any],
        found: tuple[summary.Fragments | None, summary.Spans | None],
    ) -> None:
        """`found` is `summary.summarize_in_pieces(key, store + obj)` on the store as it is now.

        /mutate's value for an object the API server is about to write. If the store's next
        write is `key`, equal to `obj` in all a summary reads (`trim.as_admitted`: the uid and
        creation time the API server adds are not read), the store then is exactly the view it
        was computed on (SPEC §5.8), and the entry is `found`. Any other write first, or an
        object that differs: dropped, computed on demand as ever.
        """
        if len(self._admitted) >= MAX_ADMITTED:
            self._admitted.clear()
        self._admitted[key] = (self._store.revision, as_admitted(obj), _entry(found))

    def _computed(self, key: ObjectKey) -> _Entry:
        # A Service behind many routes from its pieces by route (the same bytes): a route's
        # write costs that route's piece, not all the Service's contexts again.
        found = hubs.summarize_in_pieces(key, self._store, self._settings)
        if found is None:
            found = summary.summarize_in_pieces(key, self._store, self._settings)
        return _entry(found)

    def _refreshed(self, key: ObjectKey, entry: _Entry) -> _Entry:
        """The entry with its stale kinds' pieces recomputed, the others kept as they were."""
        assert not isinstance(entry.value, bytes)  # a truncated value has no spans
        pieces = summary.pieces_in(entry.value or (), entry.spans or summary.NO_SPANS)
        for gk in entry.stale or ():
            pieces.pop(str(gk), None)
            pieces.update(summary.kind_pieces(key, self._store, gk))
        fitted = summary.fit(pieces, self._settings.annotation_max_bytes)
        return _entry(fitted) if fitted is not None else self._computed(key)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        """Whether `key` has an entry that needs no recomputation."""
        entry = self._live(key) if isinstance(key, ObjectKey) else None
        return entry is not None and not entry.stale

    def _drop(
        self,
        key: ObjectKey,
        old: Mapping[str, Any] | None,
        new: Mapping[str, Any] | None,
        affected: frozenset[ObjectKey],
    ) -> None:
        kind = self._policy_kind(key, old, new)
        for stale in affected:
            entry = self._entries.get(stale)
            if entry is None:
                continue
            if kind is not None and entry.spans is not None:
                if entry.stale is None:
                    entry.stale = set()
                entry.stale.add(kind)  # only that kind's piece can differ
            else:
                del self._entries[stale]
        admitted = self._admitted.pop(key, None) if self._admitted else None
        self._admitted.clear()  # computed before this write: none is this state's any more
        if (
            admitted is not None
            and new is not None
            and admitted[0] + 1 == self._store.revision  # no other write came between
            and kind is None
            and admitted[1] == as_admitted(new)
        ):
            self._store_entry(key, admitted[2])
            self.adopted += 1

    def _policy_kind(
        self, key: ObjectKey, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None
    ) -> GroupKind | None:
        """The kind of a written policy; None for any other write (it may touch every kind)."""
        gk = key.group_kind
        if any(obj is not None and self._store.is_policy_object(gk, obj) for obj in (old, new)):
            return gk
        return None


def _entry(found: tuple[summary.Fragments | None, summary.Spans | None]) -> _Entry:
    value, spans = found
    if spans is None and value is not None:
        return _Entry(_packed(value), None)
    return _Entry(value, spans)


def _packed(value: summary.Fragments) -> bytes:
    """A truncated value compressed: nearly 16 KiB of paths that no other value shares (at 8x
    the default scale, 1,109 of them held 16 MB), about a tenth of that packed. Only those: a
    value in fragments is read (`SummaryCache.get`) and refreshed by kind far more often, and
    compressing every value cost the fan-out nearly twice its time (docs/performance.md)."""
    return zlib.compress("".join(value).encode(), 1)


def _text(value: summary.Fragments | bytes | None) -> str | None:
    if isinstance(value, bytes):
        return zlib.decompress(value).decode()
    return summary.text(value)
