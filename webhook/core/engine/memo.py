"""Work that computations on one state of the cluster share, and when each part is dropped.

Computing one object's effective policy means finding its contexts, the policies at each rung,
each policy's leaves, and one board per distinct set of policies met. Objects share almost all
of that: 10,000 routes of one Gateway have the same rungs above them and meet the same
policies there. Computed per object it is paid 10,000 times; kept here, once.

One owner per view: a `Store` holds a `StoreMemo` (`store.memo`), an `OverlayView` an
`OverlayMemo` (`overlay.memo`), made here on first use; any other view gets scratch memos that
live as long as the call. Whenever a part is asked for, the memo first catches up on the writes
the store made since it last looked (`Store.writes_since`), oldest first, each dropping what
it may have changed — nothing is pushed by listeners, so no order of subscribers can let a
reader see a memo of the state before a write. A write that changes nothing read (our own
annotation patch, a status write) drops nothing; a route's write drops only what passes through
that route, so that a route event costs the same beside 10 routes or 10,000:

| part | holds | a route written | any other write |
|---|---|---|---|
| `index` | references between hierarchy objects, by referent (`hierarchy_index`) | its entries moved | a hierarchy object's entries moved |
| `structure` | contexts, a Service's contexts by route, parentRef and backendRef readings (each Service's key once), reach below rungs | its contexts and backendRefs, its part of its Services' contexts, the reach below rungs above it | started over, if structural |
| `ladders` | per annotated object: its contexts grouped by the rungs holding policies, the kinds reaching it, its sections | its own and its Services' | started over, if structural |
| `engine` | policies attached per key and rung, stanza leaves (each path once), board results, and each board's JSON for the annotation (`summary`) | kept: a route is no input of these | started over |
| `hubs` | per busy Service, its contexts' paths by route, kind and signature (where policies attach, not their values), made and read in the layer above (`annotation.hubs`) | its piece of its Services' | started over, if structural |

Besides, `ladders`, `engine` and `hubs` start over when a policy may have moved (the store's
`attachment_revision`: also a relabelled object that a selector looks at); every part when the
store no longer knows every write since the memo last looked. A part past its bound
(`entry_limit`) starts over too: paid as recomputation, never as a wrong answer. Pure and
synchronous, like the store: one thread.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from webhook.core.engine import hierarchy_index
from webhook.core.engine.attachment import backend_refs
from webhook.core.model import kinds
from webhook.core.model.meta import labels_of
from webhook.core.model.policy import Policy
from webhook.core.model.refs import GroupKind, ObjectKey
from webhook.core.state.overlay import OverlayView
from webhook.core.state.store import ClusterView, Store, Write, policy_targets
from webhook.core.state.trim import relevant

if TYPE_CHECKING:
    from webhook.core.engine.attachment import BackendRef
    from webhook.core.engine.board import ContextResult
    from webhook.core.engine.hierarchy import Context, ParentMemo, Rung
    from webhook.core.engine.hierarchy_index import HierarchyIndex
    from webhook.core.engine.ladder import Reached
    from webhook.core.model.leaves import Path

# What contexts are made of (hierarchy.py reads nothing else): the objects on the ladder — the
# annotated kinds — and what decides admission onto it (Namespace labels, ReferenceGrants).
STRUCTURAL_KINDS: frozenset[GroupKind] = frozenset(
    {*kinds.ANNOTATED_KINDS, kinds.NAMESPACE, kinds.REFERENCE_GRANT}
)
# What the engine part is made of besides policies: the kinds' profiles (CRDs) and
# ReferenceGrants (cross-namespace targets). Nothing structural.
_ENGINE_INPUTS = frozenset({kinds.CRD, kinds.REFERENCE_GRANT})

# A part starts over past this many entries per object in the store (plus a floor): a bound on
# memory that grows with the cluster, as the memo does (a few entries per object), paid as
# recomputation. A fixed bound would make growth superlinear: past it, parts would start over
# on every access.
ENTRIES_PER_OBJECT = 20
MIN_ENTRIES = 50_000


def entry_limit(store: Store) -> int:
    return MIN_ENTRIES + ENTRIES_PER_OBJECT * store.size()


# A reach below a rung: (the rung's key, its section, whether inherited) — `hierarchy`.
ReachKey = tuple[ObjectKey, "str | None", bool]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
K_in = TypeVar("K_in", bound=Hashable, contravariant=True)


class Table(Protocol[K_in, V]):
    """What the engine does with a memo table: a `dict`, or an overlay's `Layered` one."""

    def get(self, key: K_in, /) -> V | None: ...

    def __contains__(self, key: K_in, /) -> bool: ...

    def __getitem__(self, key: K_in, /) -> V: ...

    def __setitem__(self, key: K_in, value: V, /) -> None: ...

    def __len__(self) -> int: ...


class Layered(Generic[K, V]):
    """An overlay's own entries, over its base's for the keys `shared` says it leaves alone.

    What the overlay computes goes into its own entries, never into the base's."""

    __slots__ = ("_base", "_own", "_shared")

    def __init__(self, base: Table[K, V], shared: Callable[[K], bool]) -> None:
        self._own: dict[K, V] = {}
        self._base = base
        self._shared = shared

    def get(self, key: K) -> V | None:
        found = self._own.get(key)
        if found is None and self._shared(key):
            return self._base.get(key)
        return found

    def __contains__(self, key: K) -> bool:
        return key in self._own or (self._shared(key) and key in self._base)

    def __getitem__(self, key: K) -> V:
        if key in self._own or not self._shared(key):
            return self._own[key]
        return self._base[key]

    def __setitem__(self, key: K, value: V) -> None:
        self._own[key] = value

    def __len__(self) -> int:
        return len(self._own)


def _forget(table: Table[K, V], key: K) -> None:
    """Drop `key` from a store's table; an overlay's (`Layered`) is made afresh instead."""
    assert isinstance(table, dict), "only a store's memo is told of writes"
    table.pop(key, None)


def pending_batch(pending: set[ObjectKey], limit: int | None) -> list[ObjectKey]:
    """The routes to make again now, of those a Service's parts (`ServiceParts.pending`) or
    pieces (`annotation.hubs`) are waiting for: all of them in order, or any `limit` of them in
    one step — where each part or piece goes does not depend on when it is made (both are kept
    sorted), and sorting thousands again for each small step would cost more than the step."""
    return sorted(pending) if limit is None else list(itertools.islice(pending, limit))


@dataclass(slots=True)
class ServiceParts:
    """A Service's contexts, by the route each passes through, and all of them in order.

    Made and read by `hierarchy`; a route's write only marks its part `pending`, to be made
    again (and put in place in `ordered`) when the Service's contexts are next asked for.
    """

    by_route: dict[ObjectKey, tuple[Context, ...]] = field(default_factory=dict)
    ordered: tuple[Context, ...] = ()  # every part's, in `hierarchy.sort_contexts` order
    pending: set[ObjectKey] | None = None  # routes whose part to make again (few Services')


@dataclass(slots=True)
class StructureMemo:
    """Contexts and what they are made of (see `hierarchy`): structure only."""

    limit: int
    contexts: Table[ObjectKey, tuple[Context, ...]] = field(default_factory=dict)
    services: dict[ObjectKey, ServiceParts] = field(default_factory=dict)  # busy Services'
    parents: ParentMemo = field(default_factory=dict)
    # route → its backendRefs, as read
    backends: Table[ObjectKey, tuple[BackendRef, ...]] = field(default_factory=dict)
    # the keys of routes' parents and backends, each kept once (`attachment.parent_refs`)
    keys: dict[ObjectKey, ObjectKey] = field(default_factory=dict)
    rungs: dict[Rung, Rung] = field(default_factory=dict)  # parents' rungs, kept once (`hierarchy`)
    heads: dict[Context, Context] = field(default_factory=dict)  # parents' contexts, once
    reach: dict[ReachKey, tuple[ObjectKey, ...]] = field(
        default_factory=dict
    )  # (rung, inherited) → the objects below it, in ladder order (`hierarchy.reach_in_order`)
    reach_at: dict[ObjectKey, list[ReachKey]] = field(default_factory=dict)  # by the rung's key
    reached: int = 0  # keys held in `reach`, all entries together

    def remember_reach(self, memo_key: ReachKey, found: tuple[ObjectKey, ...]) -> None:
        if memo_key not in self.reach:
            self.reach_at.setdefault(memo_key[0], []).append(memo_key)
        self.reached += len(found) - len(self.reach.get(memo_key, ()))
        self.reach[memo_key] = found

    def forget_route(
        self, route: ObjectKey, services: set[ObjectKey], reaching: set[ObjectKey] | None
    ) -> None:
        """What passes through a written route: its contexts and backendRefs, its part of its
        Services' contexts (`services`: its backends before and after), and the reach below
        the rungs whose walk may pass it (`reaching`, by key; None: every reach). The reach
        below any other rung stands, so a wide policy's review after a route's write
        elsewhere does not walk its target again."""
        _forget(self.contexts, route)
        _forget(self.backends, route)
        for service in services:
            _forget(self.contexts, service)  # a Service behind few routes, made whole
            parts = self.services.get(service)
            if parts is not None:
                if parts.pending is None:
                    parts.pending = set()
                parts.pending.add(route)
        if not self.reach:
            return
        if reaching is None:
            self.reach.clear()
            self.reach_at.clear()
            self.reached = 0
            return
        for key in reaching:
            for memo_key in self.reach_at.pop(key, ()):
                self.reached -= len(self.reach.pop(memo_key))

    def full(self) -> bool:
        held = len(self.contexts) + len(self.parents) + len(self.backends) + len(self.keys)
        held += len(self.heads)
        return held + len(self.services) + len(self.rungs) + self.reached > self.limit


@dataclass(slots=True)
class LadderMemo:
    """Per annotated object, what `effective` needs before reading any policy's values."""

    limit: int
    reached: dict[ObjectKey, Reached] = field(default_factory=dict)
    shared: dict[Any, Any] = field(default_factory=dict)  # equal parts of entries, kept once

    def full(self) -> bool:
        return len(self.reached) + len(self.shared) > self.limit


@dataclass(slots=True)
class EngineMemo:
    """Per-state results of the precedence engine, and the annotation's JSON of its boards."""

    limit: int
    attached: Table[ObjectKey, Sequence[tuple[Policy, str | None]]] = field(default_factory=dict)
    by_rung: Table[Rung, Mapping[GroupKind, Sequence[Policy]]] = field(default_factory=dict)
    leaves: Table[tuple[ObjectKey, str], dict[Path, Any]] = field(default_factory=dict)
    boards: Table[tuple[GroupKind, bool, tuple[Rung, ...]], ContextResult] = field(
        default_factory=dict
    )
    # `summary.DumpedGroup` by the ids of a board's effective value and sources: made in the
    # layer above, held here so that it lives exactly as long as the boards it was made from.
    dumps: Table[tuple[int, int], Any] = field(default_factory=dict)
    # The paths of leaves, each kept once: every policy of a kind sets the same few fields,
    # and its leaves and the boards made from them are keyed by them.
    leaf_paths: dict[Path, Path] = field(default_factory=dict)

    def full(self) -> bool:
        held = len(self.attached) + len(self.by_rung) + len(self.boards) + len(self.dumps)
        return held + len(self.leaf_paths) > self.limit


class Hub(Protocol):
    """What the layer above keeps of one hub object (`annotation.hubs`: a Service's value in
    pieces, one per route): told which route's piece to make again."""

    def forget(self, route: ObjectKey) -> None: ...


class StoreMemo:
    """Every memo of one store, caught up on the store's writes whenever one is asked for."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._heard = store.revision  # every part reflects the store up to this revision
        self._attachments = store.attachment_revision
        limit = entry_limit(store)
        self._index: HierarchyIndex | None = None
        self._structure = StructureMemo(limit)
        self._ladders = LadderMemo(limit)
        self._engine = EngineMemo(limit)
        self._hubs: dict[ObjectKey, Hub] = {}
        self._hubs_wanted: set[ObjectKey] = set()  # Services a route's write reached, no hub

    def index(self) -> HierarchyIndex:
        self._catch_up()
        if self._index is None:
            self._index = hierarchy_index.build_index(self._store)
        return self._index

    def structure(self) -> StructureMemo:
        self._catch_up()
        if self._structure.full():
            self._structure = StructureMemo(entry_limit(self._store))
        return self._structure

    def ladders(self) -> LadderMemo:
        self._catch_up()
        if self._ladders.full():
            self._ladders = LadderMemo(entry_limit(self._store))
        return self._ladders

    def engine(self) -> EngineMemo:
        self._catch_up()
        if self._engine.full():
            self._engine = EngineMemo(entry_limit(self._store))
        return self._engine

    def hubs(self) -> dict[ObjectKey, Hub]:
        self._catch_up()
        return self._hubs

    def hub_wanted(self, key: ObjectKey) -> bool:
        self._catch_up()
        return key in self._hubs_wanted

    # --- catching up on the store's writes ------------------------------------------------------

    def _catch_up(self) -> None:
        store = self._store
        if self._heard == store.revision:
            return  # no write since the last look: the common case, made cheap
        writes = store.writes_since(self._heard)
        if writes is None:  # too far behind to know what changed: everything starts over
            self._index = None
            self._start_over(structure=True)
        else:
            for write in writes:
                self._hear(write)
        if self._attachments != store.attachment_revision:  # a policy may have moved
            self._attachments = store.attachment_revision
            self._start_over(structure=False, ladders=True)
        self._heard = store.revision

    def _hear(self, write: Write) -> None:
        key, old, new = write.key, write.old, write.new
        if old is not None and new is not None and relevant(old) == relevant(new):
            return  # nothing any part read has changed
        gk = key.group_kind
        if self._index is not None and gk in hierarchy_index.INDEXED_KINDS:
            self._index.move(key, old, new)
        if gk in kinds.ROUTE_KINDS:
            self._route_written(key, old, new)
        else:
            structural = gk in STRUCTURAL_KINDS
            self._start_over(structure=structural, ladders=structural)

    def _route_written(
        self, route: ObjectKey, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None
    ) -> None:
        """Drop what passes through one route: its contexts reach its backends and nothing
        else, and the engine part reads no route (its policies are found by key, and a
        selector's change of mind moves `attachment_revision`)."""
        services = {
            ref.key for obj in (old, new) if obj is not None for ref in backend_refs(route, obj)
        }
        structure = self._structure
        reaching = _reaching(route, (old, new), self._store) if structure.reach else None
        structure.forget_route(route, services, reaching)
        reached = self._ladders.reached
        reached.pop(route, None)
        for service in services:
            reached.pop(service, None)
            hub = self._hubs.get(service)
            if hub is not None:
                hub.forget(route)
            else:
                self._hubs_wanted.add(service)

    def _start_over(self, *, structure: bool, ladders: bool = True) -> None:
        limit = entry_limit(self._store)
        if structure:
            self._structure = StructureMemo(limit)
        if ladders:
            self._ladders = LadderMemo(limit)
            self._hubs = {}  # where policies attach, as the ladders: not their values
            self._hubs_wanted = set()
        self._engine = EngineMemo(limit)


def _reaching(
    route: ObjectKey,
    objs: tuple[Mapping[str, Any] | None, Mapping[str, Any] | None],
    store: Store,
) -> set[ObjectKey] | None:
    """The keys of every rung whose reach may hold `route` (as `objs`, before and after), or
    None for all of them.

    A walk below a rung (`hierarchy.affected_by`) goes down by the index's lookups, so it comes
    to the route only from what the route refers to, and to those from what they refer to
    (`hierarchy_index.referents`): its parents and Services, a ListenerSet's Gateway, a
    Gateway's class, the Namespaces of all of them. The reach below any other rung cannot
    change. A route whose parent is anything but a Gateway or ListenerSet (a Service, for a
    mesh) is below whatever reaches that Service, through any route: None. Read from the store
    as it is now: a Gateway's or ListenerSet's own write starts the structure over anyway.
    """
    found = {route}
    frontier = [(route, obj) for obj in objs if obj is not None]
    while frontier:
        key, obj = frontier.pop()
        for table, referent in hierarchy_index.referents(key, obj):
            if table == "parent" and referent.group_kind not in _WALKED_PARENTS:
                return None
            if referent not in found:
                found.add(referent)
                above = store.get(referent)
                if above is not None:
                    frontier.append((referent, above))
    return found


# Parents whose routes a walk reaches only through them (`_reaching`).
_WALKED_PARENTS = frozenset({kinds.GATEWAY, kinds.LISTENER_SET})


class OverlayMemo:
    """An overlay's memos: its base's where the overlaid objects cannot change them.

    Contexts are the base's when the overlay replaces no structural object; when it replaces
    only routes and updates of Services, the base's but for what those change (`_layered_
    structure`: a route submitted to /mutate, a store write's view of just before it). Engine
    work is the base's when it replaces no policy, CRD or ReferenceGrant and relabels nothing
    a selector looks at (a route submitted to /mutate); for an overlay of policies (a policy
    under review), its own entries for what they touch, over the base's — and each object's
    ladder is made from the base's (`ladder.reached`), asking only the keys where policies
    moved.
    """

    def __init__(self, overlay: OverlayView) -> None:
        self._overlay = overlay
        self._index: HierarchyIndex | None = None
        self._engine: EngineMemo | None = None
        self._engine_revision = -1
        self._structure: StructureMemo | None = None
        self._structure_revision = -1
        self._moved: frozenset[ObjectKey] | None = None

    def index(self) -> HierarchyIndex:
        if self._index is None:
            self._index = index_of(self._overlay.base).overlaid(self._overlay.changes())
        return self._index

    def structure(self) -> StructureMemo | None:
        overlay = self._overlay
        if not _replaces_structure(overlay):
            return _structure(overlay.base)
        root = _root_store(overlay)
        if root is None:
            return None
        if self._structure_revision != root.revision:  # None, where none is shared, kept too
            base = _structure(overlay.base)
            self._structure = _layered_structure(overlay, base) if base is not None else None
            self._structure_revision = root.revision
        return self._structure

    def moved_attachments(self) -> frozenset[ObjectKey] | None:
        """The keys whose attached policies may differ from the base's (`_moved_targets`),
        when that is all the overlay changes: no hierarchy object, CRD or ReferenceGrant
        overlaid, so every object's contexts are the base's. None when it changes more."""
        if self._moved is not None:  # asked once per object of an impact preview
            return self._moved
        overlay = self._overlay
        if _replaces_structure(overlay) or any(
            key.group_kind in _ENGINE_INPUTS for key in overlay.overlaid
        ):
            return None
        self._moved = frozenset(_moved_targets(overlay))
        return self._moved

    def engine(self) -> EngineMemo:
        overlay = self._overlay
        root = _root_store(overlay)
        if root is None:
            return EngineMemo(MIN_ENTRIES)
        engine = self._engine
        if engine is not None and self._engine_revision == root.revision and not engine.full():
            return engine  # kept only for an overlay that touches the engine, as below
        if not _touches_engine(overlay):
            return engine_of(overlay.base)  # a route or Gateway as submitted: engine reads none
        engine = self._engine = _layered_engine(overlay)
        self._engine_revision = root.revision
        return engine


# --- what the engine asks for ------------------------------------------------------------------


def index_of(view: ClusterView) -> HierarchyIndex:
    """The hierarchy index of a view: kept by its owner, else built afresh."""
    owner = _owner(view)
    return owner.index() if owner is not None else hierarchy_index.build_index(view)


def structure_of(view: ClusterView) -> StructureMemo:
    """The contexts memo valid for `view` now; a scratch one where none can be shared (an
    overlay that replaces a hierarchy object), living as long as the call that asked."""
    return _structure(view) or StructureMemo(MIN_ENTRIES)


def shared_structure(view: ClusterView) -> StructureMemo | None:
    """The contexts memo kept for `view`, or None where nothing is kept across calls."""
    return _structure(view)


def ladders_of(view: ClusterView) -> LadderMemo | None:
    """The ladder memo valid for `view` now; None for anything but a store itself (an overlay
    may move a policy or a hierarchy object, and ladders are few per review: computed)."""
    return _store_memo(view).ladders() if isinstance(view, Store) else None


def _replaces_structure(overlay: OverlayView) -> bool:
    """Whether the overlay replaces an object contexts are made of (`STRUCTURAL_KINDS`): if
    not, it has its base's hierarchy, and shares its base's contexts memo."""
    return any(key.group_kind in STRUCTURAL_KINDS for key in overlay.overlaid)


def hierarchy_view(view: ClusterView) -> ClusterView:
    """The view itself, or the base of an overlay that replaces no structural object: the
    same hierarchy (the overlay shares its base's contexts memo on the same ground), read
    without passing every lookup through the overlay."""
    while isinstance(view, OverlayView) and not _replaces_structure(view):
        view = view.base
    return view


def moved_attachments(view: ClusterView) -> tuple[ClusterView, frozenset[ObjectKey]] | None:
    """For an overlay that only moves policies: its base, and the keys whose attached policies
    may differ there (`OverlayMemo.moved_attachments`); None for any other view."""
    if not isinstance(view, OverlayView):
        return None
    owner = _owner(view)
    assert isinstance(owner, OverlayMemo)
    moved = owner.moved_attachments()
    return (view.base, moved) if moved is not None else None


def hubs_of(view: ClusterView) -> dict[ObjectKey, Hub] | None:
    """The hub pieces kept for a store (`annotation.hubs`); None for any other view (an
    overlay's objects may be any, and its reviews are few: computed whole)."""
    return _store_memo(view).hubs() if isinstance(view, Store) else None


def hub_wanted(view: ClusterView, key: ObjectKey) -> bool:
    """Whether a route's write reached the Service `key` of a store since its hub (if any) was
    dropped: pieces pay off where routes come and go; elsewhere the whole value is as cheap."""
    return isinstance(view, Store) and _store_memo(view).hub_wanted(key)


def engine_of(view: ClusterView) -> EngineMemo:
    """The engine memo valid for `view` now; a fresh one where none can be kept."""
    owner = _owner(view)
    return owner.engine() if owner is not None else EngineMemo(MIN_ENTRIES)


def _structure(view: ClusterView) -> StructureMemo | None:
    owner = _owner(view)
    return owner.structure() if owner is not None else None


def _owner(view: ClusterView) -> StoreMemo | OverlayMemo | None:
    """The memo a view owns, made on first use; None for a view that owns none."""
    if isinstance(view, Store):
        return _store_memo(view)
    if isinstance(view, OverlayView):
        if view.memo is None:
            view.memo = OverlayMemo(view)
        return view.memo
    return None


def _store_memo(store: Store) -> StoreMemo:
    if store.memo is None:
        store.memo = StoreMemo(store)
    return store.memo


def _root_store(view: ClusterView) -> Store | None:
    while isinstance(view, OverlayView):
        view = view.base
    return view if isinstance(view, Store) else None


def _touches_engine(overlay: OverlayView) -> bool:
    """Whether the overlay replaces a policy, a CRD or a ReferenceGrant (in either view), or
    relabels an object a `targetSelectors` entry looks for."""
    return any(
        key.group_kind in _ENGINE_INPUTS
        or overlay.policy(key) is not None
        or overlay.base.policy(key) is not None
        or _selection_moves(overlay, key)
        for key in overlay.overlaid
    )


def _selection_moves(overlay: OverlayView, key: ObjectKey) -> bool:
    """An overlaid object relabelled where a `targetSelectors` entry looks for its kind: the
    policies attached to it may differ from the base's (SPEC §1.7)."""
    return bool(overlay.base.policies_selecting(key.namespace, key.group_kind)) and labels_of(
        overlay.get(key)
    ) != labels_of(overlay.base.get(key))


def _layered_engine(overlay: OverlayView) -> EngineMemo:
    """An engine memo for an overlay of policies: the base's, but for what they touch.

    A policy changes what is attached only at its targets (before and after), and its own
    leaves; a relabelled object only what its selectors attach to it; a board changes only if
    one of its rungs is such a target. Everything else — for an impact preview, nearly all of
    the 25 objects' work — is the base's. An overlaid CRD or ReferenceGrant can change any
    kind's profile or any cross-namespace attachment: a memo of its own.
    """
    overlaid = overlay.overlaid
    if any(key.group_kind in _ENGINE_INPUTS for key in overlaid):
        return EngineMemo(MIN_ENTRIES)
    base = engine_of(overlay.base)
    dirty = _moved_targets(overlay)
    return EngineMemo(
        MIN_ENTRIES,
        attached=_layer(base.attached, lambda key: key not in dirty),
        by_rung=_layer(base.by_rung, lambda rung: rung.key not in dirty),
        leaves=_layer(base.leaves, lambda memo_key: memo_key[0] not in overlaid),
        boards=_layer(base.boards, lambda memo_key: all(r.key not in dirty for r in memo_key[2])),
        dumps=_layer(base.dumps, lambda _: True),  # ids of the base's own, held objects
        leaf_paths=base.leaf_paths,  # values: an equal path is the same path anywhere
    )


def _layered_structure(overlay: OverlayView, base: StructureMemo) -> StructureMemo | None:
    """A structure memo for an overlay that replaces routes and updates Services: the base's,
    but for the contexts of what it replaces and of the Services below a replaced route (as a
    store drops them when a route is written, `StructureMemo.forget_route`) and the backendRefs
    of its routes. None for an overlay that replaces anything else.

    What a route's parentRef gives it is read from Gateways, ListenerSets, Namespaces and the
    existence of a mesh Service — none of them replaced here: that table is the base's own,
    and what the overlay adds to it holds there too. So /mutate of a route makes its contexts
    from the parents the base knows, and of a Service behind many routes, reads each route's
    contexts from the base.
    """
    for key in overlay.overlaid:
        gk = key.group_kind
        if gk in kinds.ROUTE_KINDS:
            continue
        if gk != kinds.SERVICE or overlay.get(key) is None or overlay.base.get(key) is None:
            return None  # a mesh route's contexts read that its Service exists: not shared
    replaced = _Replaced(overlay)
    return StructureMemo(
        base.limit,
        contexts=_layer(base.contexts, replaced.keeps_contexts),
        parents=base.parents,
        rungs=base.rungs,  # values: an equal rung is the same rung anywhere
        heads=base.heads,
        backends=_layer(base.backends, lambda key: key not in overlay.overlaid),
        keys=base.keys,  # as the rungs
    )


class _Replaced:
    """Whose contexts an overlay of routes and Service updates changes: what it replaces, and
    the Services below a replaced route, before or after — found when a Service is first asked
    about (a route's own summary asks about none)."""

    __slots__ = ("_below", "_overlay")

    def __init__(self, overlay: OverlayView) -> None:
        self._overlay = overlay
        self._below: frozenset[ObjectKey] | None = None

    def keeps_contexts(self, key: ObjectKey) -> bool:
        """Whether `key`'s contexts are the same as in the overlay's base."""
        overlay = self._overlay
        if key in overlay.overlaid:
            return False
        if key.kind != "Service" or key.group:
            return True
        if self._below is None:
            self._below = frozenset(
                ref.key
                for route in overlay.overlaid
                if route.group_kind in kinds.ROUTE_KINDS
                for obj in (overlay.get(route), overlay.base.get(route))
                if obj is not None
                for ref in backend_refs(route, obj)
            )
        return key not in self._below


def _moved_targets(overlay: OverlayView) -> set[ObjectKey]:
    """Where an overlay of policies may attach differently from its base: the targets of each
    overlaid policy in either view, and any overlaid object relabelled where a selector looks."""
    moved: set[ObjectKey] = set()
    for key in overlay.overlaid:
        if _selection_moves(overlay, key):
            moved.add(key)
        for view in (overlay, overlay.base):
            policy = view.policy(key)
            if policy is not None:
                moved.update(target for target, _ in policy_targets(policy, view))
    return moved


def _layer(base: Table[K, V], shared: Callable[[K], bool]) -> Layered[K, V]:
    return Layered(base, shared)
