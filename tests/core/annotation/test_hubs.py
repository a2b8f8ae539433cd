"""A Service's value from its pieces by route (`hubs`): the same bytes as the whole computation,
at every size cap and after any change, for the cost of the route that changed."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.fixtures.budget import examples
from tests.fixtures.changes import (
    GROUP,
    OPS,
    TIMES,
    Op,
    annotated,
    apply,
    assert_fresh,
    base_store,
    gateway_doc,
    policy_docs,
    rebuilt,
    route_doc,
)
from tests.fixtures.engine import route, service
from webhook.core.annotation import hubs, summary
from webhook.core.annotation.cache import SummaryCache
from webhook.core.engine import effective, hierarchy, memo
from webhook.core.model.refs import GATEWAY_GROUP, ObjectKey
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store

FOO = service("apps", "foo")
CAPS = (150, 600, 2_000, 5_000, 16_384)  # far past, just past, and under the value's size


def policy(kind: str, ns: str, name: str, target: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": TIMES[0]},
        "spec": {"targetRefs": [target], **spec},
    }


def busy_store(routes: int = 40) -> Store:
    """Routes to Service foo — by one parent or two, to its port 80 or its named https port —
    with policies on the Gateway, on some routes and rules, on foo, and a Direct one on foo."""
    store = base_store()
    gw = {"group": GATEWAY_GROUP, "kind": "Gateway", "name": "gw"}
    foo = {"group": "", "kind": "Service", "name": "foo"}
    store.upsert(policy("RetryPolicy", "infra", "gw", gw, default={"maxRetries": 2}))
    store.upsert(policy("ColorPolicy", "apps", "foo", foo, default={"color": "red"}))
    store.upsert(policy("HealthCheckPolicy", "apps", "foo", foo, path="/a"))
    for i in range(routes):
        store.upsert(route_doc("apps", f"h{i:02d}", (0, 5, 1)[i % 3], (0, 2)[i % 2]))
    for i in range(0, routes, 7):
        target = {"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": f"h{i:02d}"}
        if i % 2:
            target["sectionName"] = "main"
        store.upsert(policy("RetryPolicy", "apps", f"r{i}", target, override={"retryOn": ["503"]}))
    return store


def annotation_patched(store: Store, name: str) -> dict[str, Any]:
    doc = copy.deepcopy(dict(store.get(route("apps", name)) or {}))
    doc["metadata"]["annotations"] = {"example.com/effective-policies": "{}"}
    return doc


def rule_renamed(store: Store, name: str) -> dict[str, Any]:
    doc = copy.deepcopy(dict(store.get(route("apps", name)) or {}))
    doc["spec"]["rules"][0]["name"] = "other"
    return doc


def nothing(store: Store) -> None:
    return None


def counting_calls(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[object]:
    """The arguments of every call of `owner.name` from now on (the test's monkeypatch)."""
    calls: list[object] = []
    real = getattr(owner, name)

    def counted(*args: Any) -> Any:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(owner, name, counted)
    return calls


def counting_pieces(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every route piece made from now on (`effective.part_of`)."""
    return counting_calls(monkeypatch, effective, "part_of")


def steps_ahead(cache: SummaryCache, key: ObjectKey, calls: list[object]) -> list[int]:
    """`cache.prepare(key)` until it says it is done: how many of `calls` each step made."""
    steps = []
    while True:
        before = len(calls)
        more = cache.prepare(key)
        steps.append(len(calls) - before)
        if not more:
            return steps


ROUTE_EVENTS: list[tuple[str, Callable[[Store], object]]] = [
    ("a route created", lambda s: s.upsert(route_doc("apps", "new", 0, 0))),
    ("a route sent to the named port", lambda s: s.upsert(route_doc("apps", "h04", 0, 2))),
    ("a route moved to another Gateway", lambda s: s.upsert(route_doc("apps", "h03", 2, 0))),
    ("a route sent to another Service", lambda s: s.upsert(route_doc("apps", "h05", 0, 1))),
    ("a policy's rule renamed", lambda s: s.upsert(rule_renamed(s, "h07"))),
    ("a route sent back", lambda s: s.upsert(route_doc("apps", "h05", 1, 0))),
    ("a route deleted", lambda s: s.delete(route("apps", "h00"))),
    ("a route's own annotation patched", lambda s: s.upsert(annotation_patched(s, "h01"))),
    ("a route of a policy deleted", lambda s: s.delete(route("apps", "h14"))),
]


@pytest.mark.parametrize(
    "share",
    [2.0, 0.7, 0.3, 0.01],
    ids=["fits", "cut-as-summary-cuts", "cut-by-sizes", "cut-to-nothing"],
)
def test_a_busy_services_value_after_each_route_event_is_the_whole_computations(
    share: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a cap above the value, within twice it (written whole, then cut), and far below it
    (cut by the sizes alone): the same bytes as the whole computation after every event."""
    monkeypatch.setattr(hierarchy, "PARTS_MIN_ROUTES", 10)
    store = busy_store()
    whole = summary.summarize(FOO, store, Settings(annotation_max_bytes=10**9)) or ""
    settings_ = Settings(annotation_max_bytes=int(len(whole) * share))
    cache = SummaryCache(store, settings_)
    assert hubs.summarize_in_pieces(FOO, store, settings_) is None  # no route event yet: whole
    for what, event in [("nothing yet", nothing), *ROUTE_EVENTS]:
        event(store)
        if event is not nothing:
            assert hubs.summarize_in_pieces(FOO, store, settings_) is not None, what  # in pieces
        expected = summary.summarize(FOO, rebuilt(store), settings_)
        assert cache.get(FOO) == expected, what
    assert ('"truncated":true' in (cache.get(FOO) or "")) == (share < 1)


def test_a_route_event_makes_one_piece_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The work of a route event beside 40 routes of the Service: that route's piece alone."""
    monkeypatch.setattr(hierarchy, "PARTS_MIN_ROUTES", 10)
    store = busy_store()
    cache = SummaryCache(store, Settings())
    cache.get(FOO)
    ROUTE_EVENTS[0][1](store)
    cache.get(FOO)  # its pieces made, once
    made = counting_pieces(monkeypatch)
    for what, event in ROUTE_EVENTS[1:]:
        if "Service" in what or "annotation" in what:
            continue
        made.clear()
        event(store)
        cache.get(FOO)
        assert len(made) <= 1, what


def test_below_the_threshold_a_service_is_computed_whole() -> None:
    store = busy_store(routes=5)
    summary.summarize(FOO, store, Settings())
    ROUTE_EVENTS[0][1](store)
    assert hubs.summarize_in_pieces(FOO, store, Settings()) is None


def test_after_a_policy_moves_the_whole_value_until_a_route_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A policy that moves drops the pieces; made again only once routes move again."""
    monkeypatch.setattr(hierarchy, "PARTS_MIN_ROUTES", 10)
    store = busy_store()
    assert hubs.summarize_in_pieces(FOO, store, Settings()) is None  # no route event yet
    ROUTE_EVENTS[0][1](store)
    assert hubs.summarize_in_pieces(FOO, store, Settings()) is not None
    target = {"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": "h02"}
    store.upsert(policy("TimeoutPolicy", "apps", "t", target, default={"timeout": "1s"}))
    assert hubs.summarize_in_pieces(FOO, store, Settings()) is None
    ROUTE_EVENTS[1][1](store)
    assert hubs.summarize_in_pieces(FOO, store, Settings()) is not None


# --- the property: any change, any cap ------------------------------------------------------------

MORE_ROUTES: st.SearchStrategy[Op] = st.tuples(
    st.just("upsert"),
    st.builds(
        lambda name, p, b: route_doc("apps", name, p, b),
        st.sampled_from(["h0", "h1", "h2", "h3"]),
        st.integers(0, 6),
        st.integers(0, 3),
    ),
)
FOO_POLICY = policy(
    "ColorPolicy", "apps", "p0", {"group": "", "kind": "Service", "name": "foo"}, default={"color": "red"}
)  # fmt: skip


def started_in_pieces(
    patch: pytest.MonkeyPatch, start: list[Op], cap: int
) -> tuple[Store, SummaryCache, list[ObjectKey], Settings]:
    """Every Service in pieces however few its routes, made again at every route event (not
    only the first), `start` applied, and every value checked once against a fresh store."""
    patch.setattr(hierarchy, "PARTS_MIN_ROUTES", 1)
    patch.setattr(memo.StoreMemo, "hub_wanted", lambda self, key: True)  # not only once
    settings_ = Settings(annotation_max_bytes=cap)
    store = base_store()
    for op in start:
        apply(store, op)
    cache = SummaryCache(store, settings_)
    keys = annotated(store)
    assert_fresh(cache, store, keys, settings_)
    return store, cache, keys, settings_


@example(start=[], ops=[("upsert", FOO_POLICY), ("color-class", "none")], cap=16_384)
@example(start=[("upsert", FOO_POLICY)], ops=[("color-class", "Direct")], cap=150)
@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    start=st.lists(st.one_of(st.tuples(st.just("upsert"), policy_docs()), MORE_ROUTES), max_size=8),
    ops=st.lists(st.one_of(OPS, MORE_ROUTES), min_size=1, max_size=10),
    cap=st.sampled_from(CAPS),
)
def test_values_in_pieces_always_equal_a_fresh_whole_computation(
    start: list[Op], ops: list[Op], cap: int
) -> None:
    """SPEC §5.8 for the pieces as well: with every Service in pieces however few its routes,
    the cache's values equal the whole computation on a fresh store, after every change."""
    with pytest.MonkeyPatch.context() as patch:
        store, cache, keys, settings_ = started_in_pieces(patch, start, cap)
        for op in ops:
            apply(store, op)
            keys = sorted({*keys, *annotated(store)})
            assert_fresh(cache, store, keys, settings_)


def test_the_property_catches_a_hub_that_misses_a_route_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not vacuous for the pieces: a hub that is never told to forget a route keeps its piece."""
    monkeypatch.setattr(hierarchy, "PARTS_MIN_ROUTES", 1)
    monkeypatch.setattr(hubs.Hub, "forget", lambda self, route: None)
    store = busy_store(routes=3)
    cache = SummaryCache(store, Settings())
    assert_fresh(cache, store, annotated(store))
    apply(store, ("upsert", route_doc("apps", "h00", 1, 0)))  # a route event: pieces made
    assert_fresh(cache, store, annotated(store))
    apply(store, ("upsert", route_doc("apps", "h01", 2, 1)))  # h01 leaves foo for bar
    with pytest.raises(AssertionError, match="stale cache entry"):
        assert_fresh(cache, store, annotated(store))


def test_an_edit_of_a_policys_values_keeps_every_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces hold where policies attach, not their values: after a value edit the Service's
    value is its boards' again (one per signature), no route's piece made again."""
    monkeypatch.setattr(hierarchy, "PARTS_MIN_ROUTES", 10)
    store = busy_store()
    cache = SummaryCache(store, Settings())
    cache.get(FOO)
    ROUTE_EVENTS[0][1](store)  # a route event: the Service is kept in pieces from now on
    cache.get(FOO)
    made = counting_pieces(monkeypatch)
    gw = {"group": GATEWAY_GROUP, "kind": "Gateway", "name": "gw"}
    store.upsert(policy("RetryPolicy", "infra", "gw", gw, default={"maxRetries": 7}))
    assert cache.get(FOO) == summary.summarize(FOO, rebuilt(store), Settings())
    assert '"maxRetries":7' in (cache.get(FOO) or "") and made == []


@pytest.mark.python_only
def test_the_property_catches_pieces_kept_through_a_policys_move(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not vacuous for where policies attach: with the store never saying that a policy moved,
    a policy put on one route of foo is missed by the pieces kept."""
    monkeypatch.setattr(hierarchy, "PARTS_MIN_ROUTES", 1)
    stuck = property(lambda store: 0, lambda store, value: None)
    monkeypatch.setattr(Store, "attachment_revision", stuck, raising=False)
    store = busy_store(routes=3)
    cache = SummaryCache(store, Settings())
    assert_fresh(cache, store, annotated(store))
    apply(store, ("upsert", route_doc("apps", "h00", 1, 0)))  # a route event: pieces made
    assert_fresh(cache, store, annotated(store))
    target = {"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": "h01"}
    apply(
        store, ("upsert", policy("TimeoutPolicy", "apps", "t", target, default={"timeout": "1s"}))
    )
    with pytest.raises(AssertionError, match=r"stale cache entry: .*Service.*foo"):
        assert_fresh(cache, store, [FOO])


# --- SPEC §3.3 and §5.7 at the real threshold and the default cap -------------------------------


def reloaded_in_reverse(store: Store) -> Store:
    """The same objects, written in the reverse order (policies before their CRDs)."""
    docs = [copy.deepcopy(dict(o)) for gk in sorted(store.all_kinds()) for o in store.objects(gk)]
    other = Store()
    for doc in reversed(docs):
        other.upsert(doc)
    return other


def test_a_busy_service_in_pieces_keeps_to_16_kib_and_its_bytes_to_no_order() -> None:
    """300 routes to foo, no threshold moved, the default cap: far over it (cut by the sizes
    alone), the value from pieces fits 16 KiB, keeps every kind's policies, and is the whole
    computation's bytes — also for a store that saw the same objects in the reverse order."""
    first = busy_store(routes=300)
    second = reloaded_in_reverse(first)
    values = []
    for store in (first, second):
        cache = SummaryCache(store, Settings())
        cache.get(FOO)
        ROUTE_EVENTS[0][1](store)  # a route event: from now on in pieces
        assert hubs.summarize_in_pieces(FOO, store, Settings()) is not None
        values.append(cache.get(FOO) or "")
    whole = summary.summarize(FOO, rebuilt(first), Settings(annotation_max_bytes=10**9)) or ""
    assert len(whole.encode()) > 2 * 16 * 1024
    assert values[0] == values[1] == summary.summarize(FOO, rebuilt(first), Settings())
    value = json.loads(values[0])
    assert len(values[0].encode()) <= 16 * 1024 and value["truncated"] is True
    assert {k: v["policies"] for k, v in value["policies"].items()} == {
        k: v["policies"] for k, v in json.loads(whole)["policies"].items()
    }


# --- the work ahead of a value, in steps (`hubs.advance`, `SummaryCache.prepare`) ---------------


@pytest.mark.python_only
def test_after_a_burst_of_route_writes_the_work_comes_in_bounded_steps_and_get_does_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Twenty routes written beside forty: `prepare` makes their pieces four at a time, says
    when it is done, and `get` then makes none and returns the whole computation's bytes."""
    monkeypatch.setattr(hierarchy, "PARTS_MIN_ROUTES", 10)
    monkeypatch.setattr(hubs, "ADVANCE_ROUTES", 4)
    store = busy_store()
    cache = SummaryCache(store, Settings())
    cache.get(FOO)
    ROUTE_EVENTS[0][1](store)
    cache.get(FOO)  # a route event reached it: in pieces from now on
    for i in range(20):
        store.upsert(route_doc("apps", f"burst{i:02d}", (0, 5, 1)[i % 3], (0, 2)[i % 2]))
    made = counting_pieces(monkeypatch)
    steps = steps_ahead(cache, FOO, made)
    assert len(steps) >= 5 and max(steps) <= 4, steps
    assert sum(steps) >= 20, "every route written has its piece made ahead"
    made.clear()
    assert cache.get(FOO) == summary.summarize(FOO, rebuilt(store), Settings())
    assert made == [], "nothing left for get"
    assert not cache.prepare(FOO), "a value in the cache needs nothing ahead"


@pytest.mark.python_only
def test_steps_ahead_start_over_where_the_memo_did(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Gateway's write drops every kept part: the steps make the Service's again, route by
    route, and the value is the whole computation's."""
    monkeypatch.setattr(hierarchy, "PARTS_MIN_ROUTES", 10)
    monkeypatch.setattr(hubs, "ADVANCE_ROUTES", 4)
    store = busy_store()
    cache = SummaryCache(store, Settings())
    ROUTE_EVENTS[0][1](store)
    cache.get(FOO)
    store.upsert(gateway_doc(["http"], 2))  # its https listener gone
    ROUTE_EVENTS[1][1](store)
    contexts_made = counting_calls(monkeypatch, hierarchy, "_service_part")
    steps = steps_ahead(cache, FOO, contexts_made)
    assert max(steps) <= 4, steps
    routes_to_foo = memo.index_of(store).routes_of_backend(FOO)
    assert sum(steps) == len(routes_to_foo) > 30, "every route's contexts, once each"
    assert cache.get(FOO) == summary.summarize(FOO, rebuilt(store), Settings())


@settings(
    max_examples=examples(100),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    start=st.lists(st.one_of(st.tuples(st.just("upsert"), policy_docs()), MORE_ROUTES), max_size=6),
    ops=st.lists(
        st.tuples(st.one_of(OPS, MORE_ROUTES), st.integers(0, 3), st.booleans()),
        min_size=1,
        max_size=10,
    ),
    cap=st.sampled_from(CAPS),
)
def test_steps_ahead_between_any_writes_leave_every_value_as_a_fresh_computation(
    start: list[Op], ops: list[tuple[Op, int, bool]], cap: int
) -> None:
    """SPEC §5.8 with work done ahead: after each change, some steps of `prepare` (one route
    a step) on every Service — left unfinished when the next change comes, or not — and, now
    and then, every value read: each equals the whole computation on a fresh store."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hubs, "ADVANCE_ROUTES", 1)
        store, cache, keys, settings_ = started_in_pieces(patch, start, cap)
        for op, steps, look in ops:
            apply(store, op)
            keys = sorted({*keys, *annotated(store)})
            for key in keys:
                if key.kind == "Service":
                    for _ in range(steps):
                        cache.prepare(key)
            if look:
                assert_fresh(cache, store, keys, settings_)
        assert_fresh(cache, store, keys, settings_)
