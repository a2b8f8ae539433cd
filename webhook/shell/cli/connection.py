"""The cluster an `explain` will read, chosen and checked first, before anything heavy loads.

A command against a server that is down must say so within `--request-timeout` (and a
second). The engine and the API client take most of a second to import on a busy machine, so
the kubeconfig is read and the server probed (`cluster.kubeconfig`) while this process has
loaded little more than the parser; the rest follows only for a server that answers.
"""

from __future__ import annotations

import argparse

from webhook.shell.cluster import kubeconfig
from webhook.shell.process.errors import UsageError


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
