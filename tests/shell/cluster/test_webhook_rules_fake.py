"""The webhook-rules keeper's rounds against scripted answers of the authorizer and the API.

Which questions it asks and when (one rules review per round; access reviews only when the
review's answer about a kind changes, or cannot decide), what it sends, and what it makes of a
409 or a missing configuration: cases a real API server gives only by chance. The real thing,
with a real token and RBAC, is tests/e2e/test_policy_groups.py.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from typing import Any

import pytest

from webhook.core.model import kinds
from webhook.core.model.refs import GroupKind
from webhook.core.state.store import Store
from webhook.shell.cluster import access, kubeapi
from webhook.shell.cluster import webhook_rules as keeper_module
from webhook.shell.cluster.informers import CRDS
from webhook.shell.cluster.webhook_rules import WebhookRulesKeeper
from webhook.shell.process.metrics import Metrics

GROUP = "policies.acme.io"
RETRY = kubeapi.Resource(GROUP, "v1", "retrypolicies", "RetryPolicy")
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"retrypolicies.{GROUP}",
                 "labels": {"gateway.networking.k8s.io/policy": "inherited"}},
    "spec": {"group": GROUP, "scope": "Namespaced",
             "names": {"kind": "RetryPolicy", "plural": "retrypolicies"},
             "versions": [{"name": "v1", "served": True, "storage": True}]},
}  # fmt: skip
GRANT = {"apiGroups": [GROUP], "resources": ["*"], "verbs": ["get", "list", "watch"]}
HOOKS: list[dict[str, Any]] = [
    {"name": "policies.policy-attachment.dev"},
    {"name": "policy-deletes.policy-attachment.dev"},
    {"name": "target-deletes.policy-attachment.dev", "rules": [{"apiGroups": [""]}]},
]


class Source:
    """What the keeper reads of the informers: the resources they serve, and the first sync."""

    def __init__(self) -> None:
        self.synced = asyncio.Event()
        self.synced.set()

    def watched(self) -> dict[GroupKind, kubeapi.Resource]:
        return {kinds.CRD: CRDS, RETRY.group_kind: RETRY}


class Response:
    """A PATCH's answer: the whole object as the API server now stores it."""

    def __init__(self, stored: dict[str, Any]) -> None:
        self.body = json.dumps(stored).encode()

    async def read(self) -> bytes:
        return self.body

    def release(self) -> None:
        pass


class Fake:
    """Scripted answers, and a record of every question."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rules: list[dict[str, Any]] = [GRANT]
        self.incomplete = False
        self.allowed = True
        self.configuration: dict[str, Any] | None = {
            "metadata": {"name": "policy-webhook", "resourceVersion": "7"},
            "webhooks": [dict(h) for h in HOOKS],
        }
        self.patch_status = 200
        self.reviews = 0
        self.access_reviews: list[str] = []
        self.patches: list[dict[str, Any]] = []
        monkeypatch.setattr(access, "rules_review", self.rules_review)
        monkeypatch.setattr(access, "may", self.may)
        monkeypatch.setattr(kubeapi, "request_json", self.request_json)
        monkeypatch.setattr(kubeapi, "open_request", self.open_request)

    async def rules_review(
        self, api: object, *, namespace: str, timeout: float
    ) -> access.RulesReview:
        self.reviews += 1
        return access.RulesReview(rules=list(self.rules), incomplete=self.incomplete)

    async def may(
        self, api: object, *, verb: str, group: str, resource: str, timeout: float
    ) -> bool:
        self.access_reviews.append(f"{verb} {resource}.{group}")
        return self.allowed

    async def request_json(self, api: object, method: str, path: str, **_: Any) -> dict[str, Any]:
        assert (method, path) == ("GET", f"{keeper_module.CONFIGURATIONS}/policy-webhook")
        if self.configuration is None:
            raise kubeapi.ApiError(404, "NotFound", "not found")
        return copy.deepcopy(self.configuration)

    async def open_request(
        self, api: object, method: str, path: str, *, body: Any, content_type: str, **_: Any
    ) -> Response:
        assert method == "PATCH" and content_type == keeper_module.STRATEGIC_MERGE_PATCH
        self.patches.append(body)
        if self.patch_status != 200:
            raise kubeapi.ApiError(self.patch_status, "Conflict", "modified")
        for change in body["webhooks"]:  # what the API server would store
            for hook in self.configuration["webhooks"]:  # type: ignore[index]
                if hook["name"] == change["name"]:
                    hook["rules"] = change["rules"]
        return Response(self.configuration)  # type: ignore[arg-type]


def keeper(metrics: Metrics | None = None) -> WebhookRulesKeeper:
    store = Store()
    store.upsert(CRD)
    return WebhookRulesKeeper(
        object(),  # type: ignore[arg-type]  # the fake answers every request
        store,
        Source(),  # type: ignore[arg-type]
        metrics or Metrics(),
        configuration="policy-webhook",
        namespace="policy-webhook",
    )


def rounds(kept: WebhookRulesKeeper, n: int) -> list[str]:
    async def run() -> list[str]:
        return [await kept.sync_once() for _ in range(n)]

    return asyncio.run(run())


def test_a_readable_kind_is_patched_in_once_then_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = Fake(monkeypatch)
    kept = keeper()
    assert rounds(kept, 1) == ["patched"]
    # What the PolicyReport writer judges PA-K02 against: the rules as patched, not as read.
    assert kept.configuration_read == fake.configuration
    assert rounds(kept, 2) == ["unchanged", "unchanged"]
    (patch,) = fake.patches
    assert patch["metadata"] == {"resourceVersion": "7"}
    assert [h["name"] for h in patch["webhooks"]] == [
        "policies.policy-attachment.dev",
        "policy-deletes.policy-attachment.dev",
    ]
    assert patch["webhooks"][0]["rules"][0]["resources"] == ["retrypolicies"]
    assert fake.reviews == 3
    # A first-seen grant is confirmed once; nothing changed after it, nothing asked again.
    assert fake.access_reviews == [f"list retrypolicies.{GROUP}", f"watch retrypolicies.{GROUP}"]


def test_a_grant_the_access_review_denies_is_not_readable_and_not_asked_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A Role in the webhook's namespace shows in the rules review yet allows no cluster-wide
    list: the access review decides."""
    fake = Fake(monkeypatch)
    fake.allowed = False
    metrics = Metrics()
    kept = keeper(metrics)
    with caplog.at_level(logging.WARNING):
        assert rounds(kept, 2) == ["unchanged", "unchanged"]
    assert len(fake.access_reviews) == 1  # `list` denied; the second round trusts the first
    assert fake.patches == []
    kind = f"RetryPolicy.{GROUP}"
    assert metrics.policy_kind_readable.labels(kind=kind)._value.get() == 0
    (warning,) = [r for r in caplog.records if "cannot be read" in r.getMessage()]
    assert kind in warning.getMessage()


def test_a_grant_that_goes_away_is_confirmed_logged_and_dropped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = Fake(monkeypatch)
    kept = keeper()
    assert rounds(kept, 1) == ["patched"]
    fake.rules, fake.allowed = [], False
    with caplog.at_level(logging.WARNING):
        assert rounds(kept, 2) == ["patched", "unchanged"]
    assert fake.patches[-1]["webhooks"][0]["rules"] == []
    assert len([r for r in caplog.records if "cannot be read" in r.getMessage()]) == 1
    assert kept.readable == {next(iter(kept.readable)): False}


def test_an_incomplete_review_that_grants_nothing_is_asked_about_every_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = Fake(monkeypatch)
    fake.rules, fake.incomplete = [], True  # another authorizer may allow it
    assert rounds(keeper(), 2) == ["patched", "unchanged"]
    assert len(fake.access_reviews) == 4  # list and watch, each round


def test_a_conflict_is_reported_as_such_and_a_missing_configuration_warned_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = Fake(monkeypatch)
    fake.patch_status = 409
    kept = keeper()
    assert rounds(kept, 1) == ["conflict"]
    fake.configuration = None
    with caplog.at_level(logging.WARNING):
        assert rounds(kept, 3) == ["missing"] * 3
    assert len([r for r in caplog.records if "not found" in r.getMessage()]) == 1


def test_stepping_down_forgets_the_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    Fake(monkeypatch)
    metrics = Metrics()
    kept = keeper(metrics)
    rounds(kept, 1)
    assert b"policy_webhook_policy_kind_readable{" in metrics.render()

    async def lead_then_stop() -> None:
        kept.set_leading(True)
        await asyncio.sleep(0)
        await kept.stop()

    asyncio.run(lead_then_stop())
    assert b"policy_webhook_policy_kind_readable{" not in metrics.render()
    assert kept.readable == {}
    assert kept.configuration_read is None
