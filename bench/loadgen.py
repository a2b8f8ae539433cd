"""A load generator on aiohttp, run in a process of its own: open loop at a fixed rate, or closed.

    python -m bench.loadgen URL --bodies FILE --rate 500 --duration 10 [--ca CA]
    python -m bench.loadgen URL --bodies FILE --closed 16 --duration 5

Keep-alive HTTPS, `--connections` at most. With `--rate`, request i is due at start + i/rate
and its latency counts from that moment, not from when it was sent: a server that falls behind
is charged for the queue it causes (no coordinated omission). With `--closed N`, N workers send
back to back: throughput at saturation. Bodies (one JSON review per line) are sent in turn.
Prints one JSON object: counts, achieved rate and latency percentiles in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import time
from collections.abc import Sequence
from typing import Any

import aiohttp


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (q in 0..100)."""
    if not sorted_values:
        return float("nan")
    rank = max(0, min(len(sorted_values) - 1, round(q / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[rank]


class _Run:
    def __init__(self, bodies: list[bytes], warmup_until: float, stop_at: float) -> None:
        self.bodies = bodies
        self.warmup_until = warmup_until
        self.stop_at = stop_at
        self.latencies: list[float] = []
        self.statuses: dict[int, int] = {}
        self.errors = 0
        self.sent = 0
        self.counted = 0
        self.unfinished = 0
        self.in_window = 0  # answers received between the end of warm-up and the stop time

    async def one(self, session: aiohttp.ClientSession, url: str, due: float) -> None:
        body = self.bodies[self.sent % len(self.bodies)]
        self.sent += 1
        try:
            async with session.post(
                url, data=body, headers={"Content-Type": "application/json"}
            ) as resp:
                await resp.read()
                status = resp.status
        except (TimeoutError, aiohttp.ClientError):
            self.errors += 1
            return
        done = time.perf_counter()
        if self.warmup_until <= done <= self.stop_at:
            self.in_window += 1
        if due >= self.warmup_until:
            self.statuses[status] = self.statuses.get(status, 0) + 1
            self.latencies.append(done - due)
            self.counted += 1


async def _open_loop(
    session: aiohttp.ClientSession, url: str, run: _Run, rate: float, start: float, grace: float
) -> None:
    tasks: dict[asyncio.Task[None], float] = {}
    i = 0
    while True:
        due = start + i / rate
        if due >= run.stop_at:
            break
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(run.one(session, url, due))
        tasks[task] = due
        task.add_done_callback(tasks.pop)
        i += 1
    if tasks:
        await asyncio.wait(list(tasks), timeout=grace)
    # A server far behind would keep us here for minutes: what is still queued after the grace
    # period is cancelled and counted with the time it has waited so far (a lower bound).
    now = time.perf_counter()
    for task, due in list(tasks.items()):
        task.cancel()
        if due >= run.warmup_until:
            run.latencies.append(now - due)
            run.unfinished += 1


async def _closed_loop(session: aiohttp.ClientSession, url: str, run: _Run, workers: int) -> None:
    async def worker() -> None:
        while time.perf_counter() < run.stop_at:
            await run.one(session, url, time.perf_counter())

    await asyncio.gather(*(worker() for _ in range(workers)))


async def drive(args: argparse.Namespace) -> dict[str, Any]:
    with open(args.bodies, "rb") as handle:
        bodies = [line.rstrip(b"\n") for line in handle if line.strip()]
    context = ssl.create_default_context(cafile=args.ca) if args.ca else False
    connections = args.closed or args.connections
    connector = aiohttp.TCPConnector(limit=connections, ssl=context, force_close=False)
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter()
        run = _Run(bodies, start + args.warmup, start + args.warmup + args.duration)
        if args.closed:
            await _closed_loop(session, args.url, run, args.closed)
        else:
            await _open_loop(session, args.url, run, args.rate, start, args.grace)
        finished = time.perf_counter()
    lat = sorted(x * 1000 for x in run.latencies)
    return {
        "mode": "closed" if args.closed else "open",
        "offered_rps": None if args.closed else args.rate,
        "completed": run.counted,
        "errors": run.errors,
        "unfinished": run.unfinished,
        "statuses": {str(k): v for k, v in sorted(run.statuses.items())},
        "rps": run.in_window / args.duration,  # answers per second inside the measured window
        "overrun_s": max(0.0, finished - run.stop_at),
        "p50_ms": percentile(lat, 50),
        "p90_ms": percentile(lat, 90),
        "p99_ms": percentile(lat, 99),
        "max_ms": lat[-1] if lat else float("nan"),
        "mean_ms": sum(lat) / len(lat) if lat else float("nan"),
    }


def _loop_runner(choice: str) -> Any:
    if choice in ("auto", "uvloop"):
        try:
            import uvloop

            return uvloop.run
        except ImportError:
            if choice == "uvloop":
                raise
    return asyncio.run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen")
    parser.add_argument("url")
    parser.add_argument("--bodies", required=True, help="file of request bodies, one per line")
    parser.add_argument("--ca", help="CA certificate to verify the server with")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--rate", type=float, help="open loop: requests per second")
    mode.add_argument("--closed", type=int, metavar="N", help="closed loop: N concurrent workers")
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds sent but not counted")
    parser.add_argument(
        "--connections", type=int, default=64, help="keep-alive connections (open loop)"
    )
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument(
        "--grace", type=float, default=5.0, help="open loop: wait after the last send"
    )
    parser.add_argument(
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        help="the generator's own event loop; auto: uvloop when installed (less client overhead)",
    )
    args = parser.parse_args(argv)
    result = _loop_runner(args.loop)(drive(args))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
