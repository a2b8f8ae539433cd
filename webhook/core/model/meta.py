"""Typed reads of an object's `metadata`: the one place that checks what it holds.

Objects reach us as whatever JSON the API server, a manifest or a test sent: `metadata` may be
missing, or not a mapping, and so may every field in it. Each reader answers with a sensible
empty value instead, so no caller repeats the checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Obj = Mapping[str, Any]


def metadata(obj: Obj | None) -> Mapping[str, Any]:
    """`metadata`, or `{}` where there is none (or the object is absent)."""
    found = obj.get("metadata") if obj is not None else None
    return found if isinstance(found, Mapping) else {}


def _text(obj: Obj | None, field: str) -> str:
    value = metadata(obj).get(field)
    return value if isinstance(value, str) else ""


def name(obj: Obj | None) -> str:
    """`metadata.name`, or `""`."""
    return _text(obj, "name")


def namespace(obj: Obj | None) -> str:
    """`metadata.namespace`, or `""` (cluster-scoped, or not yet placed)."""
    return _text(obj, "namespace")


def created(obj: Obj | None) -> str:
    """`metadata.creationTimestamp` (RFC 3339, sorts as text), or `""` when unknown."""
    return _text(obj, "creationTimestamp")


def resource_version(obj: Obj | None) -> str | None:
    """`metadata.resourceVersion`, or None when it has none."""
    return _text(obj, "resourceVersion") or None


def deleting(obj: Obj | None) -> bool:
    """Whether `metadata.deletionTimestamp` is set: the object is being deleted."""
    return bool(metadata(obj).get("deletionTimestamp"))


def _mapping(obj: Obj | None, field: str) -> Mapping[str, Any]:
    value = metadata(obj).get(field)
    return value if isinstance(value, Mapping) else {}


def labels_of(obj: Obj | None) -> Mapping[str, Any]:
    """`metadata.labels`, or `{}`."""
    return _mapping(obj, "labels")


def annotations_of(obj: Obj | None) -> Mapping[str, Any]:
    """`metadata.annotations`, or `{}`."""
    return _mapping(obj, "annotations")
