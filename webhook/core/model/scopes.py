"""Which kinds are cluster-scoped, and a manifest as the API server would receive it.

`kubectl apply -f` gives a namespaced object without `metadata.namespace` the namespace of
its context (`-n`), and the API server keeps no namespace on a cluster-scoped one. `check`
and cluster-less runs read folders of such manifests, so they place each object the same way
before judging it (SPEC §7): scope comes from a CRD among the manifests, the kinds built into
Kubernetes and the Gateway API, or the catalog; any other kind is taken as namespaced, as
nearly every policy kind is. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.core.model import catalog, kinds
from webhook.core.model.profiles import defined_kind
from webhook.core.model.refs import GroupKind, group_of

# Cluster-scoped kinds a folder of manifests commonly holds (Kubernetes API reference).
BUILTIN_CLUSTER_SCOPED: frozenset[GroupKind] = frozenset(
    {
        *kinds.CLUSTER_SCOPED,
        GroupKind("", "Node"),
        GroupKind("", "PersistentVolume"),
        GroupKind("rbac.authorization.k8s.io", "ClusterRole"),
        GroupKind("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        GroupKind("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
        GroupKind("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
        GroupKind("apiregistration.k8s.io", "APIService"),
        GroupKind("scheduling.k8s.io", "PriorityClass"),
        GroupKind("storage.k8s.io", "StorageClass"),
        GroupKind("networking.k8s.io", "IngressClass"),
        GroupKind("node.k8s.io", "RuntimeClass"),
    }
)


def cluster_scoped_kinds(objects: Iterable[Mapping[str, Any]]) -> frozenset[GroupKind]:
    """The built-in and catalog cluster-scoped kinds, and those of the CRDs among `objects`
    (a CRD's own word wins over the catalog's)."""
    scoped = set(BUILTIN_CLUSTER_SCOPED)
    scoped.update(e.group_kind for e in catalog.CATALOG if e.cluster_scoped)
    for obj in objects:
        if _group_kind(obj) != kinds.CRD or (gk := defined_kind(obj)) is None:
            continue
        spec = obj.get("spec")
        if isinstance(spec, Mapping) and spec.get("scope") == "Cluster":
            scoped.add(gk)
        else:
            scoped.discard(gk)
    return frozenset(scoped)


def as_applied(
    obj: Mapping[str, Any], *, namespace: str, cluster_scoped: frozenset[GroupKind]
) -> Mapping[str, Any]:
    """`obj` placed as `kubectl apply -n <namespace>` would: a namespaced object without a
    namespace gets it; a cluster-scoped one keeps none. Unchanged objects are returned as is."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return obj
    current = metadata.get("namespace")
    if _group_kind(obj) in cluster_scoped:
        if current is None:
            return obj
        return {**obj, "metadata": {k: v for k, v in metadata.items() if k != "namespace"}}
    if isinstance(current, str) and current:
        return obj
    return {**obj, "metadata": {**metadata, "namespace": namespace}}


def _group_kind(obj: Mapping[str, Any]) -> GroupKind:
    kind = obj.get("kind")
    return GroupKind(group_of(obj.get("apiVersion")), kind if isinstance(kind, str) else "")
