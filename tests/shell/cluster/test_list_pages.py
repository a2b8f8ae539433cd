"""Lists read page by page (`informers.list_all`), by the informers and by `explain`/`report`'s
one read of the cluster (`snapshot`).

A continue token expires when etcd compacts the revision it was issued at (every five minutes
by default). A real API server does that on its own schedule, not on a test's, so the expired
token comes from a small aiohttp server here; the informers' side of it is in
`test_informers_fake.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.shell.cluster.test_kubeapi import kubeconfig
from webhook.core.model import kinds
from webhook.core.state.store import Store
from webhook.shell.cluster import informers, kubeapi, snapshot
from webhook.shell.cluster.kubeconfig import Target

Query = list[tuple[str, str]]
EXPIRED = kubeapi.ApiError(410, "Expired", "The provided continue parameter is too old")


def namespace(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "7"}}


def pages(*answers: dict[str, Any] | kubeapi.ApiError) -> tuple[Any, list[Query]]:
    """A `fetch` answering each request with the next answer, and the queries it was sent."""
    sent: list[Query] = []
    queue = list(answers)

    async def fetch(query: Query) -> dict[str, Any]:
        sent.append(list(query))
        answer = queue.pop(0)
        if isinstance(answer, kubeapi.ApiError):
            raise answer
        return answer

    return fetch, sent


def page(*names: str, token: str = "", version: str = "30") -> dict[str, Any]:
    return {
        "items": [namespace(n) for n in names],
        "metadata": {"continue": token, "resourceVersion": version},
    }


def names(items: list[dict[str, Any]]) -> list[str]:
    return [item["metadata"]["name"] for item in items]


def test_pages_are_read_until_no_continue_token_and_kept_as_they_arrive() -> None:
    fetch, sent = pages(page("a", "b", token="t1"), page("c", token="t2"), page("d"))
    items, metadata = asyncio.run(informers.list_all(fetch, dict, page_size=2))
    assert names(items) == ["a", "b", "c", "d"]
    assert metadata["resourceVersion"] == "30"
    assert sent == [[("limit", "2")], [("limit", "2"), ("continue", "t1")],
                    [("limit", "2"), ("continue", "t2")]]  # fmt: skip


def test_an_expired_continue_token_starts_again_as_one_unpaginated_list() -> None:
    fetch, sent = pages(page("a", token="t1"), EXPIRED, page("a", "b", version="40"))
    items, metadata = asyncio.run(informers.list_all(fetch, dict, page_size=1))
    assert names(items) == ["a", "b"]  # what the first page gave is not kept twice
    assert metadata["resourceVersion"] == "40"
    assert sent == [[("limit", "1")], [("limit", "1"), ("continue", "t1")], []]


@pytest.mark.parametrize(
    "answers",
    [
        (EXPIRED,),  # a 410 for the first page: no token to give up, the caller's error
        (page("a", token="t1"), kubeapi.ApiError(500, "InternalError", "etcd")),
    ],
    ids=["410-without-a-token", "500-after-a-token"],
)
def test_any_other_failure_is_the_callers(answers: tuple[Any, ...]) -> None:
    fetch, _ = pages(*answers)
    with pytest.raises(kubeapi.ApiError) as raised:
        asyncio.run(informers.list_all(fetch, dict, page_size=1))
    assert raised.value is answers[-1]  # the very error, neither retried nor replaced


# --- the one read of `explain` and `report` --------------------------------------------------


@asynccontextmanager
async def api_server(expire: bool) -> AsyncIterator[tuple[str, list[tuple[str, Query]]]]:
    """Every list empty but the Namespaces: two pages, the token of the first expired
    (`expire`), a full list when asked for one."""
    requests: list[tuple[str, Query]] = []

    async def lists(request: web.Request) -> web.Response:
        query = list(request.query.items())
        requests.append((request.path, query))
        if request.path != "/api/v1/namespaces":
            return web.json_response({"items": [], "metadata": {"resourceVersion": "30"}})
        if "continue" in request.query and expire:
            status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
            return web.json_response(status, status=410)
        if "continue" in request.query or "limit" not in request.query:
            return web.json_response(page("a", "b"))
        return web.json_response(page("a", token="t1"))

    app = web.Application()
    app.router.add_get("/{tail:.*}", lists)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", requests
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("expire", [False, True], ids=["token-honoured", "token-expired"])
def test_explains_read_of_the_cluster_survives_an_expired_continue_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, expire: bool
) -> None:
    monkeypatch.setattr(snapshot, "PAGE_SIZE", 1)

    async def read() -> tuple[Store, list[tuple[str, Query]]]:
        async with api_server(expire) as (server, requests):
            target = Target((kubeconfig(tmp_path / "config", server),), "x", server, None, False)
            store = Store()
            await snapshot.read_cluster(store, target, timeout=5.0)
            return store, requests

    store, requests = asyncio.run(read())
    assert sorted(key.name for key in store.keys(kinds.NAMESPACE)) == ["a", "b"]
    asked = [dict(query) for path, query in requests if path == "/api/v1/namespaces"]
    assert [(q.get("limit"), q.get("continue")) for q in asked] == (
        [("1", None), ("1", "t1"), (None, None)] if expire else [("1", None), ("1", "t1")]
    )
