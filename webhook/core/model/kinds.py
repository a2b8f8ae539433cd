"""What this project knows about the kinds policies can target.

Facts from the Gateway API (v1.6): which kinds are cluster-scoped, which have sections and
where those sections live in the object, and which kinds a policy may target by default
(SPEC §1.4). Everything else about a kind comes from its CRD or the operator's profile.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core.model.refs import CORE_GROUP, GATEWAY_GROUP, GroupKind, ObjectKey

GATEWAY_CLASS = GroupKind(GATEWAY_GROUP, "GatewayClass")
GATEWAY = GroupKind(GATEWAY_GROUP, "Gateway")
LISTENER_SET = GroupKind(GATEWAY_GROUP, "ListenerSet")
HTTP_ROUTE = GroupKind(GATEWAY_GROUP, "HTTPRoute")
GRPC_ROUTE = GroupKind(GATEWAY_GROUP, "GRPCRoute")
TLS_ROUTE = GroupKind(GATEWAY_GROUP, "TLSRoute")
TCP_ROUTE = GroupKind(GATEWAY_GROUP, "TCPRoute")
UDP_ROUTE = GroupKind(GATEWAY_GROUP, "UDPRoute")
REFERENCE_GRANT = GroupKind(GATEWAY_GROUP, "ReferenceGrant")
SERVICE = GroupKind(CORE_GROUP, "Service")
NAMESPACE = GroupKind(CORE_GROUP, "Namespace")
CRD = GroupKind("apiextensions.k8s.io", "CustomResourceDefinition")

ROUTE_KINDS = frozenset({HTTP_ROUTE, GRPC_ROUTE, TLS_ROUTE, TCP_ROUTE, UDP_ROUTE})

# SPEC §1.4: what a kind without a profile may target.
DEFAULT_TARGETS = frozenset(
    {GATEWAY_CLASS, GATEWAY, LISTENER_SET, *ROUTE_KINDS, SERVICE, NAMESPACE}
)

# Kinds whose objects the mutating webhook annotates (SPEC §3.1).
# The objects of the ladder (SPEC §4.1; Namespaces are implied rungs, not objects of it), least
# specific first: the kinds whose objects are rungs of contexts, and the ones annotated (§3.1).
LADDER: tuple[frozenset[GroupKind], ...] = (
    frozenset({GATEWAY_CLASS}),
    frozenset({GATEWAY}),
    frozenset({LISTENER_SET}),
    ROUTE_KINDS,
    frozenset({SERVICE}),
)
ANNOTATED_KINDS = frozenset().union(*LADDER)

CLUSTER_SCOPED = frozenset({GATEWAY_CLASS, NAMESPACE, CRD})

# Route kind → listener protocols it may attach to (SPEC §4.2; Gateway API "protocol fit").
ROUTE_PROTOCOLS: Mapping[GroupKind, frozenset[str]] = {
    HTTP_ROUTE: frozenset({"HTTP", "HTTPS"}),
    GRPC_ROUTE: frozenset({"HTTP", "HTTPS"}),
    TLS_ROUTE: frozenset({"TLS"}),
    TCP_ROUTE: frozenset({"TCP"}),
    UDP_ROUTE: frozenset({"UDP"}),
}


@dataclass(frozen=True, slots=True)
class SectionSpec:
    """Where a kind keeps its sections: a list under `spec` whose items carry a name."""

    list_field: str  # e.g. "listeners"
    what: str  # how people call one item, for messages: "listener", "rule", "port"


SECTIONS: Mapping[GroupKind, SectionSpec] = {
    GATEWAY: SectionSpec("listeners", "listener"),
    LISTENER_SET: SectionSpec("listeners", "listener"),
    **{route: SectionSpec("rules", "rule") for route in ROUTE_KINDS},
    SERVICE: SectionSpec("ports", "port"),
}


def has_sections(gk: GroupKind) -> bool:
    return gk in SECTIONS


def section_items(gk: GroupKind, obj: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The section items of an object (listeners, rules, ports), skipping malformed entries."""
    spec_of = SECTIONS.get(gk)
    spec = obj.get("spec")
    if spec_of is None or not isinstance(spec, Mapping):
        return
    items = spec.get(spec_of.list_field)
    if not isinstance(items, list):
        return
    for item in items:
        if isinstance(item, Mapping):
            yield item


def section_names(gk: GroupKind, obj: Mapping[str, Any]) -> frozenset[str]:
    """Names of the sections an object has; unnamed route rules are not sections (SPEC §2.2)."""
    return frozenset(
        item["name"] for item in section_items(gk, obj) if isinstance(item.get("name"), str)
    )


KNOWN_KINDS: tuple[GroupKind, ...] = (
    *sorted(DEFAULT_TARGETS),
    REFERENCE_GRANT,
    GroupKind(CORE_GROUP, "ConfigMap"),
    GroupKind(CORE_GROUP, "Secret"),
    GroupKind(CORE_GROUP, "Pod"),
    GroupKind(CORE_GROUP, "Endpoints"),
    GroupKind("apps", "Deployment"),
    GroupKind("gateway.networking.x-k8s.io", "XBackend"),
    GroupKind("gateway.networking.x-k8s.io", "XMesh"),
)


# Kinds that are never policies, whatever their spec looks like: the webhook never judges one
# as a policy, even when an admin's webhook rules send it (a group's `resources: ["*"]`).
NEVER_POLICIES = frozenset({*DEFAULT_TARGETS, REFERENCE_GRANT, CRD, *KNOWN_KINDS})


_RANKS: Mapping[tuple[str, str], int] = {gk: i for i, rung in enumerate(LADDER) for gk in rung}


def in_ladder_order(keys: Iterable[ObjectKey]) -> list[ObjectKey]:
    """`keys` least specific first, as the hierarchy reads — classes, Gateways, routes,
    Services, then kinds off the ladder — and by key within a rank, so that the first objects
    of a policy's reach are the telling ones. Bucketed by rank, each bucket sorted as tuples
    are, with no key function called per object (a Gateway's reach of 400: 0.6 times as long
    as a sort by (rank, key))."""
    buckets: dict[int, list[ObjectKey]] = {}
    ranks, last = _RANKS, len(LADDER)
    for key in keys:
        buckets.setdefault(ranks.get((key.group, key.kind), last), []).append(key)
    return [key for rank in sorted(buckets) for key in sorted(buckets[rank])]


def is_cluster_scoped(gk: GroupKind) -> bool:
    return gk in CLUSTER_SCOPED


def describe_kinds(gks: frozenset[GroupKind], *, brief: bool = False) -> str:
    """`Gateway, HTTPRoute (gateway.networking.k8s.io); Service (core)` — short enough to read;
    SPEC §1.4's whole list in its own words, so a line that names it stays short (§2.5), and
    `brief` for a line that has less room."""
    if gks == DEFAULT_TARGETS:
        if brief:
            return "Gateway API kinds, Service, Namespace"
        return "the Gateway API kinds, Service and Namespace (SPEC 1.4)"
    by_group: dict[str, list[str]] = {}
    for gk in gks:
        by_group.setdefault(gk.group, []).append(gk.kind)
    parts = [
        f"{', '.join(sorted(names))} ({group or 'core'})"
        for group, names in sorted(by_group.items(), key=lambda item: (item[0] == "", item[0]))
    ]
    return "; ".join(parts)
