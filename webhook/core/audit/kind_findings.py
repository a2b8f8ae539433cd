"""Findings about policy kinds rather than policies (SPEC §8.4): the silent failures of an
install — a kind whose writes the API server never sends to the webhook (PA-K02), a kind the
webhook may not read (PA-K03). Reported, never enforced: nothing is admitted or refused by
them. Pure: the shell says what it saw (the policy webhook's rules, the informers' 403s).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core.model.profiles import KindProfile
from webhook.core.model.refs import GroupKind
from webhook.core.model.settings import Settings
from webhook.core.model.webhook_rules import AGGREGATION_LABEL, PolicyResource, sends_writes
from webhook.core.rules.findings import Finding, Judge, Judged


@dataclass(frozen=True, slots=True)
class KindFacts:
    """What the shell saw of the policy kinds it serves: the ValidatingWebhookConfiguration
    by name and as last read (None: not read, so nothing is said about PA-K02), the kinds to
    judge against it (the shell's choice: the leader's own waits for a second reading), and
    the kinds whose list the API server refused (403)."""

    configuration_name: str
    configuration: Mapping[str, Any] | None
    judged: frozenset[PolicyResource]
    unreadable: frozenset[PolicyResource]


@dataclass(frozen=True, slots=True)
class KindAudit:
    resource: PolicyResource
    findings: tuple[Judged, ...]

    @property
    def crd_name(self) -> str:
        return f"{self.resource.plural}.{self.resource.group}"


def audit_kinds(
    facts: KindFacts,
    *,
    profile: Callable[[GroupKind], KindProfile],
    settings: Settings,
) -> list[KindAudit]:
    """Each kind with a finding, in order; a rule set to `off` says nothing."""
    out: list[KindAudit] = []
    for resource in sorted(facts.judged | facts.unreadable):
        found: list[Finding] = []
        if (
            facts.configuration is not None
            and resource in facts.judged
            and not sends_writes(facts.configuration, resource)
        ):
            found.append(
                Finding(
                    "PA-K02",
                    "",
                    _not_sent(
                        resource, facts.configuration_name, read=resource not in facts.unreadable
                    ),
                )
            )
        if resource in facts.unreadable:
            found.append(Finding("PA-K03", "", _unreadable(resource)))
        gk_profile = profile(GroupKind(resource.group, resource.kind))
        judge = Judge(gk_profile.rule_actions, settings.rule_actions, strict=settings.strict)
        judged = tuple(j for j in map(judge, found) if j.action != "off")
        if judged:
            out.append(KindAudit(resource, judged))
    return out


def _not_sent(resource: PolicyResource, configuration: str, *, read: bool) -> str:
    """SPEC §8.4's wording where the webhook reads the kind; where it may not (PA-K03 beside
    it), its policies are not in the annotations either, and saying so would mislead."""
    consequence = (
        "its policies are annotated but never checked"
        if read
        else "its policies are never checked, and not annotated either while the webhook may "
        "not read them (PA-K03)"
    )
    return (
        f"writes of {resource.plural}.{resource.group} are not sent to this webhook: no rule "
        f"of ValidatingWebhookConfiguration {configuration} covers them; {consequence}"
    )


def _unreadable(resource: PolicyResource) -> str:
    return (
        f"the webhook may not list and watch {resource.plural}.{resource.group}: its policies "
        f"are neither checked nor annotated; add to a ClusterRole labelled {AGGREGATION_LABEL}"
        f'=true the rule {{apiGroups: ["{resource.group}"], resources: ["{resource.plural}"], '
        'verbs: ["get", "list", "watch"]}'
    )
