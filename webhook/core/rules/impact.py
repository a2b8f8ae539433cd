"""Conflict and impact findings (SPEC §2.3): what a policy change does to the cluster.

They need the precedence engine and cluster state, so they only run for policies that the
shape and target rules let through. Every finding is one line; lists are bounded.

- PA-C01 another policy of the same kind on the same object and section;
- PA-C02 a default field that an override above always beats;
- PA-C03 an override that beats more specific policies;
- PA-C04 the impact preview: effective values before → after, per field;
- PA-C05 a deleted target that policies still name.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from webhook.core.engine import effective, hierarchy
from webhook.core.engine.board import WHOLE, tie_why
from webhook.core.engine.effective import KindResult
from webhook.core.engine.hierarchy import Rung
from webhook.core.engine.stanzas import stanza_schema
from webhook.core.model import kinds, leaves
from webhook.core.model.policy import (
    WRAPPER_KEYS,
    Policy,
    Stanza,
    read_policy,
    spec_of,
    wrappers_in,
)
from webhook.core.model.profiles import KindProfile
from webhook.core.model.refs import GroupKind, ObjectKey, key_of
from webhook.core.model.settings import Settings
from webhook.core.rules.findings import Finding, line_room, listed
from webhook.core.state.overlay import OverlayView
from webhook.core.state.store import ClusterView, policy_targets

MAX_NAMED = 3  # policies named in one PA-C03 message
MAX_EXAMPLES = 3  # objects shown in one PA-C04 line
# SPEC §2.5: a warning line is at most 120 characters, `[PA-C04] ` included.
MAX_C04_LINE = 120 - len("[PA-C04] ")


def policy_findings(
    obj: Mapping[str, Any],
    gk: GroupKind,
    *,
    view: ClusterView,
    settings: Settings,
    old: Mapping[str, Any] | None,
) -> list[Finding]:
    """PA-C01…C04 for a policy about to be created or updated."""
    policy = read_policy(obj, view.profile(gk))
    if policy is None:
        return []
    before = _without(view, policy.key) if old is None else view
    after = OverlayView(before, upserts=[obj])
    old_policy = read_policy(old, view.profile(gk)) if old is not None else None
    placed = [(policy, after), *([(old_policy, before)] if old_policy else [])]
    sample, total = _reach(settings.max_impact_objects, *placed)
    results_after = effective.compute_kind(sample, after, gk)
    findings = _standing(policy, after, results_after)
    results_before = effective.compute_kind(sample, before, gk)
    findings += _preview(
        results_before,
        results_after,
        settings,
        total=total,
        schema=_settings_schema(view.profile(gk)),
    )
    return findings


def stored_policy_findings(
    policy: Policy, *, view: ClusterView, settings: Settings
) -> tuple[list[Finding], frozenset[ObjectKey]]:
    """PA-C01…C03 for a policy `view` already holds, as `policy_findings` finds them for its
    CREATE against all the others (the background audit, SPEC §8.3), without the preview: a
    policy that is there changes nothing. With the objects whose effective policy was read —
    the findings can change only when one of those, or what the policy targets, changes."""
    gk = policy.key.group_kind
    sample, _ = _reach(settings.max_impact_objects, (policy, view))
    results = effective.compute_kind(sample, view, gk)
    return _standing(policy, view, results), frozenset(sample)


def _standing(
    policy: Policy, view: ClusterView, results: Mapping[ObjectKey, KindResult | None]
) -> list[Finding]:
    """PA-C01, and for an Inherited kind PA-C02 and PA-C03, of `policy` as `view` holds it."""
    findings = list(_conflicts(policy, view))
    if policy.policy_class == "Inherited":
        findings += _dead_defaults(policy, results, view)
        findings += _beaten_by_override(policy, results, view)
    return findings


def _stanza_field(policy: Policy, stanza: Stanza, view: ClusterView) -> str:
    """Where the policy writes a stanza, as spelled: `spec.defaults` for Kuadrant, `spec` for
    settings in the spec proper (an implicit default: Envoy Gateway's, Kuadrant's `limits`).
    Read from the object only for a finding that names it: most reviews have none."""
    obj = view.get(policy.key)
    spec = spec_of(obj) if obj is not None else None
    if spec is not None:
        for key in wrappers_in(spec, view.profile(policy.key.group_kind)):
            if WRAPPER_KEYS[key][0] == stanza:
                return f"spec.{key}"
    return "spec" if stanza == "default" and policy.settings_in_spec else f"spec.{stanza}"


def delete_findings(
    old: Mapping[str, Any], gk: GroupKind, *, view: ClusterView, settings: Settings
) -> list[Finding]:
    """PA-C05 when a target is deleted; PA-C04 when a policy is."""
    key = key_of(old)
    if key is None:
        return []
    if gk in kinds.DEFAULT_TARGETS:
        return list(_orphans(key, view))
    policy = view.policy(key) or read_policy(old, view.profile(gk))
    if policy is None:
        return []
    after = _without(view, key)
    sample, total = _reach(settings.max_impact_objects, (policy, view))
    before = effective.compute_kind(sample, view, gk)
    after_results = effective.compute_kind(sample, after, gk)
    return list(
        _preview(
            before,
            after_results,
            settings,
            total=total,
            schema=_settings_schema(view.profile(gk)),
        )
    )


# --- reach -----------------------------------------------------------------------------------


def _without(view: ClusterView, key: ObjectKey) -> ClusterView:
    return OverlayView(view, deletes=[key]) if view.get(key) is not None else view


def _reach(limit: int, *placed: tuple[Policy, ClusterView]) -> tuple[list[ObjectKey], int]:
    """The first `limit` annotatable objects, in ladder order, that the policies may affect,
    each in its view — their targets and (Inherited) what lies below — and how many in all.

    A wide policy reaches thousands of objects and the preview shows 25: with one target
    (an update that keeps its target too) they are the head of the reach that the structure
    memo keeps in that order, with no copy or sort of the thousands on each review.
    """
    reaches: dict[int, tuple[ObjectKey, ...]] = {}
    for policy, view in placed:
        inherited = policy.policy_class == "Inherited"
        for target, section in policy_targets(policy, view):
            found = hierarchy.reach_in_order(target, section, view, inherited=inherited)
            reaches[id(found)] = found  # the memo's own tuple: the same one in either view
    if len(reaches) == 1:
        (ordered,) = reaches.values()
        return list(ordered[:limit]), len(ordered)
    union: set[ObjectKey] = set().union(*reaches.values())
    return kinds.in_ladder_order(union)[:limit], len(union)


def _settings_schema(profile: KindProfile) -> leaves.Schema:
    """The schema of a kind's settings as `effective` holds them: a stanza's, or the spec's
    for a kind whose settings sit in the spec itself (Direct kinds, implicit defaults)."""
    return stanza_schema(profile.spec_schema, "default") or profile.spec_schema


# --- PA-C01 ----------------------------------------------------------------------------------


def _conflicts(policy: Policy, view: ClusterView) -> Iterable[Finding]:
    field_of = {
        (ref.target_key(policy.key.namespace), ref.section_name): ref.field
        for ref in policy.targets
    }
    selector_field = policy.selectors[0].field if policy.selectors else "spec"
    vendor_rule = view.profile(policy.key.group_kind).conflict_keys is not None
    for target, section in policy_targets(policy, view):
        obj = view.get(target)
        for other in view.policies_targeting(target):
            if other.key == policy.key or other.key.group_kind != policy.key.group_kind:
                continue
            if section not in other.sections_on(target, obj):
                continue
            field = field_of.get((target, section), selector_field)
            # SPEC §2.5's line: the other policy is the same kind (no need to name it), named
            # without its namespace where it shares this one's, and the target is the one the
            # field names, unless a selector picked it.
            name = _named(other, policy)
            where = "it" if (target, section) in field_of else target.display(section)
            if vendor_rule:
                message = _vendor_conflict(policy, other, name, where, view)
            elif policy.policy_class == "Direct":
                message = _direct_conflict(policy, other, f"{name} targets {where} too")
            else:
                opening, rung = f"{name} targets {where} too", Rung(target, section)
                room = line_room("PA-C01", field)
                message = _inherited_conflict(policy, other, opening, rung, view, room)
            if message:
                yield Finding("PA-C01", field, message)


def _wins(a: Policy, b: Policy) -> bool:
    """SPEC §4.4: the older one wins, then `namespace/name` in byte order."""
    return a.order_key < b.order_key


def _named(other: Policy, policy: Policy) -> str:
    """`name` for a policy in `policy`'s namespace, else `namespace/name` (`/name`: cluster)."""
    if policy.key.namespace and other.key.namespace == policy.key.namespace:
        return other.key.name
    return other.ref


def _why(loser: Policy, winner: Policy) -> str:
    """Why `winner` wins (SPEC §4.4), in the words a PA-C01 line has room for."""
    return tie_why(loser, winner, same_age="same age, by name")


def _direct_conflict(policy: Policy, other: Policy, opening: str) -> str:
    if _wins(other, policy):
        return f"{opening} and wins ({_why(policy, other)}); this one is Conflicted"
    return f"{opening}; this one wins ({_why(other, policy)}): that one is Conflicted"


def _vendor_conflict(
    policy: Policy, other: Policy, name: str, where: str, view: ClusterView
) -> str | None:
    """For a kind whose vendor has its own rule for policies on one target (catalog
    `conflict_keys`, NGINX Gateway Fabric's): the one that comes second is Conflicted when
    both set one of its fields; otherwise both apply, merged, and nothing is lost."""
    found = effective.same_target_conflict(policy, other, view)
    if found is None:
        return None
    opening = f"{name} also sets {found.key} on {where}"
    if found.loser.key == policy.key:
        return f"{opening} and wins ({_why(policy, other)}): this one is Conflicted"
    return f"{opening}; this one wins ({_why(other, policy)}): that one is Conflicted"


def _inherited_conflict(
    policy: Policy, other: Policy, opening: str, rung: Rung, view: ClusterView, room: int
) -> str | None:
    """What either policy loses to the other at the rung both target, as the engine decides it
    (`effective.losses_at_one_rung`): the fields where they meet — or everything, where an
    atomic stanza is replaced whole (Envoy Gateway's and Kuadrant's kinds: the one that loses
    applies nothing there, however different their fields). The fields are listed as far as
    `room` lets them (SPEC §2.5's line), the rest counted."""
    losses = effective.losses_at_one_rung(policy, other, rung, view)
    lost = {loser.field for loser in losses if loser.policy == policy.ref}
    won = {loser.field for loser in losses if loser.policy == other.ref}
    if WHOLE in lost:
        return f"{opening} and wins whole (atomic)"
    if lost:
        head = f"{opening} and wins on "
        return head + listed(sorted(lost), room - len(head))
    if WHOLE in won:
        return f"{opening}; this one wins whole (atomic)"
    if won:
        head = f"{opening}; this one wins on "
        return head + listed(sorted(won), room - len(head))
    return None


# --- PA-C02, PA-C03 --------------------------------------------------------------------------


def _dead_defaults(
    policy: Policy, results: Mapping[ObjectKey, KindResult | None], view: ClusterView
) -> Iterable[Finding]:
    """Default fields that an override beats in EVERY context this policy's default reaches —
    or the whole default, where an atomic override replaces it (field `*`, named as the
    stanza is written).

    Read per group of contexts (those sharing one answer), each counting for its contexts.
    """
    reached = 0
    beaten: dict[str, set[str]] | None = None
    for result in results.values():
        for group in result.groups if result else ():
            mine = [
                loser
                for loser in group.losers
                if loser.policy == policy.ref and loser.stanza == "default"
            ]
            applies = any(
                src.policy == policy.ref and src.stanza == "default"
                for src in group.sources.values()
            )
            if not mine and not applies:
                continue
            reached += len(group.indices)
            here = {
                loser.field: {loser.by.policy or ""}
                for loser in mine
                if loser.by is not None and loser.by.stanza == "override"
            }
            beaten = (
                here
                if beaten is None
                else {f: beaten[f] | here[f] for f in beaten.keys() & here.keys()}
            )
    for name in sorted(beaten or {}):
        by = ", ".join(sorted((beaten or {})[name]))
        where = _stanza_field(policy, "default", view)
        if name == WHOLE:
            yield Finding(
                "PA-C02",
                where,
                f"can never take effect: replaced whole by {by}'s atomic override in all {reached} contexts",
            )
        else:
            yield Finding(
                "PA-C02",
                f"{where}.{name}",
                f"can never take effect: overridden by {by} in all {reached} contexts",
            )


def _beaten_by_override(
    policy: Policy, results: Mapping[ObjectKey, KindResult | None], view: ClusterView
) -> Iterable[Finding]:
    beaten: set[str] = set()
    for result in results.values():
        if result is None:
            continue
        for group in result.groups:
            # Losers are the group's; which rung is more specific depends on each context.
            mine = [
                loser
                for loser in group.losers
                if loser.by is not None
                and loser.by.policy == policy.ref
                and loser.by.stanza == "override"
                and loser.policy != policy.ref
            ]
            if not mine:
                continue
            for i in group.indices:
                depth = {rung.display(): d for d, rung in enumerate(result.all_contexts[i])}
                for loser in mine:
                    assert loser.by is not None
                    if depth.get(loser.at, -1) > depth.get(loser.by.at, len(depth)):
                        beaten.add(loser.policy)
    if beaten:
        names = sorted(beaten)
        shown = ", ".join(names[:MAX_NAMED]) + (
            f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else ""
        )
        yield Finding(
            "PA-C03",
            _stanza_field(policy, "override", view),
            f"beats {len(names)} more specific {_plural(len(names), 'policy', 'policies')}: {shown}",
        )


# --- PA-C04 ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Change:
    obj: ObjectKey
    where: str  # the object, or its section, as the context's last path entry
    before: str
    after: str


def _preview(
    before: Mapping[ObjectKey, KindResult | None],
    after: Mapping[ObjectKey, KindResult | None],
    settings: Settings,
    *,
    total: int,
    schema: leaves.Schema,
) -> Iterable[Finding]:
    """One line per changed field: `changes maxRetries on 3 HTTPRoutes (apps/r1 5→3, …)`.

    A field is a leaf of the kind's schema (SPEC §2.5, as PA-S11 compares them): a map or
    a list is one value, shown short."""
    by_field: dict[str, list[_Change]] = defaultdict(list)
    shorts: dict[int, _Shorts] = {}
    for key in kinds.in_ladder_order(after):
        old_values, new_values = (
            _field_values(key, before.get(key), shorts, schema),
            _field_values(key, after.get(key), shorts, schema),
        )
        for where in sorted(old_values.keys() | new_values.keys()):
            old_fields, new_fields = old_values.get(where, {}), new_values.get(where, {})
            for name in sorted(old_fields.keys() | new_fields.keys()):
                old, new = old_fields.get(name, "unset"), new_fields.get(name, "unset")
                if old != new:
                    by_field[name].append(_Change(key, where, old, new))
    for shown, name in enumerate(sorted(by_field)):
        if shown == settings.max_impact_lines:
            rest = len(by_field) - shown
            yield Finding(
                "PA-C04", "", f"... and {rest} more changed {_plural(rest, 'field', 'fields')}"
            )
            return
        yield Finding("PA-C04", "", _change_line(name, by_field[name]))
    if total > settings.max_impact_objects and by_field:
        yield Finding(
            "PA-C04",
            "",
            f"preview covers {settings.max_impact_objects} of {total} affected objects",
        )


def _field_values(
    key: ObjectKey, result: KindResult | None, shorts: dict[int, _Shorts], schema: leaves.Schema
) -> dict[str, dict[str, str]]:
    """Per object or section (the context's last path entry): each field's value as short text.

    Contexts that end at the same place but disagree (a route on two Gateways) say `mixed`.
    `shorts` holds each answer's fields as text, by answer: objects below one rung share
    their answers (the engine memo), so a preview spells each out once.
    """
    if result is None:
        return {}
    seen: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for group in result.groups:
        found = shorts.get(id(group.effective))
        if found is None:
            fields = [
                (leaves.top_fields(path), _short(value))
                for path, value in leaves.leaves(group.effective, schema).items()
            ]
            found = shorts[id(group.effective)] = _Shorts(group.effective, fields)
        for i in group.indices:
            path = result.all_paths[i]
            at = seen[path[-1] if path else key.display()]
            for name, text in found.fields:
                at[name].add(text)
    return {
        where: {
            name: next(iter(vals)) if len(vals) == 1 else "mixed" for name, vals in fields.items()
        }
        for where, fields in seen.items()
    }


class _Shorts(NamedTuple):
    """One answer's fields as (top field, short text); holds the answer so its id stays its."""

    effective: Mapping[str, Any]
    fields: list[tuple[str, str]]


def _change_line(name: str, changes: Sequence[_Change]) -> str:
    """The line for one field, within SPEC §2.5's 120 characters: fewer examples shown, then
    shorter values, then the objects counted as one number, until an example fits; a field
    name too long for any of that is cut last."""
    counts: dict[str, int] = defaultdict(int)
    for obj in {change.obj for change in changes}:
        counts[obj.kind] += 1
    by_kind = ", ".join(f"{n} {kind}{'' if n == 1 else 's'}" for kind, n in sorted(counts.items()))
    total = sum(counts.values())
    one_kind = len(counts) == 1
    for on in (by_kind, f"{total} object{'' if total == 1 else 's'}"):
        for shown, value_limit in ((MAX_EXAMPLES, 24), (2, 24), (1, 24), (1, 12)):
            line = f"changes {name} on {on} ({_examples(changes[:shown], value_limit, one_kind)}"
            line += ", …)" if len(changes) > shown else ")"
            if len(line) <= MAX_C04_LINE:
                return line
    line = f"changes {name} on {by_kind} (…)"
    return line if len(line) <= MAX_C04_LINE else line[: MAX_C04_LINE - 1] + "…"


def _examples(changes: Sequence[_Change], value_limit: int, one_kind: bool) -> str:
    """Examples with the same change share it: `apps/r1, apps/r2 5→3`."""
    by_change: dict[tuple[str, str], list[str]] = {}
    for c in changes:
        change = (_cut(c.before, value_limit), _cut(c.after, value_limit))
        by_change.setdefault(change, []).append(_name(c.where, one_kind))
    return "; ".join(f"{', '.join(names)} {b}→{a}" for (b, a), names in by_change.items())


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _name(where: str, one_kind: bool) -> str:
    """`apps/r1` when every example is of one kind (the count already says which), else whole."""
    return where.split("/", 1)[1] if one_kind and "/" in where else where


def _short(value: Any, limit: int = 24) -> str:
    kind = type(value)
    text: str
    if kind is str:
        text = value
    elif kind is int:  # most values; written as JSON writes them, without its encoder
        text = str(value)
    else:
        text = json.dumps(value, separators=(",", ":"), sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


# --- PA-C05 ----------------------------------------------------------------------------------


def _orphans(key: ObjectKey, view: ClusterView) -> Iterable[Finding]:
    holders = [p for p in view.policies_targeting(key) if p.key != key]
    if not holders:
        return
    names = [f"{p.key.kind} {p.ref}" for p in holders]
    shown = ", ".join(names[:MAX_NAMED]) + (
        f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else ""
    )
    yield Finding("PA-C05", "", f"{key} is still targeted by {shown}; they become TargetNotFound")
