"""Memos shared between computations (`engine/memo.py`): kept while their inputs hold, dropped
when not.

That answers computed on a warm memo equal answers on a fresh store after random changes is
the cache property's job (changes.py); here, which write keeps or drops which memo.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures import changes
from tests.fixtures.budget import examples
from tests.fixtures.engine import CRDS, gateway, route, store_of
from webhook.core.annotation import summary
from webhook.core.engine import effective, hierarchy, memo
from webhook.core.model import kinds
from webhook.core.model.refs import ObjectKey
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
    store, _, engine = warm()
    moved = copy.deepcopy(dict(store.get(R1) or {}))
    moved["spec"]["parentRefs"] = []
    overlay = OverlayView(store, upserts=[moved])
    assert memo.shared_structure(overlay) is None
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
    assert structure.reach[(gw, None, True)] == {gw, R1}
    store.upsert(recolored(store, "blue"))  # a policy write: the reach stands
    assert memo.shared_structure(store) is structure
    moved = copy.deepcopy(dict(store.get(R1) or {}))
    moved["spec"]["parentRefs"] = []
    store.upsert(moved)  # r1 leaves the Gateway
    assert hierarchy.affected_by(gw, None, store) == {gw}


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
    ladders = memo.ladders_of(store)
    moved = copy.deepcopy(dict(store.get(R1) or {}))
    moved["spec"]["parentRefs"] = []
    store.upsert(moved)
    assert memo.ladders_of(store) is not ladders
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
    store's warm memos) equals a computation on a store that holds the change for real."""
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
    for key in keys:
        assert effective.compute(key, overlay) == effective.compute(key, after), key
        assert summary.summarize(key, overlay, changes.SETTINGS) == summary.summarize(
            key, after, changes.SETTINGS
        ), key
