"""`python -m bench e2e`: what a user feels, on the real kube-apiserver v1.20 of the e2e suite.

    python -m bench e2e              # full run (sizes 300 and 3,000), about 20 minutes here
    python -m bench --quick e2e      # small sizes, for checking the harness
    python -m bench.e2e --profile    # the same, with py-spy on ours (writes e2e-profile-*.txt)
    python -m bench.e2e --gil        # the same, sampling ours only while it holds the GIL
    python -m bench.e2e --baseline REV   # also ours as of REV, alternating: a change's ratio
    python -m bench.e2e --baseline DIR   # ... or of a folder's webhook/ (e.g. compiled)
    python -m bench.e2e --python         # ours' core as Python (by default compiled, as shipped)

Four set-ups side by side, the order flipping every round: no webhook registered, a no-op
webhook registered with the shipped configurations, the *floor* (that no-op adding an annotation
of our size to each route and watching the routes: what any webhook that annotates makes the
API server do, at no cost of its own) and ours (`policy-webhook serve`, started from a converged
state, its core compiled with mypyc as the image builds it). Per set-up and size: the wall
time of one `kubectl create -f` of a List of N HTTPRoutes (one Gateway with a RetryPolicy, one
backend Service shared by all), the CPU each process spent, and the API server's own admission
latency histogram for the webhooks.
With ours, also the fan-out of one policy edit (until every route's annotation says the new
value) at the default `--reconcile-qps` and with the limiter out of the way, and the cost of
one route event as the routes sharing the Service grow (`bench.e2e_growth`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench import e2e_api, e2e_code, e2e_procs, e2e_profile, e2e_summary, e2e_world, promtext
from webhook.shell.cluster import live, pacing
from webhook.shell.process.metrics import PREFIX as OUR_PREFIX

cluster_lib = e2e_world.cluster_lib  # the end-to-end suite's control plane

# `floor`: the no-op adding an annotation of our size and watching the routes (`bench.servers`):
# what any webhook that annotates costs the API server, at no cost of its own.
SETUPS = ("none", "noop", "floor", "ours")
ADMISSION = "apiserver_admission_webhook_admission_duration_seconds"
RECONCILE_COUNTERS = ("patches", "skips", "errors", "retries")
DEFAULT_QPS = pacing.DEFAULT_CEILING  # `--reconcile-qps`'s: the fan-out is measured without it


@dataclass(frozen=True, slots=True)
class E2EConfig:
    sizes: tuple[int, ...]
    rounds: tuple[int, ...]  # per size
    growth_sizes: tuple[int, ...]
    probes: int  # single-route events per growth size
    fast_qps: float | None  # a second fan-out with this ceiling (None: only the default)
    profile: bool = False
    profile_gil: bool = False  # py-spy `--gil`: samples of ours while it runs Python
    baseline: str | None = None  # a revision or a folder: its `webhook/` is set-up `base`
    compiled: bool = True  # ours' core compiled, as the image builds it (else run as Python)


# Twelve rounds at 300 routes: a create there lasts 1 to 3 s, and the median of ours / no-op
# moved with the machine — over four rounds 1.07 to 1.45x within one run, over eight 1.27 to
# 1.46x from one run to the next (e2e-findings.md).
FULL = E2EConfig((300, 3000), (12, 3), (100, 300, 1000, 3000), probes=20, fast_qps=1000.0)
QUICK = E2EConfig((40, 120), (2, 1), (25, 50, 100, 200), probes=6, fast_qps=1000.0)

Log = Callable[[str], None]


class Bench:
    """One control plane for the whole run; every phase leaves it with no route and no
    webhook registered, so that no phase inherits another's work."""

    def __init__(self, config: E2EConfig, out: Path, log: Log) -> None:
        self.config, self.out, self.log = config, out, log
        self.cluster = cluster_lib.LocalCluster(cluster_lib.provision.ensure_binaries())
        self.workdir = self.cluster.workdir
        self.marker = 1
        self.started = 0
        self.api: e2e_api.Api | None = None
        self.base_root: Path | None = None  # `--baseline`'s code, set by `run`

    # --- the control plane ------------------------------------------------------------------

    def start(self) -> None:
        self.cluster.start()
        crds = self.cluster.install_gateway_api_crds(channel=cluster_lib.SUITE_CHANNEL)
        self.log(f"  API server up; Gateway API CRDs: {crds.describe()}")
        crds = e2e_world.policy_crds()
        self.cluster.apply(crds)
        names = [f"crd/{crd['metadata']['name']}" for crd in crds]
        self.cluster.kubectl("wait", "--for=condition=Established", *names, "--timeout=60s")
        self.cluster.apply(e2e_world.base_objects(self.marker))
        self.api = e2e_api.Api(self.cluster.kubeconfig)

    def stop(self) -> None:
        self.cluster.cleanup()  # stops etcd and the API server by PID

    @property
    def pids(self) -> dict[str, int]:
        pids: dict[str, int] = self.cluster.pids
        return pids

    def scrape(self) -> promtext.Samples:
        return promtext.parse(self.cluster.kubectl("get", "--raw", "/metrics").stdout)

    def cpu(self, webhook_pid: int | None) -> dict[str, float]:
        pids = {**self.pids, **({"webhook": webhook_pid} if webhook_pid else {})}
        return {name: e2e_procs.cpu_seconds(pid) for name, pid in pids.items()}

    # --- routes and registrations -----------------------------------------------------------

    def clear_routes(self) -> None:
        """Every route gone, in one DELETE of the collection (no webhook is registered)."""
        self.cluster.kubectl("delete", "--raw", e2e_world.ROUTES_PATH, timeout=300)
        deadline = time.monotonic() + 120
        while self.route_count() and time.monotonic() < deadline:
            time.sleep(0.5)

    def route_count(self) -> int:
        assert self.api is not None
        return len(self.api.get(e2e_world.ROUTES_PATH)["items"])

    def create_routes(self, names: list[str]) -> float:
        """Seconds `kubectl create -f` took for a List of these routes."""
        path = self.workdir / "routes.json"
        path.write_text(e2e_world.route_list(names), encoding="utf-8")
        started = time.monotonic()
        self.cluster.kubectl("create", "-f", str(path), timeout=120 + 0.5 * len(names))
        return time.monotonic() - started

    def register(self, endpoint: e2e_world.Endpoint) -> None:
        self.cluster.apply(e2e_world.webhook_configurations(endpoint, "bench"))
        time.sleep(1.5)  # the API server picks up configurations within about a second

    def unregister(self) -> None:
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            self.cluster.kubectl("delete", kind, "policy-webhook-bench", "--ignore-not-found")
        time.sleep(1.5)

    def floor_args(self) -> list[str]:
        """The no-op as the floor (`bench.servers`): our annotation added, the routes watched."""
        value = self.workdir / "floor-annotation.txt"
        text = f"{e2e_world.ANNOTATION}\n{e2e_world.annotation_value(self.marker)}"
        value.write_text(text, encoding="utf-8")
        kubeconfig = str(self.cluster.kubeconfig)
        return ["--annotate", str(value), "--watch", kubeconfig, e2e_world.ROUTES_PATH]

    # --- ours ---------------------------------------------------------------------------------

    def start_ours(self, *args: str, base: bool = False) -> e2e_procs.Ours:
        """A fresh `policy-webhook serve`, leading, with its first reconcile pass done; with
        `base`, of the baseline's code."""
        self.started += 1
        ours = e2e_procs.Ours(self.cluster, self.workdir, name=f"ours-{self.started}", args=args)
        if base:
            ours.code_root = self.base_root
        try:
            ours.start()
            self.wait_idle(ours, timeout=300)
            if not base:  # what is measured is the build the part says it measures
                core = "compiled" if self.config.compiled else "python"
                if promtext.total(ours.samples(), f"{OUR_PREFIX}_build_info", core=core) != 1:
                    raise RuntimeError(f"{ours.name} does not run the {core} core")
        except BaseException:
            ours.stop()  # a process that never settled is still ours to end, by its PID
            raise
        return ours

    def wait_idle(self, ours: e2e_procs.Ours, *, timeout: float, quiet: float = 2.0) -> float:
        """Seconds until ours leads and its reconcile counters stood still for `quiet` s."""
        started = last_change = time.monotonic()
        last: tuple[float, ...] = ()
        while time.monotonic() - started < timeout:
            samples = ours.samples()
            now = time.monotonic()
            counts = reconcile_counts(samples)
            if counts != last:
                last, last_change = counts, now
            leading = promtext.total(samples, "policy_webhook_leader") == 1
            if leading and sum(counts) > 0 and now - last_change >= quiet:
                return last_change - started
            time.sleep(0.2)
        raise TimeoutError(f"{ours.name} did not settle within {timeout:.0f} s")

    @contextlib.contextmanager
    def profiled(self, ours: e2e_procs.Ours, phase: str) -> Iterator[None]:
        if not self.config.profile:
            yield
            return
        raw = self.out / f"e2e-profile-{phase}.raw"
        with e2e_procs.sampled(ours.pid, raw, gil=self.config.profile_gil):
            yield
        if raw.exists():
            result = e2e_profile.summarize(raw.read_text(encoding="utf-8"))
            text = e2e_profile.as_text(phase, result)
            (self.out / f"e2e-profile-{phase}.txt").write_text(text, encoding="utf-8")
            (self.out / f"e2e-profile-{phase}.json").write_text(json.dumps(result, indent=1))
            raw.rename(raw.with_suffix(".collapsed"))  # the stacks, for another reading
            self.log(
                f"    profile {phase}: {result['samples']} samples; {result['activities'][:3]}"
            )

    # --- one round of one set-up ---------------------------------------------------------------

    def bulk(self, setup: str, size: int, round_no: int, *, last: bool) -> dict[str, Any]:
        self.clear_routes()
        ours: e2e_procs.Ours | None = None
        noop: e2e_procs.Noop | None = None
        if setup in ("ours", "base"):
            ours = self.start_ours(base=setup == "base")
            self.register(ours.endpoint)
        elif setup in ("noop", "floor"):
            noop = e2e_procs.Noop(self.workdir, self.floor_args() if setup == "floor" else ())
            noop.start()
            self.register(noop.endpoint)
        pid = ours.pid if ours else noop.pid if noop else None
        row: dict[str, Any] = {"setup": setup, "size": size, "round": round_no}
        try:
            own_before = ours.samples() if ours else {}
            metrics, cpu = self.scrape(), self.cpu(pid)
            names = [f"r-{i}" for i in range(size)]
            phase = f"bulk-{size}"
            profile = setup == "ours" and last
            with self.profiled(ours, phase) if ours and profile else contextlib.nullcontext():
                row["wall_s"] = self.create_routes(names)
            row["cpu_s"] = delta(self.cpu(pid), cpu)
            if setup == "floor":  # a floor that did not annotate would flatter every ratio
                assert self.api is not None
                created = self.api.get(f"{e2e_world.ROUTES_PATH}/{names[0]}")
                if e2e_world.annotation_of(created) is None:
                    raise RuntimeError("the floor's /mutate added no annotation")
            after = self.scrape()
            row["admission"] = admission(metrics, after)
            row["requests"] = requests(metrics, after)
            others = e2e_summary.besides_creates(row["requests"])
            self.log(
                f"  {size} routes, round {round_no}, {setup}: API requests besides the creates "
                + (", ".join(f"{k} {n}" for k, n in sorted(others.items())) or "none")
            )
            if setup == "floor" and noop is not None:
                row["fanout"] = self.floor_fanout(noop, size)
            if ours is not None:
                own_after = ours.samples()
                row["handler"] = own_latency(own_before, own_after)
                row["loop_lag"] = loop_lag(own_before, own_after)
                row["settled_after_s"] = self.wait_idle(ours, timeout=600)
                time.sleep(live.EXPORT_SECONDS + 0.5)  # the cache's counters reach /metrics
                row["cache"] = delta(cache_by_name(ours.samples()), cache_by_name(own_before))
                row["fanout"] = self.fanout(ours, size, DEFAULT_QPS, profile=profile)
        finally:
            if ours is not None or noop is not None:
                self.unregister()
            if noop is not None:
                noop.stop()
            if ours is not None:
                ours.stop()
        if setup == "ours" and self.config.fast_qps:
            row["fanout_fast"] = self.fast_fanout(size, profile=last)
        return row

    def fast_fanout(self, size: int, *, profile: bool) -> dict[str, Any]:
        """The same fan-out with the limiter out of the way: what the rest of the path allows."""
        qps = self.config.fast_qps
        assert qps is not None
        ours = self.start_ours("--reconcile-qps", f"{qps:g}", "--reconcile-burst", f"{qps:g}")
        try:
            self.register(ours.endpoint)
            return self.fanout(ours, size, qps, profile=profile)
        finally:
            self.unregister()
            ours.stop()

    def fanout(
        self, ours: e2e_procs.Ours, size: int, qps: float, *, profile: bool
    ) -> dict[str, Any]:
        """Edit the policy; seconds until every route's annotation says the new marker."""
        own_before = ours.samples()
        counters = reconcile_by_name(own_before)
        phase = f"fanout-{size}-qps{qps:g}"
        with self.profiled(ours, phase) if profile else contextlib.nullcontext():
            result = self._timed_fanout(
                ours.pid,
                size,
                qps,
                lambda marker: self.cluster.apply(e2e_world.retry_policy(marker)),
            )
        own_after = ours.samples()
        result["reconciler"] = delta(reconcile_by_name(own_after), counters)
        result["handler"] = own_latency(own_before, own_after)
        result["loop_lag"] = loop_lag(own_before, own_after)
        result["settled_after_s"] = self.wait_idle(ours, timeout=600)
        return result

    def floor_fanout(self, floor: e2e_procs.Noop, size: int) -> dict[str, Any]:
        """The floor's fan-out (`bench.servers`): the new marker's annotation patched onto every
        route at ours' default limits, each patch through the floor's /mutate — what the API
        server does for any annotating reconciler's fan-out, at no cost of the webhook's own."""

        def edit(marker: int) -> None:
            (self.workdir / "floor-annotation.txt").write_text(
                f"{e2e_world.ANNOTATION}\n{e2e_world.annotation_value(marker)}", encoding="utf-8"
            )
            assert floor.proc is not None
            floor.proc.send_signal(signal.SIGUSR1)

        time.sleep(1.0)  # the floor's watch has seen every route the create made (ours: idle)
        return self._timed_fanout(floor.pid, size, DEFAULT_QPS, edit)

    def _timed_fanout(
        self, pid: int | None, size: int, qps: float, edit: Callable[[int], None]
    ) -> dict[str, Any]:
        """`edit(marker)`, then seconds until every route's annotation says that marker; the
        CPU of each process and the API server's admission latency meanwhile."""
        assert self.api is not None
        self.marker += 1
        marker = self.marker
        since = self.api.get(e2e_world.ROUTES_PATH + "?limit=1")["metadata"]["resourceVersion"]

        def right(obj: dict[str, Any]) -> bool:
            return e2e_world.retry_marker(e2e_world.annotation_of(obj)) == marker

        watch = e2e_api.Watch(self.api, e2e_world.ROUTES_PATH, since, right).start()
        metrics, cpu = self.scrape(), self.cpu(pid)
        started = time.monotonic()
        edit(marker)
        edited = time.monotonic() - started
        done = watch.wait(size, timeout=120 + 4 * size / qps)
        cpu_after = self.cpu(pid)
        watch.stop()
        if not done:
            raise TimeoutError(f"fan-out: {len(watch.first)} of {size} routes right")
        times = sorted(t - started for t in watch.first.values())
        return {
            "qps": qps,
            "seconds": times[-1],
            "objects_per_s": size / times[-1],
            "first_s": times[0],
            "half_s": times[len(times) // 2],
            "policy_write_s": edited,
            "cpu_s": delta(cpu_after, cpu),
            "admission": admission(metrics, self.scrape()),
        }


# --- metrics helpers ------------------------------------------------------------------------


def cache_by_name(samples: promtext.Samples) -> dict[str, float]:
    """The summary cache's counters: hits, misses, values /mutate handed over and kept."""
    return {
        name: promtext.total(samples, f"policy_webhook_cache_{name}_total")
        for name in ("hits", "misses", "adopted")
    }


def reconcile_counts(samples: promtext.Samples) -> tuple[float, ...]:
    return tuple(reconcile_by_name(samples).values())


def reconcile_by_name(samples: promtext.Samples) -> dict[str, float]:
    return {
        name: promtext.total(samples, f"policy_webhook_reconcile_{name}_total")
        for name in RECONCILE_COUNTERS
    }


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before.get(name, 0.0) for name in after}


def own_latency(before: promtext.Samples, after: promtext.Samples) -> dict[str, Any]:
    """Our handler's own latency per endpoint, from our histogram, between two scrapes of ours.

    Ours runs with its default logging here: a decision line per call (`--log-decisions all`)
    cost ours about 4 % of its time on a bulk create, which no default user pays. The
    histogram's buckets (100 µs, 250 µs, 500 µs, 1 ms, …) make the quantiles estimates; the
    mean is exact."""
    metric = f"{OUR_PREFIX}_admission_duration_seconds"
    return {
        endpoint: e2e_summary.pooled(
            [
                promtext.histogram(after, metric, endpoint=endpoint).minus(
                    promtext.histogram(before, metric, endpoint=endpoint)
                )
            ]
        )
        for endpoint in ("mutate", "validate")
    }


def loop_lag(before: promtext.Samples, after: promtext.Samples) -> dict[str, Any]:
    """How late ours' loop ran its probe's timers between two scrapes (`process.loop_lag`): the
    wait a call met inside ours before its handler, beside the API server's whole figure."""
    metric = f"{OUR_PREFIX}_event_loop_lag_seconds"
    return e2e_summary.pooled(
        [promtext.histogram(after, metric).minus(promtext.histogram(before, metric))]
    )


REQUESTS = "apiserver_request_total"


def requests(before: promtext.Samples, after: promtext.Samples) -> dict[str, int]:
    """The API server's requests served between two scrapes, by verb and resource
    (`patch services`, `watch httproutes`, …; a subresource after a slash): what each set-up
    made the API server do besides the creates, which its CPU figure does not say."""
    out: dict[str, int] = {}
    for (name, labels), value in after.items():
        if name != REQUESTS:
            continue
        found = dict(labels)
        resource = found.get("resource", "")
        if found.get("subresource"):
            resource += "/" + found["subresource"]
        key = f"{found.get('verb', '').lower()} {resource}".strip()
        served = value - before.get((name, labels), 0.0)
        if served > 0:
            out[key] = out.get(key, 0) + round(served)
    return out


def admission(before: promtext.Samples, after: promtext.Samples) -> dict[str, Any]:
    """The API server's latency histogram of the shipped webhooks' calls, per type, for the
    phase between two scrapes (buckets kept, so that rounds can be pooled)."""
    out = {}
    for kind in ("admit", "validate"):
        hists = [
            promtext.histogram(after, ADMISSION, name=name, type=kind).minus(
                promtext.histogram(before, ADMISSION, name=name, type=kind)
            )
            for name in e2e_world.hook_names()
        ]
        out[kind] = e2e_summary.pooled(hists)
    return out


# --- the part ---------------------------------------------------------------------------------


def run(
    config: E2EConfig, *, out: Path, log: Log = print, base_root: Path | None = None
) -> dict[str, Any]:
    """Every measurement of the part on one control plane; the result is `e2e.json`."""
    bench = Bench(config, out, log)
    bench.base_root = base_root
    rows: list[dict[str, Any]] = []
    try:
        bench.start()
        for size, rounds in zip(config.sizes, config.rounds, strict=True):
            setups = SETUPS + (("base",) if config.baseline else ())
            for round_no in range(rounds):
                order = setups if round_no % 2 == 0 else tuple(reversed(setups))
                for setup in order:
                    row = bench.bulk(setup, size, round_no, last=round_no == rounds - 1)
                    rows.append(row)
                    log("  " + e2e_summary.describe_row(row))
        from bench import e2e_growth

        growth = e2e_growth.run(bench, config.growth_sizes, probes=config.probes, log=log)
    finally:
        bench.stop()
    result: dict[str, Any] = {
        "config": asdict(config),
        "rows": rows,
        "growth": growth,
        "figures": e2e_summary.figures(rows, growth, sizes=config.sizes),
    }
    log("  " + e2e_summary.describe_figures(result["figures"]))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.e2e", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--profile", action="store_true", help="py-spy on ours (last rounds)")
    parser.add_argument(
        "--gil", action="store_true", help="with --profile: sample ours only while it holds the GIL"
    )
    parser.add_argument("--sizes", help="comma-separated route counts, e.g. 300,3000")
    parser.add_argument("--rounds", help="comma-separated rounds per size, e.g. 3,2")
    parser.add_argument("--growth-sizes", help="comma-separated, e.g. 100,300,1000,3000")
    parser.add_argument("--out", type=Path, default=e2e_world.ROOT / "bench" / "out" / "e2e-runs")
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="also run ours as of REV, or of a folder holding a webhook/ (set-up `base`)",
    )
    parser.add_argument(
        "--python", action="store_true", help="ours' core as Python, not compiled as shipped"
    )
    args = parser.parse_args(argv)
    config = replace(
        QUICK if args.quick else FULL,
        profile=args.profile or args.gil,
        profile_gil=args.gil,
        baseline=args.baseline,
        compiled=not args.python,
    )
    if args.sizes:
        config = replace(config, sizes=_ints(args.sizes), rounds=_ints(args.rounds or "1"))
        if len(config.rounds) != len(config.sizes):
            config = replace(config, rounds=(config.rounds[0],) * len(config.sizes))
    if args.growth_sizes is not None:  # "" runs no growth phase
        config = replace(config, growth_sizes=_ints(args.growth_sizes))
    args.out.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        code = stack.enter_context(e2e_code.committed(compiled=config.compiled))
        base = stack.enter_context(e2e_code.extracted(args.baseline)) if args.baseline else None
        result = run(config, out=args.out, log=lambda m: print(m, flush=True),
                     base_root=base[0] if base else None)  # fmt: skip
    result.update(code=code, unix_time=time.time())
    if base is not None:
        result["baseline_code"] = base[1]
    (args.out / "e2e.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


if __name__ == "__main__":
    sys.exit(main())
