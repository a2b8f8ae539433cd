"""Dependency tracking: every object whose summary changes is named, and unrelated ones are not.

Each case makes one change to a small but complete world (two GatewayClasses, three Gateways, a
ListenerSet, Selector listeners, a mesh route, a cross-namespace backend behind a grant) and
checks `affected_by_change` against brute force: the summaries of every annotated object,
computed afresh before and after. The affected set must contain every object whose summary
changed, and must leave out the objects each case names as out of reach.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import pytest

from tests.fixtures.engine import CRDS, docs, gateway, gateway_class, listener_set, route, service
from webhook.core.annotation import summary
from webhook.core.annotation.dependencies import affected_by_change
from webhook.core.model import kinds
from webhook.core.model.refs import GATEWAY_GROUP, ObjectKey
from webhook.core.model.settings import Settings
from webhook.core.state.overlay import OverlayView
from webhook.core.state.store import ClusterView, Store

SETTINGS = Settings()
GROUP = "policies.example.com"

WORLD = """
apiVersion: v1
kind: Namespace
metadata: {name: infra, labels: {team: platform}}
---
apiVersion: v1
kind: Namespace
metadata: {name: apps, labels: {gateway-access: "true"}}
---
apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {gateway-access: "true"}}
---
apiVersion: v1
kind: Namespace
metadata: {name: sandbox}
---
apiVersion: v1
kind: Namespace
metadata: {name: other}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: acme}
spec: {controllerName: example.net/acme}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: lonely}
spec: {controllerName: example.net/lonely}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: infra}
spec:
  gatewayClassName: acme
  allowedListeners: {namespaces: {from: Selector, selector: {matchLabels: {gateway-access: "true"}}}}
  listeners:
  - name: http
    protocol: HTTP
    port: 80
    allowedRoutes: {namespaces: {from: Selector, selector: {matchLabels: {gateway-access: "true"}}}}
  - {name: https, protocol: HTTPS, port: 443, allowedRoutes: {namespaces: {from: All}}}
  - name: tls
    protocol: TLS
    port: 8443
    allowedRoutes: {namespaces: {from: Selector, selector: {matchLabels: {gateway-access: "true"}}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw2, namespace: infra}
spec:
  gatewayClassName: acme
  listeners: [{name: http, protocol: HTTP, port: 80, allowedRoutes: {namespaces: {from: All}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: solo, namespace: other}
spec:
  gatewayClassName: lonely
  listeners: [{name: http, protocol: HTTP, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: extra, namespace: apps}
spec:
  parentRef: {name: gw, namespace: infra}
  listeners: [{name: admin, protocol: HTTP, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: storefront, namespace: apps}
spec:
  parentRefs: [{name: gw, namespace: infra}]
  rules:
  - {name: browse, backendRefs: [{name: foo, port: 80}]}
  - {name: checkout, backendRefs: [{name: bar, port: 8080}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: admin, namespace: apps}
spec:
  parentRefs: [{kind: ListenerSet, name: extra}]
  rules: [{backendRefs: [{name: foo, port: 443}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: mesh, namespace: apps}
spec:
  parentRefs: [{group: "", kind: Service, name: foo}]
  rules: [{backendRefs: [{name: foo, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: cart, namespace: shop}
spec:
  parentRefs: [{name: gw, namespace: infra, sectionName: https}]
  rules: [{backendRefs: [{name: cart, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: cross, namespace: shop}
spec:
  parentRefs: [{name: gw2, namespace: infra}]
  rules: [{backendRefs: [{name: bar, namespace: apps, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: passthrough, namespace: shop}
spec:
  parentRefs: [{name: gw, namespace: infra, sectionName: tls}]
  rules: [{backendRefs: [{name: payments, port: 8443}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: lab, namespace: sandbox}
spec:
  parentRefs: [{name: gw, namespace: infra}]
  rules: [{backendRefs: [{name: labsvc, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: solo-route, namespace: other}
spec:
  parentRefs: [{name: solo}]
  rules: [{backendRefs: [{name: solo-svc, port: 80}]}]
---
apiVersion: v1
kind: Service
metadata: {name: foo, namespace: apps}
spec: {ports: [{name: http, port: 80}, {name: https, port: 443}]}
---
apiVersion: v1
kind: Service
metadata: {name: bar, namespace: apps}
spec: {ports: [{name: http, port: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: cart, namespace: shop}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: payments, namespace: shop}
spec: {ports: [{name: tls, port: 8443}]}
---
apiVersion: v1
kind: Service
metadata: {name: labsvc, namespace: sandbox}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: solo-svc, namespace: other}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: shop-routes, namespace: apps}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: shop}]
  to: [{group: "", kind: Service}]
---
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: gw-retry, namespace: infra, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  override: {maxRetries: 3}
  default: {retryOn: ["502"]}
---
apiVersion: policies.example.com/v1alpha1
kind: TimeoutPolicy
metadata: {name: ns-timeout, namespace: apps, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  targetRefs: [{group: "", kind: Namespace, name: apps}]
  default: {timeout: 10s}
---
apiVersion: policies.example.com/v1alpha1
kind: HealthCheckPolicy
metadata: {name: foo-health, namespace: apps, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  targetRefs: [{group: "", kind: Service, name: foo}]
  path: /healthz
---
apiVersion: policies.example.com/v1alpha1
kind: ColorPolicy
metadata: {name: class-color, namespace: infra, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: GatewayClass, name: acme}]
  default: {color: blue}
---
# Cross-namespace, and no grant lets it count (yet).
apiVersion: policies.example.com/v1alpha1
kind: TimeoutPolicy
metadata: {name: cart-timeout, namespace: infra, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: cart, namespace: shop}]
  default: {timeout: 2s}
---
apiVersion: policies.example.com/v1alpha1
kind: ColorPolicy
metadata: {name: solo-color, namespace: other, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: solo}]
  default: {color: green}
"""

# --- building changes --------------------------------------------------------------------------

Change = Callable[[Store], ObjectKey]


def world() -> Store:
    store = Store()
    for doc in docs(CRDS) + docs(WORLD):
        store.upsert(doc)
    return store


def upsert(text: str) -> Change:
    (doc,) = docs(text)

    def apply(store: Store) -> ObjectKey:
        key = store.upsert(doc)
        assert key is not None
        return key

    return apply


def delete(key: ObjectKey) -> Change:
    def apply(store: Store) -> ObjectKey:
        assert store.delete(key) is not None, f"{key} is not in the world"
        return key

    return apply


def edit(key: ObjectKey, change: Callable[[dict[str, Any]], None]) -> Change:
    def apply(store: Store) -> ObjectKey:
        found = store.get(key)
        assert found is not None, f"{key} is not in the world"
        obj = copy.deepcopy(dict(found))
        change(obj)
        store.upsert(obj)
        return key

    return apply


def policy(kind: str, ns: str, name: str) -> ObjectKey:
    return ObjectKey(GROUP, kind, ns, name)


def namespace(name: str) -> ObjectKey:
    return ObjectKey("", "Namespace", "", name)


def crd(plural: str) -> ObjectKey:
    return ObjectKey("apiextensions.k8s.io", "CustomResourceDefinition", "", f"{plural}.{GROUP}")


def grant(ns: str, name: str) -> ObjectKey:
    return ObjectKey(GATEWAY_GROUP, "ReferenceGrant", ns, name)


def set_labels(labels: Mapping[str, str]) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        obj["metadata"] = {**obj["metadata"], "labels": dict(labels)}

    return change


def set_spec(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set `spec.<a>.<b>` (dotted; list items by index) to value."""

    def change(obj: dict[str, Any]) -> None:
        node: Any = obj["spec"]
        *parents, last = path.split(".")
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return change


# --- brute force -------------------------------------------------------------------------------


def annotated(store: Store) -> set[ObjectKey]:
    return {key for gk in kinds.ANNOTATED_KINDS for key in store.keys(gk)}


def summaries(store: Store, keys: set[ObjectKey]) -> dict[ObjectKey, str | None]:
    return {key: summary.summarize(key, store, SETTINGS) for key in keys}


@dataclass(frozen=True)
class Outcome:
    affected: set[ObjectKey]  # what affected_by_change names
    changed: set[ObjectKey]  # whose summary really differs
    everything: set[ObjectKey]  # every annotated object, before or after


def run(change: Change) -> Outcome:
    """Apply one change to the world; what `affected_by_change` says and what really changed."""
    store = world()
    seen: list[tuple[ObjectKey, Any, Any]] = []
    keys_before = annotated(store)
    before_values = summaries(store, keys_before)  # also subscribes the hierarchy index
    store.subscribe(lambda key, old, new: seen.append((key, old, new)))
    change(store)
    ((key, old, new),) = seen
    before = OverlayView(
        store, upserts=[old] if old is not None else (), deletes=[key] if old is None else ()
    )
    affected = affected_by_change(key, old, new, before=before, after=store)
    keys = keys_before | annotated(store)
    after_values = summaries(store, keys)
    changed = {k for k in keys if before_values.get(k) != after_values.get(k)}
    return Outcome(affected, changed, keys)


# --- the table ---------------------------------------------------------------------------------

STOREFRONT, ADMIN, MESH = route("apps", "storefront"), route("apps", "admin"), route("apps", "mesh")
CART, CROSS, LAB = route("shop", "cart"), route("shop", "cross"), route("sandbox", "lab")
PASSTHROUGH = route("shop", "passthrough", "TLSRoute")
SOLO_ROUTE, SOLO_GW, SOLO_SVC = (
    route("other", "solo-route"),
    gateway("other", "solo"),
    service("other", "solo-svc"),
)
GW, GW2, EXTRA = gateway("infra", "gw"), gateway("infra", "gw2"), listener_set("apps", "extra")
FOO, BAR, LABSVC = service("apps", "foo"), service("apps", "bar"), service("sandbox", "labsvc")
CART_SVC, PAYMENTS = service("shop", "cart"), service("shop", "payments")
ACME, LONELY = gateway_class("acme"), gateway_class("lonely")
UNRELATED = {SOLO_ROUTE, SOLO_GW, SOLO_SVC, LONELY}
# Below a Service hang its mesh routes (parentRef to the Service), whichever context reached the
# Service: hierarchy.affected_by walks rungs, not whole contexts, so a policy that reaches apps/foo
# as a backend names apps/mesh too. Conservative, and cheap; the cases below say so where exact.


@dataclass(frozen=True)
class Case:
    name: str
    change: Change
    must_change: frozenset[ObjectKey] = frozenset()  # the brute force must see these change
    out_of_reach: frozenset[ObjectKey] = frozenset()  # never in the affected set
    exactly: frozenset[ObjectKey] | None = None  # the affected set, when it is known exactly


def case(
    name: str,
    change: Change,
    *,
    must_change: Iterable[ObjectKey] = (),
    out_of_reach: Iterable[ObjectKey] = (),
    exactly: Iterable[ObjectKey] | None = None,
) -> Any:
    return pytest.param(
        Case(
            name,
            change,
            frozenset(must_change),
            frozenset(out_of_reach),
            None if exactly is None else frozenset(exactly),
        ),
        id=name,
    )


ROUTE_POLICY = f"""
apiVersion: {GROUP}/v1alpha1
kind: RetryPolicy
metadata: {{name: sf-retry, namespace: apps, creationTimestamp: "2024-02-01T00:00:00Z"}}
spec:
  targetRefs: [{{group: {GATEWAY_GROUP}, kind: HTTPRoute, name: storefront}}]
  default: {{maxRetries: 5}}
"""

CASES = [
    case(
        "policy added on a route reaches the route and its backends only",
        upsert(ROUTE_POLICY),
        must_change={STOREFRONT, FOO, BAR},
        exactly={STOREFRONT, FOO, BAR, MESH},
    ),
    case(
        "policy on a named rule reaches that rule's backend, not the other one",
        upsert(ROUTE_POLICY.replace("name: storefront}", "name: storefront, sectionName: browse}")),
        must_change={STOREFRONT, FOO},
        exactly={STOREFRONT, FOO, MESH},
    ),
    case(
        "policy removed from a Gateway reaches everything below it, nothing elsewhere",
        delete(policy("RetryPolicy", "infra", "gw-retry")),
        must_change={GW, STOREFRONT, CART, ADMIN, EXTRA, FOO, BAR, CART_SVC, LAB, LABSVC},
        out_of_reach=UNRELATED | {GW2, CROSS},
    ),
    case(
        "policy retargeted from one Gateway to another reaches both trees",
        edit(
            policy("RetryPolicy", "infra", "gw-retry"),
            set_spec("targetRefs.0", {"group": GATEWAY_GROUP, "kind": "Gateway", "name": "gw2"}),
        ),
        must_change={GW, GW2, STOREFRONT, CROSS, CART},
        out_of_reach=UNRELATED,
    ),
    case(
        "policy on a listener reaches only routes on that listener",
        upsert(
            f"""
            apiVersion: {GROUP}/v1alpha1
            kind: TimeoutPolicy
            metadata: {{name: tls-timeout, namespace: infra}}
            spec:
              targetRefs: [{{group: {GATEWAY_GROUP}, kind: Gateway, name: gw, sectionName: tls}}]
              default: {{timeout: 1s}}
            """
        ),
        must_change={GW, PASSTHROUGH, PAYMENTS},
        exactly={GW, PASSTHROUGH, PAYMENTS},
    ),
    case(
        "Direct policy added on a Service reaches that Service alone",
        upsert(
            f"""
            apiVersion: {GROUP}/v1alpha1
            kind: HealthCheckPolicy
            metadata: {{name: bar-health, namespace: apps}}
            spec:
              targetRefs: [{{group: "", kind: Service, name: bar}}]
              path: /ready
            """
        ),
        must_change={BAR},
        exactly={BAR},
    ),
    case(
        "policy on a Namespace reaches what lives there and what hangs below it",
        edit(policy("TimeoutPolicy", "apps", "ns-timeout"), set_spec("default", {"timeout": "9s"})),
        must_change={STOREFRONT, ADMIN, MESH, FOO, BAR, EXTRA},
        out_of_reach=UNRELATED | {CART, CART_SVC, LAB, LABSVC, GW, GW2},
    ),
    case(
        "policy on a GatewayClass reaches every Gateway of the class and below",
        delete(policy("ColorPolicy", "infra", "class-color")),
        must_change={ACME, GW, GW2, STOREFRONT, CROSS, CART, FOO, BAR},
        out_of_reach=UNRELATED,
    ),
    case(
        "route moved to another Gateway reaches the route and its backends",
        edit(STOREFRONT, set_spec("parentRefs", [{"name": "gw2", "namespace": "infra"}])),
        must_change={STOREFRONT, FOO, BAR},
        exactly={STOREFRONT, FOO, BAR, MESH},
    ),
    case(
        "route whose backend changes reaches the old and the new backend",
        edit(STOREFRONT, set_spec("rules.1.backendRefs", [{"name": "foo", "port": 443}])),
        must_change={BAR, FOO},
        out_of_reach=UNRELATED | {GW, CART},
    ),
    case(
        "route deleted reaches itself and the backends it had",
        delete(CART),
        must_change={CART, CART_SVC},
        exactly={CART, CART_SVC},
    ),
    case(
        "Namespace gaining a selected label admits its routes on more listeners",
        edit(namespace("sandbox"), set_labels({"gateway-access": "true"})),
        must_change={LAB, LABSVC},
        exactly={LAB, LABSVC},
    ),
    case(
        "Namespace losing a selected label detaches its ListenerSet and its routes",
        edit(namespace("apps"), set_labels({})),
        must_change={STOREFRONT, ADMIN, EXTRA},
        out_of_reach=UNRELATED | {GW, GW2, CART, CROSS, LAB},
    ),
    case(
        "Namespace label change that no selector reads is still narrow",
        edit(namespace("infra"), set_labels({"team": "edge"})),
        exactly=set(),
    ),
    case(
        "Namespace created without labels changes nothing",
        upsert("{apiVersion: v1, kind: Namespace, metadata: {name: fresh}}"),
        exactly=set(),
    ),
    case(
        "ReferenceGrant removed drops a cross-namespace backend",
        delete(grant("apps", "shop-routes")),
        must_change={BAR},
        out_of_reach=UNRELATED | {GW, STOREFRONT, CART, CROSS},
    ),
    case(
        "ReferenceGrant added lets a cross-namespace policy count",
        upsert(
            f"""
            apiVersion: {GATEWAY_GROUP}/v1beta1
            kind: ReferenceGrant
            metadata: {{name: infra-timeouts, namespace: shop}}
            spec:
              from: [{{group: {GROUP}, kind: TimeoutPolicy, namespace: infra}}]
              to: [{{group: {GATEWAY_GROUP}, kind: HTTPRoute}}]
            """
        ),
        must_change={CART, CART_SVC},
        exactly={CART, CART_SVC},
    ),
    case(
        "listener removed from a Gateway reaches the routes that were on it",
        edit(GW, set_spec("listeners", [{"name": "http", "protocol": "HTTP", "port": 80}])),
        must_change={CART, CART_SVC, PASSTHROUGH, PAYMENTS, LAB},
        out_of_reach=UNRELATED | {GW2, CROSS},
    ),
    case(
        "Gateway closing allowedListeners detaches the ListenerSet and its routes",
        edit(GW, set_spec("allowedListeners", {"namespaces": {"from": "None"}})),
        must_change={EXTRA, ADMIN},
        out_of_reach=UNRELATED | {GW2, CROSS},
    ),
    case(
        "GatewayClass deleted reaches its Gateways and below",
        delete(ACME),
        must_change={ACME, GW, GW2, STOREFRONT},
        out_of_reach=UNRELATED,
    ),
    case(
        "ListenerSet deleted reaches the routes on it",
        delete(EXTRA),
        must_change={EXTRA, ADMIN},
        out_of_reach=UNRELATED | {CART, CROSS, LAB},
    ),
    case(
        "Service port renamed reaches that Service and its mesh routes",
        edit(FOO, set_spec("ports", [{"name": "web", "port": 80}, {"name": "https", "port": 443}])),
        must_change={FOO},
        out_of_reach=UNRELATED | {GW, STOREFRONT, BAR},
    ),
    case(
        "mesh parent Service deleted reaches the mesh route",
        delete(FOO),
        must_change={FOO, MESH},
        out_of_reach=UNRELATED | {GW, STOREFRONT, BAR},
    ),
    case(
        "policy kind relabelled Direct reaches everything its policies reach",
        edit(
            crd("colorpolicies"),
            lambda obj: obj["metadata"].update(labels={f"{GATEWAY_GROUP}/policy": "direct"}),
        ),
        must_change={GW, STOREFRONT, SOLO_ROUTE},
    ),
    case(
        # Its objects stay policies of a kind of unknown class (SPEC §1.3): here nothing changes,
        # but the kind's schema and class could have, so everything they reach is named.
        "policy CRD deleted reaches everything its policies reached",
        delete(crd("retrypolicies")),
        out_of_reach=UNRELATED,
    ),
    case(
        "our annotation written on a Gateway changes nobody's summary",
        edit(
            GW,
            lambda obj: obj["metadata"].update(
                annotations={SETTINGS.annotation_key: "x"}, resourceVersion="42"
            ),
        ),
        exactly=set(),
    ),
    case(
        "a status write on a route changes nobody's summary",
        edit(STOREFRONT, lambda obj: obj.update(status={"parents": []})),
        exactly=set(),
    ),
    case(
        "an object of an unrelated kind changes nobody's summary",
        upsert("{apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: apps}}"),
        exactly=set(),
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_affected_set_covers_every_changed_summary(case: Case) -> None:
    outcome = run(case.change)
    missed = outcome.changed - outcome.affected
    assert not missed, f"summaries changed but not named: {sorted(map(str, missed))}"
    assert case.must_change <= outcome.changed, "the case does not change what it says it does"
    wrongly = outcome.affected & case.out_of_reach
    assert not wrongly, f"named but out of reach: {sorted(map(str, wrongly))}"
    if case.exactly is not None:
        assert outcome.affected == case.exactly
    assert outcome.affected < outcome.everything, "never the whole world"


def test_the_world_is_not_trivial() -> None:
    """Most objects carry a summary, so the brute force has something to compare."""
    store = world()
    values = summaries(store, annotated(store))
    assert len(values) >= 20
    assert sum(v is not None for v in values.values()) >= 15


class PolicyLookupsOnly:
    """A view that says whether a key is a policy, and fails the test on any other question."""

    def __init__(self, view: ClusterView) -> None:
        self._view = view

    def policy(self, key: ObjectKey) -> Any:
        return self._view.policy(key)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the view without the object was asked {name!r}")


@pytest.mark.parametrize("key", [STOREFRONT, GW, FOO, EXTRA], ids=str)
@pytest.mark.parametrize("created", [False, True], ids=["deleted", "created"])
def test_a_created_or_deleted_rung_is_looked_below_only_where_it_is(
    key: ObjectKey, created: bool
) -> None:
    """No context passes through an object a view lacks: a route, Gateway, Service or
    ListenerSet deleted is walked in the view before alone, created in the view after alone
    (each store write pays for this)."""
    store = world()
    summaries(store, annotated(store))  # the memos warm, as the webhook's are
    obj = store.get(key)
    assert obj is not None
    store.delete(key)
    if created:
        store.upsert(obj)
    old, new = (None, obj) if created else (obj, None)
    before = (
        OverlayView(store, upserts=[obj]) if old is not None else OverlayView(store, deletes=[key])
    )
    expected = affected_by_change(key, old, new, before=before, after=store)
    assert key in expected
    lacking = cast(ClusterView, PolicyLookupsOnly(before if created else store))
    views = {"before": lacking, "after": store} if created else {"before": before, "after": lacking}
    assert affected_by_change(key, old, new, **views) == expected
