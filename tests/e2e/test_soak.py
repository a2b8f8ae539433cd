"""Load and soak: one webhook replica in cluster mode under a steady admission rate, while
policies change all along through the real API server, for SOAK_SECONDS (default 600).

Two streams at once:
- a load generator (a thread with its own event loop) sends AdmissionReviews shaped as
  kube-apiserver sends them straight to /validate and /mutate, over keep-alive HTTPS, open
  loop at RATE per second: request i is due at start + i/RATE and its latency counts from
  then, so a webhook that falls behind is charged for the queue it causes;
- every CHANGE_EVERY_S seconds one real `kubectl apply` or `delete` of a policy (or a route
  moving between listeners), through the registered webhook configurations, so that admission
  and the reconciler both work all along.

What must hold (docs/reliability.md, "Load and soak"): no 5xx and no connection error; no
memory growth (RSS sampled from /proc every RSS_EVERY_S: the median of the last quarter at
most RSS_GROWTH x the median of the second quarter; the first quarter is warm-up); latency
p99 within P99_BOUND_MS for each endpoint; every kubectl write admitted; and at the end, once
the stream stops, every annotation of this module's world equal to a fresh computation.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import ssl
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from convergence import (
    World,
    admission_review,
    apply,
    converge,
    delete,
    install_policy_crds,
    leading,
    metric,
    patches,
    samples,
    wait_until,
)
from webhook_harness import WebhookProcess, registered

if TYPE_CHECKING:
    from cluster import LocalCluster

SOAK_S = float(os.environ.get("SOAK_SECONDS", "600"))
RATE = 50.0  # admission reviews per second, half to /validate, half to /mutate
CONNECTIONS = 8  # keep-alive connections, as the API server keeps a few per webhook
WARMUP_S = 5.0  # latencies of the first seconds (handshakes, first summaries) are not judged
CHANGE_EVERY_S = 2.0
# A wide change makes the webhook recompute every object below it, on the event loop every
# admission call waits on (docs/reliability.md): once a minute is already far more than a
# cluster rewrites its Gateway-wide policies. Its stall shows in p99.9 and max (printed).
WIDE_EVERY = 30
RSS_EVERY_S = 2.0
RSS_GROWTH = 1.10
# /validate and /mutate p99 as the client sees it (from the due time, over loopback HTTPS, on a
# machine that also runs etcd, kube-apiserver and kubectl), and as the webhook's own histogram
# sees it (the bucket that holds the p99). A write passes both webhooks: 2 x 400 ms stays
# under the 1 s p99 that Kubernetes' API call latency SLO allows a single-object mutating
# call, and far below the 5 s timeoutSeconds the webhook configurations ship. Measured: ~40 ms
# client p99 on a shared 2-core machine at load 2.7, and 283 ms when three test suites and the
# benchmarks shared it: the bound is set for a machine that may be busy, not for a quiet one.
P99_BOUND_MS = 400.0
SERVER_P99_BOUND_MS = 250.0
LEASE = "e2e-soak"
WORLD = World("soak", routes=20)
UID = "00000000-0000-0000-0000-000000000000"  # replaced by a fresh uid in every request


# --- what is sent ---------------------------------------------------------------------------------


def _stamped(obj: dict[str, Any]) -> dict[str, Any]:
    """As stored: with the uid, timestamp and resourceVersion an UPDATE's objects carry."""
    metadata = {
        **obj["metadata"],
        "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, json.dumps(obj["metadata"], sort_keys=True))),
        "creationTimestamp": "2025-01-01T00:00:00Z",
        "resourceVersion": "1000",
        "generation": 1,
    }
    return {**obj, "metadata": metadata}


def review_bodies(world: World) -> tuple[list[bytes], list[bytes]]:
    """(/validate bodies, /mutate bodies): what the API server sends for this world's writes.

    Policy writes at one route or one Service, a denied one, a conflicted one, and deletes of
    policies and of targets (PA-C04/PA-C05 warnings). Not here: writes of Gateway-, Namespace-
    or class-wide policies, whose impact preview (PA-C04) recomputes every object below them
    — those come through kubectl in the stream, every few seconds (see `Changes`), which is
    already far more often than a cluster rewrites its Gateway-wide policies.
    """
    broken = world.route_retry(0, 1)
    broken["metadata"]["name"] = "both-ref-fields"
    broken["spec"]["targetRef"] = broken["spec"]["targetRefs"][0]  # PA-S01: a denial
    second_health = world.service_health(0, "/ready")
    second_health["metadata"]["name"] = "svc-0-health-2"  # PA-C01: a conflict warning
    validate = [
        *(admission_review(world.route_retry(i, 3), "retrypolicies") for i in range(world.routes)),
        admission_review(
            _stamped(world.route_retry(2, 4)), "retrypolicies", "UPDATE",
            _stamped(world.route_retry(2, 3)),
        ),
        admission_review(second_health, "healthcheckpolicies"),
        admission_review(world.service_health(5, "/livez"), "healthcheckpolicies"),
        admission_review(broken, "retrypolicies"),
        admission_review(_stamped(world.route_retry(1, 3)), "retrypolicies", "DELETE"),
        *(
            admission_review(_stamped(world.route(i)), "httproutes", "DELETE")
            for i in range(0, world.routes, 5)
        ),
        *(
            admission_review(_stamped(world.service(i)), "services", "DELETE")
            for i in range(0, world.routes, 5)
        ),
    ]  # fmt: skip
    mutate = [
        *(admission_review(world.route(i), "httproutes") for i in range(world.routes)),
        *(
            admission_review(
                _stamped(world.route(i, section="web")),
                "httproutes",
                "UPDATE",
                _stamped(world.route(i)),
            )
            for i in range(0, world.routes, 4)
        ),
        *(
            admission_review(_stamped(world.service(i)), "services", "UPDATE", world.service(i))
            for i in range(0, world.routes, 2)
        ),
        admission_review(_stamped(world.objects()[3]), "gateways", "UPDATE", world.objects()[3]),
    ]
    for body in (*validate, *mutate):
        body["request"]["uid"] = UID

    def encoded(reviews: list[dict[str, Any]]) -> list[bytes]:
        return [json.dumps(review).encode() for review in reviews]

    return encoded(validate), encoded(mutate)


# --- the load generator -----------------------------------------------------------------------------


class Load:
    """Open-loop load at `rate` per second from a thread of its own until `stop()`."""

    def __init__(
        self, process: WebhookProcess, validate: list[bytes], mutate: list[bytes], rate: float
    ) -> None:
        self.process, self.validate, self.mutate, self.rate = process, validate, mutate, rate
        self.latencies: dict[str, list[tuple[float, float]]] = {"validate": [], "mutate": []}
        self.statuses: dict[int, int] = {}
        self.errors: list[str] = []  # connection errors, timeouts, wrong answers
        self.sent = 0
        self.started = math.inf
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "the load generator did not stop"

    async def _run(self) -> None:
        context = ssl.create_default_context(cafile=str(self.process.ca_file))
        connector = aiohttp.TCPConnector(ssl=context, limit=CONNECTIONS)
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            in_flight: set[asyncio.Task[None]] = set()
            self.started = time.perf_counter()
            deadline = self.started + SOAK_S + 60  # bounded whatever happens to the test
            while not self._stop.is_set() and time.perf_counter() < deadline:
                due = self.started + self.sent / self.rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.create_task(self._one(session, self.sent, due))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                self.sent += 1
            if in_flight:
                await asyncio.wait(in_flight, timeout=15)

    async def _one(self, session: aiohttp.ClientSession, i: int, due: float) -> None:
        endpoint = "validate" if i % 2 == 0 else "mutate"
        bodies = self.validate if endpoint == "validate" else self.mutate
        uid = str(uuid.uuid4())
        body = bodies[(i // 2) % len(bodies)].replace(UID.encode(), uid.encode())
        url = f"{self.process.url}/{endpoint}"
        try:
            headers = {"Content-Type": "application/json"}
            async with session.post(url, data=body, headers=headers) as response:
                raw = await response.read()
                status = response.status
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            self.errors.append(f"{endpoint}: {exc!r}")
            return
        done = time.perf_counter()
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if status != 200 or json.loads(raw)["response"]["uid"] != uid:
            self.errors.append(f"{endpoint}: HTTP {status} {raw[:200]!r}")
            return
        self.latencies[endpoint].append((done - self.started, done - due))

    def percentiles(self, endpoint: str) -> tuple[float, float, float, float, int]:
        """(p50, p99, p99.9, max in ms, n) after the warm-up."""
        judged = sorted(lat for at, lat in self.latencies[endpoint] if at >= WARMUP_S)
        if not judged:
            return math.nan, math.nan, math.nan, math.nan, 0
        quantiles = statistics.quantiles(judged, n=1000, method="inclusive")
        ms = [q * 1000 for q in (quantiles[499], quantiles[989], quantiles[998], judged[-1])]
        return ms[0], ms[1], ms[2], ms[3], len(judged)


class RssSampler:
    """VmRSS of one process from /proc/<pid>/status every `every` seconds, from a thread."""

    def __init__(self, pid: int, every: float) -> None:
        self.pid, self.every = pid, every
        self.samples_kb: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        limit = int((SOAK_S + 120) / self.every)  # bounded whatever happens to the test
        for _ in range(limit):
            self.samples_kb.append(rss_kb(self.pid))
            if self._stop.wait(self.every):
                return


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


# --- the policy stream --------------------------------------------------------------------------------


class Changes:
    """One real write through the API server (and so through the webhook) per call: policies
    at one route or one Service come, change and go, and routes move between listeners; every
    WIDE_EVERY-th call, a Gateway-, Namespace- or class-wide policy changes instead."""

    def __init__(self, cluster: LocalCluster, world: World, seed: int = 7) -> None:
        self.cluster, self.world = cluster, world
        self.random = random.Random(seed)
        self.applied = self.wide = 0
        self.failed: list[str] = []

    def step(self) -> None:
        w, r, n = self.world, self.random, self.applied
        i = r.randrange(w.routes)
        narrow = [
            lambda: apply(self.cluster, w.route_retry(i, r.randint(1, 5))),
            lambda: apply(self.cluster, w.service_health(i, r.choice(["/healthz", "/livez"]))),
            lambda: apply(self.cluster, w.route(i, section=r.choice([None, "http", "web"]))),
            lambda: delete(self.cluster, w.route_retry(i, 0)),
            lambda: delete(self.cluster, w.service_health(i, "")),
        ]
        wide = [
            lambda: apply(self.cluster, w.gateway_color(r.choice(["red", "green", "blue"]))),
            lambda: apply(self.cluster, w.namespace_timeout(f"{r.randint(1, 60)}s")),
            lambda: apply(self.cluster, w.class_limits(r.randint(100, 10000))),
        ]
        try:
            if n % WIDE_EVERY == WIDE_EVERY // 2:
                wide[self.wide % len(wide)]()
                self.wide += 1
            else:
                narrow[n % len(narrow)]()
        except Exception as exc:  # kubectl refused: the webhook failed (failurePolicy: Fail)
            self.failed.append(repr(exc)[:300])
        self.applied += 1


# --- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(cluster: LocalCluster) -> Iterator[World]:
    install_policy_crds(cluster)
    apply(cluster, *WORLD.objects())
    apply(cluster, WORLD.gateway_color("red"), WORLD.class_limits(1000))
    try:
        yield WORLD
    finally:
        WORLD.remove(cluster)


@pytest.fixture
def webhook(
    cluster: LocalCluster, world: World, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookProcess]:
    process = WebhookProcess(
        cluster,
        tmp_path_factory.mktemp("soak"),
        name="soak",
        args=["--leader-election-name", LEASE],
    )
    try:
        process.start()
        with registered(cluster, process, suffix="soak"):
            yield process
    finally:
        process.stop()
        cluster.kubectl("delete", "lease", LEASE, "-n", "default", "--ignore-not-found")
        print(f"\n[e2e] soak webhook log: {process.log_path}")


# --- the test ---------------------------------------------------------------------------------------------


def server_p99_bound_ms(process: WebhookProcess, endpoint: str) -> float:
    """The upper bound of the webhook's own histogram bucket that holds its p99."""
    buckets = sorted(
        (float(labels["le"]), value)
        for labels, value in samples(process, "policy_webhook_admission_duration_seconds_bucket")
        if labels.get("endpoint") == endpoint
    )
    total = buckets[-1][1]
    return next(le for le, count in buckets if count >= 0.99 * total) * 1000


@pytest.mark.timeout(SOAK_S + 600)
def test_a_steady_admission_rate_with_a_stream_of_policy_changes_stays_correct_and_bounded(
    cluster: LocalCluster, world: World, webhook: WebhookProcess
) -> None:
    wait_until(lambda: leading(webhook), 20, "the replica leads")
    converge(cluster, world.watched, timeout=60)
    assert webhook.pid is not None
    validate, mutate = review_bodies(world)
    load = Load(webhook, validate, mutate, RATE)
    changes = Changes(cluster, world)

    with RssSampler(webhook.pid, RSS_EVERY_S) as rss:
        started = time.monotonic()
        load.start()
        try:
            while time.monotonic() - started < SOAK_S:
                step_started = time.monotonic()
                changes.step()
                time.sleep(max(0.0, CHANGE_EVERY_S - (time.monotonic() - step_started)))
        finally:
            load.stop()
    ended = time.monotonic()
    took = converge(cluster, world.watched, timeout=60)

    v50, v99, v999, vmax, vn = load.percentiles("validate")
    m50, m99, m999, mmax, mn = load.percentiles("mutate")
    kb = rss.samples_kb
    quarter = len(kb) // 4
    second, last = statistics.median(kb[quarter : 2 * quarter]), statistics.median(kb[-quarter:])
    server_errors = metric(webhook, "policy_webhook_admission_requests_total", verdict="error")
    validate_server_p99 = server_p99_bound_ms(webhook, "validate")
    mutate_server_p99 = server_p99_bound_ms(webhook, "mutate")
    figures = {
        "seconds": round(ended - started, 1),
        "rate_per_s": RATE,
        "requests_sent": load.sent,
        "answered": sum(load.statuses.values()),
        "statuses": load.statuses,
        "errors": len(load.errors),
        "validate_n": vn, "validate_p50_ms": round(v50, 2), "validate_p99_ms": round(v99, 2),
        "validate_p999_ms": round(v999, 1), "validate_max_ms": round(vmax, 1),
        "mutate_n": mn, "mutate_p50_ms": round(m50, 2), "mutate_p99_ms": round(m99, 2),
        "mutate_p999_ms": round(m999, 1), "mutate_max_ms": round(mmax, 1),
        "validate_server_p99_le_ms": validate_server_p99,
        "mutate_server_p99_le_ms": mutate_server_p99,
        "rss_start_mb": round(kb[0] / 1024, 1), "rss_end_mb": round(kb[-1] / 1024, 1),
        "rss_max_mb": round(max(kb) / 1024, 1),
        "rss_q2_median_mb": round(second / 1024, 1), "rss_q4_median_mb": round(last / 1024, 1),
        "rss_samples": len(kb),
        "policy_changes": changes.applied, "wide_policy_changes": changes.wide,
        "policy_changes_failed": len(changes.failed),
        "reconcile_patches": patches(webhook),
        "converged_after_stream_s": round(took, 2),
        "load_average_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
    }  # fmt: skip
    print(f"\n[e2e] soak figures: {json.dumps(figures)}")

    assert not load.errors, load.errors[:10]
    assert all(status < 500 for status in load.statuses), load.statuses
    assert server_errors == 0
    assert not changes.failed, changes.failed[:5]
    assert v99 <= P99_BOUND_MS and m99 <= P99_BOUND_MS, figures
    assert validate_server_p99 <= SERVER_P99_BOUND_MS, figures
    assert mutate_server_p99 <= SERVER_P99_BOUND_MS, figures
    assert quarter >= 2 and last <= RSS_GROWTH * second, figures
    assert load.sent >= 0.95 * RATE * SOAK_S
