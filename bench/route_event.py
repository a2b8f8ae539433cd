"""Issue 18, core alone: what one route event costs beside N routes sharing a Gateway and a Service.

    python -m bench.route_event                        # this tree, against HEAD, N = 100…3,000
    python -m bench.route_event --baseline /some/tree  # against another tree holding webhook/
    python -m bench.route_event --baseline none        # this tree only
    python -m bench.route_event --cold                 # each event after the caches are evicted

The e2e bench's shape without a cluster: one Gateway with a RetryPolicy, N HTTPRoutes on it,
all sending to one Service, held in a store with the summary cache subscribed (as the webhook
holds them), every value computed once and one route event already heard (a converged state
with routes coming). Then one more route is written, five times, and each write is timed in
three steps, as the webhook pays them per route event:
- `write`: `Store.upsert` of the route, with what hears it (the `AffectedFeed` working out what
  it affects, the cache dropping those entries);
- `service`: the Service's value again (`SummaryCache.get`, what the leader's reconciler asks);
- `route`: the route's own value (`SummaryCache.get`).
With `--cold`, the processor's caches are evicted before each route event (a buffer twice the
size of the last-level cache is written): on one machine with the API server, etcd and kubectl,
as in `make bench-e2e`, the webhook meets each route event after they ran, with little of its
own memory left in the caches; hot, these steps cost a fraction of what they cost there
(bench/e2e-findings.md).
Each size runs in a fresh process per tree, trees alternating, rounds repeated; figures are
medians over every write of every round (CPU time of this process: a neighbour's burst on this
shared machine does not count), and the growth exponent is fitted over N (log-log least
squares). The baseline's code comes from `git archive` of a revision (nothing in the repository
is written) or from a folder; the tree measured is copied aside first (`bench.snapshot`).
Writes `bench/out/route_event.json` (`route_event_cold.json` with `--cold`).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import snapshot

SIZES = (100, 300, 1000, 3000)
STEPS = ("write", "service", "route")
GW = "gateway.networking.k8s.io"
LAST_LEVEL_CACHE = Path("/sys/devices/system/cpu/cpu0/cache/index3/size")
DEFAULT_CACHE_BYTES = 32 * 1024 * 1024  # where the system does not say


def cache_bytes(size: str) -> int:
    """A cache size as sysfs spells it (`32768K`, `1M`, `512`) in bytes."""
    text = size.strip().upper()
    scale = {"K": 1024, "M": 1024 * 1024}.get(text[-1:], 1)
    return int(text.rstrip("KM")) * scale


def evictor() -> Callable[[], None]:
    """What writes a buffer twice the last-level cache, so that the next step finds none of
    its memory cached: the webhook's lot on the benchmark's machine, between two route events."""
    try:
        size = 2 * cache_bytes(LAST_LEVEL_CACHE.read_text(encoding="ascii"))
    except (OSError, ValueError):
        size = 2 * DEFAULT_CACHE_BYTES
    buffer = bytearray(size)
    fills = [b"\x01" * size, bytes(size)]  # made once: each eviction is a copy, no allocation

    def evict() -> None:
        fills.reverse()
        buffer[:] = fills[0]

    return evict


# --- one size, in the process of one tree -------------------------------------------------------


def _docs() -> list[dict[str, Any]]:
    import yaml

    crds = snapshot.code_root() / "examples" / "cluster" / "00-policy-crds.yaml"
    found = [d for d in yaml.safe_load_all(crds.read_text(encoding="utf-8")) if d]
    return [
        *found,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "infra"}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}},
        {
            "apiVersion": f"{GW}/v1",
            "kind": "GatewayClass",
            "metadata": {"name": "acme"},
            "spec": {"controllerName": "example.net/acme"},
        },
        {
            "apiVersion": f"{GW}/v1",
            "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "infra"},
            "spec": {
                "gatewayClassName": "acme",
                "listeners": [
                    {
                        "name": "http",
                        "protocol": "HTTP",
                        "port": 80,
                        "allowedRoutes": {"namespaces": {"from": "All"}},
                    }
                ],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "backend", "namespace": "apps"},
            "spec": {"ports": [{"name": "http", "port": 80}]},
        },
        {
            "apiVersion": "policies.example.com/v1alpha1",
            "kind": "RetryPolicy",
            "metadata": {
                "name": "retry",
                "namespace": "infra",
                "creationTimestamp": "2024-01-01T00:00:00Z",
            },
            "spec": {
                "targetRefs": [{"group": GW, "kind": "Gateway", "name": "gw"}],
                "default": {"maxRetries": 3, "retryOn": ["502", "503"]},
            },
        },
    ]


def _route(i: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GW}/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": f"route-{i:05d}", "namespace": "apps"},
        "spec": {
            "parentRefs": [{"name": "gw", "namespace": "infra"}],
            "hostnames": [f"r{i}.example.com"],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": f"/r{i}"}}],
                    "backendRefs": [{"name": "backend", "port": 80}],
                }
            ],
        },
    }


def measure(n: int, writes: int, *, cold: bool = False) -> dict[str, Any]:
    """One size in this process: the medians of `writes` route events beside `n` routes;
    `cold`: each after the caches were evicted."""
    from webhook.core.annotation import summary
    from webhook.core.annotation.cache import SummaryCache
    from webhook.core.model.refs import ObjectKey
    from webhook.core.model.settings import Settings
    from webhook.core.state.store import Store

    settings = Settings()
    store = Store()
    cache = SummaryCache(store, settings, maxsize=max(65_536, 2 * n))
    for doc in _docs():
        store.upsert(doc)
    for i in range(n):
        store.upsert(_route(i))
    service = ObjectKey("", "Service", "apps", "backend")
    routes = [ObjectKey(GW, "HTTPRoute", "apps", f"route-{i:05d}") for i in range(n)]
    for key in [*routes, service]:  # converged: every value computed once
        cache.get(key)
    store.upsert(_route(n))  # and routes coming: one event already heard (untimed)
    for key in (service, ObjectKey(GW, "HTTPRoute", "apps", f"route-{n:05d}")):
        cache.get(key)
    gc.collect()
    gc.freeze()  # as the webhook settles its heap once synced: collections skip the state
    timings: dict[str, list[float]] = {step: [] for step in STEPS}
    clock = time.process_time
    evict = evictor() if cold else None
    for i in range(n + 1, n + 1 + writes):
        doc = _route(i)
        key = ObjectKey(GW, "HTTPRoute", "apps", doc["metadata"]["name"])
        if evict is not None:
            evict()
        started = clock()
        store.upsert(doc)
        wrote = clock()
        cache.get(service)
        served = clock()
        cache.get(key)
        done = clock()
        for step, seconds in zip(
            STEPS, (wrote - started, served - wrote, done - served), strict=True
        ):
            timings[step].append(seconds * 1000)
    fresh = Store()
    for gk in sorted(store.all_kinds()):
        for obj in store.objects(gk):
            fresh.upsert(copy.deepcopy(dict(obj)))
    value = cache.get(service)
    return {
        "n": n,
        **{f"{step}_ms": timings[step] for step in STEPS},
        "consistent": value == summary.summarize(service, fresh, settings),
        "service_bytes": len(value or ""),
        "truncated": '"truncated":true' in (value or ""),
    }


# --- the comparison ----------------------------------------------------------------------------


def _run(folder: Path, n: int, writes: int, cold: bool) -> dict[str, Any]:
    command = ["-m", "bench.route_event", "--one", str(n), "--writes", str(writes)]
    done = subprocess.run(
        [sys.executable, *command, *(["--cold"] if cold else [])],
        cwd=folder,
        env={**snapshot.env(), "PYTHONPATH": str(folder), "BENCH_CODE_ROOT": str(folder)},
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def exponent(points: list[tuple[float, float]]) -> float:
    """The slope of log(y) over log(x), least squares: y ∝ x^slope."""
    xs = [math.log(x) for x, _ in points]
    ys = [math.log(max(y, 1e-9)) for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def compare(
    trees: dict[str, Path],
    sizes: tuple[int, ...],
    writes: int,
    rounds: int,
    log: Callable[[str], None],
    *,
    cold: bool = False,
) -> dict[str, Any]:
    raw: dict[str, dict[int, list[dict[str, Any]]]] = {
        name: {n: [] for n in sizes} for name in trees
    }
    names = list(trees)
    for r in range(rounds):
        for n in sizes:
            for name in names if r % 2 == 0 else names[::-1]:  # alternating: drift hits both
                result = _run(trees[name], n, writes, cold)
                raw[name][n].append(result)
                log(
                    f"  round {r + 1} {name:>8} N={n:>5}: "
                    + ", ".join(f"{s} {statistics.median(result[f'{s}_ms']):.2f} ms" for s in STEPS)
                    + ("" if result["consistent"] else "  INCONSISTENT")
                )
    out: dict[str, Any] = {
        "sizes": list(sizes),
        "writes": writes,
        "rounds": rounds,
        "cold": cold,
        "trees": {},
    }
    for name in names:
        medians: dict[str, dict[int, float]] = {}
        for step in [*STEPS, "event"]:
            medians[step] = {}
            for n in sizes:
                if step == "event":
                    values = [
                        sum(res[f"{s}_ms"][i] for s in STEPS)
                        for res in raw[name][n]
                        for i in range(len(res["write_ms"]))
                    ]
                else:
                    values = [v for res in raw[name][n] for v in res[f"{step}_ms"]]
                medians[step][n] = statistics.median(values)
        out["trees"][name] = {
            "median_ms": medians,
            "exponent": {
                step: exponent([(n, medians[step][n]) for n in sizes]) for step in medians
            },
            "consistent": all(res["consistent"] for ns in raw[name].values() for res in ns),
            "service_truncated": {n: raw[name][n][0]["truncated"] for n in sizes},
        }
    return out


def _report(result: dict[str, Any], log: Callable[[str], None]) -> None:
    trees = result["trees"]
    names = list(trees)
    for step in [*STEPS, "event"]:
        head = f"{step:>8} (ms)  " + "".join(f"{'N=' + str(n):>10}" for n in result["sizes"])
        log(head + "   exponent")
        for name in names:
            row = trees[name]["median_ms"][step]
            log(
                f"{name:>14}  "
                + "".join(f"{row[n]:>10.3f}" for n in result["sizes"])
                + f"   {trees[name]['exponent'][step]:>8.2f}"
            )
        if len(names) == 2:
            base, now = (trees[name]["median_ms"][step] for name in names)
            log(f"{'ratio':>14}  " + "".join(f"{now[n] / base[n]:>10.3f}" for n in result["sizes"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.route_event", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--baseline", default="HEAD", help="a revision, a folder, or none")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--writes", type=int, default=5, help="route events per process")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="evict the caches before each event")
    parser.add_argument("--out", type=Path, default=snapshot.REPO / "bench" / "out")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # one size, this process
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(measure(args.one, args.writes, cold=args.cold)))
        return 0
    sizes = tuple(int(n) for n in args.sizes.split(","))

    def log(message: str) -> None:
        print(message, flush=True)

    with snapshot.code_tree(str(snapshot.REPO), "bench-route-event-") as now:
        if args.baseline == "none":
            trees = {"this tree": now}
            result = compare(trees, sizes, args.writes, args.rounds, log, cold=args.cold)
        else:
            with snapshot.code_tree(args.baseline, "bench-route-event-") as base:
                trees = {"baseline": base, "this tree": now}
                result = compare(trees, sizes, args.writes, args.rounds, log, cold=args.cold)
            result["baseline"] = args.baseline
    _report(result, log)
    args.out.mkdir(parents=True, exist_ok=True)
    name = "route_event_cold.json" if args.cold else "route_event.json"
    (args.out / name).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
