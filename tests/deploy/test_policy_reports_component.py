"""The policy-reports component, rendered as an admin renders it (`kubectl kustomize`): the two
report CRDs of wgpolicyk8s.io/v1alpha2 with the fields the webhook writes, and the right to
keep those reports — nothing more. The real API server takes them in tests/e2e
(test_install.py: every component; test_policy_reports.py: the webhook writing into them).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy import kustomizations as k
from tests.fixtures.engine import CLUSTER, CRDS, policy, store_of
from webhook.core.audit import reports
from webhook.core.audit.findings import audit_store
from webhook.core.model.settings import Settings

SERVICE_ACCOUNT = {
    "kind": "ServiceAccount",
    "name": "policy-webhook",
    "namespace": "policy-webhook",
}


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    if k.kubectl_path() is None:
        pytest.skip("kubectl (with built-in kustomize) is not on PATH")
    return k.render("self-managed", ["policy-reports"])


def schema_of(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    crd = next(
        d
        for d in docs
        if d["kind"] == "CustomResourceDefinition" and d["spec"]["names"]["kind"] == kind
    )
    (version,) = crd["spec"]["versions"]
    assert (crd["spec"]["group"], version["name"]) == (reports.GROUP, reports.VERSION)
    assert version["served"] and version["storage"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def test_both_report_kinds_are_defined_namespaced_and_cluster_wide(
    docs: list[dict[str, Any]],
) -> None:
    scopes = {
        d["spec"]["names"]["kind"]: d["spec"]["scope"]
        for d in docs
        if d["kind"] == "CustomResourceDefinition"
    }
    assert scopes == {"PolicyReport": "Namespaced", "ClusterPolicyReport": "Cluster"}


@pytest.mark.parametrize("kind", ["PolicyReport", "ClusterPolicyReport"])
def test_the_schema_holds_every_field_the_webhook_writes(
    docs: list[dict[str, Any]], kind: str
) -> None:
    """A field the schema lacks is pruned by the API server: what a report says would be lost
    silently, and the writer would see a difference on every round."""
    schema = schema_of(docs, kind)
    gone = policy("gone", "HTTPRoute/apps/gone", "default: {maxRetries: 1}")
    results = reports.policy_results(
        audit_store(store_of(CRDS, CLUSTER, gone), Settings()).values()
    )
    written = reports.report("apps" if kind == "PolicyReport" else "", results * 2000, now=1.0)
    assert _unknown(written, schema, "") == []
    result = schema["properties"]["results"]["items"]["properties"]
    assert set(result["result"]["enum"]) == {"pass", "fail", "warn", "error", "skip"}
    assert set(reports.SEVERITY.values()) <= set(result["severity"]["enum"])
    assert set(schema["properties"]["summary"]["properties"]) == set(reports.SUMMARY_KEYS)


def _unknown(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Paths in `value` that `schema` would prune (metadata is the API server's own)."""
    if isinstance(value, dict) and schema.get("type") == "object":
        props, extra = schema.get("properties"), schema.get("additionalProperties")
        if props is None and extra is None:
            return []
        out = []
        for key, item in value.items():
            sub = (props or {}).get(key, extra if isinstance(extra, dict) else None)
            if sub is None:
                out.append(f"{path}.{key}")
            else:
                out += _unknown(item, sub, f"{path}.{key}")
        return out
    if isinstance(value, list) and schema.get("type") == "array":
        return [p for item in value[:3] for p in _unknown(item, schema["items"], f"{path}[]")]
    return []


def test_the_webhook_may_keep_its_reports_and_nothing_else(docs: list[dict[str, Any]]) -> None:
    base = {(d["kind"], d["metadata"]["name"]) for d in k.render("self-managed")}
    added = [d for d in docs if (d["kind"], d["metadata"]["name"]) not in base]
    assert sorted(d["kind"] for d in added) == [
        "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "CustomResourceDefinition",
    ]  # fmt: skip
    role = k.only(added, "ClusterRole")
    assert role["rules"] == [
        {
            "apiGroups": ["wgpolicyk8s.io"],
            "resources": ["policyreports", "clusterpolicyreports"],
            "verbs": ["get", "list", "create", "update", "delete"],
        }
    ]
    assert k.AGGREGATION_LABEL not in role["metadata"].get("labels", {})  # not a reading role
    binding = k.only(added, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [SERVICE_ACCOUNT]
