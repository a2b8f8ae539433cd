"""The HTTPS server around the endpoints: TLS that follows rotated certificates, idle and
slow connections closed, and a graceful drain on SIGTERM (`run_until_stopped`). What each
endpoint answers is `endpoints`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from webhook.shell.https.tls import ReloadingTLS
from webhook.shell.process import readiness as ready
from webhook.shell.process.logs import fields
from webhook.shell.process.readiness import Readiness

logger = logging.getLogger(__name__)

# A connection that has not sent a complete request for this long is closed: an idle keep-alive
# connection, or one that finished TLS and then sent nothing or half the headers (aiohttp has one
# timer for all three; its default is an hour). Longer than the API server's own idle-connection
# timeout (90 s, Go's `http.Transport` default), so that it is the client that closes an idle
# connection — never we, just as it sends a request on it, which would fail that call.
# The TLS handshake itself is bounded by asyncio: 60 s (`ssl_handshake_timeout`).
IDLE_TIMEOUT = 100.0  # seconds
DEFAULT_DRAIN_TIMEOUT = 15.0  # seconds; well inside the pod's default 30 s grace period
_CANCEL_GRACE = 0.5  # seconds for aiohttp to cancel what outlived the drain


# --- serving -----------------------------------------------------------------------------------


class HttpsServer:
    """One HTTPS listener for the app: `start()`, then `shutdown()` drains and stops it.

    Shutdown order, so that no admission call is dropped: `/readyz` turns 503 (the endpoints
    controller removes the pod), wait `shutdown_delay` while calls routed before that still
    arrive, stop accepting, let in-flight requests finish for up to `drain_timeout`, then close.

    The drain is ours, not aiohttp's: `AppRunner.cleanup()` stops reading from every connection
    at once, so a request whose body is still arriving — for a handler that only awaits its body,
    that is what "in flight" means — would be cut. We count requests in a middleware, stop the
    listener, wait for the count to reach zero, and only then let aiohttp close what is idle.
    """

    def __init__(
        self,
        app: web.Application,
        *,
        tls: ReloadingTLS | None,
        readiness: Readiness,
        host: str = "0.0.0.0",
        port: int = 8443,
        drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
        shutdown_delay: float = 0.0,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        self._tls = tls
        self._readiness = readiness
        self._host = host
        self._requested_port = port
        self._drain_timeout = drain_timeout
        self._shutdown_delay = shutdown_delay
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._draining = False
        app.middlewares.append(self._track)
        # access_log=None: every admission call gets its own decision line; probes need none.
        # shutdown_timeout: what is still running after our drain is stuck; cancel it soon.
        self._runner = web.AppRunner(
            app,
            access_log=None,
            shutdown_timeout=_CANCEL_GRACE,
            keepalive_timeout=idle_timeout,
        )
        self._watch: asyncio.Task[None] | None = None
        self._serving = False

    @property
    def port(self) -> int:
        """The bound port (useful with `port=0`)."""
        addresses = self._runner.addresses
        return int(addresses[0][1]) if addresses else self._requested_port

    async def start(self) -> None:
        await self._runner.setup()
        context = self._tls.context if self._tls is not None else None
        site = web.TCPSite(self._runner, self._host, self._requested_port, ssl_context=context)
        await site.start()
        if self._tls is not None and self._tls.poll_interval > 0:
            self._watch = asyncio.create_task(self._tls.watch(), name="tls-reload")
        self._serving = True
        if self._tls is None:
            # Development only (`--insecure-dev-plaintext`): the API server never calls a
            # webhook over plain HTTP, so this serves curl and local tools, nothing else.
            self._readiness.set(ready.TLS, True, "PLAINTEXT (development only)")
            logger.warning("serving PLAIN HTTP without TLS: for local development only")
        else:
            self._readiness.set(ready.TLS, True, "serving certificate loaded")
        self._readiness.set(ready.NOT_DRAINING, True, "serving")
        scheme = "https" if self._tls is not None else "http"
        logger.info("listening", extra=fields(host=self._host, port=self.port, scheme=scheme))

    async def shutdown(self) -> None:
        self._readiness.set(ready.NOT_DRAINING, False, "shutting down")
        if not self._serving:  # start() failed half-way: nothing to drain
            await self._runner.cleanup()
            return
        self._serving = False
        logger.info(
            "shutting down: not ready",
            extra=fields(
                shutdown_delay_s=self._shutdown_delay, drain_timeout_s=self._drain_timeout
            ),
        )
        if self._shutdown_delay > 0:
            await asyncio.sleep(self._shutdown_delay)
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        started = time.perf_counter()
        self._draining = True  # from now on every response closes its connection
        for site in list(self._runner.sites):
            await site.stop()  # stop accepting; open connections keep being read
        logger.info("stopped accepting, draining", extra=fields(in_flight=self._in_flight))
        try:
            await asyncio.wait_for(self._idle.wait(), self._drain_timeout)
        except TimeoutError:
            logger.warning(
                "drain timeout: cancelling requests still in flight",
                extra=fields(in_flight=self._in_flight, drain_timeout_s=self._drain_timeout),
            )
        await self._runner.cleanup()  # closes idle keep-alive connections, cancels leftovers
        logger.info(
            "stopped", extra=fields(drain_ms=round((time.perf_counter() - started) * 1000, 3))
        )

    @web.middleware
    async def _track(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        self._in_flight += 1
        self._idle.clear()
        try:
            response = await handler(request)
            if self._draining:
                # Keep-alive connections (the API server keeps them) end with this response.
                response.force_close()
            return response
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()


async def run_until_stopped(
    app: web.Application,
    *,
    tls: ReloadingTLS | None,
    readiness: Readiness,
    host: str = "0.0.0.0",
    port: int = 8443,
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
    shutdown_delay: float = 0.0,
    idle_timeout: float = IDLE_TIMEOUT,
    stop: asyncio.Event | None = None,
    on_started: Callable[[HttpsServer], None] | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT (or until `stop` is set), then shut down gracefully."""
    stop = stop if stop is not None else asyncio.Event()
    server = HttpsServer(
        app,
        tls=tls,
        readiness=readiness,
        host=host,
        port=port,
        drain_timeout=drain_timeout,
        shutdown_delay=shutdown_delay,
        idle_timeout=idle_timeout,
    )
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(signum, stop.set)
            installed.append(signum)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread (tests), or no signals here: `stop` is the only way out
    try:
        await server.start()
        if on_started is not None:
            on_started(server)
        await stop.wait()
    finally:
        # A second signal during the drain gets the default action: stop now.
        for signum in installed:
            loop.remove_signal_handler(signum)
        await server.shutdown()
