"""The admission rules' test cluster, as YAML a user would write; the policy CRDs and the
builders are the engine tests' own (`engine_fixtures`), so both read one set of CRDs."""

from __future__ import annotations

from typing import Any

from engine_fixtures import CRDS as POLICY_CRDS
from engine_fixtures import config_of, docs, store_of

__all__ = ["CLUSTER", "POLICY_CRDS", "config_of", "docs", "one", "store_of"]

CLUSTER = """
apiVersion: v1
kind: Namespace
metadata: {name: infra}
---
apiVersion: v1
kind: Namespace
metadata: {name: apps, labels: {gateway-access: "true"}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: acme}
spec: {controllerName: example.net/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: infra}
spec:
  gatewayClassName: acme
  listeners:
  - {name: http, port: 80, protocol: HTTP}
  - {name: https, port: 443, protocol: HTTPS}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: storefront, namespace: apps}
spec:
  parentRefs: [{name: gw, namespace: infra}]
  rules:
  - name: browse
    backendRefs: [{name: foo, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: foo, namespace: apps}
spec:
  ports: [{name: http, port: 80}, {name: https, port: 443}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: infra-retries, namespace: apps}
spec:
  from: [{group: policies.example.com, kind: RetryPolicy, namespace: infra}]
  to: [{group: gateway.networking.k8s.io, kind: HTTPRoute}]
"""


def one(text: str) -> dict[str, Any]:
    (doc,) = docs(text)
    return doc
