"""The decision log, the Event seam and the admission metrics, over real HTTPS (SPEC §8.1,
§8.2, §8.5): what one answered review writes, at which level, under each `--log-decisions`."""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.https import RunningWebhook, policy, review_of, write_pair
from webhook.core.admission.decisions import Decision, LogDecisions
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store
from webhook.shell.https import endpoints
from webhook.shell.https.tls import ReloadingTLS
from webhook.shell.process.logs import JsonFormatter
from webhook.shell.process.metrics import Metrics
from webhook.shell.process.readiness import Readiness

BROKEN = policy("""
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: broken, namespace: apps}
spec:
  targetRef: {group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}
  targetRefs:
  - {group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}
  default: {maxRetries: 3}
""")
EARLY = policy("""
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: early, namespace: apps}
spec:
  targetRefs:
  - {group: gateway.networking.k8s.io, kind: HTTPRoute, name: not-applied-yet}
  default: {maxRetries: 2}
""")
ROUTE = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
         "metadata": {"name": "new-route", "namespace": "apps"}, "spec": {}}  # fmt: skip
USER = {"username": "jane@example.com", "groups": ["app-team", "system:authenticated"]}


def review(obj: dict[str, Any], uid: str, *, dry_run: bool = False) -> dict[str, Any]:
    made = review_of(obj, uid=uid, dry_run=dry_run)
    made["request"]["userInfo"] = USER
    return made


def lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The decision log lines, formatted as they are in production."""
    formatter = JsonFormatter()
    return [
        json.loads(formatter.format(r)) for r in caplog.records if r.name == "webhook.decisions"
    ]


def by_uid(caplog: pytest.LogCaptureFixture) -> dict[str, dict[str, Any]]:
    return {line["uid"]: line for line in lines(caplog)}


class Recorded:
    def __init__(self) -> None:
        self.decisions: list[Decision] = []

    def __call__(self, decision: Decision) -> None:
        self.decisions.append(decision)


@pytest.fixture
def run(
    start_webhook: Callable[..., RunningWebhook],
) -> Iterator[Callable[..., RunningWebhook]]:
    """`run(log_decisions=...)`: a webhook of its own, stopped after the test."""
    started: list[RunningWebhook] = []

    def start(**options: Any) -> RunningWebhook:
        hook = start_webhook(**options).__enter__()
        started.append(hook)
        return hook

    yield start
    for hook in started:
        hook.stop()


def test_a_denial_is_one_warning_line_naming_the_user_and_each_cause(
    webhook: RunningWebhook, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    webhook.post_review("/validate", review(BROKEN, "uid-denied"))
    line = by_uid(caplog)["uid-denied"]
    assert list(line) == [
        "time", "level", "logger", "msg", "uid", "operation", "dryRun", "kind", "namespace",
        "name", "user", "groups", "verdict", "rules", "causes", "latencyMs",
    ]  # fmt: skip
    assert (line["level"], line["msg"]) == ("WARNING", "admission denied")
    assert line["verdict"] == "denied"
    assert (line["user"], line["groups"]) == ("jane@example.com", USER["groups"])
    assert (line["kind"], line["namespace"], line["name"]) == (
        "RetryPolicy.policies.example.com", "apps", "broken",
    )  # fmt: skip
    assert line["causes"] == [{"rule": "PA-S01", "field": "spec.targetRef",
                               "message": "set together with spec.targetRefs; keep one of them"}]  # fmt: skip
    assert "PA-S01" in line["rules"] and line["dryRun"] is False
    assert isinstance(line["latencyMs"], float)
    assert "maxRetries" not in json.dumps(line)  # no body


def test_a_warning_is_an_info_line_and_a_clean_allow_is_not_written_by_default(
    webhook: RunningWebhook, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    webhook.post_review("/validate", review(EARLY, "uid-warned"))
    webhook.post_review("/validate", review(ROUTE, "uid-clean"))
    webhook.post_review("/mutate", review(ROUTE, "uid-mutated"))
    found = by_uid(caplog)
    assert (found["uid-warned"]["level"], found["uid-warned"]["verdict"]) == ("INFO", "warned")
    assert found["uid-warned"]["causes"][0]["rule"] == "PA-T06"
    assert "uid-clean" not in found and "uid-mutated" not in found


@pytest.mark.parametrize(
    ("mode", "written"),
    [
        ("denied", {"uid-denied"}),
        ("warned", {"uid-denied", "uid-warned"}),
        ("all", {"uid-denied", "uid-warned", "uid-clean", "uid-mutated"}),
        ("none", set()),
    ],
)
def test_log_decisions_chooses_the_lines_whatever_the_root_level(
    run: Callable[..., RunningWebhook],
    caplog: pytest.LogCaptureFixture,
    mode: LogDecisions,
    written: set[str],
) -> None:
    caplog.set_level(logging.DEBUG, logger="webhook.decisions")  # and caplog's handler
    root = logging.getLogger()
    saved, root.level = root.level, logging.ERROR  # --log-level ERROR: decisions follow `mode`
    try:
        hook = run(log_decisions=mode)
        for obj, uid in ((BROKEN, "uid-denied"), (EARLY, "uid-warned"), (ROUTE, "uid-clean")):
            hook.post_review("/validate", review(obj, uid))
        hook.post_review("/mutate", review(ROUTE, "uid-mutated"))
    finally:
        root.level = saved
    found = by_uid(caplog)
    assert set(found) == written
    if "uid-clean" in found:
        assert (found["uid-clean"]["level"], found["uid-clean"]["verdict"]) == ("DEBUG", "allowed")
        assert "causes" not in found["uid-clean"]
        mutated = found["uid-mutated"]
        assert (mutated["level"], mutated["endpoint"]) == ("DEBUG", "mutate")
        assert mutated["verdict"] in ("patched", "allowed")


def test_bodies_are_added_only_when_asked(
    run: Callable[..., RunningWebhook], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    hook = run(log_bodies=True)
    hook.post_review("/validate", review(EARLY, "uid-logged"))
    line = by_uid(caplog)["uid-logged"]
    assert line["review"]["object"]["spec"]["default"] == {"maxRetries": 2}
    assert line["response"]["allowed"] is True


# --- the Event seam ------------------------------------------------------------------------------


def test_denied_and_warned_writes_reach_the_recorder_dry_runs_and_allows_do_not(
    run: Callable[..., RunningWebhook],
) -> None:
    recorded = Recorded()
    hook = run(record_event=recorded, log_decisions="none")
    hook.post_review("/validate", review(BROKEN, "uid-denied"))
    hook.post_review("/validate", review(BROKEN, "uid-dry", dry_run=True))
    hook.post_review("/validate", review(EARLY, "uid-warned"))
    hook.post_review("/validate", review(ROUTE, "uid-clean"))
    assert [(d.uid, d.verdict, d.user) for d in recorded.decisions] == [
        ("uid-denied", "denied", "jane@example.com"),
        ("uid-warned", "warned", "jane@example.com"),
    ]


# --- metrics -------------------------------------------------------------------------------------


def admission_samples(metrics: Metrics) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        if family.name == "policy_webhook_admission_requests"
        for s in family.samples
        if s.name.endswith("_total")
    }


def test_requests_are_counted_by_verdict_operation_dry_run_and_a_bounded_kind(
    run: Callable[..., RunningWebhook],
) -> None:
    metrics = Metrics()
    hook = run(metrics=metrics)
    hook.post_review("/validate", review(BROKEN, "a"))
    hook.post_review("/validate", review(BROKEN, "b", dry_run=True))
    hook.post_review("/validate", review(EARLY, "c"))
    made_up = {**EARLY, "apiVersion": "made.up.example/v1", "kind": "Anything"}
    hook.post_review("/validate", review(made_up, "d"))
    hook.request("POST", "/validate", b"not json")

    def labels(verdict: str, dry_run: str, kind: str, operation: str = "CREATE") -> Any:
        return (("dry_run", dry_run), ("endpoint", "validate"), ("kind", kind),
                ("operation", operation), ("verdict", verdict))  # fmt: skip

    retry = "RetryPolicy.policies.example.com"
    assert admission_samples(metrics) == {
        labels("denied", "false", retry): 1,
        labels("denied", "true", retry): 1,
        labels("warned", "false", retry): 1,
        labels("warned", "false", "other"): 1,  # a kind nobody configured: never its own series
        labels("malformed", "", "", ""): 1,
    }


def test_mutate_requests_are_counted_by_operation_dry_run_and_the_kind_they_annotate(
    run: Callable[..., RunningWebhook],
) -> None:
    metrics = Metrics()
    hook = run(metrics=metrics)
    hook.post_review("/mutate", review(ROUTE, "created"))
    updated = review_of(ROUTE, operation="UPDATE", old=ROUTE, uid="updated", dry_run=True)
    hook.post_review("/mutate", updated)

    def labels(operation: str, dry_run: str) -> Any:
        return (("dry_run", dry_run), ("endpoint", "mutate"),
                ("kind", "HTTPRoute.gateway.networking.k8s.io"), ("operation", operation),
                ("verdict", "allowed"))  # fmt: skip

    # No policy reaches the route: nothing to patch, so `allowed`.
    assert admission_samples(metrics) == {labels("CREATE", "false"): 1, labels("UPDATE", "true"): 1}


ANYTHING_CRD = policy("""
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: anythings.made.up.example
  labels: {gateway.networking.k8s.io/policy: direct}
spec:
  group: made.up.example
  scope: Namespaced
  names: {kind: Anything, plural: anythings}
  versions: [{name: v1, served: true, storage: true}]
""")


def test_a_kind_that_a_crd_makes_known_later_gets_its_own_series_from_then_on(
    serving_cert: trustme.LeafCert, client_context: ssl.SSLContext, tmp_path: Path
) -> None:
    """Known kinds' labels are remembered; an unknown kind is asked again on its next review."""
    store, metrics = Store(), Metrics()
    tls = ReloadingTLS(*write_pair(serving_cert, tmp_path), poll_interval=0)

    def app(readiness: Readiness) -> Any:
        return endpoints.build_app(
            view=store, settings=Settings(), readiness=readiness, metrics=metrics
        )

    made_up = {**EARLY, "apiVersion": "made.up.example/v1", "kind": "Anything"}
    with RunningWebhook(app, tls, client_context) as hook:
        hook.post_review("/validate", review(made_up, "before"))
        store.upsert(ANYTHING_CRD)  # between two reviews: none is being answered
        hook.post_review("/validate", review(made_up, "after"))
        hook.post_review("/validate", review(made_up, "again"))
    kinds = {dict(labels)["kind"]: count for labels, count in admission_samples(metrics).items()}
    assert kinds == {"other": 1, "Anything.made.up.example": 2}
