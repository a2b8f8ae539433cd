"""The store: writes count as revisions and reach listeners; a moved resourceVersion does not."""

from __future__ import annotations

from tests.fixtures.engine import CLUSTER, CRDS, route, store_of
from webhook.core.model.refs import ObjectKey


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
