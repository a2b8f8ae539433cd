"""The PolicyReports (SPEC §8.3, §8.4): the leader keeps one per namespace that holds policies,
and one ClusterPolicyReport, in step with the audit.

On the Lease holder only. The audit is the core's (`audit.book`): a full audit when the term
starts, then only the policies a store write may have changed, in chunks so that admission
calls on the same event loop wait at most one chunk. A report is sent only when its content
differs from what the API server holds (as read at the start of the term, and as each write
returned it): a busy cluster whose findings do not change sees no write at all. A namespace
left with no policy loses its report. Without the `wgpolicyk8s.io` CRDs (manifests/components/
policy-reports) nothing runs, and one line says so. The findings about policy kinds are
re-read every `period` seconds: the rules of the policy webhook (PA-K02) and the kinds whose
list the API server refuses (PA-K03).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import urllib.parse
from collections import Counter
from collections.abc import Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from webhook.core.annotation.dependencies import AffectedFeed
from webhook.core.audit import reports
from webhook.core.audit.book import AuditBook
from webhook.core.audit.kind_findings import KindFacts, audit_kinds
from webhook.core.model import kinds, meta
from webhook.core.model.refs import ObjectKey
from webhook.core.model.settings import Settings
from webhook.core.model.webhook_rules import PolicyResource, sends_writes
from webhook.core.state.store import Store
from webhook.shell.cluster import kubeapi
from webhook.shell.cluster.informers import ClusterSource
from webhook.shell.cluster.leading import LeadingTask
from webhook.shell.cluster.webhook_rules import (
    WebhookRulesKeeper,
    policy_resources,
    read_configuration,
)
from webhook.shell.process.logs import fields
from webhook.shell.process.metrics import Metrics

logger = logging.getLogger(__name__)

CRD_NAMES = tuple(
    f"{plural}.{reports.GROUP}" for plural in ("policyreports", "clusterpolicyreports")
)
ROOT = f"/apis/{reports.API_VERSION}"
LABEL_SELECTOR = "=".join(reports.MANAGED_BY)
DEBOUNCE_SECONDS = 0.3  # writes of one `kubectl apply` arrive together: one round after them
CHUNK = 25  # policies audited between two yields to the event loop
# A round that took t seconds of computing is followed by at least PACING * t seconds of rest:
# under endless churn on a large cluster, the audit takes at most a third of the event loop.
PACING = 2.0
RETRY_SECONDS = 5.0
# Three readings span two periods, so the rules keeper has had a round between the first and
# the last whatever the phase of the two loops.
UNSENT_READINGS = 3


class PolicyReportWriter(LeadingTask):
    """Keeps the reports while `set_leading(True)`; `writes` and `deletes` count requests
    sent since start (tests, logs). With the leader's `keeper` (the rules keeper), PA-K02 is
    judged against the configuration its rounds read; without one, the writer reads it."""

    task_name = "policy reports"

    def __init__(
        self,
        api: client.ApiClient,
        store: Store,
        feed: AffectedFeed,
        source: ClusterSource,
        settings: Settings,
        metrics: Metrics,
        *,
        configuration: str,
        keeper: WebhookRulesKeeper | None = None,
        period: float = 10.0,
        full_audit_period: float = 600.0,
        field_manager: str = "policy-webhook",
        request_timeout: float = 10.0,
    ) -> None:
        super().__init__()
        self.api, self.store, self.source, self.metrics = api, store, source, metrics
        self.settings = settings
        self.configuration = configuration
        self.keeper = keeper
        self.period = period
        self.full_audit_period = full_audit_period
        self.field_manager = field_manager
        self.request_timeout = request_timeout
        self.book = AuditBook(store, settings, feed=feed)
        self.writes = self.deletes = 0
        self._held: dict[str, dict[str, Any]] = {}  # namespace → the report the server holds
        self._unsynced: set[str] = set()  # namespaces whose report is to be compared
        self._counted: dict[str, Counter[tuple[str, str]]] = {}  # what the gauge exports
        self._kind_results: list[reports.Result] = []
        self._unsent: dict[PolicyResource, int] = {}  # readings in a row that found it so
        self._installed_said: bool | None = None
        self._loaded = False  # `_held` read from the server this term
        self._failing: str | None = None  # how the last round failed, if it did
        self._wake = asyncio.Event()
        store.subscribe(self._on_change)

    def _forget(self) -> None:
        """A replica that stops leading stops speaking for the cluster: the next leader will."""
        self.book.follow(False)
        self._loaded = False
        self._held.clear()
        self._unsynced.clear()
        self._kind_results = []
        self._unsent = {}
        self._counted.clear()
        self.metrics.policy_findings.clear()

    def _on_change(
        self, key: ObjectKey, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None
    ) -> None:
        if self._installed_said is False and key.group_kind != kinds.CRD:
            return  # without the report CRDs only a CRD's write can change anything here
        self._wake.set()  # the book knows what it affects; the loop decides whether to work

    # --- the term ------------------------------------------------------------------------------

    async def _lead(self) -> None:
        await self.source.synced.wait()  # a half-listed cluster would report false findings
        next_kinds = next_full = 0.0
        while True:
            self._wake.clear()
            if not self._installed():
                self._forget()
                await self._wake.wait()  # a store write: perhaps the CRDs
                continue
            now = time.monotonic()
            full, kinds_due = now >= next_full, now >= next_kinds
            next_full = now + self.full_audit_period if full else next_full
            next_kinds = now + self.period if kinds_due else next_kinds
            try:
                busy = await self.sync_once(full=full, kinds=kinds_due)
                delay = max(DEBOUNCE_SECONDS, PACING * busy)
                if self._failing is not None:
                    self._failing = None
                    logger.info("policy reports kept again")
            except Exception as exc:  # whatever broke, the next round tries again
                delay = self._failed(exc)
            await asyncio.sleep(delay)  # writes that arrive meanwhile join the next round
            if not (self.book.pending or self._unsynced):
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, next_kinds - time.monotonic())):
                        await self._wake.wait()

    def _failed(self, exc: Exception) -> float:
        """Log a failed round — a warning the first time it fails so, then quietly (a 403
        when RBAC lacks the component's ClusterRole would fail every round) — and say how long
        to wait before the next one."""
        forbidden = isinstance(exc, kubeapi.ApiError) and exc.status == 403
        delay = self.period if forbidden else RETRY_SECONDS
        said = f"{type(exc).__name__} {getattr(exc, 'status', '')}"
        logger.log(
            logging.DEBUG if said == self._failing else logging.WARNING,
            "could not keep the policy reports%s; retrying in %.0fs",
            " (RBAC: the ClusterRole of manifests/components/policy-reports)" if forbidden else "",
            delay,
            exc_info=not isinstance(
                exc, kubeapi.ApiError | aiohttp.ClientError | OSError | TimeoutError
            ),
            extra=fields(error=repr(exc)),
        )
        self._failing = said
        return delay

    async def sync_once(self, *, full: bool = False, kinds: bool = True) -> float:
        """One round: the audit brought up to date (from scratch at the start of a term, or
        when `full`), the kinds read again if `kinds`, and every report whose content may have
        changed compared and written; returns the seconds spent computing. A round that fails
        leaves every report to be compared again."""
        try:
            starting = full or not self._loaded
            if starting:
                await self._start_over()
            if kinds:
                await self._read_kinds()
            audited = self.book.computed
            busy = await self._audit()
            if starting:
                logger.info(
                    "policy audit: %d policies in %.2fs of computing",
                    self.book.computed - audited,
                    busy,
                    extra=fields(policies=self.book.computed - audited, seconds=round(busy, 3)),
                )
            await self._sync()
        except BaseException:
            self._unsynced |= set(self._held) | self.book.namespaces() | {""}
            raise
        return busy

    def _installed(self) -> bool:
        """Whether the API server serves both report kinds at our version (the store holds
        every CRD); said once in the log whenever that changes."""
        installed = all(_serves(self.store.get(_crd_key(name))) for name in CRD_NAMES)
        if installed != self._installed_said:
            self._installed_said = installed
            if installed:
                logger.info("keeping PolicyReports (%s served)", reports.API_VERSION)
            else:
                logger.info(
                    "no PolicyReports: %s is not served (install the CRDs of "
                    "manifests/components/policy-reports to have them)",
                    reports.API_VERSION,
                    extra=fields(crds=list(CRD_NAMES)),
                )
        return installed

    async def _start_over(self) -> None:
        """A full audit, and every report compared again with what the server holds: at the
        start of a term, then now and then (a safety net, never what keeps them right)."""
        if not self.book.following:
            self.book.follow(True)
        else:
            self.book.mark_all()
        self._held = await self._read_reports()
        self._loaded = True
        self._unsynced |= set(self._held) | {""}

    async def _audit(self) -> float:
        """The book brought up to date, a chunk at a time; the seconds spent computing."""
        spent = 0.0
        while self.book.pending:
            started = time.monotonic()
            self._unsynced |= self.book.refresh(limit=CHUNK)
            spent += time.monotonic() - started
            await asyncio.sleep(0)  # admission calls that arrived meanwhile go first
        return spent

    # --- kinds ---------------------------------------------------------------------------------

    async def _read_kinds(self) -> None:
        """PA-K02 and PA-K03 from the policy webhook's rules and the informers' refusals. A
        kind is said not to be sent only when UNSENT_READINGS readings in a row, a period
        apart, found it so: the leader's rules keeper (`webhook_rules`) adds a readable kind
        within one of its rounds — a period too, in no fixed phase with ours — and a report
        must not flap meanwhile."""
        served = frozenset(policy_resources(self.store, self.source.watched()))
        forbidden = frozenset(
            PolicyResource(r.group, r.plural, r.kind) for r in self.source.forbidden().values()
        )
        configuration = await self._configuration()
        self._unsent = {
            r: self._unsent.get(r, 0) + 1
            for r in served
            if configuration is not None and not sends_writes(configuration, r)
        }
        judged = frozenset(r for r, n in self._unsent.items() if n >= UNSENT_READINGS)
        facts = KindFacts(self.configuration, configuration, judged, forbidden)
        results = reports.kind_results(
            audit_kinds(facts, profile=self.store.profile, settings=self.settings)
        )
        if results != self._kind_results:
            self._kind_results = results
            self._unsynced.add("")

    async def _configuration(self) -> Mapping[str, Any] | None:
        """The policy webhooks' configuration: the keeper's reading (one GET a period serves
        both), else our own; None: not read, so nothing is said about PA-K02."""
        if self.keeper is not None:
            return self.keeper.configuration_read
        try:
            return await read_configuration(
                self.api, self.configuration, timeout=self.request_timeout
            )
        except kubeapi.ApiError as exc:  # not ours to read (RBAC): nothing said about PA-K02
            logger.debug("cannot read %s: %s", self.configuration, exc)
            return None

    # --- the reports ---------------------------------------------------------------------------

    async def _sync(self) -> None:
        """Each namespace to compare: its report written, deleted, or left as it is."""
        wanted = self.book.namespaces() | {""}
        pending = sorted(self._unsynced)
        self._unsynced.clear()  # what fails to be written comes back (`_put`, `sync_once`)
        for namespace in pending:
            results = reports.namespace_results(
                namespace, self.book.in_namespace(namespace), self._kind_results
            )
            if namespace in wanted:
                await self._put(namespace, results)
            else:
                await self._delete(namespace)
            self._count(namespace, results if namespace in wanted else [])
            await asyncio.sleep(0)

    async def _put(self, namespace: str, results: list[reports.Result]) -> None:
        held = self._held.get(namespace)
        wanted = reports.report(namespace, results, now=time.time(), previous=held)
        if reports.same_content(wanted, held):
            return
        if held is not None:
            wanted["metadata"]["resourceVersion"] = meta.resource_version(held)
            method, path = "PUT", _object_path(namespace)
        else:
            method, path = "POST", _collection_path(namespace)
        try:
            written = await self._request(method, path, wanted)
        except kubeapi.ApiError as exc:
            if exc.status not in (404, 409):
                raise
            # Changed, deleted or made by someone else since we read it: read it again and
            # compare in the next round.
            self._held.pop(namespace, None)
            current = await self._get(namespace)
            if current is not None:
                self._held[namespace] = current
            self._unsynced.add(namespace)
            return
        self.writes += 1
        self._held[namespace] = written
        logger.debug(
            "policy report written",
            extra=fields(namespace=namespace, results=len(results), method=method),
        )

    async def _delete(self, namespace: str) -> None:
        if self._held.pop(namespace, None) is None:
            return
        try:
            await self._request("DELETE", _object_path(namespace), None)
        except kubeapi.ApiError as exc:
            if exc.status != 404:
                raise
        self.deletes += 1
        logger.debug("policy report deleted: no policy left", extra=fields(namespace=namespace))

    async def _read_reports(self) -> dict[str, dict[str, Any]]:
        """Our reports as the server holds them: ours by label, wherever they are."""
        listed = await kubeapi.request_json(
            self.api,
            "GET",
            f"{ROOT}/policyreports",
            query=[("labelSelector", LABEL_SELECTOR)],
            timeout=self.request_timeout,
        )
        held: dict[str, dict[str, Any]] = {}
        for item in listed.get("items") or ():
            if isinstance(item, dict) and meta.name(item) == reports.NAME:
                held[meta.namespace(item)] = item
        cluster = await self._get("")
        if cluster is not None:
            held[""] = cluster
        return held

    async def _get(self, namespace: str) -> dict[str, Any] | None:
        try:
            return await kubeapi.request_json(
                self.api, "GET", _object_path(namespace), timeout=self.request_timeout
            )
        except kubeapi.ApiError as exc:
            if exc.status != 404:
                raise
            return None

    async def _request(self, method: str, path: str, body: object) -> dict[str, Any]:
        return await kubeapi.request_json(
            self.api,
            method,
            path,
            query=[("fieldManager", self.field_manager)] if method != "DELETE" else [],
            body=body,
            timeout=self.request_timeout,
        )

    def _count(self, namespace: str, results: list[reports.Result]) -> None:
        """The findings gauge of one namespace: a series per (rule, result) with findings, and
        none for what has none (a namespace without findings has no series at all)."""
        counted = reports.counts(results)
        gauge = self.metrics.policy_findings
        for rule, result in set(self._counted.get(namespace, {})) - set(counted):
            with contextlib.suppress(KeyError):
                gauge.remove(namespace, rule, result)
        for (rule, result), n in counted.items():
            gauge.labels(namespace=namespace, rule=rule, result=result).set(n)
        if counted:
            self._counted[namespace] = counted
        else:
            self._counted.pop(namespace, None)


def _crd_key(name: str) -> ObjectKey:
    return ObjectKey(kinds.CRD.group, kinds.CRD.kind, "", name)


def _serves(crd: Mapping[str, Any] | None) -> bool:
    spec = crd.get("spec") if crd is not None else None
    versions = spec.get("versions") if isinstance(spec, Mapping) else None
    if not isinstance(versions, list):
        return False
    return any(
        isinstance(v, Mapping) and v.get("name") == reports.VERSION and v.get("served")
        for v in versions
    )


def _collection_path(namespace: str) -> str:
    if namespace:
        return f"{ROOT}/namespaces/{urllib.parse.quote(namespace)}/policyreports"
    return f"{ROOT}/clusterpolicyreports"


def _object_path(namespace: str) -> str:
    return f"{_collection_path(namespace)}/{reports.NAME}"
