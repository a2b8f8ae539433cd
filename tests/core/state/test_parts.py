"""`SharedParts` holds equal parts of stored objects once, and never swaps one value for another."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from tests.fixtures.yaml_state import CLUSTER, docs
from webhook.core.state.parts import SharedParts
from webhook.core.state.trim import trim


def test_an_equal_part_is_the_one_kept_before() -> None:
    parts = SharedParts()
    first = parts.share({"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"})
    again = parts.share({"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"})
    assert again is first


@pytest.mark.parametrize(
    ("kept", "other"),
    [
        ({"name": "gw"}, {"name": "gw2"}),
        ({"port": 80}, {"port": "80"}),
        ({"port": 1}, {"port": True}),  # equal in Python, not in JSON
        ({"port": 1}, {"port": 1.0}),
        ({"name": "a", "kind": "b"}, {"kind": "b", "name": "a"}),  # the order is kept as read
        ({"name": "a"}, {"name": "a", "port": 80}),
        (["a", "b"], ["b", "a"]),
        (["a"], {"a": "a"}),
    ],
)
def test_a_part_that_differs_in_any_way_json_shows_is_not_shared(kept: Any, other: Any) -> None:
    parts = SharedParts()
    parts.share(kept)
    assert parts.share(other) is other


def test_a_list_of_shared_parts_is_shared_when_it_holds_the_same_ones() -> None:
    parts = SharedParts()

    def refs(*names: str) -> list[dict[str, str]]:
        return parts.share([parts.share({"name": name}) for name in names])

    assert refs("a", "b") is refs("a", "b")
    assert refs("a", "b") is not refs("a", "c")


def test_nested_members_not_shared_before_are_compared_by_identity() -> None:
    """A malformed ref (a map where a string belongs) is kept as it is, never merged."""
    parts = SharedParts()
    odd = {"name": {"x": 1}}
    assert parts.share(odd) is odd
    same_looking = {"name": {"x": 1}}
    assert parts.share(same_looking) is same_looking


def test_a_sweep_drops_the_parts_nothing_else_holds_and_keeps_the_rest() -> None:
    parts = SharedParts(sweep_from=8)
    held = [parts.share({"name": f"held-{i}"}) for i in range(4)]
    for i in range(4):
        parts.share({"name": f"dropped-{i}"})  # held by nobody once shared
    gc.collect()
    parts.share({"name": "the ninth"})  # the table is full: it sweeps first
    assert len(parts) == 5
    assert all(parts.share({"name": f"held-{i}"}) is held[i] for i in range(4))


def test_a_shared_table_stays_in_proportion_to_what_is_held() -> None:
    parts = SharedParts(sweep_from=64)
    for i in range(10_000):
        parts.share({"name": f"route-{i}"})
    assert len(parts) <= 64


def test_trimmed_with_shared_parts_equals_trimmed_alone() -> None:
    parts = SharedParts()
    for obj in docs(CLUSTER):
        assert trim(obj, parts=parts) == trim(obj)


ROUTES = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: %s, namespace: apps}
spec:
  parentRefs: [{name: gw, namespace: infra}]
  rules: [{backendRefs: [{name: checkout, port: 8080}]}, {name: %s, backendRefs: []}]
"""


def test_routes_on_one_gateway_and_backend_hold_their_refs_once() -> None:
    parts = SharedParts()
    one, two = (
        trim(obj, parts=parts) for obj in docs(ROUTES % ("a", "x") + "---" + ROUTES % ("b", "y"))
    )
    assert one["spec"]["parentRefs"] is two["spec"]["parentRefs"]
    first, second = one["spec"]["rules"][0], two["spec"]["rules"][0]
    assert first["backendRefs"][0] is second["backendRefs"][0]
    assert one["spec"]["rules"][1] is not two["spec"]["rules"][1]  # names differ


def test_services_with_the_same_ports_hold_one_spec() -> None:
    services = docs("""
        apiVersion: v1
        kind: Service
        metadata: {name: a, namespace: apps, uid: u1}
        spec: {ports: [{name: http, port: 80, targetPort: 8080}], clusterIP: 10.0.0.1}
        ---
        apiVersion: v1
        kind: Service
        metadata: {name: b, namespace: apps, uid: u2}
        spec: {ports: [{name: http, port: 80, targetPort: 9090}], clusterIP: 10.0.0.2}
        """)
    parts = SharedParts()
    a, b = (trim(obj, parts=parts) for obj in services)
    assert a["spec"] is b["spec"] and a["spec"] == {"ports": [{"name": "http", "port": 80}]}
