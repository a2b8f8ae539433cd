"""Reconciler cases a real API server will not produce on demand, against a tiny fake.

A 409 needs a write that lands between our read and our patch, a 404 an object deleted in that
window, a 500 a sick server — and a patch that fails for minutes on end (to prove the reconciler
never gives up on an object) a server that stays sick while the test watches what happens. Here
an aiohttp server on 127.0.0.1 answers PATCH requests from a script, or with one status for as
long as told, and records them; the store is filled by hand (no informers). What a real server
does with our patches is tested in tests/e2e/test_reconciler.py.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client

from webhook.core.annotation import hubs, summary
from webhook.core.annotation.cache import SummaryCache
from webhook.core.engine import hierarchy
from webhook.core.model.refs import GATEWAY_GROUP, GroupKind, ObjectKey
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store
from webhook.core.state.trim import trim
from webhook.shell.cluster.kubeapi import Resource
from webhook.shell.cluster.reconciler import Reconciler, merge_patch_of_annotation, object_path
from webhook.shell.cluster.workqueue import ItemBackoff, TokenBucket, WorkQueue
from webhook.shell.process.metrics import Metrics
from webhook.shell.process.turns import Turns

SETTINGS = Settings()
KEY = SETTINGS.annotation_key
GROUP = "policies.example.com"
RESOURCES = {
    GroupKind(GATEWAY_GROUP, "Gateway"): Resource(GATEWAY_GROUP, "v1", "gateways", "Gateway"),
    GroupKind(GATEWAY_GROUP, "HTTPRoute"): Resource(GATEWAY_GROUP, "v1", "httproutes", "HTTPRoute"),
    GroupKind("", "Service"): Resource("", "v1", "services", "Service"),
}
GW = ObjectKey(GATEWAY_GROUP, "Gateway", "infra", "gw")
ROUTE = ObjectKey(GATEWAY_GROUP, "HTTPRoute", "apps", "r")
SVC = ObjectKey("", "Service", "apps", "foo")

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"colorpolicies.{GROUP}", "labels": {f"{GATEWAY_GROUP}/policy": "inherited"}},
    "spec": {"group": GROUP, "scope": "Namespaced", "names": {"kind": "ColorPolicy", "plural": "colorpolicies"},
             "versions": [{"name": "v1", "served": True, "storage": True}]},
}  # fmt: skip


LISTENER = {
    "name": "http",
    "protocol": "HTTP",
    "port": 80,
    "allowedRoutes": {"namespaces": {"from": "All"}},
}


def gateway(version: str = "1", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "gw", "namespace": "infra", "resourceVersion": version}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": f"{GATEWAY_GROUP}/v1",
        "kind": "Gateway",
        "metadata": metadata,
        "spec": {"gatewayClassName": "acme", "listeners": [LISTENER]},
    }  # fmt: skip


def route(version: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": f"{GATEWAY_GROUP}/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "r", "namespace": "apps", "resourceVersion": version},
        "spec": {"parentRefs": [{"name": "gw", "namespace": "infra"}],
                 "rules": [{"backendRefs": [{"name": "foo", "port": 80}]}]},
    }  # fmt: skip


def color(value: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ColorPolicy",
        "metadata": {"name": "c", "namespace": "infra", "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"targetRefs": [{"group": GATEWAY_GROUP, "kind": "Gateway", "name": "gw"}],
                 "default": {"color": value}},
    }  # fmt: skip


@dataclass
class FakeApiServer:
    """Answers each PATCH with `always` while it is set, else with the next scripted status
    (200 once the script is used up)."""

    script: list[int] = field(default_factory=list)
    always: int | None = None
    patches: list[tuple[str, dict[str, str], str, dict[str, Any]]] = field(default_factory=list)
    # Called with each PATCH's path and body before it is answered (a watch event that
    # overtakes the response, a slow server).
    before_answer: Callable[[str, dict[str, Any]], Awaitable[None]] | None = None

    async def handle(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        self.patches.append((request.path, dict(request.query), request.content_type, body))
        if self.before_answer is not None:
            await self.before_answer(request.path, body)
        status = self.always or (self.script.pop(0) if self.script else 200)
        if status >= 300:
            return web.json_response(
                {"kind": "Status", "status": "Failure", "code": status, "reason": "Fake"},
                status=status,
            )
        return web.json_response({"metadata": {"resourceVersion": "999"}})

    def paths(self) -> list[str]:
        return [path for path, *_ in self.patches]


@asynccontextmanager
async def serving(fake: FakeApiServer) -> AsyncIterator[client.ApiClient]:
    app = web.Application()
    app.router.add_patch("/{tail:.*}", fake.handle)
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


def base_store() -> Store:
    store = Store()
    for obj in (CRD, gateway(), route()):
        store.upsert(obj)
    store.upsert({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "foo", "namespace": "apps", "resourceVersion": "1"},
                  "spec": {"ports": [{"name": "http", "port": 80}]}})  # fmt: skip
    return store


def colored_store() -> Store:
    """The base objects and a ColorPolicy on the Gateway: three objects to annotate."""
    store = base_store()
    store.upsert(color("red"))
    return store


Scenario = Callable[[Reconciler, Store, FakeApiServer], Awaitable[None]]


def run(
    fake: FakeApiServer, scenario: Scenario, store: Store | None = None, **options: Any
) -> None:
    # Retries in milliseconds; no window after a patch unless a test is about it.
    options = {"backoff_base": 0.01, "backoff_cap": 0.05, "repatch_after": 0.0, **options}

    async def main() -> None:
        async with serving(fake) as api:
            state = store or base_store()
            reconciler = Reconciler(
                api, state, SummaryCache(state, SETTINGS), SETTINGS, Metrics(),
                resources=RESOURCES.get, **options,
            )  # fmt: skip
            try:
                await scenario(reconciler, state, fake)
            finally:
                await reconciler.stop()

    asyncio.run(main())


def sample(reconciler: Reconciler, name: str, kind: str) -> float:
    value = reconciler.metrics.registry.get_sample_value(
        f"policy_webhook_reconcile_{name}_total", {"kind": kind}
    )
    return value or 0.0


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


# --- the patch ----------------------------------------------------------------------------------


def test_the_patch_sets_only_our_annotation_with_a_field_manager_and_a_precondition() -> None:
    fake = FakeApiServer()
    store = colored_store()

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        reconciler.set_leading(True)
        await until(lambda: len(fake.patches) == 3)
        assert await reconciler.wait_idle(5)
        by_path = {path: (query, ctype, body) for path, query, ctype, body in fake.patches}
        query, ctype, body = by_path[
            "/apis/gateway.networking.k8s.io/v1/namespaces/infra/gateways/gw"
        ]
        assert query == {"fieldManager": "policy-webhook"}
        assert ctype == "application/merge-patch+json"
        assert list(body) == ["metadata"] and set(body["metadata"]) == {
            "annotations",
            "resourceVersion",
        }
        assert body["metadata"]["resourceVersion"] == "1"
        (value,) = body["metadata"]["annotations"].values()
        assert body["metadata"]["annotations"] == {KEY: value}
        assert json.loads(value)["policies"]["ColorPolicy.policies.example.com"]
        assert set(by_path) >= {"/api/v1/namespaces/apps/services/foo"}

    run(fake, scenario, store)


def test_passed_is_set_once_the_first_pass_has_computed_every_annotation() -> None:
    """`live` settles the heap on it (webhook/shell/process/heap.py): it must not come early."""
    fake = FakeApiServer()
    store = colored_store()

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        assert not reconciler.passed.is_set()
        reconciler.set_leading(True)
        await asyncio.wait_for(reconciler.passed.wait(), 5)
        assert reconciler.queue.idle
        assert len(fake.patches) == 3  # the Gateway, the route and the Service: all done

    run(fake, scenario, store)


def test_removal_is_a_null_for_our_key_alone() -> None:
    assert merge_patch_of_annotation(KEY, None, "7") == {
        "metadata": {"annotations": {KEY: None}, "resourceVersion": "7"}
    }
    assert merge_patch_of_annotation(KEY, "v", None) == {"metadata": {"annotations": {KEY: "v"}}}


def test_object_paths_for_core_namespaced_and_cluster_scoped_kinds() -> None:
    classes = Resource(GATEWAY_GROUP, "v1", "gatewayclasses", "GatewayClass")
    assert object_path(RESOURCES[SVC.group_kind], SVC) == "/api/v1/namespaces/apps/services/foo"
    assert (
        object_path(classes, ObjectKey(GATEWAY_GROUP, "GatewayClass", "", "acme"))
        == "/apis/gateway.networking.k8s.io/v1/gatewayclasses/acme"
    )


# --- when nothing is sent --------------------------------------------------------------------------


def test_an_annotation_already_right_is_skipped_and_no_policy_means_no_patch() -> None:
    fake = FakeApiServer()

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        reconciler.set_leading(True)
        await until(lambda: reconciler.skips == 3)
        assert await reconciler.wait_idle(5)
        assert fake.patches == []
        assert sample(reconciler, "skips", "Gateway.gateway.networking.k8s.io") == 1

    run(fake, scenario)


def test_nothing_happens_while_not_leading_and_leading_resyncs_everything() -> None:
    fake = FakeApiServer()
    store = base_store()
    store.upsert(gateway(annotations={KEY: "stale"}))

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        store.upsert(color("red"))
        await asyncio.sleep(0.2)
        assert fake.patches == []
        reconciler.set_leading(True)
        await until(lambda: len(fake.patches) == 3)
        reconciler.set_leading(False)
        await asyncio.sleep(0.05)
        store.upsert(color("blue"))
        await asyncio.sleep(0.2)
        assert len(fake.patches) == 3, "a replica that stopped leading sends nothing"

    run(fake, scenario, store)


def test_no_patch_before_the_first_full_sync() -> None:
    """A half-listed cluster (routes seen, policies not yet) would strip right annotations."""
    fake = FakeApiServer()
    store = colored_store()

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        reconciler.ready = synced = asyncio.Event()
        reconciler.set_leading(True)
        await asyncio.sleep(0.2)
        assert fake.patches == []
        synced.set()
        await until(lambda: len(fake.patches) == 3)

    run(fake, scenario, store)


# --- changes, de-duplication, rate ---------------------------------------------------------------


def test_a_policy_change_patches_what_it_affects_once_and_our_echo_is_not_requeued() -> None:
    fake = FakeApiServer()

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        reconciler.set_leading(True)
        await until(lambda: reconciler.skips == 3)
        store.upsert(color("red"))
        await until(lambda: len(fake.patches) == 3)
        assert await reconciler.wait_idle(5)
        assert len(set(fake.paths())) == 3, "each affected object once"
        # The watch events of our own patches arrive: nothing new to do.
        for key, obj in ((GW, gateway("2")), (ROUTE, route("2"))):
            value = reconciler.cache.get(key)
            store.upsert({**obj, "metadata": {**obj["metadata"], "annotations": {KEY: value}}})
        skips = reconciler.skips
        await asyncio.sleep(0.1)
        assert reconciler.skips == skips and len(fake.patches) == 3

    run(fake, scenario)


def test_a_key_queued_twice_is_processed_once() -> None:
    async def main() -> None:
        queue = WorkQueue()
        queue.add(GW)
        queue.add(GW)
        queue.add(ROUTE)
        assert len(queue) == 2
        first = await queue.get()
        queue.add(first)  # changed again while a worker holds it: runs again after
        assert await queue.get() != first
        queue.done(first)
        assert await queue.get() == first

    asyncio.run(main())


def test_the_token_bucket_allows_a_burst_then_the_rate() -> None:
    async def main() -> float:
        bucket = TokenBucket(50.0, 2)
        started = time.monotonic()
        for _ in range(7):  # 2 at once, then 5 at 50/s
            await bucket.acquire()
        return time.monotonic() - started

    took = asyncio.run(main())
    assert 0.09 <= took < 0.5


# --- failures ------------------------------------------------------------------------------------


def test_a_conflict_is_retried_with_the_resource_version_the_watch_brings() -> None:
    fake = FakeApiServer(script=[409])
    store = colored_store()

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        for key in (ROUTE, SVC):  # right already: only the Gateway needs a patch
            obj = copy.deepcopy(dict(store.get(key) or {}))
            obj["metadata"]["annotations"] = {KEY: reconciler.cache.get(key)}
            store.upsert(obj)
        reconciler.set_leading(True)
        await until(lambda: len(fake.patches) == 1)
        store.upsert(gateway("5"))  # what made us conflict, as the watch reports it
        await until(lambda: len(fake.patches) == 2)
        assert await reconciler.wait_idle(5)
        versions = [body["metadata"]["resourceVersion"] for *_, body in fake.patches]
        assert versions == ["1", "5"]
        assert reconciler.errors == 0 and reconciler.patches == 1

    # The retry comes after the backoff (0.1-0.2 s here), well after the watch event, as a
    # version-only change wakes nobody: a retry firing first would conflict again.
    run(fake, scenario, store, backoff_base=0.2, backoff_cap=0.2)


def test_a_404_drops_the_key_without_an_error() -> None:
    fake = FakeApiServer(script=[404, 404, 404])
    store = colored_store()

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        reconciler.set_leading(True)
        await until(lambda: len(fake.patches) == 3)
        assert await reconciler.wait_idle(5)
        await asyncio.sleep(0.1)
        assert len(fake.patches) == 3 and reconciler.errors == 0

    run(fake, scenario, store)


def gateway_only() -> Store:
    store = Store()
    for obj in (CRD, gateway(), color("red")):
        store.upsert(obj)
    return store


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "webhook.shell.cluster.reconciler" and r.levelno == level
    ]


@pytest.mark.parametrize("status", [500, 503, 409])
def test_a_patch_that_keeps_failing_is_retried_with_backoff_until_it_succeeds(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Never given up on (the old budget was 8 tries), warned about once, counted."""
    caplog.set_level(logging.DEBUG, logger="webhook.shell.cluster.reconciler")
    fake = FakeApiServer(always=status)

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        reconciler.set_leading(True)
        # 20 tries within `until`'s 5 s only because the backoff is capped (0.01 s · 2ⁿ up to
        # 0.05 s here; the 20th try of an uncapped one would wait 0.01 · 2¹⁹ s ≈ 1.5 h).
        await until(lambda: len(fake.patches) >= 20)
        assert reconciler.failing == 1 and reconciler.retries >= 19
        errors = 0 if status == 409 else reconciler.retries  # a 409 is not an error
        assert reconciler.errors == errors
        assert sample(reconciler, "errors", "Gateway.gateway.networking.k8s.io") == errors
        registry = reconciler.metrics.registry
        cause = "conflict" if status == 409 else "error"
        retries = registry.get_sample_value(
            "policy_webhook_reconcile_retries_total",
            {"kind": "Gateway.gateway.networking.k8s.io", "cause": cause},
        )
        assert retries == reconciler.retries
        assert registry.get_sample_value("policy_webhook_reconcile_failing_objects") == 1
        assert records(caplog, logging.WARNING) == [
            "annotation patch failed 4 times in a row; still retrying, every 0.05s at most"
        ], "one warning per run of failures, not one per retry"
        said = "conflict" if status == 409 else "annotation patch failed"
        assert records(caplog, logging.DEBUG)[0].startswith(f"{said}; retrying in ")
        fake.always = None  # the server recovers
        await until(lambda: reconciler.patches == 1)
        assert await reconciler.wait_idle(5)
        assert reconciler.failing == 0
        assert registry.get_sample_value("policy_webhook_reconcile_failing_objects") == 0
        assert (
            records(caplog, logging.INFO)[-1] == "annotation of a failing object settled: patched"
        )

    run(fake, scenario, gateway_only(), warn_after=4)


def right_annotation_set_by_someone_else(reconciler: Reconciler, store: Store) -> None:
    store.upsert(gateway("2", {KEY: reconciler.cache.get(GW) or ""}))


def policy_gone_and_no_annotation_to_remove(reconciler: Reconciler, store: Store) -> None:
    store.delete(ObjectKey(GROUP, "ColorPolicy", "infra", "c"))


def object_deleted(reconciler: Reconciler, store: Store) -> None:
    store.delete(GW)


@pytest.mark.parametrize(
    "change",
    [right_annotation_set_by_someone_else, policy_gone_and_no_annotation_to_remove, object_deleted],
)
def test_a_failing_object_with_nothing_left_to_patch_is_retried_no_more(
    change: Callable[[Reconciler, Store], None],
) -> None:
    fake = FakeApiServer(always=500)

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        reconciler.set_leading(True)
        await until(lambda: reconciler.errors >= 3)
        change(reconciler, store)
        assert await reconciler.wait_idle(5), "no retry left scheduled"
        tried = len(fake.patches)
        await asyncio.sleep(0.3)  # 6 times the backoff cap
        assert len(fake.patches) == tried
        assert reconciler.failing == 0

    run(fake, scenario, gateway_only())


def test_the_backoff_doubles_per_failure_up_to_its_cap_and_starts_afresh_when_forgotten() -> None:
    backoff = ItemBackoff(0.2, 30.0, jitter=0.0)
    assert [backoff.when(GW) for _ in range(10)] == [0.2 * 2**n for n in range(8)] + [30.0] * 2
    assert backoff.failures(GW) == 10 and len(backoff) == 1
    assert backoff.when(ROUTE) == 0.2, "each key has its own count"
    assert backoff.forget(GW) == 10
    assert backoff.when(GW) == 0.2 and len(backoff) == 2
    jittered = ItemBackoff(1.0, 1.0, jitter=0.5)
    assert all(0.5 <= jittered.when(GW) <= 1.0 for _ in range(100))


def test_a_retry_scheduled_twice_keeps_the_earliest_and_can_be_cancelled() -> None:
    async def main() -> None:
        queue = WorkQueue()
        queue.add_after(GW, 10.0)
        queue.add_after(GW, 0.01)  # earlier: replaces the first
        queue.add_after(GW, 5.0)  # later: ignored
        async with asyncio.timeout(1):
            assert await queue.get() == GW
        queue.done(GW)
        queue.add_after(ROUTE, 0.01)
        queue.cancel_later(ROUTE)
        assert queue.idle
        await asyncio.sleep(0.05)
        assert len(queue) == 0

    asyncio.run(main())


@pytest.mark.parametrize("as_kept", [False, True], ids=["whole", "trimmed"])
@pytest.mark.parametrize("value", [None, "a stale value"])
def test_someone_editing_our_annotation_gets_it_put_back(value: str | None, as_kept: bool) -> None:
    """`trimmed`: the objects as the informers keep them, our annotation a fingerprint."""
    fake = FakeApiServer()
    store = colored_store()

    def kept(obj: dict[str, Any]) -> dict[str, Any]:
        return trim(obj, keep_annotation=KEY) if as_kept else obj

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        right = reconciler.cache.get(GW)
        store.upsert(kept(gateway("2", {KEY: right or ""})))
        reconciler.set_leading(True)
        await until(lambda: len(fake.patches) == 2)  # route and Service
        assert await reconciler.wait_idle(5)
        store.upsert(kept(gateway("3", {} if value is None else {KEY: value})))
        await until(lambda: len(fake.patches) == 3)
        assert fake.paths()[-1].endswith("/gateways/gw")
        assert fake.patches[-1][3]["metadata"]["annotations"] == {KEY: right}

    run(fake, scenario, store)


def test_leadership_lost_and_won_again_at_once_keeps_working() -> None:
    """The ending term's clean-up (queue cleared, listener dropped) must not hit the new one."""
    fake = FakeApiServer()

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        reconciler.set_leading(True)
        await until(lambda: reconciler.skips == 3)
        reconciler.set_leading(False)
        reconciler.set_leading(True)
        await until(lambda: reconciler.skips == 6)  # the new term resynced
        store.upsert(color("red"))
        await until(lambda: len(fake.patches) == 3)

    run(fake, scenario)


# --- the echo that overtakes the answer ------------------------------------------------------------


def test_the_echo_of_a_patch_arriving_before_its_answer_is_not_queued_again() -> None:
    """`_sent` is written before the request: the watch may bring our patch back before the
    API server's answer does, and that event must be known as ours (no second pass)."""
    fake = FakeApiServer()
    store = colored_store()
    objects = {"/gateways/gw": (GW, gateway), "/httproutes/r": (ROUTE, route)}

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        async def echo_first(path: str, body: dict[str, Any]) -> None:
            for suffix, (key, make) in objects.items():
                if path.endswith(suffix):
                    obj = make("2")
                    obj["metadata"]["annotations"] = body["metadata"]["annotations"]
                    store.upsert(obj)  # the watch event, while the PATCH is unanswered
                    assert key not in reconciler.queue._dirty, "our own echo, queued again"

        fake.before_answer = echo_first
        reconciler.set_leading(True)
        await until(lambda: len(fake.patches) == 3)
        assert await reconciler.wait_idle(5)
        assert reconciler.patches == 3 and reconciler.skips == 0

    run(fake, scenario, store)


def test_a_patch_that_failed_is_not_taken_for_sent() -> None:
    """Written before the request, `_sent` is taken back when the patch does not go through:
    otherwise the retry would find the value 'already sent' and skip it."""
    fake = FakeApiServer(script=[500])

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        reconciler.set_leading(True)
        await until(lambda: reconciler.patches == 1)
        assert await reconciler.wait_idle(5)
        assert [body["metadata"]["resourceVersion"] for *_, body in fake.patches] == ["1", "1"]
        assert reconciler.errors == 1

    run(fake, scenario, gateway_only())


# --- hot keys ------------------------------------------------------------------------------------


def counting_computations(reconciler: Reconciler) -> dict[ObjectKey, int]:
    computed: dict[ObjectKey, int] = {}
    compute = reconciler.cache._computed
    refresh = reconciler.cache._refreshed

    def counted_compute(key: ObjectKey) -> Any:
        computed[key] = computed.get(key, 0) + 1
        return compute(key)

    def counted_refresh(key: ObjectKey, entry: Any) -> Any:
        computed[key] = computed.get(key, 0) + 1
        return refresh(key, entry)

    reconciler.cache._computed = counted_compute  # type: ignore[method-assign]
    reconciler.cache._refreshed = counted_refresh  # type: ignore[method-assign]
    return computed


async def edits_in_a_row(store: Store, count: int, every: float) -> None:
    for n in range(count):
        store.upsert(color(f"shade-{n}"))
        await asyncio.sleep(every)  # time for the workers to pick each one up


@pytest.mark.python_only
def test_a_costly_key_changed_again_and_again_is_computed_once_per_window_and_ends_right() -> None:
    """Every computation counts as costly here (`hot_after=0`): six policy edits within the
    window (each reaching the Gateway, the route and the Service) make one computation and one
    patch per object at the window's end, with the last edit's value."""
    fake = FakeApiServer()
    store = colored_store()

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        reconciler.set_leading(True)
        await until(lambda: len(fake.patches) == 3)  # the first pass: each object computed once
        computed = counting_computations(reconciler)
        started = time.monotonic()
        await edits_in_a_row(store, 6, every=0.01)  # 0.06 s of a 0.5 s window
        assert computed == {}, "held: nothing computed within the window"
        assert await reconciler.wait_idle(5)
        assert time.monotonic() - started >= 0.3
        assert computed == {GW: 1, ROUTE: 1, SVC: 1}
        assert len(fake.patches) == 6
        for *_, body in fake.patches[3:]:
            (value,) = body["metadata"]["annotations"].values()
            assert "shade-5" in value and "shade-4" not in value
        assert reconciler.holds >= 6

    run(fake, scenario, store, hot_after=0.0, hold_min=0.5, hold_factor=0.0)


@pytest.mark.python_only
def test_cheap_keys_are_not_held() -> None:
    """The control for the test above: the same edits, nothing costly, one pass per edit —
    each edit's three patches awaited before the next edit (no timing to race with)."""
    fake = FakeApiServer()
    store = colored_store()

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        reconciler.set_leading(True)
        await until(lambda: len(fake.patches) == 3)
        computed = counting_computations(reconciler)
        for n in range(6):
            store.upsert(color(f"shade-{n}"))
            await until(lambda done=3 * (n + 2): len(fake.patches) >= done)  # type: ignore[misc]
        assert await reconciler.wait_idle(5)
        assert computed[SVC] >= 4 and len(fake.patches) >= 3 + 12
        assert computed == {GW: 6, ROUTE: 6, SVC: 6} and len(fake.patches) == 3 + 18
        assert reconciler.holds == 0

    run(fake, scenario, store, hot_after=10.0)


def test_an_object_just_patched_gets_the_changes_of_its_window_in_one_patch() -> None:
    """Nothing is costly here: it is the patch that holds each key. Six edits right after the
    first pass make one patch per object, with the last edit's value, once the window is over
    — a hub Service behind a bulk create is patched once a second, not once per route. The
    first patches are answered late, so the edits come while they are in flight (as on a busy
    machine): those join the window too."""
    fake = FakeApiServer()
    store = colored_store()

    async def late_first_answers(path: str, body: dict[str, Any]) -> None:
        if len(fake.patches) <= 3:
            await asyncio.sleep(0.2)

    fake.before_answer = late_first_answers

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        reconciler.set_leading(True)
        await until(lambda: len(fake.patches) == 3)
        patched = time.monotonic()
        await edits_in_a_row(store, 6, every=0.01)
        await until(lambda: reconciler.patches >= 3)  # all three answered
        await asyncio.sleep(0.1)
        assert len(fake.patches) == 3, "held: no second patch within the window"
        assert await reconciler.wait_idle(10)
        assert time.monotonic() - patched >= 1.0
        assert sorted(fake.paths()[3:]) == sorted(fake.paths()[:3])
        for *_, body in fake.patches[3:]:
            (value,) = body["metadata"]["annotations"].values()
            assert "shade-5" in value and "shade-4" not in value
        assert reconciler.holds == 0, "no computation was costly"

    # A window of 2 s against edits that take some 60 ms, with room for a busy machine.
    run(fake, scenario, store, hot_after=10.0, repatch_after=2.0)


def test_a_held_key_that_is_deleted_meanwhile_is_not_patched() -> None:
    fake = FakeApiServer()
    store = colored_store()

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        reconciler.set_leading(True)
        await until(lambda: len(fake.patches) == 3)
        store.upsert(color("blue"))
        store.delete(SVC)
        assert await reconciler.wait_idle(5)
        assert not any(path.endswith("/services/foo") for path in fake.paths()[3:])

    run(fake, scenario, store, hot_after=0.0, hold_min=0.2, hold_factor=0.0)


# --- the loop is shared with admission ------------------------------------------------------------


@pytest.mark.python_only
def test_computations_never_run_back_to_back_without_a_pass_of_the_loop() -> None:
    """Four workers, each with a costly value to compute: between two computations the loop
    runs other tasks (admission), so none of them waits behind more than one computation."""
    fake = FakeApiServer()
    store = colored_store()
    cost = 0.05

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        compute = reconciler.cache._computed

        def costly(key: ObjectKey) -> Any:
            passes_at.append(len(gaps))  # how often the other task had run by then
            time.sleep(cost)  # a hub's summary, synchronous as the core is
            return compute(key)

        reconciler.cache._computed = costly  # type: ignore[method-assign]
        gaps: list[float] = []
        passes_at: list[int] = []

        async def admission_like() -> None:
            last = time.perf_counter()
            while True:
                await asyncio.sleep(0)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        probe = asyncio.create_task(admission_like())
        reconciler.set_leading(True)
        await until(lambda: len(fake.patches) == 3)
        probe.cancel()
        # Counted, not timed: the other task ran between every two computations.
        assert len(passes_at) == 3 and passes_at == sorted(set(passes_at)), passes_at
        assert max(gaps) < 1.8 * cost, f"the loop was held {max(gaps):.3f} s at once"

    run(fake, scenario, store, workers=4)


# --- the adaptive rate ---------------------------------------------------------------------------


def test_a_429_lowers_the_rate_and_the_patch_is_retried() -> None:
    fake = FakeApiServer(script=[429])

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        reconciler.set_leading(True)
        await until(lambda: reconciler.patches == 1)
        assert reconciler.pacing.rate == reconciler.limiter.rate
        assert 50.0 <= reconciler.limiter.rate < 100.0, "halved, then a little back"
        gauge = reconciler.metrics.registry.get_sample_value("policy_webhook_reconcile_rate")
        assert gauge == reconciler.limiter.rate

    run(fake, scenario, gateway_only(), qps=100.0)


def test_many_patches_are_in_flight_at_once_with_many_workers() -> None:
    fake = FakeApiServer()
    store = colored_store()
    in_flight = [0, 0]  # now, most

    async def slow(path: str, body: dict[str, Any]) -> None:
        in_flight[0] += 1
        in_flight[1] = max(in_flight)
        await asyncio.sleep(0.2)
        in_flight[0] -= 1

    fake.before_answer = slow

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        reconciler.set_leading(True)
        await until(lambda: len(fake.patches) == 3)
        assert await reconciler.wait_idle(5)
        assert in_flight[1] == 3, "the three objects' patches went together"

    run(fake, scenario, store, workers=8)


def test_with_no_turn_at_all_every_computation_waits_for_the_loop_and_still_ends() -> None:
    fake = FakeApiServer()
    store = colored_store()

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        reconciler.set_leading(True)
        await until(lambda: len(fake.patches) == 3)
        assert await reconciler.wait_idle(5)

    run(fake, scenario, store, turns=Turns(length=0.0))


def test_adds_of_a_held_key_coalesce_into_one_run_at_the_window_end() -> None:
    async def main() -> None:
        queue = WorkQueue()
        loop = asyncio.get_running_loop()
        queue.hold(SVC, 0.2)
        started = loop.time()
        for _ in range(5):
            queue.add(SVC)
            await asyncio.sleep(0.01)
        queue.add(ROUTE)  # not held: at once
        assert len(queue) == 1 and not queue.idle
        async with asyncio.timeout(1):
            assert await queue.get() == ROUTE
            queue.done(ROUTE)
            assert await queue.get() == SVC
        assert loop.time() - started >= 0.19
        queue.done(SVC)
        assert queue.idle
        queue.add(SVC)  # the window is over: at once
        assert len(queue) == 1

    asyncio.run(main())


def test_an_add_while_a_key_is_worked_on_waits_for_the_window_the_work_then_opens() -> None:
    """The reconciler holds a key once its patch is answered; an edit that came while the patch
    was on its way (the worker still holds the key) joins that window instead of running at once
    — on a busy machine the answer is late, and each such edit was a second patch."""

    async def main() -> None:
        queue = WorkQueue()
        loop = asyncio.get_running_loop()
        queue.add(SVC)
        assert await queue.get() == SVC
        queue.add(SVC)  # an edit while the patch is in flight
        queue.hold(SVC, 0.2)  # the patch is answered: its window opens
        held_at = loop.time()
        queue.done(SVC)
        assert len(queue) == 0 and not queue.idle, "waits for the window, not dropped"
        async with asyncio.timeout(1):
            assert await queue.get() == SVC
        assert loop.time() - held_at >= 0.19
        queue.done(SVC)
        assert queue.idle

    asyncio.run(main())


# --- a busy Service's computation in steps -------------------------------------------------------


def named_route(name: str) -> dict[str, Any]:
    doc = route()
    doc["metadata"]["name"] = name
    return doc


def busy_service_store(monkeypatch: pytest.MonkeyPatch) -> Store:
    """Service foo behind forty routes, kept in pieces made four routes a step."""
    monkeypatch.setattr(hierarchy, "PARTS_MIN_ROUTES", 10)
    monkeypatch.setattr(hubs, "ADVANCE_ROUTES", 4)
    store = colored_store()
    for i in range(40):
        store.upsert(named_route(f"r{i:02d}"))
    return store


async def lead_with_the_service_in_pieces(reconciler: Reconciler, store: Store) -> None:
    reconciler.set_leading(True)
    await until(reconciler.passed.is_set)
    store.upsert(named_route("r-first-event"))  # a route event: the Service in pieces now
    assert await reconciler.wait_idle(10)


@pytest.mark.python_only
def test_a_busy_services_value_is_computed_in_steps_with_the_loop_served_between(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Forty routes written to a Service behind forty: the leader makes their pieces a few at a
    time (`SummaryCache.prepare`), taking a turn of the loop before each step — a review that
    arrived meanwhile is answered between two steps — and patches the whole value."""
    fake = FakeApiServer()
    store = busy_service_store(monkeypatch)

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        await lead_with_the_service_in_pieces(reconciler, store)
        events: list[str] = []
        prepare, take = reconciler.cache.prepare, reconciler.turns.take

        def prepared(key: ObjectKey) -> bool:
            more = prepare(key)
            events.append(f"prepare {key.kind} {more}")
            return more

        async def taken() -> None:
            events.append("turn")
            await take()

        monkeypatch.setattr(reconciler.cache, "prepare", prepared)
        monkeypatch.setattr(reconciler.turns, "take", taken)
        for i in range(40):
            store.upsert(named_route(f"s{i:02d}"))
        assert await reconciler.wait_idle(10)
        service_steps = [i for i, e in enumerate(events) if e == "prepare Service True"]
        assert len(service_steps) >= 10, events
        assert all(events[i + 1] == "turn" for i in service_steps), events
        (*_, last) = [body for path, *_, body in fake.patches if path.endswith("/services/foo")]
        (value,) = last["metadata"]["annotations"].values()
        assert value == summary.summarize(SVC, store, SETTINGS)

    run(fake, scenario, store, turns=Turns(length=0.0))


@pytest.mark.python_only
def test_a_value_computed_in_steps_is_held_by_the_cost_of_all_its_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each step cheap, together costly (here: 3 ms a step, 5 ms the threshold): the Service is
    held as its whole computation would have it, or every route of a bulk create would make it
    computed again, its steps and all, instead of once a window."""
    fake = FakeApiServer()
    store = busy_service_store(monkeypatch)

    async def scenario(reconciler: Reconciler, store: Store, fake: FakeApiServer) -> None:
        await lead_with_the_service_in_pieces(reconciler, store)
        prepare = reconciler.cache.prepare

        def slow_step(key: ObjectKey) -> bool:
            more = prepare(key)
            time.sleep(0.003)
            return more

        monkeypatch.setattr(reconciler.cache, "prepare", slow_step)
        holds = reconciler.holds
        for i in range(40):
            store.upsert(named_route(f"s{i:02d}"))
        assert await reconciler.wait_idle(10)
        assert reconciler.holds > holds

    run(fake, scenario, store, hot_after=0.005, hold_min=0.05, hold_factor=0.0)
