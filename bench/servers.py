"""The two HTTPS servers of the HTTP benchmark, each run in a process of its own.

    python -m bench.servers webhook --cert-dir D --scale 0.1 --seed 1
    python -m bench.servers noop --cert-dir D

`webhook` is the product as `policy-webhook serve` wires it (`build_app` behind `HttpsServer`,
JSON decision logs at INFO), on a synthetic cluster; `noop` is the ceiling of this stack: an
aiohttp HTTPS endpoint with the same TLS context that reads the body, takes `request.uid` and
answers `allowed: true`. Both print `READY <port>` on stdout once they accept connections and
stop on SIGTERM. Logs go to stderr, which the harness sends to a file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path

from aiohttp import web

from webhook.core.settings import Settings
from webhook.core.store import Store
from webhook.shell.logs import setup_logging
from webhook.shell.metrics import Metrics
from webhook.shell.readiness import Readiness
from webhook.shell.server import HttpsServer, build_app
from webhook.shell.tls import ReloadingTLS


def _tls(cert_dir: str) -> ReloadingTLS:
    folder = Path(cert_dir)
    return ReloadingTLS(folder / "tls.crt", folder / "tls.key", poll_interval=0)


async def _run_webhook(args: argparse.Namespace) -> None:
    from bench import synth
    from webhook.core import hierarchy

    started = time.perf_counter()
    cluster = synth.generate(synth.Shape().scaled(args.scale), seed=args.seed)
    store = Store()
    for obj in cluster.objects():
        store.upsert(obj)
    hierarchy.index_for(store)  # as after the informers' first sync
    readiness = Readiness()
    app = build_app(view=store, settings=Settings(), readiness=readiness, metrics=Metrics())
    server = HttpsServer(
        app, tls=_tls(args.cert_dir), readiness=readiness, host="127.0.0.1", port=0
    )
    await server.start()
    print(
        f"READY {server.port} objects={cluster.count()} load_s={time.perf_counter() - started:.2f}",
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


async def _run_noop(args: argparse.Namespace) -> None:
    app = web.Application(client_max_size=7 * 1024 * 1024)
    app.router.add_post("/{tail:.*}", _noop)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=_tls(args.cert_dir).context)
    await site.start()
    print(f"READY {runner.addresses[0][1]}", flush=True)
    await _until_stopped()
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
