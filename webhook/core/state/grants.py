"""ReferenceGrants: may an object in one namespace refer to one in another? (Gateway API)

One answer for every cross-namespace question the project asks: a policy targeting a route in
another namespace (PA-T03, and whether the policy counts in the engine), and a route sending
traffic to a Service in another namespace.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from webhook.core.model.refs import GroupKind, ObjectKey, canonical_group
from webhook.core.state.store import ClusterView


def reference_granted(from_gk: GroupKind, from_ns: str, to: ObjectKey, view: ClusterView) -> bool:
    """A ReferenceGrant in `to`'s namespace admits (from kind, from namespace) → `to`.

    A grant's `to` entry without a name admits every object of that kind (Gateway API).
    """
    for grant in view.reference_grants(to.namespace):
        spec = grant.get("spec")
        if not isinstance(spec, Mapping):
            continue
        froms = any(
            _group(f) == from_gk.group
            and f.get("kind") == from_gk.kind
            and f.get("namespace") == from_ns
            for f in _items(spec.get("from"))
        )
        tos = any(
            _group(t) == to.group
            and t.get("kind") == to.kind
            and t.get("name") in (None, "", to.name)
            for t in _items(spec.get("to"))
        )
        if froms and tos:
            return True
    return False


def _group(entry: Mapping[str, Any]) -> str:
    group = entry.get("group", "")
    return canonical_group(group) if isinstance(group, str) else ""


def _items(value: object) -> Iterator[Mapping[str, Any]]:
    if isinstance(value, list):
        yield from (item for item in value if isinstance(item, Mapping))
