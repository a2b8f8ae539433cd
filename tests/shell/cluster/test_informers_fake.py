"""Informer cases a real API server cannot be made to produce on demand, against a tiny fake.

A real kube-apiserver answers `410 Gone` only once etcd has compacted past a watcher's
resourceVersion (every 5 minutes, at a time of its choosing), expires a list's continue token
the same way, sends bookmarks when it likes, never cuts one watch mid-stream on request, and
serves a new CRD's resource (404 before) within a fraction of a second of listing the CRD.
So here an aiohttp server on 127.0.0.1 speaks just enough of the list/watch JSON protocol to
force each case. What a real server can be made to do is tested in tests/e2e/test_informers.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client

from webhook.core.model import kinds
from webhook.core.model.refs import GroupKind, ObjectKey
from webhook.core.state.store import Store
from webhook.shell.cluster.informers import ClusterSource
from webhook.shell.process import readiness as ready
from webhook.shell.process.metrics import Metrics
from webhook.shell.process.readiness import Readiness
from webhook.shell.process.turns import Turns

NAMESPACES = "/api/v1/namespaces"
DROP = "drop"  # in a watch script: cut the TCP connection here
END = "end"  # in a watch script: end the response normally (as timeoutSeconds does)


@dataclass(frozen=True)
class Burst:
    """In a watch script: these events in one write, so the client finds them all buffered."""

    events: list[dict[str, Any]]


@dataclass(frozen=True)
class Pause:
    """In a watch script: nothing for this long (the client has read what came before)."""

    seconds: float


def namespace(name: str, version: str) -> dict[str, Any]:
    # As in a real NamespaceList: items carry no apiVersion/kind.
    return {"metadata": {"name": name, "resourceVersion": version, "managedFields": [{}]}}


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": {"apiVersion": "v1", "kind": "Namespace", **obj}}


def bookmark(version: str) -> dict[str, Any]:
    return event("BOOKMARK", {"metadata": {"resourceVersion": version}})


GONE = {
    "type": "ERROR",
    "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
               "reason": "Expired", "message": "too old resource version: 10 (15)"},
}  # fmt: skip


@dataclass
class FakeApiServer:
    """Lists and watches of Namespaces from scripts; CRDs and Services exist but are empty.

    `lists` are answered in turn (the last one repeats): each is a list of pages, a page being
    (items, resourceVersion) or an HTTP status. `watches` are scripts, one per watch request:
    events, then DROP or END; with no script left, a watch idles until the client leaves.
    """

    lists: list[list[tuple[list[dict[str, Any]], str] | int]] = field(default_factory=list)
    watches: list[list[Any] | int] = field(default_factory=list)
    crds: list[dict[str, Any]] = field(default_factory=list)
    missing: frozenset[str] = frozenset()  # collection paths that answer 404
    refused: set[str] = field(default_factory=set)  # collection paths that answer 403
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    _pages: list[tuple[list[dict[str, Any]], str] | int] = field(default_factory=list)

    def queries(self, path: str, *, watch: bool) -> list[dict[str, str]]:
        return [q for p, q in self.requests if p == path and (q.get("watch") == "true") == watch]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.requests.append((request.path, query))
        if request.path in self.missing:
            return _status(404)
        if request.path in self.refused:
            return _status(403)
        if request.path != NAMESPACES:
            if query.get("watch") == "true":
                return await self._idle(request)
            items = self.crds if request.path.endswith("/customresourcedefinitions") else []
            return web.json_response({"items": items, "metadata": {"resourceVersion": "1"}})
        if query.get("watch") == "true":
            script = self.watches.pop(0) if self.watches else None
            if isinstance(script, int):
                return _status(script)
            return await self._stream(request, script)
        return self._page(query)

    def _page(self, query: dict[str, str]) -> web.Response:
        if "continue" not in query:  # a new list: the next script
            self._pages = self.lists[0] if len(self.lists) == 1 else self.lists.pop(0)
        number = int(query.get("continue", "0"))
        page = self._pages[number]
        if isinstance(page, int):
            return _status(page)
        items, version = page
        metadata = {"resourceVersion": version}
        if number + 1 < len(self._pages) and query.get("limit"):
            metadata["continue"] = str(number + 1)
        return web.json_response({"kind": "NamespaceList", "items": items, "metadata": metadata})

    async def _stream(self, request: web.Request, script: list[Any] | None) -> web.StreamResponse:
        if script is None:
            return await self._idle(request)
        response = web.StreamResponse()
        await response.prepare(request)
        for step in script:
            if step == DROP:
                assert request.transport is not None
                request.transport.abort()
                return response
            if step == END:
                break
            if isinstance(step, Pause):
                await asyncio.sleep(step.seconds)
                continue
            if isinstance(step, Burst):
                await response.write(b"".join(json.dumps(e).encode() + b"\n" for e in step.events))
                continue
            await response.write(json.dumps(step).encode() + b"\n")
        await response.write_eof()
        return response

    async def _idle(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await asyncio.sleep(3600)
        return response


def _status(code: int) -> web.Response:
    body = {"kind": "Status", "status": "Failure", "code": code, "reason": "Fake"}
    return web.json_response(body, status=code)


@asynccontextmanager
async def serving(fake: FakeApiServer) -> AsyncIterator[client.ApiClient]:
    app = web.Application()
    app.router.add_get("/{tail:.*}", fake.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    api = client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{port}"))
    try:
        yield api
    finally:
        await api.close()
        await runner.cleanup()


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


def ns_key(name: str) -> ObjectKey:
    return ObjectKey("", "Namespace", "", name)


def restarts(metrics: Metrics) -> float:
    value = metrics.registry.get_sample_value(
        "policy_webhook_watch_restarts_total", {"kind": "Namespace"}
    )
    return value or 0.0


def run_with_source(
    fake: FakeApiServer,
    scenario: Callable[[ClusterSource, Store, Metrics], Awaitable[None]],
    *,
    turns: Turns | None = None,
) -> None:
    async def main() -> None:
        async with serving(fake) as api:
            store, metrics = Store(), Metrics()
            source = ClusterSource(
                api, store, metrics=metrics, readiness=Readiness(ready.STATE_SYNCED),
                backoff_base=0.01, backoff_cap=0.05, request_timeout=2.0, turns=turns,
            )  # fmt: skip
            async with source:
                assert await source.wait_synced(5)
                await scenario(source, store, metrics)

    asyncio.run(main())


def test_before_ready_runs_once_every_kind_is_listed_and_before_readiness_says_so() -> None:
    """`live` settles the heap there: its pause must come before the replica turns ready."""
    fake = FakeApiServer(lists=[[([namespace("a", "8")], "10")]], watches=[[bookmark("12")]])
    seen: list[tuple[bool, bool, bool]] = []

    async def main() -> None:
        async with serving(fake) as api:
            store, readiness = Store(), Readiness(ready.STATE_SYNCED)
            source = ClusterSource(
                api, store, readiness=readiness,
                before_ready=lambda: seen.append(
                    (store.get(ns_key("a")) is not None, source.synced.is_set(), readiness())
                ),
                backoff_base=0.01, backoff_cap=0.05, request_timeout=2.0,
            )  # fmt: skip
            async with source:
                assert await source.wait_synced(5)
                assert readiness()

    asyncio.run(main())
    assert seen == [(True, False, False)]  # once; listed; not yet synced, not yet ready


@pytest.mark.parametrize("how", ["error event", "http status"])
def test_410_gone_relists_and_replaces_what_changed_while_away(how: str) -> None:
    fake = FakeApiServer(
        lists=[
            [([namespace("a", "8"), namespace("b", "9")], "10")],
            [([namespace("b", "9"), namespace("c", "19")], "20")],  # `a` went while we were away
        ],
        watches=[[bookmark("12"), GONE] if how == "error event" else 410],
    )

    async def scenario(source: ClusterSource, store: Store, metrics: Metrics) -> None:
        await until(lambda: store.get(ns_key("c")) is not None)
        assert sorted(k.name for k in store.keys(kinds.NAMESPACE)) == ["b", "c"]
        await until(lambda: len(fake.queries(NAMESPACES, watch=True)) == 2)
        assert fake.queries(NAMESPACES, watch=True)[1]["resourceVersion"] == "20"
        assert source.resource_version(kinds.NAMESPACE) == "20"
        assert restarts(metrics) >= 1

    run_with_source(fake, scenario)


def test_a_dropped_watch_reconnects_from_the_last_bookmark_without_relisting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeApiServer(
        lists=[[([namespace("a", "8")], "10")]],
        watches=[
            # The pause: a client that has not yet applied what it read when the connection
            # breaks loses it (aiohttp raises before handing out buffered lines), and resumes
            # from the last event it applied, which is as right but not the case tested here.
            [event("ADDED", namespace("c", "11")), bookmark("15"), Pause(0.2), DROP],
            [event("DELETED", namespace("a", "16"))],
        ],
    )

    async def scenario(source: ClusterSource, store: Store, metrics: Metrics) -> None:
        await until(lambda: store.get(ns_key("a")) is None)
        assert [k.name for k in store.keys(kinds.NAMESPACE)] == ["c"]
        watches = fake.queries(NAMESPACES, watch=True)
        assert [w.get("resourceVersion") for w in watches[:2]] == ["10", "15"]
        assert all(w["allowWatchBookmarks"] == "true" for w in watches)
        assert len(fake.queries(NAMESPACES, watch=False)) == 1  # no relist after a mere drop
        assert restarts(metrics) >= 1
        assert "managedFields" not in store.get(ns_key("c"))["metadata"]  # type: ignore[index]

    run_with_source(fake, scenario)
    assert "list/watch of Namespace failed" in caplog.text  # a broken stream, not a clean end


def test_a_burst_of_buffered_watch_events_is_applied_in_turns_that_let_the_loop_serve() -> None:
    """Lines already buffered are read without suspending: without turns, a bulk create's
    events would be applied in one go while admission requests wait behind them."""
    burst = [event("ADDED", namespace(f"n{i}", str(11 + i))) for i in range(200)]
    fake = FakeApiServer(lists=[[([], "10")]], watches=[[Burst(burst)]])
    seen: list[int] = []  # namespaces in the store each time another task got the loop

    async def scenario(source: ClusterSource, store: Store, metrics: Metrics) -> None:
        async def admission() -> None:
            while True:
                seen.append(len(list(store.keys(kinds.NAMESPACE))))
                await asyncio.sleep(0)

        probe = asyncio.create_task(admission())
        await until(lambda: len(list(store.keys(kinds.NAMESPACE))) == 200)
        probe.cancel()
        assert any(0 < count < 200 for count in seen), "the loop served nothing mid-burst"
        assert len({count for count in seen if 0 < count < 200}) > 100  # one event per turn

    run_with_source(fake, scenario, turns=Turns(length=0.0))


def test_an_expired_continue_token_falls_back_to_one_unpaginated_list() -> None:
    fake = FakeApiServer(
        lists=[
            [([namespace("a", "8")], "10"), 410],  # page 2: "continue token too old"
            [([namespace("a", "8"), namespace("b", "9")], "30")],
        ]
    )

    async def scenario(source: ClusterSource, store: Store, metrics: Metrics) -> None:
        assert sorted(k.name for k in store.keys(kinds.NAMESPACE)) == ["a", "b"]
        lists = fake.queries(NAMESPACES, watch=False)
        assert [("limit" in q, q.get("continue")) for q in lists] == [
            (True, None),
            (True, "1"),
            (False, None),
        ]
        await until(lambda: bool(fake.queries(NAMESPACES, watch=True)))
        assert fake.queries(NAMESPACES, watch=True)[0]["resourceVersion"] == "30"

    run_with_source(fake, scenario)


def test_server_errors_are_retried_until_the_first_list_succeeds() -> None:
    fake = FakeApiServer(lists=[[500], [429], [([namespace("a", "8")], "10")]])

    async def scenario(source: ClusterSource, store: Store, metrics: Metrics) -> None:
        assert store.get(ns_key("a")) is not None
        assert len(fake.queries(NAMESPACES, watch=False)) == 3
        assert restarts(metrics) == 2

    run_with_source(fake, scenario)


def test_a_watch_that_ends_at_once_is_not_retried_in_a_hot_loop() -> None:
    fake = FakeApiServer(lists=[[([], "10")]], watches=[[END] for _ in range(1000)])

    async def scenario(source: ClusterSource, store: Store, metrics: Metrics) -> None:
        source.backoff_base = source.backoff_cap = 0.2
        await asyncio.sleep(1.0)
        # Full jitter averages half the cap: some tens of retries, not a thousand.
        assert len(fake.queries(NAMESPACES, watch=True)) < 40

    run_with_source(fake, scenario)


# A Direct policy kind of its own group, for what happens when its resource cannot be listed.
TINT_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "tints.example.com", "labels": {"gateway.networking.k8s.io/policy": "direct"}},
    "spec": {"group": "example.com", "scope": "Namespaced",
             "names": {"kind": "Tint", "plural": "tints"},
             "versions": [{"name": "v1", "served": True, "storage": True}]},
}  # fmt: skip
TINTS = "/apis/example.com/v1/tints"


def test_a_policy_kind_whose_crd_is_not_served_yet_does_not_block_the_first_sync() -> None:
    # A CRD not yet Established: listed by the API server, but its resource answers 404.
    fake = FakeApiServer(lists=[[([], "10")]], crds=[TINT_CRD], missing=frozenset({TINTS}))

    async def scenario(source: ClusterSource, store: Store, metrics: Metrics) -> None:
        tint = GroupKind("example.com", "Tint")
        assert tint in source.watched()
        assert store.count(tint) == 0
        await until(lambda: len(fake.queries(TINTS, watch=False)) >= 2)

    run_with_source(fake, scenario)


def test_a_kind_refused_403_is_named_until_a_list_of_it_succeeds() -> None:
    """What the audit's PA-K03 reads: RBAC refusing a policy kind, and granting it later."""
    fake = FakeApiServer(lists=[[([], "10")]], crds=[TINT_CRD], refused={TINTS})

    async def scenario(source: ClusterSource, store: Store, metrics: Metrics) -> None:
        tint = GroupKind("example.com", "Tint")
        assert set(source.forbidden()) == {tint}  # the first sync went on without it
        fake.refused.clear()  # a ClusterRole granted it
        await until(lambda: not source.forbidden())

    run_with_source(fake, scenario)


def test_backoff_is_full_jitter_capped() -> None:
    source = ClusterSource(None, Store(), backoff_base=0.5, backoff_cap=30.0)  # type: ignore[arg-type]
    for attempt in range(40):
        bound = min(30.0, 0.5 * 2**attempt)
        delays = [source.backoff(attempt) for _ in range(200)]
        assert all(0 <= d <= bound for d in delays)
        assert max(delays) > bound / 2  # spread over the whole range, not fixed


def test_what_the_informers_keep_shares_equal_parts_through_the_stores_table() -> None:
    """Listed or watched, objects are trimmed with the store's table (`Store.parts`): equal
    labels of two Namespaces are one mapping in the store."""
    labelled = {"labels": {"team": "edge", "tier": "web"}}
    fake = FakeApiServer(
        lists=[[([namespace("a", "8") | {"metadata": {"name": "a", **labelled}}], "10")]],
        watches=[
            [event("ADDED", {"metadata": {"name": "b", "resourceVersion": "11", **labelled}})]
        ],
    )

    async def scenario(source: ClusterSource, store: Store, metrics: Metrics) -> None:
        await until(lambda: store.get(ns_key("b")) is not None)
        a, b = (store.get(ns_key(name)) for name in "ab")
        assert a is not None and b is not None
        assert a["metadata"]["labels"] == {"team": "edge", "tier": "web"}
        assert a["metadata"]["labels"] is b["metadata"]["labels"]

    run_with_source(fake, scenario)
