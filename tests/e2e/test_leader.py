"""Leader election on a real Lease: exactly one leader, fast hand-over on a graceful stop,
takeover only after expiry when a leader dies, and stepping down when the API server is away.

Timings are shortened (lease 3 s, renew deadline 2 s, retry 0.5 s) to keep the suite quick;
the protocol is the same as with the client-go defaults (15 s, 10 s, 2 s).
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from webhook.shell.cluster import kubeapi
from webhook.shell.cluster.kubeapi import connect
from webhook.shell.cluster.leader import LeaderElector, micro_time
from webhook.shell.process.metrics import Metrics

if TYPE_CHECKING:
    from cluster import LocalCluster
    from kubernetes_asyncio import client

LEASE = 3.0
RENEW = 2.0
RETRY = 0.5
NAMESPACE = "default"


class Recorder:
    """Counts the callbacks of one elector."""

    def __init__(self) -> None:
        self.started = 0
        self.stopped = 0

    def on_started(self) -> None:
        self.started += 1

    def on_stopped(self) -> None:
        self.stopped += 1


def elector(
    api: client.ApiClient, lease: str, identity: str, **extra: Any
) -> tuple[LeaderElector, Recorder]:
    recorder = Recorder()
    made = LeaderElector(
        api, namespace=NAMESPACE, name=lease, identity=identity,
        lease_duration=LEASE, renew_deadline=RENEW, retry_period=RETRY, metrics=Metrics(),
        on_started_leading=recorder.on_started, on_stopped_leading=recorder.on_stopped,
        **extra,
    )  # fmt: skip
    return made, recorder


def leader_gauge(e: LeaderElector) -> float | None:
    assert e.metrics is not None
    value: float | None = e.metrics.registry.get_sample_value("policy_webhook_leader")
    return value


@asynccontextmanager
async def api_for(cluster: LocalCluster) -> AsyncIterator[client.ApiClient]:
    api = await connect(str(cluster.kubeconfig))
    try:
        yield api
    finally:
        await kubeapi.close(api)


async def eventually(check: Callable[[], object], timeout: float) -> float:
    started = time.monotonic()
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)
    return time.monotonic() - started


def lease_spec(cluster: LocalCluster, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = cluster.get_json("lease", name, "-n", NAMESPACE)["spec"]
    return spec


def test_exactly_one_of_two_leads_and_a_graceful_stop_hands_over_at_once(
    cluster: LocalCluster,
) -> None:
    async def scenario() -> None:
        async with api_for(cluster) as api:
            (a, a_calls), (b, b_calls) = (
                elector(api, "e2e-handover", "a"),
                elector(api, "e2e-handover", "b"),
            )
            a.start()
            b.start()
            try:
                await eventually(lambda: a.is_leader or b.is_leader, LEASE)
                first = a if a.is_leader else b
                # Several renew periods: never two leaders, never a change of leader.
                deadline = time.monotonic() + 3 * RETRY * 2
                while time.monotonic() < deadline:
                    assert [e.is_leader for e in (a, b)].count(True) == 1
                    assert first.is_leader
                    await asyncio.sleep(0.02)
                other = b if first is a else a
                calls = {a: a_calls, b: b_calls}
                spec = await asyncio.to_thread(lease_spec, cluster, "e2e-handover")
                assert spec["holderIdentity"] == first.identity
                assert spec["leaseDurationSeconds"] == LEASE
                assert (leader_gauge(first), leader_gauge(other)) == (1.0, 0.0)

                started = time.monotonic()
                await first.stop()
                assert not first.is_leader
                await eventually(lambda: other.is_leader, LEASE)
                took = time.monotonic() - started
                print(f"\n[e2e] graceful hand-over took {took:.2f}s (lease {LEASE}s)")
                assert took < LEASE
                assert (leader_gauge(first), leader_gauge(other)) == (0.0, 1.0)
                assert (calls[first].started, calls[first].stopped) == (1, 1)
                assert (calls[other].started, calls[other].stopped) == (1, 0)
                spec = await asyncio.to_thread(lease_spec, cluster, "e2e-handover")
                assert spec["holderIdentity"] == other.identity
                assert spec["leaseTransitions"] >= 1
            finally:
                await a.stop()
                await b.stop()

    asyncio.run(scenario())


def test_a_released_lease_has_no_holder(cluster: LocalCluster) -> None:
    async def scenario() -> None:
        async with api_for(cluster) as api:
            only, _ = elector(api, "e2e-release", "only")
            only.start()
            assert await only.wait_leading(LEASE)
            await only.stop()
        spec = await asyncio.to_thread(lease_spec, cluster, "e2e-release")
        assert "holderIdentity" not in spec
        assert spec["leaseDurationSeconds"] == 1

    asyncio.run(scenario())


def test_a_leader_that_dies_is_replaced_only_once_its_lease_expires(cluster: LocalCluster) -> None:
    async def scenario() -> None:
        async with api_for(cluster) as api:
            (a, _), (b, _) = elector(api, "e2e-crash", "a"), elector(api, "e2e-crash", "b")
            a.start()
            assert await a.wait_leading(LEASE)
            b.start()
            await asyncio.sleep(2 * RETRY)  # b has seen a renew
            assert not b.is_leader
            started = time.monotonic()
            await a.stop(release=False)  # as if the pod died: no release, no more renewals
            try:
                took = await eventually(lambda: b.is_leader, 2 * LEASE)
            finally:
                await b.stop()
            print(f"\n[e2e] takeover after a dead leader took {took:.2f}s (lease {LEASE}s)")
            assert LEASE - 2 * RETRY <= took <= LEASE + 2 * RETRY
            assert time.monotonic() - started < 2 * LEASE

    asyncio.run(scenario())


def test_a_stale_lease_is_taken_at_once_but_a_fresh_one_is_respected(
    cluster: LocalCluster,
) -> None:
    now = datetime.datetime.now(datetime.UTC)

    def lease(name: str, renewed: datetime.datetime) -> str:
        return f"""
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {{name: {name}, namespace: {NAMESPACE}}}
spec:
  holderIdentity: ghost
  leaseDurationSeconds: 15
  acquireTime: "{micro_time(renewed)}"
  renewTime: "{micro_time(renewed)}"
  leaseTransitions: 4
"""

    cluster.apply(lease("e2e-stale", now - datetime.timedelta(hours=1)))
    cluster.apply(lease("e2e-fresh", now))

    async def scenario() -> None:
        async with api_for(cluster) as api:
            (stale, _), (fresh, _) = (
                elector(api, "e2e-stale", "new"),
                elector(api, "e2e-fresh", "new"),
            )
            stale.start()
            fresh.start()
            try:
                assert await stale.wait_leading(2.0)
                assert not await fresh.wait_leading(3 * RETRY * 2)
                assert fresh.holder == "ghost"
            finally:
                await stale.stop(release=False)
                await fresh.stop()
        spec = await asyncio.to_thread(lease_spec, cluster, "e2e-stale")
        assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("new", 5)

    asyncio.run(scenario())


def test_the_leader_steps_down_while_the_api_server_is_away_and_leads_again_after(
    cluster: LocalCluster,
) -> None:
    async def scenario() -> None:
        async with api_for(cluster) as api:
            only, calls = elector(api, "e2e-outage", "only", request_timeout=1.0)
            only.start()
            try:
                assert await only.wait_leading(LEASE)
                restart = asyncio.create_task(asyncio.to_thread(cluster.restart_apiserver))
                # The restart takes longer than the renew deadline: the leader must step down.
                await eventually(lambda: not only.is_leader, 30)
                assert calls.stopped == 1
                await restart
                await eventually(lambda: only.is_leader, 30)
                assert calls.started == 2
            finally:
                await only.stop()

    asyncio.run(scenario())
