"""Cut an API object down to the fields the rules, the engine and the reconciler read.

The informers keep every Gateway API object, Service, Namespace, CRD and policy of a cluster in
memory, so whatever is not read here is dropped on arrival: `status`, `managedFields`,
`ownerReferences`, foreign annotations, a Service's IPs and selectors, a route's matches,
filters and hostnames. Pure: no IO.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping
from typing import Any

from webhook.core.model import kinds, meta
from webhook.core.model.profiles import is_policy_crd
from webhook.core.model.refs import GroupKind, group_of
from webhook.core.state.parts import NoSharing, SharedParts, Sharing

# Read by the rules (4.4 order, PA-T08 deleting targets), by key_of and by the informers.
_METADATA_FIELDS = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "labels",
)
# Written by the API server or by controllers, kept or not, never read by the engine or a rule's
# view of the hierarchy: a change of only these is no change to anything computed from the object.
_UNREAD_METADATA = frozenset({"annotations", "resourceVersion", "generation", "managedFields"})
# Where a trimmed object of a kind we annotate keeps our annotation, as a digest of its value
# (`mark_of`): a field beside the object's own, named as no Kubernetes field is. Not an
# `annotations` mapping of one entry: that was a dict per annotated object besides the digest,
# and a fifth top-level field costs a dict of four nothing (docs/performance.md, *Choices*).
MARK = "policy-webhook/annotation-digest"
_UNREAD_TOP = frozenset({"status", MARK})
# Set by the API server as it stores a new object, after mutating admission has seen it. Read of
# policies only (SPEC §4.4's order by age; an audit finding's uid), never for the summary of an
# annotated object: not kept of the kinds that are never policies (most of a cluster's objects).
_SET_WHEN_STORED = frozenset({"uid", "creationTimestamp"})
# A Service port is a section by `name` and is selected by `port` number (SPEC §2.2, §4.3).
_SERVICE_PORT_FIELDS = ("name", "port", "protocol")
# Of a route, only where it attaches and what it sends to (`attachment.parent_refs`,
# `backend_refs`): its parents, and per rule its name (a section, SPEC §2.2) and its backends.
# Routes are most of a cluster's objects, and their matches and filters most of each route.
_ROUTE_SPEC_FIELDS = ("parentRefs", "rules")
_ROUTE_RULE_FIELDS = ("name", "backendRefs")
_BACKEND_REF_FIELDS = ("group", "kind", "namespace", "name", "port")
# What discovery (plural, scope, served versions) and `profile_from_crd` read from a CRD.
_CRD_SPEC_FIELDS = ("group", "names", "scope")
_CRD_VERSION_FIELDS = ("name", "served", "storage")


def trim(
    obj: Mapping[str, Any], *, keep_annotation: str = "", parts: SharedParts | None = None
) -> dict[str, Any]:
    """A new, smaller object holding only what is read downstream; `obj` is left as it was.

    `keep_annotation` is the one annotation kept of a kind we annotate (the effective-policies
    key, which the reconciler compares before patching), as the `fingerprint` of its value
    under `MARK` (`mark_of`); every annotation is dropped from the metadata. With `parts` (a
    store's), a route's parents and backends, a Service's ports and labels are the equal ones
    other objects hold where there are such (`parts.SharedParts`).
    """
    kind = obj.get("kind")
    gk = GroupKind(group_of(obj.get("apiVersion")), kind if isinstance(kind, str) else "")
    shared = parts if parts is not None else _NO_SHARING
    out: dict[str, Any] = {}
    for field in ("apiVersion", "kind"):
        if field in obj:
            out[field] = _word(obj[field])
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping):
        out["metadata"] = _trim_metadata(metadata, gk, shared)
    if keep_annotation and gk in kinds.ANNOTATED_KINDS:
        mark = mark_of(obj, keep_annotation)
        if mark is not None:
            out[MARK] = mark
    spec = obj.get("spec")
    if gk == kinds.NAMESPACE or spec is None:
        return out  # a Namespace matters only by its name and labels (allowedRoutes selectors)
    if gk == kinds.SERVICE:
        out["spec"] = _trim_service_spec(spec, shared)
    elif gk in kinds.ROUTE_KINDS:
        out["spec"] = _trim_route_spec(spec, shared)
    elif gk == kinds.CRD:
        out["spec"] = _trim_crd_spec(spec, is_policy=is_policy_crd(obj))
    else:
        out["spec"] = spec  # Gateways, ListenerSets and policies: the rules read all of it
    return out


_NO_SHARING = NoSharing()


def _trim_metadata(metadata: Mapping[str, Any], gk: GroupKind, shared: Sharing) -> dict[str, Any]:
    out = {field: metadata[field] for field in _METADATA_FIELDS if field in metadata}
    if gk in kinds.NEVER_POLICIES:
        for field in _SET_WHEN_STORED:
            out.pop(field, None)
    if "namespace" in out:
        out["namespace"] = _word(out["namespace"])
    labels = out.get("labels")
    if isinstance(labels, Mapping):
        out["labels"] = shared.share(_words(labels))
    return out


def mark_of(obj: Mapping[str, Any], annotation_key: str) -> bytes | None:
    """The `fingerprint` of our annotation's value on `obj`, trimmed (its `MARK`) or as the API
    server sends it; None: no value of ours there (none, or not a string: someone else's)."""
    kept = obj.get(MARK)
    if isinstance(kept, bytes):
        return kept
    value = meta.annotations_of(obj).get(annotation_key)
    return fingerprint(value) if isinstance(value, str) else None


def fingerprint(value: str) -> bytes:
    """What is kept of our annotation's value: a digest of it.

    The reconciler only asks whether the value on an object is the one it wants; a value runs
    to kilobytes on each of thousands of objects, and the leader holds the wanted one in its
    summary cache already — keeping both held every value twice (docs/performance.md). Equal
    values, equal fingerprints.
    """
    return hashlib.blake2b(value.encode(), digest_size=16).digest()


def _trim_service_spec(spec: object, shared: Sharing) -> object:
    if not isinstance(spec, Mapping):
        return spec  # malformed: keep it as it is, the rules report what they cannot read
    ports = spec.get("ports")
    if not isinstance(ports, list):
        return {}
    kept = [
        shared.share({f: _word(port[f]) for f in _SERVICE_PORT_FIELDS if f in port})
        if isinstance(port, Mapping)
        else port
        for port in ports
    ]
    return shared.share({"ports": shared.share(kept)})


def _trim_route_spec(spec: object, shared: Sharing) -> object:
    """parentRefs as they are; rules with their names and backends only. A weight, a match or
    a filter is no input of any summary, so an edit of only those (a canary's weights) leaves
    every computed value in place (`relevant`). Malformed parts are kept as they are: what
    reads them says what it cannot read."""
    if not isinstance(spec, Mapping):
        return spec
    out: dict[str, Any] = {f: spec[f] for f in _ROUTE_SPEC_FIELDS if f in spec}
    parents = out.get("parentRefs")
    if isinstance(parents, list):
        out["parentRefs"] = shared.share(
            [shared.share(_words(ref)) if isinstance(ref, Mapping) else ref for ref in parents]
        )
    rules = out.get("rules")
    if isinstance(rules, list):
        out["rules"] = [
            _trim_rule(rule, shared) if isinstance(rule, Mapping) else rule for rule in rules
        ]
    return out


def _trim_rule(rule: Mapping[str, Any], shared: Sharing) -> dict[str, Any]:
    out: dict[str, Any] = {f: _word(rule[f]) for f in _ROUTE_RULE_FIELDS if f in rule}
    refs = out.get("backendRefs")
    if isinstance(refs, list):
        # Each ref shared, not the list: lists of refs are as many as rules, nearly all
        # distinct, and a shared list would cost the table more than it saves.
        out["backendRefs"] = [
            shared.share({f: _word(ref[f]) for f in _BACKEND_REF_FIELDS if f in ref})
            if isinstance(ref, Mapping)
            else ref
            for ref in refs
        ]
    return out


def _word(value: object) -> Any:
    """A string that many objects hold alike — a group, a kind, a namespace, a section's or a
    referenced object's name — as one string for all of them (`sys.intern`); anything else as
    it is. Decoded anew for every object, such strings were most of the strings a store held:
    at the benchmark's default scale 9 of its 13 MB of them."""
    return sys.intern(value) if type(value) is str else value


def _words(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """A flat mapping (a parentRef, labels) with its keys and string values as `_word`s: the
    keys too, as each decoded object has its own copy of them."""
    return {_word(key): _word(value) for key, value in mapping.items()}


def _trim_crd_spec(spec: object, *, is_policy: bool) -> object:
    if not isinstance(spec, Mapping):
        return spec
    out: dict[str, Any] = {f: spec[f] for f in _CRD_SPEC_FIELDS if f in spec}
    versions = spec.get("versions")
    if isinstance(versions, list):
        out["versions"] = [
            _trim_crd_version(v, is_policy) if isinstance(v, Mapping) else v for v in versions
        ]
    return out


def _trim_crd_version(version: Mapping[str, Any], is_policy: bool) -> dict[str, Any]:
    out = {f: version[f] for f in _CRD_VERSION_FIELDS if f in version}
    # Only a policy kind's `spec` schema is read (merge leaves, SPEC §5.3); other CRDs' schemas
    # run to hundreds of KiB each (the Gateway API's own), so they are not kept at all.
    spec_schema = _spec_schema(version) if is_policy else None
    if spec_schema is not None:
        out["schema"] = {"openAPIV3Schema": {"properties": {"spec": spec_schema}}}
    return out


def _spec_schema(version: Mapping[str, Any]) -> object:
    schema = version.get("schema")
    root = schema.get("openAPIV3Schema") if isinstance(schema, Mapping) else None
    props = root.get("properties") if isinstance(root, Mapping) else None
    return props.get("spec") if isinstance(props, Mapping) else None


def relevant(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object without what no summary reads (two equal results: nothing to recompute).

    Our own patches of the annotation, controllers' status writes and a relist come back as
    writes; compared this way they change nothing (`annotation.dependencies`, `engine.memo`).
    """
    out = {k: v for k, v in obj.items() if k not in _UNREAD_TOP}
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping):
        out["metadata"] = {k: v for k, v in metadata.items() if k not in _UNREAD_METADATA}
    return out


def as_admitted(obj: Mapping[str, Any]) -> dict[str, Any]:
    """`relevant(trim(obj))`: for an annotated object (a Gateway, a route, a Service), the
    object `/mutate` was shown and the same object from the watch, once written, compare
    equal — same summary. What the API server adds as it stores a new object (`uid`, its
    creation time) is not kept of such kinds at all (`kinds.NEVER_POLICIES`, `trim`).
    """
    return relevant(trim(obj))
