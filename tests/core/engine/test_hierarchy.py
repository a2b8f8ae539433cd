"""Contexts (SPEC §4): who attaches where, what paths lead to an object, and the reverse."""

from __future__ import annotations

import pytest

from tests.fixtures.engine import (
    CLUSTER,
    CRDS,
    docs,
    gateway,
    gateway_class,
    listener_set,
    route,
    service,
    store_of,
)
from webhook.core.engine import hierarchy, memo
from webhook.core.model.refs import ObjectKey
from webhook.core.state.overlay import OverlayView
from webhook.core.state.store import ClusterView

NAMESPACES = """
apiVersion: v1
kind: Namespace
metadata: {name: infra}
---
apiVersion: v1
kind: Namespace
metadata: {name: apps, labels: {team: apps, tier: web}}
---
apiVersion: v1
kind: Namespace
metadata: {name: other, labels: {team: other}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: acme}
"""


def paths(view: ClusterView, key: ObjectKey) -> list[tuple[str, ...]]:
    return [hierarchy.path_of(c) for c in hierarchy.contexts_of(key, view)]


def gateway_with(listener: str) -> str:
    return f"""
    apiVersion: gateway.networking.k8s.io/v1
    kind: Gateway
    metadata: {{name: gw, namespace: infra}}
    spec:
      gatewayClassName: acme
      listeners: [{listener}]
    """


def route_in(ns: str, kind: str = "HTTPRoute", parent: str = "{name: gw, namespace: infra}") -> str:
    return f"""
    apiVersion: gateway.networking.k8s.io/v1
    kind: {kind}
    metadata: {{name: r, namespace: {ns}}}
    spec:
      parentRefs: [{parent}]
    """


ON_LISTENER = ("GatewayClass/acme", "Gateway/infra/gw#l", "HTTPRoute/apps/r")


@pytest.mark.parametrize(
    ("listener", "route_ns", "attached"),
    [
        pytest.param(
            "{name: l, port: 80, protocol: HTTP}",
            "infra",
            True,
            id="same_is_the_default_and_admits_its_own_namespace",
        ),
        pytest.param(
            "{name: l, port: 80, protocol: HTTP}",
            "apps",
            False,
            id="same_is_the_default_and_refuses_others",
        ),
        pytest.param(
            "{name: l, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}",
            "apps",
            False,
            id="same_refuses_others",
        ),
        pytest.param(
            "{name: l, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}",
            "apps",
            True,
            id="all",
        ),
        pytest.param(
            "{name: l, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Selector, selector: {matchLabels: {team: apps}}}}}",
            "apps",
            True,
            id="selector_match_labels",
        ),
        pytest.param(
            "{name: l, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Selector, selector: {matchLabels: {team: x}}}}}",
            "apps",
            False,
            id="selector_match_labels_mismatch",
        ),
        pytest.param(
            "{name: l, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Selector, selector: "
            "{matchExpressions: [{key: tier, operator: In, values: [web, api]}]}}}}",
            "apps",
            True,
            id="selector_expression_in",
        ),
        pytest.param(
            "{name: l, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Selector, selector: "
            "{matchExpressions: [{key: team, operator: NotIn, values: [apps]}]}}}}",
            "apps",
            False,
            id="selector_expression_not_in",
        ),
        pytest.param(
            "{name: l, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Selector, selector: "
            "{matchExpressions: [{key: tier, operator: Exists}, {key: legacy, operator: DoesNotExist}]}}}}",
            "apps",
            True,
            id="selector_expressions_exists_and_does_not_exist",
        ),
        pytest.param(
            "{name: l, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Selector, selector: "
            "{matchLabels: {kubernetes.io/metadata.name: apps}}}}}",
            "apps",
            True,
            id="selector_sees_the_namespace_name_label",
        ),
        pytest.param(
            "{name: l, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Selector}}}",
            "apps",
            False,
            id="selector_without_selector_matches_nothing",
        ),
        pytest.param(
            "{name: l, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}, kinds: [{kind: GRPCRoute}]}}",
            "apps",
            False,
            id="kinds_list_refuses_other_kinds",
        ),
        pytest.param(
            "{name: l, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}, "
            "kinds: [{group: gateway.networking.k8s.io, kind: HTTPRoute}]}}",
            "apps",
            True,
            id="kinds_list_admits_its_kinds",
        ),
        pytest.param(
            "{name: l, port: 443, protocol: HTTPS, allowedRoutes: {namespaces: {from: All}}}",
            "apps",
            True,
            id="http_route_fits_https",
        ),
        pytest.param(
            "{name: l, port: 443, protocol: TLS, allowedRoutes: {namespaces: {from: All}}}",
            "apps",
            False,
            id="http_route_does_not_fit_tls",
        ),
        pytest.param(
            "{name: l, port: 9000, protocol: TCP, allowedRoutes: {namespaces: {from: All}}}",
            "apps",
            False,
            id="http_route_does_not_fit_tcp",
        ),
        # A protocol no schema let through (a manifest read by `check`): unhashable, it once
        # made a 500; it names no protocol, so it admits no route.
        pytest.param(
            "{name: l, port: 80, protocol: [HTTP], allowedRoutes: {namespaces: {from: All}}}",
            "apps",
            False,
            id="a_protocol_that_is_a_list_admits_no_route",
        ),
        pytest.param(
            "{name: l, port: 80, protocol: {HTTP: yes}, allowedRoutes: {namespaces: {from: All}}}",
            "apps",
            False,
            id="a_protocol_that_is_a_map_admits_no_route",
        ),
    ],
)
def test_allowed_routes(listener: str, route_ns: str, attached: bool) -> None:
    store = store_of(NAMESPACES, gateway_with(listener), route_in(route_ns))
    expected = [(*ON_LISTENER[:2], f"HTTPRoute/{route_ns}/r")] if attached else []
    assert paths(store, route(route_ns, "r")) == expected


@pytest.mark.parametrize(
    ("kind", "protocol", "fits"),
    [
        ("GRPCRoute", "HTTPS", True),
        ("GRPCRoute", "TCP", False),
        ("TLSRoute", "TLS", True),
        ("TLSRoute", "HTTPS", False),
        ("TCPRoute", "TCP", True),
        ("TCPRoute", "UDP", False),
        ("UDPRoute", "UDP", True),
    ],
)
def test_protocol_fit(kind: str, protocol: str, fits: bool) -> None:
    listener = (
        f"{{name: l, port: 1, protocol: {protocol}, allowedRoutes: {{namespaces: {{from: All}}}}}}"
    )
    store = store_of(NAMESPACES, gateway_with(listener), route_in("apps", kind=kind))
    assert bool(paths(store, route("apps", "r", kind))) is fits


TWO_LISTENERS = gateway_with(
    "{name: a, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}, "
    "{name: b, port: 8080, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}"
)


def test_without_section_name_a_route_is_in_a_context_per_admitting_listener() -> None:
    store = store_of(NAMESPACES, TWO_LISTENERS, route_in("apps"))
    assert paths(store, route("apps", "r")) == [
        ("GatewayClass/acme", "Gateway/infra/gw#a", "HTTPRoute/apps/r"),
        ("GatewayClass/acme", "Gateway/infra/gw#b", "HTTPRoute/apps/r"),
    ]


def test_section_name_picks_one_listener_and_a_missing_one_gives_nothing() -> None:
    on_b = store_of(
        NAMESPACES,
        TWO_LISTENERS,
        route_in("apps", parent="{name: gw, namespace: infra, sectionName: b}"),
    )
    assert paths(on_b, route("apps", "r")) == [
        ("GatewayClass/acme", "Gateway/infra/gw#b", "HTTPRoute/apps/r")
    ]
    on_c = store_of(
        NAMESPACES,
        TWO_LISTENERS,
        route_in("apps", parent="{name: gw, namespace: infra, sectionName: c}"),
    )
    assert paths(on_c, route("apps", "r")) == []


def test_section_name_still_needs_the_listener_to_admit_the_route() -> None:
    store = store_of(
        NAMESPACES,
        gateway_with("{name: a, port: 80, protocol: HTTP}"),
        route_in("apps", parent="{name: gw, namespace: infra, sectionName: a}"),
    )
    assert paths(store, route("apps", "r")) == []


def test_a_route_on_two_gateways_has_two_contexts() -> None:
    store = store_of(CRDS, CLUSTER)
    for doc in docs(
        """
        apiVersion: gateway.networking.k8s.io/v1
        kind: Gateway
        metadata: {name: gw2, namespace: apps}
        spec:
          gatewayClassName: acme
          listeners: [{name: web, port: 80, protocol: HTTP}]
        ---
        apiVersion: gateway.networking.k8s.io/v1
        kind: HTTPRoute
        metadata: {name: r, namespace: apps}
        spec:
          parentRefs: [{name: gw, namespace: infra, sectionName: https}, {name: gw2}]
        """
    ):
        store.upsert(doc)
    assert paths(store, route("apps", "r")) == [
        ("GatewayClass/acme", "Gateway/apps/gw2#web", "HTTPRoute/apps/r"),
        ("GatewayClass/acme", "Gateway/infra/gw#https", "HTTPRoute/apps/r"),
    ]


def test_namespace_rungs_are_in_the_context_but_not_in_the_path() -> None:
    store = store_of(CRDS, CLUSTER)
    (ctx,) = hierarchy.contexts_of(route("apps", "r"), store)
    assert [r.display() for r in ctx] == [
        "GatewayClass/acme",
        "Namespace/infra",
        "Gateway/infra/gw",
        "Gateway/infra/gw#https",
        "Namespace/apps",
        "HTTPRoute/apps/r",
    ]
    assert [r.implied for r in ctx] == [False, True, False, False, True, False]


def test_gateway_class_and_gateway_contexts() -> None:
    store = store_of(CRDS, CLUSTER)
    assert paths(store, gateway_class("acme")) == [("GatewayClass/acme",)]
    assert paths(store, gateway("infra", "gw")) == [("GatewayClass/acme", "Gateway/infra/gw")]
    without_class = store_of(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: infra}",
        gateway_with("{name: l, port: 80, protocol: HTTP}"),
    )
    assert paths(without_class, gateway("infra", "gw")) == [("Gateway/infra/gw",)]


LISTENER_SET = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: infra}
spec:
  gatewayClassName: acme
  allowedListeners: {namespaces: {from: %s}}
  listeners: [{name: main, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: extra, namespace: apps}
spec:
  parentRef: {name: gw, namespace: infra}
  listeners: [{name: tls, port: 443, protocol: HTTPS}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: apps}
spec:
  parentRefs: [{kind: ListenerSet, name: extra}]
"""


def test_a_listener_set_sits_between_its_gateway_and_its_routes() -> None:
    store = store_of(NAMESPACES, LISTENER_SET % "All")
    assert paths(store, listener_set("apps", "extra")) == [
        ("GatewayClass/acme", "Gateway/infra/gw", "ListenerSet/apps/extra")
    ]
    assert paths(store, route("apps", "r")) == [
        ("GatewayClass/acme", "Gateway/infra/gw", "ListenerSet/apps/extra#tls", "HTTPRoute/apps/r")
    ]


def test_a_listener_set_the_gateway_does_not_allow_has_no_context() -> None:
    for refused in ("None", "Same"):
        store = store_of(NAMESPACES, LISTENER_SET % refused)
        assert paths(store, listener_set("apps", "extra")) == []
        assert paths(store, route("apps", "r")) == []


MESH = """
apiVersion: v1
kind: Service
metadata: {name: mesh-svc, namespace: apps}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: apps}
spec:
  parentRefs: [{group: "", kind: Service, name: mesh-svc, port: 80}]
  rules: [{backendRefs: [{name: mesh-svc, port: 80}]}]
"""


def test_a_mesh_parent_service_replaces_gateway_and_listener() -> None:
    store = store_of(NAMESPACES, MESH)
    assert paths(store, route("apps", "r")) == [("Service/apps/mesh-svc", "HTTPRoute/apps/r")]
    assert paths(store, service("apps", "mesh-svc")) == [
        ("Service/apps/mesh-svc", "HTTPRoute/apps/r", "Service/apps/mesh-svc#http")
    ]


def test_backends_are_in_a_context_per_route_context_and_backend_ref() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        """
        apiVersion: gateway.networking.k8s.io/v1
        kind: HTTPRoute
        metadata: {name: r, namespace: apps}
        spec:
          parentRefs: [{name: gw, namespace: infra}]
          rules:
          - name: web
            backendRefs: [{name: foo, port: 80}]
          - backendRefs: [{name: foo, port: 443}, {name: foo}]
        """,
    )
    via = (
        ("GatewayClass/acme", "Gateway/infra/gw#http"),
        ("GatewayClass/acme", "Gateway/infra/gw#https"),
    )
    expected = []
    for parent in via:
        expected += [
            (*parent, "HTTPRoute/apps/r", "Service/apps/foo"),
            (*parent, "HTTPRoute/apps/r", "Service/apps/foo#https"),
            (*parent, "HTTPRoute/apps/r#web", "Service/apps/foo#http"),
        ]
    assert sorted(paths(store, service("apps", "foo"))) == sorted(expected)


def test_an_unnamed_port_is_no_section_and_an_unused_service_stands_alone() -> None:
    store = store_of(
        CRDS,
        CLUSTER,
        "apiVersion: v1\nkind: Service\nmetadata: {name: idle, namespace: apps}\nspec: {ports: [{port: 80}]}",
    )
    assert paths(store, service("apps", "bar")) == [
        ("GatewayClass/acme", "Gateway/infra/gw#https", "HTTPRoute/apps/r", "Service/apps/bar")
    ]
    assert paths(store, service("apps", "idle")) == [("Service/apps/idle",)]


def test_a_cross_namespace_backend_needs_a_reference_grant() -> None:
    backend = """
    apiVersion: v1
    kind: Service
    metadata: {name: db, namespace: infra}
    ---
    apiVersion: gateway.networking.k8s.io/v1
    kind: HTTPRoute
    metadata: {name: r, namespace: apps}
    spec:
      parentRefs: [{name: gw, namespace: infra, sectionName: https}]
      rules: [{backendRefs: [{name: db, namespace: infra, port: 5432}]}]
    """
    grant = """
    apiVersion: gateway.networking.k8s.io/v1beta1
    kind: ReferenceGrant
    metadata: {name: apps-to-db, namespace: infra}
    spec:
      from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: apps}]
      to: [{group: "", kind: Service, name: db}]
    """
    assert paths(store_of(CRDS, CLUSTER, backend), service("infra", "db")) == [
        ("Service/infra/db",)
    ]
    assert paths(store_of(CRDS, CLUSTER, backend, grant), service("infra", "db")) == [
        ("GatewayClass/acme", "Gateway/infra/gw#https", "HTTPRoute/apps/r", "Service/infra/db")
    ]


def test_a_route_that_attaches_nowhere_has_no_context() -> None:
    store = store_of(CRDS, CLUSTER, route_in("apps", parent="{name: missing, namespace: infra}"))
    assert paths(store, route("apps", "r")) == []


def test_with_sections_adds_a_context_per_targeted_section() -> None:
    store = store_of(CRDS, CLUSTER)
    contexts = hierarchy.contexts_of(route("apps", "r"), store)
    extended = hierarchy.with_sections(contexts, route("apps", "r"), ["rule-a"])
    assert [hierarchy.path_of(c)[-1] for c in extended] == [
        "HTTPRoute/apps/r",
        "HTTPRoute/apps/r#rule-a",
    ]
    foo = hierarchy.contexts_of(service("apps", "foo"), store)  # reached through port `http` only
    assert [
        hierarchy.path_of(c)
        for c in hierarchy.with_sections(foo, service("apps", "foo"), ["https"])
    ] == [
        ("Service/apps/foo#https",),
        (
            "GatewayClass/acme",
            "Gateway/infra/gw#https",
            "HTTPRoute/apps/r",
            "Service/apps/foo#http",
        ),
    ]


# --- the reverse: fan-out -------------------------------------------------------------------


def test_affected_by_follows_the_ladder_down() -> None:
    store = store_of(CRDS, CLUSTER, TWO_ROUTES)
    everything = {
        gateway("infra", "gw"),
        route("apps", "r"),
        route("apps", "plain"),
        service("apps", "foo"),
        service("apps", "bar"),
    }
    assert hierarchy.affected_by(gateway_class("acme"), None, store) == {
        gateway_class("acme"),
        *everything,
    }
    assert hierarchy.affected_by(gateway("infra", "gw"), None, store) == everything
    assert hierarchy.affected_by(gateway("infra", "gw"), "http", store) == {
        gateway("infra", "gw"),
        route("apps", "plain"),
    }
    assert hierarchy.affected_by(route("apps", "r"), None, store) == {
        route("apps", "r"),
        service("apps", "foo"),
        service("apps", "bar"),
    }
    namespace = ObjectKey("", "Namespace", "", "apps")
    assert hierarchy.affected_by(namespace, None, store) == everything - {gateway("infra", "gw")}
    assert hierarchy.affected_by(gateway("infra", "gw"), None, store, inherited=False) == {
        gateway("infra", "gw")
    }


TWO_ROUTES = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: plain, namespace: apps}
spec:
  parentRefs: [{name: gw, namespace: infra, sectionName: http}]
"""


def test_nothing_lies_below_an_absent_route_and_no_index_is_built_to_say_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A route's create is heard with the cluster as it was without it: an overlay, whose
    index would be built for this question alone. Below a route is what the route names."""
    store = store_of(CRDS, CLUSTER, TWO_ROUTES)
    without = OverlayView(store, deletes=[route("apps", "r")])

    def no_index(view: ClusterView) -> object:
        raise AssertionError("an index was built")

    monkeypatch.setattr(hierarchy, "index_of", no_index)
    assert hierarchy.affected_by(route("apps", "r"), None, without) == set()
    assert hierarchy.affected_by(route("apps", "gone"), "rule-1", store) == set()


def test_the_index_follows_the_store_and_overlays_layer_on_it() -> None:
    store = store_of(CRDS, CLUSTER)
    first = memo.index_of(store)
    assert memo.index_of(store) is first  # cached
    store.upsert(docs("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: apps}")[0])
    assert memo.index_of(store) is first  # not a hierarchy kind
    moved = docs(route_in("apps", parent="{name: gw, namespace: infra, sectionName: http}"))[0]
    overlay = OverlayView(store, upserts=[moved])
    foo, gw = service("apps", "foo"), gateway("infra", "gw")
    assert set(memo.index_of(overlay).routes_of_backend(foo)) == set()
    assert set(memo.index_of(store).routes_of_backend(foo)) == {route("apps", "r")}
    store.upsert(moved)
    assert memo.index_of(store) is first  # kept, the route's entries moved
    assert set(memo.index_of(store).routes_of_backend(foo)) == set()
    assert set(memo.index_of(store).routes_of_parent(gw)) >= {route("apps", "r")}


def test_printed_paths_through_one_rung_share_its_string() -> None:
    """Paths are kept, one per context: the same rung printed in thousands of contexts is one
    string, not one each."""
    gw = ObjectKey("gateway.networking.k8s.io", "Gateway", "infra", "gw")
    first = hierarchy.path_of((hierarchy.Rung(gw, "https"), hierarchy.Rung(route("apps", "a"))))
    second = hierarchy.path_of((hierarchy.Rung(gw, "https"), hierarchy.Rung(route("apps", "b"))))
    assert first[0] == second[0] == "Gateway/infra/gw#https"
    assert first[0] is second[0]
