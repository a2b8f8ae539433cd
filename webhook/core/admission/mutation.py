"""The `/mutate` patch: our annotation and nothing else (SPEC §3.1).

The summary is computed on the cluster as it will be once this request lands: the incoming
object (its parentRefs, listeners, backendRefs as submitted) overlaid on the view. The patch
adds, replaces or removes one key under `metadata.annotations` and never touches anything else.
When the incoming object differs from the stored one only where no summary reads (the
reconciler's own patch coming back, a label or status write), that cluster *is* the view, and
the value is the cache's: the same string, without a second computation. A value computed on
the overlay is handed to the cache (`SummaryCache.admitted`), which keeps it if the object is
written as it was shown and nothing else is written first: the leader, checking the new
object, then computes nothing.
Decision (docs/decisions.md): a CREATE with `generateName` and no name yet gets no patch;
nothing can target an object without a name, and the reconciler annotates it once it exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.admission.reviews import Request
from webhook.core.annotation import summary
from webhook.core.annotation.cache import SummaryCache
from webhook.core.model import kinds, pointer
from webhook.core.model.refs import GroupKind, ObjectKey, group_of
from webhook.core.model.settings import Settings
from webhook.core.state.overlay import OverlayView
from webhook.core.state.store import ClusterView
from webhook.core.state.trim import relevant, trim

MAX_NAME = 253  # a DNS subdomain: the longest name of any object we annotate
MAX_NAMESPACE = 63  # a DNS label


def mutate(
    request: Request,
    *,
    view: ClusterView,
    settings: Settings,
    cache: SummaryCache | None = None,
) -> list[dict[str, Any]]:
    """JSON Patch (RFC 6902) operations that bring our annotation up to date; [] when it is.

    `cache` holds the summaries of `view` (a cache of that very store), if there is one.
    """
    if request["operation"] not in ("CREATE", "UPDATE") or request.get("subResource"):
        return []
    gk = GroupKind(request["kind"].get("group", ""), request["kind"]["kind"])
    obj = request.get("object")
    if gk not in kinds.ANNOTATED_KINDS or not isinstance(obj, Mapping):
        return []
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return []
    incoming, key = _with_identity(obj, metadata, gk, request)
    if key is None:
        return []
    if cache is None:
        value = summary.summarize(key, OverlayView(view, upserts=[incoming]), settings)
    elif unchanged_for_summaries(key, incoming, view):
        value = cache.get(key)  # the overlay would be the view itself: same value (SPEC §5.8)
    else:
        found = summary.summarize_in_pieces(key, OverlayView(view, upserts=[incoming]), settings)
        cache.admitted(key, incoming, found)  # the write that follows needs no computation
        value = summary.text(found[0])
    return patch_for(metadata.get("annotations"), settings.annotation_key, value)


def unchanged_for_summaries(key: ObjectKey, incoming: Mapping[str, Any], view: ClusterView) -> bool:
    """Whether `view` holds `key` as `incoming` in everything a summary reads.

    Both trimmed as the informers trim what they store (the store may hold either form),
    then compared without what no summary reads (`trim.relevant`).
    """
    stored = view.get(key)
    if stored is None:
        return False
    return relevant(trim(incoming)) == relevant(trim(stored))


def patch_for(annotations: object, annotation_key: str, value: str | None) -> list[dict[str, Any]]:
    """The operations that make `annotations[annotation_key]` equal `value` (None: absent)."""
    present = isinstance(annotations, Mapping) and annotation_key in annotations
    if value is None:
        if not present:
            return []
        return [{"op": "remove", "path": pointer.join(("metadata", "annotations", annotation_key))}]
    if not isinstance(annotations, Mapping):
        # No map at all (or `annotations: null`): a member path would have no parent to go in.
        return [{"op": "add", "path": "/metadata/annotations", "value": {annotation_key: value}}]
    if present and annotations[annotation_key] == value:
        return []
    op = "replace" if present else "add"
    return [
        {
            "op": op,
            "path": pointer.join(("metadata", "annotations", annotation_key)),
            "value": value,
        }
    ]


def _with_identity(
    obj: Mapping[str, Any], metadata: Mapping[str, Any], gk: GroupKind, request: Request
) -> tuple[Mapping[str, Any], ObjectKey | None]:
    """The object with the namespace and apiVersion the request implies, and its key.

    A namespaced CREATE may leave `metadata.namespace` to the request path; the key must
    still be the object's real one, or no policy would find it.
    """
    name = metadata.get("name") or request.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME:
        # Over 253 characters it is no Kubernetes name: the API server validates names only
        # after mutating admission and will refuse this object, so there is nothing to annotate
        # (and a megabyte name would be copied into every path of the summary).
        return obj, None
    namespace = metadata.get("namespace") or request.get("namespace") or ""
    if kinds.is_cluster_scoped(gk) or not isinstance(namespace, str):
        namespace = ""
    if len(namespace) > MAX_NAMESPACE:
        return obj, None
    fixed = dict(obj)
    fixed["metadata"] = {
        **metadata,
        "name": name,
        **({"namespace": namespace} if namespace else {}),
    }
    if group_of(obj.get("apiVersion")) != gk.group or obj.get("kind") != gk.kind:
        version = request["kind"].get("version", "v1")
        fixed["apiVersion"] = f"{gk.group}/{version}" if gk.group else version
        fixed["kind"] = gk.kind
    return fixed, ObjectKey(gk.group, gk.kind, namespace, name)
