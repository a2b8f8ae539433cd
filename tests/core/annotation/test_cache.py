"""The summary cache: hits and misses, TTL as a safety net, and SPEC §5.8 as a property —
after any sequence of changes, every cached summary equals a fresh computation.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.fixtures.budget import whole_clusters
from tests.fixtures.changes import (
    BACKENDS,
    CHANGES,
    GROUP,
    OPS,
    PARENTS,
    ROUTE_APPS,
    ROUTES,
    SETTINGS,
    STARTS,
    TIMES,
    Op,
    annotated,
    apply,
    assert_fresh,
    base_store,
    gateway_doc,
    grant_doc,
    namespace_doc,
    rebuilt,
    route_doc,
)
from tests.fixtures.engine import gateway, route, service
from webhook.core.annotation import cache as cache_module
from webhook.core.annotation import dependencies, summary
from webhook.core.annotation.cache import SummaryCache
from webhook.core.engine import effective
from webhook.core.model.refs import GATEWAY_GROUP, GroupKind, ObjectKey, key_of
from webhook.core.model.settings import Settings
from webhook.core.state.overlay import OverlayView
from webhook.core.state.store import ClusterView, Store

# --- the property ----------------------------------------------------------------------------


def policy_on_gateway(name: str, color: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "ColorPolicy",
        "metadata": {"name": name, "namespace": "infra", "creationTimestamp": TIMES[0]},
        "spec": {
            "targetRefs": [{"group": GATEWAY_GROUP, "kind": "Gateway", "name": "gw"}],
            "default": {"color": color},
        },
    }


def cross_namespace_policy() -> dict[str, Any]:
    """From `infra` onto a route of `shop`: counts only once a grant in `shop` allows it."""
    doc = policy_on_gateway("cross", "blue")
    doc["spec"]["targetRefs"] = [
        {"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": "r3", "namespace": "shop"}
    ]
    return doc


GW_POLICY: Op = ("upsert", policy_on_gateway("gw-color", "red"))


def selecting_policy(app: str) -> dict[str, Any]:
    """A policy of `apps` on every route there labelled `app: <app>` (SPEC §1.7)."""
    doc = policy_on_gateway("picky", "green")
    doc["metadata"]["namespace"] = "apps"
    doc["spec"] = {
        "targetSelectors": [{"kind": "HTTPRoute", "matchLabels": {"app": app}}],
        "default": {"color": "green"},
    }
    return doc


# Random search finds what two or three changes do together; these examples make sure every
# kind of dependency is exercised on every run, whatever the search draws.
@example(start=[GW_POLICY], ops=[("upsert", namespace_doc("apps", 0))])  # labels → listeners
@example(start=[], ops=[("upsert", selecting_policy("a"))])  # what a selector picks
@example(start=[("upsert", selecting_policy("a"))], ops=[("relabel", (0, 2))])  # a relabel
@example(start=[("upsert", selecting_policy("a"))], ops=[("delete-policy", 0)])
@example(start=[GW_POLICY], ops=[("delete-policy", 0)])  # the old targets of a policy
@example(start=[GW_POLICY], ops=[("color-class", "Direct")])  # a kind's class (CRD label)
@example(  # a grant admits a cross-namespace backend
    start=[GW_POLICY, ("upsert", route_doc("apps", "r1", 0, 2))], ops=[("upsert", grant_doc(0))]
)
@example(start=[("upsert", cross_namespace_policy())], ops=[("upsert", grant_doc(1))])
@example(start=[GW_POLICY], ops=[("upsert", route_doc("apps", "r1", 2, 1))])  # a route moves
@example(start=[GW_POLICY], ops=[("upsert", gateway_doc(["https"], 0))])  # listeners go
@example(
    start=[GW_POLICY, ("upsert", route_doc("apps", "r2", 3, 0))],
    ops=[("delete", ObjectKey(GATEWAY_GROUP, "ListenerSet", "apps", "extra"))],
)
@example(
    start=[GW_POLICY, ("upsert", route_doc("apps", "r2", 4, 0))],
    ops=[("delete", service("apps", "foo")), ("restore", None)],
)
@whole_clusters(150)
@given(start=STARTS, ops=CHANGES)
def test_cached_summaries_always_equal_a_fresh_computation(start: list[Op], ops: list[Op]) -> None:
    store = base_store()
    for op in start:  # a random cluster to begin with, cached whole before the first change
        apply(store, op)
    cache = SummaryCache(store, SETTINGS)
    keys = annotated(store)
    assert_fresh(cache, store, keys)  # everything cached before the first change
    for op in ops:
        apply(store, op)
        keys = sorted({*keys, *annotated(store)})  # deleted objects too: their answer is None
        assert_fresh(cache, store, keys)


@pytest.mark.python_only
def test_the_property_catches_a_cache_that_forgets_to_invalidate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The property is not vacuous: with dependency tracking switched off it fails."""
    monkeypatch.setattr(dependencies, "affected_by_change", lambda *a, **k: set())
    store = base_store()
    cache = SummaryCache(store, SETTINGS)
    r1 = route("apps", "r1")
    assert cache.get(r1) is None
    apply(store, ("upsert", policy_on_gateway("p0", "red")))
    assert cache.get(r1) is None
    assert summary.summarize(r1, store, SETTINGS) is not None


@pytest.mark.python_only
def test_the_property_catches_a_memo_that_outlives_a_hierarchy_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not vacuous for the engine's memos either: a memo that never hears of the store's
    writes (`Store.writes_since` saying there were none) keeps a moved route's contexts."""
    monkeypatch.setattr(Store, "writes_since", lambda self, revision: ())
    store = base_store()
    apply(store, GW_POLICY)
    cache = SummaryCache(store, SETTINGS)
    assert_fresh(cache, store, annotated(store))  # memos filled
    apply(store, ("upsert", route_doc("apps", "r1", 2, 1)))  # r1 moves to gw2: new contexts
    with pytest.raises(AssertionError, match=r"stale (memo|cache entry)"):
        assert_fresh(cache, store, annotated(store))


@pytest.mark.python_only
def test_the_property_catches_a_ladder_that_outlives_a_policys_move(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not vacuous for ladders kept across policy edits (`memo.LadderMemo`): with the
    store never saying that a policy moved, a retargeted policy is caught."""
    stuck = property(lambda store: 0, lambda store, value: None)
    monkeypatch.setattr(Store, "attachment_revision", stuck, raising=False)
    store = base_store()
    apply(store, GW_POLICY)
    cache = SummaryCache(store, SETTINGS)
    assert_fresh(cache, store, annotated(store))  # ladders filled
    moved = copy.deepcopy(GW_POLICY[1])
    moved["spec"]["targetRefs"] = [{"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": "r1"}]
    moved["metadata"]["namespace"] = "apps"
    apply(store, ("delete-policy", 0))
    apply(store, ("upsert", moved))
    with pytest.raises(AssertionError, match=r"stale (memo|cache entry)"):
        assert_fresh(cache, store, annotated(store))


# --- hits, misses and the TTL ---------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_second_get_is_a_hit_and_returns_the_same_value() -> None:
    store = base_store()
    store.upsert(policy_on_gateway("p0", "red"))
    cache = SummaryCache(store, SETTINGS)
    r1 = route("apps", "r1")
    first = cache.get(r1)
    assert first is not None and '"color":"red"' in first
    assert (cache.hits, cache.misses) == (0, 1)
    assert cache.get(r1) == first
    assert (cache.hits, cache.misses) == (1, 1)


def test_no_annotation_is_cached_too() -> None:
    store = base_store()
    cache = SummaryCache(store, SETTINGS)
    r1 = route("apps", "r1")
    assert cache.get(r1) is None
    assert cache.get(r1) is None
    assert (cache.hits, cache.misses) == (1, 1)


def test_a_change_drops_what_it_affects_and_keeps_the_rest() -> None:
    store = base_store()
    cache = SummaryCache(store, SETTINGS)
    r1, r3 = route("apps", "r1"), route("shop", "r3")
    store.upsert(route_doc("shop", "r3", 2, 0))  # r3 on gw2, r1 on gw
    cache.get(r1), cache.get(r3)
    store.upsert(policy_on_gateway("p0", "red"))  # reaches gw and r1, not gw2 or r3
    assert r1 not in cache and r3 in cache
    assert cache.get(r1) is not None
    assert cache.get(r3) is None
    assert (cache.hits, cache.misses) == (1, 3)


def test_a_write_of_our_own_annotation_drops_nothing() -> None:
    store = base_store()
    store.upsert(policy_on_gateway("p0", "red"))
    cache = SummaryCache(store, SETTINGS)
    r1 = route("apps", "r1")
    value = cache.get(r1)
    obj = copy.deepcopy(dict(store.get(r1) or {}))
    obj["metadata"]["annotations"] = {SETTINGS.annotation_key: value}
    store.upsert(obj)
    assert r1 in cache


def test_ttl_expiry_recomputes_as_a_safety_net() -> None:
    clock = Clock()
    store = base_store()
    cache = SummaryCache(store, SETTINGS, ttl=10.0, timer=clock)
    r1 = route("apps", "r1")
    cache.get(r1)
    clock.now = 9.0
    cache.get(r1)
    assert r1 in cache
    clock.now = 10.0
    assert r1 not in cache  # and dropped, not only unanswered: its place is free
    assert len(cache) == 0
    clock.now = 11.0
    cache.get(r1)
    assert (cache.hits, cache.misses) == (1, 2)


def test_maxsize_evicts_but_answers_stay_right() -> None:
    store = base_store()
    store.upsert(policy_on_gateway("p0", "red"))
    cache = SummaryCache(store, SETTINGS, maxsize=2)
    assert_fresh(cache, store, annotated(store))
    assert len(cache) == 2


def test_past_maxsize_the_least_recently_used_entry_goes_first() -> None:
    store = base_store()
    cache = SummaryCache(store, SETTINGS, maxsize=2)
    r1, r2, r3 = route("apps", "r1"), route("apps", "r2"), route("apps", "r3")
    cache.get(r1)
    cache.get(r2)
    cache.get(r1)  # used again: r2 is now the least recently used
    cache.get(r3)
    assert r1 in cache and r3 in cache and r2 not in cache


def test_the_feed_tells_subscribers_the_affected_set_of_each_write() -> None:
    store = base_store()
    cache = SummaryCache(store, SETTINGS)
    heard: list[tuple[ObjectKey, frozenset[ObjectKey]]] = []

    def listener(key: ObjectKey, old: Mapping[str, Any] | None, new: Any, affected: Any) -> None:
        heard.append((key, affected))

    cache.feed.subscribe(listener)
    store.upsert(policy_on_gateway("p0", "red"))
    ((key, affected),) = heard
    assert key.name == "p0"
    assert {gateway("infra", "gw"), route("apps", "r1")} <= affected
    cache.feed.unsubscribe(listener)
    store.upsert(policy_on_gateway("p0", "blue"))
    assert len(heard) == 1


@pytest.mark.python_only
def test_an_empty_cache_with_no_other_subscriber_skips_the_fan_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[ObjectKey] = []
    real = dependencies.affected_by_change

    def counting(key: ObjectKey, *args: Any, **kwargs: Any) -> set[ObjectKey]:
        calls.append(key)
        return real(key, *args, **kwargs)

    monkeypatch.setattr(dependencies, "affected_by_change", counting)
    store = base_store()
    cache = SummaryCache(store, SETTINGS)
    store.upsert(policy_on_gateway("p0", "red"))
    assert calls == []
    cache.get(route("apps", "r1"))
    store.upsert(policy_on_gateway("p0", "blue"))
    assert len(calls) == 1


@pytest.mark.python_only
def test_a_policy_write_recomputes_only_its_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    store = base_store()
    apply(store, GW_POLICY)
    cache = SummaryCache(store, SETTINGS)
    r1 = route("apps", "r1")
    assert cache.get(r1) is not None
    apply(store, ("upsert", policy_on_gateway("gw-color", "blue")))
    assert r1 not in cache  # stale, but only its ColorPolicy piece
    calls: list[GroupKind | None] = []
    real = effective.compute

    def computing(key: ObjectKey, view: ClusterView, **options: Any) -> list[effective.KindResult]:
        calls.append(options.get("only"))
        return real(key, view, **options)

    monkeypatch.setattr(effective, "compute", computing)
    value = cache.get(r1)
    assert calls == [GroupKind(GROUP, "ColorPolicy")]
    assert value is not None and '"color":"blue"' in value
    assert value == summary.summarize(r1, rebuilt(store), SETTINGS)


@pytest.mark.python_only
def test_the_property_catches_a_cache_that_refreshes_the_wrong_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not vacuous for per-kind refreshes: marking another kind stale is caught."""
    monkeypatch.setattr(
        SummaryCache, "_policy_kind", lambda self, key, old, new: GroupKind(GROUP, "Other")
    )
    store = base_store()
    apply(store, GW_POLICY)
    cache = SummaryCache(store, SETTINGS)
    assert_fresh(cache, store, annotated(store))
    apply(store, ("upsert", policy_on_gateway("gw-color", "blue")))
    with pytest.raises(AssertionError, match="stale cache entry"):
        assert_fresh(cache, store, annotated(store))


def test_a_refresh_that_outgrows_the_cap_gives_the_truncated_value() -> None:
    """SPEC §3.3's cap holds through the per-kind refresh too: a value that fitted, grown past
    the cap by one kind's new piece, comes back truncated exactly as a fresh computation."""
    store = base_store()
    apply(store, GW_POLICY)
    r1 = route("apps", "r1")
    fitting = summary.summarize(r1, store, SETTINGS) or ""
    small = Settings(annotation_max_bytes=len(fitting.encode()) + 10)
    cache = SummaryCache(store, small)
    assert cache.get(r1) == fitting  # under the cap: kept in pieces
    apply(store, ("upsert", policy_on_gateway("gw-color", "x" * 200)))
    value = cache.get(r1)
    assert value is not None and '"truncated":true' in value
    assert len(value.encode()) <= small.annotation_max_bytes
    assert value == summary.summarize(r1, rebuilt(store), small)
    held = cache._entries[r1].value  # its own text, no fragment shared: kept compressed
    assert isinstance(held, bytes) and len(held) < len(value.encode())
    assert cache.get(r1) == value  # and a hit gives it back as it was
    apply(store, GW_POLICY)  # back under the cap: the truncated entry is recomputed whole
    assert cache.get(r1) == fitting


# --- values handed over by /mutate -----------------------------------------------------------

ADMITTED_ROUTES = st.builds(
    lambda r, p, b, a: route_doc(*ROUTES[r], p, b, a),
    st.integers(0, len(ROUTES) - 1),
    st.integers(0, len(PARENTS) - 1),
    st.integers(0, len(BACKENDS) - 1),
    st.integers(0, len(ROUTE_APPS)),
)


def hand_over(cache: SummaryCache, store: Store, doc: dict[str, Any]) -> None:
    """What /mutate does for `doc`: its value on the store plus `doc`, handed to the cache."""
    key = key_of(doc)
    assert key is not None
    found = summary.summarize_in_pieces(key, OverlayView(store, upserts=[doc]), SETTINGS)
    cache.admitted(key, doc, found)


def as_written(doc: dict[str, Any], n: int) -> dict[str, Any]:
    """`doc` as the watch brings it once written: uid, creation time, our annotation."""
    written = copy.deepcopy(doc)
    written["metadata"].update(uid=f"uid-{n}", creationTimestamp=TIMES[0], resourceVersion=str(n))
    written["metadata"]["annotations"] = {SETTINGS.annotation_key: "whatever was patched"}
    return written


@example(start=[GW_POLICY], steps=[(route_doc("apps", "r1", 2, 1), True, None)])
@example(
    start=[GW_POLICY],
    steps=[(route_doc("apps", "r1", 2, 1), True, ("upsert", policy_on_gateway("p9", "blue")))],
)
@example(start=[GW_POLICY], steps=[(route_doc("apps", "r1", 2, 1), False, None)])
@whole_clusters(120)
@given(
    start=STARTS,
    steps=st.lists(
        st.tuples(ADMITTED_ROUTES, st.booleans(), st.none() | OPS), min_size=1, max_size=6
    ),
)
def test_values_handed_over_by_mutate_never_make_an_entry_stale(
    start: list[Op], steps: list[tuple[dict[str, Any], bool, Op | None]]
) -> None:
    """SPEC §5.8 with /mutate's hand-over: a route is shown to /mutate, then maybe another
    change lands first, then that route — or, when `same` is false, another drawn one — is
    written. Whatever the order, every cached answer equals a fresh computation."""
    store = base_store()
    for op in start:
        apply(store, op)
    cache = SummaryCache(store, SETTINGS)
    assert_fresh(cache, store, annotated(store))
    for n, (doc, same, between) in enumerate(steps):
        hand_over(cache, store, doc)
        if between is not None:
            apply(store, between)
        written = doc if same else route_doc("apps", "r1", 0, 0)
        store.upsert(as_written(written, n))
        assert_fresh(cache, store, sorted({*annotated(store)}))


def test_a_route_written_as_mutate_saw_it_is_not_computed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = base_store()
    store.upsert(policy_on_gateway("p0", "red"))
    cache = SummaryCache(store, SETTINGS)
    assert_fresh(cache, store, annotated(store))
    doc = route_doc("apps", "r9", 0, 0)
    hand_over(cache, store, doc)
    store.upsert(as_written(doc, 1))
    r9 = route("apps", "r9")
    assert r9 in cache and cache.adopted == 1
    misses = cache.misses
    assert cache.get(r9) == summary.summarize(r9, rebuilt(store), SETTINGS) is not None
    assert cache.misses == misses


@pytest.mark.parametrize(
    "between", [("upsert", policy_on_gateway("p1", "blue")), ("delete", route("apps", "r1"))]
)
def test_a_value_handed_over_is_dropped_when_another_write_comes_first(between: Op) -> None:
    store = base_store()
    cache = SummaryCache(store, SETTINGS)
    assert_fresh(cache, store, annotated(store))
    doc = route_doc("apps", "r9", 0, 0)
    hand_over(cache, store, doc)
    apply(store, between)
    store.upsert(as_written(doc, 1))
    assert cache.adopted == 0 and route("apps", "r9") not in cache


def test_a_value_handed_over_is_dropped_when_the_object_written_differs() -> None:
    """Another mutating webhook after ours may have moved the route: its value is computed."""
    store = base_store()
    store.upsert(policy_on_gateway("p0", "red"))
    cache = SummaryCache(store, SETTINGS)
    assert_fresh(cache, store, annotated(store))
    hand_over(cache, store, route_doc("apps", "r9", 0, 0))
    store.upsert(as_written(route_doc("apps", "r9", 2, 0), 1))  # on gw2: another value
    assert cache.adopted == 0
    assert_fresh(cache, store, annotated(store))


@pytest.mark.python_only
def test_the_hand_over_is_what_the_property_would_catch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not vacuous: with any written object taken for the one /mutate saw, the property fails."""
    monkeypatch.setattr(cache_module, "as_admitted", lambda obj: {})
    store = base_store()
    store.upsert(policy_on_gateway("p0", "red"))
    cache = SummaryCache(store, SETTINGS)
    assert_fresh(cache, store, annotated(store))
    hand_over(cache, store, route_doc("apps", "r9", 0, 0))
    store.upsert(as_written(route_doc("apps", "r9", 2, 0), 1))
    with pytest.raises(AssertionError, match="stale cache entry"):
        assert_fresh(cache, store, annotated(store))
