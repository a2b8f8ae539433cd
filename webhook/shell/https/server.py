"""The HTTPS admission server: read, decode, call the core, encode. No admission logic here.

Two error channels, as in every admission webhook:
- a broken *webhook call* is an HTTP error, so the API server's `failurePolicy` decides what
  happens to the user's request: a body that is not an AdmissionReview v1 → 400, a body over
  7 MiB → 413, a body still arriving after BODY_TIMEOUT → 408, an exception in the core (our
  bug, logged with the request uid) → 500;
- a broken *user request* — a policy that breaks the rules, even one the rules cannot read — is
  HTTP 200 with `response.allowed: false` and `response.status` (422 Invalid), which `kubectl`
  prints to the user like its own validation errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from webhook.core.admission import mutation, reviews
from webhook.core.admission import validation as admission
from webhook.core.model.settings import Settings
from webhook.core.state.store import ClusterView
from webhook.shell.https.tls import ReloadingTLS
from webhook.shell.process import heap
from webhook.shell.process import readiness as ready
from webhook.shell.process.logs import fields
from webhook.shell.process.metrics import Metrics
from webhook.shell.process.readiness import Readiness

logger = logging.getLogger(__name__)

# etcd refuses objects over 1.5 MB (its default request limit); an UPDATE review carries the
# object and the oldObject, plus the envelope — so no honest review is bigger than 7 MiB.
# controller-runtime caps its webhook bodies at the same size for the same reason.
MAX_BODY_BYTES = 7 * 1024 * 1024
# The API server gives up on a webhook call after the webhook's `timeoutSeconds` (at most 30 s;
# we ship 5 s) and sends headers and body at once, so a body still arriving after this long is
# not from a live API server: answer 408 and close, rather than hold the connection forever.
# (aiohttp then reads on for at most 10 s, its "lingering close", so that a client still
# writing can read the 408; the connection is gone 20 s after its headers at the latest.)
BODY_TIMEOUT = 10.0  # seconds
# A connection that has not sent a complete request for this long is closed: an idle keep-alive
# connection, or one that finished TLS and then sent nothing or half the headers (aiohttp has one
# timer for all three; its default is an hour). Longer than the API server's own idle-connection
# timeout (90 s, Go's `http.Transport` default), so that it is the client that closes an idle
# connection — never we, just as it sends a request on it, which would fail that call.
# The TLS handshake itself is bounded by asyncio: 60 s (`ssl_handshake_timeout`).
IDLE_TIMEOUT = 100.0  # seconds
DEFAULT_DRAIN_TIMEOUT = 15.0  # seconds; well inside the pod's default 30 s grace period
_CANCEL_GRACE = 0.5  # seconds for aiohttp to cancel what outlived the drain


# --- the app ---------------------------------------------------------------------------------


def build_app(
    *,
    view: ClusterView,
    settings: Settings,
    readiness: Readiness,
    metrics: Metrics,
    log_bodies: bool = False,
    body_timeout: float = BODY_TIMEOUT,
) -> web.Application:
    """The webhook's routes; `serve`/`HttpsServer` put it behind TLS."""
    handlers = _Handlers(
        view=view,
        settings=settings,
        readiness=readiness,
        metrics=metrics,
        log_bodies=log_bodies,
        body_timeout=body_timeout,
    )
    # A chunked body has no length to check up front: `request.read()` stops it at this size.
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post("/validate", handlers.validate)
    app.router.add_post("/mutate", handlers.mutate)
    app.router.add_get("/healthz", handlers.healthz)
    app.router.add_get("/readyz", handlers.readyz)
    app.router.add_get("/metrics", handlers.metrics)
    return app


@dataclass(frozen=True, slots=True)
class _Outcome:
    response: reviews.Response
    verdict: str  # allowed | denied | patched
    rule_ids: Sequence[str] = ()
    findings: Sequence[tuple[str, str]] = ()  # (rule ID, action), for metrics


class _BodyTooLarge(Exception):
    pass


class _BodyTooSlow(Exception):
    pass


class _Handlers:
    """The route handlers. The core runs synchronously, on the event loop: it is fast and pure,
    and the informers write the store on this same loop, so a review sees one consistent state."""

    def __init__(
        self,
        *,
        view: ClusterView,
        settings: Settings,
        readiness: Readiness,
        metrics: Metrics,
        log_bodies: bool,
        body_timeout: float,
    ) -> None:
        self._view = view
        self._settings = settings
        self._readiness = readiness
        self._metrics = metrics
        self._log_bodies = log_bodies
        self._body_timeout = body_timeout

    # --- admission ---------------------------------------------------------------------------

    async def validate(self, request: web.Request) -> web.Response:
        return await self._review(request, "validate", self._validate)

    async def mutate(self, request: web.Request) -> web.Response:
        return await self._review(request, "mutate", self._mutate)

    def _validate(self, review: reviews.Request) -> _Outcome:
        verdict = admission.validate(review, view=self._view, settings=self._settings)
        return _Outcome(
            reviews.from_verdict(review["uid"], verdict, request=review),
            "allowed" if verdict.allowed else "denied",
            verdict.rule_ids,
            [(j.finding.rule_id, j.action) for j in verdict.judged],
        )

    def _mutate(self, review: reviews.Request) -> _Outcome:
        operations = mutation.mutate(review, view=self._view, settings=self._settings)
        return _Outcome(
            reviews.patched(review["uid"], operations), "patched" if operations else "allowed"
        )

    async def _review(
        self, request: web.Request, endpoint: str, decide: Callable[[reviews.Request], _Outcome]
    ) -> web.Response:
        started = time.perf_counter()
        try:
            body = await _read_body(request, self._body_timeout)
        except _BodyTooLarge:
            message = (
                f"request body exceeds {MAX_BODY_BYTES} bytes; no AdmissionReview is that large"
            )
            return self._rejected(
                endpoint, started, 413, "RequestEntityTooLarge", message, "too_large"
            )
        except _BodyTooSlow:
            message = f"request body not received within {self._body_timeout:g} s"
            response = self._rejected(endpoint, started, 408, "Timeout", message, "timeout")
            response.force_close()  # `Connection: close`: no second request on this one
            return response
        try:
            with heap.held():  # a large body is thousands of new containers and no cycle
                review = reviews.decode_review(body)
        except reviews.MalformedReview as exc:
            return self._rejected(
                endpoint,
                started,
                400,
                "BadRequest",
                f"malformed AdmissionReview: {exc}",
                "malformed",
            )
        try:
            outcome = decide(review)
            encoded = reviews.encode_review(outcome.response)
        except Exception:
            # Our bug, not the user's: the core turns every bad object into a denial.
            seconds = time.perf_counter() - started
            self._metrics.observe_admission(endpoint=endpoint, verdict="error", seconds=seconds)
            logger.exception(
                "admission failed: internal error",
                extra=fields(**self._describe(review, endpoint, "error", (), seconds)),
            )
            return _http_error(
                500,
                "InternalError",
                f"policy webhook internal error on request uid {review['uid']}; see its log",
            )
        seconds = time.perf_counter() - started
        self._metrics.observe_admission(
            endpoint=endpoint, verdict=outcome.verdict, seconds=seconds, findings=outcome.findings
        )
        described = self._describe(review, endpoint, outcome.verdict, outcome.rule_ids, seconds)
        if self._log_bodies:
            described["review"] = review
            described["response"] = outcome.response
        logger.info("admission %s", outcome.verdict, extra=fields(**described))
        return web.Response(body=encoded, content_type="application/json")

    def _rejected(
        self, endpoint: str, started: float, code: int, reason: str, message: str, verdict: str
    ) -> web.Response:
        seconds = time.perf_counter() - started
        self._metrics.observe_admission(endpoint=endpoint, verdict=verdict, seconds=seconds)
        logger.warning(
            "admission call rejected: %s",
            message,
            extra=fields(
                endpoint=endpoint, verdict=verdict, http_status=code, latency_ms=_ms(seconds)
            ),
        )
        return _http_error(code, reason, message)

    def _describe(
        self,
        review: reviews.Request,
        endpoint: str,
        verdict: str,
        rule_ids: Sequence[str],
        seconds: float,
    ) -> dict[str, Any]:
        gvk = review["kind"]
        group = gvk.get("group", "")
        obj = review.get("object") or review.get("oldObject") or {}
        metadata = obj.get("metadata")
        if not isinstance(metadata, dict):
            metadata = {}
        described: dict[str, Any] = {
            "uid": review["uid"],
            "operation": review["operation"],
            "kind": f"{gvk['kind']}.{group}" if group else gvk["kind"],
            "namespace": review.get("namespace") or metadata.get("namespace") or "",
            "name": review.get("name") or metadata.get("name") or "",
            "endpoint": endpoint,
            "verdict": verdict,
            "rules": list(rule_ids),
            "latency_ms": _ms(seconds),
            "dry_run": bool(review.get("dryRun", False)),
        }
        if review.get("subResource"):
            described["subresource"] = review.get("subResource")
        return described

    # --- probes and metrics ------------------------------------------------------------------

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")  # the process answers: that is all liveness means

    async def readyz(self, request: web.Request) -> web.Response:
        if self._readiness():
            return web.Response(text="ok")
        reasons = "; ".join(
            f"{name}: {reason}" for name, reason in self._readiness.reasons().items()
        )
        return web.Response(status=503, text=f"not ready: {reasons}")

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self._metrics.render(), headers={"Content-Type": self._metrics.content_type}
        )


async def _read_body(request: web.Request, timeout: float) -> bytes:
    """The whole body, at most MAX_BODY_BYTES within `timeout` seconds; any content type."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise _BodyTooLarge  # refused before reading a byte of it
    try:
        if request.content.is_eof():
            # All of it has arrived (the API server sends the body with the headers): reading
            # cannot wait, so no timer is armed and cancelled for it on every call.
            return await request.read()
        async with asyncio.timeout(timeout):
            return await request.read()
    except web.HTTPRequestEntityTooLarge:  # chunked, no length: counted while reading
        raise _BodyTooLarge from None
    except TimeoutError:
        raise _BodyTooSlow from None


def _http_error(code: int, reason: str, message: str) -> web.Response:
    """A `metav1.Status` body: the API server's client decodes it and quotes our message."""
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.json_response(status, status=code)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


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
        logger.info("stopped", extra=fields(drain_ms=_ms(time.perf_counter() - started)))

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


async def serve(
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
