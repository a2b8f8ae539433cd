"""Target rules PA-T01…PA-T10 and PA-S13 (SPEC §2.2): what a policy may point at.

Where the engine counts a policy (`attachment.counts_on`) and where these rules object are
decided by the same predicates (`own_namespace_only`, `crossing_allowed`), so the two can never
disagree on PA-T03/PA-T04.

Static checks first (allowed kinds, scope, sections, grants); the checks against the current
state (exists, has the section, is being deleted) only run for refs that passed them, so one
mistake gives one message rather than a cascade.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from webhook.core.engine.attachment import crossing_allowed, own_namespace_only
from webhook.core.model import kinds, meta
from webhook.core.model.labels import selector_matches
from webhook.core.model.meta import labels_of
from webhook.core.model.policy import (
    TargetRef,
    TargetSelector,
    raw_target_refs,
    raw_target_selectors,
    read_target_ref,
    read_target_selector,
    wrappers_in,
)
from webhook.core.model.profiles import KindProfile, PolicyClass
from webhook.core.model.refs import GroupKind, ObjectKey
from webhook.core.rules import shape
from webhook.core.rules.findings import Finding, line_room, listed
from webhook.core.state.store import ClusterView

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
        if shape.ref_is_well_formed(raw, profile, path)
        and (ref := read_target_ref(path, raw)) is not None
    ]
    findings: list[Finding] = []
    if policy_class == "Direct":
        findings += _direct_one_kind(refs, profile)
    has_override = any(key in ("override", "overrides") for key in wrappers_in(spec, profile))
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
        if not static:  # state is judged only for refs the static rules have nothing against
            findings += _against_state(ref, namespace=namespace, view=view)
    for path, raw in raw_target_selectors(spec):
        selector = (
            read_target_selector(path, raw) if shape.ref_is_well_formed_selector(raw) else None
        )
        if selector is not None:
            findings += _selector(selector, profile=profile, namespace=namespace, view=view)
    return findings


def _direct_one_kind(refs: list[TargetRef], profile: KindProfile) -> Iterator[Finding]:
    """PA-T02 — but not among the kinds a vendor's catalog entry lists for its Direct kind,
    nor at all for a kind whose schema restricts no target kind (Gateway API's
    BackendTLSPolicy): its API server accepts such a mix (NGINX Gateway Fabric's
    ObservabilityPolicy on an HTTPRoute and a GRPCRoute), so denying it would be a false
    denial (docs/decisions.md). An operator's list of targets restores it."""
    named = {ref.group_kind for ref in refs}
    vendor_allows = (
        profile.catalog_source is not None
        and not profile.targets_configured
        and (profile.any_target_kinds or named <= profile.allowed_targets)
    )
    kinds_named = sorted(str(gk) for gk in named)
    if len(kinds_named) > 1 and not vendor_allows:
        yield Finding(
            "PA-T02",
            "spec.targetRefs",
            f"a Direct policy targets one kind; found {', '.join(kinds_named)}",
        )


def _static(
    ref: TargetRef, *, profile: KindProfile, policy_gk: GroupKind, namespace: str, view: ClusterView
) -> Iterator[Finding]:
    gk = ref.group_kind
    kind_findings = list(_kind_allowed(gk, f"{ref.field}.kind", profile=profile))
    yield from kind_findings
    if kind_findings and _case_typo(gk) in profile.allowed_targets:
        return  # one mistake, one message: PA-T09 said the kind is right but for its case
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


def _kind_allowed(gk: GroupKind, field: str, *, profile: KindProfile) -> Iterator[Finding]:
    """PA-T09 for a kind spelt in the wrong letter case, else PA-T01 for a kind the policy is
    not known to target (SPEC §2.2: a DENY only where the operator's config lists them)."""
    typo = _case_typo(gk)
    if typo is not None:
        yield Finding(
            "PA-T09",
            field,
            f'"{gk.kind}" is not a kind; kinds are case-sensitive: did you mean "{typo.kind}"?',
        )
        if typo in profile.allowed_targets:
            return  # PA-T09 said it all: the kind is right but for its letter case
    if gk in profile.allowed_targets:
        return
    yield Finding("PA-T01", field, _not_allowed(gk, field, profile))


def _not_allowed(gk: GroupKind, field: str, profile: KindProfile) -> str:
    """PA-T01's message: the first of its forms that fits SPEC §2.5's line — the policy kind,
    the target's kind and the allowed kinds described; then, as the field already names the
    target's kind, without those two, the kinds described briefly; then the allowed kinds as
    many as fit, the rest counted."""
    name, allowed = profile.group_kind.kind, profile.allowed_targets
    described = kinds.describe_kinds(allowed)
    if profile.targets_configured:
        full = f"{name} cannot target {_show(gk)}; allowed: {described}"
        pattern = "not an allowed target; allowed: {}"
    else:
        full = f"{name} is not known to target {_show(gk)} (known: {described}); effect not shown"
        pattern = "not a known target, effect not shown (known: {})"
    room = line_room("PA-T01", field)
    if len(full) <= room:
        return full
    brief = pattern.format(kinds.describe_kinds(allowed, brief=True))
    if len(brief) <= room:
        return brief
    names = sorted(target.kind for target in allowed)
    return pattern.format(listed(names, room - len(pattern.format(""))))


def _show(gk: GroupKind) -> str:
    """A kind as messages print it: `Service` for the core group (SPEC §1.4), else `Kind.group`."""
    return str(gk)


def _selector(
    selector: TargetSelector, *, profile: KindProfile, namespace: str, view: ClusterView
) -> Iterator[Finding]:
    """SPEC §1.7: a selector's kind is judged as a ref's; one that picks nothing (yet) among
    the objects the webhook watches is PA-T06, as a ref to a missing object is."""
    gk = selector.group_kind
    kind_findings = list(_kind_allowed(gk, f"{selector.field}.kind", profile=profile))
    yield from kind_findings
    if kind_findings or gk not in kinds.DEFAULT_TARGETS or kinds.is_cluster_scoped(gk):
        return
    if not any(_picks(selector, namespace, obj) for obj in view.objects(gk)):
        yield Finding(
            "PA-T06",
            selector.field,
            f'no {selector.kind} in namespace "{namespace}" matches (yet); no effect until one does',
        )


def _picks(selector: TargetSelector, namespace: str, obj: Mapping[str, Any]) -> bool:
    if meta.namespace(obj) != namespace:
        return False
    return selector_matches(selector.selector, labels_of(obj))


def _case_typo(gk: GroupKind) -> GroupKind | None:
    known = _KNOWN_BY_LOWER.get(gk.kind.lower())
    return known if known is not None and known.kind != gk.kind else None


def _scope(ref: TargetRef, *, namespace: str) -> Iterator[Finding]:
    gk = ref.group_kind
    if namespace and gk == kinds.GATEWAY_CLASS:
        yield Finding(
            "PA-T10",
            f"{ref.field}.kind",
            "a namespaced policy on a cluster-scoped GatewayClass: not all implementations read it",
        )
    elif namespace and not own_namespace_only(namespace, ref.target_key(namespace)):
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
    """PA-T03, where the engine's `crossing_allowed` would not count the target."""
    assert ref.namespace is not None
    if crossing_allowed(policy_gk, namespace, ref.target_key(namespace), profile, view):
        return
    where = f"{ref.field}.namespace"
    if profile.cross_namespace == "deny":
        why = f"{policy_gk.kind} may not target other namespaces (crossNamespace: deny)"
    else:
        why = f'no ReferenceGrant in "{ref.namespace}" lets {policy_gk.kind} from "{namespace}" target {ref.kind} "{ref.name}"'
    yield Finding("PA-T03", where, why)


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
            f"{key} does not exist (yet); no effect until it does",
        )
        return
    if meta.deleting(target):
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
