"""Kind profiles: what this project knows about one policy kind (SPEC §1).

A profile starts from the policy CRD's `gateway.networking.k8s.io/policy` label and is refined
by the operator's config file, which wins (SPEC §1.2). The config file is YAML:

    ruleActions: {PA-T06: deny}          # global per-rule actions (deny|warn|audit|off)
    kinds:
      - group: policies.example.com
        kind: RetryPolicy
        class: Inherited                  # Direct | Inherited
        targets:                          # allowed target kinds
          - {group: gateway.networking.k8s.io, kind: HTTPRoute}
        wrapperSpelling: any              # singular | plural | any
        merge: patch                      # patch | atomic
        exclusiveStanzas: false
        overridesForbiddenOn: [{group: gateway.networking.k8s.io, kind: HTTPRoute}]
        crossNamespace: referencegrant    # referencegrant | deny
        ruleActions: {PA-C01: deny}
        fieldMap: {/timeout: /spec/timeouts/request}

Parsing never raises on a bad CRD; a bad config file raises `ConfigError` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeGuard

from webhook.core.model import catalog, meta
from webhook.core.model.kinds import DEFAULT_TARGETS
from webhook.core.model.refs import GroupKind, canonical_group

PolicyClass = Literal["Direct", "Inherited"]
Action = Literal["deny", "warn", "audit", "off"]
Spelling = Literal["singular", "plural", "any"]
Merge = Literal["patch", "atomic"]
CrossNamespace = Literal["referencegrant", "deny"]

POLICY_LABEL = "gateway.networking.k8s.io/policy"
ACTIONS: frozenset[str] = frozenset({"deny", "warn", "audit", "off"})


class ConfigError(ValueError):
    """The operator config file is not what SPEC §1.2 describes; the message names the field."""


@dataclass(frozen=True, slots=True)
class KindProfile:
    """Everything the rules and the engine need to know about one policy kind."""

    group_kind: GroupKind
    # None: no label and no config — class is inferred per object (SPEC §1.3, PA-K01);
    # also None for the legacy label value `true` (inferred, but without PA-K01).
    policy_class: PolicyClass | None = None
    known: bool = False  # True when a CRD label, the catalog or the config names this kind
    allowed_targets: frozenset[GroupKind] = DEFAULT_TARGETS
    targets_configured: bool = False  # the operator's config lists them: PA-T01 then denies
    wrapper_spelling: Spelling = "any"
    merge: Merge = "patch"
    # SPEC §1.7 merge selectors the kind is known to have (catalog): a key inside a stanza
    # (`strategy`, judged by PA-S14) and a key of the spec proper (`mergeType`).
    stanza_selector: str | None = None
    spec_selector: str | None = None
    catalog_source: str | None = None  # where the built-in profile was read from (SPEC §1.6)
    # Keys spelled like a wrapper that the vendor uses as settings (catalog, see there).
    setting_keys: frozenset[str] = frozenset()
    # Policies of the kind may name no target at all (catalog, see there): no PA-S02.
    target_optional: bool = False
    # Keys of the spec proper the vendor accepts beside a stanza and ignores there (catalog,
    # see there): PA-S16, not PA-S09.
    ignored_beside_stanzas: frozenset[str] = frozenset()
    # The vendor accepts a policy that sets nothing (catalog, see there): PA-S17, not PA-S10.
    settings_optional: bool = False
    # The vendor's schema lets a target ref leave out `group` (catalog, see there): read when
    # the CRD is not at hand.
    target_group_optional: bool = False
    # The vendor's schema restricts no target kind (catalog, see there): no PA-T02.
    any_target_kinds: bool = False
    # The vendor's rule for policies of the kind on one target (catalog, see there): the
    # fields, as paths, that two of them may not both set; None: SPEC's rule.
    conflict_keys: tuple[tuple[str, ...], ...] | None = None
    exclusive_stanzas: bool = False
    overrides_forbidden_on: frozenset[GroupKind] = frozenset()
    cross_namespace: CrossNamespace = "referencegrant"
    rule_actions: Mapping[str, Action] = field(default_factory=dict)
    field_map: Mapping[str, str] = field(default_factory=dict)
    cluster_scoped: bool = False
    # openAPI v3 schema of the policy's `spec` (from the CRD's served version), if known.
    spec_schema: Mapping[str, Any] | None = None
    # The catalog's limit on `targetRefs` (None: none), for when the CRD is not at hand.
    max_target_refs: int | None = catalog.GEP_713_MAX_TARGET_REFS

    def target_refs_limit(self) -> int | None:
        """How many `targetRefs` a policy of this kind may have (PA-S03); None: no limit.

        The installed CRD decides when its schema describes `targetRefs`: the API server
        enforces exactly its `maxItems`, and accepts any number without one (SPEC's first
        principle: never deny what it accepts). Without the CRD, the catalog's limit, else
        GEP-713's 16.
        """
        refs = self._spec_property("targetRefs")
        if refs is not None:
            limit = refs.get("maxItems")
            return limit if isinstance(limit, int) and not isinstance(limit, bool) else None
        return self.max_target_refs

    def target_group_required(self, field: str) -> bool:
        """Whether a ref in `field` (`targetRef` or `targetRefs`) must name its `group`
        (PA-S04).

        The installed CRD decides when its schema describes that ref: the API server refuses a
        ref without `group` exactly when the ref's schema requires it — and checks that before
        any validating webhook is called, so a policy that reaches this one without a `group`
        comes from a CRD that lets it out. Without the CRD, the catalog's word, else GEP-713's
        types (required).
        """
        ref = self._spec_property(field)
        if ref is not None and field == "targetRefs":
            ref = ref.get("items")
        if isinstance(ref, Mapping) and isinstance(ref.get("properties"), Mapping):
            required = ref.get("required")
            return isinstance(required, list) and "group" in required
        return not self.target_group_optional

    def _spec_property(self, name: str) -> Mapping[str, Any] | None:
        """The installed CRD's schema of `spec.<name>`, where it describes one."""
        properties = (self.spec_schema or {}).get("properties")
        found = properties.get(name) if isinstance(properties, Mapping) else None
        return found if isinstance(found, Mapping) else None


@dataclass(frozen=True, slots=True)
class OperatorConfig:
    """The parsed operator config file: global rule actions and per-kind refinements."""

    rule_actions: Mapping[str, Action] = field(default_factory=dict)
    kinds: Mapping[GroupKind, Mapping[str, Any]] = field(default_factory=dict)


def class_from_label(value: object) -> PolicyClass | Literal["legacy"] | None:
    """SPEC §1.1: `direct`/`inherited` (any case), legacy `true`; anything else is not a policy."""
    if not isinstance(value, str):
        return None
    lowered = value.strip().lower()
    if lowered == "direct":
        return "Direct"
    if lowered == "inherited":
        return "Inherited"
    if lowered == "true":
        return "legacy"
    return None


def profile_from_crd(crd: Mapping[str, Any]) -> KindProfile | None:
    """The profile a policy CRD implies, or None when the CRD is not a policy CRD.

    A CRD is a policy CRD by its label (SPEC §1.1) or, without one, when it defines a kind of
    the built-in catalog (SPEC §1.6: Envoy Gateway's CRDs carry no label). The catalog's
    entry is laid over this by `base_profile`.
    """
    gk = defined_kind(crd)
    if gk is None:
        return None
    klass = class_from_label(meta.labels_of(crd).get(POLICY_LABEL))
    if klass is None and gk not in catalog.BY_KIND:
        return None
    spec = crd["spec"]
    return KindProfile(
        group_kind=gk,
        policy_class=klass if klass in ("Direct", "Inherited") else None,
        known=klass is not None,
        cluster_scoped=spec.get("scope") == "Cluster",
        spec_schema=_spec_schema(spec),
    )


def defined_kind(crd: Mapping[str, Any]) -> GroupKind | None:
    """The kind a CRD defines (`spec.group`, `spec.names.kind`), or None when unreadable."""
    spec = crd.get("spec")
    names = spec.get("names") if isinstance(spec, Mapping) else None
    group = spec.get("group") if isinstance(spec, Mapping) else None
    kind = names.get("kind") if isinstance(names, Mapping) else None
    if isinstance(group, str) and isinstance(kind, str):
        return GroupKind(group, kind)
    return None


def is_policy_crd(crd: Mapping[str, Any]) -> bool:
    return profile_from_crd(crd) is not None


def _spec_schema(crd_spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The `spec` schema of the storage version (else the first served one)."""
    versions = crd_spec.get("versions")
    if not isinstance(versions, list):
        return None
    candidates = [v for v in versions if isinstance(v, Mapping)]
    candidates.sort(key=lambda v: (not v.get("storage"), not v.get("served")))
    for version in candidates:
        schema = version.get("schema")
        root = schema.get("openAPIV3Schema") if isinstance(schema, Mapping) else None
        props = root.get("properties") if isinstance(root, Mapping) else None
        spec_schema = props.get("spec") if isinstance(props, Mapping) else None
        if isinstance(spec_schema, Mapping):
            return spec_schema
    return None


def unknown_profile(gk: GroupKind) -> KindProfile:
    """A kind with neither CRD label nor config profile (SPEC §1.3)."""
    return KindProfile(group_kind=gk)


def base_profile(gk: GroupKind, from_crd: KindProfile | None) -> KindProfile:
    """The profile before the operator's config: the CRD's label, filled in by the catalog.

    SPEC §1.6: class — CRD label > catalog > inference; targets — catalog > §1.4. The CRD's
    scope and schema, when the CRD is known, win over the catalog's scope.
    """
    entry = catalog.BY_KIND.get(gk)
    if entry is None:
        return from_crd if from_crd is not None else unknown_profile(gk)
    start = from_crd or KindProfile(group_kind=gk, cluster_scoped=entry.cluster_scoped)
    return replace(
        start,
        known=True,
        policy_class=start.policy_class or entry.policy_class,
        allowed_targets=entry.targets,
        wrapper_spelling=entry.wrapper_spelling,
        merge=entry.merge,
        stanza_selector=entry.stanza_selector,
        spec_selector=entry.spec_selector,
        catalog_source=entry.source,
        setting_keys=entry.setting_keys,
        target_optional=entry.target_optional,
        ignored_beside_stanzas=entry.ignored_beside_stanzas,
        settings_optional=entry.settings_optional,
        target_group_optional=entry.target_group_optional,
        any_target_kinds=entry.any_target_kinds,
        conflict_keys=(
            None
            if entry.conflict_keys is None
            else tuple(tuple(key.split(".")) for key in entry.conflict_keys)
        ),
        max_target_refs=entry.max_target_refs,
    )


def refine(profile: KindProfile, config: OperatorConfig) -> KindProfile:
    """Apply the operator config's entry for this kind; config wins over the CRD label."""
    entry = config.kinds.get(profile.group_kind)
    if entry is None:
        return profile
    changes: dict[str, Any] = {"known": True}
    if "class" in entry:
        changes["policy_class"] = entry["class"]
    if "targets" in entry:
        changes["allowed_targets"] = entry["targets"]
        changes["targets_configured"] = True
    for key, attr in (
        ("wrapperSpelling", "wrapper_spelling"),
        ("merge", "merge"),
        ("exclusiveStanzas", "exclusive_stanzas"),
        ("overridesForbiddenOn", "overrides_forbidden_on"),
        ("crossNamespace", "cross_namespace"),
        ("fieldMap", "field_map"),
    ):
        if key in entry:
            changes[attr] = entry[key]
    # SPEC §2.2 PA-T01 (and PA-S15 for the spelling): what the operator's config lists is
    # enforced, what the catalog or §1.4 guess is only warned about. The entry's own
    # ruleActions still win.
    implied: dict[str, Action] = {}
    if "targets" in entry:
        implied["PA-T01"] = "deny"
    if "wrapperSpelling" in entry:
        implied["PA-S15"] = "deny"
    changes["rule_actions"] = {**implied, **entry.get("ruleActions", {})}
    return replace(profile, **changes)


# --- config file parsing -------------------------------------------------------------------

_CHOICES: Mapping[str, frozenset[str]] = {
    "class": frozenset({"Direct", "Inherited"}),
    "wrapperSpelling": frozenset({"singular", "plural", "any"}),
    "merge": frozenset({"patch", "atomic"}),
    "crossNamespace": frozenset({"referencegrant", "deny"}),
}


def parse_config(data: object, *, known_rules: frozenset[str]) -> OperatorConfig:
    """Validate and normalise an operator config document (already YAML-decoded)."""
    if data is None:
        return OperatorConfig()
    if not isinstance(data, Mapping):
        raise ConfigError(
            "config: the top level must be a mapping with `kinds` and/or `ruleActions`"
        )
    unknown = set(data) - {"kinds", "ruleActions"}
    if unknown:
        raise ConfigError(f"config: unknown key(s) {sorted(unknown)}; expected kinds, ruleActions")
    global_actions = _rule_actions(data.get("ruleActions"), "ruleActions", known_rules)
    kinds_raw = data.get("kinds") or []
    if not isinstance(kinds_raw, list):
        raise ConfigError("config: kinds must be a list")
    kinds: dict[GroupKind, Mapping[str, Any]] = {}
    first: dict[GroupKind, int] = {}
    for i, entry in enumerate(kinds_raw):
        gk, normalised = _kind_entry(entry, f"kinds[{i}]", known_rules)
        if gk in first:  # one would silently replace the other
            raise ConfigError(f"config: kinds[{i}] profiles {gk} again (kinds[{first[gk]}])")
        first[gk] = i
        kinds[gk] = normalised
    return OperatorConfig(rule_actions=global_actions, kinds=kinds)


def _kind_entry(
    entry: object, where: str, known_rules: frozenset[str]
) -> tuple[GroupKind, Mapping[str, Any]]:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"config: {where} must be a mapping")
    allowed_keys = {
        "group", "kind", "class", "targets", "wrapperSpelling", "merge", "exclusiveStanzas",
        "overridesForbiddenOn", "crossNamespace", "ruleActions", "fieldMap",
    }  # fmt: skip
    unknown = set(entry) - allowed_keys
    if unknown:
        raise ConfigError(f"config: {where} has unknown key(s) {sorted(unknown)}")
    group, kind = entry.get("group"), entry.get("kind")
    if not isinstance(group, str) or not isinstance(kind, str) or not kind:
        raise ConfigError(f"config: {where} needs string `group` and `kind`")
    out: dict[str, Any] = {}
    for key, choices in _CHOICES.items():
        if key in entry:
            if entry[key] not in choices:
                raise ConfigError(f"config: {where}.{key} must be one of {sorted(choices)}")
            out[key] = entry[key]
    if "exclusiveStanzas" in entry:
        if not isinstance(entry["exclusiveStanzas"], bool):
            raise ConfigError(f"config: {where}.exclusiveStanzas must be true or false")
        out["exclusiveStanzas"] = entry["exclusiveStanzas"]
    for key in ("targets", "overridesForbiddenOn"):
        if key in entry:
            out[key] = _group_kinds(entry[key], f"{where}.{key}")
    if "ruleActions" in entry:
        out["ruleActions"] = _rule_actions(
            entry["ruleActions"], f"{where}.ruleActions", known_rules
        )
    if "fieldMap" in entry:
        out["fieldMap"] = _field_map(entry["fieldMap"], f"{where}.fieldMap")
    return GroupKind(group, kind), out


def _group_kinds(value: object, where: str) -> frozenset[GroupKind]:
    if not isinstance(value, list):
        raise ConfigError(f"config: {where} must be a list of {{group, kind}}")
    out = set()
    for i, item in enumerate(value):
        if (
            not isinstance(item, Mapping)
            or not isinstance(item.get("group", ""), str)
            or not isinstance(item.get("kind"), str)
        ):
            raise ConfigError(f"config: {where}[{i}] must be {{group: <string>, kind: <string>}}")
        out.add(GroupKind(canonical_group(item.get("group", "")), item["kind"]))
    return frozenset(out)


def _rule_actions(value: object, where: str, known_rules: frozenset[str]) -> Mapping[str, Action]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"config: {where} must map rule IDs to deny|warn|audit|off")
    out: dict[str, Action] = {}
    for rule_id, raw in value.items():
        if rule_id not in known_rules:
            raise ConfigError(f"config: {where} names unknown rule {rule_id!r}")
        # YAML 1.1 reads an unquoted `off` (and `no`, `false`) as the boolean false: the
        # documented `PA-T06: off` must mean what it says however it was written.
        action = "off" if raw is False else raw
        if not _is_action(action):
            # The hint only where YAML made something else of a word (`on`, `yes`: booleans).
            hint = (
                ""
                if isinstance(raw, str)
                else f' — quote the value (`{rule_id}: "warn"`) so that YAML reads it as a string'
            )
            raise ConfigError(
                f"config: {where}.{rule_id} must be one of deny, warn, audit, off; got "
                f"{_as_written(raw)}{hint}"
            )
        out[rule_id] = action
    return out


def _is_action(value: object) -> TypeGuard[Action]:
    return value in ACTIONS


def _as_written(value: object) -> str:
    """How YAML gave us a value, in YAML's words: `true`, `3`, `'deny '`."""
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if value is None:
        return "nothing (null)"
    return repr(value)


def _field_map(value: object, where: str) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"config: {where} must map JSON pointers to JSON pointers")
    out: dict[str, str] = {}
    for src, dst in value.items():
        if not (
            isinstance(src, str)
            and src.startswith("/")
            and isinstance(dst, str)
            and dst.startswith("/")
        ):
            raise ConfigError(
                f"config: {where}: {src!r} → {dst!r} must both be JSON pointers ('/a/b')"
            )
        out[src] = dst
    return out
