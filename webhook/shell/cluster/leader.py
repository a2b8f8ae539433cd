"""Leader election on a `coordination.k8s.io/v1` Lease: one replica reconciles at a time.

Every replica serves admission; only the Lease holder patches annotations (SPEC §3.2). The
protocol and defaults are client-go's `leaderelection` (lease 15 s, renew deadline 10 s, retry
2 s), plus a release on graceful stop so that another replica takes over at once.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import math
import os
import random
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes_asyncio import client

from webhook.core.model import meta
from webhook.shell.cluster import kubeapi
from webhook.shell.process.logs import fields
from webhook.shell.process.metrics import Metrics

logger = logging.getLogger(__name__)

JITTER = 1.2  # client-go's JitterFactor: retries are spread over [1, 1.2) times retry_period
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

Callback = Callable[[], None]


def default_identity() -> str:
    """POD_NAME (downward API) if set, else hostname_pid: unique among replicas."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{os.getpid()}"


def micro_time(moment: datetime.datetime) -> str:
    """A `MicroTime` as the API server writes it: RFC 3339, exactly six fractional digits."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: object) -> datetime.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


class LeaderElector:
    """Campaigns for one Lease until stopped; `leading` is set while this replica holds it.

    `on_started_leading` / `on_stopped_leading` are called on each transition, from the event
    loop; they must not block (start a task for long work). After losing the Lease the elector
    campaigns again, because the replica keeps serving admission either way.
    """

    def __init__(
        self,
        api: client.ApiClient,
        *,
        namespace: str,
        name: str,
        identity: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        request_timeout: float = 10.0,
        metrics: Metrics | None = None,
        on_started_leading: Callback | None = None,
        on_stopped_leading: Callback | None = None,
    ) -> None:
        # client-go's checks: the holder gives up (renew deadline) before others may take
        # over (lease duration), and it gets more than one retry in before giving up.
        if not lease_duration > renew_deadline > JITTER * retry_period > 0:
            raise ValueError(
                "need lease_duration > renew_deadline > 1.2 * retry_period > 0, got "
                f"{lease_duration}, {renew_deadline}, {retry_period}"
            )
        self.api = api
        self.namespace, self.name = namespace, name
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.request_timeout = request_timeout
        self.metrics = metrics
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.leading = asyncio.Event()
        self.holder: str = ""  # the holder seen at the last read of the Lease
        self._observed_version: str | None = None
        self._observed_change: float | None = None  # monotonic time the Lease last changed
        self._task: asyncio.Task[None] | None = None
        if metrics is not None:
            metrics.leader.set(0)

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    @property
    def _path(self) -> str:
        return f"{LEASES.format(namespace=self.namespace)}/{self.name}"

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._campaign(), name=f"lease {self.name}")

    async def wait_leading(self, timeout: float | None = None) -> bool:
        try:
            async with asyncio.timeout(timeout):
                await self.leading.wait()
        except TimeoutError:
            return False
        return True

    async def stop(self, *, release: bool = True) -> None:
        """Stop campaigning; if leading, step down and (by default) release the Lease."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        # Also when our last read showed us as holder while not leading (e.g. a restarted pod
        # with the same identity): the Lease is ours to release either way.
        holds = self.is_leader or self.holder == self.identity
        self._step_down()  # first stop acting as leader, then let others in
        if release and holds:
            try:
                async with asyncio.timeout(self.request_timeout):
                    await self._release()
            except Exception as exc:  # the Lease then simply expires
                logger.warning("could not release the Lease", extra=fields(error=repr(exc)))

    async def __aenter__(self) -> LeaderElector:
        self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # --- the campaign ------------------------------------------------------------------------

    async def _campaign(self) -> None:
        while True:
            while not await self._attempt(self.renew_deadline):
                await asyncio.sleep(self.retry_period * random.uniform(1, JITTER))
            self._step_up()
            await self._hold()
            self._step_down()

    async def _hold(self) -> None:
        """Renew every retry period; return once the Lease is lost or could not be renewed."""
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(self.retry_period)
            left = self.renew_deadline - (time.monotonic() - renewed)
            if await self._attempt(max(left, 0.001)):
                renewed = time.monotonic()
            elif self.holder not in ("", self.identity):
                logger.warning("the Lease was taken over", extra=fields(holder=self.holder))
                return
            elif time.monotonic() - renewed >= self.renew_deadline:
                logger.warning("could not renew the Lease within the renew deadline")
                return

    async def _attempt(self, deadline: float) -> bool:
        """One try to acquire or renew, never longer than `deadline` seconds; errors → False."""
        try:
            async with asyncio.timeout(deadline):
                return await self._acquire_or_renew()
        except Exception as exc:  # the API server is away or slow: try again later
            logger.debug("Lease attempt failed", extra=fields(error=repr(exc)))
            return False

    async def _acquire_or_renew(self) -> bool:
        now = datetime.datetime.now(datetime.UTC)
        try:
            lease = await self._request("GET", self._path)
        except kubeapi.ApiError as exc:
            if exc.status != 404:
                raise
            return await self._create(now)
        spec = dict(lease.get("spec") or {})
        self.holder = str(spec.get("holderIdentity") or "")
        self._observe(lease)
        if self.holder not in ("", self.identity) and not self._expired(spec, now):
            return False
        if self.holder != self.identity:
            spec["acquireTime"] = micro_time(now)
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec["holderIdentity"] = self.identity
        spec["leaseDurationSeconds"] = math.ceil(self.lease_duration)
        spec["renewTime"] = micro_time(now)
        lease["spec"] = spec  # metadata.resourceVersion stays: a PUT over a newer one is a 409
        return await self._write("PUT", self._path, lease)

    async def _create(self, now: datetime.datetime) -> bool:
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": math.ceil(self.lease_duration),
                "acquireTime": micro_time(now),
                "renewTime": micro_time(now),
                "leaseTransitions": 0,
            },
        }
        return await self._write("POST", LEASES.format(namespace=self.namespace), lease)

    async def _write(self, method: str, path: str, lease: Mapping[str, Any]) -> bool:
        """PUT or POST; False when another replica wrote first (409 Conflict: read again)."""
        try:
            written = await self._request(method, path, lease)
        except kubeapi.ApiError as exc:
            if exc.status == 409:
                return False
            raise
        self.holder = self.identity
        self._observed_version = _version_of(written)  # our own write is no sign of others
        return True

    async def _release(self) -> None:
        lease = await self._request("GET", self._path)
        spec = dict(lease.get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            return
        now = micro_time(datetime.datetime.now(datetime.UTC))
        # As client-go's ReleaseOnCancel: no holder, a 1 s lease, so nobody waits for expiry.
        spec.pop("holderIdentity", None)
        spec.update(leaseDurationSeconds=1, renewTime=now, acquireTime=now)
        lease["spec"] = spec
        await self._request("PUT", self._path, lease)
        logger.info("released the Lease", extra=fields(lease=self.name, identity=self.identity))

    def _observe(self, lease: Mapping[str, Any]) -> None:
        version = _version_of(lease)
        if version != self._observed_version:
            if self._observed_version is not None:
                self._observed_change = time.monotonic()
            self._observed_version = version

    def _expired(self, spec: Mapping[str, Any], now: datetime.datetime) -> bool:
        """renewTime + leaseDurationSeconds < now — unless we saw it renewed more recently.

        The wall-clock test lets a new replica take over a dead holder's Lease at once; the
        local one (client-go's only test) keeps a live holder whose clock runs behind ours.
        """
        renew = parse_time(spec.get("renewTime"))
        duration = spec.get("leaseDurationSeconds")
        if renew is None or not isinstance(duration, int):
            return True
        if renew + datetime.timedelta(seconds=duration) >= now:
            return False
        seen = self._observed_change
        return seen is None or time.monotonic() - seen >= duration

    async def _request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        return await kubeapi.request_json(
            self.api, method, path, body=body, timeout=self.request_timeout
        )

    # --- transitions -------------------------------------------------------------------------

    def _step_up(self) -> None:
        self.leading.set()
        if self.metrics is not None:
            self.metrics.leader.set(1)
        logger.info("became leader", extra=fields(lease=self.name, identity=self.identity))
        _call(self.on_started_leading)

    def _step_down(self) -> None:
        if not self.leading.is_set():
            return
        self.leading.clear()
        if self.metrics is not None:
            self.metrics.leader.set(0)
        logger.info("stopped leading", extra=fields(lease=self.name, identity=self.identity))
        _call(self.on_stopped_leading)


def _version_of(obj: Mapping[str, Any]) -> str | None:
    return meta.resource_version(obj)


def _call(callback: Callback | None) -> None:
    if callback is None:
        return
    try:
        callback()
    except Exception:
        logger.exception("leader election callback failed")
