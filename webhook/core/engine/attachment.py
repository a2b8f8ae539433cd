"""Attachment: what hierarchy objects say about each other, and who may attach where.

Read from one object at a time, no paths: a route's parentRefs and backendRefs (defaults
filled in), a ListenerSet's parent, LabelSelectors, `allowedRoutes`/`allowedListeners`, and
whether a cross-namespace backendRef is granted. `hierarchy` builds contexts from these; the
rules read them too. Decisions (SPEC §4.2, docs/decisions.md): `from: Selector` sees the
Namespace's labels plus `kubernetes.io/metadata.name`, which the API server sets on every
Namespace (also when the Namespace object is not known); only Service backends count.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core.model import kinds
from webhook.core.model.labels import selector_matches
from webhook.core.model.policy import Policy
from webhook.core.model.refs import (
    CORE_GROUP,
    GATEWAY_GROUP,
    GroupKind,
    ObjectKey,
    canonical_group,
    key_of,
)
from webhook.core.state.grants import reference_granted
from webhook.core.state.store import ClusterView

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


def parent_refs(route: ObjectKey, obj: Mapping[str, Any]) -> list[ParentRef]:
    """`spec.parentRefs`, defaults filled in (group gateway.networking.k8s.io, kind Gateway)."""
    out = []
    for ref in _list(spec_mapping(obj).get("parentRefs")):
        key = _ref_key(ref, GATEWAY_GROUP, "Gateway", route.namespace)
        if key is not None:
            section = ref.get("sectionName")
            out.append(ParentRef(key, section if isinstance(section, str) and section else None))
    return out


def backend_refs(route: ObjectKey, obj: Mapping[str, Any]) -> list[BackendRef]:
    """Service backends of every rule; other backend kinds have no place on the ladder."""
    out = []
    for rule in _list(spec_mapping(obj).get("rules")):
        name = rule.get("name")
        rule_name = name if isinstance(name, str) and name else None
        for ref in _list(rule.get("backendRefs")):
            key = _ref_key(ref, CORE_GROUP, "Service", route.namespace)
            if key is not None and key.group_kind == kinds.SERVICE:
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
    if listener.get("protocol") not in kinds.ROUTE_PROTOCOLS.get(gk, frozenset()):
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
