"""`policy-webhook explain KIND/NAME`: read the state, ask the engine, print (SPEC §7).

State comes from `--manifests`, or from the cluster (`connection` chooses it as kubectl would,
checks that it answers before the engine loads, then lists each resource once; one line and
exit 2 when it cannot be read). An object kind explains that object's effective policies; a
policy kind what that policy reaches, where it wins and where it loses. `-o table` is for
people; `-o json|yaml` print the full result in the schema of docs/cli.md
(`explain_document`), never truncated.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from webhook.core.annotation import explain_document, explanation, policy_reach, spellings
from webhook.core.engine import effective
from webhook.core.model.profiles import OperatorConfig
from webhook.core.model.refs import ObjectKey
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store
from webhook.shell.cli import connection, output
from webhook.shell.cluster.kubeconfig import Target
from webhook.shell.process.errors import UsageError


def run(
    args: argparse.Namespace,
    *,
    config: OperatorConfig,
    settings: Settings,
    target: Target | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Exit code 0. Without `--manifests`, the cluster `target` (`connection.reach`, else
    chosen here); streams default to the process's own."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        spellings.split_words(args.target)  # a malformed target needs no state to be refused
    except spellings.SpellingError as exc:
        raise UsageError(str(exc)) from None
    store = Store(config)
    read = connection.read_state(args, store, settings, target=target, err=err)
    try:
        named = spellings.resolve(args.target, store)
    except spellings.SpellingError as exc:
        raise UsageError(str(exc)) from None
    key = spellings.object_key(named, read.namespace, store)
    if named.is_policy:
        policy = store.policy(key)
        if policy is None:
            raise UsageError(_not_found(key, store))
        found = policy_reach.reach(policy, store)
        if args.output == "table":
            out.write(policy_reach.render_text(found))
        else:
            output.write(explain_document.policy_document(found), args.output, out)
        return 0
    if store.get(key) is None:
        raise UsageError(_not_found(key, store))
    results = effective.compute(key, store)
    if args.output == "table":
        out.write(explanation.render_text(key, results))
    else:
        output.write(explain_document.object_document(key, results), args.output, out)
    return 0


def _not_found(key: ObjectKey, store: Store) -> str:
    """`HTTPRoute/apps/nope not found`, and where one of that name is, as a hint."""
    elsewhere = [
        ns for ns in spellings.namespaces_holding(key.group_kind, key.name, store)
        if ns != key.namespace
    ]  # fmt: skip
    if not elsewhere:
        return f"{key} not found"
    where = ", ".join(elsewhere)
    return (
        f"{key} not found; {key.kind} {key.name!r} exists in namespace {where} "
        f"(use -n {elsewhere[0]})"
    )
