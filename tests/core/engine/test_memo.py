"""Memos shared between computations (`engine/memo.py`): kept while their inputs hold, dropped
when not.

That answers computed on a warm memo equal answers on a fresh store after random changes is
the cache property's job (changes.py); here, which write keeps or drops which memo.
"""

from __future__ import annotations

import bisect
import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures import changes
from tests.fixtures.budget import examples
from tests.fixtures.engine import (
    CLUSTER,
    CRDS,
    docs,
    gateway,
    gateway_class,
    route,
    service,
    store_of,
)
from webhook.core.annotation import summary
from webhook.core.engine import effective, hierarchy, hierarchy_index, memo
from webhook.core.engine.attachment import Attachments
from webhook.core.engine.hierarchy_index import HierarchyIndex
from webhook.core.model import kinds
from webhook.core.model.refs import ObjectKey
from webhook.core.state import store as store_module
from webhook.core.state.overlay import OverlayView
from webhook.core.state.store import Store

STATE = """
apiVersion: v1
kind: Namespace
metadata: {name: apps}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: apps}
spec:
  gatewayClassName: acme
  listeners: [{name: http, protocol: HTTP, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r1, namespace: apps}
spec: {parentRefs: [{name: gw}]}
---
apiVersion: policies.example.com/v1alpha1
kind: ColorPolicy
metadata: {name: red, namespace: apps}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  default: {color: red}
"""

R1 = route("apps", "r1")
POLICY = ObjectKey("policies.example.com", "ColorPolicy", "apps", "red")


def warm() -> tuple[Store, memo.StructureMemo, memo.EngineMemo]:
    store = store_of(CRDS, STATE)
    hierarchy.contexts_of(R1, store)
    structure = memo.shared_structure(store)
    assert structure is not None and R1 in structure.contexts
    return store, structure, memo.engine_of(store)


def recolored(store: Store, color: str) -> dict[str, object]:
    doc = copy.deepcopy(dict(store.get(POLICY) or {}))
    doc["spec"]["default"] = {"color": color}
    return doc


def test_nothing_written_keeps_both_memos() -> None:
    store, structure, engine = warm()
    assert memo.shared_structure(store) is structure
    assert memo.engine_of(store) is engine


def test_a_policy_write_keeps_contexts_and_drops_engine_results() -> None:
    store, structure, engine = warm()
    store.upsert(recolored(store, "blue"))
    assert memo.shared_structure(store) is structure
    assert memo.engine_of(store) is not engine


def test_a_hierarchy_write_drops_contexts() -> None:
    store, structure, _ = warm()
    gw = copy.deepcopy(dict(store.get(gateway("apps", "gw")) or {}))
    gw["spec"]["listeners"].append({"name": "two", "protocol": "HTTP", "port": 81})
    store.upsert(gw)
    fresh = memo.shared_structure(store)
    assert fresh is not structure and R1 not in (fresh.contexts if fresh else {})
    assert len(hierarchy.contexts_of(R1, store)) == 2  # recomputed: both listeners


def test_an_overlay_of_a_policy_shares_the_stores_contexts_not_its_engine_memo() -> None:
    store, structure, engine = warm()
    overlay = OverlayView(store, upserts=[recolored(store, "blue")])
    assert memo.shared_structure(overlay) is structure
    own = memo.engine_of(overlay)
    assert own is not engine and memo.engine_of(overlay) is own


def test_an_overlay_of_a_hierarchy_object_computes_contexts_afresh_but_shares_engine_work() -> None:
    """A route as submitted to /mutate: new contexts, the same policies everywhere."""
    store, structure, engine = warm()
    moved = copy.deepcopy(dict(store.get(R1) or {}))
    moved["spec"]["parentRefs"] = []
    overlay = OverlayView(store, upserts=[moved])
    layered = memo.shared_structure(overlay)  # the store's but for the route (and below it)
    assert layered is not None and layered is not structure
    assert memo.engine_of(overlay) is engine
    assert hierarchy.contexts_of(R1, overlay) == []
    assert hierarchy.contexts_of(R1, store) != []  # the store's memo is untouched


def test_a_full_memo_starts_over() -> None:
    store, structure, _ = warm()
    structure.limit = 0  # as if the cluster had grown past its bound
    fresh = memo.shared_structure(store)
    assert fresh is not structure and fresh is not None and not fresh.contexts


def test_the_memo_bound_grows_with_the_store() -> None:
    small, large = store_of(CRDS), store_of(CRDS, STATE)
    assert memo.entry_limit(large) > memo.entry_limit(small) >= memo.MIN_ENTRIES


def test_a_relist_of_unchanged_objects_is_no_write() -> None:
    """Store.replace_kind after a watch's 410: only real differences notify listeners."""
    store, structure, engine = warm()
    heard: list[ObjectKey] = []
    store.subscribe(lambda key, old, new: heard.append(key))
    routes = [copy.deepcopy(dict(o)) for o in store.objects(R1.group_kind)]
    revision = store.revision
    store.replace_kind(R1.group_kind, routes)
    assert heard == [] and store.revision == revision
    assert memo.shared_structure(store) is structure and memo.engine_of(store) is engine
    routes[0]["spec"]["parentRefs"] = []
    store.replace_kind(R1.group_kind, routes)
    assert heard == [R1]


def test_reach_below_a_target_is_kept_until_the_hierarchy_changes() -> None:
    store, structure, _ = warm()
    gw = gateway("apps", "gw")
    assert hierarchy.affected_by(gw, None, store) == {gw, R1}
    assert structure.reach[(gw, None, True)] == (gw, R1)  # kept in ladder order
    store.upsert(recolored(store, "blue"))  # a policy write: the reach stands
    assert memo.shared_structure(store) is structure
    moved = copy.deepcopy(dict(store.get(R1) or {}))
    moved["spec"]["parentRefs"] = []
    store.upsert(moved)  # r1 leaves the Gateway
    assert hierarchy.affected_by(gw, None, store) == {gw}


def test_a_routes_write_drops_only_the_reach_below_rungs_above_it() -> None:
    """r1, on gw, moves to Service bar: the reach below gw, its class and the Namespaces is
    walked again; below gw2, which r1 never named, it stands. A route whose parent is a
    Service drops every reach: it lies below whatever reaches that Service."""
    store = changes.base_store()
    gw, gw2 = gateway("infra", "gw"), gateway("infra", "gw2")
    for target in (gw, gw2):
        hierarchy.affected_by(target, None, store)
    structure = memo.shared_structure(store)
    assert structure is not None
    kept = structure.reach[(gw2, None, True)]
    changes.apply(store, ("upsert", changes.route_doc("apps", "r1", 0, 1)))
    hierarchy.affected_by(gw2, None, store)  # caught up on the write
    assert memo.shared_structure(store) is structure
    assert structure.reach[(gw2, None, True)] is kept
    assert (gw, None, True) not in structure.reach
    changes.apply(store, ("upsert", changes.route_doc("apps", "r2", 4, 0)))  # r2 on Service foo
    hierarchy.affected_by(gw, None, store)
    assert (gw2, None, True) not in structure.reach


def test_an_edit_of_a_policys_values_keeps_every_ladder() -> None:
    """Which rungs hold policies is unchanged when only a policy's values are: the fan-out of
    that edit starts from the ladders kept, and still answers with the new values."""
    store, _, _ = warm()
    effective.compute(R1, store)
    ladders = memo.ladders_of(store)
    assert ladders is not None and R1 in ladders.reached
    store.upsert(recolored(store, "blue"))
    assert memo.ladders_of(store) is ladders
    assert summary.summarize(R1, store, changes.SETTINGS) == summary.summarize(
        R1, changes.rebuilt(store), changes.SETTINGS
    )
    assert '"blue"' in (summary.summarize(R1, store, changes.SETTINGS) or "")


def route_on_gw_with_rules(name: str, rules: str) -> str:
    return f"""
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: apps}}
spec:
  parentRefs: [{{name: gw}}]
  rules: {rules}
"""


def test_kept_ladders_hold_one_set_of_section_names_for_objects_that_have_the_same() -> None:
    """A ladder is kept per object, with the object's section names: routes with the same rule
    names (Services with the same port names) keep one set between them, not one each — at
    the benchmark's default scale, 105 distinct sets among 15,259 objects. So are the tuples
    of indices of the contexts that meet the same rungs (837 distinct among 39,231)."""
    store = store_of(
        CRDS,
        STATE,
        route_on_gw_with_rules("r2", "[{name: a}, {name: b}]"),
        route_on_gw_with_rules("r3", "[{name: b}, {name: a}]"),
    )
    r2, r3 = route("apps", "r2"), route("apps", "r3")
    for key in (r2, r3):
        effective.compute(key, store)
    ladders = memo.ladders_of(store)
    assert ladders is not None
    kept_r2, kept_r3 = ladders.reached[r2].sections, ladders.reached[r3].sections
    assert kept_r2 == kept_r3 == frozenset({"a", "b"})
    assert kept_r2 is kept_r3
    indices_r2 = [ix for _, ix in ladders.reached[r2].ladder.rung_groups]
    indices_r3 = [ix for _, ix in ladders.reached[r3].ladder.rung_groups]
    assert indices_r2 == indices_r3 and indices_r2
    assert all(a is b for a, b in zip(indices_r2, indices_r3, strict=True))


def retargeted(store: Store) -> dict[str, object]:
    doc = copy.deepcopy(dict(store.get(POLICY) or {}))
    doc["spec"]["targetRefs"] = [
        {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "r1"}
    ]
    return doc


def test_a_policy_that_moves_comes_or_goes_drops_the_ladders() -> None:
    changes: dict[str, Callable[[Store], object]] = {
        "retargeted": lambda store: store.upsert(retargeted(store)),
        "deleted": lambda store: store.delete(POLICY),
        "created": lambda store: store.upsert(
            {**recolored(store, "blue"), "metadata": {"name": "other", "namespace": "apps"}}
        ),
        "a CRD written": lambda store: store.upsert(next(iter(store_of(CRDS).objects(kinds.CRD)))),
    }
    for what, change in changes.items():
        store, _, _ = warm()
        effective.compute(R1, store)
        ladders = memo.ladders_of(store)
        change(store)
        fresh = memo.ladders_of(store)
        assert fresh is not ladders and fresh is not None and not fresh.reached, what


def test_a_hierarchy_write_drops_the_ladders() -> None:
    store, _, _ = warm()
    effective.compute(R1, store)
    effective.compute(gateway("apps", "gw"), store)
    ladders = memo.ladders_of(store)
    gw = copy.deepcopy(dict(store.get(gateway("apps", "gw")) or {}))
    gw["spec"]["listeners"].append({"name": "two", "protocol": "HTTP", "port": 81})
    store.upsert(gw)
    fresh = memo.ladders_of(store)
    assert fresh is not ladders and fresh is not None and not fresh.reached


def test_a_route_write_drops_only_that_routes_ladder() -> None:
    store, _, _ = warm()
    effective.compute(R1, store)
    effective.compute(gateway("apps", "gw"), store)
    ladders = memo.ladders_of(store)
    moved = copy.deepcopy(dict(store.get(R1) or {}))
    moved["spec"]["parentRefs"] = []
    store.upsert(moved)
    assert ladders is not None and memo.ladders_of(store) is ladders
    assert R1 not in ladders.reached and gateway("apps", "gw") in ladders.reached
    assert effective.compute(R1, store) == []


def test_only_a_store_keeps_ladders() -> None:
    """An overlay may move a policy or a hierarchy object: its ladders are computed."""
    store, _, _ = warm()
    assert memo.ladders_of(OverlayView(store, upserts=[recolored(store, "blue")])) is None


# --- an overlay of policies layered on the store's memo -------------------------------------------

POLICY_CHANGES = st.one_of(
    st.tuples(st.just("upsert"), changes.policy_docs()),
    st.tuples(st.just("edit"), changes.policy_docs()),  # new values, same targets
    st.tuples(st.just("delete"), st.integers(0, 5)),
)


def edited(store: Store, doc: dict[str, Any]) -> dict[str, Any] | None:
    """`doc`'s values on an existing policy of its kind, keeping that one's name and targets:
    the same rungs, other values — the change a board keyed by rungs alone would miss."""
    same_kind = sorted(k for k in (p.key for p in store.policies()) if k.kind == doc["kind"])
    if not same_kind:
        return None
    existing = store.get(same_kind[0]) or {}
    out = copy.deepcopy(doc)
    out["metadata"] = {**out["metadata"], **existing["metadata"]}
    for targets in ("targetRefs", "targetSelectors"):
        out["spec"].pop(targets, None)
        if targets in existing["spec"]:
            out["spec"][targets] = copy.deepcopy(existing["spec"][targets])
    return out


@settings(
    max_examples=examples(120),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    start=st.lists(
        st.one_of(st.tuples(st.just("upsert"), changes.policy_docs()), changes.OPS),
        max_size=6,
    ),
    change=POLICY_CHANGES,
)
def test_an_overlay_computes_what_the_changed_cluster_would(
    start: list[changes.Op], change: tuple[str, Any]
) -> None:
    """What admission computes on "the cluster with this policy" (an overlay that reuses the
    store's warm memos) equals a computation on a store that holds the change for real — also
    one kind at a time, as the impact preview asks (`only`: none where the kind is not met),
    and for all the objects at once (`compute_kind`, in either view)."""
    store = changes.base_store()
    for op in start:
        changes.apply(store, op)
    keys = changes.annotated(store)
    for key in keys:  # warm every memo of the store
        effective.compute(key, store)
        summary.summarize(key, store, changes.SETTINGS)
    after = changes.rebuilt(store)
    if change[0] in ("upsert", "edit"):
        doc = change[1] if change[0] == "upsert" else edited(store, change[1])
        if doc is None:
            return
        overlay = OverlayView(store, upserts=[doc])
        after.upsert(doc)
    else:
        policies = sorted(p.key for p in store.policies())
        if not policies:
            return
        gone = policies[change[1] % len(policies)]
        overlay = OverlayView(store, deletes=[gone])
        after.delete(gone)
    policy_kinds = {p.key.group_kind for view in (store, after) for p in view.policies()}
    for key in keys:
        whole = effective.compute(key, after)
        assert effective.compute(key, overlay) == whole, key
        for gk in policy_kinds:
            mine = [found for found in whole if found.group_kind == gk]
            assert effective.compute(key, overlay, only=gk) == mine, (key, gk)
        assert summary.summarize(key, overlay, changes.SETTINGS) == summary.summarize(
            key, after, changes.SETTINGS
        ), key
    before = changes.rebuilt(store)
    for gk in policy_kinds:
        for view, fresh in ((overlay, after), (store, before)):
            one_by_one = {
                key: next(iter(effective.compute(key, fresh, only=gk)), None) for key in keys
            }
            assert effective.compute_kind(keys, view, gk) == one_by_one, gk


# --- catching up on the store's writes, one object at a time (issue 18) -------------------------


def test_a_route_write_keeps_the_index_the_engine_memo_and_everything_else_of_the_structure() -> (
    None
):
    store, structure, engine = warm()
    gw = gateway("apps", "gw")
    index = memo.index_of(store)
    hierarchy.contexts_of(gw, store)
    store.upsert(route_doc("r2"))
    assert memo.index_of(store) is index and set(index.routes_of_parent(gw)) == {
        R1,
        route("apps", "r2"),
    }
    assert memo.shared_structure(store) is structure and memo.engine_of(store) is engine
    assert gw in structure.contexts  # a Gateway's contexts do not pass through its routes


def test_a_write_of_what_nothing_reads_keeps_every_memo() -> None:
    """Our own annotation patch, a status write: the store holds a new object, no memo moves."""
    store, structure, engine = warm()
    effective.compute(R1, store)
    ladders, index = memo.ladders_of(store), memo.index_of(store)
    for key in (R1, gateway("apps", "gw")):
        doc = copy.deepcopy(dict(store.get(key) or {}))
        doc["metadata"]["annotations"] = {"example.com/effective-policies": "{}"}
        doc["status"] = {"parents": []}
        store.upsert(doc)
    assert memo.shared_structure(store) is structure and R1 in structure.contexts
    assert memo.ladders_of(store) is ladders and memo.engine_of(store) is engine
    assert memo.index_of(store) is index


def test_a_memo_further_behind_than_the_stores_log_starts_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(store_module, "WRITE_LOG", 2)
    store, structure, engine = warm()
    index = memo.index_of(store)
    for name in ("r2", "r3", "r4"):  # three writes, nobody asking in between: two remembered
        store.upsert(route_doc(name))
    assert store.writes_since(store.revision - 3) is None
    assert memo.index_of(store) is not index and memo.shared_structure(store) is not structure
    assert memo.engine_of(store) is not engine
    assert_memos_fresh(store)


def route_doc(name: str, *, backend: str = "svc") -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": "apps"},
        "spec": {"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [{"name": backend}]}]},
    }


def members_of(index: HierarchyIndex) -> dict[object, set[ObjectKey]]:
    """An index's buckets, each a set of its members (kept as a tuple or a set)."""
    return {bucket: set(members) for bucket, members in index._added.items()}


def assert_memos_fresh(store: Store) -> None:
    """The index, every object's contexts and the reach below every rung, kept across writes,
    equal a fresh store's — made whole there, whatever way the store keeps them (a Service's
    by route, `PARTS_MIN_ROUTES`). Asking for each reach keeps it for the next look."""
    fresh = changes.rebuilt(store)
    kept, rebuilt_index = memo.index_of(store), memo.index_of(fresh)
    assert members_of(kept) == members_of(rebuilt_index), "stale index"
    keys = changes.annotated(store)
    found = {key: hierarchy.contexts_of(key, store) for key in keys}
    reach = {rung: hierarchy.reach_in_order(*rung, store) for rung in rungs(store)}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hierarchy, "PARTS_MIN_ROUTES", 10**9)
        for key in keys:
            assert found[key] == hierarchy.contexts_of(key, fresh), f"stale contexts: {key}"
    for rung, below in reach.items():
        assert below == hierarchy.reach_in_order(*rung, fresh), f"stale reach: {rung}"


def rungs(store: Store) -> list[tuple[ObjectKey, str | None]]:
    """Every object a policy may target (Namespaces too), whole and by each section."""
    found: list[tuple[ObjectKey, str | None]] = []
    for gk in sorted(kinds.DEFAULT_TARGETS):
        for key in sorted(store.keys(gk)):
            found.append((key, None))
            found += [(key, name) for name in sorted(kinds.section_names(gk, store.get(key) or {}))]
    return found


@pytest.fixture
def services_by_route(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Service's contexts kept by route, however few its routes."""
    monkeypatch.setattr(hierarchy, "PARTS_MIN_ROUTES", 1)


BATCHES = st.lists(st.lists(changes.OPS, min_size=1, max_size=3), min_size=1, max_size=6)


@settings(
    max_examples=examples(120),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(start=st.lists(changes.OPS, max_size=6), batches=BATCHES)
def test_memos_kept_across_writes_equal_a_fresh_stores(
    start: list[changes.Op], batches: list[list[changes.Op]]
) -> None:
    """The index moved entry by entry and a Service's contexts kept by route are those a fresh
    store builds whole — also when the memo catches up on a few writes at once."""
    for by_route in (1, hierarchy.PARTS_MIN_ROUTES):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(hierarchy, "PARTS_MIN_ROUTES", by_route)
            store = changes.base_store()
            for op in start:
                changes.apply(store, op)
            assert_memos_fresh(store)
            for batch in batches:
                for op in batch:
                    changes.apply(store, op)
                assert_memos_fresh(store)


def moved_away(store: Store) -> None:
    """r1 from Service foo to bar (and another Gateway): its index entries and parts move."""
    changes.apply(store, ("upsert", changes.route_doc("apps", "r1", 2, 1)))


FOO, BAR = ObjectKey("", "Service", "apps", "foo"), ObjectKey("", "Service", "apps", "bar")


def assert_caught(
    match: str, change: Callable[[Store], object], store: Store | None = None
) -> None:
    """The property holds of `store` (the base cluster), then fails with `match` after `change`."""
    store = store if store is not None else changes.base_store()
    assert_memos_fresh(store)
    change(store)
    with pytest.raises(AssertionError, match=match):
        assert_memos_fresh(store)


@pytest.mark.python_only
def test_the_property_catches_an_index_that_misses_a_move(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(HierarchyIndex, "move", lambda self, key, old, new: None)
    assert_caught("stale index", moved_away)


@pytest.mark.python_only
def test_the_property_catches_contexts_kept_through_a_route_event(
    monkeypatch: pytest.MonkeyPatch,
    services_by_route: None,
) -> None:
    """A route's write that forgets nothing: its contexts, and its part of foo's, stay."""
    monkeypatch.setattr(
        memo.StructureMemo, "forget_route", lambda self, route, services, reaching: None
    )
    assert_caught("stale contexts", moved_away)


@pytest.mark.python_only
def test_the_property_catches_a_reach_kept_through_a_route_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A route's write that keeps every reach: r1's old Gateway still holds it below."""
    monkeypatch.setattr(memo, "_reaching", lambda route, objs, store: set())
    assert_caught("stale reach", moved_away)


@pytest.mark.python_only
def test_the_property_catches_a_reach_kept_below_a_mesh_route(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A route whose parent is a Service is below whatever reaches that Service: dropping only
    the reach below the route, its parent and its Services leaves the Gateway above foo stale."""
    monkeypatch.setattr(memo, "_reaching", lambda route, objs, store: {route, FOO, BAR})
    store = changes.base_store()
    changes.apply(store, ("upsert", changes.route_doc("apps", "r2", 4, 1)))  # r2's parent: foo
    assert_caught("stale reach", lambda store: store.delete(route("apps", "r2")), store)


def test_the_property_catches_a_service_part_put_in_the_wrong_place(
    monkeypatch: pytest.MonkeyPatch,
    services_by_route: None,
) -> None:
    """The order of a Service's contexts kept across route events is checked too: parts put
    at the end instead of in their place are caught."""
    monkeypatch.setattr(bisect, "insort", lambda ordered, context, key: ordered.append(context))
    store = changes.base_store()
    changes.apply(store, ("upsert", changes.route_doc("apps", "r2", 5, 0)))  # two parents
    assert_memos_fresh(store)
    changes.apply(store, ("upsert", changes.route_doc("apps", "r1", 1, 0)))  # r1: https only
    with pytest.raises(AssertionError, match="stale contexts"):
        assert_memos_fresh(store)


@pytest.mark.python_only
def test_the_property_catches_a_memo_that_skips_writes_it_did_not_see(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A log that hands over only the last of several writes (a truncation not reported)."""
    real = Store.writes_since

    def last_only(self: Store, revision: int) -> Any:
        found = real(self, revision)
        return found[-1:] if found is not None else None

    monkeypatch.setattr(Store, "writes_since", last_only)
    store = changes.base_store()
    assert_memos_fresh(store)
    moved_away(store)  # two writes before anyone asks: the move is skipped
    changes.apply(store, ("upsert", changes.namespace_doc("shop", 2)))
    with pytest.raises(AssertionError, match=r"stale (index|contexts)"):
        assert_memos_fresh(store)


# Beside `CLUSTER`'s route `r` (apps, on the Gateway's https listener, to Services foo and bar):
# another route of `apps` to foo, and a route of another namespace on the same listener.
MORE_ROUTES = """
apiVersion: v1
kind: Namespace
metadata: {name: web}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r2, namespace: apps}
spec:
  parentRefs: [{name: gw, namespace: infra, sectionName: https}]
  rules: [{backendRefs: [{name: foo, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: w1, namespace: web}
spec:
  parentRefs: [{name: gw, namespace: infra, sectionName: https}]
"""


def test_contexts_hold_one_rung_for_each_level_they_share() -> None:
    """Kept contexts share their rungs where they pass the same level: the Gateway's (and its
    class's) for routes of every namespace, a namespace's for all its routes, a Service port's
    for every route sending to it. Made anew per context, they were more than a quarter of the
    contexts kept at the benchmark's default scale."""
    store = store_of(CLUSTER, MORE_ROUTES)
    by_rung: dict[hierarchy.Rung, list[hierarchy.Rung]] = {}
    for key in (
        route("apps", "r"),
        route("apps", "r2"),
        route("web", "w1"),
        service("apps", "foo"),
    ):
        for context in hierarchy.contexts_of(key, store):
            for rung in context:
                by_rung.setdefault(rung, []).append(rung)
    wanted = [
        hierarchy.Rung(gateway_class("acme")),
        hierarchy.Rung(gateway("infra", "gw"), "https"),
        hierarchy.namespace_rung("apps"),
        hierarchy.Rung(service("apps", "foo"), "http"),
    ]
    for rung in wanted:
        found = by_rung[rung]
        assert len(found) > 1, rung  # passed by several contexts
        assert all(one is found[0] for one in found), rung


def test_objects_and_rungs_without_policies_share_one_empty_answer() -> None:
    """Most keys and rungs hold no policy; the engine memo keeps one read-only empty answer
    for all of them instead of an empty list or dict each (1,045 → 885 bytes per object of
    the engine's tables at the benchmark's default scale)."""
    store = store_of(CRDS, CLUSTER, MORE_ROUTES)
    found = Attachments(store, memo.engine_of(store))
    quiet = [hierarchy.Rung(route("apps", "r")), hierarchy.Rung(service("apps", "foo"), "http")]
    answers = [found.at(rung) for rung in quiet]
    assert answers == [{}, {}] and answers[0] is answers[1]
    with pytest.raises(TypeError):
        answers[0][kinds.SERVICE] = []  # type: ignore[index]
    assert found.on(route("apps", "r")) == () and found.on(route("web", "w1")) == ()
    assert memo.engine_of(store).by_rung[quiet[0]] is answers[0]


def test_the_index_of_a_store_holds_the_stores_own_keys() -> None:
    """Built from a store, the hierarchy index's sets hold the keys the store holds, not a copy
    of each; built from any other view, the same members."""
    store = store_of(CLUSTER, MORE_ROUTES)
    gw = gateway("infra", "gw")
    members = hierarchy_index.build_index(store).routes_of_parent(gw)
    elsewhere = hierarchy_index.build_index(OverlayView(store)).routes_of_parent(gw)
    assert (
        set(members)
        == set(elsewhere)
        == {route("apps", "r"), route("apps", "r2"), route("web", "w1")}
    )
    held = {key: key for key in store.keys(kinds.HTTP_ROUTE)}
    assert all(member is held[member] for member in members)


def route_to_services(name: str, services: str) -> str:
    backends = ", ".join(f"{{name: {svc}, port: 80}}" for svc in services.split())
    return route_on_gw_with_rules(name, f"[{{backendRefs: [{backends}]}}]")


SERVICES = "\n---\n".join(
    f"apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: apps}}\n"
    "spec: {ports: [{port: 80}]}"
    for name in ("s1", "s2")
)


def test_routes_sending_to_one_service_hold_one_key_of_it() -> None:
    """What a route sends to is kept per route, read once; thousands of routes send to one
    Service, and each reading made a key of its own (at the benchmark's default scale, 23,927
    keys of 4,973 Services). The memo keeps one, and each route's refs in a tuple."""
    store = store_of(
        CRDS, STATE, SERVICES, route_to_services("r2", "s1 s2"), route_to_services("r3", "s1")
    )
    r2, r3 = route("apps", "r2"), route("apps", "r3")
    for key in (r2, r3, service("apps", "s1")):
        hierarchy.contexts_of(key, store)
    structure = memo.shared_structure(store)
    assert structure is not None
    kept_r2, kept_r3 = structure.backends[r2], structure.backends[r3]
    assert type(kept_r2) is tuple and [b.key.name for b in kept_r2] == ["s1", "s2"]
    assert kept_r2[0].key == kept_r3[0].key == service("apps", "s1")
    assert kept_r2[0].key is kept_r3[0].key


def test_a_kept_ladder_holds_the_contexts_the_structure_memo_keeps() -> None:
    """An object's ladder lists its contexts, and the structure memo keeps the same ones: one
    tuple between them, not an equal copy each (a ninth of the ladders' part, 1x)."""
    store, structure, _ = warm()
    effective.compute(R1, store)
    ladders = memo.ladders_of(store)
    assert ladders is not None
    assert ladders.reached[R1].ladder.contexts is structure.contexts[R1]


def test_policies_of_a_kind_hold_one_path_per_field_and_boards_one_name_per_policy() -> None:
    """Every policy of a kind sets the same few fields: their leaves are keyed by one path per
    field, not one per policy. A board's sources name the policy and the rung it sits on;
    boards of the same policy at the same rung hold one string of each."""
    red = STATE.replace("default: {color: red}", "override: {color: red}")  # wins everywhere
    blue = (
        STATE.replace("name: red", "name: blue")
        .replace("color: red", "color: blue")
        .replace("kind: Gateway, name: gw", "kind: HTTPRoute, name: r1")
    )
    store = store_of(CRDS, red, blue.split("---")[-1], route_to_services("r2", "s1"), SERVICES)
    r2 = route("apps", "r2")
    for key in (R1, r2):
        effective.compute(key, store)
    engine = memo.engine_of(store)
    kept_leaves, boards = engine.leaves, engine.boards
    assert isinstance(kept_leaves, dict) and isinstance(boards, dict)  # a store's: its own
    red_paths = [p for (key, _), found in kept_leaves.items() if key == POLICY for p in found]
    blue_key = POLICY._replace(name="blue")
    blue_paths = [p for (key, _), found in kept_leaves.items() if key == blue_key for p in found]
    assert red_paths == blue_paths == [("color",)]
    assert red_paths[0] is blue_paths[0]
    # r1 meets both policies, r2 only the Gateway's: two boards, red's override wins on both.
    sources = [
        source
        for board in boards.values()
        for source in board.sources.values()
        if source.policy == "apps/red"
    ]
    assert len(sources) == 2
    assert sources[0].policy is sources[1].policy and sources[0].at is sources[1].at


def test_an_index_keeps_a_few_members_in_a_tuple_and_more_in_a_set() -> None:
    """Most buckets are a Service's few routes: a tuple holds them in a fraction of the
    smallest set's room. A bucket that grows past `SMALL` becomes a set (a busy Service's
    routes are asked `in`), and one that shrinks back, a tuple again, as a fresh index has it."""
    small = hierarchy_index.SMALL
    names = [f"r{i}" for i in range(small + 1)]
    store = store_of(CRDS, STATE, SERVICES, *(route_to_services(n, "s1") for n in names[:-1]))
    s1 = service("apps", "s1")
    index = memo.index_of(store)
    assert type(index.routes_of_backend(s1)) is tuple and len(index.routes_of_backend(s1)) == small
    store.upsert(docs(route_to_services(names[-1], "s1"))[0])
    assert memo.index_of(store) is index  # moved, not built again
    assert type(index.routes_of_backend(s1)) is set
    assert set(index.routes_of_backend(s1)) == {route("apps", n) for n in names}
    store.delete(route("apps", names[0]))
    assert memo.index_of(store) is index
    assert type(index.routes_of_backend(s1)) is tuple
    assert set(index.routes_of_backend(s1)) == {route("apps", n) for n in names[1:]}
    assert members_of(index) == members_of(hierarchy_index.build_index(store))


def route_on_gw(namespace: str) -> str:
    return f"""
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r, namespace: {namespace}}}
spec: {{parentRefs: [{{name: gw, namespace: infra}}]}}
"""


def test_routes_of_many_namespaces_on_one_gateway_hold_one_of_its_keys_and_contexts() -> None:
    """What a parentRef gives a route is kept per parent, route namespace and kind, and in a
    large cluster nearly every one of those is a route or two (77,752 for 160,000 parentRefs
    at 8x the benchmark's scale). The Gateway's key and its listeners' contexts, alike for
    all, are held once."""
    store = store_of(CRDS, CLUSTER, route_on_gw("a"), route_on_gw("b"))
    for namespace in ("a", "b"):
        assert hierarchy.contexts_of(route(namespace, "r"), store)
    structure = memo.shared_structure(store)
    assert structure is not None
    kept = {
        ns: (ref, found) for (ref, ns, _), found in structure.parents.items() if ns in ("a", "b")
    }
    (ref_a, kept_a), (ref_b, kept_b) = kept["a"], kept["b"]
    assert ref_a.key == ref_b.key == gateway("infra", "gw") and ref_a.key is ref_b.key
    assert type(kept_a) is tuple and len(kept_a) == len(kept_b) == 2  # http, https
    assert kept_a == kept_b and all(a is b for a, b in zip(kept_a, kept_b, strict=True))
