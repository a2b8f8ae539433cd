"""The leaves each stanza of a policy offers (SPEC §5.3), and the object's own (§5.9).

A stanza is read with the schema of its place in the CRD: `default`/`override` (either
spelling) for an explicit stanza, the spec's own for settings written in the spec itself (a
Direct policy, or an Inherited one's implicit default). Leaves are kept per policy and stanza
in the engine memo: a policy's leaves change only when the policy does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.engine.board import StanzaName
from webhook.core.engine.memo import EngineMemo
from webhook.core.model import leaves, pointer
from webhook.core.model.policy import Policy
from webhook.core.model.profiles import KindProfile


class StanzaLeaves:
    """The leaves of each policy's stanzas of one kind, for one state of the view."""

    def __init__(self, profile: KindProfile, memo: EngineMemo) -> None:
        self._profile = profile
        self._kept = memo.leaves
        self._paths = memo.leaf_paths

    def of(self, policy: Policy, stanza: StanzaName) -> dict[leaves.Path, Any]:
        memo_key = (policy.key, stanza)
        found = self._kept.get(memo_key)
        if found is None:
            value, schema = self._stanza(policy, stanza)
            found = self._kept[memo_key] = self._with_kept_paths(
                leaves.leaves(value, schema) if value else {}
            )
        return found

    def _with_kept_paths(self, found: dict[leaves.Path, Any]) -> dict[leaves.Path, Any]:
        """`found` keyed by the paths the memo keeps (`EngineMemo.leaf_paths`): a thousand
        policies of a kind set the same few fields, each path otherwise held a thousand times."""
        paths = self._paths
        return {paths.setdefault(path, path): value for path, value in found.items()}

    def _stanza(
        self, policy: Policy, stanza: StanzaName
    ) -> tuple[Mapping[str, Any] | None, leaves.Schema]:
        spec_schema = self._profile.spec_schema
        if stanza == "direct":
            return policy.spec_proper, spec_schema
        value = policy.override if stanza == "override" else policy.default
        if stanza == "default" and value is None and policy.policy_class == "Direct":
            value = policy.spec_proper  # an unknown-class kind run as Inherited: implicit default
        if value is None:
            return None, None
        if policy.override is None and value == policy.spec_proper:
            return value, spec_schema  # the implicit form: spec-proper fields, spec's schema
        return value, stanza_schema(spec_schema, stanza)


def object_leaves(profile: KindProfile, obj: Mapping[str, Any]) -> dict[leaves.Path, Any]:
    """SPEC §5.9: the target object's own values at the kind's `fieldMap` pointers, as leaves
    of the settings they stand for."""
    out: dict[leaves.Path, Any] = {}
    if not profile.field_map:  # most kinds: asked of every object an impact preview shows
        return out
    schema = stanza_schema(profile.spec_schema, "default")
    for setting, field in sorted(profile.field_map.items()):
        value = pointer.resolve(obj, field)
        if leaves.is_unset(value):
            continue
        for segment in reversed(pointer.split(setting)):
            value = {segment: value}
        out.update(leaves.leaves(value, schema))
    return out


def stanza_schema(spec_schema: leaves.Schema, stanza: str) -> leaves.Schema:
    """The schema of `default`/`override` (either spelling) inside the spec's schema."""
    props = spec_schema.get("properties") if spec_schema else None
    if not isinstance(props, Mapping):
        return None
    for name in (stanza, f"{stanza}s"):
        if isinstance(props.get(name), Mapping):
            found: Mapping[str, Any] = props[name]
            return found
    return None
