"""`explain` for people: why an object gets the effective policy it gets (SPEC §7).

Renders the engine's results as text: per policy kind, per group of identical contexts, each
field's value and its source (policy, stanza, level), then the settings that lost and why.
The machine form is `explain_document`'s; what people type to name the object, `spellings`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from webhook.core.engine.board import ContextResult
from webhook.core.engine.effective import KindResult
from webhook.core.model import pointer
from webhook.core.model.leaves import is_unset
from webhook.core.model.refs import ObjectKey


def render_text(key: ObjectKey, results: Sequence[KindResult]) -> str:
    if not results:
        return f"{key}: no policy reaches it (no annotation).\n"
    out = [f"{key}\n"]
    for result in results:
        how = (
            result.policy_class
            if result.policy_class == "Direct"
            else f"{result.policy_class}, {result.merge}"
        )
        out.append(f"\n{result.group_kind}  ({how})\n")
        for group in _grouped(result.contexts):
            out.extend(_context_block(group))
        out.append(f"  policies: {', '.join(result.policies)}\n")
    return "".join(out)


def _grouped(contexts: Sequence[ContextResult]) -> list[list[ContextResult]]:
    """Contexts with the same effective value, sources and losers are shown once."""
    groups: dict[str, list[ContextResult]] = {}
    for ctx in contexts:
        identity = json.dumps(
            [
                ctx.effective,
                {p: s.as_json() for p, s in ctx.sources.items()},
                [repr(x) for x in ctx.losers],
            ],
            sort_keys=True,
            default=str,
        )
        groups.setdefault(identity, []).append(ctx)
    return list(groups.values())


def _context_block(group: list[ContextResult]) -> list[str]:
    first = group[0]
    lines = [f"  via {' > '.join(ctx.path)}\n" for ctx in group]
    if not first.sources:
        lines.append("    (nothing set)\n")
    rows = [
        (
            pointer.lstrip("/").replace("/", "."),
            _value_at(first.effective, pointer),
            s.stanza,
            s.policy or "(object)",
            s.at,
        )
        for pointer, s in sorted(first.sources.items())
    ]
    if rows:
        widths = [max(len(str(row[i])) for row in rows) for i in range(4)]
        for row in rows:
            cells = [str(cell).ljust(widths[i]) for i, cell in enumerate(row[:4])]
            lines.append(f"    {cells[0]}  = {cells[1]}  from {cells[2]} {cells[3]}  at {row[4]}\n")
    for loser in first.losers:
        lines.append(
            f"    lost: {loser.policy} {loser.stanza} {loser.field} at {loser.at} — {loser.reason}\n"
        )
    return lines


def _value_at(effective: Any, at: str) -> str:
    node = pointer.resolve(effective, at)
    return "unset" if is_unset(node) else json.dumps(node, separators=(",", ":"), sort_keys=True)
