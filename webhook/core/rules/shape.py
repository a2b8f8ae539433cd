"""Shape rules PA-S01…PA-S17 (SPEC §2.1): what a policy's `spec` may look like.

Each check looks at the raw spec as the user wrote it, so that every field path in a finding
points at what they typed. Checks never stop at the first problem.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from webhook.core.model.kinds import DEFAULT_TARGETS
from webhook.core.model.leaves import Path, child_schema, leaves, top_fields
from webhook.core.model.policy import (
    SELECTORS_KEY,
    STRATEGIES,
    WRAPPER_KEYS,
    merges_onto_less_specific,
    raw_target_refs,
    raw_target_selectors,
    spec_proper_of,
    split_stanza,
    stanza_selector_of,
    wrappers_in,
)
from webhook.core.model.profiles import KindProfile, PolicyClass
from webhook.core.model.refs import CORE_GROUP, GATEWAY_GROUP, canonical_group
from webhook.core.rules.findings import Finding

# Gateway API validation patterns (apis/v1/shared_types.go).
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_KIND = re.compile(r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$")


def check(
    spec: Mapping[str, Any], *, profile: KindProfile, policy_class: PolicyClass
) -> list[Finding]:
    findings: list[Finding] = []
    findings += _target_fields(spec, profile)
    for path, raw in raw_target_refs(spec):
        findings += _ref_schema(path, raw, group_required=_requires_group(profile, path))
    for path, raw in raw_target_selectors(spec):
        findings += _selector_schema(path, raw)
    findings += _duplicates(spec)
    findings += _wrappers(spec, profile=profile, policy_class=policy_class)
    return findings


# --- targets --------------------------------------------------------------------------------


def _target_fields(spec: Mapping[str, Any], profile: KindProfile) -> Iterator[Finding]:
    single, many = spec.get("targetRef"), spec.get("targetRefs")
    selectors = spec.get(SELECTORS_KEY)
    if single is not None and many is not None:
        yield Finding(
            "PA-S01", "spec.targetRef", "set together with spec.targetRefs; keep one of them"
        )
    if selectors is not None and not isinstance(selectors, list):
        yield Finding(
            "PA-S04", f"spec.{SELECTORS_KEY}", f"must be a list, got {type(selectors).__name__}"
        )
    if many is not None and not isinstance(many, list):
        yield Finding("PA-S04", "spec.targetRefs", f"must be a list, got {type(many).__name__}")
        return
    # SPEC §1.7: a selector is a target; a kind whose policies may be named from elsewhere
    # (the catalog's `target_optional`) needs none.
    if single is None and not many and not selectors and not profile.target_optional:
        what = (
            "spec.targetRefs is empty"
            if many == []
            else "none of spec.targetRef, spec.targetRefs, spec.targetSelectors is set"
        )
        yield Finding("PA-S02", "spec.targetRefs", f"{what}: the policy applies to nothing")
    limit = profile.target_refs_limit()
    if isinstance(many, list) and limit is not None and len(many) > limit:
        yield Finding(
            "PA-S03", "spec.targetRefs", f"has {len(many)} entries; at most {limit} are allowed"
        )


def ref_is_well_formed(raw: object, profile: KindProfile, path: str) -> bool:
    """True when PA-S04 has nothing to say about the ref at `path`, so target rules may judge
    it: the same reading of the kind's schema as PA-S04's own."""
    return not any(
        True for _ in _ref_schema("", raw, group_required=_requires_group(profile, path))
    )


def _requires_group(profile: KindProfile, path: str) -> bool:
    """Whether the ref at `path` (`spec.targetRef`, `spec.targetRefs[i]`) must name its group:
    the kind's schema says (`KindProfile.target_group_required`). Where it may be left out, it
    is read as the core group, as those schemas say it is meant."""
    return profile.target_group_required(
        "targetRefs" if path.startswith("spec.targetRefs") else "targetRef"
    )


def ref_is_well_formed_selector(raw: object) -> bool:
    """True when PA-S04 has nothing to say about this `targetSelectors` entry."""
    return not any(True for _ in _selector_schema("", raw))


def _ref_schema(path: str, raw: object, *, group_required: bool) -> Iterator[Finding]:
    if not isinstance(raw, Mapping):
        yield Finding(
            "PA-S04", path, f"must be an object with group, kind and name, got {type(raw).__name__}"
        )
        return
    for name in ("group", "kind", "name") if group_required else ("kind", "name"):
        if name not in raw:
            hint = _group_hint(raw.get("kind")) if name == "group" else ""
            yield Finding("PA-S04", f"{path}.{name}", f"is required{hint}")
    for name, value in raw.items():
        problem = _ref_field_problem(str(name), value)
        if problem:
            yield Finding("PA-S04", f"{path}.{name}", problem)


def _group_hint(kind: object) -> str:
    """SPEC §2.1: the group the missing `group` most likely is, for the kind the ref names."""
    groups = {gk.group for gk in DEFAULT_TARGETS if gk.kind == kind}
    if groups == {GATEWAY_GROUP}:
        return f' (for a {kind}: "{GATEWAY_GROUP}")'
    if groups == {CORE_GROUP}:
        return f' (for a {kind}: "", the core group)'
    return (
        ' ("" for the core group, e.g. Service; "gateway.networking.k8s.io" for Gateway API kinds)'
    )


def _selector_schema(path: str, raw: object) -> Iterator[Finding]:
    """A `targetSelectors` entry: a kind, an optional group, and LabelSelector fields."""
    if not isinstance(raw, Mapping):
        yield Finding(
            "PA-S04", path, f"must be an object with kind and matchLabels, got {type(raw).__name__}"
        )
        return
    if "kind" not in raw:
        yield Finding("PA-S04", f"{path}.kind", "is required")
    for name in ("group", "kind"):
        if name in raw:
            problem = _ref_field_problem(name, raw[name])
            if problem:
                yield Finding("PA-S04", f"{path}.{name}", problem)
    labels = raw.get("matchLabels")
    if labels is not None and not (
        isinstance(labels, Mapping) and all(isinstance(v, str) for v in labels.values())
    ):
        yield Finding("PA-S04", f"{path}.matchLabels", "must map label names to strings")
    expressions = raw.get("matchExpressions")
    if expressions is not None and not isinstance(expressions, list):
        yield Finding("PA-S04", f"{path}.matchExpressions", "must be a list")


def _ref_field_problem(name: str, value: object) -> str | None:
    if name not in ("group", "kind", "name", "namespace", "sectionName"):
        return None  # unknown fields are the CRD schema's business, not a targeting error
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    if name == "group":
        if "/" in value:
            return f'"{value}" holds a version; use the group alone: "{value.split("/", 1)[0]}"'
        if len(value) > 253 or (value and not _DNS_SUBDOMAIN.match(value)):
            return f'"{value}" is not a DNS subdomain (lowercase, dots, at most 253 characters)'
    elif name == "kind":
        if not 1 <= len(value) <= 63 or not _KIND.match(value):
            return f'"{value}" is not a kind: letters, digits and "-", starting with a letter, at most 63'
    elif name == "name":
        if not 1 <= len(value) <= 253:
            return "must be 1 to 253 characters"
    elif name == "namespace":
        if not 1 <= len(value) <= 63 or not _DNS_LABEL.match(value):
            return f'"{value}" is not a namespace name (DNS label, at most 63 characters)'
    elif name == "sectionName" and (not 1 <= len(value) <= 253 or not _DNS_SUBDOMAIN.match(value)):
        return f'"{value}" is not a section name (DNS subdomain, at most 253 characters)'
    return None


def _duplicates(spec: Mapping[str, Any]) -> Iterator[Finding]:
    """SPEC §2.1 PA-S05: a repeated (group, kind, name, namespace) needs distinct sectionNames."""
    seen: dict[tuple[Any, ...], list[tuple[str, object]]] = {}
    refs = spec.get("targetRefs")
    if not isinstance(refs, list):
        return  # a single targetRef cannot repeat itself (and with both set, PA-S01 speaks)
    for path, raw in ((f"spec.targetRefs[{i}]", r) for i, r in enumerate(refs)):
        if not isinstance(raw, Mapping):
            continue
        group = raw.get("group", "")
        identity = (
            canonical_group(group) if isinstance(group, str) else group,
            raw.get("kind"),
            raw.get("name"),
            raw.get("namespace") or "",
        )
        if not all(isinstance(x, str) for x in identity):
            continue
        section = raw.get("sectionName") or None
        earlier = seen.setdefault(identity, [])
        for first_path, first_section in earlier:
            if section is None or first_section is None:
                yield Finding(
                    "PA-S05",
                    path,
                    f"names the same target as {first_path}; each copy needs its own sectionName",
                )
                break
            if section == first_section:
                yield Finding(
                    "PA-S05",
                    f"{path}.sectionName",
                    f'repeats {first_path} (sectionName "{section}")',
                )
                break
        earlier.append((path, section))


# --- wrappers -------------------------------------------------------------------------------


def _wrappers(
    spec: Mapping[str, Any], *, profile: KindProfile, policy_class: PolicyClass
) -> list[Finding]:
    present = wrappers_in(spec, profile)
    findings: list[Finding] = []
    if policy_class == "Direct":
        for key in present:
            findings.append(
                Finding(
                    "PA-S06",
                    f"spec.{key}",
                    f"{profile.group_kind.kind} is a Direct policy: set its fields in spec itself",
                )
            )
        return findings
    spellings = {WRAPPER_KEYS[key][1] for key in present}
    if len(spellings) > 1:
        keys = ", ".join(sorted(present))
        findings.append(
            Finding(
                "PA-S07",
                "spec",
                f"mixes wrapper spellings ({keys}); use default/override or defaults/overrides",
            )
        )
    elif (
        spellings and profile.wrapper_spelling != "any" and spellings != {profile.wrapper_spelling}
    ):
        expected = (
            "default/override" if profile.wrapper_spelling == "singular" else "defaults/overrides"
        )
        findings.append(
            Finding(
                "PA-S15",
                "spec",
                f"{profile.group_kind.kind} uses {expected}; found {', '.join(sorted(present))}",
            )
        )
    for key, value in present.items():
        if not isinstance(value, Mapping):
            kind = "null" if value is None else type(value).__name__
            findings.append(
                Finding("PA-S08", f"spec.{key}", f"must be an object of settings, got {kind}")
            )
    findings += _stanza_selectors(present, profile)
    proper = spec_proper_of(spec, profile)
    if present:
        stanza = next(iter(present))
        for name in sorted(proper):
            if name in profile.ignored_beside_stanzas:
                findings.append(
                    Finding(
                        "PA-S16",
                        f"spec.{name}",
                        f"is ignored beside spec.{stanza} (the stanza alone applies); "
                        f"move it into spec.{stanza}",
                    )
                )
            else:
                findings.append(
                    Finding(
                        "PA-S09",
                        f"spec.{name}",
                        f"is set beside spec.{stanza}; move it into a stanza",
                    )
                )
    findings += _stanza_content(spec, present, proper, profile=profile)
    return findings


def _stanza_selectors(present: Mapping[str, Any], profile: KindProfile) -> Iterator[Finding]:
    """PA-S14: a merge selector the kind is known to have, with a value it does not know."""
    name = profile.stanza_selector
    if name is None:
        return
    for key, value in present.items():
        if not isinstance(value, Mapping) or name not in value:
            continue
        # Not `in STRATEGIES` alone: a list or a map there is unhashable (a TypeError, a 500).
        if not (isinstance(value[name], str) and value[name] in STRATEGIES):
            yield Finding(
                "PA-S14",
                f"spec.{key}.{name}",
                f"{_quoted(value[name])} is not a merge strategy; use atomic or merge",
            )


def _quoted(value: object) -> str:
    return f'"{value}"' if isinstance(value, str) else f"{type(value).__name__} {value!r}"[:40]


def _sets_something(settings: Mapping[str, Any]) -> bool:
    """Whether settings hold anything to apply (PA-S10): a field written with a value — any
    value but null, an empty object or list included.

    Vendors give empty values meanings, and their API servers accept them: Envoy Gateway's
    `http3: {}` turns HTTP/3 on and `authorization: {}` denies every request; Kuadrant's
    `anonymous: {}` allows anonymous access. SPEC 5.4 reads such a field as unset when it
    computes the effective policy; whether a write is refused is the first principle's to say
    (docs/decisions.md). A null is nothing: the API server prunes it from what it stores.
    """
    return any(value is not None for value in settings.values())


def _empty_accepted(spec: Mapping[str, Any], profile: KindProfile) -> str:
    """PA-S17: what a policy that sets nothing does where its vendor applies it. Under an
    atomic merge the most specific policy replaces the less specific ones whole, an empty one
    too (Envoy Gateway's translator tests: the route gets none of the Gateway policy's
    settings); one that merges onto them (`mergeType`, a `patch` kind) adds nothing."""
    if profile.merge != "atomic" or merges_onto_less_specific(spec, profile):
        return "sets nothing: it changes nothing where it applies"
    return "sets nothing, and replaces less specific policies whole: its targets get none of their settings"


def _stanza_content(
    spec: Mapping[str, Any],
    present: Mapping[str, Any],
    proper: Mapping[str, Any],
    *,
    profile: KindProfile,
) -> list[Finding]:
    stanza_leaves: dict[str, tuple[str, dict[Path, Any]]] = {}
    nothing_in_stanzas = True
    for key, value in present.items():
        if isinstance(value, Mapping):
            stanza = WRAPPER_KEYS[key][0]
            settings, _ = split_stanza(value, profile)  # selectors are no settings (SPEC §1.7)
            nothing_in_stanzas = nothing_in_stanzas and not _sets_something(settings)
            found = leaves(settings, child_schema(profile.spec_schema, key))
            if stanza not in stanza_leaves or not stanza_leaves[stanza][1]:
                stanza_leaves[stanza] = (key, found)
    findings: list[Finding] = []
    all_objects = all(isinstance(v, Mapping) for v in present.values())  # else PA-S08 said it
    if all_objects and nothing_in_stanzas and not (not present and _sets_something(proper)):
        where = f"spec.{next(iter(present))}" if present else "spec"
        if profile.settings_optional:
            findings.append(Finding("PA-S17", where, _empty_accepted(spec, profile)))
        else:
            only_selectors = any(
                isinstance(v, Mapping) and stanza_selector_of(profile) in v
                for v in present.values()
            )
            what = (
                "holds only a merge selector; an Inherited policy must set at least one field"
                if only_selectors
                else "an Inherited policy must set at least one field to apply"
            )
            findings.append(Finding("PA-S10", where, what))
    if "default" in stanza_leaves and "override" in stanza_leaves:
        default_key, default_leaves = stanza_leaves["default"]
        override_key, override_leaves = stanza_leaves["override"]
        if profile.exclusive_stanzas:
            findings.append(
                Finding(
                    "PA-S12",
                    f"spec.{override_key}",
                    f"{profile.group_kind.kind} allows one stanza per policy; split default and override",
                )
            )
        for path in sorted(_overlap(default_leaves, override_leaves), key=top_fields):
            findings.append(
                Finding(
                    "PA-S11",
                    f"spec.{default_key}.{top_fields(path)}",
                    f"is also set in spec.{override_key}; this default can never apply",
                )
            )
    return findings


def _overlap(a: Mapping[Path, Any], b: Mapping[Path, Any]) -> set[Path]:
    """Paths of `a` that are the same leaf as, or contain or sit under, a leaf of `b`."""
    # Every prefix of every path of `b`, so each path of `a` is looked up, not compared with
    # each of `b` in turn: a spec with thousands of leaves must not cost millions of steps.
    prefixes_of_b = {pb[:i] for pb in b for i in range(len(pb) + 1)}
    return {pa for pa in a if pa in prefixes_of_b or any(pa[:i] in b for i in range(len(pa)))}
