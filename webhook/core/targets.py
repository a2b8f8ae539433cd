"""Target rules PA-T01…PA-T09 and PA-S13 (SPEC §2.2): what a policy may point at.

Static checks first (allowed kinds, scope, sections, grants); the checks against the current
state (exists, has the section, is being deleted) only run for refs that passed them, so one
mistake gives one message rather than a cascade.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from webhook.core import kinds, shape
from webhook.core.findings import Finding
from webhook.core.grants import reference_granted
from webhook.core.policy import TargetRef, raw_target_refs, read_target_ref, wrappers_in
from webhook.core.profiles import KindProfile, PolicyClass
from webhook.core.refs import GroupKind, ObjectKey
from webhook.core.store import ClusterView

_KNOWN_BY_LOWER: Mapping[str, GroupKind] = {gk.kind.lower(): gk for gk in kinds.KNOWN_KINDS}


def check(
    spec: Mapping[str, Any],
    *,
    profile: KindProfile,
    policy_class: PolicyClass,
    policy_gk: GroupKind,
    namespace: str,
    view: ClusterView,
) -> list[Finding]:
    # Refs that break the schema were reported by PA-S04; judging them again would only echo it.
    refs = [
        ref
        for path, raw in raw_target_refs(spec)
        if shape.ref_is_well_formed(raw) and (ref := read_target_ref(path, raw)) is not None
    ]
    findings: list[Finding] = []
    if policy_class == "Direct":
        findings += _direct_one_kind(refs)
    has_override = any(key in ("override", "overrides") for key in wrappers_in(spec))
    for ref in refs:
        static = list(
            _static(ref, profile=profile, policy_gk=policy_gk, namespace=namespace, view=view)
        )
        if has_override and ref.group_kind in profile.overrides_forbidden_on:
            static.append(
                Finding(
                    "PA-S13",
                    ref.field,
                    f"{profile.group_kind.kind} forbids overrides on {ref.kind}; use default",
                )
            )
        findings += static
        if not static:
            findings += _against_state(ref, namespace=namespace, view=view)
    return findings


def _direct_one_kind(refs: list[TargetRef]) -> Iterator[Finding]:
    kinds_named = sorted({str(ref.group_kind) for ref in refs})
    if len(kinds_named) > 1:
        yield Finding(
            "PA-T02",
            "spec.targetRefs",
            f"a Direct policy targets one kind; found {', '.join(kinds_named)}",
        )


def _static(
    ref: TargetRef, *, profile: KindProfile, policy_gk: GroupKind, namespace: str, view: ClusterView
) -> Iterator[Finding]:
    gk = ref.group_kind
    typo = _case_typo(gk)
    if typo is not None:
        yield Finding(
            "PA-T09",
            f"{ref.field}.kind",
            f'"{ref.kind}" is not a kind; kinds are case-sensitive: did you mean "{typo.kind}"?',
        )
    if typo is not None and typo in profile.allowed_targets:
        return  # PA-T09 said it all: the kind is right but for its letter case
    if gk not in profile.allowed_targets:
        allowed = describe_kinds(profile.allowed_targets)
        yield Finding(
            "PA-T01",
            f"{ref.field}.kind",
            f"{profile.group_kind.kind} cannot target {gk}; allowed: {allowed}",
        )
        return
    if ref.section_name and gk in kinds.KNOWN_KINDS and not kinds.has_sections(gk):
        yield Finding(
            "PA-T05", f"{ref.field}.sectionName", f"{ref.kind} has no sections; remove sectionName"
        )
    yield from _scope(ref, namespace=namespace)
    if (
        namespace
        and ref.namespace
        and ref.namespace != namespace
        and not kinds.is_cluster_scoped(gk)
    ):
        yield from _cross_namespace(
            ref, profile=profile, policy_gk=policy_gk, namespace=namespace, view=view
        )


def describe_kinds(gks: frozenset[GroupKind]) -> str:
    """`Gateway, HTTPRoute (gateway.networking.k8s.io); Service (core)` — short enough to read."""
    by_group: dict[str, list[str]] = {}
    for gk in gks:
        by_group.setdefault(gk.group, []).append(gk.kind)
    parts = [
        f"{', '.join(sorted(names))} ({group or 'core'})"
        for group, names in sorted(by_group.items(), key=lambda item: (item[0] == "", item[0]))
    ]
    return "; ".join(parts)


def _case_typo(gk: GroupKind) -> GroupKind | None:
    known = _KNOWN_BY_LOWER.get(gk.kind.lower())
    return known if known is not None and known.kind != gk.kind else None


def _scope(ref: TargetRef, *, namespace: str) -> Iterator[Finding]:
    gk = ref.group_kind
    if namespace and gk == kinds.GATEWAY_CLASS:
        yield Finding(
            "PA-T04",
            f"{ref.field}.kind",
            "a namespaced policy cannot target a GatewayClass (cluster-scoped)",
        )
    elif namespace and gk == kinds.NAMESPACE and ref.name != namespace:
        yield Finding(
            "PA-T04",
            f"{ref.field}.name",
            f'a policy in namespace "{namespace}" can only target its own Namespace',
        )
    elif (
        not namespace
        and not kinds.is_cluster_scoped(gk)
        and gk in kinds.KNOWN_KINDS
        and not ref.namespace
    ):
        # Decision (docs/decisions.md): a cluster-scoped policy must say where a namespaced
        # target lives; it needs no ReferenceGrant, being a cluster admin's object.
        yield Finding(
            "PA-T04",
            f"{ref.field}.namespace",
            f"a cluster-scoped policy must set the namespace of the {ref.kind}",
        )


def _cross_namespace(
    ref: TargetRef, *, profile: KindProfile, policy_gk: GroupKind, namespace: str, view: ClusterView
) -> Iterator[Finding]:
    assert ref.namespace is not None
    where = f"{ref.field}.namespace"
    if profile.cross_namespace == "deny":
        yield Finding(
            "PA-T03",
            where,
            f"{policy_gk.kind} may not target other namespaces (crossNamespace: deny)",
        )
    elif not reference_granted(policy_gk, namespace, ref.target_key(namespace), view):
        yield Finding(
            "PA-T03",
            where,
            f'no ReferenceGrant in "{ref.namespace}" lets {policy_gk.kind} from "{namespace}" target {ref.kind} "{ref.name}"',
        )


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _against_state(ref: TargetRef, *, namespace: str, view: ClusterView) -> Iterator[Finding]:
    """PA-T06/07/08: only for the kinds whose objects the state holds (SPEC §1.4 targets)."""
    gk = ref.group_kind
    if gk not in kinds.DEFAULT_TARGETS:
        return
    key: ObjectKey = ref.target_key(namespace)
    target = view.get(key)
    if target is None:
        yield Finding(
            "PA-T06",
            ref.field,
            f"{key} does not exist (yet); the policy has no effect until it does",
        )
        return
    metadata = target.get("metadata")
    if isinstance(metadata, Mapping) and metadata.get("deletionTimestamp"):
        yield Finding("PA-T08", ref.field, f"{key} is being deleted")
    if ref.section_name and kinds.has_sections(gk):
        names = kinds.section_names(gk, target)
        if ref.section_name not in names:
            what = kinds.SECTIONS[gk].what
            listed = ", ".join(sorted(names)) or "none"
            yield Finding(
                "PA-T07",
                f"{ref.field}.sectionName",
                f'{key} has no {what} "{ref.section_name}" (has: {listed})',
            )
