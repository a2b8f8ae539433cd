"""What one policy reaches, and where it wins and loses (`explain` of a policy, SPEC §7 rev. 2).

The engine answers per object ("what applies here, and who lost"); this turns the question
around. The objects a policy may reach are what lies below each of its attachment points
(`hierarchy.affected_by`, as the fan-out finds them); on each, the engine's answer for the
policy's kind is read back for that one policy: in every context that passes through one of
its attachment points, the fields it sets (wins) and those it loses, with why and to whom.
Contexts where it wins and loses the same are shown once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from webhook.core.engine import effective, hierarchy
from webhook.core.engine.board import ContextResult, Source
from webhook.core.model import kinds, pointer
from webhook.core.model.policy import Policy
from webhook.core.model.profiles import Merge, PolicyClass
from webhook.core.model.refs import ObjectKey
from webhook.core.state.store import ClusterView, policy_targets


@dataclass(frozen=True, slots=True)
class Win:
    """A field this policy sets in a context."""

    pointer: str  # JSON pointer into the context's effective value
    value: Any
    stanza: str
    at: str


@dataclass(frozen=True, slots=True)
class Loss:
    """A setting of this policy that does not apply in a context, why, and what won."""

    field: str  # `backoff.maxInterval`, or `*` when the policy lost as a whole
    stanza: str
    at: str
    reason: str
    to: Source | None  # the winner; None when no single setting won


@dataclass(frozen=True, slots=True)
class Outcome:
    """Contexts of one object where the policy wins and loses the same."""

    paths: tuple[tuple[str, ...], ...]
    wins: tuple[Win, ...]
    losses: tuple[Loss, ...]


@dataclass(frozen=True, slots=True)
class Reached:
    key: ObjectKey
    outcomes: tuple[Outcome, ...]


@dataclass(frozen=True, slots=True)
class AttachmentPoint:
    where: str  # `Gateway/infra/gw#https`, `Namespace/apps`
    exists: bool


@dataclass(frozen=True, slots=True)
class PolicyReach:
    policy: Policy
    policy_class: PolicyClass
    merge: Merge
    attached: tuple[AttachmentPoint, ...]
    objects: tuple[Reached, ...]

    def count_contexts(self, *, winning: bool | None = None, losing: bool | None = None) -> int:
        """Contexts reached; only those where it wins (or loses) at least one field if asked."""
        return sum(
            len(o.paths)
            for r in self.objects
            for o in r.outcomes
            if (winning is None or bool(o.wins) == winning)
            and (losing is None or bool(o.losses) == losing)
        )


def reach(policy: Policy, view: ClusterView) -> PolicyReach:
    """Every object and context `policy` reaches in `view`, with what it wins and loses."""
    gk = policy.key.group_kind
    profile = view.profile(gk)
    points = policy_targets(policy, view)
    inherited = policy.policy_class == "Inherited"
    candidates: set[ObjectKey] = set()
    for target, section in points:
        candidates |= hierarchy.affected_by(target, section, view, inherited=inherited)
    displays = frozenset(target.display(section) for target, section in points)
    objects: list[Reached] = []
    policy_class: PolicyClass = profile.policy_class or policy.policy_class
    results = effective.compute_kind(kinds.in_ladder_order(candidates), view, gk)
    for key, result in results.items():
        if result is None:
            continue
        policy_class = result.policy_class
        if policy.ref in result.policies:
            outcomes = _outcomes(result.contexts, policy.ref, displays)
            if outcomes:
                objects.append(Reached(key, outcomes))
    attached = tuple(
        AttachmentPoint(target.display(section), view.get(target) is not None)
        for target, section in points
    )
    return PolicyReach(policy, policy_class, profile.merge, attached, tuple(objects))


def _outcomes(
    contexts: Sequence[ContextResult], ref: str, displays: frozenset[str]
) -> tuple[Outcome, ...]:
    grouped: dict[str, tuple[list[tuple[str, ...]], tuple[Win, ...], tuple[Loss, ...]]] = {}
    for ctx in contexts:
        wins = tuple(
            Win(at, pointer.resolve(ctx.effective, at), src.stanza, src.at)
            for at, src in sorted(ctx.sources.items())
            if src.policy == ref
        )
        losses = tuple(
            Loss(loser.field, loser.stanza, loser.at, loser.reason, loser.by or _sole_winner(ctx))
            for loser in ctx.losers
            if loser.policy == ref
        )
        passes = any(rung.display() in displays for rung in ctx.context)
        if not (wins or losses or passes):
            continue  # a context through another parent, which this policy is not on
        identity = json.dumps([_win_json(w) for w in wins] + [_loss_json(x) for x in losses])
        entry = grouped.setdefault(identity, ([], wins, losses))
        entry[0].append(ctx.path)
    return tuple(Outcome(tuple(paths), wins, losses) for paths, wins, losses in grouped.values())


def _sole_winner(ctx: ContextResult) -> Source | None:
    """Who took a context where a Direct policy lost whole: the one policy all fields are from."""
    winners = {src.policy for src in ctx.sources.values()}
    if len(winners) == 1:
        return next(iter(ctx.sources.values()))
    return None


def _win_json(win: Win) -> dict[str, Any]:
    return {"field": win.pointer, "value": win.value, "stanza": win.stanza, "at": win.at}


def _loss_json(loss: Loss) -> dict[str, Any]:
    return {
        "field": loss.field,
        "stanza": loss.stanza,
        "at": loss.at,
        "reason": loss.reason,
        "to": loss.to.as_json() if loss.to is not None else None,
    }


# --- the JSON/YAML form (docs/cli.md) ---------------------------------------------------------


def as_json(found: PolicyReach) -> dict[str, Any]:
    key = found.policy.key
    return {
        "policy": {
            **object_fields(key),
            "ref": found.policy.ref,
            "class": found.policy_class,
            "merge": found.merge,
        },
        "attachedAt": [{"ref": a.where, "exists": a.exists} for a in found.attached],
        "summary": {
            "objects": len(found.objects),
            "contexts": found.count_contexts(),
            "winsIn": found.count_contexts(winning=True),
            "losesIn": found.count_contexts(losing=True),
        },
        "objects": [
            {
                **object_fields(r.key),
                "ref": r.key.display(),
                "contexts": [
                    {
                        "paths": [list(p) for p in o.paths],
                        "wins": [_win_json(w) for w in o.wins],
                        "losses": [_loss_json(x) for x in o.losses],
                    }
                    for o in r.outcomes
                ],
            }
            for r in found.objects
        ],
    }


def object_fields(key: ObjectKey) -> dict[str, str]:
    return {"kind": key.kind, "group": key.group, "namespace": key.namespace, "name": key.name}


# --- for people -------------------------------------------------------------------------------


def render_text(found: PolicyReach) -> str:
    policy = found.policy
    how = (
        found.policy_class
        if found.policy_class == "Direct"
        else f"{found.policy_class}, {found.merge}"
    )
    out = [f"{policy.key.group_kind} {policy.ref}  ({how})\n"]
    for point in found.attached:
        out.append(f"  attached at {point.where}{'' if point.exists else '  (does not exist)'}\n")
    if not found.objects:
        out.append(
            "  reaches no object: its targets do not exist, or it does not count on them "
            "(another namespace without a ReferenceGrant, a target kind its profile does not list)\n"
        )
        return "".join(out)
    out.append(
        f"  reaches {_plural(len(found.objects), 'object')} in "
        f"{_plural(found.count_contexts(), 'context')}: wins in "
        f"{found.count_contexts(winning=True)}, loses in {found.count_contexts(losing=True)}\n"
    )
    for reached in found.objects:
        out.append(f"\n  {reached.key.display()}\n")
        for outcome in reached.outcomes:
            out.extend(f"    via {' > '.join(path)}\n" for path in outcome.paths)
            out.extend(_outcome_lines(outcome))
    return "".join(out)


def _outcome_lines(outcome: Outcome) -> list[str]:
    if not outcome.wins and not outcome.losses:
        return ["      sets nothing here\n"]
    lines = []
    for win in outcome.wins:
        field = win.pointer.lstrip("/").replace("/", ".")
        value = json.dumps(win.value, separators=(",", ":"), sort_keys=True)
        lines.append(f"      wins   {field} = {value}  ({win.stanza} at {win.at})\n")
    for loss in outcome.losses:
        what = "the whole policy" if loss.field == "*" else loss.field
        # The reason names the winner as a rule; where it does not, say who it is.
        named = loss.to is not None and loss.to.policy is not None and loss.to.policy in loss.reason
        to = "" if named else f" to {_who(loss.to)}"
        lines.append(f"      loses  {what} ({loss.stanza} at {loss.at}){to} — {loss.reason}\n")
    return lines


def _who(source: Source | None) -> str:
    if source is None:
        return "no single winner"
    if source.policy is None:
        return f"the object's own value ({source.at})"
    return f"{source.policy} ({source.stanza} at {source.at})"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
