"""Faults against the real API server: what a replica does when the world around it breaks.

Each test starts its own `policy-webhook serve` processes on a Lease of its own, in a world of
this module's own (`faults-*` namespaces, GatewayClass `faults`), and puts the API server back
in a `finally` whatever happens: every other module shares this cluster. Figures measured here
(time to ready, to converge, hand-over) are printed and recorded in docs/reliability.md.

A write conflict is provoked for real: foreign writes to the very objects the reconciler
patches, as fast as the API server takes them, so that its resourceVersion-guarded merge
patch is based on an object that has changed meanwhile (tests/shell/cluster/test_reconciler_fake.py
forces the same 409 with a fake, deterministically).
"""

from __future__ import annotations

import asyncio
import json
import math
import signal
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from convergence import (
    GW,
    World,
    admission_review,
    apply,
    converge,
    delete,
    install_policy_crds,
    leading,
    metric,
    patches,
    wait_for_annotation,
    wait_until,
    wrong,
)
from webhook_harness import WebhookProcess, registered

from webhook.shell.cluster import kubeapi
from webhook.shell.cluster.kubeapi import connect
from webhook.shell.https.tls import self_signed

if TYPE_CHECKING:
    from cluster import LocalCluster

WORLD = World("faults", routes=40)
FOREIGN = "e2e.example.com/writer"  # an annotation of someone else's, on the objects we patch
BACKOFF_CAP_S = 30.0  # the informers' reconnect backoff cap (ClusterSource.backoff_cap)
EXPORT_S = 5.0  # how often readiness `state-fresh` is judged (live.EXPORT_SECONDS)
BOTH_REF_FIELDS = f"""
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {{name: both-ref-fields, namespace: {WORLD.apps}}}
spec:
  targetRef: {{group: {GW}, kind: HTTPRoute, name: route-0}}
  targetRefs: [{{group: {GW}, kind: HTTPRoute, name: route-1}}]
  default: {{retryOn: ["503"]}}
"""  # PA-S01: denied by the webhook itself
FAST = ["--reconcile-qps", "500", "--reconcile-burst", "500"]  # convergence not held by the limiter


# --- fixtures ------------------------------------------------------------------------------------


class Replicas:
    """The webhook processes of one test, on one Lease; all stopped by PID at the end."""

    def __init__(self, cluster: LocalCluster, workdir: Path, lease: str) -> None:
        self.cluster, self.workdir, self.lease = cluster, workdir, lease
        self.started: list[WebhookProcess] = []

    def new(self, name: str, *args: str) -> WebhookProcess:
        process = WebhookProcess(
            self.cluster,
            self.workdir,
            name=name,
            args=["--leader-election-name", self.lease, *args],
        )
        self.started.append(process)
        return process

    def start(self, name: str, *args: str) -> WebhookProcess:
        process = self.new(name, *args)
        process.start()
        return process

    def stop_all(self) -> None:
        for process in self.started:
            process.stop()
            print(f"\n[e2e] {process.name} log: {process.log_path}")


@pytest.fixture(scope="module")
def world(cluster: LocalCluster) -> Iterator[World]:
    """This module's world, with a policy at every rung (class, Gateway, Namespace, route, Service)."""
    install_policy_crds(cluster)
    apply(cluster, *WORLD.objects())
    apply(
        cluster,
        WORLD.class_limits(1000),
        WORLD.gateway_color("red"),
        WORLD.namespace_timeout("10s"),
        WORLD.route_retry(1, 3),
        WORLD.service_health(0, "/healthz"),
    )
    try:
        yield WORLD
    finally:
        restore_apiserver(cluster)
        WORLD.remove(cluster)


@pytest.fixture
def replicas(
    cluster: LocalCluster, world: World, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Replicas]:
    """A Lease named after the test, so no two tests (nor modules) share a leader."""
    words = request.node.originalname.removeprefix("test_").split("_")
    lease = "e2e-faults-" + "-".join(words[:6])
    started = Replicas(cluster, tmp_path, lease)
    try:
        yield started
    finally:
        started.stop_all()
        restore_apiserver(cluster)
        cluster.kubectl("delete", "lease", lease, "-n", "default", "--ignore-not-found")


def restore_apiserver(cluster: LocalCluster) -> None:
    """Start kube-apiserver again if a test stopped it (idempotent)."""
    if "kube-apiserver" not in cluster.pids:
        cluster.start_apiserver()


# --- helpers -------------------------------------------------------------------------------------


def log_lines(process: WebhookProcess, text: str) -> list[dict[str, Any]]:
    return [r for r in process.log_records() if text in str(r.get("msg", ""))]


def ready(process: WebhookProcess) -> bool:
    return bool(process.get("/readyz")[0] == 200)


def post_review(process: WebhookProcess, path: str, review: dict[str, Any]) -> tuple[int, Any]:
    """POST one AdmissionReview straight to the webhook, as the API server would."""
    context = ssl.create_default_context(cafile=str(process.ca_file))
    request = urllib.request.Request(
        process.url + path,
        data=json.dumps(review).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class FirstTime:
    """Polls `check` every 0.1 s from a thread while the block runs (and after, up to
    `timeout` s in all); `at` is the time.monotonic() at which it first held."""

    def __init__(self, check: Callable[[], bool], *, timeout: float) -> None:
        self.check, self.timeout = check, timeout
        self.at = math.inf
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> FirstTime:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._thread.join(self.timeout)
        assert self.at != math.inf, f"never true within {self.timeout}s"

    def _poll(self) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.check():
                self.at = time.monotonic()
                return
            time.sleep(0.1)


class ForeignWriter:
    """Merge-patches a foreign annotation onto objects as fast as the API server takes them,
    from a thread of its own, until stopped. Remembers the last value written to each.

    Several writers share a path, so their answers may be read in another order than the
    server committed them: the last write is the one whose answer carries the highest
    resourceVersion (etcd's revision on this API server; opaque to clients in general, but the
    suite's server is etcd-backed and nothing else is compared this way).
    """

    def __init__(self, cluster: LocalCluster, paths: list[str], *, per_object: int = 3) -> None:
        self.cluster, self.paths, self.per_object = cluster, paths, per_object
        self.writes = 0
        self._committed: dict[str, tuple[int, str]] = {}  # path → (resourceVersion, value)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def __enter__(self) -> ForeignWriter:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "the foreign writer did not stop"

    async def _run(self) -> None:
        api = await connect(str(self.cluster.kubeconfig))
        try:
            writers = [
                self._write(api, path) for path in self.paths for _ in range(self.per_object)
            ]
            await asyncio.gather(*writers)
        finally:
            await kubeapi.close(api)

    async def _write(self, api: Any, path: str) -> None:
        deadline = time.monotonic() + 300  # bounded, whatever happens to the test
        while not self._stop.is_set() and time.monotonic() < deadline:
            self.writes += 1
            value = str(self.writes)
            body = {"metadata": {"annotations": {FOREIGN: value}}}
            response = await api.call_api(
                path, "PATCH",
                header_params={"Content-Type": "application/merge-patch+json",
                               "Accept": "application/json"},
                body=body, auth_settings=["BearerToken"], _preload_content=False,
            )  # fmt: skip
            try:
                body = await response.read()
                assert response.status == 200, response.status
            finally:
                response.release()
            version = int(json.loads(body)["metadata"]["resourceVersion"])
            if version > self._committed.get(path, (0, ""))[0]:
                self._committed[path] = (version, value)

    @property
    def last(self) -> dict[str, str]:
        """The value of each path's last committed write."""
        return {path: value for path, (_, value) in self._committed.items()}


# --- the tests -----------------------------------------------------------------------------------


def test_a_replica_started_while_the_api_server_is_down_retries_and_turns_ready_once_it_appears(
    cluster: LocalCluster, world: World, replicas: Replicas
) -> None:
    a = replicas.new("start-a", *FAST)
    cluster.stop_apiserver()
    try:
        with pytest.raises(TimeoutError):
            a.start(timeout=8)  # serving, but never ready without the cluster's state
        assert a.get("/healthz") == (200, "ok"), "alive: liveness does not depend on the cluster"
        status, text = a.get("/readyz")
        assert status == 503 and "state-synced: waiting for the first list" in text, text
        retries = log_lines(a, "failed; retrying")
        assert len(retries) >= 2, a.log_tail()
        with FirstTime(lambda: ready(a), timeout=120) as became_ready:
            spawned = time.monotonic()
            apiserver_took = cluster.start_apiserver()
        took = became_ready.at - spawned
    finally:
        restore_apiserver(cluster)
    wait_until(lambda: leading(a), 20, "the replica leads once the API server is back")
    converge(cluster, world.watched)
    print(
        f"\n[e2e] API server down at start: {len(retries)} retries logged in 8 s; the API "
        f"server, started, said ready after {apiserver_took:.1f}s; the webhook {took:.1f}s "
        f"after the start ({took - apiserver_took:+.1f}s from ready); annotations converged "
        f"{time.monotonic() - spawned - took:.1f}s after the webhook was ready"
    )
    # Reconnects back off with full jitter capped at 30 s, then one list per kind.
    assert took - apiserver_took <= BACKOFF_CAP_S + 5


def test_after_an_api_server_restart_the_watches_resume_and_no_change_is_lost(
    cluster: LocalCluster, world: World, replicas: Replicas
) -> None:
    # A 60 s Lease: the leader keeps leading through the outage (renew deadline 40 s), so no
    # resync at a new term can hide a lost event: every change must come through the watches.
    a = replicas.start("restart-a", *FAST, "--lease-duration-seconds", "60")
    wait_until(lambda: leading(a), 20, "a lone replica leads")
    converge(cluster, world.watched)
    restarts_before = metric(a, "policy_webhook_watch_restarts_total")
    resyncs_before = len(log_lines(a, "reconciler resync"))

    # Changes just before the outage: their events may be cut off mid-delivery.
    apply(cluster, world.gateway_color("blue"), world.route_retry(2, 4))
    cluster.stop_apiserver()
    try:
        time.sleep(3)  # the watches break; the informers back off
        apiserver_took = cluster.start_apiserver()
        restarted = time.monotonic()
        # Changes right after, while the informers are still backing off: the watches must
        # resume from their resourceVersion (or relist) and bring them.
        apply(cluster, world.namespace_timeout("12s"), world.route(3, section="web"))
        delete(cluster, world.service_health(0, "/healthz"))
    finally:
        restore_apiserver(cluster)
    took = converge(cluster, world.watched, timeout=BACKOFF_CAP_S + 30)
    after_restart = time.monotonic() - restarted
    restarts = metric(a, "policy_webhook_watch_restarts_total") - restarts_before
    print(
        f"\n[e2e] API server restarted (down 3 s + {apiserver_took:.1f}s to ready): annotations "
        f"converged {after_restart:.1f}s after it was ready (last check {took:.1f}s); "
        f"{restarts:.0f} watch restarts; the replica kept leading: {leading(a)}"
    )
    assert restarts > 0, "the watches did break and reconnect"
    assert leading(a), "the Lease outlived the outage"
    assert len(log_lines(a, "reconciler resync")) == resyncs_before, "no resync helped"
    assert after_restart <= BACKOFF_CAP_S + 30


def test_a_replica_killed_in_the_middle_of_reconciling_is_replaced_and_the_new_leader_converges(
    cluster: LocalCluster, world: World, replicas: Replicas
) -> None:
    lease = ["--lease-duration-seconds", "5"]
    # The leader patches 3 objects a second, so a fan-out to every route is cut half-way.
    a = replicas.start("kill-a", "--reconcile-qps", "3", "--reconcile-burst", "1", *lease)
    wait_until(lambda: leading(a), 20, "the first replica leads")
    converge(cluster, world.watched, timeout=90)
    b = replicas.start("kill-b", *FAST, *lease)
    time.sleep(2)
    assert leading(a) and not leading(b)

    sent = patches(a)
    apply(cluster, world.gateway_color("green"))  # every route, Service and the Gateway
    wait_until(lambda: patches(a) - sent >= 10, 30, "the leader is reconciling")
    sent = patches(a) - sent
    a.stop(signal.SIGKILL)  # mid-way: no chance to release the Lease nor to finish
    killed = time.monotonic()
    stale = wrong(cluster, world.watched)
    handover = wait_until(lambda: leading(b), 20, "the other replica takes over")
    converge(cluster, world.watched)
    print(
        f"\n[e2e] leader SIGKILLed mid-reconcile ({sent} patches sent, {len(stale)} annotations "
        f"still stale): replica b leads after {handover:.1f}s (lease 5 s), converged "
        f"{time.monotonic() - killed:.1f}s after the kill; b sent {patches(b)} patches"
    )
    assert len(stale) >= 10, "killed half-way, with work left over"
    assert handover <= 5 + 5  # lease duration, plus two retry periods and a margin


def test_a_write_by_someone_else_does_not_block_our_next_patch_of_that_object(
    cluster: LocalCluster, world: World, replicas: Replicas
) -> None:
    """Someone else's annotation (or a controller's status write) changes only the object's
    resourceVersion as far as the store is concerned; our next patch must carry the new one."""
    a = replicas.start("foreign-a", *FAST)
    wait_until(lambda: leading(a), 20, "a lone replica leads")
    converge(cluster, world.watched)
    cluster.kubectl(
        "annotate", "--overwrite", "httproute", "route-0", "-n", world.apps, f"{FOREIGN}=kubectl"
    )
    time.sleep(1)  # its watch event has arrived: the store saw "nothing we read changed"
    path = f"/apis/{GW}/v1/namespaces/{world.apps}/httproutes/route-0"
    kubectl_took, took = wait_for_annotation(
        cluster, path, lambda v: v is not None and '"amber"' in v,
        change=lambda: apply(cluster, world.gateway_color("amber")), timeout=15,
    )  # fmt: skip
    converge(cluster, world.watched)
    print(
        f"\n[e2e] after someone else's write: our annotation followed the next policy change "
        f"{took * 1000:.0f} ms after kubectl started ({kubectl_took * 1000:.0f} ms of it kubectl)"
    )
    assert metric(a, "policy_webhook_reconcile_errors_total") == 0


def test_a_write_conflict_with_a_concurrent_writer_is_retried_until_the_annotation_is_right(
    cluster: LocalCluster, world: World, replicas: Replicas
) -> None:
    a = replicas.start("conflict-a", *FAST, "--log-level", "DEBUG")
    wait_until(lambda: leading(a), 20, "a lone replica leads")
    converge(cluster, world.watched)
    paths = [
        f"/apis/{GW}/v1/namespaces/{world.apps}/httproutes/route-{i}" for i in range(world.routes)
    ]
    rounds = 0
    with ForeignWriter(cluster, paths) as writer:
        # Each round changes what every route's annotation must say, while the routes change
        # under the reconciler's feet; stop at the first 409 (a handful of rounds suffice).
        while not log_lines(a, "conflict; retrying") and rounds < 10:
            rounds += 1
            apply(cluster, world.gateway_color(f"c{rounds}"))
            time.sleep(2)
        conflicts = len(log_lines(a, "conflict; retrying"))
    took = converge(cluster, world.watched)
    objects = {
        f"/apis/{GW}/v1/namespaces/{o['metadata']['namespace']}/httproutes/{o['metadata']['name']}": o
        for o in cluster.get_json("httproutes", "-n", world.apps)["items"]
    }
    foreign = {path: objects[path]["metadata"]["annotations"].get(FOREIGN) for path in paths}
    print(
        f"\n[e2e] write conflicts: {conflicts} real 409s in {rounds} rounds against "
        f"{writer.writes} foreign writes; converged {took:.1f}s after the writer stopped; "
        f"reconcile errors {metric(a, 'policy_webhook_reconcile_errors_total'):.0f}"
    )
    assert conflicts >= 1, "no 409 provoked; see tests/shell/cluster/test_reconciler_fake.py"
    assert foreign == writer.last, "their annotation is as they last wrote it"
    assert metric(a, "policy_webhook_reconcile_errors_total") == 0, "a 409 is not an error"


def test_a_corrupt_or_missing_certificate_file_is_logged_and_the_last_good_one_keeps_serving(
    cluster: LocalCluster, world: World, replicas: Replicas
) -> None:
    a = replicas.new("cert-a", "--no-reconcile", "--tls-poll-seconds", "0.5")
    files = self_signed(a.dir / "tls")  # ca.crt beside the pair: the harness trusts it
    a.args += ["--tls-cert-file", str(files.cert_file), "--tls-key-file", str(files.key_file)]
    a.start()

    with registered(cluster, a, suffix="faults-cert"):
        apply(cluster, world.route_retry(5, 1))  # through the webhook
        files.cert_file.write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n")
        wait_until(
            lambda: bool(log_lines(a, "new certificate pair rejected")),
            10,
            "the corrupt file is logged",
        )
        apply(cluster, world.route_retry(5, 2))
        denied = cluster.kubectl("apply", "-f", "-", input=BOTH_REF_FIELDS, check=False)

        files.cert_file.unlink()
        wait_until(lambda: bool(log_lines(a, "cannot stat")), 10, "the missing file is logged")
        apply(cluster, world.route_retry(5, 3))
        status, text = a.get("/readyz")
    errors = metric(a, "policy_webhook_tls_reloads_total", result="error")
    (rejected,) = log_lines(a, "new certificate pair rejected")
    print(
        f"\n[e2e] corrupt, then missing certificate file: kubectl apply through the webhook "
        f"kept working; {errors:.0f} reload errors counted; logged: {rejected['msg'][:90]}…"
    )
    assert rejected["level"] == "ERROR" and rejected["cert_file"] == str(files.cert_file)
    assert denied.returncode == 1 and "[PA-S01]" in denied.stderr, "the webhook itself answered"
    assert errors == 2
    assert status == 200, f"still ready: the old pair is served ({text})"
    spec = cluster.get_json("retrypolicy", "route-5-retry", "-n", world.apps)["spec"]
    assert spec["default"] == {"maxRetries": 3}
    delete(cluster, world.route_retry(5, 3))


def test_state_older_than_the_limit_turns_the_replica_unready_while_admission_keeps_answering(
    cluster: LocalCluster, world: World, replicas: Replicas
) -> None:
    limit = 10.0
    a = replicas.start("stale-a", "--no-reconcile", "--max-state-age-seconds", f"{limit:g}")

    # Healthy and quiet: watches open, no events. Quiet is not stale.
    deadline = time.monotonic() + limit + 2 * EXPORT_S
    while time.monotonic() < deadline:
        status, text = a.get("/readyz")
        assert status == 200, f"a healthy quiet replica turned unready: {text}"
        time.sleep(0.5)
    quiet_age = metric(a, "policy_webhook_state_age_seconds")

    cluster.stop_apiserver()
    try:
        stopped = time.monotonic()
        unready = wait_until(lambda: not ready(a), limit + EXPORT_S + 5, "unready past the limit")
        _, reason = a.get("/readyz")
        age = metric(a, "policy_webhook_state_age_seconds")
        # Admission still answers, from the last state it knew.
        review = admission_review(world.route_retry(7, 1), "retrypolicies")
        status, answer = post_review(a, "/validate", review)
        cluster.start_apiserver()
        outage = time.monotonic() - stopped
        again = wait_until(lambda: ready(a), BACKOFF_CAP_S + EXPORT_S + 5, "ready again")
    finally:
        restore_apiserver(cluster)
    print(
        f"\n[e2e] stale state (limit {limit:g}s): age {quiet_age:.1f}s while quiet; unready "
        f"{unready:.1f}s after the API server stopped ('{reason.strip()}'; age metric "
        f"{age:.1f}s); /validate still answered {status}; after a {outage:.0f}s outage, "
        f"ready again {again:.1f}s after the API server"
    )
    assert quiet_age < limit
    assert "state-fresh: no watch has shown life" in reason
    assert age >= limit
    assert unready <= limit + EXPORT_S + 2
    assert status == 200 and answer["response"]["uid"] == review["request"]["uid"]
    assert answer["response"]["allowed"] is True
