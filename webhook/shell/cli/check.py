"""`policy-webhook check PATH...`: the admission rules, offline, for CI and GitOps (SPEC §7).

Every policy found under PATH is admitted as a CREATE against the state of all the other
objects there — exactly what the webhook would answer on `kubectl apply`. Exit codes are a
contract: 0 nothing denied, 1 something denied, 2 usage or read errors.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from webhook.core.admission import validation as admission
from webhook.core.model.refs import ObjectKey
from webhook.core.model.settings import Settings
from webhook.core.rules.findings import Verdict
from webhook.core.state.store import Store
from webhook.shell.cli.manifests import Located

EXIT_OK, EXIT_DENIED, EXIT_ERROR = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Checked:
    key: ObjectKey
    located: Located
    verdict: Verdict


def check_store(
    store: Store, where: Mapping[ObjectKey, Located], settings: Settings
) -> list[Checked]:
    """Admit every policy in the store against the others, in file order."""
    results: list[Checked] = []
    policy_keys = [
        key for key, located in where.items() if store.is_policy_object(key.group_kind, located.obj)
    ]
    for key in sorted(policy_keys, key=lambda k: (where[k].path, where[k].line)):
        obj = where[key].obj
        store.delete(key)  # "against the state of all the other objects"
        try:
            verdict = admission.check_policy(obj, key.group_kind, view=store, settings=settings)
        finally:
            store.upsert(obj)
        results.append(Checked(key, where[key], verdict))
    return results


def exit_code(results: Sequence[Checked]) -> int:
    return EXIT_DENIED if any(not r.verdict.allowed for r in results) else EXIT_OK


def print_human(results: Sequence[Checked], out: TextIO) -> None:
    for result in results:
        verdict = result.verdict
        for judged in verdict.judged:
            if judged.action == "off":
                continue
            out.write(
                f"{result.located.where}: {result.key} {judged.action.upper()} {judged.finding.text}\n"
            )
        for note in verdict.notes:
            out.write(f"{result.located.where}: {result.key} WARN {note}\n")
    denied = sum(1 for r in results if not r.verdict.allowed)
    warned = sum(
        1 for r in results if r.verdict.allowed and (r.verdict.warnings or r.verdict.notes)
    )
    clean = len(results) - denied - warned
    out.write(
        f"{len(results)} policies checked: {denied} denied, {warned} allowed with warnings, {clean} clean\n"
    )


def as_json(results: Sequence[Checked]) -> dict[str, Any]:
    return {
        "policies": [
            {
                "kind": r.key.kind,
                "group": r.key.group,
                "namespace": r.key.namespace,
                "name": r.key.name,
                "file": r.located.path,
                "line": r.located.line,
                "allowed": r.verdict.allowed,
                "findings": [
                    {
                        "rule": j.finding.rule_id,
                        "action": j.action,
                        "field": j.finding.field,
                        "message": j.finding.message,
                    }
                    for j in r.verdict.judged
                    if j.action != "off"
                ],
                "notes": list(r.verdict.notes),
            }
            for r in results
        ],
        "summary": {
            "checked": len(results),
            "denied": sum(1 for r in results if not r.verdict.allowed),
        },
    }


def print_json(results: Sequence[Checked], out: TextIO) -> None:
    json.dump(as_json(results), out, indent=2, sort_keys=True)
    out.write("\n")
