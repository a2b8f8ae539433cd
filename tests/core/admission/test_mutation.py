"""The `/mutate` patch (SPEC §3.1): our annotation only, computed from the incoming object."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures.budget import examples
from tests.fixtures.engine import CLUSTER, CRDS, docs, store_of
from webhook.core.admission import mutation
from webhook.core.admission.reviews import Request
from webhook.core.annotation import summary
from webhook.core.annotation.cache import SummaryCache
from webhook.core.model.refs import ObjectKey
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store

SETTINGS = Settings()
KEY = SETTINGS.annotation_key

POLICIES = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw2, namespace: infra}
spec:
  gatewayClassName: acme
  listeners: [{name: web, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}]
---
apiVersion: policies.example.com/v1alpha1
kind: ColorPolicy
metadata: {name: gw, namespace: infra}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  default: {color: red}
---
apiVersion: policies.example.com/v1alpha1
kind: ColorPolicy
metadata: {name: gw2, namespace: infra}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw2}]
  default: {color: blue}
"""


def cluster() -> Store:
    return store_of(CRDS, CLUSTER, POLICIES)


def incoming_route(parent: str = "gw", annotations: Any = None, **metadata: Any) -> dict[str, Any]:
    (obj,) = docs(
        f"""
        apiVersion: gateway.networking.k8s.io/v1
        kind: HTTPRoute
        metadata: {{name: r, namespace: apps}}
        spec:
          parentRefs: [{{name: {parent}, namespace: infra}}]
          rules: [{{backendRefs: [{{name: foo, port: 80}}]}}]
        """
    )
    if annotations is not None:
        obj["metadata"]["annotations"] = annotations
    obj["metadata"].update(metadata)
    return obj


def request(
    obj: dict[str, Any] | None,
    *,
    operation: str = "CREATE",
    kind: tuple[str, str] = ("gateway.networking.k8s.io", "HTTPRoute"),
    **extra: Any,
) -> Request:
    group, name = kind
    req: dict[str, Any] = {
        "uid": "u-1",
        "kind": {"group": group, "version": "v1", "kind": name},
        "resource": {"group": group, "version": "v1", "resource": name.lower() + "s"},
        "operation": operation,
        "namespace": "apps",
        "object": obj,
        **extra,
    }
    return req  # type: ignore[return-value]


def applied(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    return jsonpatch.apply_patch(copy.deepcopy(obj), ops)  # type: ignore[no-any-return]


def colours(value: str) -> list[str]:
    contexts = json.loads(value)["policies"]["ColorPolicy.policies.example.com"]["contexts"]
    return [c["effective"]["color"] for c in contexts]


def test_without_an_annotations_map_the_patch_creates_it() -> None:
    obj = incoming_route()
    ops = mutation.mutate(request(obj), view=cluster(), settings=SETTINGS)
    assert [(op["op"], op["path"]) for op in ops] == [("add", "/metadata/annotations")]
    result = applied(obj, ops)
    assert list(result["metadata"]["annotations"]) == [KEY]
    value = json.loads(result["metadata"]["annotations"][KEY])
    (entry,) = value["policies"]["ColorPolicy.policies.example.com"]["contexts"]
    assert entry["effective"] == {"color": "red"}
    assert len(entry["paths"]) == 2  # both listeners of gw, alike, so one entry


def test_annotations_null_is_replaced_by_a_map() -> None:
    obj = incoming_route()
    obj["metadata"]["annotations"] = None
    ops = mutation.mutate(request(obj), view=cluster(), settings=SETTINGS)
    assert applied(obj, ops)["metadata"]["annotations"].keys() == {KEY}


def test_other_annotations_are_untouched_and_the_key_is_escaped() -> None:
    obj = incoming_route(annotations={"team": "apps", "a/b~c": "x"})
    ops = mutation.mutate(request(obj), view=cluster(), settings=SETTINGS)
    assert [(op["op"], op["path"]) for op in ops] == [
        ("add", "/metadata/annotations/policy-attachment.dev~1effective-policies")
    ]
    result = applied(obj, ops)
    assert result["metadata"]["annotations"]["team"] == "apps"
    assert result["metadata"]["annotations"]["a/b~c"] == "x"


def test_a_prefix_with_a_tilde_is_escaped_tilde_first() -> None:
    settings = Settings(annotation_prefix="ex~1ample.com")
    obj = incoming_route(annotations={"ex~1ample.com/effective-policies": "stale"})
    ops = mutation.mutate(request(obj), view=cluster(), settings=settings)
    assert [(op["op"], op["path"]) for op in ops] == [
        ("replace", "/metadata/annotations/ex~01ample.com~1effective-policies")
    ]
    result = applied(obj, ops)
    assert set(result["metadata"]["annotations"]) == {"ex~1ample.com/effective-policies"}
    assert colours(result["metadata"]["annotations"]["ex~1ample.com/effective-policies"]) == ["red"]


def test_an_up_to_date_annotation_gives_no_operations() -> None:
    obj = incoming_route()
    first = applied(obj, mutation.mutate(request(obj), view=cluster(), settings=SETTINGS))
    assert (
        mutation.mutate(request(first, operation="UPDATE"), view=cluster(), settings=SETTINGS) == []
    )


def test_when_no_policy_applies_the_annotation_is_removed_and_nothing_else() -> None:
    obj = incoming_route(parent="nowhere", annotations={KEY: "{}", "keep": "me"})
    ops = mutation.mutate(request(obj, operation="UPDATE"), view=cluster(), settings=SETTINGS)
    assert ops == [
        {"op": "remove", "path": "/metadata/annotations/policy-attachment.dev~1effective-policies"}
    ]
    assert applied(obj, ops)["metadata"]["annotations"] == {"keep": "me"}
    bare = incoming_route(parent="nowhere")
    assert mutation.mutate(request(bare), view=cluster(), settings=SETTINGS) == []


def test_an_update_that_moves_a_route_uses_the_incoming_parent_refs() -> None:
    store = cluster()
    store.upsert(incoming_route(parent="gw"))  # stored: on gw
    moved = incoming_route(parent="gw2")
    ops = mutation.mutate(request(moved, operation="UPDATE"), view=store, settings=SETTINGS)
    value = applied(moved, ops)["metadata"]["annotations"][KEY]
    assert colours(value) == ["blue"]
    assert json.loads(value)["policies"]["ColorPolicy.policies.example.com"]["policies"] == [
        "infra/gw2"
    ]


def test_the_namespace_may_come_from_the_request() -> None:
    obj = incoming_route()
    del obj["metadata"]["namespace"]
    ops = mutation.mutate(request(obj), view=cluster(), settings=SETTINGS)
    assert colours(applied(obj, ops)["metadata"]["annotations"][KEY]) == ["red"]


def test_a_service_create_sees_the_routes_already_there() -> None:
    (svc,) = docs(
        "apiVersion: v1\nkind: Service\nmetadata: {name: foo, namespace: apps}\nspec: {ports: [{name: web, port: 80}]}"
    )
    ops = mutation.mutate(request(svc, kind=("", "Service")), view=cluster(), settings=SETTINGS)
    value = json.loads(applied(svc, ops)["metadata"]["annotations"][KEY])
    (entry,) = value["policies"]["ColorPolicy.policies.example.com"]["contexts"]
    assert entry["paths"] == [
        ["GatewayClass/acme", "Gateway/infra/gw#https", "HTTPRoute/apps/r", "Service/apps/foo#web"]
    ]


@pytest.mark.parametrize(
    "req",
    [
        pytest.param(request(incoming_route(), operation="DELETE"), id="delete"),
        pytest.param(request(incoming_route(), operation="CONNECT"), id="connect"),
        pytest.param(
            request(incoming_route(), operation="UPDATE", subResource="status"), id="status"
        ),
        pytest.param(
            request(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
                kind=("", "ConfigMap"),
            ),
            id="other_kind",
        ),
        pytest.param(
            request(
                {
                    "apiVersion": "policies.example.com/v1alpha1",
                    "kind": "ColorPolicy",
                    "metadata": {"name": "p", "namespace": "apps"},
                },
                kind=("policies.example.com", "ColorPolicy"),
            ),
            id="policies_are_never_mutated",
        ),
        pytest.param(
            request(incoming_route(name="", generateName="r-")), id="generate_name_without_name_yet"
        ),
    ],
)
def test_nothing_for_other_operations_kinds_and_subresources(req: Request) -> None:
    assert mutation.mutate(req, view=cluster(), settings=SETTINGS) == []


# --- property: the patch touches our annotation and nothing else ------------------------------

JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=5))
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
ANNOTATIONS = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(["a", "a/b", "x~y", "~1", KEY, "team"]), st.text(max_size=8), max_size=4
    ),
)
STORE = cluster()


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parent=st.sampled_from(["gw", "gw2", "nowhere"]),
    annotations=ANNOTATIONS,
    labels=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
    extra=st.dictionaries(st.text(min_size=1, max_size=6), JSON_VALUES, max_size=3),
)
def test_the_patch_leaves_every_other_field_byte_identical(
    parent: str, annotations: Any, labels: dict[str, str], extra: dict[str, Any]
) -> None:
    obj = incoming_route(parent=parent, labels=labels)
    if annotations is not None:
        obj["metadata"]["annotations"] = annotations
    obj["spec"]["extra"] = extra
    ops = mutation.mutate(request(obj, operation="UPDATE"), view=STORE, settings=SETTINGS)
    result = applied(obj, ops)

    def without_ours(o: dict[str, Any]) -> bytes:
        o = copy.deepcopy(o)
        notes = o["metadata"].pop("annotations", None) or {}
        notes.pop(KEY, None)
        return json.dumps([o, notes], sort_keys=False).encode()

    assert without_ours(result) == without_ours(obj)
    assert all(op["path"].startswith("/metadata/annotations") for op in ops)
    again = mutation.mutate(request(result, operation="UPDATE"), view=STORE, settings=SETTINGS)
    assert again == []  # applying our own patch makes it a fixed point


# --- the cache's answer when nothing a summary reads has changed --------------------------------


def stored_service(**spec: Any) -> dict[str, Any]:
    (svc,) = docs(
        "apiVersion: v1\nkind: Service\nmetadata: {name: foo, namespace: apps}\n"
        "spec: {ports: [{name: http, port: 80}, {name: https, port: 443}]}"
    )
    svc["spec"].update(spec)
    return svc


def test_an_update_that_changes_only_annotations_is_answered_from_the_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = cluster()
    store.upsert(incoming_route())
    cache = SummaryCache(store, SETTINGS)
    right = cache.get(ObjectKey("gateway.networking.k8s.io", "HTTPRoute", "apps", "r"))
    echo = incoming_route(annotations={KEY: "an older value", "team": "x"}, resourceVersion="9")

    def no_second_computation(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("computed on an overlay although nothing it reads changed")

    monkeypatch.setattr(summary, "summarize", no_second_computation)
    ops = mutation.mutate(
        request(echo, operation="UPDATE"), view=store, settings=SETTINGS, cache=cache
    )
    assert applied(echo, ops)["metadata"]["annotations"] == {KEY: right, "team": "x"}
    assert cache.hits == 1


def test_an_update_that_moves_a_route_is_computed_even_with_a_cache() -> None:
    store = cluster()
    store.upsert(incoming_route(parent="gw"))
    cache = SummaryCache(store, SETTINGS)
    moved = incoming_route(parent="gw2")
    ops = mutation.mutate(
        request(moved, operation="UPDATE"), view=store, settings=SETTINGS, cache=cache
    )
    assert colours(applied(moved, ops)["metadata"]["annotations"][KEY]) == ["blue"]
    assert cache.hits == cache.misses == 0, "the cache (of the stored route) was not asked"


def test_a_service_whose_selector_changes_is_answered_from_the_cache() -> None:
    """A Service is stored trimmed to its ports (trim.py): its selector is read by no summary."""
    store = cluster()
    cache = SummaryCache(store, SETTINGS)
    svc = stored_service(selector={"app": "web"}, clusterIP="10.0.0.1")
    assert mutation.unchanged_for_summaries(ObjectKey("", "Service", "apps", "foo"), svc, store)
    with_cache = mutation.mutate(
        request(svc, operation="UPDATE", kind=("", "Service")),
        view=store,
        settings=SETTINGS,
        cache=cache,
    )
    without = mutation.mutate(
        request(svc, operation="UPDATE", kind=("", "Service")), view=store, settings=SETTINGS
    )
    assert with_cache == without != []
    assert cache.misses == 1


STORED_ROUTE = incoming_route(parent="gw", labels={"app": "web"}, resourceVersion="5")


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    read_changes=st.booleans(),
    parent=st.sampled_from(["gw", "gw2", "nowhere"]),
    annotations=ANNOTATIONS,
    labels=st.sampled_from([{"app": "web"}, {"app": "api"}, {}]),
    version=st.sampled_from(["5", "6"]),
    status=st.none() | st.dictionaries(st.sampled_from(["parents", "x"]), JSON_VALUES, max_size=2),
    extra=st.none() | st.dictionaries(st.text(min_size=1, max_size=6), JSON_VALUES, max_size=2),
    ports=st.sampled_from([[{"name": "http", "port": 80}], [{"name": "web", "port": 8080}]]),
    selector=st.none() | st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
    kind=st.sampled_from(["HTTPRoute", "Service"]),
)
def test_with_or_without_the_cache_the_patch_is_the_same(
    read_changes: bool,
    parent: str,
    annotations: Any,
    labels: dict[str, str],
    version: str,
    status: Any,
    extra: Any,
    ports: Any,
    selector: Any,
    kind: str,
) -> None:
    """The shortcut's oracle is the computation it replaces: byte for byte the same patch.

    Half the examples change only what no summary reads (the shortcut's case), half may also
    change what a summary reads (parentRefs, labels, the spec, a Service's ports).
    """
    store = cluster()
    store.upsert(copy.deepcopy(STORED_ROUTE))
    cache = SummaryCache(store, SETTINGS)
    if kind == "HTTPRoute":
        if not read_changes:
            parent, labels, extra = "gw", {"app": "web"}, None
        obj = incoming_route(parent=parent, labels=labels, resourceVersion=version)
        if extra is not None:
            obj["spec"]["extra"] = extra
        gk = ("gateway.networking.k8s.io", "HTTPRoute")
    else:
        obj = stored_service()
        if read_changes:
            obj["spec"]["ports"] = ports
        if selector is not None:
            obj["spec"]["selector"] = selector
        gk = ("", "Service")
    if annotations is not None:
        obj["metadata"]["annotations"] = annotations
    if status is not None:
        obj["status"] = status
    req = request(obj, operation="UPDATE", kind=gk)
    for _ in range(2):  # the second time from a filled cache
        with_cache = mutation.mutate(req, view=store, settings=SETTINGS, cache=cache)
        without = mutation.mutate(req, view=store, settings=SETTINGS)
        assert json.dumps(with_cache).encode() == json.dumps(without).encode()
    if not read_changes:
        assert cache.hits == 1 and cache.misses == 1, "the shortcut was taken"


HTTPS_LISTENER_POLICY = """
apiVersion: policies.example.com/v1alpha1
kind: ColorPolicy
metadata: {name: gw-https, namespace: infra}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: https}]
  default: {color: green}
"""


def test_a_gateway_whose_listeners_change_is_computed_from_them_even_with_a_cache() -> None:
    """SPEC §3.1: the listeners as submitted, not as stored (whose value the cache holds)."""
    store = cluster()
    store.upsert(*docs(HTTPS_LISTENER_POLICY))
    cache = SummaryCache(store, SETTINGS)
    key = ObjectKey("gateway.networking.k8s.io", "Gateway", "infra", "gw")
    assert colours(cache.get(key) or "") == ["red", "green"]  # stored: the https listener
    gateway = copy.deepcopy(dict(store.get(key) or {}))
    gateway["spec"]["listeners"] = [{"name": "web", "port": 8080, "protocol": "HTTP"}]
    req = request(gateway, operation="UPDATE", kind=(key.group, key.kind), namespace="infra")
    ops = mutation.mutate(req, view=store, settings=SETTINGS, cache=cache)
    assert ops == mutation.mutate(req, view=store, settings=SETTINGS)
    assert colours(applied(gateway, ops)["metadata"]["annotations"][KEY]) == ["red"]
    assert (cache.hits, cache.misses) == (0, 1), "the cache was asked only above"


def test_a_created_route_once_written_is_in_the_cache_with_the_value_mutate_patched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """/mutate hands its value over: the leader, asked about the route its watch brings, finds
    it without a second computation (the uid and creation time the API server adds are not
    read by a route's summary)."""
    store = cluster()
    cache = SummaryCache(store, SETTINGS)
    created = incoming_route()
    created["metadata"]["namespace"] = ""  # left to the request's, as `kubectl create -n` may
    ops = mutation.mutate(request(created), view=store, settings=SETTINGS, cache=cache)
    written = applied(created, ops)
    written["metadata"].update(
        namespace="apps", uid="7d1c", creationTimestamp="2026-12-03T20:00:00Z", resourceVersion="41"
    )
    store.upsert(written)

    def no_second_computation(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("computed again")

    monkeypatch.setattr(summary, "summarize_in_pieces", no_second_computation)
    key = ObjectKey("gateway.networking.k8s.io", "HTTPRoute", "apps", "r")
    assert cache.get(key) == written["metadata"]["annotations"][KEY]
    assert colours(written["metadata"]["annotations"][KEY]) == ["red"]
    assert cache.adopted == 1 and cache.hits == 1
