"""SPEC §6, the worked examples E1 to E12, exactly as written, built from YAML as users write it."""

from __future__ import annotations

import json

from tests.fixtures.engine import (
    CLUSTER,
    CRDS,
    by_path,
    config_of,
    only,
    result_of,
    route,
    service,
    store_of,
)
from webhook.core.annotation import summary
from webhook.core.model.settings import Settings

GW_RETRY_DEFAULT = """
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: gw-retry, namespace: infra}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  default: {retryOn: ["501", "502", "503"]}
"""

ROUTE = route("apps", "r")


def test_e1_more_specific_default_wins_and_lists_are_replaced() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        GW_RETRY_DEFAULT,
        """
        apiVersion: policies.example.com/v1alpha1
        kind: RetryPolicy
        metadata: {name: r-retry, namespace: apps}
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}]
          default: {retryOn: ["504"]}
        """,
    )
    assert only(store, ROUTE, "RetryPolicy") == {"retryOn": ["504"]}


def test_e2_route_override_beats_gateway_default() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        GW_RETRY_DEFAULT,
        """
        apiVersion: policies.example.com/v1alpha1
        kind: RetryPolicy
        metadata: {name: r-retry, namespace: apps}
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}]
          override: {retryOn: ["504"]}
        """,
    )
    assert only(store, ROUTE, "RetryPolicy") == {"retryOn": ["504"]}


def test_e3_gateway_override_beats_route_default() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        """
        apiVersion: policies.example.com/v1alpha1
        kind: RetryPolicy
        metadata: {name: gw-retry, namespace: infra}
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
          override: {retryOn: ["501", "502", "503"]}
        ---
        apiVersion: policies.example.com/v1alpha1
        kind: RetryPolicy
        metadata: {name: r-retry, namespace: apps}
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}]
          default: {retryOn: ["504"]}
        """,
    )
    assert only(store, ROUTE, "RetryPolicy") == {"retryOn": ["501", "502", "503"]}


def test_e4_backends_inherit_through_the_route() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        """
        apiVersion: policies.example.com/v1alpha1
        kind: TimeoutPolicy
        metadata: {name: gw-timeouts, namespace: infra}
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
          override: {drainTimeout: 60}
          default: {connectionTimeout: 5}
        ---
        apiVersion: policies.example.com/v1alpha1
        kind: TimeoutPolicy
        metadata: {name: r-timeouts, namespace: apps}
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}]
          default: {connectionTimeout: 10, drainTimeout: 100}
        ---
        apiVersion: policies.example.com/v1alpha1
        kind: TimeoutPolicy
        metadata: {name: foo-timeouts, namespace: apps}
        spec:
          targetRefs: [{group: "", kind: Service, name: foo}]
          default: {sessionAffinity: cookie}
        """,
    )
    assert only(store, service("apps", "foo"), "TimeoutPolicy") == {
        "connectionTimeout": 10,
        "drainTimeout": 60,
        "sessionAffinity": "cookie",
    }
    assert only(store, service("apps", "bar"), "TimeoutPolicy") == {
        "connectionTimeout": 10,
        "drainTimeout": 60,
    }


def test_e5_class_and_gateway_overrides_and_defaults_interleave() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        """
        apiVersion: policies.example.com/v1alpha1
        kind: TimeoutPolicy
        metadata: {name: class-policy, namespace: infra}
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: GatewayClass, name: acme}]
          override: {k1: p1, k3: p3, k5: p5}
          default: {k2: p2, k4: p4}
        ---
        apiVersion: policies.example.com/v1alpha1
        kind: TimeoutPolicy
        metadata: {name: gw-policy, namespace: infra}
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
          override: {k1: c1}
          default: {k2: c2, k5: c5}
        """,
    )
    assert only(store, ROUTE, "TimeoutPolicy") == {
        "k1": "p1",
        "k2": "c2",
        "k3": "p3",
        "k4": "p4",
        "k5": "p5",
    }


E6_POLICIES = """
apiVersion: policies.example.com/v1alpha1
kind: TimeoutPolicy
metadata: {name: gw-cdn, namespace: infra}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  default: {cdn: {cachePolicy: {includeHost: true, includeQueryString: true}}}
  override: {cdn: {enabled: true}}
---
apiVersion: policies.example.com/v1alpha1
kind: TimeoutPolicy
metadata: {name: r-cdn, namespace: apps}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}]
  default: {cdn: {cachePolicy: {includeQueryString: false}}}
"""


def test_e6_nested_objects_merge_field_by_field() -> None:
    store = store_of(CRDS, CLUSTER, E6_POLICIES)
    assert only(store, ROUTE, "TimeoutPolicy") == {
        "cdn": {"enabled": True, "cachePolicy": {"includeHost": True, "includeQueryString": False}}
    }


def test_e6_with_strategy_atomic_the_override_wins_whole() -> None:
    config = config_of(
        """
        kinds:
        - {group: policies.example.com, kind: TimeoutPolicy, merge: atomic}
        """
    )
    store = store_of(CRDS, CLUSTER, E6_POLICIES, config=config)
    assert only(store, ROUTE, "TimeoutPolicy") == {"cdn": {"enabled": True}}


def _e7(zz_created: str, aa_created: str) -> object:
    store = store_of(
        CRDS,
        CLUSTER,
        f"""
        apiVersion: policies.example.com/v1alpha1
        kind: RetryPolicy
        metadata: {{name: zz, namespace: infra, creationTimestamp: "{zz_created}"}}
        spec:
          targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]
          override: {{retryOn: ["501"]}}
        ---
        apiVersion: policies.example.com/v1alpha1
        kind: RetryPolicy
        metadata: {{name: aa, namespace: infra, creationTimestamp: "{aa_created}"}}
        spec:
          targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]
          override: {{retryOn: ["502"]}}
        """,
    )
    return only(store, ROUTE, "RetryPolicy")


def test_e7_the_older_override_wins_then_the_name() -> None:
    assert _e7("2024-05-01T10:00:00Z", "2024-05-01T10:00:01Z") == {"retryOn": ["501"]}
    assert _e7("2024-05-01T10:00:00Z", "2024-05-01T10:00:00Z") == {"retryOn": ["502"]}


def test_e8_a_route_on_two_gateways_has_two_contexts() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        """
        apiVersion: gateway.networking.k8s.io/v1
        kind: Gateway
        metadata: {name: g1, namespace: infra}
        spec:
          gatewayClassName: acme
          listeners: [{name: web, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}]
        ---
        apiVersion: gateway.networking.k8s.io/v1
        kind: Gateway
        metadata: {name: g2, namespace: infra}
        spec:
          gatewayClassName: acme
          listeners: [{name: web, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}]
        ---
        apiVersion: gateway.networking.k8s.io/v1
        kind: HTTPRoute
        metadata: {name: two, namespace: apps}
        spec:
          parentRefs: [{name: g1, namespace: infra}, {name: g2, namespace: infra}]
        ---
        apiVersion: policies.example.com/v1alpha1
        kind: ColorPolicy
        metadata: {name: g1-color, namespace: infra}
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: g1}]
          default: {color: red}
        ---
        apiVersion: policies.example.com/v1alpha1
        kind: ColorPolicy
        metadata: {name: g2-color, namespace: infra}
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: g2}]
          override: {color: yellow}
        ---
        apiVersion: policies.example.com/v1alpha1
        kind: ColorPolicy
        metadata: {name: two-color, namespace: apps}
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: two}]
          default: {color: blue}
        """,
    )
    assert by_path(store, route("apps", "two"), "ColorPolicy") == {
        ("GatewayClass/acme", "Gateway/infra/g1#web", "HTTPRoute/apps/two"): {"color": "blue"},
        ("GatewayClass/acme", "Gateway/infra/g2#web", "HTTPRoute/apps/two"): {"color": "yellow"},
    }


E9_INFRA_NS = """
apiVersion: policies.example.com/v1alpha1
kind: TimeoutPolicy
metadata: {name: infra-ns, namespace: infra}
spec:
  targetRefs: [{group: "", kind: Namespace, name: infra}]
  default: {timeout: 30s}
"""
E9_GATEWAY = """
apiVersion: policies.example.com/v1alpha1
kind: TimeoutPolicy
metadata: {name: gw-timeout, namespace: infra}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  default: {timeout: 20s}
"""
E9_APPS_NS = """
apiVersion: policies.example.com/v1alpha1
kind: TimeoutPolicy
metadata: {name: apps-ns, namespace: apps}
spec:
  targetRefs: [{group: "", kind: Namespace, name: apps}]
  default: {timeout: 10s}
"""


def test_e9_namespace_rungs_sit_between_the_objects() -> None:
    everything = store_of(CRDS, CLUSTER, E9_INFRA_NS, E9_GATEWAY, E9_APPS_NS)
    assert only(everything, ROUTE, "TimeoutPolicy") == {"timeout": "10s"}
    without_apps = store_of(CRDS, CLUSTER, E9_INFRA_NS, E9_GATEWAY)
    assert only(without_apps, ROUTE, "TimeoutPolicy") == {"timeout": "20s"}
    only_infra = store_of(CRDS, CLUSTER, E9_INFRA_NS)
    assert only(only_infra, ROUTE, "TimeoutPolicy") == {"timeout": "30s"}
    result = result_of(everything, ROUTE, "TimeoutPolicy")
    assert result is not None
    sources = result.contexts[0].sources
    assert sources["/timeout"].at == "Namespace/apps"


E10_POLICIES = """
apiVersion: policies.example.com/v1alpha1
kind: HealthCheckPolicy
metadata: {name: p1, namespace: apps, creationTimestamp: "2024-05-01T10:00:00Z"}
spec:
  targetRefs: [{group: "", kind: Service, name: foo}]
  path: /healthz
  intervalSeconds: 5
---
apiVersion: policies.example.com/v1alpha1
kind: HealthCheckPolicy
metadata: {name: p2, namespace: apps, creationTimestamp: "2024-05-01T10:00:01Z"}
spec:
  targetRefs: [{group: "", kind: Service, name: foo}]
  path: /ready
"""


def test_e10_direct_kind_the_older_policy_wins_whole_the_other_is_conflicted() -> None:
    store = store_of(CRDS, CLUSTER, E10_POLICIES)
    result = result_of(store, service("apps", "foo"), "HealthCheckPolicy")
    assert result is not None
    (ctx,) = result.contexts
    assert ctx.path == ("Service/apps/foo",)
    assert ctx.effective == {"path": "/healthz", "intervalSeconds": 5}
    assert {s.policy for s in ctx.sources.values()} == {"apps/p1"}
    assert {s.stanza for s in ctx.sources.values()} == {"direct"}
    (loser,) = ctx.losers
    assert loser.policy == "apps/p2"
    assert loser.reason == "conflicted: apps/p1 wins (older)"
    assert result.policies == ("apps/p1", "apps/p2")


def test_e11_a_policy_on_a_listener_is_more_specific_than_one_on_its_gateway() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        """
        apiVersion: gateway.networking.k8s.io/v1
        kind: HTTPRoute
        metadata: {name: plain, namespace: apps}
        spec:
          parentRefs: [{name: gw, namespace: infra, sectionName: http}]
        ---
        apiVersion: policies.example.com/v1alpha1
        kind: ColorPolicy
        metadata: {name: p, namespace: infra}
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
          default: {minTLS: "1.2", ciphers: [a]}
        ---
        apiVersion: policies.example.com/v1alpha1
        kind: ColorPolicy
        metadata: {name: q, namespace: infra}
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: https}]
          default: {minTLS: "1.3"}
        """,
    )
    assert only(store, ROUTE, "ColorPolicy") == {"minTLS": "1.3", "ciphers": ["a"]}
    assert only(store, route("apps", "plain"), "ColorPolicy") == {"minTLS": "1.2", "ciphers": ["a"]}


def test_e12_direct_policies_on_a_service_and_on_its_port_both_apply() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        """
        apiVersion: policies.example.com/v1alpha1
        kind: HealthCheckPolicy
        metadata: {name: p1, namespace: apps}
        spec:
          targetRefs: [{group: "", kind: Service, name: foo}]
          path: /healthz
        ---
        apiVersion: policies.example.com/v1alpha1
        kind: HealthCheckPolicy
        metadata: {name: p2, namespace: apps}
        spec:
          targetRefs: [{group: "", kind: Service, name: foo, sectionName: https}]
          path: /tls-healthz
        """,
    )
    value = summary.summarize(service("apps", "foo"), store, Settings())
    assert value is not None
    contexts = json.loads(value)["policies"]["HealthCheckPolicy.policies.example.com"]["contexts"]
    assert [(c["paths"], c["effective"], c["sources"]["/path"]["policy"]) for c in contexts] == [
        ([["Service/apps/foo"]], {"path": "/healthz"}, "apps/p1"),
        ([["Service/apps/foo#https"]], {"path": "/tls-healthz"}, "apps/p2"),
    ]
    result = result_of(store, service("apps", "foo"), "HealthCheckPolicy")
    assert result is not None
    assert all(not c.losers for c in result.contexts)
