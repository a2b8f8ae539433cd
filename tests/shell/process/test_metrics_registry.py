"""Metrics: a registry per `Metrics`, so several apps in one process never collide."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from webhook.shell.process.metrics import Metrics


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
    }


def test_two_instances_do_not_share_counts() -> None:
    first, second = Metrics(), Metrics()
    first.observe_admission(endpoint="validate", verdict="allowed", seconds=0.0002)
    key = (
        "policy_webhook_admission_requests_total",
        (("dry_run", ""), ("endpoint", "validate"), ("kind", ""), ("operation", ""),
         ("verdict", "allowed")),
    )  # fmt: skip
    assert samples(first)[key] == 1
    assert key not in samples(second)


def test_findings_are_counted_by_rule_and_action_and_off_is_not_counted() -> None:
    metrics = Metrics()
    metrics.observe_admission(
        endpoint="validate",
        verdict="denied",
        seconds=0.001,
        findings=[("PA-S01", "deny"), ("PA-T06", "warn"), ("PA-C04", "audit"), ("PA-T09", "off")],
    )
    counted = {
        labels: value
        for (name, labels), value in samples(metrics).items()
        if name == "policy_webhook_rule_findings_total"
    }
    assert counted == {
        (("action", "deny"), ("rule", "PA-S01")): 1,
        (("action", "warn"), ("rule", "PA-T06")): 1,
        (("action", "audit"), ("rule", "PA-C04")): 1,
    }


def test_latency_buckets_resolve_sub_millisecond_answers() -> None:
    metrics = Metrics()
    metrics.observe_admission(endpoint="mutate", verdict="patched", seconds=0.0003)
    got = samples(metrics)
    bucket = "policy_webhook_admission_duration_seconds_bucket"
    assert got[(bucket, (("endpoint", "mutate"), ("le", "0.00025")))] == 0
    assert got[(bucket, (("endpoint", "mutate"), ("le", "0.0005")))] == 1


def test_every_metric_name_has_the_project_prefix_but_the_standard_collectors() -> None:
    names = {family.name for family in text_string_to_metric_families(Metrics().render().decode())}
    assert names
    # The client library's process and platform collectors keep their standard names, which
    # dashboards and alerts everywhere know.
    ours = {name for name in names if not name.startswith(("process_", "python_"))}
    assert ours and all(name.startswith("policy_webhook_") for name in ours)
    assert {"process_resident_memory_bytes", "python_info"} <= names


def test_repeated_answers_add_up_on_one_series_per_label_set() -> None:
    metrics = Metrics()
    for verdict, dry_run in (("warned", False), ("denied", True), ("warned", False)):
        metrics.observe_admission(
            endpoint="validate", verdict=verdict, seconds=0.001, findings=[("PA-C04", "warn")],
            operation="CREATE", dry_run=dry_run, kind="RetryPolicy.policies.example.com",
        )  # fmt: skip
    got = samples(metrics)
    requests = "policy_webhook_admission_requests_total"

    def labels(verdict: str, dry_run: str) -> tuple[tuple[str, str], ...]:
        return (("dry_run", dry_run), ("endpoint", "validate"),
                ("kind", "RetryPolicy.policies.example.com"), ("operation", "CREATE"),
                ("verdict", verdict))  # fmt: skip

    assert got[(requests, labels("warned", "false"))] == 2
    assert got[(requests, labels("denied", "true"))] == 1
    findings = "policy_webhook_rule_findings_total"
    assert got[(findings, (("action", "warn"), ("rule", "PA-C04")))] == 3
    count = "policy_webhook_admission_duration_seconds_count"
    assert got[(count, (("endpoint", "validate"),))] == 3


def test_the_metrics_of_spec_8_5_have_their_names_labels_and_types() -> None:
    metrics = Metrics()
    metrics.observe_admission(
        endpoint="validate", verdict="warned", seconds=0.001, operation="UPDATE",
        dry_run=True, kind="RetryPolicy.policies.example.com",
    )  # fmt: skip
    metrics.observe_event(reason="PolicyWarned", outcome="series")
    metrics.policy_findings.labels(namespace="apps", rule="PA-T06", result="warn").set(2)
    got = samples(metrics)
    assert got[("policy_webhook_admission_requests_total",
                (("dry_run", "true"), ("endpoint", "validate"),
                 ("kind", "RetryPolicy.policies.example.com"), ("operation", "UPDATE"),
                 ("verdict", "warned")))] == 1  # fmt: skip
    assert got[("policy_webhook_events_total",
                (("outcome", "series"), ("reason", "PolicyWarned")))] == 1  # fmt: skip
    assert got[("policy_webhook_policy_findings",
                (("namespace", "apps"), ("result", "warn"), ("rule", "PA-T06")))] == 2  # fmt: skip
    types = {f.name: f.type for f in text_string_to_metric_families(metrics.render().decode())}
    assert types["policy_webhook_admission_requests"] == "counter"
    assert types["policy_webhook_events"] == "counter"
    assert types["policy_webhook_policy_findings"] == "gauge"
