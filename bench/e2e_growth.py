"""The cost of one route event as the routes sharing one Service grow (issue 18, target 3).

Ours runs registered and leading; the routes are filled up to each size, then single routes
are created one at a time, each once the previous one's work is over. A route event costs ours
its /mutate, the watch event, the route's reconcile (a skip: /mutate already set the value),
and the Service's: its value has a context per route, is recomputed, patched, and the patch
comes back through /mutate. Its cost is ours' CPU time from the create until the process is
quiet again, less what ours spends idle (lease renewals, metrics) over as long; the exponent
is fitted on the mean over the probes. The time is the scheduler's account of ours' threads, to
the nanosecond (`e2e_procs.thread_cpu_seconds`); the 10 ms ticks of `/proc/<pid>/stat` only
tell when the work is over (no tick for `QUIET_S`). Read at ticks, an event of a few
milliseconds counted 0 or 10 ms, and the median over the probes was one of the two.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from bench import e2e_procs, e2e_summary, e2e_world

if TYPE_CHECKING:
    from bench.e2e import Bench

QUIET_S = 0.4  # no CPU tick for this long after the create: the event's work is over
IDLE_S = 4.0  # how long ours' idle CPU rate is measured at each size


def run(
    bench: Bench, sizes: Sequence[int], *, probes: int, log: Callable[[str], None]
) -> dict[str, Any]:
    if not sizes:
        return {}
    from bench.e2e import reconcile_counts

    bench.clear_routes()
    # Every decision logged (not the default): the Service's /mutate time, one call at a time.
    ours = bench.start_ours("--log-decisions", "all")
    points: list[dict[str, Any]] = []
    try:
        bench.register(ours.endpoint)
        present = 0
        for size in sizes:
            if size > present:
                bench.create_routes([f"r-{i}" for i in range(present, size)])
                present = size
            bench.wait_idle(ours, timeout=900)
            assert ours.pid is not None
            idle = _idle_rate(ours.pid)
            log_at = ours.log_size()
            costs = []
            for k in range(probes):
                before = sum(reconcile_counts(ours.samples()))
                costs.append(_probe(bench, ours, f"probe-{size}-{k}", before, idle))
            handler = e2e_summary.handler_latency(ours.decisions(log_at))
            point = {
                "routes": size,
                "event_cpu_ms": 1000 * statistics.fmean(costs),
                "event_cpu_ms_median": 1000 * statistics.median(costs),
                "idle_cpu_per_s_ms": 1000 * idle,
                "probes": len(costs),
                "handler": handler,
            }
            points.append(point)
            present += probes
            log(
                f"  growth {size} routes: {point['event_cpu_ms']:.1f} ms of CPU per route event "
                f"(median {point['event_cpu_ms_median']:.1f}); handler {_brief(handler)}"
            )
    finally:
        bench.unregister()
        ours.stop()
        bench.clear_routes()
    exponent = e2e_summary.growth_exponent(points)
    log(f"  growth exponent: {exponent:.2f}")
    return {"points": points, "exponent": exponent, "quiet_s": QUIET_S}


def _idle_rate(pid: int) -> float:
    """CPU seconds per second ours spends with nothing to do."""
    started, cpu = time.monotonic(), e2e_procs.thread_cpu_seconds(pid)
    time.sleep(IDLE_S)
    return (e2e_procs.thread_cpu_seconds(pid) - cpu) / (time.monotonic() - started)


def _probe(bench: Bench, ours: e2e_procs.Ours, name: str, before: float, idle: float) -> float:
    """CPU seconds ours spent on one route's creation and everything it set off."""
    from bench.e2e import reconcile_counts

    assert ours.pid is not None
    cpu, exact = e2e_procs.cpu_seconds(ours.pid), e2e_procs.thread_cpu_seconds(ours.pid)
    started = time.monotonic()
    bench.cluster.kubectl("create", "-f", "-", input=json.dumps(e2e_world.route(name)))
    deadline = started + 60
    last, last_change = cpu, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now, value = time.monotonic(), e2e_procs.cpu_seconds(ours.pid)
        if value != last:
            last, last_change = value, now
        elif now - last_change >= QUIET_S:
            # Quiet; the route's reconcile (a skip) and the Service's patch must both be done.
            # Reading the counters costs ours a little CPU: read only after the time is taken.
            spent = e2e_procs.thread_cpu_seconds(ours.pid) - exact
            if sum(reconcile_counts(ours.samples())) - before >= 2:
                return max(0.0, spent - idle * (time.monotonic() - started))
            last_change = time.monotonic()
    raise TimeoutError(f"{name}: ours did not finish its work within 60 s")


def _brief(handler: dict[str, Any]) -> str:
    return ", ".join(
        f"{key.split()[1].split('.')[0]} {key.split()[2]} {v['median_ms']:.2f} ms"
        for key, v in handler.items()
    )
