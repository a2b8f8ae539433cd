"""Cluster state: the read-only view the rules and the engine use, and its in-memory store.

`ClusterView` is the seam (SPEC: "cluster state behind one read-only interface"). `Store` is
its one implementation; what fills it differs — the manifest loader for cluster-less runs and
`check`, the informers for a live cluster. Rules and engine only ever see a `ClusterView`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from webhook.core.model import kinds, meta
from webhook.core.model.meta import labels_of
from webhook.core.model.policy import Policy, read_policy, spec_of
from webhook.core.model.profiles import (
    KindProfile,
    OperatorConfig,
    base_profile,
    profile_from_crd,
    refine,
)
from webhook.core.model.refs import GroupKind, ObjectKey, key_of
from webhook.core.state.parts import SharedParts

if TYPE_CHECKING:  # the engine's memo of this store's state: made and kept fresh there
    from webhook.core.engine.memo import StoreMemo

Slot = TypeVar("Slot")

Obj = Mapping[str, Any]
# Listener signature: (key, old object or None, new object or None).
ChangeListener = Callable[[ObjectKey, Obj | None, Obj | None], None]

# Writes a store remembers (`Store.writes_since`): what the engine's memo of its state catches up
# on, one object at a time, when it is next asked for something. A memo further behind than this
# starts over, as every memo did on every write before: paid as recomputation, never wrong.
WRITE_LOG = 1024
MAX_PROFILES = 1024  # kinds whose profile a store keeps (`Store.profile`)


class Write(NamedTuple):
    """One write to a store: the object before (None: created) and after (None: deleted)."""

    revision: int  # the store's revision this write made
    key: ObjectKey
    old: Mapping[str, Any] | None
    new: Mapping[str, Any] | None


class ClusterView(Protocol):
    """What the rules and the engine may read about the cluster. Never written through."""

    def get(self, key: ObjectKey) -> Mapping[str, Any] | None: ...

    def objects(self, gk: GroupKind) -> Iterable[Mapping[str, Any]]: ...

    def profile(self, gk: GroupKind) -> KindProfile: ...

    def policy_kinds(self) -> Sequence[KindProfile]: ...

    def policies(self) -> Iterable[Policy]: ...

    def policy(self, key: ObjectKey) -> Policy | None: ...

    def policies_targeting(self, target: ObjectKey) -> Sequence[Policy]: ...

    def policies_selecting(self, namespace: str, gk: GroupKind) -> Sequence[Policy]: ...

    def namespace_labels(self, name: str) -> Mapping[str, str] | None: ...

    def reference_grants(self, namespace: str) -> Sequence[Mapping[str, Any]]: ...


class Store:
    """In-memory objects by kind, with the indexes admission needs on its hot path.

    Indexes kept up to date on every write: policies parsed once, and policies by target
    object, so that "who targets X" is a dictionary lookup, not a scan.
    """

    def __init__(self, config: OperatorConfig | None = None) -> None:
        self._config = config or OperatorConfig()
        self._by_kind: dict[GroupKind, dict[ObjectKey, Mapping[str, Any]]] = {}
        # Every object by key as well: `get` is the engine's most frequent call (a walk below
        # a Gateway makes thousands), and one lookup beats building a GroupKind for two.
        self._by_key: dict[ObjectKey, Mapping[str, Any]] = {}
        # `get` is that dictionary's own method, with no Python frame of ours per call: a walk
        # below a Gateway asks it for every route and Service it passes, and as a method of
        # ours its frame was the walk's largest own cost (py-spy).
        self.get: Callable[[ObjectKey], Mapping[str, Any] | None] = self._by_key.get
        self._crd_profiles: dict[GroupKind, KindProfile] = {}
        # `profile` per kind, until the next CRD write: asked on every write (is it a policy?)
        # and by every overlay, and building one is a catalog lookup and two dataclasses.
        self._profiles: dict[GroupKind, KindProfile] = {}
        self._crd_kind: dict[ObjectKey, GroupKind] = {}  # CRD object → the kind it defines
        self._policies: dict[ObjectKey, Policy] = {}
        self._by_target: dict[ObjectKey, dict[ObjectKey, Policy]] = {}
        # Policies with `targetSelectors` (SPEC §1.7), by the namespace and kind they select in.
        self._by_selector: dict[tuple[str, GroupKind], dict[ObjectKey, Policy]] = {}
        self._listeners: list[ChangeListener] = []
        self.revision = 0  # +1 per write
        # The last writes, oldest first, as `Write` fields (made into one when read: most never
        # are); kept only once a memo exists to read them (it starts from the revision then).
        self._writes: deque[tuple[int, ObjectKey, Obj | None, Obj | None]] = deque(maxlen=WRITE_LOG)
        # +1 per write that may move a policy: one created, deleted or retargeted, or a CRD (a
        # kind's profile decides which policies count where). A policy's new values alone leave
        # it, so what the engine memo keeps about where policies attach outlives such an edit.
        self.attachment_revision = 0
        # One object for equal parts of the objects held (`parts.SharedParts`): the informers
        # trim what they decode with it (`trim.trim`), so that what they store shares them.
        self.parts = SharedParts()
        # Work the engine shares between computations on this state (`engine/memo.py`): owned
        # here, made there on first use, checked against the revisions above on every use.
        self.memo: StoreMemo | None = None

    # --- writing (feeders only) -------------------------------------------------------------

    def subscribe(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    def upsert(self, obj: Mapping[str, Any]) -> ObjectKey | None:
        """Add or replace one object; returns its key, or None when it has no kind/name."""
        key = key_of(obj)
        if key is None:
            return None
        bucket = self._by_kind.setdefault(key.group_kind, {})
        old = bucket.get(key)
        bucket[key] = obj
        self._by_key[key] = obj
        self._index(key, old, obj)
        return key

    def delete(self, key: ObjectKey) -> Mapping[str, Any] | None:
        bucket = self._by_kind.get(key.group_kind, {})
        old = bucket.pop(key, None)
        if old is not None:
            del self._by_key[key]
            self._index(key, old, None)
        return old

    def move_version(self, key: ObjectKey, resource_version: object) -> None:
        """Record a newer `metadata.resourceVersion` of a stored object that is otherwise
        unchanged (a controller's status write, once trimmed): no write at all — no revision,
        no listener — since nothing a rule, the engine or a summary reads changed. The
        reconciler still needs it: its patch carries the version as a precondition."""
        obj = self._by_key.get(key)
        if obj is None:
            return
        moved = {**obj, "metadata": {**meta.metadata(obj), "resourceVersion": resource_version}}
        self._by_key[key] = self._by_kind[key.group_kind][key] = moved

    def replace_kind(self, gk: GroupKind, objs: Iterable[Mapping[str, Any]]) -> None:
        """Make the objects of one kind exactly `objs` (a relist after `410 Gone`)."""
        fresh = {key: obj for obj in objs if (key := key_of(obj)) is not None}
        current = self._by_kind.get(gk, {})
        for key in list(current):
            if key not in fresh:
                self.delete(key)
        for key, obj in fresh.items():
            if current.get(key) != obj:  # an unchanged object is no write: nobody to notify
                self.upsert(obj)

    def _index(
        self, key: ObjectKey, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None
    ) -> None:
        self.revision += 1
        if self.memo is not None:
            self._writes.append((self.revision, key, old, new))
        if (key.namespace, key.group_kind) in self._by_selector and (
            old is None or new is None or labels_of(old) != labels_of(new)
        ):
            # A selector may now pick it, or drop it — also one that picks objects without
            # labels (`{}` matches every object, but only one that exists).
            self.attachment_revision += 1
        if key.group_kind == kinds.CRD:
            self.attachment_revision += 1
            self._reindex_crd(key, new)
        self._reindex_policy(key, new)
        for listener in self._listeners:
            listener(key, old, new)

    def _reindex_crd(self, key: ObjectKey, crd: Mapping[str, Any] | None) -> None:
        previous = self._crd_kind.pop(key, None)
        if previous is not None:
            self._crd_profiles.pop(previous, None)
        profile = profile_from_crd(crd) if crd is not None else None
        if profile is not None:
            self._crd_kind[key] = profile.group_kind
            self._crd_profiles[profile.group_kind] = profile
        self._profiles.clear()  # any kind's: the CRD may have named another kind before
        # A kind that became (or stopped being) a policy kind: read its objects again.
        for gk in {previous, profile.group_kind if profile else None} - {None}:
            assert gk is not None
            for obj_key, obj in list(self._by_kind.get(gk, {}).items()):
                self._reindex_policy(obj_key, obj)

    def _reindex_policy(self, key: ObjectKey, obj: Mapping[str, Any] | None) -> None:
        old = self._policies.pop(key, None)
        if old is not None:
            self._unfile(old)
        policy = None
        if obj is not None and self.is_policy_object(key.group_kind, obj):
            policy = read_policy(obj, self.profile(key.group_kind))
        if _placement(old) != _placement(policy):
            self.attachment_revision += 1
        if policy is None:
            return
        self._policies[key] = policy
        for target in _target_keys(policy):
            self._by_target.setdefault(target, {})[key] = policy
        for slot in _selector_slots(policy):
            self._by_selector.setdefault(slot, {})[key] = policy

    def _unfile(self, policy: Policy) -> None:
        for target in _target_keys(policy):
            _unfile_from(self._by_target, target, policy.key)
        for slot in _selector_slots(policy):
            _unfile_from(self._by_selector, slot, policy.key)

    # --- reading (ClusterView) --------------------------------------------------------------

    def is_policy_object(self, gk: GroupKind, obj: Mapping[str, Any]) -> bool:
        return looks_like_policy(gk, obj, self.profile(gk))

    def objects(self, gk: GroupKind) -> Iterable[Mapping[str, Any]]:
        return self._by_kind.get(gk, {}).values()

    def keys(self, gk: GroupKind) -> Iterable[ObjectKey]:
        return self._by_kind.get(gk, {}).keys()

    def writes_since(self, revision: int) -> Sequence[Write] | None:
        """The writes after `revision`, oldest first; None when they are no longer all known
        (more than `WRITE_LOG` ago): whoever asks must then start over from the objects."""
        if revision >= self.revision:
            return ()
        writes = self._writes
        if not writes or writes[0][0] > revision + 1:
            return None
        found = []
        for write in reversed(writes):  # the recent end: a memo asks after a write or a few
            if write[0] <= revision:
                break
            found.append(Write._make(write))
        found.reverse()
        return found

    def all_kinds(self) -> Iterator[GroupKind]:
        return iter(self._by_kind)

    def size(self) -> int:
        """Objects held, of every kind."""
        return len(self._by_key)

    def count(self, gk: GroupKind) -> int:
        return len(self._by_kind.get(gk, {}))

    def profile(self, gk: GroupKind) -> KindProfile:
        found = self._profiles.get(gk)
        if found is None:
            if len(self._profiles) >= MAX_PROFILES:  # kinds named in targetRefs are anyone's
                self._profiles.clear()
            found = refine(base_profile(gk, self._crd_profiles.get(gk)), self._config)
            self._profiles[gk] = found
        return found

    def policy_kinds(self) -> Sequence[KindProfile]:
        names = set(self._crd_profiles) | set(self._config.kinds)
        return [self.profile(gk) for gk in sorted(names)]

    @property
    def config(self) -> OperatorConfig:
        return self._config

    def policies(self) -> Iterable[Policy]:
        return self._policies.values()

    def policy(self, key: ObjectKey) -> Policy | None:
        return self._policies.get(key)

    def policies_targeting(self, target: ObjectKey) -> Sequence[Policy]:
        """Policies that name `target` in a targetRef, or whose selector picks it now."""
        holders = self._by_target.get(target)
        selecting = self._by_selector.get((target.namespace, target.group_kind))
        if selecting:
            obj = self._by_key.get(target)
            picked = [p for p in selecting.values() if p.selects(target, obj)]
            if picked:
                holders = {**(holders or {}), **{p.key: p for p in picked}}
        return sorted(holders.values(), key=lambda p: p.order_key) if holders else ()

    def policies_selecting(self, namespace: str, gk: GroupKind) -> Sequence[Policy]:
        """Policies with a `targetSelectors` entry for `gk` in `namespace`, whatever it picks."""
        selecting = self._by_selector.get((namespace, gk))
        return sorted(selecting.values(), key=lambda p: p.order_key) if selecting else ()

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        ns = self.get(ObjectKey("", "Namespace", "", name))
        if ns is None:
            return None
        return meta.labels_of(ns)

    def reference_grants(self, namespace: str) -> Sequence[Mapping[str, Any]]:
        return [
            obj
            for key, obj in self._by_kind.get(kinds.REFERENCE_GRANT, {}).items()
            if key.namespace == namespace
        ]


def looks_like_policy(gk: GroupKind, obj: Mapping[str, Any], profile: KindProfile) -> bool:
    """A policy kind by label or config — or an unknown kind with a targetRef (SPEC §1.3)
    that names its target as policies do, by group and kind.

    A reference with an `apiVersion` is another API's (a VerticalPodAutoscaler's targetRef
    names a Deployment so, Flagger's Canary too): such an object in a folder `check` reads
    is no policy, and judging it as one denied it (docs/decisions.md)."""
    if gk in kinds.NEVER_POLICIES:
        return False
    if profile.known:
        return True
    spec = spec_of(obj)
    if spec is None or ("targetRef" not in spec and "targetRefs" not in spec):
        return False
    refs = spec.get("targetRefs")
    named = [spec.get("targetRef"), *(refs if isinstance(refs, list) else [])]
    return not any(isinstance(ref, Mapping) and "apiVersion" in ref for ref in named)


def policy_targets(policy: Policy, view: ClusterView) -> list[tuple[ObjectKey, str | None]]:
    """Where a policy attaches in `view`: what each targetRef names (with its section), and
    every object its `targetSelectors` pick there now (SPEC §1.7), in a fixed order."""
    namespace = policy.key.namespace
    found = {(ref.target_key(namespace), ref.section_name) for ref in policy.targets}
    for gk in {selector.group_kind for selector in policy.selectors}:
        for obj in view.objects(gk):
            key = key_of(obj)
            if key is not None and policy.selects(key, obj):
                found.add((key, None))
    return sorted(found, key=lambda pair: (pair[0], pair[1] or ""))


def _unfile_from(index: dict[Slot, dict[ObjectKey, Policy]], slot: Slot, key: ObjectKey) -> None:
    holders = index.get(slot)
    if holders is not None:
        holders.pop(key, None)
        if not holders:
            del index[slot]


def _target_keys(policy: Policy) -> set[ObjectKey]:
    return {ref.target_key(policy.key.namespace) for ref in policy.targets}


def _selector_slots(policy: Policy) -> set[tuple[str, GroupKind]]:
    """Each (namespace, kind) a `targetSelectors` entry searches: always the policy's own."""
    return {(policy.key.namespace, s.group_kind) for s in policy.selectors}


def _placement(policy: Policy | None) -> object:
    """What decides where a policy attaches: a change of it moves the policy."""
    return None if policy is None else (policy.targets, policy.selectors)
