"""The policy model: one policy object read into what the engine needs (SPEC §1).

`read_policy` is lenient on purpose: objects already stored in a cluster may predate the
webhook, so the engine takes what it can read and the admission rules (`shape.py`,
`targets.py`) report everything else to the user.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from webhook.core.kinds import is_cluster_scoped
from webhook.core.profiles import KindProfile, PolicyClass
from webhook.core.refs import GroupKind, ObjectKey, key_of

Stanza = Literal["default", "override"]

# Both spellings are accepted (SPEC §1.5); the value says which stanza the key stands for.
WRAPPER_KEYS: Mapping[str, tuple[Stanza, Literal["singular", "plural"]]] = {
    "default": ("default", "singular"),
    "override": ("override", "singular"),
    "defaults": ("default", "plural"),
    "overrides": ("override", "plural"),
}
TARGET_KEYS = frozenset({"targetRef", "targetRefs"})


@dataclass(frozen=True, slots=True)
class TargetRef:
    """One entry of `targetRefs` (or the `targetRef`), with the field path it came from."""

    field: str  # "spec.targetRefs[1]" or "spec.targetRef"
    group: str
    kind: str
    name: str
    namespace: str | None = None
    section_name: str | None = None

    @property
    def group_kind(self) -> GroupKind:
        return GroupKind(self.group, self.kind)

    def target_key(self, policy_namespace: str) -> ObjectKey:
        """The object this ref names; a ref without `namespace` stays in the policy's own."""
        gk = self.group_kind
        namespace = "" if is_cluster_scoped(gk) else (self.namespace or policy_namespace)
        return ObjectKey(self.group, self.kind, namespace, self.name)


@dataclass(frozen=True, slots=True)
class Policy:
    """A policy as the engine sees it. Stanzas hold spec-proper fields only."""

    key: ObjectKey
    created: str  # metadata.creationTimestamp (RFC 3339, sorts as text); "" when unknown
    deleting: bool
    policy_class: PolicyClass
    class_inferred: bool  # SPEC §1.3: no CRD label and no profile
    targets: tuple[TargetRef, ...]
    default: Mapping[str, Any] | None
    override: Mapping[str, Any] | None
    spec_proper: Mapping[str, Any]

    @property
    def order_key(self) -> tuple[str, str]:
        """SPEC §4.4: oldest first, then `namespace/name` in byte order."""
        return (self.created, self.key.policy_ref)

    @property
    def ref(self) -> str:
        return self.key.policy_ref


def spec_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else None


def wrappers_in(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The wrapper keys present in a spec, as spelled, with their raw values."""
    return {key: spec[key] for key in WRAPPER_KEYS if key in spec}


def spec_proper_of(spec: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in spec.items() if k not in TARGET_KEYS and k not in WRAPPER_KEYS}


def infer_class(spec: Mapping[str, Any]) -> PolicyClass:
    """SPEC §1.3: wrappers present → Inherited, otherwise Direct."""
    return "Inherited" if wrappers_in(spec) else "Direct"


def class_of(spec: Mapping[str, Any], profile: KindProfile) -> tuple[PolicyClass, bool]:
    """The policy's class and whether it was inferred for want of any label or profile."""
    if profile.policy_class is not None:
        return profile.policy_class, False
    return infer_class(spec), not profile.known


def raw_target_refs(spec: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(field path, raw value) of every target reference, whichever field carries them."""
    out: list[tuple[str, Any]] = []
    if "targetRef" in spec and spec["targetRef"] is not None:
        out.append(("spec.targetRef", spec["targetRef"]))
    refs = spec.get("targetRefs")
    if isinstance(refs, list):
        out.extend((f"spec.targetRefs[{i}]", ref) for i, ref in enumerate(refs))
    return out


def read_target_ref(path: str, raw: object) -> TargetRef | None:
    """A well-formed enough ref (string group/kind/name), else None."""
    if not isinstance(raw, Mapping):
        return None
    group = raw.get("group", "")
    kind, name = raw.get("kind"), raw.get("name")
    namespace, section = raw.get("namespace"), raw.get("sectionName")
    if not (isinstance(group, str) and isinstance(kind, str) and isinstance(name, str)):
        return None
    return TargetRef(
        field=path,
        group=group,
        kind=kind,
        name=name,
        namespace=namespace if isinstance(namespace, str) and namespace else None,
        section_name=section if isinstance(section, str) and section else None,
    )


def read_policy(obj: Mapping[str, Any], profile: KindProfile) -> Policy | None:
    """The engine's view of a policy object, or None when it has no readable spec or name."""
    key = key_of(obj)
    spec = spec_of(obj)
    if key is None or spec is None:
        return None
    metadata = obj.get("metadata") or {}
    created = metadata.get("creationTimestamp") if isinstance(metadata, Mapping) else None
    policy_class, inferred = class_of(spec, profile)
    stanzas: dict[str, Mapping[str, Any] | None] = {"default": None, "override": None}
    for raw_key, value in wrappers_in(spec).items():
        stanza, _ = WRAPPER_KEYS[raw_key]
        if isinstance(value, Mapping) and stanzas[stanza] is None:
            stanzas[stanza] = value
    proper = spec_proper_of(spec)
    if (
        policy_class == "Inherited"
        and proper
        and not stanzas["default"]
        and not stanzas["override"]
    ):
        # Decision (docs/decisions.md): the spec proper of an Inherited policy without wrappers
        # is applied as its default — the implicit form GEP-713 describes.
        stanzas["default"] = proper
    targets = tuple(
        ref
        for path, raw in raw_target_refs(spec)
        if (ref := read_target_ref(path, raw)) is not None
    )
    return Policy(
        key=key,
        created=created if isinstance(created, str) else "",
        deleting=isinstance(metadata, Mapping) and bool(metadata.get("deletionTimestamp")),
        policy_class=policy_class,
        class_inferred=inferred,
        targets=targets,
        default=stanzas["default"],
        override=stanzas["override"],
        spec_proper=proper,
    )
