"""Names of Kubernetes objects and how this project prints them.

One spelling everywhere: `Kind/name` for cluster-scoped objects, `Kind/namespace/name` for
namespaced ones, `#section` appended for a section (SPEC §3.3).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

GATEWAY_GROUP = "gateway.networking.k8s.io"
CORE_GROUP = ""
# SPEC §1.4: `core` names the core group too (NGINX Gateway Fabric writes it in every
# UpstreamSettingsPolicy); it is read as `""` wherever a group is read, and printed as `""`.
CORE_GROUP_ALIAS = "core"


def canonical_group(group: str) -> str:
    """The group as this project compares and prints it: `core` is the core group, `""`."""
    return CORE_GROUP if group == CORE_GROUP_ALIAS else group


class GroupKind(NamedTuple):
    """A kind qualified by its API group (`""` is the core group)."""

    group: str
    kind: str

    def __str__(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind


class ObjectKey(NamedTuple):
    """Identity of one object; `namespace` is `""` for cluster-scoped objects.

    A named tuple rather than a frozen dataclass: keys are built, hashed and compared millions
    of times when the engine runs on a large cluster, and a tuple does all three in C
    (docs/performance.md). Immutable, ordered field by field, as a dataclass was.
    """

    group: str
    kind: str
    namespace: str
    name: str

    @property
    def group_kind(self) -> GroupKind:
        return GroupKind(self.group, self.kind)

    def display(self, section: str | None = None) -> str:
        text = (
            f"{self.kind}/{self.namespace}/{self.name}"
            if self.namespace
            else f"{self.kind}/{self.name}"
        )
        return f"{text}#{section}" if section else text

    @property
    def policy_ref(self) -> str:
        """`namespace/name`, or `/name` when cluster-scoped (SPEC §3.3)."""
        return f"{self.namespace}/{self.name}"

    def __str__(self) -> str:
        return self.display()


def group_of(api_version: object) -> str:
    """`gateway.networking.k8s.io/v1` → `gateway.networking.k8s.io`; `v1` → `""` (core)."""
    if not isinstance(api_version, str) or "/" not in api_version:
        return CORE_GROUP
    return api_version.split("/", 1)[0]


def key_of(obj: Mapping[str, Any]) -> ObjectKey | None:
    """The key of a manifest or API object, or None when it lacks a kind or name."""
    kind = obj.get("kind")
    metadata = obj.get("metadata")
    if not isinstance(kind, str) or not isinstance(metadata, Mapping):
        return None
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        return None
    namespace = metadata.get("namespace")
    return ObjectKey(
        group_of(obj.get("apiVersion")),
        kind,
        namespace if isinstance(namespace, str) else "",
        name,
    )
