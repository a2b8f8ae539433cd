"""The test API server treats empty values as a real cluster does (the null-check patch).

Built with Go 1.19, the unpatched v1.20.2 server took `""`, `0` and `false` for JSON null: it
refused `group: ""` in a field typed string, and upstream's `default: ""` could not be installed,
so backendRefs were stored without the `group: ""` a real cluster adds. provision.py patches
that check; these tests fail on a binary built without the patch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from cluster import LocalCluster

NAMESPACE = "fidelity"
GROUP = "fidelity.example.com"
# A small policy CRD of our own, typed: every field says what JSON type it holds. Not labelled
# as a policy, so that no webhook of another module ever takes an interest in it.
TYPED_POLICY_CRD = f"""
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: typedpolicies.{GROUP}}}
spec:
  group: {GROUP}
  scope: Namespaced
  names: {{kind: TypedPolicy, plural: typedpolicies, singular: typedpolicy, listKind: TypedPolicyList}}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              targetRefs:
                type: array
                items:
                  type: object
                  required: [group, kind, name]
                  properties:
                    group: {{type: string}}
                    kind: {{type: string}}
                    name: {{type: string}}
              retries: {{type: integer}}
              enabled: {{type: boolean}}
"""


@pytest.fixture(scope="module")
def namespace(cluster: LocalCluster) -> Iterator[str]:
    cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    yield NAMESPACE
    cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")


@pytest.fixture(scope="module")
def typed_policy_crd(cluster: LocalCluster) -> Iterator[None]:
    cluster.apply(TYPED_POLICY_CRD)
    name = f"crd/typedpolicies.{GROUP}"
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=30s", name)
    yield
    cluster.kubectl("delete", name, "--ignore-not-found", "--wait=false")


def test_a_typed_crd_field_accepts_the_empty_string_zero_and_false(
    cluster: LocalCluster, namespace: str, typed_policy_crd: None
) -> None:
    """`group: ""` names the core API group (a Service): it is a string, not null."""
    spec: dict[str, Any] = {
        "targetRefs": [{"group": "", "kind": "Service", "name": "foo"}],
        "retries": 0,
        "enabled": False,
    }
    policy = {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "TypedPolicy",
        "metadata": {"name": "empty-values", "namespace": namespace},
        "spec": spec,
    }
    cluster.apply(policy)
    stored = cluster.get_json("typedpolicy", "empty-values", "-n", namespace)
    assert stored["spec"] == spec


def test_an_httproute_comes_back_with_the_backend_ref_defaults_of_a_real_cluster(
    cluster: LocalCluster, namespace: str
) -> None:
    route = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "defaults", "namespace": namespace},
        "spec": {
            "parentRefs": [{"name": "gw"}],
            "rules": [{"backendRefs": [{"name": "foo", "port": 80}]}],
        },
    }
    cluster.kubectl("create", "-f", "-", input=json.dumps(route))
    try:
        stored = cluster.get_json("httproute", "defaults", "-n", namespace)
        (rule,) = stored["spec"]["rules"]
        assert rule["backendRefs"] == [
            {"group": "", "kind": "Service", "name": "foo", "port": 80, "weight": 1}
        ]
        assert stored["spec"]["parentRefs"] == [
            {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}
        ]
    finally:
        cluster.kubectl("delete", "httproute", "defaults", "-n", namespace, "--ignore-not-found")
