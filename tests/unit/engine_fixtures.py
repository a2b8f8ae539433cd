"""Cluster state for the engine tests (hierarchy, precedence, summary, mutation), from YAML.

`CRDS` is the one set of policy CRDs of every unit test (the rules' tests read it through
`yaml_state`): kinds of group `policies.example.com`, as SPEC §6 names them — RetryPolicy (a
full schema: lists, maps, list-maps, nested objects), TimeoutPolicy (no schema: every object is
merged field by field), ColorPolicy (Inherited), HealthCheckPolicy (Direct) and the
cluster-scoped ConnectionLimitPolicy. The label values are spelt in both cases on purpose.
"""

from __future__ import annotations

import textwrap
from typing import Any

import yaml

from webhook.core.engine import effective
from webhook.core.model.profiles import OperatorConfig, parse_config
from webhook.core.model.refs import ObjectKey
from webhook.core.rules.ruletable import RULE_IDS
from webhook.core.state.store import ClusterView, Store

GROUP = "policies.example.com"
GW = "gateway.networking.k8s.io"

CRDS = """
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
                  enabled: {type: boolean}
                  retryOn: {type: array, items: {type: string}}
                  headers: {type: object, additionalProperties: {type: string}}
                  backoff:
                    type: object
                    properties:
                      baseInterval: {type: string}
                      maxInterval: {type: string}
                  perStatus:
                    type: array
                    x-kubernetes-list-type: map
                    x-kubernetes-list-map-keys: [code]
                    items:
                      type: object
                      properties:
                        code: {type: integer}
                        maxRetries: {type: integer}
                        backoff: {type: string}
              override: *retry
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: timeoutpolicies.policies.example.com
  labels: {gateway.networking.k8s.io/policy: inherited}
spec:
  group: policies.example.com
  scope: Namespaced
  names: {kind: TimeoutPolicy, plural: timeoutpolicies}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: colorpolicies.policies.example.com
  labels: {gateway.networking.k8s.io/policy: Inherited}
spec:
  group: policies.example.com
  scope: Namespaced
  names: {kind: ColorPolicy, plural: colorpolicies}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
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

# One GatewayClass, a Gateway in `infra` with an HTTP and an HTTPS listener open to all
# namespaces, a route in `apps` on the HTTPS listener, and two Services behind it.
CLUSTER = """
apiVersion: v1
kind: Namespace
metadata: {name: infra}
---
apiVersion: v1
kind: Namespace
metadata: {name: apps, labels: {team: apps}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: acme}
spec: {controllerName: example.net/gateway}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: infra}
spec:
  gatewayClassName: acme
  listeners:
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}
  - {name: https, port: 443, protocol: HTTPS, allowedRoutes: {namespaces: {from: All}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: apps}
spec:
  parentRefs: [{name: gw, namespace: infra, sectionName: https}]
  rules:
  - backendRefs: [{name: foo, port: 80}, {name: bar, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: foo, namespace: apps}
spec:
  ports: [{name: http, port: 80}, {name: https, port: 443}]
---
apiVersion: v1
kind: Service
metadata: {name: bar, namespace: apps}
spec:
  ports: [{port: 80}]
"""


HOME = {"GatewayClass": "infra", "Gateway": "infra", "HTTPRoute": "apps", "Service": "apps"}
GROUPS = {"Service": "", "Namespace": ""}


def policy(
    name: str,
    target: str,
    body: str,
    *,
    kind: str = "RetryPolicy",
    api_version: str = "policies.example.com/v1alpha1",
    ns: str | None = None,
    created: str | None = None,
    single_ref: bool = False,
) -> str:
    """A policy manifest. `target` is `Kind/name`, `Kind/namespace/name`, `#section` optional;
    the policy lives in the target's namespace unless `ns` says otherwise. `single_ref` writes
    `targetRef` (Kuadrant's spelling) instead of `targetRefs`."""
    ref, _, section = target.partition("#")
    parts = ref.split("/")
    target_kind, target_name = parts[0], parts[-1]
    target_ns = parts[1] if len(parts) == 3 else None
    home = ns or target_ns or (target_name if target_kind == "Namespace" else HOME[target_kind])
    fields = [f"group: '{GROUPS.get(target_kind, 'gateway.networking.k8s.io')}'"]
    fields += [f"kind: {target_kind}", f"name: {target_name}"]
    fields += [f"namespace: {target_ns}"] if target_ns else []
    fields += [f"sectionName: {section}"] if section else []
    stamp = f", creationTimestamp: '{created}'" if created else ""
    one_ref = f"{{{', '.join(fields)}}}"
    targets = f"targetRef: {one_ref}" if single_ref else f"targetRefs: [{one_ref}]"
    return (
        f"apiVersion: {api_version}\n"
        f"kind: {kind}\n"
        f"metadata: {{name: {name}, namespace: {home}{stamp}}}\n"
        "spec:\n"
        f"  {targets}\n" + textwrap.indent(textwrap.dedent(body).strip(), "  ") + "\n"
    )


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(textwrap.dedent(text)) if d]


def store_of(*texts: str, config: OperatorConfig | None = None) -> Store:
    store = Store(config)
    for text in texts:
        for doc in docs(text):
            store.upsert(doc)
    return store


def config_of(text: str) -> OperatorConfig:
    return parse_config(yaml.safe_load(textwrap.dedent(text)), known_rules=RULE_IDS)


def gateway(ns: str, name: str) -> ObjectKey:
    return ObjectKey(GW, "Gateway", ns, name)


def route(ns: str, name: str, kind: str = "HTTPRoute") -> ObjectKey:
    return ObjectKey(GW, kind, ns, name)


def service(ns: str, name: str) -> ObjectKey:
    return ObjectKey("", "Service", ns, name)


def listener_set(ns: str, name: str) -> ObjectKey:
    return ObjectKey(GW, "ListenerSet", ns, name)


def gateway_class(name: str) -> ObjectKey:
    return ObjectKey(GW, "GatewayClass", "", name)


def result_of(view: ClusterView, key: ObjectKey, kind: str) -> effective.KindResult | None:
    """The result for one policy kind (`TimeoutPolicy`), or None when none of it applies."""
    for result in effective.compute(key, view):
        if result.group_kind.kind == kind:
            return result
    return None


def by_path(view: ClusterView, key: ObjectKey, kind: str) -> dict[tuple[str, ...], Any]:
    """{printed path: effective} for one kind; {} when none of it applies."""
    result = result_of(view, key, kind)
    return {c.path: dict(c.effective) for c in result.contexts} if result else {}


def only(view: ClusterView, key: ObjectKey, kind: str) -> Any:
    """The effective value of the one context an object has for this kind."""
    found = by_path(view, key, kind)
    assert len(found) == 1, f"expected one context, got {sorted(found)}"
    return next(iter(found.values()))
