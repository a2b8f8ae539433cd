"""Keeps the `rules` of the webhook's own policy webhooks in step with the kinds it can read.

On the Lease holder only (one writer; two versions of the webhook side by side during a
rollout would otherwise undo each other's rules), in rounds: on every change of a CRD, and
every `period` seconds, which also catches an RBAC change and a `kubectl apply` of an old
configuration. A round reads which policy kinds the informers serve, asks the authorizer
which of them this identity may list and watch, logs and counts a kind it may not read (its
group lacks a ClusterRole), and patches the rules of the two policy webhooks of one
ValidatingWebhookConfiguration — nothing else of it, with the resourceVersion it read. The
rules themselves are computed in the core (`webhook.core.model.webhook_rules`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from webhook.core.model import kinds
from webhook.core.model import webhook_rules as rules
from webhook.core.model.refs import GroupKind, ObjectKey
from webhook.core.model.webhook_rules import PolicyResource
from webhook.core.state.store import Store
from webhook.shell.cluster import access, kubeapi
from webhook.shell.cluster.informers import ClusterSource
from webhook.shell.cluster.leading import LeadingTask
from webhook.shell.process.logs import fields
from webhook.shell.process.metrics import Metrics

logger = logging.getLogger(__name__)

CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
SETTLE_SECONDS = 0.5  # a vendor installs its CRDs in one burst: one round after it, not one each
CONFLICT_RETRY_SECONDS = 0.2
# Webhooks merge by `name` under a strategic merge patch, and `rules` is replaced whole: the
# patch names two webhooks and one field of each, and leaves everything else as it is.
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


def policy_resources(
    store: Store, watched: Mapping[GroupKind, kubeapi.Resource]
) -> list[PolicyResource]:
    """The policy kinds with a served CRD, as the informers list them (`watched`)."""
    policy_kinds = {profile.group_kind for profile in store.policy_kinds()}
    return sorted(
        PolicyResource(resource.group, resource.plural, resource.kind)
        for gk, resource in watched.items()
        if gk in policy_kinds
    )


async def read_configuration(api: client.ApiClient, name: str, *, timeout: float) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration `name` as the API server has it; {} when there is none."""
    try:
        return await kubeapi.request_json(api, "GET", f"{CONFIGURATIONS}/{name}", timeout=timeout)
    except kubeapi.ApiError as exc:
        if exc.status != 404:
            raise
        return {}


class WebhookRulesKeeper(LeadingTask):
    """One round now and then while `set_leading(True)`; `patches` counts since
    start, `readable` holds the last verdict per policy kind (tests, logs), and
    `configuration_read` the configuration as the last round left it — as read, or as the
    patch returned it; None before the first read of a term — which the PolicyReport writer
    judges PA-K02 against instead of reading it again."""

    task_name = "webhook rules"

    def __init__(
        self,
        api: client.ApiClient,
        store: Store,
        source: ClusterSource,
        metrics: Metrics,
        *,
        configuration: str,
        namespace: str,
        period: float = 10.0,
        field_manager: str = "policy-webhook",
        request_timeout: float = 10.0,
    ) -> None:
        super().__init__()
        self.api, self.store, self.source, self.metrics = api, store, source, metrics
        self.configuration = configuration
        self.namespace = namespace  # where the rules review is asked (it needs one)
        self.period = period
        self.field_manager = field_manager
        self.request_timeout = request_timeout
        self.readable: dict[PolicyResource, bool] = {}
        self.configuration_read: dict[str, Any] | None = None
        self._candidates: dict[PolicyResource, bool] = {}  # what the last rules review said
        self._missing_said = False
        self._wake = asyncio.Event()
        self.patches = 0
        store.subscribe(self._on_change)

    def _forget(self) -> None:
        """A replica that stops leading stops speaking for the kinds: the next leader will."""
        self.metrics.policy_kind_readable.clear()
        self.readable.clear()
        self.configuration_read = None
        self._candidates.clear()

    def _on_change(
        self, key: ObjectKey, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None
    ) -> None:
        if key.group_kind == kinds.CRD:
            self._wake.set()

    # --- rounds --------------------------------------------------------------------------------

    async def _lead(self) -> None:
        await self.source.synced.wait()  # the policy kinds are known once every CRD is listed
        while True:
            self._wake.clear()
            delay = self.period
            try:
                result = await self.sync_once()
            except Exception as exc:  # whatever broke, the next round tries again
                result = "error"
                logger.warning(
                    "could not keep the policy webhooks' rules in step; retrying in %.0fs",
                    self.period,
                    exc_info=not isinstance(
                        exc, kubeapi.ApiError | aiohttp.ClientError | OSError | TimeoutError
                    ),  # a server or network error needs no traceback
                    extra=fields(configuration=self.configuration, error=repr(exc)),
                )
            self.metrics.webhook_rules_syncs.labels(result=result).inc()
            if result == "conflict":
                delay = CONFLICT_RETRY_SECONDS  # someone else wrote it: read it again at once
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()
                    await asyncio.sleep(SETTLE_SECONDS)

    async def sync_once(self) -> str:
        """One round; returns its result: unchanged, patched, conflict or missing."""
        resources = policy_resources(self.store, self.source.watched())
        readable = await self._check_readable(resources)
        wanted = [r for r in resources if readable[r]]
        configuration = await read_configuration(
            self.api, self.configuration, timeout=self.request_timeout
        )
        self.configuration_read = configuration
        if not rules.managed_webhooks(configuration):
            self._say_missing(bool(configuration))
            return "missing"
        self._missing_said = False
        patch = rules.rules_patch(configuration, wanted)
        if patch is None:
            return "unchanged"
        try:
            response = await kubeapi.open_request(
                self.api,
                "PATCH",
                f"{CONFIGURATIONS}/{self.configuration}",
                query=[("fieldManager", self.field_manager)],
                body=patch,
                content_type=STRATEGIC_MERGE_PATCH,
                timeout=kubeapi.request_timeout(self.request_timeout),
            )
        except kubeapi.ApiError as exc:
            if exc.status == 409:
                return "conflict"
            raise
        try:
            body = await response.read()  # the whole object, as now stored
        finally:
            response.release()
        with contextlib.suppress(ValueError):  # unreadable: the one read above stands
            patched = json.loads(body)
            if isinstance(patched, dict) and rules.managed_webhooks(patched):
                self.configuration_read = patched
        self.patches += 1
        logger.info(
            "policy webhooks' rules updated: %s",
            ", ".join(str(r) for r in wanted) or "no policy kind",
            extra=fields(
                configuration=self.configuration,
                webhooks=[hook["name"] for hook in patch["webhooks"]],
                groups=sorted({r.group for r in wanted}),
                kinds=[str(r) for r in wanted],
            ),
        )
        return "patched"

    # --- who may read what ---------------------------------------------------------------------

    async def _check_readable(self, resources: list[PolicyResource]) -> dict[PolicyResource, bool]:
        """Per kind: may this identity list and watch it cluster-wide?

        One rules review per round answers for every kind; the access reviews, which decide,
        are asked only when its answer about a kind changed. They decide because the rules
        review is only a hint: a Role in our namespace shows up in it yet allows no
        cluster-wide list, another authorizer than RBAC may allow more (`incomplete`), and a
        `kubectl apply` of an aggregated role may empty it for a moment. A kind seen for the
        first time that RBAC alone denies needs no second opinion.
        """
        review = await access.rules_review(
            self.api, namespace=self.namespace, timeout=self.request_timeout
        )
        verdicts: dict[PolicyResource, bool] = {}
        for resource in resources:
            says = rules.readable(review.rules, resource)
            known = self.readable.get(resource)
            unsure = review.incomplete and not says
            if known is not None and says == self._candidates.get(resource) and not unsure:
                verdict = known  # nothing changed since the last round
            elif known is None and not says and not review.incomplete:
                verdict = False
            else:
                verdict = await self._may_read(resource)
            self._candidates[resource] = says
            verdicts[resource] = verdict
        self._report(verdicts)
        return verdicts

    async def _may_read(self, resource: PolicyResource) -> bool:
        for verb in rules.READ_VERBS:
            allowed = await access.may(
                self.api,
                verb=verb,
                group=resource.group,
                resource=resource.plural,
                timeout=self.request_timeout,
            )
            if not allowed:
                return False
        return True

    def _report(self, verdicts: dict[PolicyResource, bool]) -> None:
        """Metric per kind; a log line when a kind turns readable or unreadable."""
        gauge = self.metrics.policy_kind_readable
        gauge.clear()
        for resource, verdict in verdicts.items():
            gauge.labels(kind=str(resource)).set(1 if verdict else 0)
            before = self.readable.get(resource)
            if verdict == before:
                continue
            if verdict:
                logger.info(
                    "policy kind %s is readable: its policies are checked",
                    resource,
                    extra=fields(kind=str(resource), group=resource.group),
                )
            else:
                logger.warning(
                    "policy kind %s cannot be read (list/watch of %s.%s denied): its policies "
                    "are not checked and the policy webhooks leave it out; grant it with a "
                    "ClusterRole labelled %s=true (manifests/components/policy-group)",
                    resource,
                    resource.plural,
                    resource.group,
                    rules.AGGREGATION_LABEL,
                    extra=fields(
                        kind=str(resource), group=resource.group, resource=resource.plural
                    ),
                )
        self.readable = dict(verdicts)
        self._candidates = {r: c for r, c in self._candidates.items() if r in verdicts}

    def _say_missing(self, found: bool) -> None:
        if self._missing_said:
            return
        self._missing_said = True
        what = "holds no policy webhook" if found else "not found"
        logger.warning(
            "ValidatingWebhookConfiguration %s %s: the policy webhooks' rules are not kept "
            "(--webhook-configuration names it; --no-sync-webhook-rules turns this off)",
            self.configuration,
            what,
            extra=fields(configuration=self.configuration),
        )
