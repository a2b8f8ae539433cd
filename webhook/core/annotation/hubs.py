"""A Service's annotation kept in pieces, one per route: the value of a hub, per route event.

A Service's contexts are those of each route that sends to it (SPEC §4.3), so its value is
what every route contributes, grouped by answer. Made whole, one route's write costs all N
routes' contexts again. Kept here route by route (in the store's memo, `memo.hubs_of`, which
tells a hub which route to forget), it costs that route's piece, a few comparisons to put its
paths in order, and the JSON of what the value shows — which the size cap bounds: past the
cap the sizes alone say what is cut (SPEC §3.3), without writing the contexts that go.

What is kept is where policies attach, not their values: per kind, each context's printed path
under its signature (the rungs holding that kind's policies), so an edit of a policy's values
costs one board per signature, not N contexts. Same bytes as `summary.summarize_in_pieces` on
the same state, or None where that cannot be promised cheaply (an answer that depends on every
context at once, `effective.hub_blocked`): the cache then computes the value whole. Pieces are
made once a route event reaches the Service (`memo.hub_wanted`): after a policy moves, until
routes move again, the whole value is as cheap and the pieces would only cost more.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.core.annotation import summary
from webhook.core.engine import effective, hierarchy, memo
from webhook.core.engine.effective import Signature
from webhook.core.engine.hierarchy import Context
from webhook.core.model.refs import GroupKind, ObjectKey
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store

Path = tuple[str, ...]


def summarize_in_pieces(
    key: ObjectKey, store: Store, settings: Settings
) -> tuple[summary.Fragments | None, summary.Spans | None] | None:
    """`summary.summarize_in_pieces(key, store, settings)` for a Service whose contexts the
    store keeps by route (`hierarchy.PARTS_MIN_ROUTES`: one threshold for both), from its
    pieces; None for any other object, or where it cannot be."""
    parts = hierarchy.contexts_by_route(key, store)
    obj = store.get(key)
    hub = _hub(key, store, parts)
    if obj is None or parts is None or hub is None:
        return None  # made whole: few routes, none whose context reaches it, or no pieces
    hub.refresh(store, parts)
    if effective.hub_blocked(key, store, hub.met):
        return None
    entries = hub.entries(key, obj, store)
    if entries is None:
        return None
    return _rendered([*entries, *_direct_entries(key, store)], settings.annotation_max_bytes)


# Routes per step of `advance`: each costs a few tens of microseconds per phase, so a step
# stays within about a turn of the event loop (`shell.process.turns.DEFAULT_LENGTH`).
ADVANCE_ROUTES = 16


def advance(key: ObjectKey, store: Store, *, limit: int) -> bool:
    """Some of the next `summarize_in_pieces(key, …)`'s work ahead of it, at most `limit`
    routes' worth: the Service's contexts of the routes written since (`hierarchy`), then
    their pieces. True while some remain; `summarize_in_pieces` then has only the rest to do,
    and returns the same bytes either way.

    Why: after a burst of route writes (a bulk create) a busy Service has hundreds of routes
    to make again, tens of milliseconds in one synchronous step; an asynchronous caller that
    gives its loop a turn between two calls keeps admission from waiting behind all of it."""
    if hierarchy.advance_by_route(key, store, limit=limit):
        return True
    parts = hierarchy.contexts_by_route(key, store)
    hub = _hub(key, store, parts)
    return parts is not None and hub is not None and hub.refresh(store, parts, limit=limit)


def _hub(
    key: ObjectKey, store: Store, parts: Mapping[ObjectKey, tuple[Context, ...]] | None
) -> Hub | None:
    """The Service's pieces kept in the store's memo, started where route events reach it."""
    hubs = memo.hubs_of(store)
    if not parts or hubs is None:
        return None
    hub = hubs.get(key)
    if not isinstance(hub, Hub):
        if not memo.hub_wanted(store, key):
            return None  # no route event since the pieces were dropped: as cheap made whole
        hub = hubs[key] = Hub(parts)
    return hub


# --- the pieces and their totals ----------------------------------------------------------------


@dataclass(slots=True)
class Paths:
    """Printed paths, each once (counted per piece holding it), in order, with their JSON's
    size — of one kind's contexts of one signature, from every piece that has them."""

    counts: dict[Path, int] = field(default_factory=dict)
    ordered: list[Path] = field(default_factory=list)
    path_bytes: int = 0  # of every path's JSON, without the commas between them

    def add(self, path: Path) -> None:
        held = self.counts.get(path, 0)
        self.counts[path] = held + 1
        if not held:
            bisect.insort(self.ordered, path)
            self.path_bytes += _path_size(path)

    def remove(self, path: Path) -> None:
        held = self.counts[path] - 1
        if held:
            self.counts[path] = held
            return
        del self.counts[path]
        del self.ordered[bisect.bisect_left(self.ordered, path)]
        self.path_bytes -= _path_size(path)


@dataclass(slots=True)
class KindTotals:
    """One Inherited kind over every piece: the policies met (counted per piece), and the
    paths of its contexts by signature."""

    refs: Counter[str] = field(default_factory=Counter)
    signatures: dict[Signature, Paths] = field(default_factory=dict)


# One piece's share of a kind: the policies it meets, and its contexts' paths by signature.
Piece = tuple[tuple[str, ...], dict[Signature, frozenset[Path]]]


@dataclass(slots=True)
class RoutePiece:
    """What one route contributes: its contexts' ladder, the kinds met, a piece per kind."""

    part: effective.Part
    pieces: dict[GroupKind, Piece] = field(default_factory=dict)


class Hub:
    """The pieces of one Service's value by route, and their totals by kind and signature.

    Every piece has an entry for every Inherited kind any piece meets: where a route meets no
    policy of a kind its contexts still show that kind (the empty signature's answer), once
    another route makes it show. Valid while the store's memo keeps it (`memo.hubs_of`): until
    the ladders start over (a hierarchy write other than a route's, a policy that moves),
    a route's write forgetting that route's piece (`forget`).
    """

    __slots__ = ("_kinds", "_pending", "_pieces", "met")

    def __init__(self, routes: Iterable[ObjectKey]) -> None:
        self._pending: set[ObjectKey] = set(routes)  # pieces to make (again)
        self._pieces: dict[ObjectKey, RoutePiece] = {}
        self.met: Counter[GroupKind] = Counter()  # pieces meeting each kind, of any class
        self._kinds: dict[GroupKind, KindTotals] = {}  # each Inherited kind met

    def forget(self, route: ObjectKey) -> None:
        self._pending.add(route)

    def refresh(
        self,
        store: Store,
        parts: Mapping[ObjectKey, tuple[Context, ...]],
        *,
        limit: int | None = None,
    ) -> bool:
        """Make again the pieces of the routes forgotten (at most `limit` of them), from the
        Service's contexts now; True while some remain forgotten."""
        if not self._pending:
            return False
        made: list[RoutePiece] = []
        batch = memo.pending_batch(self._pending, limit)
        for route in batch:
            gone = self._pieces.pop(route, None)
            if gone is not None:
                self._take_out(gone)
            contexts = parts.get(route)
            if contexts:
                piece = self._pieces[route] = RoutePiece(effective.part_of(contexts, store))
                self.met.update(piece.part.kinds)
                made.append(piece)
        self._pending.difference_update(batch)
        shown = {gk for gk in self.met if store.profile(gk).policy_class == "Inherited"}
        for gk in set(self._kinds) - shown:  # no route meets it any more
            del self._kinds[gk]
            for piece in self._pieces.values():
                piece.pieces.pop(gk, None)
        for gk in sorted(shown):
            if gk not in self._kinds:  # newly met: every route's contexts show it now
                self._kinds[gk] = KindTotals()
                for piece in self._pieces.values():
                    self._put_in(piece, gk, store)
            else:
                for piece in made:
                    self._put_in(piece, gk, store)
        return bool(self._pending)

    def entries(
        self, key: ObjectKey, obj: Mapping[str, Any], store: Store
    ) -> list[KindEntry] | None:
        """Each kind's answers now: one board per signature, signatures alike in their answer
        one group. None where two groups would start with the same path (contexts printed
        alike: the sizes alone could not order them as `summary` does)."""
        dumps = memo.engine_of(store).dumps
        out = []
        for gk, totals in self._kinds.items():
            groups: dict[tuple[str, str], Group] = {}
            for signature, paths in totals.signatures.items():
                found = effective.signature_answer(key, obj, store, gk, signature)
                done = summary.dumped_group(found, dumps)
                group = groups.setdefault(done.group_key, Group(done))
                group.members.append(paths)
            if len({group.first() for group in groups.values()}) < len(groups):
                return None
            out.append(KindEntry(str(gk), sorted(totals.refs), list(groups.values())))
        return out

    def _put_in(self, piece: RoutePiece, gk: GroupKind, store: Store) -> None:
        refs, by_signature = effective.signatures_of(piece.part, gk, store)
        paths = piece.part.ladder.paths
        share = piece.pieces[gk] = (
            refs,
            {s: frozenset(paths[i] for i in found) for s, found in by_signature.items()},
        )
        totals = self._kinds[gk]
        totals.refs.update(refs)
        for signature, held in share[1].items():
            kept = totals.signatures.get(signature)
            if kept is None:
                kept = totals.signatures[signature] = Paths()
            for path in held:
                kept.add(path)

    def _take_out(self, piece: RoutePiece) -> None:
        for gk in piece.part.kinds:
            self.met[gk] -= 1
            if not self.met[gk]:
                del self.met[gk]
        for gk, (refs, by_signature) in piece.pieces.items():
            totals = self._kinds[gk]
            totals.refs.subtract(refs)
            for ref in refs:
                if not totals.refs[ref]:
                    del totals.refs[ref]
            for signature, held in by_signature.items():
                kept = totals.signatures[signature]
                for path in held:
                    kept.remove(path)
                if not kept.ordered:
                    del totals.signatures[signature]


# --- the value, as `summary` writes it -----------------------------------------------------------


@dataclass(slots=True)
class Group:
    """Contexts of the Service that share one answer (`summary.DumpedGroup`): the paths of
    every signature with that answer (no two contexts print alike: see `Hub.entries`)."""

    dumped: summary.DumpedGroup
    members: list[Paths] = field(default_factory=list)

    def first(self) -> Path:
        return min(paths.ordered[0] for paths in self.members)

    def ordered(self) -> list[Path]:
        if len(self.members) == 1:
            return self.members[0].ordered
        return sorted({path for paths in self.members for path in paths.ordered})

    def order(self) -> tuple[Path, tuple[str, str]]:
        """As `summary` orders a kind's contexts — by their sorted paths, then the answer —
        where no two groups start with the same path."""
        return self.first(), self.dumped.group_key

    def entry(self, *, sources: bool) -> dict[str, Any]:
        found: dict[str, Any] = {"effective": self.dumped.effective, "paths": self.ordered()}
        if sources:
            found["sources"] = self.dumped.sources_json()
        return found

    def size(self, *, sources: bool) -> int:
        """The size of `summary.dump(self.entry(sources=...))`, without writing the paths:
        the answer's opening and closing, around the paths (`]}` closes it without sources)."""
        skeleton = summary.size(self.dumped.opening)
        skeleton += summary.size(self.dumped.closing) if sources else len("]}")
        held = sum(paths.path_bytes for paths in self.members)
        count = sum(len(paths.ordered) for paths in self.members)
        return skeleton + held + count - 1  # commas between paths


@dataclass(slots=True)
class KindEntry:
    """One kind of the value: its name, policies, and answers (in any order)."""

    name: str
    policies: list[str]
    groups: list[Group]

    def as_json(self, *, sources: bool) -> dict[str, Any]:
        ordered = sorted(self.groups, key=Group.order)
        return {
            "contexts": [group.entry(sources=sources) for group in ordered],
            "policies": self.policies,
        }

    def size(self, *, sources: bool) -> int:
        """The size of `summary.dump(self.as_json(sources=...))`, without writing the paths."""
        empty = summary.size(summary.dump({"contexts": [], "policies": self.policies}))
        held = sum(group.size(sources=sources) for group in self.groups)
        return empty + held + max(0, len(self.groups) - 1)


def _direct_entries(key: ObjectKey, store: Store) -> list[KindEntry]:
    """The Service's Direct kinds (a handful of its own policies), as entries like the rest."""
    dumps = memo.engine_of(store).dumps
    out = []
    for result in effective.direct_results(key, store):
        groups: dict[tuple[str, str], Group] = {}
        for found in result.groups:
            done = summary.dumped_group(found, dumps)
            group = groups.setdefault(done.group_key, Group(done, [Paths()]))
            for i in found.indices:
                if result.all_paths[i] not in group.members[0].counts:
                    group.members[0].add(result.all_paths[i])
        out.append(KindEntry(str(result.group_kind), list(result.policies), list(groups.values())))
    return out


def _rendered(
    entries: list[KindEntry], max_bytes: int
) -> tuple[summary.Fragments | None, summary.Spans | None] | None:
    """What `summary` renders from the whole: the value in pieces if it fits, else cut.

    Within twice the cap it is written whole and cut by `summary` itself. Further past it,
    the sizes say which contexts `summary.truncated` would drop, and only what stays is
    written; the text's own size must then be the size counted, or None (computed whole).
    """
    if not entries:
        return None, summary.NO_SPANS
    entries.sort(key=lambda entry: entry.name)
    whole = _size(entries, sources=True, truncated=False)
    if whole <= 2 * max_bytes:
        return summary.rendered(
            {entry.name: entry.as_json(sources=True) for entry in entries}, max_bytes
        )
    kept = {entry.name: sorted(entry.groups, key=Group.order) for entry in entries}
    total = summary.drop_to_fit(
        kept,
        _size(entries, sources=False, truncated=True),
        max_bytes,
        lambda group: group.size(sources=False),
    )
    policies = {
        entry.name: KindEntry(entry.name, entry.policies, kept[entry.name]).as_json(sources=False)
        for entry in entries
    }
    text = summary.dump({"version": summary.VERSION, "policies": policies, "truncated": True})
    return ((text,), None) if summary.size(text) == total else None


def _size(entries: list[KindEntry], *, sources: bool, truncated: bool) -> int:
    """The size of the value holding `entries` (with or without sources), from their sizes."""
    empty = summary.size(
        summary.dump({"policies": {}, "truncated": truncated, "version": summary.VERSION})
    )
    names = sum(summary.size(summary.dump(entry.name)) + 1 for entry in entries)  # `"name":`
    held = sum(entry.size(sources=sources) for entry in entries)
    return empty + names + held + len(entries) - 1


def _path_size(path: Path) -> int:
    return summary.size(summary.dump(path))
