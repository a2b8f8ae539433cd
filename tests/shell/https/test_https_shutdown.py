"""Graceful shutdown: SIGTERM → /readyz 503 → stop accepting → in-flight reviews finish → exit.

These tests run the server and its clients on one event loop in the main thread (`asyncio.run`),
so a real SIGTERM reaches the handler `serve` installs, as it does in a pod.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trustme

from tests.fixtures.https import policy, review_of, write_pair
from webhook.core.model.settings import Settings
from webhook.core.state.store import ClusterView, Store
from webhook.shell.https import endpoints, server
from webhook.shell.https.tls import ReloadingTLS
from webhook.shell.process.metrics import Metrics
from webhook.shell.process.readiness import Readiness

POLICY = """
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: r-retry, namespace: apps}
spec:
  targetRefs:
  - {group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}
  default: {maxRetries: 3}
"""

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def connect(port: int, context: ssl.SSLContext) -> Streams:
    return await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
    )


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    status = int((await reader.readline()).split()[1])
    headers = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, await reader.readexactly(int(headers.get("content-length", "0")))


async def get(port: int, context: ssl.SSLContext, path: str) -> tuple[int, bytes]:
    reader, writer = await connect(port, context)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    try:
        return await read_response(reader)
    finally:
        writer.close()


async def start_review(port: int, context: ssl.SSLContext, body: bytes, *, send: int) -> Streams:
    """A POST /validate whose body is only partly sent: a request in flight."""
    reader, writer = await connect(port, context)
    head = (
        "POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    writer.write(head + body[:send])
    await writer.drain()
    return reader, writer


async def refused(port: int) -> bool:
    """Whether the listener is gone. A connect that lands in its backlog just as it closes is
    reset instead of refused (seen in a CI run): that too says the listener closed."""
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except (ConnectionRefusedError, ConnectionResetError):
        return True
    writer.close()
    return False


async def eventually(check: Callable[[], Awaitable[bool]], *, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


class Harness:
    def __init__(self, cluster: ClusterView, cert_files: tuple[Path, Path]) -> None:
        self.readiness = Readiness("tls", "not-draining")
        self.app = endpoints.build_app(
            view=cluster, settings=Settings(), readiness=self.readiness, metrics=Metrics()
        )
        self.tls = ReloadingTLS(*cert_files, poll_interval=0)
        self.stop = asyncio.Event()
        self.port = 0

    async def start(self, **options: float) -> asyncio.Task[None]:
        started = asyncio.Event()

        def on_started(running: server.HttpsServer) -> None:
            self.port = running.port
            started.set()

        task = asyncio.create_task(
            server.run_until_stopped(
                self.app,
                tls=self.tls,
                readiness=self.readiness,
                host="127.0.0.1",
                port=0,
                stop=self.stop,
                on_started=on_started,
                **options,
            )
        )
        await asyncio.wait_for(started.wait(), 10)
        return task


@pytest.fixture
def cert_files(tmp_path: Path, serving_cert: trustme.LeafCert) -> tuple[Path, Path]:
    return write_pair(serving_cert, tmp_path)


def test_sigterm_drains_in_flight_reviews_while_readyz_fails(
    cluster: Store, cert_files: tuple[Path, Path], client_context: ssl.SSLContext
) -> None:
    async def scenario() -> None:
        hook = Harness(cluster, cert_files)
        serving = await hook.start(drain_timeout=10, shutdown_delay=1.5)
        port = hook.port
        assert await get(port, client_context, "/readyz") == (200, b"ok")

        reviews = [review_of(policy(POLICY), uid=f"in-flight-{i}") for i in range(5)]
        bodies = [json.dumps(review).encode() for review in reviews]
        in_flight = [
            await start_review(port, client_context, body, send=len(body) // 2) for body in bodies
        ]
        await asyncio.sleep(0.2)  # the server has read their headers and is waiting for the rest

        os.kill(os.getpid(), signal.SIGTERM)

        # 1. Not ready at once, with the reason — while calls routed before that still succeed.
        status, text = await get(port, client_context, "/readyz")
        assert status == 503
        assert b"not-draining: shutting down" in text
        late = json.dumps(review_of(policy(POLICY), uid="late")).encode()
        reader, writer = await start_review(port, client_context, late, send=len(late))
        assert (await read_response(reader))[0] == 200
        writer.close()

        # 2. Then the listener closes, and the server still waits for the requests in flight.
        await eventually(lambda: refused(port))
        assert not serving.done()

        # 3. They complete, each with its own answer.
        for (_, writer), body in zip(in_flight, bodies, strict=True):
            writer.write(body[len(body) // 2 :])
            await writer.drain()
        for (reader, writer), review in zip(in_flight, reviews, strict=True):
            status, answer = await read_response(reader)
            assert status == 200
            response = json.loads(answer)["response"]
            assert (response["uid"], response["allowed"]) == (review["request"]["uid"], True)
            writer.close()

        # 4. And the server exits.
        await asyncio.wait_for(serving, 10)
        assert not hook.readiness()

    asyncio.run(scenario())
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # our handler is gone again


def test_the_drain_is_bounded_by_its_timeout(
    cluster: Store, cert_files: tuple[Path, Path], client_context: ssl.SSLContext
) -> None:
    async def scenario() -> float:
        hook = Harness(cluster, cert_files)
        serving = await hook.start(drain_timeout=0.5)
        body = json.dumps(review_of(policy(POLICY))).encode()
        reader, writer = await start_review(
            hook.port, client_context, body, send=10
        )  # never finished
        await asyncio.sleep(0.1)
        began = time.monotonic()
        hook.stop.set()
        await asyncio.wait_for(serving, 10)
        took = time.monotonic() - began
        assert await reader.read() == b""  # the stuck request was cut, not answered
        writer.close()
        return took

    took = asyncio.run(scenario())
    assert 0.4 < took < 3.0


def test_idle_keep_alive_connections_do_not_hold_the_shutdown(
    cluster: Store, cert_files: tuple[Path, Path], client_context: ssl.SSLContext
) -> None:
    async def scenario() -> float:
        hook = Harness(cluster, cert_files)
        serving = await hook.start(drain_timeout=10)
        reader, writer = await connect(hook.port, client_context)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # keep-alive by default
        assert await read_response(reader) == (200, b"ok")
        began = time.monotonic()
        hook.stop.set()
        await asyncio.wait_for(serving, 10)
        writer.close()
        return time.monotonic() - began

    assert asyncio.run(scenario()) < 2.0
