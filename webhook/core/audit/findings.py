"""One stored policy's findings against the cluster as it is now (SPEC §8.3), and what they
were read from.

The findings are admission's (`validation.check_stored`: the same rules, engine and actions as
a CREATE of the policy against all the others), minus what a report does not carry: the impact
preview PA-C04 and rules switched `off`. What they were read from (`Reads`) is what lets the
audit book (`book.py`) recompute a policy only when one of those inputs changes. Pure.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core.admission import validation
from webhook.core.model import meta
from webhook.core.model.policy import (
    raw_target_refs,
    raw_target_selectors,
    read_policy,
    read_target_ref,
    read_target_selector,
    spec_of,
)
from webhook.core.model.refs import GroupKind, ObjectKey, key_of
from webhook.core.model.settings import Settings
from webhook.core.rules.findings import Judged
from webhook.core.rules.ruletable import PREVIEW_RULES
from webhook.core.state.store import ClusterView, Store, policy_targets

# An impact preview describes a change; the audit judges what is there (SPEC §8.3).
NOT_REPORTED = PREVIEW_RULES


@dataclass(frozen=True, slots=True)
class Reads:
    """What a policy's findings read besides the policy itself and its kind's profile: the
    objects it names or its selectors pick (exist? sections? who else targets them?), the
    (namespace, kind) its selectors search, the namespaces whose ReferenceGrants admit its
    cross-namespace targets, and the objects whose effective policy PA-C02/C03 compared."""

    targets: frozenset[ObjectKey] = frozenset()
    selector_slots: frozenset[tuple[str, GroupKind]] = frozenset()
    grant_namespaces: frozenset[str] = frozenset()
    effective_of: frozenset[ObjectKey] = frozenset()


@dataclass(frozen=True, slots=True)
class PolicyAudit:
    """One stored policy and its reported findings (none: a clean policy)."""

    key: ObjectKey
    api_version: str
    uid: str
    findings: tuple[Judged, ...]
    reads: Reads


def audit_policy(
    key: ObjectKey, obj: Mapping[str, Any], *, view: ClusterView, settings: Settings
) -> PolicyAudit:
    """The findings of the policy `obj`, which `view` holds under `key`."""
    verdict, effective_of = validation.check_stored(
        obj, key.group_kind, view=view, settings=settings
    )
    reported = tuple(
        j for j in verdict.judged if j.action != "off" and j.finding.rule_id not in NOT_REPORTED
    )
    api_version = obj.get("apiVersion")
    return PolicyAudit(
        key,
        api_version if isinstance(api_version, str) else "",
        str(meta.metadata(obj).get("uid") or ""),
        reported,
        _reads(key, obj, view, effective_of),
    )


def stored_policies(store: Store) -> Iterator[tuple[ObjectKey, Mapping[str, Any]]]:
    """Every object the store holds that is a policy (SPEC §1.1, §1.3), in key order."""
    for gk in sorted(store.all_kinds()):
        for obj in store.objects(gk):
            key = key_of(obj)
            if key is not None and store.is_policy_object(gk, obj):
                yield key, obj


def audit_store(store: Store, settings: Settings) -> dict[ObjectKey, PolicyAudit]:
    """Every stored policy audited afresh: what the book must always equal."""
    return {
        key: audit_policy(key, obj, view=store, settings=settings)
        for key, obj in stored_policies(store)
    }


def targets_of(key: ObjectKey, obj: Mapping[str, Any] | None, view: ClusterView) -> set[ObjectKey]:
    """Every object the policy `obj` names in a readable ref — well-formed or not, as the
    target rules may read it — and every object its selectors pick in `view` now."""
    spec = spec_of(obj) if obj is not None else None
    if obj is None or spec is None:
        return set()
    found = {
        ref.target_key(key.namespace)
        for path, raw in raw_target_refs(spec)
        if (ref := read_target_ref(path, raw)) is not None
    }
    policy = read_policy(obj, view.profile(key.group_kind))
    if policy is not None:
        found.update(target for target, _ in policy_targets(policy, view))
    return found


def _reads(
    key: ObjectKey,
    obj: Mapping[str, Any],
    view: ClusterView,
    effective_of: frozenset[ObjectKey],
) -> Reads:
    spec = spec_of(obj)
    if spec is None:
        return Reads()
    namespace = key.namespace
    targets = targets_of(key, obj, view)
    selectors = [
        s for path, raw in raw_target_selectors(spec) if (s := read_target_selector(path, raw))
    ]
    return Reads(
        frozenset(targets),
        frozenset((namespace, s.group_kind) for s in selectors),
        frozenset(t.namespace for t in targets if t.namespace and t.namespace != namespace),
        effective_of,
    )
