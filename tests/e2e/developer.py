"""A developer the webhook refuses, and the webhook that refuses them (SPEC §8.1, §8.2, §2.5).

The developer is impersonated with `kubectl --as`; a Role lets their group create RetryPolicies
in `apps` and nothing else. `webhook_for_developer` runs the webhook in cluster mode as its
ServiceAccount, with the RBAC the manifests ship, registered with the shipped webhook
configurations. The decision-log and Event tests and the audit-log tests share them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from identities import apply_rbac, service_account_kubeconfig
from webhook_harness import WebhookProcess, apply_example_cluster, kubectl, registered

from tests.deploy import kustomizations as k

if TYPE_CHECKING:
    from cluster import LocalCluster

NAMESPACE = "policy-webhook"  # the shipped ServiceAccount's
USER, GROUP = "jane@example.com", "app-team"
AS_DEVELOPER = (f"--as={USER}", f"--as-group={GROUP}")
WRITER = f"""
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: retrypolicy-writer, namespace: apps}}
rules:
- apiGroups: [policies.example.com]
  resources: [retrypolicies]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: retrypolicy-writer, namespace: apps}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: retrypolicy-writer}}
subjects:
- {{apiGroup: rbac.authorization.k8s.io, kind: Group, name: {GROUP}}}
"""
# The one denial of `broken_policy`, as kubectl, the decision log and the audit annotations
# spell it.
MESSAGE = "[PA-S01] spec.targetRef: set together with spec.targetRefs; keep one of them"
T = TypeVar("T")


def broken_policy(name: str) -> str:
    """`targetRef` and `targetRefs` together: PA-S01, denied by default."""
    return f"""
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {{name: {name}, namespace: apps}}
spec:
  targetRef: {{group: gateway.networking.k8s.io, kind: HTTPRoute, name: storefront}}
  targetRefs:
  - {{group: gateway.networking.k8s.io, kind: HTTPRoute, name: storefront}}
  default: {{maxRetries: 9}}
"""


def deny_as_developer(cluster: LocalCluster, name: str, *flags: str) -> str:
    """`kubectl create [flags]` of `broken_policy(name)` as the developer, refused for PA-S01;
    kubectl's stderr."""
    done = kubectl(cluster, *AS_DEVELOPER, "create", *flags, "-f", "-", input=broken_policy(name))
    assert done.returncode == 1, done.stdout
    assert "is invalid: spec.targetRef: [PA-S01]" in done.stderr, done.stderr
    return str(done.stderr)


@contextmanager
def webhook_for_developer(
    cluster: LocalCluster, workdir: Path, name: str, *args: str
) -> Iterator[WebhookProcess]:
    """The webhook (`serve` with `args`, no reconciler, no webhook-rules keeper) over the
    example cluster and the developer's Role, registered as `policy-webhook-<name>` for the
    block."""
    apply_example_cluster(cluster)
    apply_rbac(cluster, k.render("self-managed"))
    cluster.apply(WRITER)
    kubeconfig = service_account_kubeconfig(
        cluster, NAMESPACE, "policy-webhook", workdir / "sa.kubeconfig"
    )
    process = WebhookProcess(
        cluster,
        workdir,
        name=name,
        args=["--kubeconfig", str(kubeconfig), "--no-reconcile", "--no-sync-webhook-rules",
              *args],
    )  # fmt: skip
    process.start()
    try:
        with registered(cluster, process, suffix=name):
            yield process
    finally:
        process.stop()
        print(f"\n[e2e] webhook log: {process.log_path}")
        cluster.kubectl("delete", "-f", "-", "--ignore-not-found", input=WRITER, check=False)


def wait_for(find: Callable[[], T | None], timeout: float = 10.0) -> T:
    """The first thing `find()` finds, polled every 0.1 s; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while (found := find()) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing found in {timeout}s")
        time.sleep(0.1)
    return found
