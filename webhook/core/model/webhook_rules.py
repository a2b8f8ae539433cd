"""The `rules` of the webhook's own policy webhooks, from the policy kinds it can read.

A policy webhook that matches a kind the webhook cannot read would judge its policies
against a state that lacks them (no conflicts, no impact), and one that misses a kind the
webhook reads lets its policies in unchecked. So the rules follow what the service account
may list and watch. Pure: the shell (`webhook/shell/cluster/webhook_rules.py`) asks the API
server, and sends the patch computed here; nothing here knows how.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.core.model import meta

# The policy webhooks of manifests/base/webhooks.yaml whose rules are ours to write, and the
# operations each one judges. The other webhooks of the configurations are never touched.
WRITES = ("CREATE", "UPDATE")
POLICY_WEBHOOKS: Mapping[str, tuple[str, ...]] = {
    "policies.policy-attachment.dev": WRITES,
    "policy-deletes.policy-attachment.dev": ("DELETE",),
}

# A ClusterRole with this label is aggregated into the one that lets the webhook read policies
# (manifests/base/rbac.yaml, manifests/components/policy-group).
AGGREGATION_LABEL = "policy-attachment.dev/aggregate-to-policy-webhook"

# What an informer needs to keep a kind in the store: a list, then watches.
READ_VERBS = ("list", "watch")


@dataclass(frozen=True, slots=True, order=True)
class PolicyResource:
    """One policy kind as the API server serves it: its group and plural resource name."""

    group: str
    plural: str
    kind: str

    def __str__(self) -> str:
        return f"{self.kind}.{self.group}"


# --- RBAC ------------------------------------------------------------------------------------


def grants(rules: Iterable[Mapping[str, Any]], *, group: str, resource: str, verb: str) -> bool:
    """True when one of `rules` (RBAC PolicyRules, as a SelfSubjectRulesReview lists them)
    allows `verb` on every object of `resource` in `group`.

    A rule limited by `resourceNames` never allows a list or a watch of the whole
    collection, which is what an informer sends, so such a rule does not count.
    """
    for rule in rules:
        if rule.get("resourceNames"):
            continue
        if (
            _matches(rule.get("apiGroups"), group)
            and _matches(rule.get("resources"), resource)
            and _matches(rule.get("verbs"), verb)
        ):
            return True
    return False


def readable(rules: Iterable[Mapping[str, Any]], resource: PolicyResource) -> bool:
    """The rules allow every verb an informer of `resource` sends."""
    listed = list(rules)
    return all(
        grants(listed, group=resource.group, resource=resource.plural, verb=verb)
        for verb in READ_VERBS
    )


def _matches(values: object, wanted: str) -> bool:
    return isinstance(values, list) and ("*" in values or wanted in values)


# --- the rules -------------------------------------------------------------------------------


def wanted_rules(
    resources: Iterable[PolicyResource], operations: Sequence[str]
) -> list[dict[str, Any]]:
    """One rule per group, naming its policy resources one by one (never `*`: a group such as
    gateway.networking.k8s.io also holds routes, and a vendor's group holds its other kinds),
    at every version (`apiVersions: ["*"]`, so a new served version is covered at once), in a
    stable order so that an unchanged set of kinds yields the same list."""
    by_group: dict[str, set[str]] = {}
    for resource in resources:
        by_group.setdefault(resource.group, set()).add(resource.plural)
    return [
        {
            "apiGroups": [group],
            "apiVersions": ["*"],
            "operations": list(operations),
            "resources": sorted(plurals),
            "scope": "*",
        }
        for group, plurals in sorted(by_group.items())
    ]


def same_rules(current: object, wanted: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a webhook's `rules` already say what `wanted` says (absent = no rule; the API
    server defaults `scope` to `*`, and order carries no meaning in either list)."""
    if not isinstance(current, list):
        current = []
    return _normalized(current) == _normalized(wanted)


def _normalized(rules: Iterable[object]) -> list[tuple[tuple[str, ...], ...]]:
    out = []
    for rule in rules:
        if not isinstance(rule, Mapping):
            return [(("<unreadable>",),)]
        out.append(
            (
                tuple(sorted(_strings(rule.get("apiGroups")))),
                tuple(sorted(_strings(rule.get("apiVersions")))),
                tuple(sorted(_strings(rule.get("operations")))),
                tuple(sorted(_strings(rule.get("resources")))),
                (str(rule.get("scope") or "*"),),
            )
        )
    return sorted(out)


def _strings(values: object) -> list[str]:
    return [str(v) for v in values] if isinstance(values, list) else []


def rules_patch(
    configuration: Mapping[str, Any], resources: Iterable[PolicyResource]
) -> dict[str, Any] | None:
    """A strategic merge patch that gives each policy webhook of `configuration` the rules for
    `resources`, or None when they already have them.

    Webhooks merge by `name` and `rules` is replaced whole, so the patch changes nothing but
    the rules of the webhooks it names. It carries the resourceVersion it was computed from:
    a configuration changed in between is refused (409), never overwritten.
    """
    chosen = sorted(set(resources))
    hooks = configuration.get("webhooks")
    changes = []
    for hook in hooks if isinstance(hooks, list) else ():
        name = hook.get("name") if isinstance(hook, Mapping) else None
        if not isinstance(name, str) or name not in POLICY_WEBHOOKS:
            continue
        wanted = wanted_rules(chosen, POLICY_WEBHOOKS[name])
        if not same_rules(hook.get("rules"), wanted):
            changes.append({"name": name, "rules": wanted})
    if not changes:
        return None
    patch: dict[str, Any] = {"webhooks": changes}
    version = meta.resource_version(configuration)
    if version is not None:
        patch["metadata"] = {"resourceVersion": version}
    return patch


def sends_writes(configuration: Mapping[str, Any], resource: PolicyResource) -> bool:
    """Whether the API server sends a CREATE and an UPDATE of `resource` to the policy webhook
    of `configuration` that judges them: one of its rules names the group, the resource
    (or `*`) and each operation (or `*`), at any version and scope (SPEC §8.4: a kind left
    out has its policies annotated, never checked)."""
    hooks = configuration.get("webhooks")
    for hook in hooks if isinstance(hooks, list) else ():
        name = hook.get("name") if isinstance(hook, Mapping) else None
        if not isinstance(name, str) or POLICY_WEBHOOKS.get(name) != WRITES:
            continue
        rules = hook.get("rules")
        covered: set[str] = set()
        for rule in rules if isinstance(rules, list) else ():
            if not isinstance(rule, Mapping):
                continue
            resources = rule.get("resources")
            if _matches(rule.get("apiGroups"), resource.group) and (
                _matches(resources, resource.plural) or _matches(resources, "*/*")
            ):
                covered.update(op for op in WRITES if _matches(rule.get("operations"), op))
        if covered == set(WRITES):
            return True
    return False


def managed_webhooks(configuration: Mapping[str, Any]) -> list[str]:
    """The names of the policy webhooks this configuration holds (none: nothing to manage)."""
    hooks = configuration.get("webhooks")
    return [
        hook["name"]
        for hook in (hooks if isinstance(hooks, list) else ())
        if isinstance(hook, Mapping) and hook.get("name") in POLICY_WEBHOOKS
    ]
