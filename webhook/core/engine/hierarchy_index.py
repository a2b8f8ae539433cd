"""The hierarchy index: references between hierarchy objects, by referent, for reverse lookups.

"Which routes name this Gateway as a parent", "which routes send to this Service", "which
Gateways use this class" — what `hierarchy` needs to walk down from a rung (fan-out, impact
previews) and to find a Service's routes, without scanning every route. A store's is built
once and then kept object by object as the store is written (`memo.StoreMemo`); an overlay's is
a layer over its base's. Raw references only, admission is checked by the callers.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Set
from typing import Any, Literal

from webhook.core.engine.attachment import (
    backend_refs,
    listener_set_parent,
    parent_refs,
    spec_mapping,
)
from webhook.core.model import kinds, meta
from webhook.core.model.refs import CORE_GROUP, GATEWAY_GROUP, GroupKind, ObjectKey
from webhook.core.state.store import ClusterView, Store

Table = Literal["class", "listenerset", "parent", "backend", "namespace"]
Bucket = tuple[Table, object]
# The kinds whose objects refer to others up the hierarchy, or are referred to: a write to one
# of them is what moves entries of an index (`memo.StoreMemo`).
INDEXED_KINDS = frozenset({kinds.GATEWAY, kinds.LISTENER_SET, *kinds.ROUTE_KINDS, kinds.SERVICE})
_NONE: frozenset[ObjectKey] = frozenset()
# A bucket of at most this many members is a tuple, not a set: most are small (at the
# benchmark's default scale, 4,900 of 5,100 are a Service's few routes), and the smallest
# set is the size of a tuple of 22. Above it, a set, for the `in` of a busy Service's routes.
SMALL = 8
Members = set[ObjectKey] | tuple[ObjectKey, ...]


class HierarchyIndex:
    """Raw references between hierarchy objects, by referent, for reverse lookups.

    Holds what objects *say* (parentRefs, backendRefs, class names), not whether they are
    admitted: callers check admission on the few candidates. A store's index is moved one
    object at a time as the store is written (`move`: O(that object's references), where
    rebuilding it would read every route); an overlaid view gets a thin layer (`base` plus what
    its few objects add or remove), never a copy. What `members` returns is read-only, and for a
    store's own index it is the index's own set: read it before the store is written again.
    """

    __slots__ = ("_added", "_base", "_removed")

    def __init__(
        self,
        added: dict[Bucket, Members],
        removed: Mapping[Bucket, Set[ObjectKey]] | None = None,
        base: HierarchyIndex | None = None,
    ) -> None:
        self._added = added
        self._removed = removed or {}
        self._base = base

    def members(self, table: Table, bucket: object) -> Collection[ObjectKey]:
        """Each member once; a set or, for a few, a tuple (`SMALL`)."""
        own = self._added.get((table, bucket), _NONE)
        if self._base is None:
            return own
        below = self._base.members(table, bucket)
        gone = self._removed.get((table, bucket), _NONE)
        if not own and not gone:  # a bucket the overlay leaves alone: the base's, read-only
            return below
        found = set(below)
        found.difference_update(gone)
        found.update(own)
        return found

    def gateways_of_class(self, name: str) -> Collection[ObjectKey]:
        return self.members("class", name)

    def listener_sets_of(self, gateway: ObjectKey) -> Collection[ObjectKey]:
        return self.members("listenerset", gateway)

    def routes_of_parent(self, parent: ObjectKey) -> Collection[ObjectKey]:
        return self.members("parent", parent)

    def routes_of_backend(self, service: ObjectKey) -> Collection[ObjectKey]:
        return self.members("backend", service)

    def in_namespace(self, namespace: str) -> Collection[ObjectKey]:
        return self.members("namespace", namespace)

    def move(
        self, key: ObjectKey, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None
    ) -> None:
        """Replace what one object says (`old`, as indexed) with what it says now (`new`).

        Exact: an object only ever files itself, so its old entries are its own to take back.
        Only for an index of its own (a store's), never for an overlay's layer.
        """
        assert self._base is None, "an overlay's layer is never moved"
        buckets = self._added
        for bucket, member in _edges(key, old) if old is not None else ():
            found = buckets.get(bucket)
            if found is None:
                continue
            if type(found) is tuple:
                kept = tuple(m for m in found if m != member)
                if kept:
                    buckets[bucket] = kept
                else:
                    del buckets[bucket]
            else:
                assert type(found) is set
                found.discard(member)
                if not found:
                    del buckets[bucket]
                elif len(found) <= SMALL:  # back to a tuple, as `build_index` makes it
                    buckets[bucket] = tuple(found)
        for bucket, member in _edges(key, new) if new is not None else ():
            found = buckets.get(bucket, ())
            if type(found) is tuple:
                if member not in found:
                    buckets[bucket] = _kept({*found, member})
            else:
                assert type(found) is set
                found.add(member)

    def overlaid(
        self, changes: Mapping[ObjectKey, tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]]
    ) -> HierarchyIndex:
        """This index as seen through an overlay that replaced a few objects."""
        added: dict[Bucket, Members] = {}  # sets: a layer is never moved
        removed: dict[Bucket, set[ObjectKey]] = {}
        for key, (old, new) in changes.items():
            for bucket, member in _edges(key, old) if old is not None else ():
                removed.setdefault(bucket, set()).add(member)
            for bucket, member in _edges(key, new) if new is not None else ():
                layer = added.setdefault(bucket, set())
                assert type(layer) is set
                layer.add(member)
        return HierarchyIndex(added, removed, self)


def referents(key: ObjectKey, obj: Mapping[str, Any]) -> Iterator[tuple[Table, ObjectKey]]:
    """What one object refers to, by table, as keys: its Namespace, a Gateway's class, a
    ListenerSet's Gateway, a route's parents and backends. The reverse of the lookups above:
    where a walk down the hierarchy, which goes by those lookups, comes to this object from."""
    for (table, referent), _ in _edges(key, obj):
        if table == "namespace":
            yield table, ObjectKey(CORE_GROUP, "Namespace", "", str(referent))
        elif table == "class":
            yield table, ObjectKey(GATEWAY_GROUP, "GatewayClass", "", str(referent))
        elif isinstance(referent, ObjectKey):
            yield table, referent


def _edges(key: ObjectKey, obj: Mapping[str, Any]) -> Iterator[tuple[Bucket, ObjectKey]]:
    """What one object contributes to the index."""
    gk = key.group_kind
    if gk not in INDEXED_KINDS:
        return
    if key.namespace:
        yield ("namespace", key.namespace), key
    if gk == kinds.GATEWAY:
        class_name = spec_mapping(obj).get("gatewayClassName")
        if isinstance(class_name, str):
            yield ("class", class_name), key
    elif gk == kinds.LISTENER_SET:
        parent = listener_set_parent(key, obj)
        if parent is not None:
            yield ("listenerset", parent), key
    elif gk in kinds.ROUTE_KINDS:
        for ref in parent_refs(key, obj):
            yield ("parent", ref.key), key
        for backend in backend_refs(key, obj):
            yield ("backend", backend.key), key


def _keyed_objects(
    view: ClusterView, gk: GroupKind
) -> Iterator[tuple[ObjectKey, Mapping[str, Any]]]:
    """Every object of a kind with its key: a store's own keys, so that the index's sets hold
    them rather than a copy of each (a fifth of the index, at the benchmark's default scale)."""
    if isinstance(view, Store):
        yield from zip(view.keys(gk), view.objects(gk), strict=True)
        return
    for obj in view.objects(gk):
        name = meta.name(obj)
        if name:
            yield ObjectKey(gk.group, gk.kind, meta.namespace(obj), name), obj


def build_index(view: ClusterView) -> HierarchyIndex:
    buckets: dict[Bucket, set[ObjectKey]] = {}
    for gk in sorted(INDEXED_KINDS):
        for key, obj in _keyed_objects(view, gk):
            for bucket, member in _edges(key, obj):
                buckets.setdefault(bucket, set()).add(member)
    return HierarchyIndex({bucket: _kept(members) for bucket, members in buckets.items()})


def _kept(members: set[ObjectKey]) -> Members:
    """A bucket as the index keeps it: a tuple of few members, else a set copied once built
    (a set grown one member at a time holds a table up to twice the size)."""
    return tuple(members) if len(members) <= SMALL else set(members)
