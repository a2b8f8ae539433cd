"""The reconciler (SPEC §3.2): keep our annotation right on objects that already exist.

Store change → the objects it affects (the cache's dependency tracking, not a rescan) → a
de-duplicating work queue → a token bucket at an adaptive rate (`pacing`) → one JSON merge patch
of our annotation, or nothing when the value is already right. Only the Lease holder runs it;
every replica serves admission.

It shares the event loop with admission, and a summary is computed synchronously, so the
reconciler keeps out of admission's way: its workers compute in the process's turns
(`process.turns`, shared with the informers' watch events), and the loop serves what arrived
meanwhile between two turns; the value of a Service behind many routes, after a burst of route
writes, is made in steps of a few routes, a turn each (`SummaryCache.prepare`), not in one
step of tens of milliseconds. An object whose value was costly to compute (a Service that
hundreds of routes send to) is held for a while after each computation — the changes that reach
it meanwhile (a bulk create of those routes) are served by one computation at the window's end
instead of one each. Likewise an
object just patched is not patched again for `repatch_after` seconds: a Service whose value
changes with every route of a bulk create gets one patch a second, not one per route — each
patch is a write, a `/mutate` call and a watch event more for the API server.

Why a JSON merge patch (RFC 7386) of `{"metadata": {"annotations": {KEY: value | null}}}`: it
names one key of one map, so it can only set or remove that key — every other annotation,
label and field is left as the server has it, whoever wrote them and whenever. It carries the
`resourceVersion` the value was computed from, so a patch based on an object we have not yet
seen change is refused (409) instead of applied; the worker then waits for the informer to
catch up and computes again. `fieldManager` names us in `managedFields`.

A failed patch (409, 5xx, a timeout, an unreachable server) is tried again after a per-object
exponential backoff capped at `backoff_cap` — for as long as it fails, as controller-runtime
does: an object given up on would keep a wrong annotation until the next full resync. Only
success, the object's deletion, or its annotation turning right (nothing left to send) end
the retries. Past `warn_after` failures in a row the object is logged once as a WARNING.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from webhook.core.annotation.cache import SummaryCache
from webhook.core.model import kinds, meta
from webhook.core.model.refs import CORE_GROUP, GroupKind, ObjectKey
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store
from webhook.core.state.trim import fingerprint, mark_of
from webhook.shell.cluster import kubeapi, pacing
from webhook.shell.cluster.workqueue import ItemBackoff, TokenBucket, WorkQueue
from webhook.shell.process.logs import fields
from webhook.shell.process.metrics import Metrics
from webhook.shell.process.turns import Turns

logger = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
ResourceOf = Callable[[GroupKind], kubeapi.Resource | None]
TOO_MANY_REQUESTS = 429  # the API server sheds load (priority and fairness, max-in-flight)


def object_path(resource: kubeapi.Resource, key: ObjectKey) -> str:
    """The URL path of one object of `resource` (namespaced or cluster-scoped)."""
    root = (
        f"/api/{resource.version}"
        if resource.group == CORE_GROUP
        else f"/apis/{resource.group}/{resource.version}"
    )
    where = f"/namespaces/{key.namespace}" if key.namespace else ""
    return f"{root}{where}/{resource.plural}/{key.name}"


def merge_patch_of_annotation(
    annotation_key: str, value: str | None, resource_version: str | None
) -> dict[str, Any]:
    """The merge patch that sets (or, with None, removes) our one annotation and nothing else."""
    metadata: dict[str, Any] = {"annotations": {annotation_key: value}}
    if resource_version:
        metadata["resourceVersion"] = resource_version  # optimistic concurrency: 409 if stale
    return {"metadata": metadata}


# A patch sent: (the resourceVersion it was computed from, its value's fingerprint).
Sent = tuple[str | None, bytes | None]


def _mark(value: str | None) -> bytes | None:
    """A value as `trim.mark_of` reads it back from the store (which keeps no more): its
    fingerprint (None: no value of ours)."""
    return fingerprint(value) if value is not None else None


def _resource_version(obj: Mapping[str, Any]) -> str | None:
    return meta.resource_version(obj)


class Reconciler:
    """Brings our annotation up to date on every object a change affects, while leading.

    `set_leading(True)` (the Lease was won) waits for `ready` (the informers' first full
    sync: reconciling a half-listed cluster would strip annotations that are right), then
    queues every annotated object once (`resync_all`) and follows the store's changes; a full
    resync every `resync_period` seconds is the safety net. `set_leading(False)` stops at once.

    `patches`, `skips`, `errors` (failed patches) and `retries` (tries scheduled after a
    failure, 409s included) count since start; `failing` is how many objects wait for a retry;
    `holds` how many computations were costly enough (`hot_after` seconds) to hold their key
    for max(`hold_min`, `hold_factor` times their cost); a patched object's key is held for
    `repatch_after` seconds (0: not at all).

    `workers` is the number of objects in hand at once, so of patches in flight; the rate
    starts at `qps` and adapts below it (`pacing.AdaptiveRate`), `burst` patches at most at once.
    `turns` is the process's (`process.turns`), shared with its informers; else its own.
    """

    def __init__(
        self,
        api: client.ApiClient,
        store: Store,
        cache: SummaryCache,
        settings: Settings,
        metrics: Metrics,
        *,
        resources: ResourceOf,
        ready: asyncio.Event | None = None,
        field_manager: str = "policy-webhook",
        qps: float = pacing.DEFAULT_CEILING,
        burst: int = pacing.DEFAULT_BURST,
        workers: int = pacing.DEFAULT_IN_FLIGHT,
        resync_period: float = 600.0,
        warn_after: int = 8,
        backoff_base: float = 0.2,
        backoff_cap: float = 30.0,
        request_timeout: float = 10.0,
        hot_after: float = 0.005,
        hold_min: float = 1.0,
        hold_factor: float = 10.0,
        repatch_after: float = 1.0,
        turns: Turns | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"need at least one worker, got {workers}")
        self.api, self.store, self.cache, self.metrics = api, store, cache, metrics
        self.annotation_key = settings.annotation_key
        self.resources = resources
        self.ready = ready
        self.field_manager = field_manager
        self.workers = workers
        self.resync_period = resync_period
        # The 8th failure in a row comes after 13-25 s of backoff: a blip is never warned about.
        self.warn_after = warn_after
        self.request_timeout = request_timeout
        self.queue = WorkQueue()
        self.pacing = pacing.AdaptiveRate(qps)
        self.limiter = TokenBucket(qps, burst)
        self.backoff = ItemBackoff(backoff_base, backoff_cap)
        self.hot_after, self.hold_min, self.hold_factor = hot_after, hold_min, hold_factor
        self.repatch_after = repatch_after
        self.turns = turns if turns is not None else Turns()
        # Patches sent whose watch event has not arrived yet: key → (resourceVersion, the
        # value's fingerprint, as the watch event will bring it: `trim.mark_of`).
        self._sent: dict[ObjectKey, Sent] = {}
        self._task: asyncio.Task[None] | None = None
        self._ending: asyncio.Task[None] | None = None  # the last term, cancelled, cleaning up
        self.patches = self.skips = self.errors = self.retries = 0  # plain ints for tests, logs
        self.holds = 0
        # Set the first time the queue drains after a term's first resync: every annotated
        # object's value has been computed once (the heap is then settled, see `heap`).
        self.passed = asyncio.Event()

    @property
    def failing(self) -> int:
        """Objects whose last patch failed and that wait for their next try."""
        return len(self.backoff)

    # --- leadership ----------------------------------------------------------------------------

    @property
    def leading(self) -> bool:
        return self._task is not None and not self._task.done()

    def set_leading(self, leading: bool) -> None:
        """Start or stop reconciling; safe to call from LeaderElector callbacks (no await)."""
        if leading and not self.leading:
            self._task = asyncio.create_task(self._lead(self._ending), name="reconciler")
        elif not leading and self._task is not None:
            self._task.cancel()
            self._ending, self._task = self._task, None

    async def stop(self) -> None:
        self.set_leading(False)
        if self._ending is not None:
            await asyncio.gather(self._ending, return_exceptions=True)

    async def wait_idle(self, timeout: float | None = None) -> bool:
        """True once nothing is queued, in flight or scheduled for retry (tests, benchmarks);
        only meaningful once work was queued (leading, synced). An object that keeps failing
        is never done: this then times out."""
        try:
            async with asyncio.timeout(timeout):
                while not self.queue.idle:
                    await asyncio.sleep(0.01)
        except TimeoutError:
            return False
        return True

    async def _lead(self, previous: asyncio.Task[None] | None) -> None:
        workers: list[asyncio.Task[None]] = []
        try:
            if previous is not None:
                # Lost and won again quickly: let the last term finish clearing the queue and
                # dropping its listener first, or it would clear what this term queues.
                await asyncio.gather(previous, return_exceptions=True)
            if self.ready is not None:
                await self.ready.wait()
            self.cache.feed.subscribe(self._on_change)  # what each write affects, computed once
            self.metrics.reconcile_rate.set(self.pacing.rate)
            self.resync_all()
            workers = [
                asyncio.create_task(self._work(), name=f"reconcile worker {i}")
                for i in range(self.workers)
            ]
            while True:
                await asyncio.sleep(self.resync_period)
                self.resync_all()
        finally:
            self.cache.feed.unsubscribe(self._on_change)
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            self.queue.clear()
            self._sent.clear()
            self.backoff.clear()
            self.metrics.reconcile_failing.set(0)
            self.metrics.reconcile_rate.set(0)

    # --- what to do ----------------------------------------------------------------------------

    def resync_all(self) -> int:
        """Queue every annotated object (at leadership start, and periodically)."""
        queued = 0
        for gk in sorted(kinds.ANNOTATED_KINDS):
            for key in list(self.store.keys(gk)):
                self.queue.add(key)
                queued += 1
        logger.info(
            "reconciler resync: %d objects queued, %d failing",
            queued,
            self.failing,
            extra=fields(queued=queued, failing=self.failing),
        )
        return queued

    def _on_change(
        self,
        key: ObjectKey,
        old: Mapping[str, Any] | None,
        new: Mapping[str, Any] | None,
        affected: frozenset[ObjectKey],
    ) -> None:
        for member in affected:
            self.queue.add(member)
        if key.group_kind not in kinds.ANNOTATED_KINDS:
            return
        if new is None:
            self._forget(key)  # deleted: no retry, nothing to remember
            return
        value = mark_of(new, self.annotation_key)
        sent = self._sent.get(key)
        if sent is not None and sent[1] == value:
            return  # the echo of our own patch
        if old is None or mark_of(old, self.annotation_key) != value:
            self.queue.add(key)  # someone else edited or removed our annotation: put it back

    # --- the workers ---------------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            key = await self.queue.get()
            try:
                await self._reconcile(key)
            except Exception as exc:  # a bug of ours must not kill the worker
                logger.exception("reconcile failed", extra=fields(object=str(key)))
                self._retry(key, "bug", exc)
            finally:
                self.queue.done(key)
            if self.queue.idle:
                self.passed.set()
            # `Queue.get` does not suspend while items wait, and a skip never awaits: without
            # this, a resync of 10,000 up-to-date objects would hold the loop (and admission).
            await asyncio.sleep(0)

    async def _decided(self, key: ObjectKey) -> tuple[bool, str | None, str | None]:
        """`_wanted`, once the loop had its say if the reconciler's turn is over. A busy
        Service's computation is done in steps first (`SummaryCache.prepare`), one a turn."""
        ahead = 0.0  # seconds of the computation done in steps: it counts for the hold too
        if key not in self.cache:  # a lookup needs no turn; a computation does
            await self.turns.take()
            while True:
                started = time.perf_counter()
                more = self.cache.prepare(key)
                ahead += time.perf_counter() - started
                if not more:
                    break
                await self.turns.take()
        return self._wanted(key, ahead)

    def _wanted(self, key: ObjectKey, ahead: float) -> tuple[bool, str | None, str | None]:
        """(patch needed, value wanted, resourceVersion it was computed from)."""
        obj = self.store.get(key)
        if obj is None:
            return False, None, None  # deleted meanwhile: nothing to annotate
        version = _resource_version(obj)
        started = time.perf_counter()
        wanted = self.cache.get(key)
        cost = ahead + time.perf_counter() - started
        if cost >= self.hot_after:
            # Costly: changes reaching it soon wait and share one computation (module doc).
            self.queue.hold(key, max(self.hold_min, self.hold_factor * cost))
            self.holds += 1
        sent = self._sent.get(key)
        if sent is not None and sent[0] != version:
            del self._sent[key]  # the watch caught up with our patch
            sent = None
        mark = _mark(wanted)
        if mark_of(obj, self.annotation_key) == mark or sent == (version, mark):
            return False, wanted, version
        return True, wanted, version

    async def _reconcile(self, key: ObjectKey) -> None:
        needed, _, _ = await self._decided(key)
        resource = self.resources(key.group_kind) if needed else None
        if needed and resource is None:
            logger.debug("no served resource", extra=fields(object=str(key)))
            self._succeeded(key, "its kind is no longer served")
            return
        if resource is not None:
            await self.limiter.acquire()  # only patches spend tokens; skips are free
            needed, wanted, version = await self._decided(key)  # the state may have moved
            if needed:
                await self._send(resource, key, wanted, version)
                return
        # Deleted meanwhile, or the annotation is right now (someone else set it, or the
        # policies moved back): whatever failed before has nothing left to retry.
        self._succeeded(key, "nothing to patch any more")
        self.skips += 1
        self.metrics.child(self.metrics.reconcile_skips, str(key.group_kind)).inc()

    async def _send(
        self, resource: kubeapi.Resource, key: ObjectKey, wanted: str | None, version: str | None
    ) -> None:
        """One patch; 404 drops the key, 409 and failures come back later with a backoff."""
        # Remembered before sending: the watch event of this patch may come before the answer,
        # and must be known as our echo, not taken for someone else's edit and queued again.
        before = self._sent.get(key)
        sent = (version, _mark(wanted))
        self._sent[key] = sent
        started = time.monotonic()
        try:
            await self._patch(resource, key, wanted, version)
        except kubeapi.ApiError as exc:
            self._unsent(key, sent, before)
            if exc.status == 404:
                self._succeeded(key, "deleted")  # its DELETED event is on its way
                return
            if exc.status == 409:  # the watch brings the version to compute from
                self._retry(key, "conflict", exc)
                return
            if exc.status == TOO_MANY_REQUESTS:
                self._paced(None)
            self._failed(key, exc)
            return
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            self._unsent(key, sent, before)
            if isinstance(exc, TimeoutError):  # no answer in time: as loaded as a 429
                self._paced(None)
            self._failed(key, exc)
            return
        self._paced(time.monotonic() - started)
        self._succeeded(key, "patched")
        if self.repatch_after > 0:  # changes within the window share the next patch (module doc)
            self.queue.hold(key, self.repatch_after)
        self.patches += 1
        self.metrics.child(self.metrics.reconcile_patches, str(key.group_kind)).inc()
        logger.debug(
            "annotation %s",
            "removed" if wanted is None else "set",
            extra=fields(object=str(key), bytes=len(wanted or "")),
        )

    def _unsent(
        self,
        key: ObjectKey,
        sent: Sent,
        before: Sent | None,
    ) -> None:
        """The patch did not go through (as far as we know): no echo of it to expect."""
        if self._sent.get(key) != sent:
            return  # the key was forgotten (deleted) meanwhile
        if before is None:
            del self._sent[key]
        else:
            self._sent[key] = before

    def _paced(self, latency: float | None) -> None:
        """Tell the adaptive rate how a patch went (None: refused for load), apply its rate."""
        decreases = self.pacing.decreases
        if latency is None:
            self.pacing.throttled()
        else:
            self.pacing.succeeded(latency)
        if self.pacing.rate != self.limiter.rate:
            self.limiter.set_rate(self.pacing.rate)
            self.metrics.reconcile_rate.set(self.pacing.rate)
        if self.pacing.decreases != decreases:  # at most once per cooldown (a second)
            why = "refused for load" if latency is None else "slow answers"
            logger.info(
                "reconcile rate lowered to %.1f patches/s: %s",
                self.pacing.rate,
                why,
                extra=fields(rate=round(self.pacing.rate, 1), cause=why),
            )

    def _failed(self, key: ObjectKey, exc: Exception) -> None:
        self.errors += 1
        self.metrics.reconcile_errors.labels(kind=str(key.group_kind)).inc()
        self._retry(key, "error", exc)

    def _retry(self, key: ObjectKey, cause: str, exc: Exception) -> None:
        """Try `key` again after its backoff; never give up (see the module docstring)."""
        delay = self.backoff.when(key)
        failures = self.backoff.failures(key)
        self.retries += 1
        self.metrics.reconcile_retries.labels(kind=str(key.group_kind), cause=cause).inc()
        self.metrics.reconcile_failing.set(self.failing)
        self.queue.add_after(key, delay)
        about = fields(object=str(key), attempts=failures, cause=cause, error=repr(exc))
        if failures == self.warn_after:  # once per run of failures, not at every retry
            logger.warning(
                "annotation patch failed %d times in a row; still retrying, every %gs at most",
                failures,
                self.backoff.cap,
                extra=about,
            )
        else:
            what = "conflict" if cause == "conflict" else "annotation patch failed"
            logger.debug("%s; retrying in %.2fs", what, delay, extra=about)

    def _succeeded(self, key: ObjectKey, outcome: str) -> None:
        """`key` needs no retry (any more); say so if it had been reported as failing."""
        self.queue.cancel_later(key)
        failures = self.backoff.forget(key)
        if failures:
            self.metrics.reconcile_failing.set(self.failing)
        if failures >= self.warn_after:
            logger.info(
                "annotation of a failing object settled: %s",
                outcome,
                extra=fields(object=str(key), outcome=outcome),
            )

    def _forget(self, key: ObjectKey) -> None:
        """A deleted object: drop its scheduled retry and what we remember of it."""
        self._succeeded(key, "deleted")
        self._sent.pop(key, None)

    async def _patch(
        self, resource: kubeapi.Resource, key: ObjectKey, value: str | None, version: str | None
    ) -> None:
        response = await kubeapi.open_request(
            self.api,
            "PATCH",
            object_path(resource, key),
            query=[("fieldManager", self.field_manager)],
            body=merge_patch_of_annotation(self.annotation_key, value, version),
            content_type=MERGE_PATCH,
            timeout=kubeapi.request_timeout(self.request_timeout),
        )
        try:
            await response.read()  # the whole object back; read so the connection is reused
        finally:
            response.release()
