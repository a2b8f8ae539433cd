"""Attachment: who attaches where — policies to their targets, objects to each other.

- Policies: where a policy counts (SPEC §2.2, the engine's side of PA-T01/T03/T04, whose
  admission side `rules.targets` reports with the same predicates), and the policies attached
  to each object and rung (`Attachments`), kept in the engine memo for the view's state.
- Hierarchy objects, read one at a time, no paths: a route's parentRefs and backendRefs
  (defaults filled in), a ListenerSet's parent, `allowedRoutes`/`allowedListeners`, and whether
  a cross-namespace backendRef is granted. `hierarchy` builds contexts from these. Decisions (SPEC §4.2, docs/decisions.md): `from: Selector` sees the
Namespace's labels plus `kubernetes.io/metadata.name`, which the API server sets on every
Namespace (also when the Namespace object is not known); only Service backends count.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from webhook.core.model import kinds
from webhook.core.model.labels import selector_matches
from webhook.core.model.policy import Policy
from webhook.core.model.profiles import KindProfile
from webhook.core.model.refs import (
    CORE_GROUP,
    GATEWAY_GROUP,
    GroupKind,
    ObjectKey,
    canonical_group,
)
from webhook.core.state.grants import reference_granted
from webhook.core.state.store import ClusterView

if TYPE_CHECKING:
    from webhook.core.engine.hierarchy import Rung
    from webhook.core.engine.memo import EngineMemo

NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every Namespace


# --- references read from objects ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParentRef:
    key: ObjectKey  # a Gateway, a ListenerSet, or (mesh) a Service
    section: str | None


@dataclass(frozen=True, slots=True)
class BackendRef:
    rule: str | None  # the rule's name, when it has one
    key: ObjectKey  # always a Service
    port: int | None


def parent_refs(
    route: ObjectKey, obj: Mapping[str, Any], keys: dict[ObjectKey, ObjectKey] | None = None
) -> list[ParentRef]:
    """`spec.parentRefs`, defaults filled in (group gateway.networking.k8s.io, kind Gateway).

    `keys`: where a memo keeps each parent's key once, as `backend_refs` does its Services'.
    """
    out = []
    for ref in _list(spec_mapping(obj).get("parentRefs")):
        key = _ref_key(ref, GATEWAY_GROUP, "Gateway", route.namespace)
        if key is not None:
            if keys is not None:
                key = keys.setdefault(key, key)
            section = ref.get("sectionName")
            out.append(ParentRef(key, section if isinstance(section, str) and section else None))
    return out


def backend_refs(
    route: ObjectKey, obj: Mapping[str, Any], keys: dict[ObjectKey, ObjectKey] | None = None
) -> list[BackendRef]:
    """Service backends of every rule; other backend kinds have no place on the ladder.

    `keys`: where a memo keeps each Service's key once (thousands of routes send to one
    Service; each reading would otherwise hold a key of its own). None: keys made anew.
    """
    out = []
    for rule in _list(spec_mapping(obj).get("rules")):
        name = rule.get("name")
        rule_name = name if isinstance(name, str) and name else None
        for ref in _list(rule.get("backendRefs")):
            key = _ref_key(ref, CORE_GROUP, "Service", route.namespace)
            if key is not None and key.group_kind == kinds.SERVICE:
                if keys is not None:
                    key = keys.setdefault(key, key)
                port = ref.get("port")
                out.append(BackendRef(rule_name, key, port if isinstance(port, int) else None))
    return out


def listener_set_parent(ls: ObjectKey, obj: Mapping[str, Any]) -> ObjectKey | None:
    ref = spec_mapping(obj).get("parentRef")
    key = (
        _ref_key(ref, GATEWAY_GROUP, "Gateway", ls.namespace) if isinstance(ref, Mapping) else None
    )
    return key if key is not None and key.group_kind == kinds.GATEWAY else None


def _ref_key(ref: Mapping[str, Any], group: str, kind: str, namespace: str) -> ObjectKey | None:
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        return None
    g, k, ns = ref.get("group", group), ref.get("kind", kind), ref.get("namespace") or namespace
    if not (isinstance(g, str) and isinstance(k, str) and isinstance(ns, str)):
        return None
    return ObjectKey(canonical_group(g), k, ns, name)


def spec_mapping(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """An object's `spec`; `{}` where it has none, or none that is an object."""
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _list(value: object) -> Iterator[Mapping[str, Any]]:
    if isinstance(value, list):
        yield from (item for item in value if isinstance(item, Mapping))


# --- where a policy counts (SPEC §2.2) ---------------------------------------------------------


def own_namespace_only(policy_namespace: str, target: ObjectKey) -> bool:
    """PA-T04's fact: a policy in a namespace may target only its own Namespace."""
    return target.group_kind != kinds.NAMESPACE or target.name == policy_namespace


def crossing_allowed(
    policy_gk: GroupKind,
    policy_namespace: str,
    target: ObjectKey,
    profile: KindProfile,
    view: ClusterView,
) -> bool:
    """PA-T03's fact: a namespaced target of another namespace counts only with a
    ReferenceGrant there, and never where the kind's profile says `crossNamespace: deny`.
    A cluster-scoped policy crosses nothing (it is a cluster admin's object)."""
    if not policy_namespace or not target.namespace or target.namespace == policy_namespace:
        return True
    if profile.cross_namespace == "deny":
        return False
    return reference_granted(policy_gk, policy_namespace, target, view)


def counts_on(policy: Policy, target: ObjectKey, view: ClusterView) -> bool:
    """Whether a policy that names `target` takes part in its effective policy: a target kind
    its profile lists (else PA-T01: not shown), its own Namespace only, a crossing granted."""
    gk = policy.key.group_kind
    profile = view.profile(gk)
    namespace = policy.key.namespace
    return (
        target.group_kind in profile.allowed_targets
        and (not namespace or own_namespace_only(namespace, target))
        and crossing_allowed(gk, namespace, target, profile, view)
    )


# What `Attachments.at` answers for a rung that holds no policy (read-only, kept once).
_NONE_AT: Mapping[GroupKind, Sequence[Policy]] = MappingProxyType({})


class Attachments:
    """The policies that count on each object and on each rung (object and section), found
    once per state of the view and kept in its engine memo."""

    def __init__(self, view: ClusterView, memo: EngineMemo) -> None:
        self._view = view
        self._on = memo.attached
        self._at = memo.by_rung

    def on(self, key: ObjectKey) -> Sequence[tuple[Policy, str | None]]:
        """(policy, section or None) for every policy attached to `key`, SPEC §4.4 order."""
        found = self._on.get(key)
        if found is None:
            obj = self._view.get(key)
            pairs = {
                (p.key, section): (p, section)
                for p in self._view.policies_targeting(key)
                if counts_on(p, key, self._view)
                for section in p.sections_on(key, obj)
            }
            found = tuple(sorted(pairs.values(), key=lambda ps: (ps[0].order_key, ps[1] or "")))
            self._on[key] = found
        return found

    def at(self, rung: Rung) -> Mapping[GroupKind, Sequence[Policy]]:
        """The policies attached exactly at `rung` (its object and section), by kind."""
        found = self._at.get(rung)
        if found is None:
            by_kind: dict[GroupKind, list[Policy]] = {}
            for policy, section in self.on(rung.key):
                if section == rung.section:
                    by_kind.setdefault(policy.key.group_kind, []).append(policy)
            # Most rungs hold no policy: they share one empty answer instead of one each.
            found = self._at[rung] = by_kind or _NONE_AT
        return found


# --- who may attach where --------------------------------------------------------------------


def namespace_admitted(
    namespaces: object, *, owner_ns: str, ns: str, view: ClusterView, default: str
) -> bool:
    """`{from: Same|All|Selector|None, selector}` as in allowedRoutes and allowedListeners."""
    spec = namespaces if isinstance(namespaces, Mapping) else {}
    source = spec.get("from") or default
    if source == "All":
        return True
    if source == "Same":
        return ns == owner_ns
    if source == "Selector":
        labels = {**(view.namespace_labels(ns) or {}), NAME_LABEL: ns}
        return selector_matches(spec.get("selector"), labels)
    return False  # None, or a value this version of the API does not know


def listener_admits(
    listener: Mapping[str, Any], *, owner_ns: str, route: ObjectKey, view: ClusterView
) -> bool:
    """SPEC §4.2: namespace (default Same), kind (allowedRoutes.kinds) and protocol fit."""
    gk = route.group_kind
    protocol = listener.get("protocol")  # a list or a map would be unhashable: a 500
    if not isinstance(protocol, str) or protocol not in kinds.ROUTE_PROTOCOLS.get(gk, frozenset()):
        return False
    allowed = listener.get("allowedRoutes")
    allowed = allowed if isinstance(allowed, Mapping) else {}
    kinds_allowed = [
        GroupKind(canonical_group(str(k.get("group", GATEWAY_GROUP))), str(k.get("kind")))
        for k in _list(allowed.get("kinds"))
    ]
    if kinds_allowed and gk not in kinds_allowed:
        return False
    return namespace_admitted(
        allowed.get("namespaces"), owner_ns=owner_ns, ns=route.namespace, view=view, default="Same"
    )


def backend_allowed(route: ObjectKey, backend: BackendRef, view: ClusterView) -> bool:
    return backend.key.namespace == route.namespace or reference_granted(
        route.group_kind, route.namespace, backend.key, view
    )
