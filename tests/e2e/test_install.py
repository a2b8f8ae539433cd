"""docs/install.md's kustomization, every overlay and every component, against a real API server.

- Each rendering passes `kubectl apply --dry-run=server`: the server's own validation and
  defaulting. Objects of CRDs this suite does not install (the Prometheus Operator's,
  cert-manager's) meet schema-less stand-ins; PodDisruptionBudget and CronJob are sent at the
  versions 1.20 serves (`kustomizations.for_v1_20`). `components/match-conditions` needs 1.28
  and is checked statically only (tests/deploy/test_components.py).
- The RBAC of the page's kustomization is applied for real (and aggregated, as the controller
  manager would), and `kubectl auth can-i --as=<service account>` proves what the webhook and
  the certificate Job may do, and what they may not: no Secrets for the webhook, no other
  webhook configuration, no update, no delete.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from identities import apply_rbac, can_i
from webhook_harness import REPO

from tests.deploy import kustomizations as k

if TYPE_CHECKING:
    from cluster import LocalCluster

NAMESPACE = "policy-webhook"
WEBHOOK = f"system:serviceaccount:{NAMESPACE}:policy-webhook"
CERTS = f"system:serviceaccount:{NAMESPACE}:policy-webhook-certs"
VWC = "validatingwebhookconfigurations.admissionregistration.k8s.io"
MWC = "mutatingwebhookconfigurations.admissionregistration.k8s.io"
SERVER_CHECKED = [c for c in k.ALL_COMPONENTS if c not in k.NEWER_SERVER_ONLY]


def to_yaml(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


@pytest.fixture(scope="module")
def stand_ins(cluster: LocalCluster) -> Iterator[None]:
    names = [f"crd/{crd['metadata']['name']}" for crd in k.STAND_IN_CRDS]
    # Another module may have deleted the same stand-ins without waiting.
    cluster.kubectl("wait", "--for=delete", "--timeout=60s", *names, check=False)
    cluster.apply(k.STAND_IN_CRDS)
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
    yield
    cluster.kubectl("delete", "--ignore-not-found", "--timeout=60s", *names, check=False)


@pytest.fixture(scope="module")
def vendor_crds(cluster: LocalCluster) -> Iterator[None]:
    """The vendors' CRDs, so that `can-i` resolves their resources (and their other kinds)."""
    crds = [
        doc
        for name in ("envoy-gateway", "kuadrant")
        for doc in yaml.safe_load_all((REPO / "tests/realworld/crds" / f"{name}.yaml").read_text())
        if doc
    ]
    names = [f"crd/{crd['metadata']['name']}" for crd in crds]
    cluster.kubectl("wait", "--for=delete", "--timeout=60s", *names, check=False)
    cluster.apply(crds)
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
    yield
    cluster.kubectl("delete", "--ignore-not-found", "--timeout=60s", *names, check=False)


@pytest.fixture(scope="module")
def installed_rbac(cluster: LocalCluster, vendor_crds: None) -> list[dict[str, Any]]:
    """The page's kustomization's RBAC (webhook and certificate Job), applied and aggregated."""
    docs = k.render_text(k.install_doc_kustomization())
    apply_rbac(cluster, docs)
    return docs


def dry_run(cluster: LocalCluster, docs: list[dict[str, Any]]) -> None:
    sent = k.for_v1_20(docs)
    result = cluster.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=to_yaml(sent), check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(sent), result.stdout
    assert all(line.endswith("(server dry run)") for line in lines), result.stdout


def test_the_install_pages_kustomization_is_accepted_by_the_api_server(
    cluster: LocalCluster, stand_ins: None, installed_rbac: object
) -> None:
    dry_run(cluster, k.render_text(k.install_doc_kustomization()))


@pytest.mark.parametrize("overlay", ["self-managed", "cert-manager"])
def test_every_component_on_an_overlay_is_accepted_by_the_api_server(
    cluster: LocalCluster, stand_ins: None, installed_rbac: object, overlay: str
) -> None:
    dry_run(cluster, k.render(overlay, SERVER_CHECKED))


# --- what the webhook may do ---------------------------------------------------------------------

WEBHOOK_MAY = [
    ("get", f"{VWC}/policy-webhook"),
    ("patch", f"{VWC}/policy-webhook"),
    ("create", "selfsubjectrulesreviews.authorization.k8s.io"),
    ("create", "selfsubjectaccessreviews.authorization.k8s.io"),
    # Through the aggregated ClusterRole: the page's vendors, each policy kind by name.
    ("list", "ratelimitpolicies.kuadrant.io", "-A"),
    ("watch", "authpolicies.kuadrant.io", "-A"),
    ("list", "backendtrafficpolicies.gateway.envoyproxy.io", "-A"),
    ("watch", "securitypolicies.gateway.envoyproxy.io", "-A"),
    ("list", "backendtlspolicies.gateway.networking.k8s.io", "-A"),
    ("watch", "xbackendtrafficpolicies.gateway.networking.x-k8s.io", "-A"),
]
WEBHOOK_MAY_NOT = [
    ("get", "secrets", "-n", NAMESPACE),
    ("get", "secrets/policy-webhook-tls", "-n", NAMESPACE),
    ("get", "secrets/policy-webhook-ca", "-n", NAMESPACE),
    ("list", "secrets", "-A"),
    ("update", f"{VWC}/policy-webhook"),
    ("delete", f"{VWC}/policy-webhook"),
    ("patch", f"{VWC}/another-webhook"),
    ("get", f"{VWC}/another-webhook"),
    ("list", VWC),
    ("create", VWC),
    ("patch", f"{MWC}/policy-webhook"),
    ("patch", MWC),
    ("delete", "ratelimitpolicies.kuadrant.io", "-n", "apps"),
    ("patch", "ratelimitpolicies.kuadrant.io", "-n", "apps"),
    ("delete", "httproutes.gateway.networking.k8s.io", "-n", "apps"),
    ("delete", "services", "-n", "apps"),
    ("delete", "leases.coordination.k8s.io/policy-webhook", "-n", NAMESPACE),
    ("patch", "clusterroles.rbac.authorization.k8s.io/policy-webhook-policies"),
    # Named one by one: a vendor's other kinds are not read.
    ("list", "backends.gateway.envoyproxy.io", "-A"),
]


@pytest.mark.parametrize("check", WEBHOOK_MAY, ids=" ".join)
def test_the_webhook_may(
    cluster: LocalCluster, installed_rbac: object, check: tuple[str, ...]
) -> None:
    assert can_i(cluster, WEBHOOK, *check)


@pytest.mark.parametrize("check", WEBHOOK_MAY_NOT, ids=" ".join)
def test_the_webhook_may_not(
    cluster: LocalCluster, installed_rbac: object, check: tuple[str, ...]
) -> None:
    assert not can_i(cluster, WEBHOOK, *check)


# --- what the certificate Job may do -------------------------------------------------------------

CERTS_MAY = [
    ("get", "secrets/policy-webhook-tls", "-n", NAMESPACE),
    ("update", "secrets/policy-webhook-tls", "-n", NAMESPACE),
    ("get", "secrets/policy-webhook-ca", "-n", NAMESPACE),
    ("update", "secrets/policy-webhook-ca", "-n", NAMESPACE),
    ("create", "secrets", "-n", NAMESPACE),
    ("get", f"{VWC}/policy-webhook"),
    ("patch", f"{VWC}/policy-webhook"),
    ("get", f"{MWC}/policy-webhook"),
    ("patch", f"{MWC}/policy-webhook"),
]
CERTS_MAY_NOT = [
    ("get", "secrets/another-secret", "-n", NAMESPACE),
    ("list", "secrets", "-n", NAMESPACE),
    ("watch", "secrets", "-n", NAMESPACE),
    ("get", "secrets/policy-webhook-tls", "-n", "default"),
    ("create", "secrets", "-n", "default"),
    ("delete", "secrets/policy-webhook-tls", "-n", NAMESPACE),
    ("patch", f"{VWC}/another-webhook"),
    ("update", f"{VWC}/policy-webhook"),
    ("delete", f"{MWC}/policy-webhook"),
    ("list", "services", "-A"),
    ("create", "pods", "-n", NAMESPACE),
]


@pytest.mark.parametrize("check", CERTS_MAY, ids=" ".join)
def test_the_certificate_job_may(
    cluster: LocalCluster, installed_rbac: object, check: tuple[str, ...]
) -> None:
    assert can_i(cluster, CERTS, *check)


@pytest.mark.parametrize("check", CERTS_MAY_NOT, ids=" ".join)
def test_the_certificate_job_may_not(
    cluster: LocalCluster, installed_rbac: object, check: tuple[str, ...]
) -> None:
    assert not can_i(cluster, CERTS, *check)
