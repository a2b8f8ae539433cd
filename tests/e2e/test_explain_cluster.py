"""`policy-webhook explain` against the real API server, with kubectl's connection flags.

A small world in a namespace of its own: a Gateway with an override, a route with a default
it loses. `--kubeconfig`, `--context` (whose namespace is the default `-n`), the hint naming the
namespace an object is in, explain from a policy, the kubectl plugin, and a user RBAC refuses.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from convergence import install_policy_crds

from tests.fixtures.console import Ran, path_with_scripts, run

if TYPE_CHECKING:
    from cluster import LocalCluster

NS = "explain-e2e"
WORLD = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: {NS}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: {NS}}}
spec: {{controllerName: example.com/{NS}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: {NS}}}
spec:
  gatewayClassName: {NS}
  listeners: [{{name: http, protocol: HTTP, port: 80}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: shop, namespace: {NS}}}
spec:
  parentRefs: [{{name: gw}}]
---
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {{name: gw-retry, namespace: {NS}}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]
  override: {{maxRetries: 3}}
---
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {{name: shop-retry, namespace: {NS}}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: shop}}]
  default: {{maxRetries: 5, retryOn: ["503"]}}
"""


@pytest.fixture(scope="module")
def world(cluster: LocalCluster) -> Iterator[LocalCluster]:
    install_policy_crds(cluster)
    cluster.apply(WORLD)
    try:
        yield cluster
    finally:
        for doc in reversed([d for d in yaml.safe_load_all(WORLD) if d]):
            if doc["kind"] == "Namespace":
                continue  # v1.20 without a controller manager never finishes deleting one
            where = ["-n", NS] if doc["metadata"].get("namespace") else []
            resource = f"{doc['kind'].lower()}.{doc['apiVersion'].split('/')[0]}"
            cluster.kubectl("delete", resource, doc["metadata"]["name"], *where,
                            "--ignore-not-found", check=False)  # fmt: skip


def explain(world: LocalCluster, *args: str, kubeconfig: Path | None = None) -> Ran:
    return run("explain", *args, "--kubeconfig", str(kubeconfig or world.kubeconfig), timeout=120)


def with_contexts(world: LocalCluster, tmp_path: Path) -> Path:
    """The admin kubeconfig, its current context a dead server, plus a context for `NS`."""
    config: dict[str, Any] = yaml.safe_load(world.kubeconfig.read_text())
    (context,) = config["contexts"]
    config["contexts"] = [
        {"name": "dead", "context": {"cluster": "dead", "user": context["context"]["user"]}},
        {"name": "shop", "context": {**context["context"], "namespace": NS}},
    ]
    config["clusters"].append({"name": "dead", "cluster": {"server": "https://127.0.0.1:1"}})
    config["current-context"] = "dead"
    path = tmp_path / "contexts.kubeconfig"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_explain_reads_the_cluster_named_by_the_kubeconfig(world: LocalCluster) -> None:
    ran = explain(world, "HTTPRoute", "shop", "-n", NS)
    assert ran.code == 0, ran
    assert ran.out.startswith(f"HTTPRoute/{NS}/shop\n")
    (line,) = [x for x in ran.out.splitlines() if x.strip().startswith("maxRetries")]
    assert line.split() == ["maxRetries", "=", "3", "from", "override", f"{NS}/gw-retry", "at",
                            f"Gateway/{NS}/gw"]  # fmt: skip
    assert f"lost: {NS}/shop-retry default maxRetries at HTTPRoute/{NS}/shop" in ran.out


def test_the_context_chooses_the_cluster_and_the_namespace(
    world: LocalCluster, tmp_path: Path
) -> None:
    config = with_contexts(world, tmp_path)
    dead = explain(world, "HTTPRoute/shop", kubeconfig=config)
    assert dead.code == 2 and "cannot reach the API server at https://127.0.0.1:1" in dead.err
    ran = explain(world, "HTTPRoute/shop", "--context", "shop", kubeconfig=config)
    assert ran.code == 0, ran  # no -n: the context's namespace
    assert ran.out.startswith(f"HTTPRoute/{NS}/shop\n")


def test_an_object_looked_for_in_another_namespace_is_hinted(world: LocalCluster) -> None:
    ran = explain(world, "HTTPRoute/shop")  # the admin context names no namespace: default
    assert ran.code == 2, ran
    assert ran.err.strip().endswith(f"exists in namespace {NS} (use -n {NS})")
    assert "Traceback" not in ran.err


def test_explain_from_a_policy_against_the_cluster(world: LocalCluster) -> None:
    ran = explain(world, "RetryPolicy/shop-retry", "-n", NS, "-o", "json")
    assert ran.code == 0, ran
    document = json.loads(ran.out)
    (route,) = [o for o in document["objects"] if o["ref"] == f"HTTPRoute/{NS}/shop"]
    (context,) = route["contexts"]
    assert [w["field"] for w in context["wins"]] == ["/retryOn"]
    (loss,) = context["losses"]
    assert loss["field"] == "maxRetries" and loss["to"]["policy"] == f"{NS}/gw-retry"


def test_a_user_rbac_refuses_gets_one_line(world: LocalCluster) -> None:
    nobody = world.create_user("explain-nobody")
    ran = explain(world, "HTTPRoute/shop", "-n", NS, kubeconfig=nobody)
    assert ran.code == 2, ran
    assert "not allowed to list customresourcedefinitions.apiextensions.k8s.io" in ran.err
    assert len(ran.err.strip().splitlines()) == 1 and "Traceback" not in ran.err


def test_kubectl_policy_attachment_passes_kubectls_flags_through(world: LocalCluster) -> None:
    kubectl = shutil.which("kubectl") or world.kubectl_path
    done = subprocess.run(
        [kubectl, "policy-attachment", "explain", "RetryPolicy", "gw-retry", "-n", NS,
         "--kubeconfig", str(world.kubeconfig), "--request-timeout", "20s"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PATH": path_with_scripts()},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"RetryPolicy.policies.example.com {NS}/gw-retry")
    assert f"HTTPRoute/{NS}/shop" in done.stdout
