"""The state a command that answers once (`explain`, `report`) reads: its cluster chosen and
checked first, before anything heavy loads, then read; or its `--manifests`.

A command against a server that is down must say so within `--request-timeout` (and a
second). The engine and the API client take most of a second to import on a busy machine, so
the kubeconfig is read and the server probed (`cluster.kubeconfig`) while this process has
loaded little more than the parser; the rest follows only for a server that answers.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from webhook.shell.cluster import kubeconfig
from webhook.shell.process.errors import UsageError

if TYPE_CHECKING:
    from webhook.core.model.settings import Settings
    from webhook.core.state.store import Store
    from webhook.shell.cluster.snapshot import Snapshot


def reach(args: argparse.Namespace) -> kubeconfig.Target:
    """The kubeconfig's choice for these flags, its server found answering; else a one-line
    `UsageError`."""
    try:
        target = kubeconfig.locate(args.kubeconfig, args.context)
        if not target.proxied:
            kubeconfig.probe(target.server, args.request_timeout)
    except kubeconfig.ClusterUnavailable as exc:
        raise UsageError(str(exc)) from None
    return target


@dataclass(frozen=True, slots=True)
class Read:
    """What a command read besides the objects: the namespace it answers for (`-n`, else the
    kubeconfig context's, else `default`), and the ValidatingWebhookConfiguration it was asked
    to read (`{}`: there is none; None: not asked, not readable, or `--manifests`)."""

    namespace: str
    webhook_configuration: dict[str, Any] | None = None


def read_state(
    args: argparse.Namespace,
    store: Store,
    settings: Settings,
    *,
    target: kubeconfig.Target | None,
    err: TextIO,
    webhook_configuration: str | None = None,
) -> Read:
    """Fill `store` from `--manifests`, or else from the cluster `target` (`reach`, else
    chosen here); each note of the read (a document skipped, a kind left out) one line on
    `err`. A cluster that cannot be read is a one-line `UsageError`."""
    from webhook.shell.cli import manifests  # the engine: only once the server answers

    namespace = args.namespace
    configuration = None
    if args.manifests:
        notes = manifests.load(args.manifests, store).notes
    else:
        target = target or reach(args)
        read = _read_cluster(store, target, args, settings, webhook_configuration)
        notes, configuration = read.notes, read.webhook_configuration
        namespace = namespace or target.namespace
    for note in notes:
        err.write(f"policy-webhook: note: {note}\n")
    return Read(namespace or manifests.DEFAULT_NAMESPACE, configuration)


def _read_cluster(
    store: Store,
    target: kubeconfig.Target,
    args: argparse.Namespace,
    settings: Settings,
    webhook_configuration: str | None,
) -> Snapshot:
    """`snapshot.read_cluster` for these flags, its failure a `UsageError`."""
    import asyncio
    import logging

    from webhook.shell.cluster import snapshot  # the API client: only for a server that answers

    # The client library logs (e.g. a token refresh); a command answers in its own words.
    logging.getLogger("kubernetes_asyncio").addHandler(logging.NullHandler())
    try:
        return asyncio.run(
            snapshot.read_cluster(
                store,
                target,
                timeout=args.request_timeout,
                keep_annotation=settings.annotation_key,
                webhook_configuration=webhook_configuration,
            )
        )
    except kubeconfig.ClusterUnavailable as exc:
        raise UsageError(str(exc)) from None
