"""Dependency tracking: which annotated objects' summaries may change when one object changes.

The cache (SPEC §5.8) drops exactly these entries and the reconciler (SPEC §3.2) re-checks
exactly these objects (both hear them from one `AffectedFeed`), so a key missing here is a
stale annotation: every answer errs on the side of too many. Inputs are the changed object before and after, and the cluster seen before
and after the change (an `OverlayView` of the store gives the "before"). Pure; never writes.

What a summary reads, and so what can change it (effective.py, hierarchy.py, grants.py):
- policies attached to the rungs of its contexts → a policy change reaches every object below
  each of its targets, in the old and the new cluster (a retarget moves it);
- the objects of its contexts → a hierarchy object's change reaches itself and everything below
  it, before and after (a route moved from one Gateway to another: old and new backends);
- Namespace labels, through `allowedRoutes`/`allowedListeners` selectors → the routes and
  ListenerSets of that Namespace, and what lies below them;
- ReferenceGrants, through cross-namespace policy targets and backendRefs → what lies below a
  cross-namespace target in the grant's Namespace, and Services there used from elsewhere;
- the kind's profile (CRD label, schema) → everything any policy of that kind reaches.
Nothing else is read: a change to annotations, status, resourceVersion or managedFields only
(our own patches, controllers' status writes, a relist) affects nobody.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from webhook.core.engine import hierarchy, memo
from webhook.core.model import kinds
from webhook.core.model.meta import labels_of
from webhook.core.model.policy import read_policy
from webhook.core.model.profiles import defined_kind, unknown_profile
from webhook.core.model.refs import ObjectKey
from webhook.core.state.overlay import OverlayView
from webhook.core.state.store import ClusterView, Store, policy_targets
from webhook.core.state.trim import relevant

Obj = Mapping[str, Any]

# What attaches by Namespace selectors: routes (allowedRoutes), ListenerSets (allowedListeners).
_SELECTED_KINDS = frozenset({kinds.LISTENER_SET, *kinds.ROUTE_KINDS})


# Called after each store write with (changed key, old, new, annotated objects it affects).
AffectedListener = Callable[
    [ObjectKey, Mapping[str, Any] | None, Mapping[str, Any] | None, frozenset[ObjectKey]], None
]


class AffectedFeed:
    """After each write to a store, which annotated objects it affects — worked out once, for
    every subscriber: the summary cache drops those entries, the leader's reconciler re-checks
    those objects. Skipped when no subscriber wants it (an empty cache, no leader)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._listeners: list[tuple[AffectedListener, Callable[[], bool]]] = []
        store.subscribe(self._on_write)

    def subscribe(
        self, listener: AffectedListener, *, wanted: Callable[[], bool] = lambda: True
    ) -> None:
        """`listener` hears every write for which `wanted()` (or another's) is true."""
        self._listeners.append((listener, wanted))

    def unsubscribe(self, listener: AffectedListener) -> None:
        self._listeners = [(lst, w) for lst, w in self._listeners if lst != listener]

    def _on_write(self, key: ObjectKey, old: Obj | None, new: Obj | None) -> None:
        listeners = list(self._listeners)
        if not any(wanted() for _, wanted in listeners):
            return
        # The store calls us after the write: put the old object back (or take the new one
        # out) to see the cluster as it was just before.
        before = OverlayView(
            self._store,
            upserts=[old] if old is not None else (),
            deletes=[key] if old is None else (),
        )
        affected = frozenset(affected_by_change(key, old, new, before=before, after=self._store))
        for listener, _ in listeners:
            listener(key, old, new, affected)


def affected_by_change(
    key: ObjectKey,
    old: Obj | None,
    new: Obj | None,
    *,
    before: ClusterView,
    after: ClusterView,
) -> set[ObjectKey]:
    """Annotated objects whose summary may differ between `before` and `after`.

    `before` holds `old` (or lacks `key`), `after` holds `new` (or lacks `key`); every other
    object is the same in both. Only objects that exist in one of the two views are returned.
    """
    if old is not None and new is not None and relevant(old) == relevant(new):
        return set()
    gk = key.group_kind
    if before.policy(key) is not None or after.policy(key) is not None:
        return _policy_change(key, before, after)
    if gk in kinds.ANNOTATED_KINDS:  # a rung of contexts; Namespaces are handled on their own
        # No context passes through an object a view lacks: a create is asked of `after`
        # alone, a delete of `before` (on the side without it, an overlay that hides the
        # object would be set up only to find nothing below it).
        return _reach(
            key, None, *(v for v, obj in ((before, old), (after, new)) if obj is not None)
        )
    if gk == kinds.NAMESPACE:
        return _namespace_change(key, old, new, before, after)
    if gk == kinds.REFERENCE_GRANT:
        return _grant_change(key.namespace, before, after)
    if gk == kinds.CRD:
        return _crd_change(old, new, after)
    return set()


def _reach(
    target: ObjectKey, section: str | None, *views: ClusterView, inherited: bool = True
) -> set[ObjectKey]:
    """`hierarchy.affected_by` in each view, united: what lies below a rung, then and now."""
    out: set[ObjectKey] = set()
    for view in views:
        out |= hierarchy.affected_by(target, section, view, inherited=inherited)
    return out


def _policy_change(key: ObjectKey, before: ClusterView, after: ClusterView) -> set[ObjectKey]:
    """Everything below each target of the old policy (in `before`) and the new (in `after`).

    A Direct kind reaches only its targets (SPEC §5.1); a kind of unknown class may be run as
    Inherited on an object (effective.py), so it counts as Inherited here.
    """
    out: set[ObjectKey] = set()
    for view in (before, after):
        policy = view.policy(key)
        if policy is None:
            continue
        inherited = view.profile(key.group_kind).policy_class != "Direct"
        for target, section in policy_targets(policy, view):
            out |= _reach(target, section, view, inherited=inherited)
    return out


def _namespace_change(
    key: ObjectKey, old: Obj | None, new: Obj | None, before: ClusterView, after: ClusterView
) -> set[ObjectKey]:
    """Labels decide `from: Selector` admission of the Namespace's routes and ListenerSets.

    A missing Namespace reads as one without labels (attachment.namespace_admitted), so only
    a change of labels matters, not the object coming or going. Namespace-targeted policies
    do not depend on the Namespace object at all (they are found by key).
    """
    if labels_of(old) == labels_of(new):
        return set()
    out: set[ObjectKey] = set()
    for view in (before, after):
        for member in memo.index_of(view).in_namespace(key.name):
            if member.group_kind in _SELECTED_KINDS:
                out |= _reach(member, None, view)
    return out


def _grant_change(namespace: str, before: ClusterView, after: ClusterView) -> set[ObjectKey]:
    """A grant in `namespace` can admit (or stop admitting) two kinds of reference into it.

    Conservative on purpose: every cross-namespace policy target and every cross-namespace
    backendRef into the Namespace counts, whatever the grant's `from`/`to` say — a grant is
    rare, and reading its entries exactly as grants.py does is where a mismatch would hide.
    """
    out: set[ObjectKey] = set()
    # 1. A policy from another Namespace counts on its target only with a grant (PA-T03).
    #    Policies are the same in both views: a grant is no policy.
    for policy in after.policies():
        if not policy.key.namespace:
            continue  # cluster-scoped policies need no grant
        inherited = after.profile(policy.key.group_kind).policy_class != "Direct"
        for target, section in policy_targets(policy, after):
            if target.namespace == namespace and target.namespace != policy.key.namespace:
                out |= _reach(target, section, before, after, inherited=inherited)
    # 2. A route's backendRef into this Namespace counts only with a grant (hierarchy.py).
    index = memo.index_of(after)
    for member in index.in_namespace(namespace):
        if member.group_kind != kinds.SERVICE or after.get(member) is None:
            continue
        if any(route.namespace != namespace for route in index.routes_of_backend(member)):
            out.add(member)
    return out


def _crd_change(old: Obj | None, new: Obj | None, after: ClusterView) -> set[ObjectKey]:
    """A kind became (or stopped being) a policy kind, or changed class or schema.

    The profile of the kind changed; the views share the hierarchy (a CRD is no rung), so
    every object any object of that kind reaches, read by its raw targetRefs whatever the old
    or new profile says, is enough.
    """
    out: set[ObjectKey] = set()
    for gk in {g for crd in (old, new) if crd is not None and (g := defined_kind(crd))}:
        for obj in after.objects(gk):
            policy = read_policy(obj, unknown_profile(gk))  # its targets, whatever its profile
            for target, section in policy_targets(policy, after) if policy is not None else ():
                out |= _reach(target, section, after)
    return out
