"""Prometheus metrics, on a registry of our own (never the global one).

Several apps in one process — tests, mostly — would otherwise collide on metric names. Every
name of ours starts with `policy_webhook_`; beside them, the client library's standard process
(`process_*`) and platform (`python_info`) collectors. Admission metrics are fed by the HTTP
server; the others are here so the informers, cache, reconciler, leader election and the
webhook-rules keeper have one place to report. The alerts of manifests/components/monitoring
name only metrics of this module (a test reads them against `render()`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import prometheus_client
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.exposition import generate_latest

from webhook.shell.process import build

PREFIX = "policy_webhook"

# The core answers in well under a millisecond on small states; the API server gives a webhook
# at most 30 s (`timeoutSeconds` maximum), so the buckets span 100 µs to 10 s.
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

# The API server's own admission histogram (v1.20 to today) starts at 5 ms; finer below it.
LOOP_LAG_BUCKETS = (
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
)  # fmt: skip


class Metrics:
    """All metrics of one webhook process; `render()` is the `/metrics` body."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        # No `<name>_created` series beside every counter and histogram: one more series per
        # label set that no alert or dashboard reads. The switch is the library's, process-wide,
        # and read when a series is rendered.
        prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        ProcessCollector(registry=r)  # CPU, memory, open files, start time (Linux /proc)
        PlatformCollector(registry=r)  # python_info{version, implementation}

        self.build_info = Gauge(
            f"{PREFIX}_build_info",
            "Always 1; the labels say which build runs (version of the package, git revision "
            "of the image, `unknown` outside one; core: compiled as in the image, or python).",
            ["version", "revision", "core"],
            registry=r,
        )
        info = build.build_info()
        self.build_info.labels(version=info.version, revision=info.git_commit, core=info.core).set(
            1
        )

        # --- admission (HTTP server) ---------------------------------------------------------
        self.admission_requests = Counter(
            f"{PREFIX}_admission_requests",
            "Admission reviews answered, by endpoint, verdict (allowed, warned, denied, patched; "
            "malformed, too_large, timeout, error), operation, dry_run (true, false) and kind "
            "(Kind.group of a policy kind or a kind the webhook knows, else other); the last "
            "three are empty for a review that could not be read.",
            ["endpoint", "verdict", "operation", "dry_run", "kind"],
            registry=r,
        )
        self.rule_findings = Counter(
            f"{PREFIX}_rule_findings",
            "Rule findings in admission verdicts, by rule ID and the action taken (deny, warn, audit).",
            ["rule", "action"],
            registry=r,
        )
        self.admission_latency = Histogram(
            f"{PREFIX}_admission_duration_seconds",
            "Time from request received to response ready, per admission endpoint.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )

        self.loop_lag = Histogram(
            f"{PREFIX}_event_loop_lag_seconds",
            "How late the event loop runs a timer: the wait a review meets before its handler "
            "starts, on top of the admission duration (process.loop_lag).",
            buckets=LOOP_LAG_BUCKETS,
            registry=r,
        )

        # --- Events of denied and warned policy writes (SPEC 8.2) ----------------------------
        self.events = Counter(
            f"{PREFIX}_events",
            "Events of policy writes, by reason (PolicyDenied, PolicyWarned) and outcome: sent "
            "(a new Event), series (the count of an identical one raised), limited (over the "
            "per-policy limit), dropped (queue full), failed (the API server refused or did not "
            "answer).",
            ["reason", "outcome"],
            registry=r,
        )

        # --- TLS -----------------------------------------------------------------------------
        self.tls_reloads = Counter(
            f"{PREFIX}_tls_reloads",
            "Serving certificate reloads after the files changed, by result (ok, error).",
            ["result"],
            registry=r,
        )
        self.tls_not_after = Gauge(
            f"{PREFIX}_tls_certificate_expiry_timestamp_seconds",
            "notAfter of the serving certificate in use, as a Unix timestamp.",
            registry=r,
        )

        # --- cluster state and cache ----------------------------------------------------------
        self.cache_hits = Counter(
            f"{PREFIX}_cache_hits", "Effective-policy summaries served from the cache.", registry=r
        )
        self.cache_misses = Counter(
            f"{PREFIX}_cache_misses", "Effective-policy summaries computed afresh.", registry=r
        )
        self.cache_adopted = Counter(
            f"{PREFIX}_cache_adopted",
            "Summaries /mutate computed for an object that the cache kept once it was written.",
            registry=r,
        )
        self.store_objects = Gauge(
            f"{PREFIX}_store_objects",
            "Objects held in the in-memory store, by kind (Kind.group).",
            ["kind"],
            registry=r,
        )
        self.watch_last_event = Gauge(
            f"{PREFIX}_watch_last_event_timestamp_seconds",
            "Last list, watch start, event or bookmark per kind (Kind.group), as a Unix timestamp.",
            ["kind"],
            registry=r,
        )
        self.state_age = Gauge(
            f"{PREFIX}_state_age_seconds",
            "Seconds the store may lag behind the cluster: 0 while every watch is open, else "
            "since the least current kind's watch ended (staleness).",
            registry=r,
        )
        self.watch_restarts = Counter(
            f"{PREFIX}_watch_restarts",
            "Watches restarted (error, timeout or 410 Gone relist), by kind (Kind.group).",
            ["kind"],
            registry=r,
        )

        # --- reconciler and leader election --------------------------------------------------
        self.reconcile_patches = Counter(
            f"{PREFIX}_reconcile_patches",
            "Annotation patches sent by the reconciler, by kind of the patched object.",
            ["kind"],
            registry=r,
        )
        self.reconcile_skips = Counter(
            f"{PREFIX}_reconcile_skips",
            "Reconciles that sent nothing because the annotation was already right, by kind.",
            ["kind"],
            registry=r,
        )
        self.reconcile_errors = Counter(
            f"{PREFIX}_reconcile_errors",
            "Annotation patches that failed, by kind.",
            ["kind"],
            registry=r,
        )
        self.reconcile_retries = Counter(
            f"{PREFIX}_reconcile_retries",
            "Patches scheduled again after a failure, by kind and cause (error, conflict).",
            ["kind", "cause"],
            registry=r,
        )
        self.reconcile_failing = Gauge(
            f"{PREFIX}_reconcile_failing_objects",
            "Objects whose last annotation patch failed and that wait for their next try.",
            registry=r,
        )
        self.reconcile_rate = Gauge(
            f"{PREFIX}_reconcile_rate",
            "Patches per second the reconciler allows itself now: --reconcile-qps, or less "
            "after 429s or slow answers from the API server.",
            registry=r,
        )
        self.leader = Gauge(
            f"{PREFIX}_leader",
            "1 while this replica holds the reconciler Lease, else 0.",
            registry=r,
        )

        # --- the rules of the policy webhooks (leader only) ----------------------------------
        self.policy_kind_readable = Gauge(
            f"{PREFIX}_policy_kind_readable",
            "Per policy kind (Kind.group) with a served CRD: 1 when the service account may "
            "list and watch it (its policies are checked), 0 when not; on the leader only.",
            ["kind"],
            registry=r,
        )
        self.webhook_rules_syncs = Counter(
            f"{PREFIX}_webhook_rules_syncs",
            "Rounds of keeping the policy webhooks' rules in step with the readable policy "
            "kinds, by result (unchanged, patched, conflict, missing, error).",
            ["result"],
            registry=r,
        )

        # --- the audit (leader only, SPEC §8.3, §8.5) -----------------------------------------
        # A series per namespace, rule and result that has findings, none for the others, and
        # removed when they go: bounded by the findings, not by the namespaces or the rules.
        self.policy_findings = Gauge(
            f"{PREFIX}_policy_findings",
            "Findings in the PolicyReports, by namespace (empty: the ClusterPolicyReport), "
            "rule ID and result (fail, warn); only where there are some; on the leader only.",
            ["namespace", "rule", "result"],
            registry=r,
        )

        # The labelled children of the admission metrics, by label values: `labels()` takes a
        # lock and checks its arguments on every call, several times per admission call, for
        # label sets that are few and never removed.
        self._children: dict[tuple[object, ...], Any] = {}

    def observe_admission(
        self,
        *,
        endpoint: str,
        verdict: str,
        seconds: float,
        findings: Iterable[tuple[str, str]] = (),
        operation: str = "",
        dry_run: bool | None = None,
        kind: str = "",
    ) -> None:
        """One answered review; `findings` are (rule ID, action) pairs, `off` ones left out.
        `operation`, `dry_run` and `kind` stay empty for a review that could not be read;
        `kind` is the caller's to bound (one value per kind it was configured for)."""
        dry = "" if dry_run is None else "true" if dry_run else "false"
        self.child(self.admission_requests, endpoint, verdict, operation, dry, kind).inc()
        self.child(self.admission_latency, endpoint).observe(seconds)
        for rule_id, action in findings:
            if action != "off":
                self.child(self.rule_findings, rule_id, action).inc()

    def observe_event(self, *, reason: str, outcome: str) -> None:
        self.child(self.events, reason, outcome).inc()

    def child(self, metric: Counter | Gauge | Histogram, *values: str) -> Any:
        """`metric.labels(*values)` (values in the labels' order), looked up once per label set:
        for the paths that count every admission call and every watch event."""
        key = (metric, *values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def render(self) -> bytes:
        return generate_latest(self.registry)
