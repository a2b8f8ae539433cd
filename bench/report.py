"""Results: the flat `results.json`, the targets verdict, the plot and `docs/performance.md`.

Every part writes its own file in the output folder (`http.json`, `scale.json`, `growth.json`,
`profile.json`, `choices.json`); `results.json` is their flat union of named numbers, and the
page and the plot are made from those files only, so they always show what was measured.
"""

from __future__ import annotations

import json
import math
import platform
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SEPARATE_PARTS = frozenset({"e2e"})  # run alone; their page section is spliced in
TIMES = "\N{MULTIPLICATION SIGN}"
DOCS = ROOT / "docs"
GROWTH_COSTS: dict[str, str] = {
    "load_s": "load into the store",
    "cold_summaries_s": "cold summaries, all objects",
    "cached_lookup_median_us": "cached summary lookup",
    "validate_median_ms": "validation decision, median",
    "validate_p99_ms": "validation decision, p99",
    "fanout_s": "fan-out of one busy-Gateway policy change",
    "state_rss_mb": "memory held (peak RSS above the interpreter's)",
}


@dataclass(frozen=True, slots=True)
class Target:
    key: str  # results.json name of the measured figure
    what: str
    goal: float
    unit: str
    higher_is_better: bool = False

    def met(self, value: float) -> bool:
        return value >= self.goal if self.higher_is_better else value <= self.goal


TARGETS: tuple[Target, ...] = (
    Target("http_validate_throughput_ratio", "/validate throughput at saturation vs no-op", 0.8, "x", True),
    Target("http_mutate_throughput_ratio", "/mutate throughput at saturation vs no-op", 0.7, "x", True),
    Target("http_validate_p99_ratio", "/validate p99 at the fixed rate vs no-op's p99", 2.0, "x"),
    Target("scale_cold_summaries_s", "cold summaries for all objects, default scale", 5.0, "s"),
    Target("scale_cached_lookup_median_us", "cached summary lookup (median)", 50.0, "µs"),
    Target("scale_validate_p99_ms", "validation decision p99, default scale", 1.0, "ms"),
    Target("scale_fanout_s_per_1000_routes", "one policy change's fan-out, per 1,000 affected routes", 0.5, "s"),
    Target("scale_peak_rss_mb", "peak RSS, default scale", 300.0, "MB"),
    *(
        Target(f"growth_exponent_{cost}", f"growth exponent: {label}", 1.15, "")
        for cost, label in GROWTH_COSTS.items()
    ),
)  # fmt: skip


# --- results.json ------------------------------------------------------------------------------


def load_parts(out: Path) -> dict[str, Any]:
    parts = {}
    for name in ("http", "scale", "memory", "growth", "profile", "choices", "e2e"):
        path = out / f"{name}.json"
        if path.exists():
            parts[name] = json.loads(path.read_text(encoding="utf-8"))
    return parts


def flatten(parts: Mapping[str, Any]) -> dict[str, float]:
    """Every named number of every part; per-scale figures as `scale_*` and `growth_<k>x_*`."""
    flat: dict[str, float] = {
        "machine_cpus": _cpus(),
        "python_version": float(platform.python_version_tuple()[1]) / 100 + 3,
    }
    if "http" in parts:
        flat.update(_numbers({k: v for k, v in parts["http"].items() if k.startswith("http_")}))
    if "scale" in parts:
        flat.update(_numbers(parts["scale"], prefix="scale_"))
    if "memory" in parts:
        flat.update(_numbers(parts["memory"], prefix="memory_"))
        for part in parts["memory"]["parts"]:
            flat[f"memory_{part['name']}_bytes_per_object"] = (
                part["bytes"] / parts["memory"]["objects"]
            )
    if "growth" in parts:
        for run in parts["growth"]["runs"]:
            label = _scale_label(run["scale"])
            flat.update(
                _numbers(
                    {c: run[c] for c in (*GROWTH_COSTS, "calibration_ms") if c in run},
                    prefix=f"growth_{label}_",
                )
            )
        flat.update(_numbers(parts["growth"]["exponents"], prefix="growth_exponent_"))
    if "choices" in parts:
        flat.update(_numbers(parts["choices"], prefix="choice_"))
    if "e2e" in parts:
        flat.update(_numbers(parts["e2e"].get("figures", {}), prefix="e2e_"))
    # The end-to-end part is run on its own schedule (`make bench-e2e`) and says which code it
    # measured in its own section: it does not make the other parts' code inconsistent.
    together = [p for name, p in parts.items() if name not in SEPARATE_PARTS]
    codes = {p["code"]["digest"] for p in together if isinstance(p, Mapping) and "code" in p}
    changed = any(
        p.get("code", {}).get("changed_during_part") for p in together if isinstance(p, Mapping)
    )
    flat["code_consistent"] = int(len(codes) <= 1 and not changed)
    for target in TARGETS:
        if target.key in flat:
            flat[f"target_met_{target.key}"] = int(target.met(flat[target.key]))
    return flat


def _numbers(values: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    return {
        f"{prefix}{k}": v
        for k, v in values.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


def _scale_label(k: float) -> str:
    return f"{k:g}x".replace(".", "_")


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


def fit_exponent(scales: list[float], costs: list[float]) -> float:
    """Least-squares slope of log(cost) on log(scale): 1.0 is linear, 0 is flat."""
    points = [(math.log(s), math.log(c)) for s, c in zip(scales, costs, strict=True) if c > 0]
    if len(points) < 2:
        return float("nan")
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var


# Each time cost's CPU-time twin (the process's own CPU time, which a neighbour cannot inflate).
CPU_TWIN = {
    "load_s": "load_cpu_s",
    "cold_summaries_s": "cold_summaries_cpu_s",
    "cached_lookup_median_us": "cached_lookup_cpu_us",
    "validate_median_ms": "validate_median_cpu_ms",
    "validate_p99_ms": "validate_p99_cpu_ms",
    "fanout_s": "fanout_cpu_s",
}


def growth_exponents(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Per cost: the exponent fitted on CPU time (the claim; memory as is) and on wall time."""
    scales = [r["scale"] for r in runs]
    out = {}
    for cost in GROWTH_COSTS:
        twin = CPU_TWIN.get(cost, cost)
        if not all(cost in r and twin in r for r in runs):
            continue
        out[cost] = fit_exponent(scales, [r[twin] for r in runs])
        out[f"{cost}_wall"] = fit_exponent(scales, [r[cost] for r in runs])
    return out


# --- the plot ----------------------------------------------------------------------------------


def plot(parts: Mapping[str, Any], flat: Mapping[str, float], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    mixes = [
        m for m in ("validate", "validate_light", "mutate") if f"http_{m}_throughput_ratio" in flat
    ]
    if mixes:
        ax = axes[0]
        ratios = [flat[f"http_{m}_throughput_ratio"] for m in mixes]
        err = [
            [
                r - flat[f"http_{m}_throughput_ratio_min"]
                for m, r in zip(mixes, ratios, strict=True)
            ],
            [
                flat[f"http_{m}_throughput_ratio_max"] - r
                for m, r in zip(mixes, ratios, strict=True)
            ],
        ]
        ax.bar(mixes, ratios, yerr=err, color=["#4c72b0", "#8da0cb", "#55a868"], capsize=4)
        for x, goal in ((0, 0.8), (2, 0.7)):
            if x < len(mixes):
                ax.hlines(goal, x - 0.4, x + 0.4, colors="crimson", linestyles="--")
        ax.set_yscale("log")
        ax.set_title(
            "Throughput at saturation / no-op's\n(median of rounds, min-max; dashed: target)"
        )
        for i, r in enumerate(ratios):
            ax.annotate(f"{r:.3f}", (i, r), ha="center", va="bottom", fontsize=8)
        ax = axes[1]
        width = 0.2
        for j, (label, key) in enumerate((("no-op p50", "http_noop_{m}_p50_ms"), ("ours p50", "http_{m}_p50_ms"),
                                          ("no-op p99", "http_noop_{m}_p99_ms"), ("ours p99", "http_{m}_p99_ms"))):  # fmt: skip
            ax.bar(
                [i + (j - 1.5) * width for i in range(len(mixes))],
                [flat[key.format(m=m)] for m in mixes],
                width,
                label=label,
            )
        ax.set_xticks(range(len(mixes)), mixes)
        ax.set_yscale("log")
        ax.set_ylabel("ms")
        ax.set_title(f"Latency at {flat.get('http_offered_rps', 500):.0f} requests/s offered")
        ax.legend(fontsize=8)
    growth = parts.get("growth")
    if growth:
        ax = axes[2]
        runs = growth["runs"]
        scales = [r["scale"] for r in runs]
        base = runs[0]
        for cost, label in GROWTH_COSTS.items():
            twin = CPU_TWIN.get(cost, cost)  # what the exponent is fitted on
            if all(twin in r and r[twin] > 0 for r in runs):
                rel = [r[twin] / base[twin] for r in runs]
                ax.plot(
                    scales,
                    rel,
                    marker="o",
                    label=f"{label} ({growth['exponents'].get(cost, float('nan')):.2f})",
                )
        ax.plot(
            scales,
            [s / scales[0] for s in scales],
            color="grey",
            linestyle=":",
            label="linear (1.00)",
        )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("cluster size (x default)")
        ax.set_ylabel(f"cost / cost at {scales[0]:g}x (CPU time; memory)")
        ax.set_title("Growth (fitted exponent)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --- the page ----------------------------------------------------------------------------------


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if unit == "x":
        return f"{value:.3g}{TIMES}" if value < 10 else f"{value:.1f}{TIMES}"
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{text} {unit}".strip()


def targets_table(flat: Mapping[str, float]) -> list[str]:
    lines = ["| target | goal | measured | met? | off by |", "|---|---|---|---|---|"]
    for t in TARGETS:
        value = flat.get(t.key)
        goal = ("≥ " if t.higher_is_better else "≤ ") + _fmt(t.goal, t.unit)
        verdict = "—" if value is None else ("**yes**" if t.met(value) else "**no**")
        gap = ""
        if value is not None and not t.met(value) and value > 0 and t.goal > 0:
            factor = t.goal / value if t.higher_is_better else value / t.goal
            gap = f"{factor:,.1f}{TIMES}" if factor < 100 else f"{factor:,.0f}{TIMES}"
        lines.append(f"| {t.what} | {goal} | {_fmt(value, t.unit)} | {verdict} | {gap} |")
    return lines


def write_page(
    parts: Mapping[str, Any], flat: Mapping[str, float], path: Path, *, plotted: bool
) -> None:
    from bench import page

    path.write_text(
        page.render(parts, flat, targets_table(flat), plotted=plotted), encoding="utf-8"
    )


def write_all(
    out: Path,
    *,
    docs: bool,
    log: Callable[[str], None] = print,
    only: Sequence[str] = (),
) -> dict[str, float]:
    """results.json, then the page and the plot; a run of separate parts alone (`only`)
    rewrites only their sections of the page, leaving the rest as the last full run wrote it."""
    parts = load_parts(out)
    flat = flatten(parts)
    (out / "results.json").write_text(
        json.dumps(flat, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )
    log(f"wrote {_rel(out / 'results.json')} ({len(flat)} figures)")
    if docs and only and set(only) <= SEPARATE_PARTS:
        from bench import page_e2e

        page = DOCS / "performance.md"
        if "e2e" in parts:
            text = page_e2e.splice(page.read_text(encoding="utf-8"), page_e2e.section(parts["e2e"]))
            page.write_text(text, encoding="utf-8")
            log(f"wrote the end-to-end section of {_rel(page)} (the rest left as it was)")
        return flat
    if docs:
        plotted = plot(parts, flat, DOCS / "performance.png")
        write_page(parts, flat, DOCS / "performance.md", plotted=plotted)
        log(
            f"wrote {_rel(DOCS / 'performance.md')}"
            + (" and performance.png" if plotted else " (no plot: matplotlib missing)")
        )
    else:
        plot(parts, flat, out / "performance.png")
    return flat


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)
