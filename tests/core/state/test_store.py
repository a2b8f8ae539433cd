"""The store: writes count as revisions and reach listeners; a moved resourceVersion does not."""

from __future__ import annotations

import copy

from tests.fixtures.engine import CLUSTER, CRDS, docs, route, store_of
from webhook.core.annotation import summary
from webhook.core.model.refs import GroupKind, ObjectKey
from webhook.core.model.settings import Settings


def test_a_newer_resource_version_alone_is_no_write() -> None:
    """The informer's path for a controller's status write: the reconciler needs the newer
    version for its precondition, and nothing anyone reads changed."""
    store = store_of(CRDS, CLUSTER)
    key = route("apps", "r")
    heard: list[ObjectKey] = []
    store.subscribe(lambda k, old, new: heard.append(k))
    revision, attachments = store.revision, store.attachment_revision
    before = store.get(key)
    store.move_version(key, "42")
    after = store.get(key)
    assert after is not None and after["metadata"]["resourceVersion"] == "42"
    assert before is not after  # a new object: nothing shared was changed in place
    assert (store.revision, store.attachment_revision, heard) == (revision, attachments, [])
    assert [o for o in store.objects(key.group_kind) if o is after]


def test_moving_the_version_of_an_object_not_held_changes_nothing() -> None:
    store = store_of(CRDS, CLUSTER)
    revision = store.revision
    store.move_version(route("apps", "nope"), "7")
    assert store.get(route("apps", "nope")) is None and store.revision == revision


EVERY_ROUTE = """
apiVersion: policies.example.com/v1alpha1
kind: RetryPolicy
metadata: {name: every-route, namespace: apps, creationTimestamp: '2024-01-01T00:00:00Z'}
spec:
  targetSelectors: [{kind: HTTPRoute, matchLabels: {}}]
  default: {maxRetries: 2}
"""
UNLABELLED = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: plain, namespace: apps}
spec:
  parentRefs: [{name: gw, namespace: infra}]
"""


def test_an_object_that_comes_or_goes_where_a_selector_looks_may_move_a_policy() -> None:
    """A selector of no labels picks every object of its kind and namespace: one created or
    deleted without labels moves `attachment_revision` (what the engine memo's knowledge of
    where policies attach is checked against), as a relabelled one does."""
    store = store_of(CRDS, CLUSTER, EVERY_ROUTE)
    (doc,) = docs(UNLABELLED)
    before = store.attachment_revision
    store.upsert(doc)
    created = store.attachment_revision
    store.delete(route("apps", "plain"))
    assert before < created < store.attachment_revision


def test_an_unlabelled_route_created_where_a_selector_looks_is_annotated_as_a_fresh_store_would() -> (
    None
):
    """SPEC §5.8 for a selector's pick: the route's value on the store whose memos are warm
    from before it came equals the value on a store that saw it from the start."""
    store = store_of(CRDS, CLUSTER, EVERY_ROUTE)
    for key in store.keys(route("apps", "r").group_kind):
        summary.summarize(key, store, Settings())  # memos warm
    (doc,) = docs(UNLABELLED)
    store.upsert(doc)
    fresh = store_of(CRDS, CLUSTER, EVERY_ROUTE, UNLABELLED)
    value = summary.summarize(route("apps", "plain"), store, Settings())
    assert value is not None and "every-route" in value
    assert value == summary.summarize(route("apps", "plain"), fresh, Settings())


def test_a_kinds_profile_is_kept_until_a_crd_is_written_and_then_follows_it() -> None:
    """The store keeps each kind's profile (asked on every write); a CRD's label change, or
    the CRD going away, is seen by the next question, not one write later."""
    store = store_of(CRDS, CLUSTER)
    retry = GroupKind("policies.example.com", "RetryPolicy")
    crd = next(
        d for d in docs(CRDS) if d["metadata"]["name"] == "retrypolicies.policies.example.com"
    )
    assert store.profile(retry) is store.profile(retry)
    assert store.profile(retry).policy_class == "Inherited"
    direct = copy.deepcopy(crd)
    direct["metadata"]["labels"]["gateway.networking.k8s.io/policy"] = "direct"
    store.upsert(direct)
    assert store.profile(retry).policy_class == "Direct"
    crd_key = ObjectKey(
        "apiextensions.k8s.io", "CustomResourceDefinition", "", crd["metadata"]["name"]
    )
    store.delete(crd_key)
    assert not store.profile(retry).known
