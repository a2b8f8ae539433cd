"""The policy model: one policy object read into what the engine needs (SPEC §1).

`read_policy` is lenient on purpose: objects already stored in a cluster may predate the
webhook, so the engine takes what it can read and the admission rules (`shape.py`,
`targets.py`) report everything else to the user. Selectors (SPEC §1.7) are read here and kept
apart from settings: `targetSelectors` is a target, a stanza's `strategy` and Envoy Gateway's
`mergeType` say how the policy merges — none of them is ever merged or shown as a setting.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from webhook.core.model import meta
from webhook.core.model.kinds import is_cluster_scoped
from webhook.core.model.labels import selector_matches
from webhook.core.model.meta import labels_of
from webhook.core.model.profiles import KindProfile, PolicyClass
from webhook.core.model.refs import GATEWAY_GROUP, GroupKind, ObjectKey, canonical_group, key_of

Stanza = Literal["default", "override"]
# SPEC §1.7: how a stanza meets more specific settings (Kuadrant's `strategy` values).
Strategy = Literal["atomic", "merge"]
STRATEGIES: frozenset[str] = frozenset({"atomic", "merge"})
# The stanza selector every kind is read with unless its profile names another: `strategy`
# counts as a selector only when its value is one of STRATEGIES (docs/decisions.md).
STANZA_SELECTOR = "strategy"

# Both spellings are accepted (SPEC §1.5); the value says which stanza the key stands for.
WRAPPER_KEYS: Mapping[str, tuple[Stanza, Literal["singular", "plural"]]] = {
    "default": ("default", "singular"),
    "override": ("override", "singular"),
    "defaults": ("default", "plural"),
    "overrides": ("override", "plural"),
}
SELECTORS_KEY = "targetSelectors"
TARGET_KEYS = frozenset({"targetRef", "targetRefs", SELECTORS_KEY})


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
class TargetSelector:
    """One entry of `targetSelectors` (SPEC §1.7): every object of `kind` in the policy's own
    namespace whose labels match `selector` (a LabelSelector: matchLabels, matchExpressions)."""

    field: str  # "spec.targetSelectors[0]"
    group: str
    kind: str
    selector: Mapping[str, Any]

    @property
    def group_kind(self) -> GroupKind:
        return GroupKind(self.group, self.kind)


@dataclass(frozen=True, slots=True)
class Policy:
    """A policy as the engine sees it. Stanzas hold spec-proper fields only."""

    key: ObjectKey
    created: str  # metadata.creationTimestamp (RFC 3339, sorts as text); "" when unknown
    policy_class: PolicyClass
    targets: tuple[TargetRef, ...]
    default: Mapping[str, Any] | None  # settings only: selectors are taken out
    override: Mapping[str, Any] | None
    spec_proper: Mapping[str, Any]
    selectors: tuple[TargetSelector, ...] = ()
    # SPEC §1.7: each stanza's own `strategy`, where it sets one (else the kind's `merge`).
    default_strategy: Strategy | None = None
    override_strategy: Strategy | None = None
    # Envoy Gateway's `mergeType` is set: this policy merges onto less specific ones, field by
    # field, instead of replacing them whole.
    merges_onto_less_specific: bool = False
    # An Inherited policy with no wrapper: its spec proper is its default, even when it sets
    # nothing there (under an atomic merge it then replaces less specific policies whole).
    settings_in_spec: bool = False
    # `namespace/name` (SPEC §3.3), made once: the engine names a policy in every source and
    # loser of every board, and an impact preview in every group it reads. Interned, as the
    # boards' sources hold it: one string per policy, not a second copy.
    ref: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ref", sys.intern(self.key.policy_ref))

    def strategy(self, stanza: Stanza) -> Strategy | None:
        return self.override_strategy if stanza == "override" else self.default_strategy

    def names(self, target: ObjectKey) -> bool:
        """Whether a `targetRef(s)` entry names `target` (any section)."""
        namespace = self.key.namespace
        return any(ref.target_key(namespace) == target for ref in self.targets)

    def selects(self, target: ObjectKey, obj: Mapping[str, Any] | None) -> bool:
        """Whether a `targetSelectors` entry picks `target`, an object of the policy's own
        namespace, as `obj` (its current version) is labelled (SPEC §1.7)."""
        if obj is None or target.namespace != self.key.namespace:
            return False
        labels = labels_of(obj)
        gk = target.group_kind
        return any(
            s.group_kind == gk and selector_matches(s.selector, labels) for s in self.selectors
        )

    def sections_on(self, target: ObjectKey, obj: Mapping[str, Any] | None) -> list[str | None]:
        """Where on `target` the policy attaches: a section name per ref that names it with
        one, None for the whole object (a ref without `sectionName`, or a selector)."""
        namespace = self.key.namespace
        found: list[str | None] = [
            ref.section_name for ref in self.targets if ref.target_key(namespace) == target
        ]
        if self.selectors and None not in found and self.selects(target, obj):
            found.append(None)
        return found

    @property
    def order_key(self) -> tuple[str, str]:
        """SPEC §4.4: oldest first, then `namespace/name` in byte order."""
        return (self.created, self.ref)


def spec_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else None


def wrappers_in(spec: Mapping[str, Any], profile: KindProfile) -> dict[str, Any]:
    """The wrapper keys present in a spec, as spelled, with their raw values — but for keys
    the kind's vendor uses as settings of its own (kgateway's ListenerPolicy `default`)."""
    return {
        key: spec[key] for key in WRAPPER_KEYS if key in spec and key not in profile.setting_keys
    }


def spec_proper_of(spec: Mapping[str, Any], profile: KindProfile) -> dict[str, Any]:
    """The policy's settings outside any stanza: not its targets, wrappers or selectors."""
    return {
        k: v
        for k, v in spec.items()
        if k not in TARGET_KEYS
        and (k not in WRAPPER_KEYS or k in profile.setting_keys)
        and k != profile.spec_selector
    }


def merges_onto_less_specific(spec: Mapping[str, Any], profile: KindProfile) -> bool:
    """Whether the policy sets the kind's spec-level merge selector (Envoy Gateway's
    `mergeType`, any value): it then merges onto less specific policies field by field
    instead of replacing them whole (SPEC §1.7)."""
    selector = profile.spec_selector
    return selector is not None and spec.get(selector) not in (None, "")


def stanza_selector_of(profile: KindProfile) -> str:
    return profile.stanza_selector or STANZA_SELECTOR


def split_stanza(
    value: Mapping[str, Any], profile: KindProfile
) -> tuple[Mapping[str, Any], Strategy | None]:
    """A stanza's settings, and the strategy it selects (None: the kind's own).

    A kind whose profile names its stanza selector has it taken out whatever its value (an
    unknown value is PA-S14's to report); for any other kind, `strategy` is a selector only
    when its value is one, so that a setting of that name is never lost (docs/decisions.md).
    """
    name = stanza_selector_of(profile)
    if name not in value:
        return value, None
    raw = value[name]
    if profile.stanza_selector is None and raw not in STRATEGIES:
        return value, None
    settings = {k: v for k, v in value.items() if k != name}
    strategy: Strategy | None = raw if raw in ("atomic", "merge") else None
    return settings, strategy


def infer_class(spec: Mapping[str, Any], profile: KindProfile) -> PolicyClass:
    """SPEC §1.3: wrappers present → Inherited, otherwise Direct."""
    return "Inherited" if wrappers_in(spec, profile) else "Direct"


def class_of(spec: Mapping[str, Any], profile: KindProfile) -> tuple[PolicyClass, bool]:
    """The policy's class and whether it was inferred for want of any label or profile."""
    if profile.policy_class is not None:
        return profile.policy_class, False
    return infer_class(spec, profile), not profile.known


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
    """A well-formed enough ref (string group/kind/name), else None; `core` read as `""`."""
    if not isinstance(raw, Mapping):
        return None
    group = raw.get("group", "")
    kind, name = raw.get("kind"), raw.get("name")
    namespace, section = raw.get("namespace"), raw.get("sectionName")
    if not (isinstance(group, str) and isinstance(kind, str) and isinstance(name, str)):
        return None
    return TargetRef(
        field=path,
        group=canonical_group(group),
        kind=kind,
        name=name,
        namespace=namespace if isinstance(namespace, str) and namespace else None,
        section_name=section if isinstance(section, str) and section else None,
    )


def raw_target_selectors(spec: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(field path, raw value) of every `targetSelectors` entry."""
    selectors = spec.get(SELECTORS_KEY)
    if not isinstance(selectors, list):
        return []
    return [(f"spec.{SELECTORS_KEY}[{i}]", raw) for i, raw in enumerate(selectors)]


def read_target_selector(path: str, raw: object) -> TargetSelector | None:
    """A readable selector entry (a string `kind`), else None. Its group defaults to the
    Gateway API's, as Envoy Gateway's CRD does; no labels at all select every such object,
    as an empty LabelSelector does."""
    if not isinstance(raw, Mapping):
        return None
    group, kind = raw.get("group", GATEWAY_GROUP), raw.get("kind")
    labels, expressions = raw.get("matchLabels"), raw.get("matchExpressions")
    if not isinstance(group, str) or not isinstance(kind, str) or not kind:
        return None
    selector = {
        "matchLabels": labels if isinstance(labels, Mapping) else {},
        "matchExpressions": expressions if isinstance(expressions, list) else [],
    }
    return TargetSelector(path, canonical_group(group), kind, selector)


def read_policy(obj: Mapping[str, Any], profile: KindProfile) -> Policy | None:
    """The engine's view of a policy object, or None when it has no readable spec or name."""
    key = key_of(obj)
    spec = spec_of(obj)
    if key is None or spec is None:
        return None
    policy_class, _ = class_of(spec, profile)
    stanzas: dict[str, Mapping[str, Any] | None] = {"default": None, "override": None}
    strategies: dict[str, Strategy | None] = {"default": None, "override": None}
    wrappers = wrappers_in(spec, profile)
    for raw_key, value in wrappers.items():
        stanza, _ = WRAPPER_KEYS[raw_key]
        if isinstance(value, Mapping) and stanzas[stanza] is None:
            stanzas[stanza], strategies[stanza] = split_stanza(value, profile)
    proper = spec_proper_of(spec, profile)
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
    selectors = tuple(
        selector
        for path, raw in raw_target_selectors(spec)
        if (selector := read_target_selector(path, raw)) is not None
    )
    return Policy(
        key=key,
        created=meta.created(obj),
        policy_class=policy_class,
        targets=targets,
        default=stanzas["default"],
        override=stanzas["override"],
        spec_proper=proper,
        selectors=selectors,
        default_strategy=strategies["default"],
        override_strategy=strategies["override"],
        merges_onto_less_specific=merges_onto_less_specific(spec, profile),
        settings_in_spec=policy_class == "Inherited" and not wrappers,
    )
