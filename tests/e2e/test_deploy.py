"""The shipped manifests and certs/install.sh against a real API server (v1.20, RBAC on).

- Each overlay passes `kubectl apply --dry-run=server`: the API server's own validation and
  defaulting, not just YAML that looks right.
- The ServiceAccount and RBAC are applied for real, and `kubectl auth can-i --as=<the service
  account>` proves every permission the webhook needs and the absence of the ones it must not
  have.
- certs/install.sh runs against the server: Secret created, caBundle patched into every webhook,
  kept across a re-apply of the manifests, idempotent, and a CA rotation with overlap.

Adaptations for this server, each the smallest that works (see `kustomizations.for_v1_20`):
- PodDisruptionBudget `policy/v1` (v1.21+) is sent as `policy/v1beta1` (same fields here).
- cert-manager is not installed: minimal stand-in CRDs for Issuer and Certificate (schema-less)
  let the cert-manager overlay's objects through the dry run.
- `kubectl auth can-i` resolves a resource through discovery (an unknown one is sent as a bare
  resource name with no group), so the example policy CRDs of examples/cluster are created
  first if missing.
- The webhook configurations that install.sh patches are the shipped ones under another name
  and with an objectSelector that matches nothing, so that they never intercept the requests of
  other tests sharing this API server.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import identities
import pytest
import yaml
from cryptography import x509

from tests.deploy import kustomizations as k

if TYPE_CHECKING:
    from cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "certs" / "install.sh"
NAMESPACE = "policy-webhook"
SERVICE_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:policy-webhook"
GW = "gateway.networking.k8s.io"
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
RBAC_KINDS = (
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
)
TEST_CONFIG_NAME = "policy-webhook-e2e-deploy"
INERT_SELECTOR = {"matchLabels": {"policy-attachment.dev/e2e-deploy-never": "true"}}

STAND_IN_CRDS = [
    k.stand_in_crd("cert-manager.io", kind, plural)
    for kind, plural in (("Issuer", "issuers"), ("Certificate", "certificates"))
]


# --- helpers -----------------------------------------------------------------------------------


def render(cluster: LocalCluster, overlay: str) -> list[dict[str, Any]]:
    """`kubectl kustomize` of an overlay (client-side; the server is not involved)."""
    out = cluster.kubectl("kustomize", str(ROOT / "manifests" / "overlays" / overlay)).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def to_yaml(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


def can_i(cluster: LocalCluster, verb: str, resource: str, *scope: str) -> bool:
    """`kubectl auth can-i` as the webhook's service account (`identities.can_i`)."""
    return identities.can_i(cluster, SERVICE_ACCOUNT, verb, resource, *scope)


def install(cluster: LocalCluster, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "KUBECTL": cluster.kubectl_path,
        "KUBECONFIG": str(cluster.kubeconfig),
        "PYTHON": sys.executable,
    }
    return subprocess.run(
        ["bash", str(INSTALL), "--webhook-config", TEST_CONFIG_NAME, "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def ca_bundles(cluster: LocalCluster) -> dict[str, bytes]:
    """caBundle of every webhook of both test configurations, decoded, by webhook name."""
    found = {}
    for kind in WEBHOOK_KINDS:
        for hook in cluster.get_json(kind.lower(), TEST_CONFIG_NAME)["webhooks"]:
            bundle = hook["clientConfig"].get("caBundle")
            found[hook["name"]] = base64.b64decode(bundle) if bundle else b""
    return found


def secret(cluster: LocalCluster) -> dict[str, Any]:
    found: dict[str, Any] = cluster.get_json("secret", "policy-webhook-tls", "-n", NAMESPACE)
    return found


POLICY_CRDS = ROOT / "examples" / "cluster" / "00-policy-crds.yaml"


# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rbac_applied(cluster: LocalCluster) -> list[dict[str, Any]]:
    """The overlay's Namespace, ServiceAccount and RBAC objects, applied for real."""
    docs = [d for d in render(cluster, "self-managed") if d["kind"] in RBAC_KINDS]
    cluster.apply(to_yaml(docs))
    return docs


@pytest.fixture(scope="module")
def policy_crds(cluster: LocalCluster) -> None:
    """The example policy CRDs, so that kubectl can resolve retrypolicies.policies.example.com.

    `create`, not `apply`: other tests may have installed them already, and their copy wins.
    """
    cluster.kubectl("create", "-f", str(POLICY_CRDS), check=False)
    names = [
        f"crd/{d['metadata']['name']}"
        for d in yaml.safe_load_all(POLICY_CRDS.read_text())
        if d and d.get("kind") == "CustomResourceDefinition"
    ]
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)


@pytest.fixture(scope="module")
def cert_manager_stand_in(cluster: LocalCluster) -> Iterator[None]:
    cluster.apply(to_yaml(STAND_IN_CRDS))
    names = [f"crd/{crd['metadata']['name']}" for crd in STAND_IN_CRDS]
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
    yield
    cluster.kubectl("delete", "--ignore-not-found", "--wait=false", *names)


@pytest.fixture(scope="module")
def test_configs(cluster: LocalCluster, rbac_applied: object) -> Iterator[str]:
    """The shipped webhook configurations, renamed and inert, applied for real; YAML returned."""
    docs = []
    for doc in render(cluster, "self-managed"):
        if doc["kind"] in WEBHOOK_KINDS:
            doc["metadata"]["name"] = TEST_CONFIG_NAME
            for hook in doc["webhooks"]:
                hook["objectSelector"] = INERT_SELECTOR
            docs.append(doc)
    text = to_yaml(docs)
    cluster.apply(text)
    yield text
    for kind in WEBHOOK_KINDS:
        cluster.kubectl("delete", kind.lower(), TEST_CONFIG_NAME, "--ignore-not-found")


@pytest.fixture(scope="module")
def installed(
    cluster: LocalCluster, test_configs: str, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """certs/install.sh run once against the server; its --out folder."""
    out = tmp_path_factory.mktemp("install") / "certs"
    started = time.monotonic()
    result = install(cluster, out)
    assert result.returncode == 0, result.stderr
    print(f"\n[e2e] certs/install.sh took {time.monotonic() - started:.1f}s")
    return out


# --- server-side dry run -----------------------------------------------------------------------


@pytest.mark.parametrize("overlay", ["self-managed", "cert-manager"])
def test_overlay_passes_server_side_dry_run(
    cluster: LocalCluster, rbac_applied: object, cert_manager_stand_in: None, overlay: str
) -> None:
    docs = k.for_v1_20(render(cluster, overlay))
    result = cluster.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=to_yaml(docs), check=False
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(docs), result.stdout
    assert all(line.endswith("(server dry run)") for line in lines), result.stdout


def test_dry_run_keeps_every_webhook_setting(cluster: LocalCluster, rbac_applied: object) -> None:
    """The server accepts the webhooks as written: nothing dropped or defaulted away."""
    docs = [d for d in render(cluster, "self-managed") if d["kind"] in WEBHOOK_KINDS]
    for doc in docs:
        result = cluster.kubectl(
            "apply", "--dry-run=server", "-o", "json", "-f", "-", input=to_yaml([doc])
        )
        served = yaml.safe_load(result.stdout)
        for sent, back in zip(doc["webhooks"], served["webhooks"], strict=True):
            for field in (
                "name",
                "clientConfig",
                "failurePolicy",
                "sideEffects",
                "timeoutSeconds",
                "admissionReviewVersions",
                "namespaceSelector",
                "rules",
                "reinvocationPolicy",
            ):
                assert back.get(field) == sent.get(field), (sent["name"], field)
            assert "matchConditions" not in back


# --- RBAC, proven by the authorizer -----------------------------------------------------------

ROUTES = ("httproutes", "grpcroutes", "tlsroutes", "tcproutes", "udproutes")
ALLOWED = [
    ("list", f"httproutes.{GW}", "-A"),
    ("watch", f"httproutes.{GW}", "-A"),
    ("get", f"gateways.{GW}", "-n", "apps"),
    ("list", f"gatewayclasses.{GW}"),
    ("watch", f"listenersets.{GW}", "-A"),
    ("list", f"referencegrants.{GW}", "-A"),
    ("watch", "customresourcedefinitions.apiextensions.k8s.io"),
    ("list", "services", "-A"),
    ("watch", "namespaces"),
    ("list", "retrypolicies.policies.example.com", "-A"),
    ("watch", "colorpolicies.policies.example.com", "-A"),
    ("patch", "services", "-n", "apps"),
    ("patch", f"gateways.{GW}", "-n", "apps"),
    ("patch", f"gatewayclasses.{GW}"),
    ("patch", f"listenersets.{GW}", "-n", "apps"),
    *[("patch", f"{route}.{GW}", "-n", "apps") for route in ROUTES],
    ("get", "leases.coordination.k8s.io/policy-webhook", "-n", NAMESPACE),
    ("update", "leases.coordination.k8s.io/policy-webhook", "-n", NAMESPACE),
    ("create", "leases.coordination.k8s.io", "-n", NAMESPACE),
    # Events of denied and warned policy writes (SPEC 8.2), in any namespace, in both APIs.
    ("create", "events.events.k8s.io", "-n", "apps"),
    ("patch", "events.events.k8s.io", "-n", "default"),
    ("create", "events", "-n", "apps"),
    ("patch", "events", "-n", "apps"),
]
DENIED = [
    ("get", "secrets", "-n", NAMESPACE),
    ("list", "secrets", "-A"),
    ("watch", "secrets", "-A"),
    ("delete", "services", "-n", "apps"),
    ("create", "services", "-n", "apps"),
    ("update", "services", "-n", "apps"),
    ("patch", "deployments.apps", "-n", NAMESPACE),
    ("patch", "namespaces"),
    ("patch", f"referencegrants.{GW}", "-n", "apps"),
    ("patch", "retrypolicies.policies.example.com", "-n", "apps"),  # policies: never mutated
    ("delete", f"httproutes.{GW}", "-n", "apps"),
    ("update", f"httproutes.{GW}", "-n", "apps"),
    ("create", "customresourcedefinitions.apiextensions.k8s.io"),
    ("patch", "validatingwebhookconfigurations.admissionregistration.k8s.io"),
    ("list", "configmaps", "-n", NAMESPACE),
    ("get", "pods", "-n", NAMESPACE),
    ("create", "leases.coordination.k8s.io", "-n", "default"),
    ("get", "leases.coordination.k8s.io/policy-webhook", "-n", "default"),
    ("update", "leases.coordination.k8s.io/another-lease", "-n", NAMESPACE),
    ("delete", "leases.coordination.k8s.io/policy-webhook", "-n", NAMESPACE),
    ("list", "leases.coordination.k8s.io", "-n", NAMESPACE),
    ("list", "events.events.k8s.io", "-A"),
    ("get", "events", "-n", "apps"),
    ("update", "events.events.k8s.io", "-n", "apps"),
    ("delete", "events", "-n", "apps"),
]


@pytest.mark.parametrize("check", ALLOWED, ids=" ".join)
def test_service_account_may(
    cluster: LocalCluster, rbac_applied: object, policy_crds: None, check: tuple[str, ...]
) -> None:
    assert can_i(cluster, *check)


@pytest.mark.parametrize("check", DENIED, ids=" ".join)
def test_service_account_may_not(
    cluster: LocalCluster, rbac_applied: object, policy_crds: None, check: tuple[str, ...]
) -> None:
    assert not can_i(cluster, *check)


# --- certs/install.sh --------------------------------------------------------------------------


def test_install_creates_the_tls_secret(cluster: LocalCluster, installed: Path) -> None:
    found = secret(cluster)
    assert found["type"] == "kubernetes.io/tls"
    assert base64.b64decode(found["data"]["tls.crt"]) == (installed / "tls.crt").read_bytes()
    assert base64.b64decode(found["data"]["tls.key"]) == (installed / "tls.key").read_bytes()
    # Applied server-side: no copy of the private key in a last-applied annotation.
    annotations = found["metadata"].get("annotations") or {}
    assert "kubectl.kubernetes.io/last-applied-configuration" not in annotations


def test_install_patches_the_ca_bundle_into_every_webhook(
    cluster: LocalCluster, installed: Path
) -> None:
    bundles = ca_bundles(cluster)
    assert set(bundles) == {
        "policies.policy-attachment.dev",
        "policy-deletes.policy-attachment.dev",
        "target-deletes.policy-attachment.dev",
        "annotate.policy-attachment.dev",
    }
    assert set(bundles.values()) == {(installed / "ca-bundle.crt").read_bytes()}
    # The bundle in the cluster is the CA of the certificate in the Secret, for the Service name.
    (ca,) = x509.load_pem_x509_certificates(next(iter(bundles.values())))
    served = x509.load_pem_x509_certificate(base64.b64decode(secret(cluster)["data"]["tls.crt"]))
    served.verify_directly_issued_by(ca)
    names = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "policy-webhook.policy-webhook.svc" in names.get_values_for_type(x509.DNSName)


def test_the_ca_bundle_survives_a_re_apply_of_the_manifests(
    cluster: LocalCluster, test_configs: str, installed: Path
) -> None:
    before = ca_bundles(cluster)
    cluster.apply(test_configs)
    assert ca_bundles(cluster) == before
    assert all(before.values())


def test_running_install_again_changes_nothing(cluster: LocalCluster, installed: Path) -> None:
    # Compared by content, not resourceVersion: on the v1.20 test server the first server-side
    # re-apply of an identical Secret bumps its resourceVersion once (later ones do not).
    data = secret(cluster)["data"]
    bundles = ca_bundles(cluster)
    result = install(cluster, installed)
    assert result.returncode == 0, result.stderr
    assert "serving certificate: kept" in result.stderr
    assert secret(cluster)["data"] == data
    assert ca_bundles(cluster) == bundles


def test_ca_rotation_trusts_both_cas_until_the_old_one_is_dropped(
    cluster: LocalCluster, installed: Path
) -> None:
    (old_ca,) = x509.load_pem_x509_certificates((installed / "ca.crt").read_bytes())
    result = install(cluster, installed, "--rotate-ca")
    assert result.returncode == 0, result.stderr
    assert "--drop-previous-ca" in result.stderr  # the reminder
    for bundle in ca_bundles(cluster).values():
        new_ca, previous = x509.load_pem_x509_certificates(bundle)
        assert previous == old_ca
    served = x509.load_pem_x509_certificate(base64.b64decode(secret(cluster)["data"]["tls.crt"]))
    served.verify_directly_issued_by(new_ca)

    result = install(cluster, installed, "--drop-previous-ca")
    assert result.returncode == 0, result.stderr
    for bundle in ca_bundles(cluster).values():
        assert x509.load_pem_x509_certificates(bundle) == [new_ca]


def test_install_says_when_the_webhook_configurations_are_missing(
    cluster: LocalCluster, installed: Path
) -> None:
    env = {
        **os.environ,
        "KUBECTL": cluster.kubectl_path,
        "KUBECONFIG": str(cluster.kubeconfig),
        "PYTHON": sys.executable,
    }
    result = subprocess.run(
        ["bash", str(INSTALL), "--webhook-config", "no-such-config", "--out", str(installed)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert result.returncode == 1
    assert "validatingwebhookconfiguration/no-such-config not found" in result.stderr
    assert "apply the manifests" in result.stderr
