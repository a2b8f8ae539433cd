"""Kubernetes Events for denied and warned policy writes (SPEC §8.2), sent in the background.

`EventRecorder.record` is what the endpoints call: it never waits and never fails. It puts
the occurrence in a bounded queue (full: dropped and counted); one task sends them, planned by
the core's `EventSeries` (new Event, series count, or over the per-policy limit). Failures are
logged and counted, nothing else: an admission answer never waits for, nor depends on, an Event.
events.k8s.io/v1 where the server serves it (GA since Kubernetes 1.19), else core v1.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client

from webhook.core.admission import event_series
from webhook.core.admission.decisions import Decision
from webhook.core.admission.event_series import EventSeries, Occurrence, Plan
from webhook.shell.cluster import kubeapi
from webhook.shell.cluster.leader import default_identity, micro_time
from webhook.shell.process.logs import fields
from webhook.shell.process.metrics import Metrics

logger = logging.getLogger(__name__)

QUEUE_SIZE = 256  # occurrences waiting to be sent; more are dropped (and counted)
REQUEST_TIMEOUT = 5.0  # seconds per Event request
FAILURE_LOG_SECONDS = 60.0  # after a failure is logged, the next ones wait this long
EVENTS_V1 = "/apis/events.k8s.io/v1"
MERGE_PATCH = "application/merge-patch+json"
# `reportingInstance` is at most 128 characters (the API server's Event validation).
MAX_INSTANCE = 128


class EventRecorder:
    """A bounded queue of occurrences and the task that writes them as Events."""

    def __init__(
        self,
        api: client.ApiClient,
        metrics: Metrics,
        *,
        instance: str | None = None,
        series: EventSeries | None = None,
        queue_size: int = QUEUE_SIZE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._api, self._metrics, self._clock = api, metrics, clock
        self.instance = (instance or default_identity())[:MAX_INSTANCE]
        self._series = series or EventSeries()
        self._queue: asyncio.Queue[Occurrence] = asyncio.Queue(queue_size)
        self._task: asyncio.Task[None] | None = None
        self._core_v1: bool | None = None  # None until discovery has answered
        self._dropping = 0  # dropped since the last one that got in
        self._failures_logged_at = float("-inf")
        self._failures_unlogged = 0

    # --- the admission side: never waits -----------------------------------------------------

    def record(self, decision: Decision) -> None:
        occurrence = event_series.occurrence_of(decision)
        if occurrence is None:
            return
        try:
            self._queue.put_nowait(occurrence)
        except asyncio.QueueFull:
            self._metrics.observe_event(reason=occurrence.reason, outcome="dropped")
            if not self._dropping:
                logger.warning(
                    "event queue full: Events are dropped until it drains",
                    extra=fields(queue_size=self._queue.maxsize),
                )
            self._dropping += 1
            return
        if self._dropping:
            logger.info("event queue drains again", extra=fields(dropped=self._dropping))
            self._dropping = 0

    # --- the sending side --------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="event recorder")

    async def stop(self) -> None:
        """Stop sending; what is still queued is not sent (it is in the decision log)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        series, policies = self._series.tracked()
        logger.info(
            "event recorder stopped",
            extra=fields(not_sent=self._queue.qsize(), series=series, policies=policies),
        )

    async def _run(self) -> None:
        while True:
            occurrence = await self._queue.get()
            await self.send(occurrence)

    async def send(self, occurrence: Occurrence) -> None:
        """Plan one occurrence and write what the plan says; never raises."""
        now = self._clock()
        plan = self._series.plan(occurrence, now)
        outcome = {"create": "sent", "patch": "series", "limited": "limited"}[plan.action]
        try:
            if plan.action == "create":
                await self._create(occurrence, plan)
            elif plan.action == "patch":
                if not await self._patch(occurrence, plan, now):
                    # The Event is gone (expired, deleted): a new one starts the series again.
                    plan = self._series.restart(occurrence, now)
                    await self._create(occurrence, plan)
                    outcome = "sent"
            elif plan.announce:
                self._log_limited(occurrence)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if plan.action == "create":
                self._series.forget(occurrence)  # never written: the next one creates again
            outcome = "failed"
            self._log_failure(occurrence, exc)
        self._metrics.observe_event(reason=occurrence.reason, outcome=outcome)

    async def _create(self, occurrence: Occurrence, plan: Plan) -> None:
        core_v1 = await self._uses_core_v1()
        path, body = (
            (_core_path(occurrence.namespace), core_event(occurrence, plan, self.instance))
            if core_v1
            else (_events_path(occurrence.namespace), events_event(occurrence, plan, self.instance))
        )
        await kubeapi.request_json(self._api, "POST", path, body=body, timeout=REQUEST_TIMEOUT)

    async def _patch(self, occurrence: Occurrence, plan: Plan, now: float) -> bool:
        """The series count on the existing Event; False when it is not there (404)."""
        core_v1 = await self._uses_core_v1()
        base = _core_path if core_v1 else _events_path
        body = (core_series_patch if core_v1 else series_patch)(plan, now)
        try:
            response = await kubeapi.open_request(
                self._api, "PATCH", f"{base(occurrence.namespace)}/{plan.name}",
                body=body, content_type=MERGE_PATCH,
                timeout=kubeapi.request_timeout(REQUEST_TIMEOUT),
            )  # fmt: skip
        except kubeapi.ApiError as exc:
            if exc.status == 404:
                return False
            raise
        response.release()
        return True

    async def _uses_core_v1(self) -> bool:
        """Whether only core v1 Events are served: asked once, at the first Event."""
        if self._core_v1 is None:
            try:
                await kubeapi.request_json(self._api, "GET", EVENTS_V1, timeout=REQUEST_TIMEOUT)
                self._core_v1 = False
            except kubeapi.ApiError as exc:
                if exc.status != 404:
                    raise  # asked again with the next Event
                self._core_v1 = True
            logger.info(
                "Events are written through %s",
                "core v1" if self._core_v1 else "events.k8s.io/v1",
            )
        return self._core_v1

    def _log_limited(self, occurrence: Occurrence) -> None:
        r = occurrence.regarding
        logger.warning(
            "Events about a policy are limited: more than %d in %g minutes; further ones are "
            "only counted until its rate falls",
            self._series.limit, self._series.window / 60,
            extra=fields(kind=r.kind, namespace=r.namespace, name=r.name, reason=occurrence.reason),
        )  # fmt: skip

    def _log_failure(self, occurrence: Occurrence, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._failures_logged_at < FAILURE_LOG_SECONDS:
            self._failures_unlogged += 1
            return
        r = occurrence.regarding
        logger.warning(
            "cannot write an Event: %s", exc,
            extra=fields(kind=r.kind, namespace=r.namespace, name=r.name, reason=occurrence.reason,
                         failures_not_logged=self._failures_unlogged),
        )  # fmt: skip
        self._failures_logged_at, self._failures_unlogged = now, 0


# --- the Event objects -----------------------------------------------------------------------


def events_event(occurrence: Occurrence, plan: Plan, instance: str) -> dict[str, Any]:
    """A new events.k8s.io/v1 Event (its series begins: no `series` until a second one)."""
    r = occurrence.regarding
    regarding = {"apiVersion": r.api_version, "kind": r.kind, "name": r.name}
    if r.namespace:
        regarding["namespace"] = r.namespace
    if r.uid:
        regarding["uid"] = r.uid
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": plan.name, "namespace": occurrence.namespace},
        "eventTime": _micro(plan.first_seen),
        "type": "Warning",
        "reason": occurrence.reason,
        "action": event_series.ACTION,
        "note": occurrence.note,
        "regarding": regarding,
        "reportingController": event_series.REPORTING_CONTROLLER,
        "reportingInstance": instance,
    }


def series_patch(plan: Plan, now: float) -> dict[str, Any]:
    return {"series": {"count": plan.count, "lastObservedTime": _micro(now)}}


def core_event(occurrence: Occurrence, plan: Plan, instance: str) -> dict[str, Any]:
    """The same Event in core v1's words, for a server without events.k8s.io/v1."""
    new = events_event(occurrence, plan, instance)
    seen = _seconds(plan.first_seen)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": new["metadata"],
        "eventTime": new["eventTime"],
        "type": new["type"],
        "reason": new["reason"],
        "action": new["action"],
        "message": new["note"],
        "involvedObject": new["regarding"],
        "reportingComponent": new["reportingController"],
        "reportingInstance": instance,
        "source": {"component": new["reportingController"]},
        "firstTimestamp": seen,
        "lastTimestamp": seen,
        "count": 1,
    }


def core_series_patch(plan: Plan, now: float) -> dict[str, Any]:
    """`count` and `lastTimestamp` are what `kubectl get events` shows from core v1."""
    return {"count": plan.count, "lastTimestamp": _seconds(now), **series_patch(plan, now)}


def _micro(moment: float) -> str:
    return micro_time(datetime.datetime.fromtimestamp(moment, datetime.UTC))


def _seconds(moment: float) -> str:
    """A `Time`: RFC 3339 to the second."""
    return datetime.datetime.fromtimestamp(moment, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _events_path(namespace: str) -> str:
    return f"{EVENTS_V1}/namespaces/{namespace}/events"


def _core_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/events"
