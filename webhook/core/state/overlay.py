"""A `ClusterView` seen through a few replaced, added or removed objects.

Admission computes on "the cluster as it would be": the incoming object of a request in place
of the stored one, or a policy's before/after for an impact preview. The overlay answers every
read from its handful of objects first and from the base view otherwise — nothing is copied,
so it costs the same on a 10-object cluster and a 10,000-route one. Never written through.

Limits (docs/decisions.md): an overlaid CRD does not change kind profiles (profiles come from
the base); an overlaid policy is read with the base's profile of its kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from webhook.core.model import kinds, meta
from webhook.core.model.policy import Policy, read_policy
from webhook.core.model.profiles import KindProfile
from webhook.core.model.refs import GroupKind, ObjectKey, key_of
from webhook.core.state.store import ClusterView, looks_like_policy

if TYPE_CHECKING:  # the engine's memo of this overlay: made and kept there
    from webhook.core.engine.memo import OverlayMemo

Change = tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]  # (base's, overlay's)


class OverlayView:
    """`base` with `upserts` put in (replacing objects of the same key) and `deletes` taken out."""

    def __init__(
        self,
        base: ClusterView,
        *,
        upserts: Iterable[Mapping[str, Any]] = (),
        deletes: Iterable[ObjectKey] = (),
    ) -> None:
        self.base = base
        self._objects: dict[ObjectKey, Mapping[str, Any] | None] = {}
        for gone in deletes:
            self._objects[gone] = None
        for added in upserts:
            added_key = key_of(added)
            if added_key is not None:
                self._objects[added_key] = added
        # Overlaid policies, parsed once; None marks a key that is no policy here (any more).
        self._policies: dict[ObjectKey, Policy | None] = {}
        for key, obj in self._objects.items():
            policy = None
            if obj is not None and looks_like_policy(
                key.group_kind, obj, base.profile(key.group_kind)
            ):
                policy = read_policy(obj, base.profile(key.group_kind))
            self._policies[key] = policy
        self._overlaid = frozenset(self._objects)
        self.memo: OverlayMemo | None = None  # see `engine/memo.py`

    def changes(self) -> dict[ObjectKey, Change]:
        """Each overlaid key with the base's object and the overlay's (None: absent)."""
        return {key: (self.base.get(key), obj) for key, obj in self._objects.items()}

    @property
    def overlaid(self) -> frozenset[ObjectKey]:
        return self._overlaid

    # --- ClusterView --------------------------------------------------------------------------

    def get(self, key: ObjectKey) -> Mapping[str, Any] | None:
        if key in self._objects:
            return self._objects[key]
        return self.base.get(key)

    def objects(self, gk: GroupKind) -> Iterable[Mapping[str, Any]]:
        mine = {k: o for k, o in self._objects.items() if k.group_kind == gk}
        if not mine:
            return self.base.objects(gk)
        return list(self._merged(gk, mine))

    def _merged(
        self, gk: GroupKind, mine: Mapping[ObjectKey, Mapping[str, Any] | None]
    ) -> Iterator[Mapping[str, Any]]:
        for obj in self.base.objects(gk):
            key = key_of(obj)
            if key is None or key not in mine:
                yield obj
        yield from (obj for obj in mine.values() if obj is not None)

    def profile(self, gk: GroupKind) -> KindProfile:
        return self.base.profile(gk)

    def policy_kinds(self) -> Sequence[KindProfile]:
        return self.base.policy_kinds()

    def policies(self) -> Iterable[Policy]:
        for policy in self.base.policies():
            if policy.key not in self._policies:
                yield policy
        yield from (p for p in self._policies.values() if p is not None)

    def policy(self, key: ObjectKey) -> Policy | None:
        if key in self._policies:
            return self._policies[key]
        return self.base.policy(key)

    def policies_targeting(self, target: ObjectKey) -> Sequence[Policy]:
        base = self.base.policies_targeting(target)
        found = {p.key: p for p in base if p.key not in self._policies}
        obj = self.get(target)
        if target in self._objects:
            # The base judged its selectors on the base's labels: judge them again on ours.
            found = {k: p for k, p in found.items() if p.names(target)}
            for p in self.base.policies_selecting(target.namespace, target.group_kind):
                if p.key not in self._policies and p.selects(target, obj):
                    found[p.key] = p
        added = [
            p
            for p in self._policies.values()
            if p is not None and (p.names(target) or p.selects(target, obj))
        ]
        if not added and len(found) == len(base) and all(p.key in found for p in base):
            return base
        return sorted([*found.values(), *added], key=lambda p: p.order_key)

    def policies_selecting(self, namespace: str, gk: GroupKind) -> Sequence[Policy]:
        base = self.base.policies_selecting(namespace, gk)
        mine = [
            p
            for p in self._policies.values()
            if p is not None
            and p.key.namespace == namespace
            and any(s.group_kind == gk for s in p.selectors)
        ]
        if not mine and not any(p.key in self._policies for p in base):
            return base
        kept = [p for p in base if p.key not in self._policies]
        return sorted([*kept, *mine], key=lambda p: p.order_key)

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        key = ObjectKey("", "Namespace", "", name)
        if key not in self._objects:
            return self.base.namespace_labels(name)
        ns = self._objects[key]
        if ns is None:
            return None
        return meta.labels_of(ns)

    def reference_grants(self, namespace: str) -> Sequence[Mapping[str, Any]]:
        mine = {
            k: o
            for k, o in self._objects.items()
            if k.group_kind == kinds.REFERENCE_GRANT and k.namespace == namespace
        }
        if not mine:
            return self.base.reference_grants(namespace)
        kept = [g for g in self.base.reference_grants(namespace) if key_of(g) not in mine]
        return [*kept, *(o for o in mine.values() if o is not None)]
