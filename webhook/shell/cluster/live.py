"""Cluster mode of `serve`: informers fill the store; the Lease holder writes what it must.

Wiring only. Every replica keeps the store in step with the API server (admission reads it);
one replica at a time — the holder of a `coordination.k8s.io` Lease — also patches the
annotation of existing objects (SPEC §3.2) and keeps the rules of the policy webhooks in step
with the policy kinds it can read (`webhook_rules`; one writer, so that two versions during a
rollout never undo each other), and the PolicyReports (`policy_reports`). `/readyz` waits for the first full sync (the informers report
it), never for the Lease: a replica that does not lead still serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from kubernetes_asyncio import client

from webhook.core.admission.decisions import Decision
from webhook.core.annotation.cache import SummaryCache
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store
from webhook.shell.cluster import informers, kubeapi
from webhook.shell.cluster.events import EventRecorder
from webhook.shell.cluster.leader import LeaderElector
from webhook.shell.cluster.policy_reports import PolicyReportWriter
from webhook.shell.cluster.reconciler import Reconciler
from webhook.shell.cluster.webhook_rules import WebhookRulesKeeper
from webhook.shell.process import heap
from webhook.shell.process import readiness as ready
from webhook.shell.process.logs import fields
from webhook.shell.process.metrics import Metrics
from webhook.shell.process.readiness import Readiness
from webhook.shell.process.serve_config import ServeConfig
from webhook.shell.process.turns import Turns

log = logging.getLogger(__name__)

EXPORT_SECONDS = 5.0  # how often cache counters and store sizes reach /metrics


@contextlib.asynccontextmanager
async def running(
    serve_config: ServeConfig,
    *,
    store: Store,
    settings: Settings,
    metrics: Metrics,
    readiness: Readiness,
    cache: SummaryCache,
) -> AsyncIterator[Callable[[Decision], None] | None]:
    """Informers, reconciler and leader election for as long as the block runs; the
    block gets what records Events of decisions (SPEC 8.2), None with `--events=false`.
    `cache` (summaries of `store`) is the one /mutate reads too: what the reconciler computed
    before a patch answers that patch's admission call.

    On exit, in this order: the reconciler stops (no patch after this point), the Lease is
    released (another replica takes over at once instead of after expiry), the watches end,
    and the API client closes.
    """
    api = await kubeapi.connect(serve_config.kubeconfig)
    turns = Turns()  # watch events and the reconciler's computations share them (admission first)
    source = informers.ClusterSource(
        api,
        store,
        keep_annotation=settings.annotation_key,
        metrics=metrics,
        readiness=readiness,
        before_ready=lambda: heap.settle("state synced"),
        turns=turns,
    )
    reconciler: Reconciler | None = None
    keeper: WebhookRulesKeeper | None = None
    writer: PolicyReportWriter | None = None
    elector: LeaderElector | None = None
    settling: asyncio.Task[None] | None = None
    recorder = EventRecorder(api, metrics) if serve_config.events else None
    exporter = _Exporter(
        cache, store, metrics, source, readiness, max_age=serve_config.max_state_age_seconds
    )
    try:
        source.start()  # readiness `state-synced` turns ok once every kind is listed
        if serve_config.no_reconcile:
            log.info("reconciler disabled (--no-reconcile): admission only")
        else:
            reconciler = Reconciler(
                api,
                store,
                cache,
                settings,
                metrics,
                resources=lambda gk: source.watched().get(gk),
                ready=source.synced,
                qps=serve_config.reconcile_qps,
                burst=serve_config.reconcile_burst,
                workers=serve_config.reconcile_workers,
                resync_period=serve_config.resync_seconds,
                turns=turns,
            )
        if serve_config.no_sync_webhook_rules:
            log.info("policy webhooks' rules left as they are (--no-sync-webhook-rules)")
        else:
            keeper = WebhookRulesKeeper(
                api,
                store,
                source,
                metrics,
                configuration=serve_config.webhook_configuration,
                namespace=serve_config.leader_election_namespace,
                period=serve_config.webhook_rules_sync_seconds,
            )
        if serve_config.no_policy_reports:
            log.info("no PolicyReports (--no-policy-reports)")
        else:
            writer = PolicyReportWriter(
                api,
                store,
                cache.feed,
                source,
                settings,
                metrics,
                configuration=serve_config.webhook_configuration,
                period=serve_config.webhook_rules_sync_seconds,
                full_audit_period=serve_config.resync_seconds,
                keeper=keeper,  # its reading of the configuration serves PA-K02 too
            )
        if reconciler is not None or keeper is not None or writer is not None:
            elector = _elector(serve_config, api, metrics, reconciler, keeper, writer)
            elector.start()
        exporter.start()
        if reconciler is not None:
            settling = asyncio.create_task(_settle_heap(reconciler), name="heap settler")
        if recorder is None:
            log.info("no Events of denied or warned policy writes (--events=false)")
        else:
            recorder.start()
        yield recorder.record if recorder is not None else None
    finally:
        if recorder is not None:
            await recorder.stop()
        if settling is not None:
            settling.cancel()
            await asyncio.gather(settling, return_exceptions=True)
        await exporter.stop()
        if keeper is not None:
            await keeper.stop()
        if writer is not None:
            await writer.stop()
        if reconciler is not None:
            await reconciler.stop()
            log.info(
                "reconciler stopped",
                extra=fields(
                    patches=reconciler.patches,
                    skips=reconciler.skips,
                    errors=reconciler.errors,
                    retries=reconciler.retries,
                    failing=reconciler.failing,
                ),
            )
        if elector is not None:
            await elector.stop()  # releases the Lease if we hold it
        await source.stop()
        await kubeapi.close(api)


async def _settle_heap(reconciler: Reconciler) -> None:
    """Freeze the long-lived state again once it is computed (`heap`); the first time, when
    it is synced, is the source's `before_ready`."""
    await reconciler.passed.wait()  # only on the replica that leads
    heap.settle("first reconcile pass")


def _elector(
    serve_config: ServeConfig,
    api: client.ApiClient,
    metrics: Metrics,
    reconciler: Reconciler | None,
    keeper: WebhookRulesKeeper | None,
    writer: PolicyReportWriter | None,
) -> LeaderElector:
    def started() -> None:
        for worker in (reconciler, keeper, writer):
            if worker is not None:
                worker.set_leading(True)  # each waits for the first sync

    def stopped() -> None:
        for worker in (reconciler, keeper, writer):
            if worker is not None:
                worker.set_leading(False)

    lease = serve_config.lease_duration_seconds
    return LeaderElector(
        api,
        namespace=serve_config.leader_election_namespace,
        name=serve_config.leader_election_name,
        # client-go's proportions: renew deadline 2/3 of the lease, retries every 2/15 of it.
        lease_duration=lease,
        renew_deadline=lease * 2 / 3,
        retry_period=lease * 2 / 15,
        metrics=metrics,
        on_started_leading=started,
        on_stopped_leading=stopped,
    )


class _Exporter:
    """Copies the cache's plain counters into Prometheus metrics, and judges staleness.

    The core keeps plain ints (it knows nothing of Prometheus); Counters only go up, so each
    round adds what was counted since the last one.

    Stale state (docs/reliability.md): admission keeps answering from the last known state —
    the store is stale, not wrong — and the age is exported. Past `max_age` (0: never) the
    replica turns unready, so the API server's calls go to replicas that still hear the API
    server; if all are stale, the failure policy decides.
    """

    def __init__(
        self,
        cache: SummaryCache,
        store: Store,
        metrics: Metrics,
        source: informers.ClusterSource,
        readiness: Readiness,
        *,
        max_age: float,
    ) -> None:
        self.cache, self.store, self.metrics = cache, store, metrics
        self.source, self.readiness, self.max_age = source, readiness, max_age
        self._hits = self._misses = self._adopted = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="metrics exporter")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.export()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(EXPORT_SECONDS)
            self.export()

    def export(self) -> None:
        hits, misses = self.cache.hits, self.cache.misses
        self.metrics.cache_hits.inc(hits - self._hits)
        self.metrics.cache_misses.inc(misses - self._misses)
        self._hits, self._misses = hits, misses
        self.metrics.cache_adopted.inc(self.cache.adopted - self._adopted)
        self._adopted = self.cache.adopted
        age = self.source.last_sync_age()
        if age != float("inf"):
            self.metrics.state_age.set(age)
        if self.max_age > 0 and self.source.synced.is_set():
            fresh = age <= self.max_age
            reason = (
                ""
                if fresh
                else f"no watch has shown life for {age:.0f}s (limit {self.max_age:.0f}s)"
            )
            self.readiness.set(ready.STATE_FRESH, fresh, reason)
        for gk in list(self.store.all_kinds()):
            self.metrics.store_objects.labels(kind=str(gk)).set(self.store.count(gk))
