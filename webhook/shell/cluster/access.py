"""What this process's own identity may do, as the API server's authorizer says.

Two questions, both open to every authenticated identity (the `system:basic-user` role) and
needing no RBAC of ours: the rules that apply to us (SelfSubjectRulesReview, one request for
all of them) and one decisive yes or no (SelfSubjectAccessReview). No retries: the caller
decides what a failure means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client

from webhook.shell.cluster import kubeapi

AUTHORIZATION = "/apis/authorization.k8s.io/v1"


@dataclass(frozen=True, slots=True)
class RulesReview:
    """The resource rules that apply to us in one namespace, cluster-wide ones included.

    `incomplete`: another authorizer than RBAC (a webhook, a cloud IAM) may allow more than
    these rules say; a missing rule then proves nothing and only an access review decides.
    """

    rules: Sequence[Mapping[str, Any]]
    incomplete: bool


async def rules_review(api: client.ApiClient, *, namespace: str, timeout: float) -> RulesReview:
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": namespace},
    }
    answer = await kubeapi.request_json(
        api, "POST", f"{AUTHORIZATION}/selfsubjectrulesreviews", body=body, timeout=timeout
    )
    status = answer.get("status") or {}
    rules = status.get("resourceRules") if isinstance(status, Mapping) else None
    return RulesReview(
        rules=[r for r in rules or () if isinstance(r, Mapping)],
        incomplete=bool(isinstance(status, Mapping) and status.get("incomplete")),
    )


async def may(
    api: client.ApiClient, *, verb: str, group: str, resource: str, timeout: float
) -> bool:
    """Whether we may `verb` every object of `resource` in every namespace."""
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource}},
    }
    answer = await kubeapi.request_json(
        api, "POST", f"{AUTHORIZATION}/selfsubjectaccessreviews", body=body, timeout=timeout
    )
    status = answer.get("status")
    return isinstance(status, Mapping) and status.get("allowed") is True
