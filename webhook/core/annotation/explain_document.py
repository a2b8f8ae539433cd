"""`explain -o json|yaml`: the whole answer as a versioned document (schema in docs/cli.md).

The annotation value (SPEC §3.3) is capped in size and carries no losers; this document is
what a person or a script asks `explain` for: never truncated, every context with its
effective value, the source of each field, and every setting that lost, why and to whom.
It mirrors the annotation's shape (`policies` keyed by `Kind.group`, contexts with `paths`)
so that a reader of one can read the other.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from webhook.core.annotation import policy_reach
from webhook.core.engine.board import ContextResult
from webhook.core.engine.effective import KindResult
from webhook.core.model.refs import ObjectKey

API_VERSION = "cli.policy-attachment.dev/v1"
OBJECT_KIND = "Explanation"
POLICY_KIND = "PolicyExplanation"


def object_document(key: ObjectKey, results: Sequence[KindResult]) -> dict[str, Any]:
    """An object's effective policies, per kind and per group of alike contexts."""
    return {
        "apiVersion": API_VERSION,
        "kind": OBJECT_KIND,
        "object": {**policy_reach.object_fields(key), "ref": key.display()},
        "policies": {str(result.group_kind): _kind_entry(result) for result in results},
    }


def policy_document(found: policy_reach.PolicyReach) -> dict[str, Any]:
    """What a policy reaches, where it wins and where it loses (`policy_reach`)."""
    return {"apiVersion": API_VERSION, "kind": POLICY_KIND, **policy_reach.as_json(found)}


def _kind_entry(result: KindResult) -> dict[str, Any]:
    groups: dict[str, tuple[dict[str, Any], list[list[str]]]] = {}
    for ctx in result.contexts:
        entry = _context_entry(ctx)
        identity = json.dumps(entry, sort_keys=True, default=str)
        groups.setdefault(identity, (entry, []))[1].append(list(ctx.path))
    return {
        "class": result.policy_class,
        "merge": result.merge,
        "policies": list(result.policies),
        "contexts": [{"paths": paths, **entry} for entry, paths in groups.values()],
    }


def _context_entry(ctx: ContextResult) -> dict[str, Any]:
    return {
        "effective": ctx.effective,
        "sources": {at: source.as_json() for at, source in sorted(ctx.sources.items())},
        "losers": [
            {
                "policy": loser.policy,
                "stanza": loser.stanza,
                "at": loser.at,
                "field": loser.field,
                "reason": loser.reason,
                "by": loser.by.as_json() if loser.by is not None else None,
            }
            for loser in ctx.losers
        ],
    }
