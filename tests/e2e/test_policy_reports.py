"""PolicyReports on a real API server (SPEC §8.3): `policy-webhook serve` in cluster mode, the
CRDs of manifests/components/policy-reports installed by `kubectl apply`, the reports read back
with `kubectl get`. In order, each test starting from where the previous one left:

- without the CRDs the webhook says so in one line and runs as ever;
- once they are served, the example cluster's two HealthCheckPolicies on one Service show
  PA-C01 on both, and `policy-webhook report -A` says what the reports say;
- deleting a policy's target makes PA-T06 appear within seconds, recreating it makes it go;
- with no webhook configuration sending them, the policy kinds get PA-K02;
- churn that changes no finding rewrites no report for 30 s (resourceVersions stay).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from convergence import GW, leading, wait_until
from webhook_harness import REPO, WebhookProcess, apply_example_cluster

if TYPE_CHECKING:
    from cluster import LocalCluster

LEASE = "e2e-policy-reports"
CRDS = REPO / "manifests" / "components" / "policy-reports" / "crds.yaml"
WITHIN = 10.0  # seconds a report may take to follow a change ("within seconds")

OURS = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: reports}}
---
apiVersion: {GW}/v1
kind: HTTPRoute
metadata: {{name: r, namespace: reports}}
spec:
  parentRefs: [{{name: gw, namespace: infra}}]
---
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {{name: on-r, namespace: reports}}
spec:
  targetRefs: [{{group: {GW}, kind: HTTPRoute, name: r}}]
  default: {{retryOn: ["504"]}}
"""
ROUTE = OURS.split("---")[1]


@pytest.fixture(scope="module")
def webhook(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookProcess]:
    apply_example_cluster(cluster)
    cluster.apply(OURS)
    process = WebhookProcess(
        cluster, tmp_path_factory.mktemp("reports"), name="reports", args=["--leader-election-name", LEASE, "--webhook-rules-sync-seconds", "2"]
    )  # fmt: skip
    try:
        process.start()
        wait_until(lambda: leading(process), 30, "the replica leads")
        yield process
    finally:
        process.stop()
        print(f"\n[e2e] reports webhook log: {process.log_path}")
        cluster.kubectl("delete", "-f", str(CRDS), "--ignore-not-found", check=False)
        cluster.kubectl("delete", "namespace", "reports", "--ignore-not-found", "--wait=false")
        cluster.kubectl("delete", "lease", LEASE, "-n", "default", "--ignore-not-found")


def report(cluster: LocalCluster, namespace: str) -> dict[str, Any] | None:
    found = cluster.kubectl(
        "get", "policyreport", "policy-attachment", "-n", namespace, "-o", "json", check=False
    )
    return json.loads(found.stdout) if found.returncode == 0 else None


def rules_on(cluster: LocalCluster, namespace: str) -> set[tuple[str, str]]:
    """(rule, policy name) of every result of a namespace's report."""
    found = report(cluster, namespace) or {}
    return {(r["policy"], r["resources"][0]["name"]) for r in found.get("results") or ()}


def test_without_the_crds_the_webhook_says_so_once_and_runs(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    cluster.apply(OURS.replace("504", "500"))  # writes: the loop wakes
    time.sleep(2)
    said = [r for r in webhook.log_records() if "no PolicyReports" in r.get("msg", "")]
    assert len(said) == 1, said
    assert webhook.get("/readyz")[0] == 200
    assert "manifests/components/policy-reports" in said[0]["msg"]


def test_once_served_a_conflict_shows_on_both_policies(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    cluster.kubectl("apply", "-f", str(CRDS))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=30s",
                    "crd/policyreports.wgpolicyk8s.io", "crd/clusterpolicyreports.wgpolicyk8s.io")  # fmt: skip
    both = {("PA-C01", "foo-health"), ("PA-C01", "foo-health-2")}
    took = wait_until(lambda: both <= rules_on(cluster, "apps"), 30, "PA-C01 on both policies")
    print(f"\n[e2e] first reports {took:.1f}s after the CRDs")
    assert report(cluster, "reports") is not None  # a namespace with only a clean policy
    assert rules_on(cluster, "reports") == set()
    # The command computes afresh what the leader keeps: the same results, but for the times.
    fresh = json.loads(_report_command(cluster, "-A", "-o", "json").stdout)
    for printed in fresh["reports"]:
        namespace = printed["metadata"].get("namespace", "")
        if namespace:
            kept = report(cluster, namespace)
            assert kept is not None
            assert [
                {k: v for k, v in r.items() if k != "timestamp"} for r in kept["results"]
            ] == printed["results"]


def _report_command(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook.shell.cli.main", "report", "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True, text=True, cwd=REPO, timeout=60, check=False,
    )  # fmt: skip


def test_a_deleted_target_shows_pa_t06_within_seconds_and_its_return_clears_it(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    started = time.monotonic()
    cluster.kubectl("delete", "httproute", "r", "-n", "reports")
    appeared = wait_until(
        lambda: ("PA-T06", "on-r") in rules_on(cluster, "reports"), WITHIN, "PA-T06"
    )
    cluster.apply(ROUTE)
    gone = wait_until(lambda: rules_on(cluster, "reports") == set(), WITHIN, "PA-T06 gone")
    print(
        f"\n[e2e] PA-T06 in the report {appeared:.2f}s after the delete, gone {gone:.2f}s after the re-create"
    )
    assert time.monotonic() - started < 2 * WITHIN + 5


def test_a_kind_no_webhook_rule_sends_is_pa_k02_in_the_cluster_report(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    """No ValidatingWebhookConfiguration is registered in this module: no policy write is
    sent to the webhook, and the cluster report says so of each policy kind (after three
    readings, `--webhook-rules-sync-seconds` apart)."""

    def unsent() -> set[str]:
        found = cluster.get_json("clusterpolicyreport", "policy-attachment")
        return {
            r["resources"][0]["name"] for r in found.get("results") or () if r["policy"] == "PA-K02"
        }

    wait_until(lambda: "retrypolicies.policies.example.com" in unsent(), 20, "PA-K02")
    # The command reads the same (absent) configuration and says the same, at once.
    printed = json.loads(_report_command(cluster, "-A", "-o", "json").stdout)
    (cluster_wide,) = [r for r in printed["reports"] if not r["metadata"].get("namespace")]
    said = {r["resources"][0]["name"] for r in cluster_wide["results"] if r["policy"] == "PA-K02"}
    assert "retrypolicies.policies.example.com" in said


def test_churn_that_changes_no_finding_rewrites_no_report(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    def versions() -> dict[str, str]:
        listed = cluster.get_json("policyreport", "-A")["items"]
        listed += [cluster.get_json("clusterpolicyreport", "policy-attachment")]
        return {
            f"{i['metadata'].get('namespace', '')}/{i['metadata']['name']}": i["metadata"]["resourceVersion"]
            for i in listed
        }  # fmt: skip

    time.sleep(2)  # the last change of the previous test has settled
    before = versions()
    assert {"apps/policy-attachment", "reports/policy-attachment", "/policy-attachment"} <= set(
        before
    )
    cluster.kubectl("create", "namespace", "churn", check=False)
    deadline, rounds = time.monotonic() + 30, 0
    while time.monotonic() < deadline:
        rounds += 1
        cluster.apply(f"""
apiVersion: v1
kind: ConfigMap
metadata: {{name: churn, namespace: churn}}
data: {{round: "{rounds}"}}
---
apiVersion: v1
kind: Service
metadata: {{name: churn, namespace: churn, labels: {{round: "{rounds}"}}}}
spec: {{ports: [{{port: {8000 + rounds % 100}}}]}}
""")  # fmt: skip
        time.sleep(0.5)
    print(f"\n[e2e] {rounds} rounds of churn in 30s")
    assert versions() == before
    cluster.kubectl("delete", "namespace", "churn", "--wait=false", check=False)
