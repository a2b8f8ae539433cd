"""What an admin sees through the real `kubectl`: denials, warnings, dry runs, annotations.

The webhook runs as its own process in cluster mode against the real API server, registered
with the shipped webhook configurations (pointed at it by URL). It runs with
`--no-reconcile`, so every annotation seen here was written at admission by `/mutate`.
Every denial and warning is also held against `docs/kubectl-output.md`, which is therefore
exactly what the suite saw (`UPDATE_GOLDEN=1` rewrites it after a deliberate change).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from webhook_harness import (
    EXAMPLES,
    REPO,
    WebhookProcess,
    apply_example_cluster,
    kubectl,
    registered,
)

from webhook.core.model.settings import Settings

if TYPE_CHECKING:
    from cluster import LocalCluster

GOLDEN = REPO / "docs" / "kubectl-output.md"
ANNOTATION = Settings().annotation_key
# Rejected by the CRD schema before any webhook is called (maxItems, type: object).
SCHEMA_REJECTS = {"s03-seventeen-targetrefs.yaml", "s08-override-not-an-object.yaml"}
BROKEN = sorted(p for p in (EXAMPLES / "broken").glob("*.yaml"))
SEEN: dict[str, str] = {}  # golden section title → kubectl output


@pytest.fixture(scope="module")
def webhook(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookProcess]:
    apply_example_cluster(cluster)
    process = WebhookProcess(cluster, tmp_path_factory.mktemp("admission"), args=["--no-reconcile"])
    process.start()
    try:
        with registered(cluster, process):
            yield process
    finally:
        process.stop()
        print(f"\n[e2e] webhook log: {process.log_path}")


def expected_findings(path: Path) -> list[dict[str, Any]]:
    """What `policy-webhook check` says offline about this file against the example cluster."""
    done = subprocess.run(
        [sys.executable, "-m", "webhook.shell.cli.main", "check", "-o", "json", "examples/cluster", str(path.relative_to(REPO))],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    report = json.loads(done.stdout)
    (checked,) = [p for p in report["policies"] if p["file"] == str(path.relative_to(REPO))]
    return list(checked["findings"])


@pytest.mark.parametrize("path", BROKEN, ids=lambda p: p.stem)
def test_kubectl_apply_of_a_broken_policy_says_what_check_says(
    cluster: LocalCluster, webhook: WebhookProcess, path: Path
) -> None:
    relative = str(path.relative_to(REPO))
    done = kubectl(cluster, "apply", "-f", relative)
    SEEN[f"$ kubectl apply -f {relative}"] = (done.stderr + done.stdout).strip()
    try:
        if path.name in SCHEMA_REJECTS:
            assert done.returncode == 1
            assert "admission webhook" not in done.stderr
            return
        findings = expected_findings(path)
        denials = [f for f in findings if f["action"] == "deny"]
        if denials:
            assert done.returncode == 1, done.stdout
            # 422 Invalid with causes: kubectl prints them as it prints its own field errors.
            assert f'The {path_kind(path)} "{path_name(path)}" is invalid:' in done.stderr
            for finding in denials:
                assert (
                    f"{finding['field']}: [{finding['rule']}] {finding['message']}" in done.stderr
                )
        else:
            assert done.returncode == 0, done.stderr
            for finding in findings:
                assert (
                    f"Warning: [{finding['rule']}] {finding['field']}: {finding['message']}"
                    in done.stderr
                )
    finally:
        kubectl(cluster, "delete", "-f", relative, "--ignore-not-found")


def path_kind(path: Path) -> str:
    return str(yaml.safe_load(path.read_text())["kind"])


def path_name(path: Path) -> str:
    return str(yaml.safe_load(path.read_text())["metadata"]["name"])


def policy_yaml(name: str, spec: str, kind: str = "RetryPolicy", namespace: str = "apps") -> str:
    return f"apiVersion: policies.example.com/v1alpha1\nkind: {kind}\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n{spec}"


def test_a_second_direct_policy_on_a_service_warns_that_it_is_conflicted(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    text = policy_yaml(
        "foo-health-3",
        "  targetRefs: [{group: '', kind: Service, name: foo}]\n  path: /ready\n",
        kind="HealthCheckPolicy",
    )
    done = kubectl(cluster, "apply", "-f", "-", input=text)
    SEEN["$ kubectl apply -f foo-health-3.yaml   # a third Direct policy on Service apps/foo"] = (
        done.stderr + done.stdout
    ).strip()
    try:
        assert done.returncode == 0, done.stderr
        assert (
            "Warning: [PA-C01] spec.targetRefs[0]: foo-health targets it too and wins (older); "
            "this one is Conflicted" in done.stderr
        )
    finally:
        kubectl(
            cluster,
            "delete",
            "healthcheckpolicy",
            "foo-health-3",
            "-n",
            "apps",
            "--ignore-not-found",
        )


def test_updating_a_policy_prints_its_impact(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    original = cluster.get_json("retrypolicy", "gw-retry", "-n", "infra")
    changed = {
        "apiVersion": original["apiVersion"], "kind": original["kind"],
        "metadata": {"name": "gw-retry", "namespace": "infra"},
        "spec": {**original["spec"], "override": {"maxRetries": 2}},
    }  # fmt: skip
    done = kubectl(cluster, "apply", "-f", "-", input=yaml.safe_dump(changed))
    SEEN["$ kubectl apply -f gw-retry.yaml   # override maxRetries 3 → 2 on Gateway infra/gw"] = (
        done.stderr + done.stdout
    ).strip()
    try:
        assert done.returncode == 0, done.stderr
        assert "Warning: [PA-C04] changes maxRetries on" in done.stderr
        assert "Gateway/infra/gw" in done.stderr and "3→2" in done.stderr
        assert (
            "Warning: [PA-C03] spec.override: beats 1 more specific policy: apps/storefront-retry"
            in done.stderr
        )
    finally:
        restore = {**changed, "spec": original["spec"]}
        assert kubectl(cluster, "apply", "-f", "-", input=yaml.safe_dump(restore)).returncode == 0


def annotations_everywhere(cluster: LocalCluster) -> dict[str, Any]:
    out = {}
    for resource in ("gateways", "httproutes", "grpcroutes", "services", "retrypolicies"):
        for item in cluster.get_json(resource, "-A")["items"]:
            meta = item["metadata"]
            out[f"{resource}/{meta['namespace']}/{meta['name']}"] = (
                meta.get("annotations") or {},
                item.get("spec"),
            )
    return out


def test_dry_run_server_changes_nothing_anywhere(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    before = annotations_everywhere(cluster)
    policy = policy_yaml(
        "dry",
        "  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: storefront}]\n  default: {maxRetries: 9}\n",
    )
    done = kubectl(cluster, "apply", "--dry-run=server", "-f", "-", input=policy)
    assert done.returncode == 0, done.stderr
    assert "Warning: [PA-C04] changes maxRetries" not in done.stderr  # the route's override wins
    route = (EXAMPLES / "reviews" / "create-route.json").read_text()
    new_route = json.loads(route)["request"]["object"]
    done = kubectl(
        cluster, "apply", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(new_route)
    )
    assert done.returncode == 0, done.stderr
    assert ANNOTATION in json.loads(done.stdout)["metadata"]["annotations"], (
        "the dry run shows the mutation"
    )
    assert kubectl(cluster, "get", "retrypolicy", "dry", "-n", "apps").returncode == 1
    assert (
        kubectl(cluster, "get", "httproute", new_route["metadata"]["name"], "-n", "apps").returncode
        == 1
    )
    assert annotations_everywhere(cluster) == before


def explain_json(cluster: LocalCluster, target: str, namespace: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "webhook.shell.cli.main", "explain", target, "-n", namespace,
         "--kubeconfig", str(cluster.kubeconfig), "-o", "json"],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return str(done.stdout).strip()


def per_path(policies: dict[str, Any]) -> dict[tuple[str, tuple[str, ...]], Any]:
    """(kind, path) → effective value and sources: the annotation and `explain -o json` group
    contexts differently (explain also by losers), and say the same of each one."""
    return {
        (kind, tuple(path)): (context["effective"], context.get("sources"))
        for kind, entry in policies.items()
        for context in entry["contexts"]
        for path in context["paths"]
    }


def test_a_new_route_is_annotated_at_admission_with_what_explain_says(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    route = json.loads((EXAMPLES / "reviews" / "create-route.json").read_text())["request"][
        "object"
    ]
    assert "annotations" not in route["metadata"]
    done = kubectl(cluster, "apply", "-f", "-", input=json.dumps(route))
    try:
        assert done.returncode == 0, done.stderr
        stored = cluster.get_json("httproute", route["metadata"]["name"], "-n", "apps")
        value = stored["metadata"]["annotations"][ANNOTATION]
        assert json.loads(value)["version"] == 1
        explained = json.loads(
            explain_json(cluster, f"HTTPRoute/{route['metadata']['name']}", "apps")
        )
        assert per_path(json.loads(value)["policies"]) == per_path(explained["policies"])
        assert stored["spec"]["parentRefs"] == route["spec"]["parentRefs"], (
            "nothing else is touched"
        )
    finally:
        kubectl(
            cluster,
            "delete",
            "httproute",
            route["metadata"]["name"],
            "-n",
            "apps",
            "--ignore-not-found",
        )


def test_moving_a_route_to_a_gateway_that_rejects_it_removes_the_annotation(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    name = "moving-route"
    route = {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": "apps", "annotations": {"team.example.com/owner": "shop"}},
        "spec": {"parentRefs": [{"name": "gw", "namespace": "infra"}], "rules": [{"backendRefs": [{"name": "bar", "port": 8080}]}]},
    }  # fmt: skip
    try:
        assert kubectl(cluster, "create", "-f", "-", input=json.dumps(route)).returncode == 0
        assert (
            ANNOTATION
            in cluster.get_json("httproute", name, "-n", "apps")["metadata"]["annotations"]
        )
        moved = json.dumps(
            [
                {
                    "op": "replace",
                    "path": "/spec/parentRefs",
                    "value": [{"name": "internal", "namespace": "infra"}],
                }
            ]
        )
        assert (
            kubectl(
                cluster, "patch", "httproute", name, "-n", "apps", "--type=json", "-p", moved
            ).returncode
            == 0
        )
        annotations = cluster.get_json("httproute", name, "-n", "apps")["metadata"]["annotations"]
        assert annotations == {"team.example.com/owner": "shop"}, "ours removed, the owner's kept"
    finally:
        kubectl(cluster, "delete", "httproute", name, "-n", "apps", "--ignore-not-found")


def test_deleting_a_targeted_service_warns_which_policies_lose_it(
    cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    service = cluster.get_json("service", "bar", "-n", "apps")
    policy = policy_yaml(
        "bar-health",
        "  targetRefs: [{group: '', kind: Service, name: bar}]\n  path: /ready\n",
        kind="HealthCheckPolicy",
    )
    assert kubectl(cluster, "apply", "-f", "-", input=policy).returncode == 0
    try:
        done = kubectl(cluster, "delete", "service", "bar", "-n", "apps")
        SEEN["$ kubectl delete service bar -n apps   # a HealthCheckPolicy still targets it"] = (
            done.stderr + done.stdout
        ).strip()
        assert done.returncode == 0, done.stderr
        assert (
            "Warning: [PA-C05] Service/apps/bar is still targeted by HealthCheckPolicy apps/bar-health; they become TargetNotFound"
            in done.stderr
        )
    finally:
        kubectl(
            cluster, "delete", "healthcheckpolicy", "bar-health", "-n", "apps", "--ignore-not-found"
        )
        keep = {k: service["metadata"][k] for k in ("name", "namespace")}
        spec = {k: v for k, v in service["spec"].items() if k in ("ports", "selector")}
        kubectl(
            cluster,
            "apply",
            "-f",
            "-",
            input=json.dumps(
                {"apiVersion": "v1", "kind": "Service", "metadata": keep, "spec": spec}
            ),
        )


def test_zz_docs_show_exactly_what_kubectl_printed() -> None:
    """Last in the module: the golden page of kubectl output equals what this run saw.

    Warnings come first, as on a terminal: kubectl prints them when the response arrives.
    """
    if not SEEN:
        pytest.fail("no kubectl output was recorded: the tests above did not run")
    body = "".join(
        f"```console\n{command}\n{output}\n```\n\n" for command, output in sorted(SEEN.items())
    )
    text = GOLDEN.read_text(encoding="utf-8") if GOLDEN.exists() else ""
    head = text.split("<!-- BEGIN GENERATED -->\n")[0] if text else "# kubectl output\n\n"
    expected = f"{head}<!-- BEGIN GENERATED -->\n{body}<!-- END GENERATED -->\n"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(expected, encoding="utf-8")
        return
    assert text == expected, (
        "docs/kubectl-output.md differs from what kubectl printed; rerun with UPDATE_GOLDEN=1 and review"
    )
