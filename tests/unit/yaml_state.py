"""The admission rules' test cluster, as YAML a user would write; the builders are shared
with the engine tests (`engine_fixtures`)."""

from __future__ import annotations

from typing import Any

from engine_fixtures import config_of, docs, store_of

__all__ = ["CLUSTER", "POLICY_CRDS", "config_of", "docs", "one", "store_of"]

POLICY_CRDS = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: retrypolicies.policies.example.com
  labels: {gateway.networking.k8s.io/policy: inherited}
spec:
  group: policies.example.com
  scope: Namespaced
  names: {kind: RetryPolicy, plural: retrypolicies}
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
              targetRefs: {type: array, items: {type: object}}
              default: &retry
                type: object
                properties:
                  maxRetries: {type: integer}
                  retryOn: {type: array, items: {type: string}}
                  backoff:
                    type: object
                    properties:
                      baseInterval: {type: string}
                      maxInterval: {type: string}
                  headers: {type: object, additionalProperties: {type: string}}
              override: *retry
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: healthcheckpolicies.policies.example.com
  labels: {gateway.networking.k8s.io/policy: Direct}
spec:
  group: policies.example.com
  scope: Namespaced
  names: {kind: HealthCheckPolicy, plural: healthcheckpolicies}
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
              targetRefs: {type: array, items: {type: object}}
              path: {type: string}
              intervalSeconds: {type: integer}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: connectionlimitpolicies.policies.example.com
  labels: {gateway.networking.k8s.io/policy: inherited}
spec:
  group: policies.example.com
  scope: Cluster
  names: {kind: ConnectionLimitPolicy, plural: connectionlimitpolicies}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""

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
