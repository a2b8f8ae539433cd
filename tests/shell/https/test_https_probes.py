"""`/healthz`, `/readyz` and `/metrics` over HTTPS."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.https import RunningWebhook, policy, review_of

DENIED = """
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: both, namespace: apps}
spec:
  targetRef: {group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}
  targetRefs:
  - {group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}
  default: {maxRetries: 1}
"""


def test_healthz_says_ok_while_the_process_answers(webhook: RunningWebhook) -> None:
    reply = webhook.request("GET", "/healthz")
    assert (reply.status, reply.text) == (200, "ok")


def test_readyz_is_200_once_tls_is_served_and_not_draining(webhook: RunningWebhook) -> None:
    reply = webhook.request("GET", "/readyz")
    assert (reply.status, reply.text) == (200, "ok")


def test_readyz_is_503_with_the_reason_while_a_condition_fails(
    start_webhook: Callable[..., RunningWebhook],
) -> None:
    with start_webhook() as hook:
        hook.in_loop(
            lambda: hook.readiness.set("state-synced", False, "waiting for the first list")
        )
        reply = hook.request("GET", "/readyz")
        assert reply.status == 503
        assert "state-synced: waiting for the first list" in reply.text
        hook.in_loop(lambda: hook.readiness.set("state-synced", True, "synced"))
        assert hook.request("GET", "/readyz").status == 200


def test_healthz_stays_200_when_not_ready(start_webhook: Callable[..., RunningWebhook]) -> None:
    with start_webhook() as hook:
        hook.in_loop(lambda: hook.readiness.set("state-synced", False, "pending"))
        assert hook.request("GET", "/healthz").status == 200


def test_metrics_count_requests_by_endpoint_and_verdict_and_findings_by_rule(
    start_webhook: Callable[..., RunningWebhook],
) -> None:
    with start_webhook() as hook:
        hook.post_review("/validate", review_of(policy(DENIED)))
        hook.request("POST", "/validate", b"not json")
        reply = hook.request("GET", "/metrics")
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/plain")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(reply.text)
        for s in family.samples
    }

    def value(name: str, **labels: str) -> float | None:
        return samples.get((name, tuple(sorted(labels.items()))))

    requests = "policy_webhook_admission_requests_total"
    denied = {"operation": "CREATE", "dry_run": "false", "kind": "RetryPolicy.policies.example.com"}
    assert value(requests, endpoint="validate", verdict="denied", **denied) == 1
    unread = {"operation": "", "dry_run": "", "kind": ""}  # not a review: nothing to label by
    assert value(requests, endpoint="validate", verdict="malformed", **unread) == 1
    assert value("policy_webhook_rule_findings_total", rule="PA-S01", action="deny") == 1
    latency = "policy_webhook_admission_duration_seconds"
    assert value(f"{latency}_count", endpoint="validate") == 2
    assert value(f"{latency}_bucket", endpoint="validate", le="0.0001") is not None
    # Room for the informers, cache and reconciler: declared, so dashboards can be built now.
    families = {family.name for family in text_string_to_metric_families(reply.text)}
    assert {
        "policy_webhook_cache_hits",
        "policy_webhook_cache_adopted",
        "policy_webhook_store_objects",
        "policy_webhook_watch_restarts",
        "policy_webhook_reconcile_patches",
        "policy_webhook_leader",
        "policy_webhook_tls_certificate_expiry_timestamp_seconds",
    } <= families
