"""Work that computations on one state of the cluster share, kept until that state changes.

Computing one object's effective policy means finding its contexts, the policies at each rung,
each policy's leaves, and one board per distinct set of policies met. Objects share almost all
of that: 10,000 routes of one Gateway have the same rungs above them and meet the same
policies there. Computed per object it is paid 10,000 times; kept here, once.

Three memos, because their inputs differ:
- `StructureMemo` — contexts, which read only hierarchy objects (Gateways, routes, Services,
  GatewayClasses, Namespaces, ReferenceGrants). A policy edit leaves it valid, so a policy's
  fan-out and impact preview find every context already known.
- `LadderMemo` — per object, which rungs of its contexts hold policies and of which kinds:
  structure, plus where policies attach. An edit of a policy's values (its targets unchanged,
  the common edit) leaves it valid, so that edit's fan-out starts from each object's ladder.
- `EngineMemo` — policies attached per key, stanza leaves, and board results per signature.
  Any write makes it stale.

Validity is checked against the store's revisions on every access, never pushed by listeners,
so no subscription order can let a reader see a memo of the state before a write. A view that
is not a `Store` (a test's own) gets a fresh memo per call; an `OverlayView` shares its base's
structure memo when it overlays no hierarchy object, and its engine memo when it overlays
no policy, CRD or ReferenceGrant (a route submitted to `/mutate`); an overlay of policies (a
policy under review) layers its own entries for what they touch over its base's memo.
Pure and synchronous, like the store: one thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

from webhook.core.engine.attachment import policy_targets
from webhook.core.model import kinds
from webhook.core.model.labels import labels_of
from webhook.core.model.refs import GroupKind, ObjectKey
from webhook.core.state.overlay import OverlayView
from webhook.core.state.store import ClusterView, Store

# What contexts are made of (hierarchy.py reads nothing else): the objects on the ladder — the
# annotated kinds — and what decides admission onto it (Namespace labels, ReferenceGrants).
STRUCTURAL_KINDS: frozenset[GroupKind] = frozenset(
    {*kinds.ANNOTATED_KINDS, kinds.NAMESPACE, kinds.REFERENCE_GRANT}
)

# A memo starts over past this many entries per object in the store (plus a floor): a bound on
# memory that grows with the cluster, as the memo does (about 5 structure and 3 engine entries
# per object at the benchmark's shape), paid as recomputation, never as a wrong answer. A fixed
# bound made growth superlinear: past it, memos started over on every access.
ENTRIES_PER_OBJECT = 20
MIN_ENTRIES = 50_000


def entry_limit(store: Store) -> int:
    return MIN_ENTRIES + ENTRIES_PER_OBJECT * store.size()


@dataclass(slots=True)
class StructureMemo:
    """Contexts per object, and what each parentRef gives a route (see `hierarchy`)."""

    revision: int
    limit: int
    checked: int = -1  # the store revision at which it was last found valid
    contexts: dict[ObjectKey, tuple[Any, ...]] = field(default_factory=dict)
    parents: dict[Any, list[Any]] = field(default_factory=dict)
    paths: dict[Any, tuple[str, ...]] = field(default_factory=dict)  # context → printed path
    backends: dict[ObjectKey, list[Any]] = field(default_factory=dict)  # route → backendRefs
    reach: dict[Any, frozenset[ObjectKey]] = field(default_factory=dict)  # see affected_by
    reached: int = 0  # keys held in `reach`, all entries together

    def remember_reach(self, memo_key: Any, found: frozenset[ObjectKey]) -> None:
        self.reach[memo_key] = found
        self.reached += len(found)

    def full(self) -> bool:
        return (
            len(self.contexts)
            + len(self.parents)
            + len(self.paths)
            + len(self.backends)
            + self.reached
            > self.limit
        )


@dataclass(slots=True)
class LadderMemo:
    """Per object, what `effective` needs before reading any policy's values (see there)."""

    revision: int
    attachments: int  # the store's `attachment_revision` when it was made
    limit: int
    checked: int = -1  # the store revision at which it was last found valid
    ladders: dict[ObjectKey, Any] = field(default_factory=dict)
    shared: dict[Any, Any] = field(default_factory=dict)  # equal parts of ladders, one object

    def full(self) -> bool:
        return len(self.ladders) + len(self.shared) > self.limit


@dataclass(slots=True)
class EngineMemo:
    """Per-state results of the precedence engine (see `effective`) and of `summary`."""

    revision: int
    limit: int
    attached: dict[ObjectKey, list[Any]] = field(default_factory=dict)
    by_rung: dict[Any, dict[GroupKind, list[Any]]] = field(default_factory=dict)
    leaves: dict[Any, Any] = field(default_factory=dict)
    boards: dict[Any, Any] = field(default_factory=dict)
    dumps: dict[tuple[int, int], Any] = field(default_factory=dict)  # see summary.Dumped

    def full(self) -> bool:
        return (
            len(self.attached) + len(self.by_rung) + len(self.boards) + len(self.dumps) > self.limit
        )


@dataclass(slots=True)
class _StoreMemos:
    structure: StructureMemo
    ladder: LadderMemo
    engine: EngineMemo


_BY_STORE: WeakKeyDictionary[Store, _StoreMemos] = WeakKeyDictionary()
_BY_OVERLAY: WeakKeyDictionary[OverlayView, EngineMemo] = WeakKeyDictionary()


def structure_memo(view: ClusterView) -> StructureMemo | None:
    """The contexts memo valid for `view` now, or None where contexts cannot be shared."""
    while isinstance(view, OverlayView):
        if any(key.group_kind in STRUCTURAL_KINDS for key in view.overlaid):
            return None
        view = view.base
    if not isinstance(view, Store):
        return None
    memos = _memos(view)
    memo = memos.structure
    if memo.checked == view.revision and not memo.full():
        return memo  # no write since the last look: the common case, made cheap
    if memo.revision < view.last_change(STRUCTURAL_KINDS) or memo.full():
        memo = memos.structure = StructureMemo(view.revision, entry_limit(view))
    memo.checked = view.revision
    return memo


def ladder_memo(view: ClusterView) -> LadderMemo | None:
    """The ladder memo valid for `view` now; None for anything but a store itself (an overlay
    may move a policy or a hierarchy object, and ladders are few per review: computed)."""
    if not isinstance(view, Store):
        return None
    memos = _memos(view)
    memo = memos.ladder
    if memo.checked == view.revision and not memo.full():
        return memo
    if (
        memo.revision < view.last_change(STRUCTURAL_KINDS)
        or memo.attachments != view.attachment_revision
        or memo.full()
    ):
        memo = memos.ladder = LadderMemo(view.revision, view.attachment_revision, entry_limit(view))
    memo.checked = view.revision
    return memo


def engine_memo(view: ClusterView) -> EngineMemo:
    """The engine memo valid for `view` now; a fresh one where none can be kept."""
    root = _root_store(view)
    if root is None:
        return EngineMemo(-1, MIN_ENTRIES)
    while isinstance(view, OverlayView) and not _touches_engine(view):
        view = view.base  # a route or Gateway as submitted: the engine reads none of it
    if isinstance(view, OverlayView):
        memo = _BY_OVERLAY.get(view)
        if memo is None or memo.revision != root.revision or memo.full():
            memo = _BY_OVERLAY[view] = _overlay_memo(view, root.revision)
        return memo
    memos = _memos(root)
    if memos.engine.revision != root.revision or memos.engine.full():
        memos.engine = EngineMemo(root.revision, entry_limit(root))
    return memos.engine


# What the engine memo is made of: policies (attached, by rung, their leaves and boards), the
# kinds' profiles (CRDs) and ReferenceGrants (cross-namespace targets). Nothing structural.
_ENGINE_INPUTS = frozenset({kinds.CRD, kinds.REFERENCE_GRANT})


def _touches_engine(overlay: OverlayView) -> bool:
    """Whether the overlay replaces a policy, a CRD or a ReferenceGrant (in either view)."""
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


class _Layer(dict[Any, Any]):
    """An overlay's memo: its own entries, else its base's for keys `clean` says it leaves alone.

    Only `get`, `in` and `[]` fall back, which is all the engine uses; what the overlay computes
    is kept in its own entries, never written into the base's.
    """

    __slots__ = ("base", "clean")

    def __init__(self, base: dict[Any, Any], clean: Callable[[Any], bool]) -> None:
        super().__init__()
        self.base = base
        self.clean = clean

    def get(self, key: Any, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        return self.base.get(key, default) if self.clean(key) else default

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or (self.clean(key) and key in self.base)

    def __getitem__(self, key: Any) -> Any:
        if dict.__contains__(self, key) or not self.clean(key):
            return dict.__getitem__(self, key)
        return self.base[key]


def _overlay_memo(overlay: OverlayView, revision: int) -> EngineMemo:
    """An engine memo for an overlay of policies: the base's, but for what they touch.

    A policy changes what is attached only at its targets (before and after), and its own
    leaves; a relabelled object only what its selectors attach to it; a board changes only if
    one of its rungs is such a target. Everything else — for
    an impact preview, nearly all of the 25 objects' work — is the base's. An overlaid CRD or
    ReferenceGrant can change any kind's profile or any cross-namespace attachment: own memo.
    """
    overlaid = overlay.overlaid
    if any(key.group_kind in _ENGINE_INPUTS for key in overlaid):
        return EngineMemo(revision, MIN_ENTRIES)
    base = engine_memo(overlay.base)
    dirty: set[ObjectKey] = set()
    for key in overlaid:
        if _selection_moves(overlay, key):
            dirty.add(key)
        for view in (overlay, overlay.base):
            policy = view.policy(key)
            if policy is not None:
                dirty.update(target for target, _ in policy_targets(policy, view))
    return EngineMemo(
        revision,
        MIN_ENTRIES,
        attached=_Layer(base.attached, lambda key: key not in dirty),
        by_rung=_Layer(base.by_rung, lambda rung: rung.key not in dirty),
        leaves=_Layer(base.leaves, lambda memo_key: memo_key[0] not in overlaid),
        boards=_Layer(base.boards, lambda memo_key: all(r.key not in dirty for r in memo_key[2])),
        dumps=_Layer(base.dumps, lambda _: True),  # ids of the base's own, held objects
    )


def _memos(store: Store) -> _StoreMemos:
    memos = _BY_STORE.get(store)
    if memos is None:
        limit = entry_limit(store)
        memos = _BY_STORE[store] = _StoreMemos(
            StructureMemo(store.revision, limit),
            LadderMemo(store.revision, store.attachment_revision, limit),
            EngineMemo(store.revision, limit),
        )
    return memos


def _root_store(view: ClusterView) -> Store | None:
    while isinstance(view, OverlayView):
        view = view.base
    return view if isinstance(view, Store) else None
