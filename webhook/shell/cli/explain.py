"""`policy-webhook explain KIND/NAME`: read the state, ask the engine, print (SPEC §7).

State comes from `--manifests` or, without it, from the cluster (one full list through the
same informers the webhook uses, then they stop). `-o json` prints the annotation value.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from webhook.core.annotation import explanation as explain
from webhook.core.annotation import summary
from webhook.core.engine import effective
from webhook.core.model.profiles import OperatorConfig
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store
from webhook.shell.cli.manifests import load_store
from webhook.shell.process.errors import UsageError


def run(args: argparse.Namespace, *, config: OperatorConfig, settings: Settings) -> int:
    try:
        key = explain.parse_target(args.target, args.namespace)
    except explain.UnknownKind as exc:
        raise UsageError(str(exc)) from None
    store = Store(config)
    if args.manifests:
        load_store(args.manifests, store)
    else:
        asyncio.run(_load_from_cluster(store, args.kubeconfig, settings))
    if store.get(key) is None:
        raise UsageError(f"{key} not found")
    results = effective.compute(key, store)
    if args.output == "json":
        value = summary.render(results, max_bytes=settings.annotation_max_bytes)
        sys.stdout.write((value or "null") + "\n")
    else:
        sys.stdout.write(explain.render_text(key, results))
    return 0


async def _load_from_cluster(store: Store, kubeconfig: str | None, settings: Settings) -> None:
    from webhook.shell.cluster import informers, kubeapi

    api = await kubeapi.connect(kubeconfig)
    try:
        source = informers.ClusterSource(api, store, keep_annotation=settings.annotation_key)
        source.start()
        try:
            if not await source.wait_synced(timeout=60):
                raise UsageError("the cluster did not answer a full list within 60 s")
        finally:
            await source.stop()
    finally:
        await api.close()
