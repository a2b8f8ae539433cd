"""`policy-webhook check PATH... | -`: the admission rules, offline, for CI and GitOps (SPEC §7).

Every policy found under PATH (or on standard input) is admitted as a CREATE against the
state of all the other objects there — exactly what the webhook would answer on `kubectl
apply`. Documents that are not objects are skipped with a note on stderr. Exit codes are a
contract: 0 nothing denied, 1 something denied, 2 usage or read errors.
"""

from __future__ import annotations

import argparse
import sys
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from webhook.core.admission import validation as admission
from webhook.core.model.profiles import OperatorConfig
from webhook.core.model.refs import ObjectKey
from webhook.core.model.settings import Settings
from webhook.core.rules import check_results, sarif
from webhook.core.rules.check_results import CheckedPolicy, CheckRun, Where
from webhook.core.state.store import Store
from webhook.shell.cli import manifests, output
from webhook.shell.cli.manifests import Located
from webhook.shell.process.errors import UsageError

EXIT_OK, EXIT_DENIED = 0, 1  # 2, usage and read errors: `main`'s, for every command


def run(
    args: argparse.Namespace,
    *,
    config: OperatorConfig,
    settings: Settings,
    stdin: TextIO | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Exit code 0, or 1 when something is denied; streams default to the process's own."""
    stdin, out, err = stdin or sys.stdin, out or sys.stdout, err or sys.stderr
    sources = [*args.paths, *(args.filenames or ())]
    if not sources:
        raise UsageError("nothing to check: give files or folders, or `-` for standard input")
    loaded = manifests.load(
        sources, Store(config), namespace=args.namespace, stdin=stdin, keep_nodes=True
    )
    err.writelines(f"policy-webhook: note: {note}\n" for note in loaded.notes)
    found = CheckRun(
        tuple(check_store(loaded.store, loaded.where, settings)),
        tuple(loaded.skipped),
        tuple(loaded.duplicates),
    )
    if args.output in ("json", "yaml"):
        output.write(check_results.document(found), args.output, out)
    elif args.output == "sarif":
        from webhook.shell.process.build import package_version

        log = sarif.sarif_log(found, tool_version=package_version(), uri=artifact_uri)
        output.write_json(log, out)
    else:
        out.writelines(line + "\n" for line in check_results.human_lines(found, show_all=args.all))
    return EXIT_DENIED if found.denied else EXIT_OK


def check_store(
    store: Store, where: Mapping[ObjectKey, Located], settings: Settings
) -> list[CheckedPolicy]:
    """Admit every policy in the store against the others, in file order."""
    results: list[CheckedPolicy] = []
    policy_keys = [
        key for key, located in where.items() if store.is_policy_object(key.group_kind, located.obj)
    ]
    for key in sorted(policy_keys, key=lambda k: (where[k].path, where[k].line)):
        located = where[key]
        store.delete(key)  # "against the state of all the other objects"
        try:
            verdict = admission.check_policy(
                located.obj, key.group_kind, view=store, settings=settings
            )
        finally:
            store.upsert(located.obj)
        lines = tuple(located.line_of(j.finding.field) for j in verdict.judged)
        results.append(CheckedPolicy(key, Where(located.path, located.line), verdict, lines))
    return results


def artifact_uri(path: str) -> str:
    """A SARIF artifact URI: relative to the working directory (the repository root in CI,
    which is what review tools resolve against), else a `file:` URI."""
    if path == manifests.STDIN_NAME:
        return "stdin"
    candidate = Path(path)
    if candidate.is_absolute():
        try:
            candidate = candidate.relative_to(Path.cwd())
        except ValueError:
            return candidate.as_uri()
    return urllib.parse.quote(candidate.as_posix())
