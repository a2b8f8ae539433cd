"""`policy-webhook report`: what is wrong with the policies now (SPEC §8.6).

The PolicyReports the webhook's leader keeps (SPEC §8.3), computed afresh by the same audit,
from the cluster (chosen, probed and read as `explain` does) or from `--manifests`. One
namespace's (`-n`, default the context's), or every one and the cluster's (`-A`). Exit codes
are a contract: 0 nothing at `fail`, 1 something is, 2 usage, read or connection errors.

From the cluster, PA-K02 is judged against the policy webhooks' configuration
(`--webhook-configuration`) as the caller may read it; PA-K03 is not: what the webhook may read
is its own identity's to say, in its ClusterPolicyReport.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from webhook.core.audit import printed
from webhook.core.audit.findings import audit_store
from webhook.core.audit.kind_findings import KindAudit, KindFacts, audit_kinds
from webhook.core.model.profiles import OperatorConfig
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store
from webhook.shell.cli import connection, output
from webhook.shell.cluster.kubeconfig import Target

EXIT_OK, EXIT_FAIL = 0, 1


def run(
    args: argparse.Namespace,
    *,
    config: OperatorConfig,
    settings: Settings,
    target: Target | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Exit code 0, or 1 when a result is at `fail`. Without `--manifests`, the cluster
    `target` (`connection.reach`, else chosen here); streams default to the process's own."""
    out, err = out or sys.stdout, err or sys.stderr
    store = Store(config)
    read = connection.read_state(
        args,
        store,
        settings,
        target=target,
        err=err,
        webhook_configuration=args.webhook_configuration,
    )
    kind_audits: list[KindAudit] = []
    if read.webhook_configuration is not None:
        kind_audits = _kind_audits(store, read.webhook_configuration, args, settings)
    selected = None if args.all_namespaces else read.namespace
    audits = audit_store(store, settings)
    documents = printed.reports_of(audits, kind_audits, namespace=selected)
    policies = sum(1 for key in audits if selected is None or key.namespace == selected)
    if args.output == "table":
        out.writelines(line + "\n" for line in printed.table(documents, policies))
    else:
        output.write(printed.document(documents, policies), args.output, out)
    return EXIT_FAIL if printed.failed(documents) else EXIT_OK


def _kind_audits(
    store: Store, configuration: dict[str, Any], args: argparse.Namespace, settings: Settings
) -> list[KindAudit]:
    """PA-K02 for each served policy kind that the policy webhook's rules leave out."""
    from webhook.shell.cluster import informers, webhook_rules

    served = frozenset(webhook_rules.policy_resources(store, informers.wanted_resources(store)))
    facts = KindFacts(args.webhook_configuration, configuration, served, frozenset())
    return audit_kinds(facts, profile=store.profile, settings=settings)
