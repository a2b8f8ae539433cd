"""The end-to-end part's rows turned into figures: medians over rounds, per-round ratios, pooled
latency histograms, and the issue's targets.

Ratios are taken within a round (ours and the no-op measured minutes apart, on the same
machine, the order flipping every round) and then their median over rounds: a neighbour's
burst during one round moves both sides of that round's ratio, not the claim.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bench import promtext
from bench.report import fit_exponent

# The targets (issue 18): name in `figures`, goal, unit, whether higher is better.
TARGETS: tuple[tuple[str, str, float, str, bool], ...] = (
    ("bulk_ratio_worst", "bulk create, ours / no-op (worst of the sizes)", 1.15, "\N{MULTIPLICATION SIGN}", False),
    ("admission_p99_ms_worst", "API server's p99 for our webhook, largest size (bulk, fan-out)", 5.0, " ms", False),
    ("growth_exponent", "cost of one route event vs routes sharing its Service (exponent)", 0.2, "", False),
    ("convergence_objects_per_s", "convergence after one policy edit, default qps, largest size", 200.0, " objects/s", True),
)  # fmt: skip

LATENCY_FIGURES = ("p50_ms", "p99_ms", "mean_ms", "share_within_5ms", "count")


def pooled(hists: Iterable[promtext.Histogram | Mapping[str, Any]]) -> dict[str, Any]:
    """Histograms summed (bounds aligned), with their estimates; dicts are earlier results."""
    buckets: dict[float, float] = defaultdict(float)
    count = total = 0.0
    for h in hists:
        hist = h if isinstance(h, promtext.Histogram) else from_dict(h)
        for le, n in hist.buckets:
            buckets[le] += n
        count += hist.count
        total += hist.sum
    hist = promtext.Histogram(tuple(sorted(buckets.items())), count, total)
    return {
        "count": count,
        "sum_s": total,
        "buckets": [[le if math.isfinite(le) else "+Inf", n] for le, n in hist.buckets],
        "mean_ms": 1000 * hist.mean,
        "p50_ms": 1000 * hist.quantile(0.5),
        "p99_ms": 1000 * hist.quantile(0.99),
        "share_within_5ms": hist.share_at_most(0.005),
    }


def from_dict(data: Mapping[str, Any]) -> promtext.Histogram:
    buckets = tuple((float(le), float(n)) for le, n in data["buckets"])
    return promtext.Histogram(buckets, float(data["count"]), float(data["sum_s"]))


def handler_latency(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Our handler's own latency from the decision log, per endpoint, kind and operation."""
    groups: dict[str, list[float]] = defaultdict(list)
    for r in records:
        # A /mutate line says so; a /validate line is SPEC 8.1's, which has no `endpoint`.
        endpoint = r.get("endpoint", "validate")
        groups[f"{endpoint} {r.get('kind')} {r.get('operation')}"].append(float(r["latencyMs"]))
    out = {}
    for key, values in sorted(groups.items()):
        values.sort()
        out[key] = {
            "count": len(values),
            "median_ms": statistics.median(values),
            "p99_ms": values[min(len(values) - 1, int(0.99 * len(values)))],
            "max_ms": values[-1],
            "sum_ms": sum(values),
        }
    return out


# A route's create as the API server counts it (`verb` as v1.20 writes it, and as later ones do).
_ROUTE_CREATES = ("post httproutes", "create httproutes")


def besides_creates(requests: Mapping[str, int]) -> dict[str, int]:
    """One bulk create's requests (`requests` of a round) without the routes' own creates."""
    return {kind: n for kind, n in requests.items() if kind not in _ROUTE_CREATES}


def other_requests(rows: Sequence[Mapping[str, Any]], size: int, setup: str) -> dict[str, float]:
    """What one set-up made the API server serve in a bulk create besides the routes' creates:
    each verb and resource (`patch services`, `put leases`), the median count over the rounds
    that counted requests (a round without one counts 0); empty where none did."""
    counted = [
        besides_creates(r["requests"])
        for r in rows
        if r["size"] == size and r["setup"] == setup and "requests" in r
    ]
    kinds = sorted({k for c in counted for k in c})
    medians = {k: _median([float(c.get(k, 0)) for c in counted]) for k in kinds}
    return {k: n for k, n in medians.items() if n > 0}


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def figures(
    rows: list[dict[str, Any]], growth: Mapping[str, Any], *, sizes: Iterable[int]
) -> dict[str, float]:
    """Flat named numbers (`results.json` takes them as `e2e_*`)."""
    f: dict[str, float] = {}
    largest = max(sizes, default=0)
    for size in sizes:
        mine = [r for r in rows if r["size"] == size]
        setups = ("none", "noop", "floor", "ours", "base")
        by = {s: those for s in setups if (those := [r for r in mine if r["setup"] == s])}
        p = f"bulk_{size}_"
        for setup, those in by.items():
            f[f"{p}{setup}_s"] = _median([r["wall_s"] for r in those])
            f[f"{p}{setup}_s_min"] = min((r["wall_s"] for r in those), default=math.nan)
            f[f"{p}{setup}_s_max"] = max((r["wall_s"] for r in those), default=math.nan)
            for proc in ("kube-apiserver", "etcd", "webhook"):
                cpu = [r["cpu_s"][proc] for r in those if proc in r["cpu_s"]]
                if cpu:
                    f[f"{p}{setup}_cpu_{proc.replace('-', '_')}_s"] = _median(cpu)
            if setup != "none":
                _latency(f, f"{p}{setup}_admit_", [r["admission"]["admit"] for r in those])
            _latency(f, f"{p}{setup}_lag_", [r["loop_lag"] for r in those if "loop_lag" in r])
        for name, num, den in (
            ("ours_vs_noop", "ours", "noop"),
            ("noop_vs_none", "noop", "none"),
            ("floor_vs_noop", "floor", "noop"),  # what annotating and watching cost, at least
            ("ours_vs_floor", "ours", "floor"),
            ("ours_vs_base", "ours", "base"),  # a change against its baseline (`--baseline`)
        ):
            ratios = _round_ratios(mine, num, den)
            if not ratios:
                continue
            f[f"{p}{name}"] = _median(ratios)
            f[f"{p}{name}_min"] = min(ratios, default=math.nan)
            f[f"{p}{name}_max"] = max(ratios, default=math.nan)
        f.update(_fanouts(by.get("ours", []), size))
        f.update(_fanouts(by.get("floor", []), size, setup="floor_"))
        if "base" in by:
            f.update(_fanouts(by["base"], size, setup="base_"))
    if growth:
        f["growth_exponent"] = growth["exponent"]
        for point in growth["points"]:
            f[f"growth_{point['routes']}_event_cpu_ms"] = point["event_cpu_ms"]
    bulk = [f[f"bulk_{s}_ours_vs_noop"] for s in sizes if f"bulk_{s}_ours_vs_noop" in f]
    f["bulk_ratio_worst"] = max(bulk, default=math.nan)
    p99 = [f.get(f"bulk_{largest}_ours_admit_p99_ms", math.nan),
           f.get(f"fanout_{largest}_admit_p99_ms", math.nan)]  # fmt: skip
    f["admission_p99_ms_worst"] = max((v for v in p99 if math.isfinite(v)), default=math.nan)
    f["convergence_objects_per_s"] = f.get(f"fanout_{largest}_objects_per_s", math.nan)
    for key, _, goal, _, higher in TARGETS:
        value = f.get(key, math.nan)
        if math.isfinite(value):
            f[f"target_met_{key}"] = int(value >= goal if higher else value <= goal)
    return f


def _round_ratios(rows: list[dict[str, Any]], num: str, den: str) -> list[float]:
    by_round: dict[int, dict[str, float]] = defaultdict(dict)
    for r in rows:
        by_round[r["round"]][r["setup"]] = r["wall_s"]
    return [t[num] / t[den] for t in by_round.values() if num in t and den in t]


def _fanouts(ours_rows: list[dict[str, Any]], size: int, setup: str = "") -> dict[str, float]:
    """Figures of the fan-outs of ours (or, `setup="base_"`, of the baseline's code; with
    `"floor_"`, the floor's patches of every route at ours' default limits)."""
    f: dict[str, float] = {}
    for key, prefix in (
        ("fanout", f"{setup}fanout_{size}_"),
        ("fanout_fast", f"{setup}fanout_fast_{size}_"),
    ):
        runs = [r[key] for r in ours_rows if key in r]
        if not runs:
            continue
        f[f"{prefix}qps"] = runs[0]["qps"]
        for k in ("seconds", "objects_per_s", "first_s", "half_s", "policy_write_s"):
            f[f"{prefix}{k}"] = _median([run[k] for run in runs])
        for proc in ("kube-apiserver", "etcd", "webhook"):
            f[f"{prefix}cpu_{proc.replace('-', '_')}_s"] = _median(
                [run["cpu_s"][proc] for run in runs]
            )
        if all("reconciler" in run for run in runs):
            for k in ("patches", "skips", "errors", "retries"):
                f[f"{prefix}reconcile_{k}"] = _median([run["reconciler"][k] for run in runs])
        _latency(f, f"{prefix}admit_", [run["admission"]["admit"] for run in runs])
        _latency(f, f"{prefix}lag_", [run["loop_lag"] for run in runs if "loop_lag" in run])
    return f


def _latency(f: dict[str, float], prefix: str, hists: list[Mapping[str, Any]]) -> None:
    """The pooled histograms' figures under `prefix` (none when there is no histogram: a run
    from before ours' loop was probed)."""
    if hists:
        found = pooled(hists)
        for k in LATENCY_FIGURES:
            f[f"{prefix}{k}"] = found[k]


def growth_exponent(points: Sequence[Mapping[str, Any]]) -> float:
    return fit_exponent([p["routes"] for p in points], [p["event_cpu_ms"] for p in points])


def describe_row(row: Mapping[str, Any]) -> str:
    adm = row["admission"]["admit"]
    text = (
        f"{row['size']} routes, round {row['round']}, {row['setup']}: {row['wall_s']:.2f} s"
        f"; API server CPU {row['cpu_s'].get('kube-apiserver', math.nan):.1f} s"
    )
    if adm["count"]:
        text += f"; admit p50/p99 {adm['p50_ms']:.1f}/{adm['p99_ms']:.1f} ms ({adm['count']:.0f})"
    if "webhook" in row["cpu_s"]:
        text += f"; webhook CPU {row['cpu_s']['webhook']:.1f} s"
    for key in ("fanout", "fanout_fast"):
        if key in row:
            run = row[key]
            text += f"; {key} {run['seconds']:.1f} s ({run['objects_per_s']:.0f}/s at qps {run['qps']:g})"
    return text


def describe_figures(f: Mapping[str, float]) -> str:
    parts = [f"{key} {f[key]:.3g}" for key, *_ in TARGETS if key in f]
    parts += [
        f"{key} {value:.3g}"
        for key, value in f.items()
        if key.endswith(("ours_vs_base", "floor_vs_noop", "ours_vs_floor"))
    ]
    return "targets: " + ", ".join(parts)
