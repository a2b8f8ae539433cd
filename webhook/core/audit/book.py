"""The audit book: every stored policy's findings, kept equal to a fresh audit as the store
changes (SPEC §8.3: "kept up to date within seconds of any change that alters a finding").

A fresh audit of every policy costs milliseconds per policy — seconds on a large cluster — so
it is done once, when the book starts following the store; after that, each write marks only
the policies whose findings may read it (dependency tracking, as for annotations, SPEC §5.8),
and `refresh` recomputes those. A write may change a policy's findings through:

- the policy itself (its spec, its timestamp), or its kind's profile (a CRD);
- an object it names or its selectors pick (exists? being deleted? its sections, its labels),
  any object of a kind its selectors search in its namespace, or a ReferenceGrant in a
  namespace it targets across (PA-T*, `Reads`);
- another policy of its kind on one of those objects (PA-C01);
- the effective policy of an object it was compared on (PA-C02/C03, `Reads.effective_of`):
  those are what `dependencies.affected_by_change` names for the write;
- an object entering what it reaches (a route attached below its Gateway): what a write
  affects is looked up, at `refresh`, by the rungs of its contexts in the current state.

Every answer errs on the side of too many: a policy recomputed for nothing costs a little
time, and the report writer sends nothing when its content did not change. Pure and
synchronous, like the store: one thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.core.annotation.dependencies import AffectedFeed
from webhook.core.audit.findings import PolicyAudit, audit_policy, stored_policies, targets_of
from webhook.core.engine import hierarchy
from webhook.core.engine.memo import STRUCTURAL_KINDS
from webhook.core.model import kinds
from webhook.core.model.profiles import defined_kind
from webhook.core.model.refs import GroupKind, ObjectKey
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store
from webhook.core.state.trim import relevant

Obj = Mapping[str, Any]


class AuditBook:
    """`audits()` equals `findings.audit_store(store, settings)` after every `refresh()`
    that leaves nothing `pending`, while `following`.

    It hears the store's writes from `feed` (the cache's, so that what a write affects is
    worked out once). Not following, it hears nothing and keeps nothing: `follow(True)`
    starts from a full audit.
    """

    def __init__(self, store: Store, settings: Settings, *, feed: AffectedFeed | None = None):
        self._store = store
        self._settings = settings
        self._audits: dict[ObjectKey, PolicyAudit] = {}
        self._dirty: set[ObjectKey] = set()
        self._entering: set[ObjectKey] = set()  # objects whose context rungs are to be read
        self._everything = True  # a full audit is due
        # Who read what, from the last computation of each policy (`Reads`).
        self._by_target: dict[ObjectKey, set[ObjectKey]] = {}
        self._by_slot: dict[tuple[str, GroupKind], set[ObjectKey]] = {}
        self._by_grant_namespace: dict[str, set[ObjectKey]] = {}
        self._by_effective: dict[ObjectKey, set[ObjectKey]] = {}
        self._by_namespace: dict[str, set[ObjectKey]] = {}
        self.following = False
        self.computed = 0  # policies audited since start (tests, logs)
        self.feed = feed if feed is not None else AffectedFeed(store)
        self.feed.subscribe(self._on_write, wanted=lambda: self.following)

    # --- what it holds ---------------------------------------------------------------------------

    def audits(self) -> Mapping[ObjectKey, PolicyAudit]:
        return self._audits

    def namespaces(self) -> set[str]:
        """Namespaces that hold policies (`""`: cluster-scoped ones)."""
        return set(self._by_namespace)

    def in_namespace(self, namespace: str) -> list[PolicyAudit]:
        """The audits of the policies of one namespace, in key order."""
        return [self._audits[key] for key in sorted(self._by_namespace.get(namespace, ()))]

    @property
    def pending(self) -> bool:
        """Whether a `refresh` has work to do."""
        return self._everything or bool(self._dirty or self._entering)

    # --- following the store -------------------------------------------------------------------

    def follow(self, following: bool) -> None:
        """Start following the store's writes, a full audit due; or stop and forget all."""
        self.following = following
        self._forget()

    def mark_all(self) -> None:
        """A full audit at the next `refresh` (a safety net, never what keeps it right)."""
        self._everything = True

    def refresh(self, limit: int | None = None) -> set[str]:
        """Recompute the policies whose findings may have changed — at most `limit` of them
        (None: all), so that a caller on an event loop can yield between calls — and return
        the namespaces whose policies or findings changed."""
        if self._everything:
            self._everything = False
            self._entering.clear()
            self._dirty = {key for key, _ in stored_policies(self._store)} | set(self._audits)
        if self._entering:
            self._dirty |= self._reaching(self._entering)
            self._entering.clear()
        changed: set[str] = set()
        while self._dirty and (limit is None or limit > 0):
            key = self._dirty.pop()
            if self._recompute(key):
                changed.add(key.namespace)
            if limit is not None:
                limit -= 1
        return changed

    def _forget(self) -> None:
        self._audits.clear()
        self._dirty.clear()
        self._entering.clear()
        self._everything = True
        for index in self._indexes():
            index.clear()

    def _indexes(self) -> tuple[dict[Any, set[ObjectKey]], ...]:
        """Who read what (`Reads`), and the policies of each namespace."""
        return (
            self._by_target,
            self._by_slot,
            self._by_grant_namespace,
            self._by_effective,
            self._by_namespace,
        )

    # --- one policy ----------------------------------------------------------------------------

    def _recompute(self, key: ObjectKey) -> bool:
        """Audit `key` again (or drop it: no longer a policy); True when its entry changed."""
        obj = self._store.get(key)
        old = self._audits.get(key)
        new = None
        if obj is not None and self._store.is_policy_object(key.group_kind, obj):
            new = audit_policy(key, obj, view=self._store, settings=self._settings)
            self.computed += 1
        if old is not None:
            self._file(old, add=False)
        if new is None:
            self._audits.pop(key, None)
        else:
            self._audits[key] = new
            self._file(new, add=True)
        return old != new

    def _file(self, audit: PolicyAudit, *, add: bool) -> None:
        """Put `audit`'s reads into the indexes, or take them out."""
        reads, key = audit.reads, audit.key
        entries: list[tuple[dict[Any, set[ObjectKey]], Iterable[Any]]] = [
            (self._by_target, reads.targets),
            (self._by_slot, reads.selector_slots),
            (self._by_grant_namespace, reads.grant_namespaces),
            (self._by_effective, reads.effective_of),
            (self._by_namespace, (key.namespace,)),
        ]
        for index, slots in entries:
            for slot in slots:
                if add:
                    index.setdefault(slot, set()).add(key)
                    continue
                holders = index.get(slot)
                if holders is not None:
                    holders.discard(key)
                    if not holders:
                        del index[slot]

    # --- what a write may change ---------------------------------------------------------------

    def _on_write(
        self, key: ObjectKey, old: Obj | None, new: Obj | None, affected: frozenset[ObjectKey]
    ) -> None:
        if self._everything or (
            old is not None and new is not None and relevant(old) == relevant(new)
        ):
            return
        gk = key.group_kind
        dirty = self._dirty
        dirty |= self._by_target.get(key, set())
        dirty |= self._by_slot.get((key.namespace, gk), set())
        if gk == kinds.REFERENCE_GRANT:
            dirty |= self._by_grant_namespace.get(key.namespace, set())
        if gk == kinds.CRD:
            self._profile_changed(old, new)
        is_policy = key in self._audits or any(
            obj is not None and self._store.is_policy_object(gk, obj) for obj in (old, new)
        )
        if not is_policy:
            for reached in affected:
                dirty |= self._by_effective.get(reached, set())
            if _may_move(gk, old, new):
                self._entering |= affected
            return
        # A policy: itself, and those of its kind it may meet — on what it names or picks,
        # then and now, and on what it reaches (kinds never meet, SPEC §5).
        dirty.add(key)
        met: set[ObjectKey] = set()
        for target in targets_of(key, old, self._store) | targets_of(key, new, self._store):
            met |= self._by_target.get(target, set())
        for reached in affected:
            met |= self._by_effective.get(reached, set())
        dirty |= {other for other in met if other.group_kind == gk}

    def _profile_changed(self, old: Obj | None, new: Obj | None) -> None:
        """A CRD: every object of the kind it defines, whether a policy before or after."""
        for crd in (old, new):
            gk = defined_kind(crd) if crd is not None else None
            if gk is not None:
                self._dirty.update(self._store.keys(gk))
                self._dirty.update(k for k in self._audits if k.group_kind == gk)

    def _reaching(self, objects: Iterable[ObjectKey]) -> set[ObjectKey]:
        """Policies whose reach may now hold one of `objects`, in the current state, however
        they came to: those on a rung of a context of one of them — and, up the hierarchy, on
        a rung of a context of such a rung's object. The reach a policy's findings read
        (`hierarchy.affected_by`) walks below a rung by object, not by context: a route whose
        parent is a Service (GAMMA) lies below every route that sends to that Service, though
        none of those is on its own contexts."""
        rungs: set[ObjectKey] = set()
        frontier = list(objects)
        while frontier:
            key = frontier.pop()
            if self._store.get(key) is None:
                continue
            for context in hierarchy.contexts_of(key, self._store):
                for rung in context:
                    if rung.key not in rungs:
                        rungs.add(rung.key)
                        frontier.append(rung.key)
        return {policy.key for rung in rungs for policy in self._store.policies_targeting(rung)}


def _may_move(gk: GroupKind, old: Obj | None, new: Obj | None) -> bool:
    """Whether a write may change contexts, and so what a policy reaches: an object of the
    hierarchy that comes, goes or changes — but not by its labels alone, which only selectors
    read (and `Reads.selector_slots` holds who does); a Namespace's labels admit routes
    (`allowedRoutes`), so any change of one may."""
    if gk not in STRUCTURAL_KINDS:
        return False
    if gk == kinds.NAMESPACE or old is None or new is None:
        return True
    return _without_labels(old) != _without_labels(new)


def _without_labels(obj: Obj) -> dict[str, Any]:
    found = relevant(obj)
    found["metadata"] = {k: v for k, v in found.get("metadata", {}).items() if k != "labels"}
    return found
