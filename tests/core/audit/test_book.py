"""The audit book: SPEC §8.3's "kept up to date" as a property — after any sequence of changes,
every policy's findings in the book equal a fresh audit of the same state — and the proof
that the property would catch a book that misses a dependency.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import example, given

from tests.fixtures.budget import whole_clusters
from tests.fixtures.changes import (
    CHANGES,
    GROUP,
    SETTINGS,
    STARTS,
    TIMES,
    Op,
    apply,
    base_store,
    gateway_doc,
    grant_doc,
    namespace_doc,
    rebuilt,
    route_doc,
)
from tests.fixtures.engine import route, service
from webhook.core.annotation import dependencies
from webhook.core.audit import book as book_module
from webhook.core.audit.book import AuditBook
from webhook.core.audit.findings import audit_store
from webhook.core.model.refs import GATEWAY_GROUP, ObjectKey
from webhook.core.state.store import Store


def assert_fresh(book: AuditBook, store: Store) -> None:
    """Everything pending done, the book equals an audit of the same objects from scratch."""
    book.refresh()
    assert not book.pending
    fresh = audit_store(rebuilt(store), SETTINGS)
    assert set(book.audits()) == set(fresh), "stale book: policies differ"
    for key, audit in fresh.items():
        assert book.audits()[key] == audit, f"stale book entry: {key}"


def color(name: str, ns: str, target: dict[str, Any], stanza: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "ColorPolicy",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": TIMES[0]},
        "spec": {"targetRefs": [target], stanza: {"color": "red"}},
    }


GW = {"group": GATEWAY_GROUP, "kind": "Gateway", "name": "gw", "namespace": "infra"}
R1 = {"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": "r1"}
R3 = {"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": "r3", "namespace": "shop"}


def picky() -> dict[str, Any]:
    """A policy of `apps` on every route there labelled `app: b` (SPEC §1.7)."""
    doc = color("picky", "apps", R1)
    doc["spec"] = {
        "targetSelectors": [{"kind": "HTTPRoute", "matchLabels": {"app": "b"}}],
        "default": {"color": "red"},
    }
    return doc


ON_R1: Op = ("upsert", color("on-r1", "apps", R1))
OVER_GW: Op = ("upsert", color("over-gw", "infra", GW, "override"))


# Random search finds what changes do together; these make sure every kind of dependency is
# exercised on every run, whatever the search draws.
@example(start=[ON_R1], ops=[("delete", route("apps", "r1"))])  # a target goes: PA-T06
@example(start=[ON_R1], ops=[("upsert", color("twin", "apps", R1))])  # PA-C01 on both
@example(start=[ON_R1], ops=[OVER_GW])  # an override above: PA-C02 / PA-C03
@example(start=[ON_R1, OVER_GW], ops=[("upsert", route_doc("apps", "r1", 2, 1))])  # r1 moves away
@example(
    start=[ON_R1, ("upsert", route_doc("apps", "r1", 2, 1))],
    ops=[OVER_GW, ("upsert", route_doc("apps", "r1", 0, 0))],
)  # and back
@example(start=[("upsert", color("cross", "infra", R3))], ops=[("upsert", grant_doc(1))])  # PA-T03
@example(start=[OVER_GW, ON_R1], ops=[("upsert", namespace_doc("apps", 0))])  # labels → listeners
@example(start=[OVER_GW, ON_R1], ops=[("color-class", "Direct")])  # a kind's class (CRD)
@example(start=[OVER_GW, ON_R1], ops=[("upsert", gateway_doc(["tls"], 0))])  # listeners go
@example(start=[], ops=[("upsert", picky()), ("relabel", (0, 2))])  # what a selector picks
@example(start=[ON_R1], ops=[("delete", service("apps", "foo")), ("restore", None)])
# r3 takes r1's Service as its parent (GAMMA): below r1 by object, though not on its contexts
@example(start=[ON_R1], ops=[("upsert", route_doc("shop", "r3", 4, 0))])
@whole_clusters(150)
@given(start=STARTS, ops=CHANGES)
def test_the_book_always_equals_a_fresh_audit(start: list[Op], ops: list[Op]) -> None:
    store = base_store()
    for op in start:
        apply(store, op)
    book = AuditBook(store, SETTINGS)
    book.follow(True)
    assert_fresh(book, store)  # the full audit a leader starts from
    for op in ops:
        apply(store, op)
        assert_fresh(book, store)


# --- the property is not vacuous ----------------------------------------------------------------


def following(*ops: Op) -> tuple[Store, AuditBook]:
    store = base_store()
    for op in ops:
        apply(store, op)
    book = AuditBook(store, SETTINGS)
    book.follow(True)
    assert_fresh(book, store)
    return store, book


@pytest.mark.python_only
def test_the_property_catches_a_book_deaf_to_what_a_write_affects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without `affected_by_change`, an override put above a default is missed on the
    default's policy (PA-C02), which names neither the override nor its target."""
    monkeypatch.setattr(dependencies, "affected_by_change", lambda *a, **k: set())
    store, book = following(ON_R1)
    apply(store, OVER_GW)
    with pytest.raises(AssertionError, match=r"stale book entry: .*on-r1"):
        assert_fresh(book, store)


@pytest.mark.python_only
def test_the_property_catches_a_book_blind_to_objects_entering_a_reach(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the look-up by context rungs, a route attached below a Gateway is missed on
    the Gateway's override (PA-C03): it had never read that route."""
    monkeypatch.setattr(book_module.AuditBook, "_reaching", lambda self, objects: set())
    store, book = following(("upsert", route_doc("apps", "r1", 2, 3)), ON_R1, OVER_GW)
    apply(store, ("upsert", route_doc("apps", "r1", 0, 3)))
    with pytest.raises(AssertionError, match=r"stale book entry: .*over-gw"):
        assert_fresh(book, store)


# --- what it does not do ---------------------------------------------------------------------


def test_a_write_no_finding_reads_recomputes_nothing() -> None:
    store, book = following(ON_R1, OVER_GW)
    before = book.computed
    store.upsert({"apiVersion": "v1", "kind": "Service",
                  "metadata": {"name": "unrelated", "namespace": "shop"}, "spec": {"ports": [{"port": 80}]}})  # fmt: skip
    r1 = copy.deepcopy(dict(store.get(route("apps", "r1")) or {}))
    r1["status"] = {"parents": []}  # a controller's status write
    store.upsert(r1)
    assert book.refresh() == set()
    assert book.computed == before


def test_a_policy_write_recomputes_the_policies_it_meets_and_reports_their_namespaces() -> None:
    store, book = following(ON_R1)
    apply(store, OVER_GW)
    assert book.refresh() == {"apps", "infra"}  # PA-C02 on one, PA-C03 on the other
    apply(store, ("delete", ObjectKey(GROUP, "ColorPolicy", "infra", "over-gw")))
    assert book.refresh() == {"apps", "infra"}
    assert book.namespaces() == {"apps"}


def test_a_book_that_stops_following_forgets_and_starts_again_from_a_full_audit() -> None:
    store, book = following(ON_R1)
    book.follow(False)
    assert not book.audits() and not book.namespaces()
    apply(store, OVER_GW)  # unheard
    book.follow(True)
    assert_fresh(book, store)
