"""The two HTTPS servers of the HTTP benchmark, each run in a process of its own.

    python -m bench.servers webhook --cert-dir D --scale 0.1 --seed 1
    python -m bench.servers noop --cert-dir D
    python -m bench.servers noop --cert-dir D --annotate FILE --watch KUBECONFIG PATH
    python -m bench.servers noop ... --mutate-cpu-ms 0.45 --event-cpu-ms 0.6   # a burdened floor

`webhook` is the product as `policy-webhook serve` wires it (`build_app` behind `HttpsServer`,
JSON decision logs at INFO, the collector tuned and the heap settled once the state is loaded:
`process.heap`), on a synthetic cluster; `noop` is the ceiling of this stack: an
aiohttp HTTPS endpoint with the same TLS context that reads the body, takes `request.uid` and
answers `allowed: true`. With `--annotate` and `--watch` the no-op becomes the end-to-end
benchmark's *floor*: what any webhook that annotates must make the API server do, at no cost of
its own — /mutate answers with a JSON Patch that adds the annotation in FILE (the size of ours)
to an object that lacks it, and PATH is listed and then watched from the list's
resourceVersion, every event read and decoded, as the smallest informer would. On SIGUSR1
the floor reads FILE again and patches that annotation onto every route its watch has seen,
as a reconciler would after a policy edit, within ours' default limits (`--reconcile-qps`,
`--reconcile-burst`, `--reconcile-workers`): the floor of a fan-out, each patch coming back
through its /mutate as ours' patches come back through ours. `--mutate-cpu-ms`,
`--mutate-wait-ms` and `--event-cpu-ms` burden the floor with costs of ours' size and none of
its work (`Burden`).
Both print `READY <port>` on stdout once they accept connections (the webhook adds what it
loaded, its collector's thresholds, how many objects its settled heap froze and which build of
the core it runs) and stop on SIGTERM. Logs go to stderr, which the harness sends to a file.

The webhook also answers `GET /bench/cpu` with the CPU seconds it spent inside the admission
decisions (`validation.validate` and `mutation.mutate`, the core) and how many it made, so that
the harness can split a request's CPU time between the core and the serving stack (decoding,
response building and encoding, logs, metrics, aiohttp, TLS). The clock is read twice per
decision, about a microsecond.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import json
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from webhook.core.admission import mutation
from webhook.core.engine import memo
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store
from webhook.shell.https.endpoints import build_app
from webhook.shell.https.server import HttpsServer
from webhook.shell.https.tls import ReloadingTLS
from webhook.shell.process import heap
from webhook.shell.process.build import core_build
from webhook.shell.process.logs import setup_logging
from webhook.shell.process.metrics import Metrics
from webhook.shell.process.readiness import Readiness

_Decide = TypeVar("_Decide", bound=Callable[..., Any])


class _CoreClock:
    """CPU seconds spent in the admission decisions, and how many were made."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    def timed(self, decide: _Decide) -> _Decide:
        def timed_decision(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return decide(*args, **kwargs)
            finally:
                self.seconds += time.process_time() - started
                self.calls += 1

        return timed_decision  # type: ignore[return-value]

    async def report(self, request: web.Request) -> web.Response:
        return web.json_response({"core_cpu_s": self.seconds, "core_calls": self.calls})


def _tls(cert_dir: str) -> ReloadingTLS:
    folder = Path(cert_dir)
    return ReloadingTLS(folder / "tls.crt", folder / "tls.key", poll_interval=0)


async def _run_webhook(args: argparse.Namespace) -> None:
    from bench import synth
    from webhook.core.admission import validation as admission

    heap.tune()  # as `serve` runs: full collections a hundred times rarer
    started = time.perf_counter()
    cluster = synth.generate(synth.Shape().scaled(args.scale), seed=args.seed)
    store = Store()
    for obj in cluster.objects():
        store.upsert(obj)
    memo.index_of(store)  # as after the informers' first sync
    # As `serve` settles its heap once synced. With CPython's defaults, one run of the HTTP
    # part made 12 full collections here, 52 to 141 ms each (each walked the whole state), and
    # a fixed-rate round that met one had its p99 at 50 ms: pauses `serve` does not make.
    heap.settle("bench webhook: synthetic cluster loaded")
    readiness = Readiness()
    # The server calls `admission.validate(...)` through the module: timing it there times it
    # where the server calls it, and nowhere else.
    clock = _CoreClock()
    admission.validate = clock.timed(admission.validate)
    mutation.mutate = clock.timed(mutation.mutate)
    app = build_app(view=store, settings=Settings(), readiness=readiness, metrics=Metrics())
    app.router.add_get("/bench/cpu", clock.report)
    server = HttpsServer(
        app, tls=_tls(args.cert_dir), readiness=readiness, host="127.0.0.1", port=0
    )
    await server.start()
    print(
        f"READY {server.port} objects={cluster.count()} load_s={time.perf_counter() - started:.2f}"
        f" gc_threshold={','.join(map(str, gc.get_threshold()))} frozen={gc.get_freeze_count()}"
        f" core={core_build()}",
        flush=True,
    )
    await _until_stopped()
    await server.shutdown()


async def _noop(request: web.Request) -> web.Response:
    review = json.loads(await request.read())
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": review["request"]["uid"], "allowed": True},
    }
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(), content_type="application/json"
    )


@dataclass(frozen=True, slots=True)
class Burden:
    """Costs put on the floor, in seconds, to see what a webhook of ours' costs but none of its
    work would make a bulk create cost (bench/e2e-findings.md): if such a floor is as slow as
    ours, ours loses nothing besides what it spends.

    - `mutate_cpu`: CPU burnt in each /mutate before it answers (ours' decision, on the path of
      every create);
    - `mutate_wait`: a wait in each /mutate before it answers, the CPU idle (`asyncio.sleep`:
      the loop's timers round it up to about a millisecond);
    - `event_cpu`: CPU burnt on the loop after each ADDED or MODIFIED watch event (ours' work
      per event: its store, its cache, its reconciler).
    """

    mutate_cpu: float = 0.0
    mutate_wait: float = 0.0
    event_cpu: float = 0.0


def burn(seconds: float) -> None:
    """Spin until this thread has spent `seconds` of CPU: the cost of work, which a neighbour
    on the same core stretches in wall time as it would stretch ours' work."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


class _Floor:
    """What the floor annotates (FILE: key, newline, value; read again before a fan-out), the
    routes its watch has seen and the burden it carries."""

    def __init__(self, file: Path, burden: Burden = Burden()) -> None:
        self.file = file
        self.burden = burden
        self.names: set[str] = set()
        self.key = self.value = ""
        self.read()

    def read(self) -> None:
        self.key, _, self.value = self.file.read_text(encoding="utf-8").partition("\n")

    def heard(self, kind: str, name: str) -> None:
        """One watch event of a route: its name kept or forgotten, and the event's burden."""
        if kind == "DELETED":
            self.names.discard(name)
        elif kind in ("ADDED", "MODIFIED"):
            self.names.add(name)
            burn(self.burden.event_cpu)


def _annotating(floor: _Floor) -> Callable[[web.Request], Any]:
    """The floor's /mutate: the annotation added to an object that lacks it, else nothing."""

    async def annotate(request: web.Request) -> web.Response:
        burden = floor.burden
        if request.path == "/mutate" and (burden.mutate_cpu or burden.mutate_wait):
            burn(burden.mutate_cpu)
            await asyncio.sleep(burden.mutate_wait)
        review = json.loads(await request.read())
        req = review["request"]
        response: dict[str, Any] = {"uid": req["uid"], "allowed": True}
        key, value = floor.key, floor.value
        if request.path == "/mutate":
            annotations = (req.get("object") or {}).get("metadata", {}).get("annotations")
            if not isinstance(annotations, dict):
                ops = [{"op": "add", "path": "/metadata/annotations", "value": {key: value}}]
            elif annotations.get(key) != value:
                path = "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")
                ops = [{"op": "add", "path": path, "value": value}]
            else:
                ops = []
            if ops:
                response["patchType"] = "JSONPatch"
                response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
        body = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": response,
        }
        return web.Response(
            body=json.dumps(body, separators=(",", ":")).encode(), content_type="application/json"
        )

    return annotate


async def _watch(kubeconfig: Path, path: str, floor: _Floor | None) -> None:
    """Keep `path` as an informer does: list it, then watch from the list's resourceVersion
    with bookmarks, each event read and decoded; resume from the last version seen when the
    server ends the watch, list again after a `410 Gone`. The names of the objects held are
    kept in `floor`.

    An informer's watch is the one ours' informers keep (`webhook/shell/cluster/informers.py`);
    a watch without a resourceVersion is not the same request everywhere (from v1.27 until
    patch releases of 2024, API servers served it from etcd, not from the watch cache). On the
    v1.20 API server of the benchmark the two cost the same, measured alternating
    (bench/e2e-findings.md).
    """
    import aiohttp
    import orjson

    from bench.e2e_api import Api

    api = Api(kubeconfig)
    base = f"https://{api.host}:{api.port}"
    version: str | None = None
    async with aiohttp.ClientSession(base) as session:
        while True:
            if version is None:
                async with session.get(path, ssl=api.context) as reply:
                    listed = orjson.loads(await reply.read())
                version = listed["metadata"]["resourceVersion"]
                if floor is not None:
                    floor.names = {item["metadata"]["name"] for item in listed["items"]}
            params = {
                "watch": "true",
                "timeoutSeconds": "600",
                "resourceVersion": version,
                "allowWatchBookmarks": "true",
            }
            async with session.get(
                path, params=params, ssl=api.context, timeout=aiohttp.ClientTimeout(total=None)
            ) as reply:
                async for line in reply.content:
                    if not line.strip():
                        continue
                    event = orjson.loads(line)
                    kind, obj = event["type"], event["object"]
                    if kind == "ERROR":  # a Status: 410 Gone, the version too old to resume
                        version = None
                        break
                    version = obj["metadata"]["resourceVersion"]
                    if floor is None or kind == "BOOKMARK":
                        continue
                    floor.heard(kind, obj["metadata"]["name"])


async def _fan_out(kubeconfig: Path, path: str, floor: _Floor) -> None:
    """Patch the annotation in `floor` onto every route it has seen, as ours' reconciler does
    after a policy edit and within its default limits: a JSON merge patch of that one key, a
    token bucket at ours' default ceiling and burst, ours' default patches in flight. No rate
    adaptation: ours' never backed off in these fan-outs (no 429, no slow answers)."""
    import aiohttp

    from bench.e2e_api import Api
    from webhook.shell.cluster import pacing
    from webhook.shell.cluster.reconciler import MERGE_PATCH, merge_patch_of_annotation
    from webhook.shell.cluster.workqueue import TokenBucket

    floor.read()
    api = Api(kubeconfig)
    bucket = TokenBucket(pacing.DEFAULT_CEILING, pacing.DEFAULT_BURST)
    names = sorted(floor.names)
    body = json.dumps(merge_patch_of_annotation(floor.key, floor.value, None)).encode()
    headers = {"Content-Type": MERGE_PATCH}

    async with aiohttp.ClientSession(f"https://{api.host}:{api.port}") as session:

        async def worker() -> None:
            while names:
                name = names.pop()
                await bucket.acquire()
                url = f"{path}/{name}"
                async with session.patch(url, data=body, headers=headers, ssl=api.context) as r:
                    await r.read()

        await asyncio.gather(*(worker() for _ in range(pacing.DEFAULT_IN_FLIGHT)))
    print(f"fanned out to {len(floor.names)} objects", file=sys.stderr, flush=True)


async def _run_noop(args: argparse.Namespace) -> None:
    app = web.Application(client_max_size=7 * 1024 * 1024)
    burden = Burden(args.mutate_cpu_ms / 1000, args.mutate_wait_ms / 1000, args.event_cpu_ms / 1000)
    floor = _Floor(Path(args.annotate), burden) if args.annotate else None
    if floor is not None:
        app.router.add_post("/{tail:.*}", _annotating(floor))
    else:
        app.router.add_post("/{tail:.*}", _noop)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=_tls(args.cert_dir).context)
    await site.start()
    watching = (
        asyncio.create_task(_watch(Path(args.watch[0]), args.watch[1], floor))
        if args.watch
        else None
    )
    fanning: set[asyncio.Task[None]] = set()
    if floor is not None and args.watch:
        kubeconfig, path = Path(args.watch[0]), args.watch[1]

        def fan_out() -> None:
            task = asyncio.create_task(_fan_out(kubeconfig, path, floor))
            fanning.add(task)
            task.add_done_callback(fanning.discard)

        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, fan_out)
    print(f"READY {runner.addresses[0][1]}", flush=True)
    await _until_stopped()
    if watching is not None:
        watching.cancel()
    await runner.cleanup()


async def _until_stopped() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.servers")
    parser.add_argument("which", choices=("webhook", "noop"))
    parser.add_argument("--cert-dir", required=True)
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    parser.add_argument("--annotate", metavar="FILE", help="noop: annotation key, newline, value")
    for name, what in (
        ("--mutate-cpu-ms", "floor: CPU burnt in each /mutate before it answers"),
        ("--mutate-wait-ms", "floor: a wait in each /mutate before it answers, CPU idle"),
        ("--event-cpu-ms", "floor: CPU burnt after each ADDED or MODIFIED watch event"),
    ):
        parser.add_argument(name, type=float, default=0.0, metavar="MS", help=what)
    parser.add_argument("--watch", nargs=2, metavar=("KUBECONFIG", "PATH"), help="noop: watch")
    args = parser.parse_args(argv)
    setup_logging("INFO", json=True, stream=sys.stderr)
    run = _run_webhook if args.which == "webhook" else _run_noop
    if args.loop == "uvloop":
        import uvloop

        uvloop.run(run(args))
    else:
        asyncio.run(run(args))


if __name__ == "__main__":
    main()
