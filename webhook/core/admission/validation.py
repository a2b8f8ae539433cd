"""`/validate`: one AdmissionReview request in, a verdict out (SPEC §2).

This is the whole of what `/validate` means; the HTTP server only decodes, calls `validate`
and encodes. `/mutate` is `mutation.mutate`. No IO here, no awaiting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.admission.reviews import Request
from webhook.core.model import kinds, meta
from webhook.core.model.policy import SELECTORS_KEY, class_of, read_policy, spec_of
from webhook.core.model.profiles import POLICY_LABEL, KindProfile
from webhook.core.model.refs import GroupKind, ObjectKey, key_of
from webhook.core.model.settings import Settings
from webhook.core.rules import impact, shape, targets
from webhook.core.rules.findings import Finding, Judge, Judged, Verdict
from webhook.core.state.store import ClusterView

# Bounds on a policy's `spec` before any rule reads it (SPEC §2.6: a policy the rules cannot
# read is a DENY, never a 500). The rules and the engine walk a spec recursively and spend
# tens of microseconds per value, on the event loop every other admission call waits on;
# a real policy has tens of values a few levels deep, while the API server admits objects
# of up to 3 MiB: a million values, or nesting that exhausts Python's recursion limit.
MAX_SPEC_DEPTH = 64
MAX_SPEC_VALUES = 5000


def validate(request: Request, *, view: ClusterView, settings: Settings) -> Verdict:
    """SPEC §2: a policy's CREATE or UPDATE is judged, its DELETE previewed; anything else is
    allowed as it is (a `status` write, a kind that is never a policy)."""
    if request.get("subResource"):
        return Verdict()  # SPEC §2.7: status (and other subresource) writes are not ours to judge
    gk = GroupKind(request["kind"].get("group", ""), request["kind"]["kind"])
    operation = request["operation"]
    if operation == "DELETE":
        return check_delete(request.get("oldObject"), gk, view=view, settings=settings)
    if operation not in ("CREATE", "UPDATE") or gk in kinds.NEVER_POLICIES:
        return Verdict()  # a route, Service, … sent by a wide rule: not a policy to judge
    obj = request.get("object") or {}
    return check_policy(obj, gk, view=view, settings=settings, old=request.get("oldObject"))


def check_policy(
    obj: Mapping[str, Any],
    gk: GroupKind,
    *,
    view: ClusterView,
    settings: Settings,
    old: Mapping[str, Any] | None = None,
) -> Verdict:
    """Every finding for one policy object, judged by the configured actions: the rules that
    read the object alone, then — when none of them denies — the conflicts and the impact
    preview, which need the engine (a denied policy changes nothing, SPEC §2.3)."""
    judge, judged = _judged_object_findings(obj, gk, view=view, settings=settings)
    if _conflicts_apply(judged):
        found = impact.policy_findings(obj, gk, view=view, settings=settings, old=old)
        judged += map(judge, found)
    return Verdict(tuple(judged))


def check_stored(
    obj: Mapping[str, Any], gk: GroupKind, *, view: ClusterView, settings: Settings
) -> tuple[Verdict, frozenset[ObjectKey]]:
    """A policy that `view` holds, judged as `check_policy` judges its CREATE against all the
    others — the background audit (SPEC §8.3) — but for the impact preview (PA-C04), which
    describes a change, and none is made. With the objects whose effective policy the
    conflict findings read (none when they did not run)."""
    judge, judged = _judged_object_findings(obj, gk, view=view, settings=settings)
    policy = read_policy(obj, view.profile(gk)) if _conflicts_apply(judged) else None
    if policy is None:
        return Verdict(tuple(judged)), frozenset()
    found, read = impact.stored_policy_findings(policy, view=view, settings=settings)
    return Verdict((*judged, *map(judge, found))), read


def _judged_object_findings(
    obj: Mapping[str, Any], gk: GroupKind, *, view: ClusterView, settings: Settings
) -> tuple[Judge, list[Judged]]:
    profile = view.profile(gk)
    judge = Judge(profile.rule_actions, settings.rule_actions, strict=settings.strict)
    return judge, [judge(f) for f in _object_findings(obj, gk, profile=profile, view=view)]


def _conflicts_apply(judged: list[Judged]) -> bool:
    """A denied policy changes nothing (SPEC §2.3), and an unreadable one cannot be read: it
    has its PA-S00 finding, whatever its configured action, and no other (`_object_findings`;
    sizing a spec up again would cost as much as the rules that read it)."""
    return not any(j.action == "deny" or j.finding.rule_id == "PA-S00" for j in judged)


def check_delete(old: object, gk: GroupKind, *, view: ClusterView, settings: Settings) -> Verdict:
    """PA-C04 for a policy deleted, PA-C05 for a target deleted: warnings, never a denial —
    whatever the configured action — since refusing a delete for a warning would surprise
    every admin (docs/decisions.md)."""
    if not isinstance(old, Mapping) or key_of(old) is None:
        return Verdict()
    judge = Judge(view.profile(gk).rule_actions, settings.rule_actions, strict=False)
    found = impact.delete_findings(old, gk, view=view, settings=settings)
    return Verdict(tuple(judged.softened() for judged in map(judge, found)))


def _object_findings(
    obj: Mapping[str, Any], gk: GroupKind, *, profile: KindProfile, view: ClusterView
) -> list[Finding]:
    """The shape and target rules (SPEC §2.1, §2.2), and PA-K01, PA-S00."""
    spec = spec_of(obj)
    if spec is None:
        return [Finding("PA-S00", "spec", f"expected an object, got {_type_name(obj.get('spec'))}")]
    too_big = _too_big(spec)
    if too_big is not None:
        return [Finding("PA-S00", *too_big)]
    findings: list[Finding] = []
    policy_class, inferred = class_of(spec, profile)
    if inferred:
        message = f"{gk}: no {POLICY_LABEL} label, no profile: {policy_class}"
        findings.append(Finding("PA-K01", "", message))
    findings += shape.check(spec, profile=profile, policy_class=policy_class)
    findings += targets.check(
        spec,
        profile=profile,
        policy_class=policy_class,
        policy_gk=gk,
        namespace=_namespace_of(obj),
        view=view,
    )
    return findings


def _too_big(spec: Mapping[str, Any]) -> tuple[str, str] | None:
    """(field, message) when `spec` is deeper or larger than the rules will read; else None.

    Counted: every field, and every object or list inside a list. A list of strings or
    numbers is one leaf to every rule (SPEC §5.3) and costs them next to nothing however long
    it is — Envoy Gateway's `clientCIDRs` may list thousands of ranges, which its API server
    accepts — so its items count once, with the field; but the items of `targetRefs` and
    `targetSelectors` are each judged, so each counts."""
    values = 1
    stack: list[tuple[object, int, str]] = [(spec, 1, "spec")]
    while stack:
        value, depth, top = stack.pop()
        if isinstance(value, list) and not (depth == 2 and top in _JUDGED_ONE_BY_ONE):
            value = [child for child in value if isinstance(child, Mapping | list)]
        elif not isinstance(value, Mapping | list):
            continue
        values += len(value)  # counted before they are looked at: a list may hold millions
        if values > MAX_SPEC_VALUES:
            return "spec", f"holds more than {MAX_SPEC_VALUES} values; the rules cannot read it"
        if depth == MAX_SPEC_DEPTH and value:
            return top, f"nests more than {MAX_SPEC_DEPTH} levels deep; the rules cannot read it"
        if isinstance(value, Mapping):
            stack.extend(
                (child, depth + 1, f"spec.{key}" if depth == 1 else top)
                for key, child in value.items()
            )
        else:
            stack.extend((child, depth + 1, top) for child in value)
    return None


_JUDGED_ONE_BY_ONE = frozenset({"spec.targetRefs", f"spec.{SELECTORS_KEY}"})


def _namespace_of(obj: Mapping[str, Any]) -> str:
    return meta.namespace(obj)


def _type_name(value: object) -> str:
    if value is None:
        return "nothing"
    return {
        str: "a string",
        list: "a list",
        int: "a number",
        float: "a number",
        bool: "a boolean",
    }.get(type(value), type(value).__name__)
