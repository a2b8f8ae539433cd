"""Run things as the shipped ServiceAccounts, with the RBAC the manifests give them.

- `service_account_kubeconfig`: a kubeconfig with a real token of a ServiceAccount (the
  TokenRequest API, `kubectl create token`), so every request is authorized as it would be in a
  pod: RBAC tests mean something.
- `aggregate`: what kube-controller-manager's ClusterRole aggregation controller does, which
  this suite's control plane (etcd and kube-apiserver only) does not run: the rules of every
  ClusterRole carrying the label of an aggregated role's selector, copied into it.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from cluster import LocalCluster

RBAC_KINDS = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
              "RoleBinding")  # fmt: skip


def apply_rbac(cluster: LocalCluster, docs: list[dict[str, Any]]) -> None:
    """The Namespace, ServiceAccounts and RBAC objects of `docs`, applied for real, then
    aggregated as the controller manager would."""
    cluster.apply([d for d in docs if d["kind"] in RBAC_KINDS])
    aggregate(cluster)


def aggregate(cluster: LocalCluster) -> None:
    """Fill every aggregated ClusterRole with the rules of the ClusterRoles its selectors pick."""
    roles = cluster.get_json("clusterroles")["items"]
    for role in roles:
        selectors = (role.get("aggregationRule") or {}).get("clusterRoleSelectors") or []
        if not selectors or not role["metadata"]["name"].startswith("policy-webhook"):
            continue  # the API server's own aggregated roles (admin, edit, view) stay as they are
        rules = [
            rule
            for other in roles
            if other["metadata"]["name"] != role["metadata"]["name"]
            and any(_selects(s, other["metadata"].get("labels") or {}) for s in selectors)
            for rule in other.get("rules") or ()
        ]
        if (role.get("rules") or []) != rules:
            cluster.kubectl(
                "patch", "clusterrole", role["metadata"]["name"], "--type=merge",
                "-p", json.dumps({"rules": rules}),
            )  # fmt: skip


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(
        labels.get(key) == value for key, value in (selector.get("matchLabels") or {}).items()
    )


def service_account_token(cluster: LocalCluster, namespace: str, name: str) -> str:
    done = cluster.kubectl("create", "token", name, "-n", namespace, "--duration=2h")
    return str(done.stdout).strip()


def service_account_kubeconfig(
    cluster: LocalCluster, namespace: str, name: str, path: Path
) -> Path:
    """A kubeconfig that authenticates as system:serviceaccount:<namespace>:<name>."""
    token = service_account_token(cluster, namespace, name)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "sa",
        "clusters": [
            {
                "name": "e2e",
                "cluster": {
                    "server": cluster.server,
                    "certificate-authority-data": base64.b64encode(
                        cluster.ca_pem.encode()
                    ).decode(),
                },
            }
        ],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "e2e", "user": name}}],
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def can_i(cluster: LocalCluster, user: str, verb: str, resource: str, *scope: str) -> bool:
    """`kubectl auth can-i --as=<user>`; an unknown resource fails the test (its "no" is vacuous)."""
    result = cluster.kubectl("auth", "can-i", verb, resource, *scope, f"--as={user}", check=False)
    answer = result.stdout.strip()
    assert answer.startswith(("yes", "no")), result.stderr
    assert "doesn't have a resource type" not in result.stderr, result.stderr
    return bool(answer.startswith("yes"))
