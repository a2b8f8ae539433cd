"""Render the shipped manifests as an admin would: a kustomization of their own beside a checkout.

docs/install.md has the admin write one file, `my-cluster/kustomization.yaml`, next to a checkout
of this repository named `policy-attachment-webhook`. `render` lays out exactly that in a temp
folder (the checkout is a symlink to this repository) and runs the real `kubectl kustomize`, so
the static tests (tests/deploy) and the end-to-end ones (tests/e2e) read what the cluster would
receive. Also the smallest adaptations a Kubernetes 1.20 API server needs to accept it.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.fixtures.paths import DOCS, REPO

CHECKOUT = "policy-attachment-webhook"  # the folder name docs/install.md uses
COMPONENTS = REPO / "manifests" / "components"
ALL_COMPONENTS = sorted(p.name for p in COMPONENTS.iterdir() if p.is_dir())
VENDOR_COMPONENTS = {
    "envoy-gateway": "gateway.envoyproxy.io",
    "kuadrant": "kuadrant.io",
    "nginx-gateway-fabric": "gateway.nginx.org",
    "kgateway": "gateway.kgateway.dev",
    "linkerd": "policy.linkerd.io",
    "envoy-ai-gateway": "aigateway.envoyproxy.io",
}
# Components that need more than the manifests: one value (policy-group), or a server newer
# than 1.20 (match-conditions).
NEEDS_A_VALUE = {"policy-group"}
NEWER_SERVER_ONLY = {"match-conditions"}
AGGREGATION_LABEL = "policy-attachment.dev/aggregate-to-policy-webhook"
POLICY_GROUP_LINES = """\
configMapGenerator:
  - name: policy-group
    literals: [group={group}]
    options: {{annotations: {{config.kubernetes.io/local-config: "true"}}}}
"""


def kubectl_path() -> str | None:
    return shutil.which("kubectl")


def kustomization(
    overlay: str = "self-managed", components: Sequence[str] = (), extra: str = ""
) -> str:
    """An admin's kustomization.yaml of one overlay and some components, plus `extra` lines."""
    lines = [
        "apiVersion: kustomize.config.k8s.io/v1beta1",
        "kind: Kustomization",
        "resources:",
        f"  - ../{CHECKOUT}/manifests/overlays/{overlay}",
    ]
    if components:
        lines.append("components:")
        lines += [f"  - ../{CHECKOUT}/manifests/components/{name}" for name in components]
    return "\n".join(lines) + "\n" + extra


def render_text(text: str, *, kubectl: str | None = None) -> list[dict[str, Any]]:
    """`kubectl kustomize` of `text` as my-cluster/kustomization.yaml beside the checkout."""
    binary = kubectl or kubectl_path()
    if binary is None:
        raise FileNotFoundError("kubectl (with its built-in kustomize) is not on PATH")
    with tempfile.TemporaryDirectory(prefix="policy-webhook-kustomize-") as tmp:
        (Path(tmp) / CHECKOUT).symlink_to(REPO, target_is_directory=True)
        folder = Path(tmp) / "my-cluster"
        folder.mkdir()
        (folder / "kustomization.yaml").write_text(text)
        done = subprocess.run(
            [binary, "kustomize", str(folder)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    if done.returncode != 0:
        raise AssertionError(f"kubectl kustomize failed:\n{done.stderr}\n--- input:\n{text}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def render(
    overlay: str = "self-managed",
    components: Sequence[str] = (),
    *,
    group: str = "policies.acme.example",
    kubectl: str | None = None,
) -> list[dict[str, Any]]:
    """Render an overlay with components; policy-group gets its one value, `group`."""
    extra = POLICY_GROUP_LINES.format(group=group) if "policy-group" in components else ""
    return render_text(kustomization(overlay, components, extra), kubectl=kubectl)


def install_doc_kustomization() -> str:
    """The kustomization.yaml that docs/install.md tells the admin to write, as written there."""
    text = (DOCS / "install.md").read_text()
    match = re.search(r"```yaml\n(# my-cluster/kustomization\.yaml\n.*?)```", text, re.DOTALL)
    assert match, "docs/install.md lost its my-cluster/kustomization.yaml block"
    return match.group(1)


def add_policy_kinds_doc_lines() -> str:
    """The lines docs/install.md adds to that kustomization for a group of one's own."""
    text = (DOCS / "install.md").read_text()
    match = re.search(
        r"```yaml\n(# add to my-cluster/kustomization\.yaml\n.*?)```", text, re.DOTALL
    )
    assert match, "docs/install.md lost its 'add your policy kinds' block"
    return match.group(1)


def for_v1_20(docs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same objects in API versions a 1.20 server serves (same fields): PodDisruptionBudget
    and CronJob became v1 in 1.21."""
    adapted = copy.deepcopy(list(docs))
    for doc in adapted:
        if doc["kind"] == "PodDisruptionBudget" and doc["apiVersion"] == "policy/v1":
            doc["apiVersion"] = "policy/v1beta1"
        if doc["kind"] == "CronJob" and doc["apiVersion"] == "batch/v1":
            doc["apiVersion"] = "batch/v1beta1"
    return adapted


def stand_in_crd(group: str, kind: str, plural: str) -> dict[str, Any]:
    """A schema-less CRD: enough for the API server to take objects of a kind we do not own
    (cert-manager's, the Prometheus Operator's) through a dry run."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "plural": plural,
                "singular": kind.lower(),
                "listKind": f"{kind}List",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


STAND_IN_CRDS = [
    stand_in_crd("monitoring.coreos.com", "PodMonitor", "podmonitors"),
    stand_in_crd("monitoring.coreos.com", "PrometheusRule", "prometheusrules"),
    stand_in_crd("cert-manager.io", "Issuer", "issuers"),
    stand_in_crd("cert-manager.io", "Certificate", "certificates"),
]


def only(docs: Sequence[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def aggregated_rules(docs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the controller manager's ClusterRole aggregation writes into policy-webhook-policies:
    the rules of every ClusterRole carrying the aggregation label, in order."""
    return [
        rule
        for doc in docs
        if doc["kind"] == "ClusterRole"
        and (doc["metadata"].get("labels") or {}).get(AGGREGATION_LABEL) == "true"
        for rule in doc.get("rules") or ()
    ]
