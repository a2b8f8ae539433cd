"""What people type to name an object or a policy, read as kubectl reads it (`explain`).

`HTTPRoute/storefront` or `HTTPRoute storefront`; a kind by its name in any letter case, its
plural, a short name (`svc`, `gw`, a CRD's `shortNames`) or qualified by its group
(`retrypolicies.policies.example.com`). Kinds are resolved against the state: the kinds the
webhook annotates, and every policy kind it knows (a CRD, the operator's config, a policy
of that kind). When the object is not where it was looked for, `namespaces_holding` says
where one of that name is, for the hint kubectl users expect.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.core.model import kinds, meta
from webhook.core.model.profiles import defined_kind
from webhook.core.model.refs import GroupKind, ObjectKey, canonical_group
from webhook.core.state.store import ClusterView

# `kubectl get`'s short names of the Gateway API and core kinds, and a few people type.
SHORT_NAMES: Mapping[str, GroupKind] = {
    "gc": kinds.GATEWAY_CLASS, "gtw": kinds.GATEWAY, "gw": kinds.GATEWAY, "svc": kinds.SERVICE,
    "ls": kinds.LISTENER_SET, "route": kinds.HTTP_ROUTE,
}  # fmt: skip


class SpellingError(ValueError):
    """The words do not name one object kind; the message says what would."""


@dataclass(frozen=True, slots=True)
class Named:
    """What the words named: a kind, and whether it is a policy kind, and a name."""

    group_kind: GroupKind
    name: str
    is_policy: bool


def split_words(words: Sequence[str]) -> tuple[str, str]:
    """`["HTTPRoute/storefront"]` or `["HTTPRoute", "storefront"]` → the kind word, the name."""
    if len(words) == 2 and "/" not in words[0] and "/" not in words[1]:
        kind_word, name = words
    elif len(words) == 1:
        kind_word, _, name = words[0].partition("/")
    else:
        kind_word = name = ""
    if not kind_word or not name or "/" in name:
        shown = " ".join(words)
        raise SpellingError(f"expected KIND/NAME or KIND NAME, got {shown!r}")
    return kind_word, name


def resolve(words: Sequence[str], view: ClusterView) -> Named:
    """The kind and name the words give, against what `view` knows."""
    kind_word, name = split_words(words)
    gk, is_policy = resolve_kind(kind_word, view)
    return Named(gk, name, is_policy)


def resolve_kind(word: str, view: ClusterView) -> tuple[GroupKind, bool]:
    """`HTTPRoute`, `httproutes`, `svc`, `RetryPolicy.policies.example.com` → the kind, and
    whether it is a policy kind."""
    head, _, group = word.partition(".")
    table = spelling_table(view)
    found = {
        (gk, is_policy)
        for gk, is_policy in table.get(head.lower(), ())
        if not group or gk.group == canonical_group(group)
    }
    if len(found) == 1:
        return found.pop()
    if found:
        names = ", ".join(sorted(str(gk) for gk, _ in found))
        raise SpellingError(f"{word!r} names several kinds ({names}): add the group, KIND.GROUP")
    annotated = ", ".join(sorted(gk.kind for gk in kinds.ANNOTATED_KINDS))
    policies = ", ".join(sorted({str(gk) for entries in table.values() for gk, p in entries if p}))
    known = f"objects: {annotated}; policies: {policies or 'none known here'}"
    raise SpellingError(f"cannot explain {word!r}: known kinds are {known}")


def spelling_table(view: ClusterView) -> dict[str, set[tuple[GroupKind, bool]]]:
    """Every lowercase spelling of a kind → the kinds it may name (several: an ambiguity)."""
    table: dict[str, set[tuple[GroupKind, bool]]] = {}

    def add(spellings: Iterable[str], gk: GroupKind, is_policy: bool) -> None:
        for spelling in spellings:
            table.setdefault(spelling.lower(), set()).add((gk, is_policy))

    for gk in kinds.ANNOTATED_KINDS:
        add(_forms(gk.kind), gk, False)
    for short, gk in SHORT_NAMES.items():
        add([short], gk, False)
    policy_kinds = {profile.group_kind for profile in view.policy_kinds()}
    policy_kinds.update(policy.key.group_kind for policy in view.policies())
    for gk in policy_kinds:
        add(_forms(gk.kind), gk, True)
    for crd in view.objects(kinds.CRD):
        defined = defined_kind(crd)
        if defined is not None and defined in policy_kinds:
            add(_crd_names(crd), defined, True)
    return table


def _forms(kind: str) -> list[str]:
    """The kind, and its plural as Kubernetes forms it for built-in kinds."""
    lower = kind.lower()
    if lower.endswith("y"):
        plural = lower[:-1] + "ies"
    elif lower.endswith(("s", "x", "ch", "sh")):
        plural = lower + "es"
    else:
        plural = lower + "s"
    return [lower, plural]


def _crd_names(crd: Mapping[str, Any]) -> list[str]:
    spec = crd.get("spec")
    names = spec.get("names") if isinstance(spec, Mapping) else None
    if not isinstance(names, Mapping):
        return []
    found = [names.get("plural"), names.get("singular"), *(names.get("shortNames") or [])]
    return [name for name in found if isinstance(name, str) and name]


def object_key(named: Named, namespace: str, view: ClusterView) -> ObjectKey:
    """The key the words name in `namespace`: none for a cluster-scoped kind (GatewayClass,
    a cluster-scoped policy kind)."""
    if named.group_kind in kinds.CLUSTER_SCOPED:
        return ObjectKey(*named.group_kind, "", named.name)
    key = ObjectKey(*named.group_kind, namespace, named.name)
    if named.is_policy and view.policy(key) is None:
        cluster_scoped = ObjectKey(*named.group_kind, "", named.name)
        if view.policy(cluster_scoped) is not None:
            return cluster_scoped
    return key


def namespaces_holding(gk: GroupKind, name: str, view: ClusterView) -> list[str]:
    """The namespaces with an object of this kind and name, for a hint when it was looked
    for in another one."""
    return sorted(
        {meta.namespace(obj) for obj in view.objects(gk) if meta.name(obj) == name} - {""}
    )
