"""Cluster state from the API server: list + watch per resource, trimmed, into the shared `Store`.

One informer per resource: a paginated list (→ `Store.replace_kind`), then watches from the
list's resourceVersion, with bookmarks; `410 Gone` relists, any other failure reconnects after
an exponential backoff with full jitter. CRDs are watched first: they say at which version each
Gateway API kind is served and which kinds are policies (SPEC §1.1), so a policy CRD created or
labelled later gets an informer live, and one removed or unlabelled loses it and its objects.
Requests are raw JSON through `kubeapi` (the `ApiClient`'s auth, TLS and token refresh).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import aiohttp
from kubernetes_asyncio import client

from webhook.core.model import json_read, kinds, meta
from webhook.core.model.refs import CORE_GROUP, GATEWAY_GROUP, GroupKind, key_of
from webhook.core.state.parts import SharedParts
from webhook.core.state.store import Store
from webhook.core.state.trim import trim
from webhook.shell.cluster import kubeapi
from webhook.shell.process import readiness as ready
from webhook.shell.process.logs import fields
from webhook.shell.process.metrics import Metrics
from webhook.shell.process.readiness import Readiness
from webhook.shell.process.turns import Turns

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Gateway API kinds the rules and the engine read (SPEC §1.4 targets, and ReferenceGrants).
GATEWAY_KINDS = frozenset(
    {gk for gk in kinds.DEFAULT_TARGETS if gk.group == GATEWAY_GROUP} | {kinds.REFERENCE_GRANT}
)

# What every replica watches from the start; the CRDs say what else (Gateway API, policies).
CRDS = kubeapi.Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", kinds.CRD.kind)
SERVICES = kubeapi.Resource(CORE_GROUP, "v1", "services", kinds.SERVICE.kind)
NAMESPACES = kubeapi.Resource(CORE_GROUP, "v1", "namespaces", kinds.NAMESPACE.kind)


# --- one informer ----------------------------------------------------------------------------


class _Gone(Exception):
    """`410 Gone`: our resourceVersion is older than the server keeps; only a relist helps."""


class _Informer:
    """List + watch of one resource into the store, forever, until its task is cancelled."""

    def __init__(self, source: ClusterSource, resource: kubeapi.Resource) -> None:
        self.source = source
        self.resource = resource
        self.kind_label = str(resource.group_kind)
        self.resource_version: str | None = None
        self.last_contact: float | None = None  # time.monotonic() of the last sign of life
        # A watch stream is open: every change reaches us as it happens, however quiet the
        # kind, so the state of this kind is current (not merely "heard from lately").
        self.watching = False
        # Set after the first full list — or, so as not to block the first sync forever, when
        # stopped before one or when it cannot be listed yet (`_settle_unlisted`).
        self.first_list = asyncio.Event()
        # The API server refused the last list or watch (403: RBAC does not grant it), and no
        # list has succeeded since (the audit's PA-K03).
        self.forbidden = False
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.run(), name=f"informer {self.kind_label}")

    async def run(self) -> None:
        attempt = 0
        while True:
            started = time.monotonic()
            try:
                if self.resource_version is None:
                    await self.list()
                    attempt = 0
                events = await self.watch()
                self.source.count_restart(self, "timeout")
                if events or time.monotonic() - started >= 1.0:
                    attempt = 0  # the server ended the watch at timeoutSeconds: resume at once
                    continue
                # Ended at once with nothing said (client-go: "very short watch"): back off.
                delay = self.source.backoff(attempt)
            except _Gone:
                self.resource_version = None
                self.source.count_restart(self, "gone")
                continue
            except Exception as exc:  # whatever broke, the informer must go on
                if time.monotonic() - started >= self.source.healthy_after:
                    attempt = 0  # a long healthy watch that broke: start the backoff afresh
                delay = self.source.backoff(attempt)
                self.source.count_restart(self, "error")
                expected = isinstance(
                    exc, kubeapi.ApiError | aiohttp.ClientError | OSError | ValueError
                )
                logger.warning(
                    "list/watch of %s failed; retrying in %.1fs",
                    self.kind_label,
                    delay,
                    exc_info=not expected,  # a network or server error needs no traceback
                    extra=fields(kind=self.kind_label, error=repr(exc), attempt=attempt),
                )
                if isinstance(exc, kubeapi.ApiError) and exc.status == 403:
                    self.forbidden = True
                if isinstance(exc, kubeapi.ApiError) and not self.first_list.is_set():
                    self._settle_unlisted(exc)
            attempt += 1
            await asyncio.sleep(delay)

    def _settle_unlisted(self, error: kubeapi.ApiError) -> None:
        """Let the first sync go on without this kind, where waiting could last forever.

        A CRD-defined kind answering 404 is not established yet (or is being deleted): it has
        no objects. A policy kind answering 403 is one RBAC does not grant (its group is not in
        the ClusterRole): a third-party policy CRD must not keep every replica unready. Both
        keep retrying. A 403 on CRDs, Services, Namespaces or Gateway API kinds, which the
        shipped ClusterRole grants, is a broken install: it keeps the replica unready.
        """
        gk = self.resource.group_kind
        static = self.resource in (CRDS, SERVICES, NAMESPACES)
        if (error.status == 404 and not static) or (
            error.status == 403 and not static and gk not in GATEWAY_KINDS
        ):
            self.first_list.set()
            logger.error(
                "first sync goes on without %s (%s); it is retried with backoff",
                self.kind_label,
                error,
                extra=fields(kind=self.kind_label, status=error.status),
            )

    async def list(self) -> None:
        """All objects, page by page from one snapshot; then the store holds exactly them."""
        src = self.source

        def fetch(query: list[tuple[str, str]]) -> Awaitable[dict[str, Any]]:
            return kubeapi.request_json(
                src.api, "GET", self.resource.path, query=query, timeout=src.request_timeout
            )

        items, metadata = await list_all(fetch, self.prepare, page_size=src.page_size)
        src.store.replace_kind(self.resource.group_kind, items)
        self.resource_version = str(metadata.get("resourceVersion") or "") or None
        self.forbidden = False
        self.touch()
        self.first_list.set()
        src.changed(self)

    async def watch(self) -> int:
        """Watch from our resourceVersion until the server ends it; returns the events seen."""
        src = self.source
        seconds = int(src.watch_timeout * (1 + 0.2 * random.random()))  # spread reconnects
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(seconds)),
        ]
        if self.resource_version:
            query.append(("resourceVersion", self.resource_version))
        # No total: a watch is long. Silence longer than the server's own timeout means a
        # dead connection.
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=src.request_timeout,
            sock_connect=src.request_timeout,
            sock_read=seconds + src.request_timeout,
        )
        try:
            response = await kubeapi.open_request(
                src.api, "GET", self.resource.path, query=query, timeout=timeout
            )
        except kubeapi.ApiError as exc:
            if exc.status == 410:
                raise _Gone from exc
            raise
        events = 0
        try:
            self.watching = True
            self.touch()
            async for line in response.content:  # one JSON event per line
                if line.strip():
                    await src.turns.take()
                    self.apply(json_read.loads(line))
                    events += 1
        finally:
            self.watching = False
            self.touch()  # current until this moment; staleness counts from here
            response.close()
        return events

    def apply(self, event: Mapping[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object")
        if not isinstance(obj, dict):
            raise ValueError(f"watch event without an object: {str(event)[:200]}")
        if kind == "ERROR":  # the object is a Status
            error = kubeapi.ApiError.from_status(500, obj)
            if error.status == 410:
                raise _Gone(str(error))
            raise error
        version = meta.resource_version(obj)
        store = self.source.store
        revision = store.revision
        if kind in ("ADDED", "MODIFIED"):
            trimmed = self.prepare(obj)
            key = key_of(trimmed)
            # Controllers rewrite `status` all the time; once trimmed, most such updates are
            # no change at all, and must not wake the store's listeners (reconciler, cache).
            stored = store.get(key) if key is not None else None
            if key is not None and stored is not None and _same_but_version(stored, trimmed):
                # But the stored resourceVersion must move on: the reconciler's patch carries
                # it as a precondition, and an old one is refused (409) on every retry until
                # something we read changes — which may be never.
                store.move_version(key, meta.resource_version(trimmed))
            elif key is not None:
                store.upsert(trimmed)
        elif kind == "DELETED":
            key = key_of(self.prepare(obj))
            if key is not None:
                store.delete(key)
        elif kind != "BOOKMARK":  # a bookmark only moves our resourceVersion on
            logger.warning("unknown watch event type %r for %s", kind, self.kind_label)
        if isinstance(version, str) and version:
            self.resource_version = version
        self.touch()
        if store.revision != revision:
            self.source.changed(self)

    def prepare(self, raw: dict[str, Any]) -> dict[str, Any]:
        return prepared(
            raw,
            self.resource,
            keep_annotation=self.source.keep_annotation,
            parts=self.source.store.parts,
        )

    def touch(self) -> None:
        self.last_contact = time.monotonic()
        self.source.touched(self)


def prepared(
    raw: dict[str, Any],
    resource: kubeapi.Resource,
    *,
    keep_annotation: str,
    parts: SharedParts | None = None,
) -> dict[str, Any]:
    """An item of a list or a watch event, as the store keeps it (`trim`); `raw` itself gains
    the apiVersion and kind it lacked (callers drop it after). `parts`: the store's, for what
    is kept for long (`parts.SharedParts`)."""
    # Items of a core list carry no apiVersion/kind; watch events and custom resources do.
    raw.setdefault("apiVersion", resource.api_version)
    raw.setdefault("kind", resource.kind)
    return trim(raw, keep_annotation=keep_annotation, parts=parts)


async def list_all(
    fetch: Callable[[list[tuple[str, str]]], Awaitable[Mapping[str, Any]]],
    keep: Callable[[dict[str, Any]], T],
    *,
    page_size: int | None,
) -> tuple[list[T], Mapping[str, Any]]:
    """Every item of one list, page by page from one snapshot: `keep` of each item (applied as
    each page arrives, so that only what is kept is held), and the last page's `metadata`.
    The informers' lists and the one read of `explain` and `report` (`snapshot`) both page so.

    `fetch` sends one list request with the query given (`limit`, `continue`). A continue token
    that outlived etcd's compaction (410 Gone) cannot be resumed: the list starts again as one
    unpaginated request, as client-go's pager falls back to, and what was kept is dropped.
    """
    kept: list[T] = []
    token: str | None = None
    limit = page_size
    while True:
        query = [("limit", str(limit))] if limit else []
        if token:
            query.append(("continue", token))
        try:
            page = await fetch(query)
        except kubeapi.ApiError as exc:
            if exc.status != 410 or not token:
                raise
            kept, token, limit = [], None, None
            continue
        kept.extend(keep(raw) for raw in page.get("items") or () if isinstance(raw, dict))
        metadata = page.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        token = metadata.get("continue") or None
        if token is None:
            return kept, metadata


def _same_but_version(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Equal apart from metadata.resourceVersion (which every write, status too, changes)."""
    return old is not None and _without_version(old) == _without_version(new)


def _without_version(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return obj
    return {**obj, "metadata": {**metadata, "resourceVersion": None}}


# --- all informers ---------------------------------------------------------------------------


def wanted_resources(store: Store) -> dict[GroupKind, kubeapi.Resource]:
    """Beyond CRDs, Services and Namespaces: the Gateway API kinds and policy kinds (CRD label
    or config) whose CRD the store holds, at the version each is served."""
    policy_kinds = {profile.group_kind for profile in store.policy_kinds()}
    wanted: dict[GroupKind, kubeapi.Resource] = {}
    for crd in store.objects(kinds.CRD):
        resource = kubeapi.resource_of_crd(crd)
        if resource is None:
            continue
        gk = resource.group_kind
        if gk in GATEWAY_KINDS or gk in policy_kinds:
            wanted[gk] = resource
    return wanted


class ClusterSource:
    """Keeps a `Store` in step with the cluster: CRDs, Gateway API kinds, Services, Namespaces,
    ReferenceGrants and every policy kind.

    `start()` launches the informers; `synced` is set (and readiness `state-synced` turns ok)
    once every resource known at start has been listed in full. It stays set while watches
    reconnect: the store is then stale, not wrong, and `last_sync_age()` says by how much.
    """

    def __init__(
        self,
        api: client.ApiClient,
        store: Store,
        *,
        keep_annotation: str = "",
        metrics: Metrics | None = None,
        readiness: Readiness | None = None,
        page_size: int = 500,
        watch_timeout: float = 300.0,  # client-go's reflector: 5 min, plus jitter
        request_timeout: float = 30.0,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        healthy_after: float = 30.0,
        before_ready: Callable[[], object] | None = None,
        turns: Turns | None = None,
    ) -> None:
        self.api = api
        self.store = store
        self.keep_annotation = keep_annotation
        self.metrics = metrics
        self.readiness = readiness
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.request_timeout = request_timeout
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.healthy_after = healthy_after
        # Run once every kind is listed, before `synced` and readiness say so (`live` settles
        # the heap there, so its pause comes before the API server sends reviews, not during).
        self.before_ready = before_ready
        # Watch events are applied in the process's turns: a burst of them (a bulk create, a
        # reconnect's backlog) is buffered and read without suspending, and would otherwise be
        # applied in one go while admission requests wait (`process.turns`).
        self.turns = turns if turns is not None else Turns()
        self.synced = asyncio.Event()
        self._crds = _Informer(self, CRDS)
        self._informers: dict[GroupKind, _Informer] = {}  # everything but the CRD informer
        self._tasks: set[asyncio.Task[None]] = set()
        self._supervisor: asyncio.Task[None] | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Launch the informers on the running loop; returns at once (see `wait_synced`)."""
        if self._supervisor is None:
            self._supervisor = asyncio.create_task(self._supervise(), name="cluster source")

    async def wait_synced(self, timeout: float | None = None) -> bool:
        """True once synced; False if `timeout` seconds pass first."""
        try:
            async with asyncio.timeout(timeout):
                await self.synced.wait()
        except TimeoutError:
            return False
        return True

    async def stop(self) -> None:
        """Cancel every watch and wait for them to end; the store keeps what it has."""
        tasks = [t for t in (self._supervisor, self._crds.task) if t is not None]
        tasks += [inf.task for inf in self._informers.values() if inf.task is not None]
        tasks += list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.readiness is not None:
            self.readiness.set(ready.STATE_SYNCED, False, "stopped")

    async def __aenter__(self) -> ClusterSource:
        self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # --- reading -----------------------------------------------------------------------------

    def watched(self) -> dict[GroupKind, kubeapi.Resource]:
        """The resources with a running informer, CRDs included."""
        found = {gk: inf.resource for gk, inf in self._informers.items()}
        return {kinds.CRD: CRDS, **found}

    def forbidden(self) -> dict[GroupKind, kubeapi.Resource]:
        """The resources whose list or watch the API server refused (403) since their last
        successful list: what RBAC does not let this identity read."""
        return {gk: inf.resource for gk, inf in self._informers.items() if inf.forbidden}

    def resource_version(self, gk: GroupKind) -> str | None:
        """The resourceVersion the informer of `gk` will resume from (None: it will relist)."""
        informer = self._crds if gk == kinds.CRD else self._informers.get(gk)
        return informer.resource_version if informer else None

    def last_sync_age(self) -> float:
        """Seconds the store may lag behind the cluster: 0 while every resource has an open
        watch; else since the least recently current one last was (list, event, bookmark,
        watch start or end); inf if one never was.

        A quiet kind with an open watch is current, not stale: counting from its last event
        would turn a healthy replica unready under any `--max-state-age-seconds` below the
        watch timeout (5-6 min). A connection that died silently counts as open until its read
        timeout (`watch_timeout` + 20% + `request_timeout`) closes it.
        """
        now = time.monotonic()
        informers = (self._crds, *self._informers.values())
        contacts = [now if inf.watching else inf.last_contact for inf in informers]
        if any(c is None for c in contacts):
            return math.inf
        return now - min(c for c in contacts if c is not None)

    # --- what the informers report -----------------------------------------------------------

    def backoff(self, attempt: int) -> float:
        """Full jitter (AWS architecture blog): uniform in [0, min(cap, base * 2^attempt)]."""
        return random.uniform(0, min(self.backoff_cap, self.backoff_base * 2 ** min(attempt, 30)))

    def count_restart(self, informer: _Informer, why: str) -> None:
        if self.metrics is not None:
            self.metrics.watch_restarts.labels(kind=informer.kind_label).inc()
        logger.debug("watch of %s restarts (%s)", informer.kind_label, why)

    def touched(self, informer: _Informer) -> None:
        if self.metrics is not None:
            metrics = self.metrics
            metrics.child(metrics.watch_last_event, informer.kind_label).set(time.time())

    def changed(self, informer: _Informer) -> None:
        """After a list or an event: store-size metric; for CRDs, start/stop informers."""
        gk = informer.resource.group_kind
        if self.metrics is not None:
            metrics = self.metrics
            metrics.child(metrics.store_objects, informer.kind_label).set(self.store.count(gk))
        if gk == kinds.CRD:
            self._reconcile_informers()

    # --- internals ---------------------------------------------------------------------------

    async def _supervise(self) -> None:
        started = time.monotonic()
        self._set_pending(["CustomResourceDefinition"])
        self._crds.start()
        for resource in (SERVICES, NAMESPACES):
            self._start(resource)
        await self._crds.first_list.wait()  # its `changed` has started the CRD-defined kinds
        initial = [self._crds, *self._informers.values()]
        for informer in initial:
            if not informer.first_list.is_set():
                self._set_pending(i.kind_label for i in initial if not i.first_list.is_set())
                await informer.first_list.wait()
        if self.before_ready is not None:
            self.before_ready()
        self.synced.set()
        if self.readiness is not None:
            self.readiness.set(ready.STATE_SYNCED, True, "")
        total = sum(self.store.count(i.resource.group_kind) for i in initial)
        logger.info(
            "cluster state synced: %d objects of %d kinds in %.2fs",
            total,
            len(initial),
            time.monotonic() - started,
            extra=fields(objects=total, kinds=len(initial)),
        )

    def _set_pending(self, names: Iterable[str]) -> None:
        if self.readiness is not None:
            self.readiness.set(
                ready.STATE_SYNCED, False, "waiting for the first list of " + ", ".join(names)
            )

    def _reconcile_informers(self) -> None:
        wanted = wanted_resources(self.store)
        for gk, informer in list(self._informers.items()):
            if gk in (kinds.SERVICE, kinds.NAMESPACE):
                continue
            if wanted.get(gk) != informer.resource:  # gone, unlabelled, or another version
                self._stop(gk, forget=gk not in wanted)
        for resource in wanted.values():
            if resource.group_kind not in self._informers:
                self._start(resource)

    def _start(self, resource: kubeapi.Resource) -> None:
        informer = _Informer(self, resource)
        self._informers[resource.group_kind] = informer
        informer.start()
        logger.info("watching %s at %s", informer.kind_label, resource.api_version)

    def _stop(self, gk: GroupKind, *, forget: bool) -> None:
        informer = self._informers.pop(gk)
        if informer.task is not None:
            # Cancelled at its next await: nothing of it runs between here and the purge below.
            informer.task.cancel()
            self._tasks.add(informer.task)
            informer.task.add_done_callback(self._tasks.discard)
        informer.first_list.set()  # never block the initial sync on a kind that went away
        logger.info("stopped watching %s", informer.kind_label)
        if forget:
            self.store.replace_kind(gk, ())
            if self.metrics is not None:
                for gauge in (self.metrics.store_objects, self.metrics.watch_last_event):
                    with contextlib.suppress(KeyError):
                        gauge.remove(informer.kind_label)
