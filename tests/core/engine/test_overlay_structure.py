"""An overlay of routes and Service updates shares its base's structure memo but for what it
changes (`memo._layered_structure`): what /mutate computes for a route or a Service, and what
a store write's view of just before it walks. SPEC §5.8 as a property: every answer on such
an overlay equals one on a store holding the same objects and no memo.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.fixtures.budget import whole_clusters
from tests.fixtures.changes import (
    BACKENDS,
    PARENTS,
    ROUTES,
    SETTINGS,
    STARTS,
    Op,
    annotated,
    apply,
    base_store,
    rebuilt,
    route_doc,
)
from tests.fixtures.engine import route, service
from webhook.core.annotation import summary
from webhook.core.engine import hierarchy, memo
from webhook.core.model.refs import ObjectKey, key_of
from webhook.core.state.overlay import OverlayView
from webhook.core.state.store import Store

Change = tuple[str, Any]  # ("upsert", a document) or ("delete", a key)


def service_doc(name: str, ports: int) -> dict[str, Any]:
    """Services of the base cluster with other ports: named, renamed, or one of them gone."""
    variants = [
        [{"name": "http", "port": 80}],
        [{"name": "web", "port": 80}, {"name": "https", "port": 443}],
        [{"port": 8080}],
    ]
    ns = "shop" if name == "baz" else "apps"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"ports": copy.deepcopy(variants[ports])},
    }


CHANGES = st.lists(
    st.one_of(
        st.tuples(
            st.just("upsert"),
            st.builds(
                lambda r, p, b: route_doc(r[0], r[1], p, b),
                st.sampled_from([*ROUTES, ("apps", "r9")]),  # r9: a route created
                st.integers(0, len(PARENTS) - 1),
                st.integers(0, len(BACKENDS) - 1),
            ),
        ),
        st.tuples(st.just("delete"), st.sampled_from([route(ns, name) for ns, name in ROUTES])),
        st.tuples(
            st.just("upsert"),
            st.builds(service_doc, st.sampled_from(["foo", "bar", "baz"]), st.integers(0, 2)),
        ),
    ),
    min_size=1,
    max_size=3,
)


def overlay_of(store: Store, changes: list[Change]) -> OverlayView:
    """The store seen through `changes`; the last change of a key wins, as in a store."""
    last: dict[ObjectKey, dict[str, Any] | None] = {}
    for what, arg in changes:
        if what == "upsert":
            last[_key(arg)] = arg
        else:
            last[arg] = None
    upserts = [doc for doc in last.values() if doc is not None]
    deletes = [key for key, doc in last.items() if doc is None]
    return OverlayView(store, upserts=upserts, deletes=deletes)


def _key(doc: dict[str, Any]) -> ObjectKey:
    key = key_of(doc)
    assert key is not None
    return key


def as_store(view: OverlayView, base: Store) -> Store:
    """The overlay's objects in a store of their own: no memo of any earlier state."""
    fresh = Store(base.config)
    for gk in sorted(base.all_kinds(), reverse=True):
        for obj in view.objects(gk):
            fresh.upsert(obj)
    return fresh


def warm(start: list[Op]) -> Store:
    store = base_store()
    for op in start:
        apply(store, op)
    for key in annotated(store):  # every memo of the store filled, as a leader's is
        summary.summarize(key, store, SETTINGS)
    return store


def assert_overlay_fresh(store: Store, changes: list[Change]) -> None:
    overlay = overlay_of(store, changes)
    fresh = as_store(overlay, store)
    keys = sorted({*annotated(store), *annotated(fresh)})
    for key in keys:
        assert hierarchy.contexts_of(key, overlay) == hierarchy.contexts_of(key, fresh), (
            f"stale overlay contexts: {key}"
        )
        assert summary.summarize(key, overlay, SETTINGS) == summary.summarize(
            key, fresh, SETTINGS
        ), f"stale overlay summary: {key}"
    for key in overlay.overlaid:
        assert hierarchy.affected_by(key, None, overlay) == hierarchy.affected_by(
            key, None, fresh
        ), f"stale overlay reach: {key}"
    # What the overlay added to the tables it shares holds for the store too.
    again = rebuilt(store)
    for key in annotated(store):
        expected = summary.summarize(key, again, SETTINGS)
        assert summary.summarize(key, store, SETTINGS) == expected, f"stale store memo: {key}"


@example(start=[], changes=[("upsert", route_doc("apps", "r1", 2, 1))])  # r1 moves to gw2
@example(start=[], changes=[("upsert", route_doc("apps", "r1", 0, 2))])  # r1 onto foo:443, baz
@example(start=[], changes=[("upsert", service_doc("foo", 0))])  # foo's https port goes
@example(start=[], changes=[("upsert", route_doc("apps", "r9", 4, 1))])  # a mesh route on foo
@example(start=[], changes=[("delete", route("apps", "r1"))])
@whole_clusters(120)
@given(start=STARTS, changes=CHANGES)
def test_an_overlay_of_routes_and_service_updates_answers_as_a_fresh_store(
    start: list[Op], changes: list[Change]
) -> None:
    assert_overlay_fresh(warm(start), changes)


def test_such_an_overlay_shares_what_it_does_not_change() -> None:
    store = warm([])
    base = memo.shared_structure(store)
    assert base is not None
    r1, r2, foo = route("apps", "r1"), route("apps", "r2"), service("apps", "foo")
    overlay = OverlayView(store, upserts=[route_doc("apps", "r1", 2, 1)])
    layered = memo.shared_structure(overlay)
    assert layered is not None and layered is not base
    assert layered.parents is base.parents and layered.keys is base.keys
    assert layered.contexts.get(r2) is base.contexts.get(r2) is not None  # r2: untouched
    assert base.contexts.get(r1) is not None and base.contexts.get(foo) is not None
    assert layered.contexts.get(r1) is None  # r1: replaced
    assert layered.contexts.get(foo) is None  # foo: r1's backend before the change


def test_an_overlay_of_anything_else_keeps_its_own() -> None:
    """A Gateway, a Namespace or a Service created or deleted can change any route's
    contexts: such an overlay gets no memo shared with its base (a scratch one per call)."""
    store = warm([])
    gone = OverlayView(store, deletes=[service("apps", "foo")])
    assert memo.shared_structure(gone) is None
    new = OverlayView(store, upserts=[service_doc("qux", 0)])
    assert memo.shared_structure(new) is None


def test_the_property_catches_an_overlay_that_shares_the_services_below_a_route(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not vacuous: with the Services below a replaced route read from the base, the
    contexts of a Service the route now reaches are caught stale."""
    monkeypatch.setattr(
        memo._Replaced,
        "keeps_contexts",
        lambda self, key: key not in self._overlay.overlaid,
    )
    with pytest.raises(AssertionError, match="stale overlay"):
        assert_overlay_fresh(warm([]), [("upsert", route_doc("apps", "r1", 0, 2))])
