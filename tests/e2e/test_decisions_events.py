"""Reviewing a denial on a real API server (SPEC §8.1, §8.2): who was refused, and why.

The webhook runs in cluster mode as its ServiceAccount, with the RBAC the manifests ship (so
the Events prove that `create`/`patch` on `events` is enough), registered with the shipped
webhook configurations. A developer — impersonated with `kubectl --as`, allowed by a Role to
create RetryPolicies in `apps` and nothing else — is refused; the admin then finds the
decision log line naming that developer, and the Event with `kubectl get events`.

The suite's API server is v1.20, which serves events.k8s.io/v1 (GA since 1.19): the Events
are written through it, and `kubectl get events` reads them through core v1. The core v1
fallback (for servers without events.k8s.io/v1) is tests/shell/cluster/test_events_fake.py's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from developer import GROUP, USER, deny_as_developer, wait_for, webhook_for_developer
from webhook_harness import WebhookProcess

if TYPE_CHECKING:
    from cluster import LocalCluster


@pytest.fixture(scope="module")
def webhook(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookProcess]:
    with webhook_for_developer(cluster, tmp_path_factory.mktemp("decisions"), "decisions") as hook:
        yield hook


def decision_line(process: WebhookProcess, name: str, *, dry_run: bool) -> dict[str, Any] | None:
    for record in process.log_records():
        if record.get("logger") == "webhook.decisions" and (
            record.get("name"),
            record.get("dryRun"),
        ) == (name, dry_run):
            return record
    return None


def policy_denied_events(cluster: LocalCluster) -> list[dict[str, Any]]:
    """What the admin asks for: `kubectl get events -n apps --field-selector reason=...`."""
    done = cluster.kubectl(
        "get", "events", "-n", "apps", "--field-selector", "reason=PolicyDenied", "-o", "json"
    )
    return list(json.loads(done.stdout)["items"])


def event_about(cluster: LocalCluster, name: str) -> dict[str, Any] | None:
    found = [e for e in policy_denied_events(cluster) if e["involvedObject"]["name"] == name]
    return found[0] if found else None


def test_the_suite_serves_events_v1_and_the_webhook_writes_through_it(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    assert "events.k8s.io/v1" in cluster.kubectl("api-versions").stdout.split()
    deny_as_developer(cluster, "retry-probe")
    wait_for(lambda: event_about(cluster, "retry-probe"))
    messages = [r.get("msg") for r in webhook.log_records()]
    assert "Events are written through events.k8s.io/v1" in messages


def test_a_denied_create_names_the_developer_in_the_log_and_leaves_an_event(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    started = time.monotonic()
    deny_as_developer(cluster, "retry-everything")

    line = wait_for(lambda: decision_line(webhook, "retry-everything", dry_run=False))
    assert (line["level"], line["verdict"], line["operation"]) == ("WARNING", "denied", "CREATE")
    assert line["user"] == USER
    assert GROUP in line["groups"] and "system:authenticated" in line["groups"]
    assert (line["kind"], line["namespace"]) == ("RetryPolicy.policies.example.com", "apps")
    assert {"rule": "PA-S01", "field": "spec.targetRef",
            "message": "set together with spec.targetRefs; keep one of them"} in line["causes"]  # fmt: skip
    assert "maxRetries" not in json.dumps(line)  # no body

    event = wait_for(lambda: event_about(cluster, "retry-everything"))
    assert (event["type"], event["reason"], event["action"]) == ("Warning", "PolicyDenied", "Admit")
    assert event["involvedObject"] == {
        "apiVersion": "policies.example.com/v1alpha1", "kind": "RetryPolicy",
        "name": "retry-everything", "namespace": "apps",
    }  # fmt: skip
    assert event["message"].startswith("[PA-S01] spec.targetRef: set together with")
    assert event["reportingComponent"] == "policy-attachment.dev/webhook"
    assert event["reportingInstance"] == "decisions"  # the pod's name (POD_NAME)
    assert time.monotonic() - started < 10


def test_the_same_denial_again_raises_the_series_count_of_the_same_event(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    deny_as_developer(cluster, "retry-twice")
    first = wait_for(lambda: event_about(cluster, "retry-twice"))
    deny_as_developer(cluster, "retry-twice")

    def counted_twice() -> dict[str, Any] | None:
        done = cluster.kubectl(
            "get", "events.v1.events.k8s.io", "-n", "apps", first["metadata"]["name"], "-o", "json"
        )
        event: dict[str, Any] = json.loads(done.stdout)
        return event if (event.get("series") or {}).get("count") == 2 else None

    event = wait_for(counted_twice)
    assert event["regarding"]["name"] == "retry-twice"
    assert event["reportingController"] == "policy-attachment.dev/webhook"
    assert [e["involvedObject"]["name"] for e in policy_denied_events(cluster)].count(
        "retry-twice"
    ) == 1


def test_a_dry_run_denial_is_logged_and_leaves_no_event(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    deny_as_developer(cluster, "retry-dry", "--dry-run=server")
    line = wait_for(lambda: decision_line(webhook, "retry-dry", dry_run=True))
    assert (line["verdict"], line["user"]) == ("denied", USER)
    # Events leave one queue, in order: once a later denial's Event is there, an Event of the
    # dry run would be there too, had one been queued.
    deny_as_developer(cluster, "retry-after-dry")
    wait_for(lambda: event_about(cluster, "retry-after-dry"))
    assert event_about(cluster, "retry-dry") is None


def test_events_and_decisions_are_counted_in_metrics(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    deny_as_developer(cluster, "retry-counted-dry", "--dry-run=server")
    deny_as_developer(cluster, "retry-counted")
    wait_for(lambda: event_about(cluster, "retry-counted"))
    status, text = webhook.get("/metrics")
    assert status == 200

    def value(name: str, *labels: str) -> float:
        (line,) = [
            line
            for line in text.splitlines()
            if line.startswith(name + "{") and all(label in line for label in labels)
        ]
        return float(line.rsplit(" ", 1)[1])

    assert value("policy_webhook_events_total", 'reason="PolicyDenied"', 'outcome="sent"') >= 1
    retry = 'kind="RetryPolicy.policies.example.com"'
    for dry_run in ('dry_run="true"', 'dry_run="false"'):
        labels = ('endpoint="validate"', 'verdict="denied"', 'operation="CREATE"', dry_run, retry)
        assert value("policy_webhook_admission_requests_total", *labels) >= 1
