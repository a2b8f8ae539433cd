"""One read of the cluster state, for a command that answers once (`explain`, `report`): list,
no watch.

`informers.ClusterSource` is a server's: it retries forever and waits for a sync. A command
must answer within `--request-timeout` and say in one line what went wrong, so this reads
each resource once, with that timeout on every request, and turns each way of failing into a
`ClusterUnavailable` that names the cause — credentials refused, a server that does not
answer, a resource it may not list. Which cluster, and whether it answers at all, is decided
before this module (and the API client it imports) is loaded: `kubeconfig`.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from kubernetes_asyncio import client, config
from kubernetes_asyncio.config.config_exception import ConfigException
from kubernetes_asyncio.config.kube_config import KubeConfigLoader, KubeConfigMerger

from webhook.core.state.store import Store
from webhook.shell.cluster import informers, kubeapi, webhook_rules
from webhook.shell.cluster.kubeconfig import ClusterUnavailable, Target

PAGE_SIZE = 500


@dataclass(slots=True)
class Snapshot:
    """What was read: notes on kinds that could not be listed (the answer is given without
    them), and the ValidatingWebhookConfiguration asked for (`{}`: there is none; None: not
    asked, or not readable, with a note)."""

    notes: list[str] = field(default_factory=list)
    webhook_configuration: dict[str, Any] | None = None


async def read_cluster(
    store: Store,
    target: Target,
    *,
    timeout: float,
    keep_annotation: str = "",
    webhook_configuration: str | None = None,
) -> Snapshot:
    """Fill `store` with what the webhook reads of the cluster, once; `timeout` (seconds, 0:
    none) bounds every request. With `webhook_configuration`, read that
    ValidatingWebhookConfiguration too."""
    configuration = await _configuration(target)
    snapshot = Snapshot()
    api = client.ApiClient(configuration)
    try:
        limit = aiohttp.ClientTimeout(total=timeout or None, connect=timeout or None)
        reader = _Reader(api, store, snapshot, target.server, limit, timeout, keep_annotation)
        await reader.read(informers.CRDS, essential=True)  # they say what else there is
        wanted = [informers.SERVICES, informers.NAMESPACES]
        wanted += list(informers.wanted_resources(store).values())
        essential = {informers.SERVICES.group_kind, informers.NAMESPACES.group_kind}
        await asyncio.gather(*(reader.read(r, essential=r.group_kind in essential) for r in wanted))
        if webhook_configuration is not None:
            await reader.read_configuration(webhook_configuration)
    finally:
        await kubeapi.close(api)
    return snapshot


async def _configuration(target: Target) -> client.Configuration:
    """The client's configuration for the chosen context (credentials, CA, exec plugins)."""
    configuration = client.Configuration()
    try:
        if target.in_cluster:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            merged = KubeConfigMerger(os.pathsep.join(target.paths)).config
            loader = KubeConfigLoader(
                config_dict=merged, active_context=target.context, config_base_path=None
            )
            await loader.load_and_set(configuration)
    except (ConfigException, OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        where = f"context {target.context!r}" if target.context else "the in-cluster configuration"
        raise ClusterUnavailable(f"cannot use {where}: {_one_line(exc)}") from None
    return configuration


# --- listing ---------------------------------------------------------------------------------


class _Reader:
    def __init__(
        self,
        api: client.ApiClient,
        store: Store,
        snapshot: Snapshot,
        server: str,
        limit: aiohttp.ClientTimeout,
        seconds: float,
        keep_annotation: str,
    ) -> None:
        self.api, self.store, self.snapshot, self.server = api, store, snapshot, server
        self.limit, self.seconds, self.keep_annotation = limit, seconds, keep_annotation

    async def read(self, resource: kubeapi.Resource, *, essential: bool) -> None:
        """Every object of `resource` into the store. Without the essential ones (CRDs,
        Services, Namespaces) no answer is right; a Gateway API or policy kind that cannot be
        listed is left out with a note."""
        try:
            items = await self._list(resource)
        except kubeapi.ApiError as exc:
            if essential or exc.status not in (403, 404):
                raise ClusterUnavailable(self._describe(exc, resource)) from None
            self.snapshot.notes.append(
                f"{resource.group_kind} left out: {exc.status} {exc.reason or ''} "
                f"({exc.message or 'cannot list it'})".replace("  ", " ")
            )
            return
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            raise ClusterUnavailable(self._describe(exc, resource)) from None
        self.store.replace_kind(resource.group_kind, items)

    async def read_configuration(self, name: str) -> None:
        """The policy webhooks' configuration, for what it sends to the webhook (PA-K02); one
        that cannot be read is a note, never a failure."""
        try:
            async with asyncio.timeout(self.seconds or None):
                found = await webhook_rules.read_configuration(
                    self.api, name, timeout=self.seconds or 30.0
                )
        except kubeapi.ApiError as exc:
            self.snapshot.notes.append(
                f"ValidatingWebhookConfiguration {name} not read ({exc.status} {exc.reason}): "
                "PA-K02 not judged"
            )
            return
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            self.snapshot.notes.append(
                f"ValidatingWebhookConfiguration {name} not read ({_one_line(exc)}): PA-K02 not judged"
            )
            return
        self.snapshot.webhook_configuration = found

    async def _list(self, resource: kubeapi.Resource) -> list[dict[str, Any]]:
        async def fetch(query: list[tuple[str, str]]) -> dict[str, Any]:
            async with asyncio.timeout(self.seconds or None):  # the whole request, body too
                response = await kubeapi.open_request(
                    self.api, "GET", resource.path, query=query, timeout=self.limit
                )
                try:
                    page = json.loads(await response.read())
                finally:
                    response.release()
            if not isinstance(page, dict):
                raise ValueError(f"the list of {_plural_name(resource)} is not a JSON object")
            return page

        def keep(raw: dict[str, Any]) -> dict[str, Any]:
            return informers.prepared(raw, resource, keep_annotation=self.keep_annotation)

        items, _ = await informers.list_all(fetch, keep, page_size=PAGE_SIZE)
        return items

    def _describe(self, exc: BaseException, resource: kubeapi.Resource) -> str:
        server, what = self.server, _plural_name(resource)
        if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
            return (
                f"the API server at {server} did not answer within {self.seconds:g}s "
                "(--request-timeout)"
            )
        if isinstance(exc, aiohttp.ClientConnectorCertificateError):
            return f"cannot trust the API server at {server}: {_one_line(exc.certificate_error)}"
        if isinstance(exc, aiohttp.ClientConnectorError):
            cause = exc.os_error.strerror or _one_line(exc.os_error)
            return f"cannot reach the API server at {server}: {cause}"
        if isinstance(exc, kubeapi.ApiError):
            if exc.status == 401:
                return f"the API server at {server} refused the credentials (401 Unauthorized)"
            if exc.status == 403:
                return f"not allowed to list {what} at {server}: {exc.message or exc.reason}"
            return f"listing {what} at {server} failed: {_one_line(exc)}"
        if isinstance(exc, ssl.SSLError):
            return f"TLS with the API server at {server} failed: {_one_line(exc)}"
        return f"lost the API server at {server} while listing {what}: {_one_line(exc)}"


def _plural_name(resource: kubeapi.Resource) -> str:
    return f"{resource.plural}.{resource.group}" if resource.group else resource.plural


def _one_line(exc: object) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__
