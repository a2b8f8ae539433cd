"""The Event recorder against a scripted API server (SPEC §8.2): what it sends, in which API,
and that admission never waits for it — a full queue drops and counts, a failure is logged
and counted. The real API server, with real kubectl, is tests/e2e/test_decisions_events.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from webhook.core.admission.decisions import Decision
from webhook.core.admission.event_series import EventSeries, Occurrence, occurrence_of
from webhook.core.rules.findings import Finding
from webhook.shell.cluster import events, kubeapi
from webhook.shell.cluster.events import EventRecorder
from webhook.shell.process.metrics import Metrics

DENIAL = Decision(
    uid="u1", operation="CREATE", dry_run=False, group="policies.example.com",
    version="v1alpha1", kind="RetryPolicy", namespace="apps", name="retry-everything",
    object_uid="", user="jane", groups=(), verdict="denied", rules=("PA-S01",),
    causes=(Finding("PA-S01", "spec.targetRef", "set together with spec.targetRefs"),),
)  # fmt: skip
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
EVENTS = "/apis/events.k8s.io/v1/namespaces/apps/events"


class Response:
    def release(self) -> None:
        pass


class FakeApi:
    """Scripted answers; a record of every request as (method, path, body)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events_v1 = True  # False: discovery of events.k8s.io/v1 answers 404
        self.sent: list[tuple[str, str, Any]] = []
        self.fail_with: kubeapi.ApiError | None = None
        self.missing: set[str] = set()  # Event names that answer 404
        self.gate: asyncio.Event | None = None  # while set to an unset Event, requests hang
        monkeypatch.setattr(kubeapi, "request_json", self.request_json)
        monkeypatch.setattr(kubeapi, "open_request", self.open_request)

    async def request_json(
        self, api: object, method: str, path: str, *, body: Any = None, **_: Any
    ) -> dict[str, Any]:
        if self.gate is not None:
            await self.gate.wait()
        if method == "GET":
            if path == events.EVENTS_V1 and not self.events_v1:
                raise kubeapi.ApiError(404, "NotFound", "the server could not find it")
            return {"kind": "APIResourceList"}
        self.sent.append((method, path, body))
        if self.fail_with is not None:
            raise self.fail_with
        return dict(body)

    async def open_request(
        self, api: object, method: str, path: str, *, body: Any, content_type: str, **_: Any
    ) -> Response:
        assert content_type == "application/merge-patch+json"
        self.sent.append((method, path, body))
        if path.rsplit("/", 1)[1] in self.missing:
            raise kubeapi.ApiError(404, "NotFound", "events not found")
        return Response()


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def counted(metrics: Metrics) -> dict[tuple[str, str], float]:
    return {
        (s.labels["reason"], s.labels["outcome"]): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        if family.name == "policy_webhook_events"
        for s in family.samples
        if s.name.endswith("_total")
    }


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return FakeApi(monkeypatch)


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def recorder(metrics: Metrics, clock: Clock, **options: Any) -> EventRecorder:
    return EventRecorder(object(), metrics, instance="webhook-0", clock=clock, **options)  # type: ignore[arg-type]


def occurrence_of_denial(decision: Decision = DENIAL) -> Occurrence:
    """What `record` queues for `decision` (one that records an Event)."""
    occurrence = occurrence_of(decision)
    assert occurrence is not None
    return occurrence


def run(coroutine: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coroutine)


# --- what is sent ------------------------------------------------------------------------------


def test_a_denial_becomes_an_events_v1_event_about_the_policy(
    api: FakeApi, metrics: Metrics, clock: Clock
) -> None:
    async def scenario() -> None:
        hook = recorder(metrics, clock)
        hook.start()
        hook.record(DENIAL)
        await asyncio.sleep(0.05)
        await hook.stop()

    run(scenario())
    ((method, path, body),) = api.sent
    assert (method, path) == ("POST", EVENTS)
    name = body["metadata"].pop("name")
    assert name.startswith("retry-everything.")
    assert body == {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"namespace": "apps"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "type": "Warning",
        "reason": "PolicyDenied",
        "action": "Admit",
        "note": "[PA-S01] spec.targetRef: set together with spec.targetRefs",
        "regarding": {"apiVersion": "policies.example.com/v1alpha1", "kind": "RetryPolicy",
                      "name": "retry-everything", "namespace": "apps"},
        "reportingController": "policy-attachment.dev/webhook",
        "reportingInstance": "webhook-0",
    }  # fmt: skip
    assert counted(metrics) == {("PolicyDenied", "sent"): 1}


def test_an_identical_one_raises_the_series_count_of_the_same_event(
    api: FakeApi, metrics: Metrics, clock: Clock
) -> None:
    async def scenario() -> None:
        hook = recorder(metrics, clock)
        occurrence = occurrence_of_denial()
        await hook.send(occurrence)
        clock.now = T0 + 90
        await hook.send(occurrence)
        clock.now = T0 + 120.5
        await hook.send(occurrence)

    run(scenario())
    created = api.sent[0][2]["metadata"]["name"]
    assert [(m, p) for m, p, _ in api.sent[1:]] == [("PATCH", f"{EVENTS}/{created}")] * 2
    assert api.sent[2][2] == {
        "series": {"count": 3, "lastObservedTime": "2026-01-01T00:02:00.500000Z"}
    }
    assert counted(metrics) == {("PolicyDenied", "sent"): 1, ("PolicyDenied", "series"): 2}


def test_an_update_names_the_policys_uid_and_a_cluster_scoped_one_goes_to_default(
    api: FakeApi, metrics: Metrics, clock: Clock
) -> None:
    async def scenario() -> None:
        hook = recorder(metrics, clock)
        for decision in (
            replace(DENIAL, operation="UPDATE", object_uid="uid-7"),
            replace(DENIAL, namespace="", verdict="warned"),
        ):
            await hook.send(occurrence_of_denial(decision))

    run(scenario())
    (_, _, update), (_, path, cluster_scoped) = api.sent
    assert update["regarding"]["uid"] == "uid-7"
    assert path == "/apis/events.k8s.io/v1/namespaces/default/events"
    assert cluster_scoped["reason"] == "PolicyWarned"
    assert "namespace" not in cluster_scoped["regarding"]


def test_a_series_whose_event_expired_starts_a_new_event(
    api: FakeApi, metrics: Metrics, clock: Clock
) -> None:
    async def scenario() -> None:
        hook = recorder(metrics, clock)
        occurrence = occurrence_of_denial()
        await hook.send(occurrence)
        api.missing.add(api.sent[0][2]["metadata"]["name"])  # the API server dropped it
        clock.now += 1
        await hook.send(occurrence)

    run(scenario())
    assert [m for m, _, _ in api.sent] == ["POST", "PATCH", "POST"]
    assert api.sent[2][2]["metadata"]["name"] != api.sent[0][2]["metadata"]["name"]
    assert counted(metrics) == {("PolicyDenied", "sent"): 2}


def test_a_server_without_events_v1_gets_core_v1_events(
    api: FakeApi, metrics: Metrics, clock: Clock
) -> None:
    api.events_v1 = False

    async def scenario() -> None:
        hook = recorder(metrics, clock)
        occurrence = occurrence_of_denial()
        await hook.send(occurrence)
        clock.now += 5
        await hook.send(occurrence)

    run(scenario())
    (_, path, body), (method, patched, patch) = api.sent
    assert path == "/api/v1/namespaces/apps/events"
    assert (body["apiVersion"], body["message"], body["count"]) == (
        "v1", "[PA-S01] spec.targetRef: set together with spec.targetRefs", 1,
    )  # fmt: skip
    assert body["involvedObject"]["name"] == "retry-everything"
    assert body["reportingComponent"] == "policy-attachment.dev/webhook"
    assert (method, patched) == ("PATCH", f"{path}/{body['metadata']['name']}")
    assert (patch["count"], patch["lastTimestamp"]) == (2, "2026-01-01T00:00:05Z")


# --- never on the critical path ----------------------------------------------------------------


def test_a_full_queue_drops_and_counts_and_record_never_waits(
    api: FakeApi, metrics: Metrics, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)

    async def scenario() -> None:
        api.gate = asyncio.Event()  # the API server hangs
        hook = recorder(metrics, clock, queue_size=3)
        hook.start()
        hook.record(DENIAL)
        await asyncio.sleep(0.01)  # the sender took the first one and waits on the server
        loop = asyncio.get_running_loop()
        started = loop.time()
        for i in range(10):
            hook.record(replace(DENIAL, uid=f"u{i}"))  # 3 fit, 7 are dropped
        assert loop.time() - started < 0.05  # no await inside: it cannot have waited
        api.gate.set()
        await asyncio.sleep(0.05)
        hook.record(DENIAL)  # room again
        await asyncio.sleep(0.05)
        await hook.stop()

    run(scenario())
    got = counted(metrics)
    assert got[("PolicyDenied", "dropped")] == 7
    assert got[("PolicyDenied", "sent")] + got[("PolicyDenied", "series")] == 5
    warnings = [r.getMessage() for r in caplog.records if r.name == events.__name__]
    assert warnings.count("event queue full: Events are dropped until it drains") == 1
    assert "event queue drains again" in warnings
    assert warnings[-1] == "event recorder stopped"


def test_a_dry_run_or_an_allow_queues_nothing(api: FakeApi, metrics: Metrics, clock: Clock) -> None:
    async def scenario() -> None:
        hook = recorder(metrics, clock)
        hook.start()
        hook.record(replace(DENIAL, dry_run=True))
        hook.record(replace(DENIAL, verdict="allowed", causes=()))
        await asyncio.sleep(0.05)
        await hook.stop()

    run(scenario())
    assert api.sent == [] and counted(metrics) == {}


def test_a_failure_is_logged_and_counted_and_the_next_one_is_tried(
    api: FakeApi, metrics: Metrics, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)

    async def scenario() -> None:
        hook = recorder(metrics, clock)
        occurrence = occurrence_of_denial()
        api.fail_with = kubeapi.ApiError(403, "Forbidden", "cannot create events")
        await hook.send(occurrence)
        await hook.send(occurrence)  # within a minute: counted, not logged again
        api.fail_with = None
        await hook.send(occurrence)

    run(scenario())
    assert [m for m, _, _ in api.sent] == ["POST", "POST", "POST"]  # never a PATCH of nothing
    assert counted(metrics) == {("PolicyDenied", "failed"): 2, ("PolicyDenied", "sent"): 1}
    failures = [r for r in caplog.records if r.getMessage().startswith("cannot write an Event")]
    assert len(failures) == 1 and "Forbidden" in failures[0].getMessage()


def test_over_the_limit_one_log_line_and_the_rest_only_counted(
    api: FakeApi, metrics: Metrics, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)

    async def scenario() -> None:
        hook = recorder(metrics, clock, series=EventSeries(limit=3))
        occurrence = occurrence_of_denial()
        for _ in range(8):
            clock.now += 1
            await hook.send(occurrence)

    run(scenario())
    assert len(api.sent) == 3
    assert counted(metrics) == {
        ("PolicyDenied", "sent"): 1,
        ("PolicyDenied", "series"): 2,
        ("PolicyDenied", "limited"): 5,
    }
    limited = [r for r in caplog.records if "are limited" in r.getMessage()]
    assert len(limited) == 1
    assert limited[0].fields["name"] == "retry-everything"  # type: ignore[attr-defined]
