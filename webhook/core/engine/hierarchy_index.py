"""The hierarchy index: references between hierarchy objects, by referent, for reverse lookups.

"Which routes name this Gateway as a parent", "which routes send to this Service", "which
Gateways use this class" — what `hierarchy` needs to walk down from a rung (fan-out, impact
previews) and to find a Service's routes, without scanning every route. Built once per store
state and layered for an overlay; raw references only, admission is checked by the callers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from webhook.core.engine.attachment import (
    backend_refs,
    listener_set_parent,
    parent_refs,
    spec_mapping,
)
from webhook.core.model import kinds, meta
from webhook.core.model.refs import ObjectKey
from webhook.core.state.store import ClusterView

Table = Literal["class", "listenerset", "parent", "backend", "namespace"]
Bucket = tuple[Table, object]
# The kinds whose objects refer to others up the hierarchy, or are referred to: a write to one
# of them is what makes an index stale (`memo.StoreMemo.index`).
INDEXED_KINDS = frozenset({kinds.GATEWAY, kinds.LISTENER_SET, *kinds.ROUTE_KINDS, kinds.SERVICE})


@dataclass(frozen=True, slots=True)
class HierarchyIndex:
    """Raw references between hierarchy objects, by referent, for reverse lookups.

    Built once per store state (`memo.StoreMemo` keeps it until a hierarchy object changes).
    Holds what objects *say* (parentRefs, backendRefs, class names), not whether they are
    admitted: callers check admission on the few candidates. An overlaid view gets a thin
    layer (`base` plus what its few objects add or remove), never a copy.
    """

    added: Mapping[Bucket, frozenset[ObjectKey]]
    removed: Mapping[Bucket, frozenset[ObjectKey]] = field(default_factory=dict)
    base: HierarchyIndex | None = None

    def members(self, table: Table, bucket: object) -> frozenset[ObjectKey]:
        own = self.added.get((table, bucket), frozenset())
        if self.base is None:
            return own
        gone = self.removed.get((table, bucket), frozenset())
        return (self.base.members(table, bucket) - gone) | own

    def gateways_of_class(self, name: str) -> frozenset[ObjectKey]:
        return self.members("class", name)

    def listener_sets_of(self, gateway: ObjectKey) -> frozenset[ObjectKey]:
        return self.members("listenerset", gateway)

    def routes_of_parent(self, parent: ObjectKey) -> frozenset[ObjectKey]:
        return self.members("parent", parent)

    def routes_of_backend(self, service: ObjectKey) -> frozenset[ObjectKey]:
        return self.members("backend", service)

    def in_namespace(self, namespace: str) -> frozenset[ObjectKey]:
        return self.members("namespace", namespace)

    def overlaid(
        self, changes: Mapping[ObjectKey, tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]]
    ) -> HierarchyIndex:
        """This index as seen through an overlay that replaced a few objects."""
        added: dict[Bucket, set[ObjectKey]] = {}
        removed: dict[Bucket, set[ObjectKey]] = {}
        for key, (old, new) in changes.items():
            for bucket, member in _edges(key, old) if old is not None else ():
                removed.setdefault(bucket, set()).add(member)
            for bucket, member in _edges(key, new) if new is not None else ():
                added.setdefault(bucket, set()).add(member)
        return HierarchyIndex(
            {b: frozenset(m) for b, m in added.items()},
            {b: frozenset(m) for b, m in removed.items()},
            self,
        )


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


def build_index(view: ClusterView) -> HierarchyIndex:
    buckets: dict[Bucket, set[ObjectKey]] = {}
    for gk in sorted(INDEXED_KINDS):
        for obj in view.objects(gk):
            name = meta.name(obj)
            if not name:
                continue
            key = ObjectKey(gk.group, gk.kind, meta.namespace(obj), name)
            for bucket, member in _edges(key, obj):
                buckets.setdefault(bucket, set()).add(member)
    return HierarchyIndex({b: frozenset(m) for b, m in buckets.items()})
