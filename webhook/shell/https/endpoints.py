"""The webhook's endpoints: read, decode, call the core, encode. No admission logic here.

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
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web

from webhook.core.admission import decisions, mutation, reviews
from webhook.core.admission import validation as admission
from webhook.core.annotation.cache import SummaryCache
from webhook.core.model import kinds
from webhook.core.model.refs import GroupKind
from webhook.core.model.settings import Settings
from webhook.core.rules.findings import Outcome, Verdict
from webhook.core.state.store import ClusterView
from webhook.shell.process import heap
from webhook.shell.process.logs import fields
from webhook.shell.process.metrics import Metrics
from webhook.shell.process.readiness import Readiness

logger = logging.getLogger(__name__)
# The decision log (SPEC §8.1): its own logger, so that `--log-decisions` alone decides which
# decisions are written, whatever `--log-level` says of the rest.
decision_log = logging.getLogger("webhook.decisions")

# etcd refuses objects over 1.5 MB (its default request limit); an UPDATE review carries the
# object and the oldObject, plus the envelope — so no honest review is bigger than 7 MiB.
# controller-runtime caps its webhook bodies at the same size for the same reason.
MAX_BODY_BYTES = 7 * 1024 * 1024
# The API server gives up on a webhook call after the webhook's `timeoutSeconds` (at most 30 s;
# we ship 2 to 5 s) and sends headers and body at once, so a body still arriving after this long is
# not from a live API server: answer 408 and close, rather than hold the connection forever.
# (aiohttp then reads on for at most 10 s, its "lingering close", so that a client still
# writing can read the 408; the connection is gone 20 s after its headers at the latest.)
BODY_TIMEOUT = 10.0  # seconds
# --- the app ---------------------------------------------------------------------------------


def build_app(
    *,
    view: ClusterView,
    settings: Settings,
    readiness: Readiness,
    metrics: Metrics,
    log_bodies: bool = False,
    body_timeout: float = BODY_TIMEOUT,
    log_decisions: decisions.LogDecisions = decisions.DEFAULT_LOG_DECISIONS,
    record_event: Callable[[decisions.Decision], None] | None = None,
    cache: SummaryCache | None = None,
) -> web.Application:
    """The webhook's routes; `server.HttpsServer` puts them behind TLS.

    `record_event` takes each denied or warned decision that is not a dry run (SPEC §8.2); it
    must return at once (cluster mode queues it). None: no Events (no cluster, `--events=false`).
    `cache` holds the summaries of `view`: /mutate answers from it when the incoming object
    differs from the stored one only where no summary reads (`mutation.mutate`).
    """
    decision_log.setLevel(logging.DEBUG)  # `log_decisions` filters, not the logger's level
    handlers = _Handlers(
        view=view,
        settings=settings,
        readiness=readiness,
        metrics=metrics,
        log_bodies=log_bodies,
        body_timeout=body_timeout,
        log_decisions=log_decisions,
        record_event=record_event,
        cache=cache,
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
    verdict: str  # allowed | warned | denied (/validate); allowed | patched (/mutate)
    judged: Verdict | None = None  # /validate's, for the metrics, the decision log and Events

    def findings(self) -> Iterator[tuple[str, str]]:
        """(rule ID, action) of each finding, for the metrics; none for /mutate."""
        for j in self.judged.judged if self.judged is not None else ():
            yield j.finding.rule_id, j.action


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
        log_decisions: decisions.LogDecisions,
        record_event: Callable[[decisions.Decision], None] | None,
        cache: SummaryCache | None,
    ) -> None:
        self._view = view
        self._cache = cache  # summaries of `view`: /mutate answers from it when it can
        self._settings = settings
        self._readiness = readiness
        self._metrics = metrics
        self._log_bodies = log_bodies
        self._body_timeout = body_timeout
        self._log_decisions = log_decisions
        self._record_event = record_event
        self._kind_labels: dict[GroupKind, str] = {}  # `kind` labels of the known kinds

    # --- admission ---------------------------------------------------------------------------

    async def validate(self, request: web.Request) -> web.Response:
        return await self._review(request, "validate", self._validate)

    async def mutate(self, request: web.Request) -> web.Response:
        return await self._review(request, "mutate", self._mutate)

    def _validate(self, review: reviews.Request) -> _Outcome:
        verdict = admission.validate(review, view=self._view, settings=self._settings)
        return _Outcome(
            reviews.from_verdict(review["uid"], verdict, request=review), verdict.outcome, verdict
        )

    def _mutate(self, review: reviews.Request) -> _Outcome:
        operations = mutation.mutate(
            review, view=self._view, settings=self._settings, cache=self._cache
        )
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
                extra=fields(**self._describe(review, endpoint, seconds)),
            )
            return _http_error(
                500,
                "InternalError",
                f"policy webhook internal error on request uid {review['uid']}; see its log",
            )
        seconds = time.perf_counter() - started
        self._metrics.observe_admission(
            endpoint=endpoint,
            verdict=outcome.verdict,
            seconds=seconds,
            findings=outcome.findings(),
            operation=review["operation"],
            dry_run=review.get("dryRun") is True,
            kind=self._kind_label(review),
        )
        self._report(review, outcome, seconds)
        return web.Response(body=encoded, content_type="application/json")

    def _report(self, review: reviews.Request, outcome: _Outcome, seconds: float) -> None:
        """The decision log line (SPEC §8.1) and the Event (§8.2), each only when wanted: most
        answers are clean allows, and for those, by default, nothing is built at all."""
        if outcome.judged is None:  # /mutate: logged as a clean allow is, at DEBUG
            if decisions.logged("allowed", self._log_decisions):
                line = decisions.request_fields(review, outcome.verdict, _ms(seconds))
                line["endpoint"] = "mutate"  # tells it from a /validate line
                self._write(decisions.DEBUG, f"mutation {outcome.verdict}", line, review, outcome)
            return
        verdict = cast(Outcome, outcome.verdict)
        log = decisions.logged(verdict, self._log_decisions)
        event = (
            self._record_event is not None
            and verdict != "allowed"
            and review.get("dryRun") is not True
        )
        if not (log or event):
            return
        decision = decisions.decision_of(review, outcome.judged)
        if log:
            line = decisions.log_fields(decision, _ms(seconds))
            self._write(decisions.LEVELS[verdict], f"admission {verdict}", line, review, outcome)
        if event and self._record_event is not None:
            self._record_event(decision)

    def _write(
        self,
        level: int,
        message: str,
        line: dict[str, Any],
        review: reviews.Request,
        outcome: _Outcome,
    ) -> None:
        if self._log_bodies:  # an explicit opt-in for debugging: bodies may hold secrets
            line["review"] = review
            line["response"] = outcome.response
        decision_log.log(level, message, extra={"fields": line})

    def _kind_label(self, review: reviews.Request) -> str:
        """The `kind` label: `Kind.group` of a kind the webhook knows (a Gateway API or core
        kind, a policy kind of a CRD label, the catalog or the config), `other` otherwise, so
        that no caller can grow the metric's series by sending made-up kinds."""
        kind = review["kind"]
        gk = GroupKind(kind.get("group", ""), kind["kind"])
        label = self._kind_labels.get(gk)
        if label is not None:
            return label
        if gk in kinds.NEVER_POLICIES or self._view.profile(gk).known:
            # Remembered: `profile()` builds a catalog kind's profile anew on every call, and a
            # kind once known keeps its series (as few as the kinds ever known). An unknown
            # kind is asked again: a CRD may yet make it known.
            label = self._kind_labels[gk] = str(gk)
            return label
        return "other"

    def _rejected(
        self, endpoint: str, started: float, code: int, reason: str, message: str, verdict: str
    ) -> web.Response:
        seconds = time.perf_counter() - started
        self._metrics.observe_admission(endpoint=endpoint, verdict=verdict, seconds=seconds)
        logger.warning(
            "admission call rejected: %s",
            message,
            extra=fields(
                endpoint=endpoint, verdict=verdict, http_status=code, latencyMs=_ms(seconds)
            ),
        )
        return _http_error(code, reason, message)

    def _describe(self, review: reviews.Request, endpoint: str, seconds: float) -> dict[str, Any]:
        """The fields of an internal error's log line: the request, no verdict to describe."""
        described = decisions.request_fields(review, "error", _ms(seconds))
        described["endpoint"] = endpoint
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
