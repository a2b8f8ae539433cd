"""Admission decisions: one AdmissionReview request in, a verdict or a patch out.

This is the whole of what `/validate` and `/mutate` mean; the HTTP server only decodes,
calls these and encodes. No IO here, no awaiting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.admission.reviews import Request
from webhook.core.model import kinds
from webhook.core.model.policy import class_of, spec_of
from webhook.core.model.refs import GroupKind, key_of
from webhook.core.model.settings import Settings
from webhook.core.rules import shape, targets
from webhook.core.rules.findings import Finding, Verdict, decide
from webhook.core.state.store import ClusterView

# Bounds on a policy's `spec` before any rule reads it (SPEC §2.6: a policy the rules cannot
# read is a DENY, never a 500). The rules and the engine walk a spec recursively and spend
# tens of microseconds per value, on the event loop every other admission call waits on;
# a real policy has tens of values a few levels deep, while the API server admits objects
# of up to 3 MiB: a million values, or nesting that exhausts Python's recursion limit.
MAX_SPEC_DEPTH = 64
MAX_SPEC_VALUES = 5000


def validate(request: Request, *, view: ClusterView, settings: Settings) -> Verdict:
    """SPEC §2: check a policy on CREATE/UPDATE; DELETE and `status` writes are allowed."""
    if request.get("subResource"):
        return Verdict()  # SPEC §2.7: status (and other subresource) writes are not ours to judge
    gk = GroupKind(request["kind"].get("group", ""), request["kind"]["kind"])
    if request["operation"] == "DELETE":
        return _on_delete(request, gk, view=view, settings=settings)
    if request["operation"] not in ("CREATE", "UPDATE") or gk in kinds.NEVER_POLICIES:
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
    """Every finding for one policy object, judged by the configured actions."""
    profile = view.profile(gk)
    findings: list[Finding] = []
    spec = spec_of(obj)
    too_big = None if spec is None else _too_big(spec)
    if spec is None:
        findings.append(
            Finding("PA-S00", "spec", f"expected an object, got {_type_name(obj.get('spec'))}")
        )
    elif too_big is not None:
        findings.append(Finding("PA-S00", too_big[0], too_big[1]))
    else:
        policy_class, inferred = class_of(spec, profile)
        if inferred:
            findings.append(
                Finding(
                    "PA-K01",
                    "",
                    f"{gk} has no {_label_hint()} label and no profile; treated as {policy_class}",
                )
            )
        namespace = _namespace_of(obj)
        findings += shape.check(spec, profile=profile, policy_class=policy_class)
        findings += targets.check(
            spec,
            profile=profile,
            policy_class=policy_class,
            policy_gk=gk,
            namespace=namespace,
            view=view,
        )
    verdict = decide(
        findings,
        kind_actions=profile.rule_actions,
        global_actions=settings.rule_actions,
        strict=settings.strict,
    )
    if spec is None or too_big is not None or not verdict.allowed:
        return verdict  # a denied policy changes nothing: no conflicts or impact to preview
    findings += _engine_findings(obj, gk, view=view, settings=settings, old=old)
    return decide(
        findings,
        kind_actions=profile.rule_actions,
        global_actions=settings.rule_actions,
        strict=settings.strict,
    )


def _on_delete(
    request: Request, gk: GroupKind, *, view: ClusterView, settings: Settings
) -> Verdict:
    old = request.get("oldObject")
    if not isinstance(old, Mapping):
        return Verdict()
    findings = _delete_findings(old, gk, view=view, settings=settings)
    return decide(
        findings,
        kind_actions=view.profile(gk).rule_actions,
        global_actions=settings.rule_actions,
        strict=False,  # a DELETE is never denied: findings only warn (SPEC §2.7)
    )


def _engine_findings(
    obj: Mapping[str, Any],
    gk: GroupKind,
    *,
    view: ClusterView,
    settings: Settings,
    old: Mapping[str, Any] | None,
) -> list[Finding]:
    """Conflict and impact findings (SPEC §2.3) — filled in by `webhook.core.rules.impact`."""
    from webhook.core.rules import (
        impact,  # local: impact depends on the engine, admission must not cycle
    )

    return impact.policy_findings(obj, gk, view=view, settings=settings, old=old)


def _delete_findings(
    old: Mapping[str, Any], gk: GroupKind, *, view: ClusterView, settings: Settings
) -> list[Finding]:
    from webhook.core.rules import impact

    key = key_of(old)
    if key is None:
        return []
    return impact.delete_findings(old, gk, view=view, settings=settings)


def _too_big(spec: Mapping[str, Any]) -> tuple[str, str] | None:
    """(field, message) when `spec` is deeper or larger than the rules will read; else None."""
    values = 1
    stack: list[tuple[object, int, str]] = [(spec, 1, "spec")]
    while stack:
        value, depth, top = stack.pop()
        if not isinstance(value, Mapping | list):
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


def _namespace_of(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    return namespace if isinstance(namespace, str) else ""


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


def _label_hint() -> str:
    return "gateway.networking.k8s.io/policy"


def mutate(request: Request, *, view: ClusterView, settings: Settings) -> list[dict[str, Any]]:
    """SPEC §3.1: the JSON Patch that sets (or removes) our annotation, and nothing else."""
    from webhook.core.admission import mutation

    return mutation.annotation_patch(request, view=view, settings=settings)
