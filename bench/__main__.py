"""`python -m bench` (`make bench`): every benchmark, then results.json, the plot and the page.

    python -m bench                  # everything, about 8 minutes on 2 cores
    python -m bench --quick          # everything, small sizes and short runs (about 3 minutes)
    python -m bench http scale       # some parts only (memory, growth, profile, choices, report)
    python -m bench e2e              # the end-to-end part, on a real kube-apiserver (~20 min)
    python -m bench --python         # the core run as Python (bench.e2e has its own --python)

The parts time the core as the image ships it: compiled with mypyc (`snapshot.compiled_copy`,
about 2 minutes before the first part), but for the profiles, which run it as Python: their
sampler sees Python's frames only. Every measuring process reports which build it imported,
and a part that timed another build than it was given stops the run.

Each part writes `<out>/<part>.json`; then `<out>/results.json` is rebuilt from every part file
there, and (full runs only) `docs/performance.md` and `docs/performance.png` with it. Quick runs
write to `bench/out/quick/` and leave the docs alone: their numbers are for checking the
harness, not for quoting. The end-to-end part (`e2e`, `make bench-e2e`) is not among the
default parts: it runs a real control plane for a long while. Run alone, it rewrites only its
own section of the page.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench import report, snapshot

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("http", "scale", "memory", "growth", "profile", "choices")
EXTRA_PARTS = ("e2e",)  # run only when named
# Run on the core as Python: py-spy samples Python's frames, and a compiled function has none.
PYTHON_PARTS = ("profile",)
# The end-to-end part builds the code it measures itself, compiled too (`bench.e2e_code`).


@dataclass(frozen=True, slots=True)
class Plan:
    http_scale: float
    http_rounds: int
    saturation_seconds: float
    rate_seconds: float
    scale: float
    reviews: int
    lookups: int
    fanout_repeats: int
    growth_scales: tuple[float, ...]
    growth_reviews: int
    profile_scale: float
    choices_rounds: int


FULL = Plan(
    http_scale=0.1,
    http_rounds=3,
    saturation_seconds=3,
    rate_seconds=4,
    scale=1.0,
    reviews=200,
    lookups=20_000,
    fanout_repeats=3,
    growth_scales=(1.0, 2.0, 4.0, 8.0),
    growth_reviews=40,
    profile_scale=1.0,
    choices_rounds=7,
)
QUICK = Plan(
    http_scale=0.02,
    http_rounds=1,
    saturation_seconds=1,
    rate_seconds=2,
    scale=0.1,
    reviews=60,
    lookups=5_000,
    fanout_repeats=1,
    growth_scales=(0.05, 0.1, 0.2, 0.4),
    growth_reviews=30,
    profile_scale=0.1,
    choices_rounds=3,
)


def log(message: str) -> None:
    print(message, flush=True)


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }


def run_scale(
    k: float, *, seed: int, reviews: int, lookups: int, fanout_repeats: int
) -> dict[str, Any]:
    """One size in a fresh process: its peak RSS is its own."""
    cmd = ["-m", "bench.scale", "--scale", str(k), "--seed", str(seed)]
    cmd += [
        "--reviews",
        str(reviews),
        "--lookups",
        str(lookups),
        "--fanout-repeats",
        str(fanout_repeats),
    ]
    return snapshot.json_of(cmd)


def part_http(plan: Plan, seed: int) -> dict[str, Any]:
    from bench import http_load

    config = http_load.HttpConfig(
        warmup_seconds=1,
        scale=plan.http_scale,
        seed=seed,
        rounds=plan.http_rounds,
        saturation_seconds=plan.saturation_seconds,
        rate_seconds=plan.rate_seconds,
    )
    if plan is QUICK:
        config = replace(config, distinct_bodies=200, warmup_seconds=1, compare_uvloop=False)
    return http_load.run(config, log=log)


def part_scale(plan: Plan, seed: int) -> dict[str, Any]:
    result = run_scale(
        plan.scale,
        seed=seed,
        reviews=plan.reviews,
        lookups=plan.lookups,
        fanout_repeats=plan.fanout_repeats,
    )
    log(
        f"  {plan.scale:g}x: load {result['load_s']:.2f} s, cold summaries {result['cold_summaries_s']:.2f} s, "
        f"cached lookup {result.get('cached_lookup_median_us', float('nan')):.1f} µs, "
        f"validate p50/p99 {result['validate_median_ms']:.2f}/{result['validate_p99_ms']:.1f} ms, "
        f"fan-out {result['fanout_s']:.2f} s ({result['fanout_affected_routes']} routes), "
        f"peak RSS {result['peak_rss_mb']:.0f} MB"
    )
    return result


def part_memory(plan: Plan, seed: int) -> dict[str, Any]:
    """A converged leader's state weighed part by part, in a fresh process (`bench.memory`)."""
    result = snapshot.json_of(
        ["-m", "bench.memory", "--scale", str(plan.scale), "--seed", str(seed)]
    )
    largest = max(result["parts"], key=lambda part: part["bytes"])
    log(
        f"  {plan.scale:g}x: {result['counted_mb']:.0f} MB counted of {result['state_rss_mb']:.0f} MB held; "
        f"largest part {largest['name']} {largest['bytes'] / 1e6:.0f} MB"
    )
    return result


def part_growth(plan: Plan, seed: int, done: dict[str, Any]) -> dict[str, Any]:
    runs = []
    for k in plan.growth_scales:
        previous = done.get("scale")
        if previous is not None and previous["scale"] == k:
            runs.append(previous)  # this invocation's scale run is this size's: not run twice
            continue
        repeats = 1 if k > plan.scale else plan.fanout_repeats
        result = run_scale(
            k, seed=seed, reviews=plan.growth_reviews, lookups=plan.lookups, fanout_repeats=repeats
        )
        log(
            f"  {k:g}x: {result['objects']} objects, cold {result['cold_summaries_s']:.1f} s, "
            f"fan-out {result['fanout_s']:.2f} s, peak RSS {result['peak_rss_mb']:.0f} MB, "
            f"calibration {result['calibration_ms']:.1f} ms"
        )
        runs.append(result)
    exponents = report.growth_exponents(runs)
    log(
        "  exponents: "
        + ", ".join(f"{k} {v:.2f}" for k, v in exponents.items() if not k.endswith("_wall"))
    )
    return {"runs": runs, "exponents": exponents}


def part_profile(plan: Plan, seed: int, out: Path) -> dict[str, Any]:
    from bench import profiling

    results = {}
    for name in profiling.SCENARIOS:
        result = profiling.profile(name, scale=plan.profile_scale, seed=seed)
        results[name] = {**result, "scale": plan.profile_scale}
        (out / f"profile-{name}.txt").write_text(profiling.as_text(name, result), encoding="utf-8")
        top = ", ".join(f"{fn} {pct}%" for fn, pct in result["own"][:3])
        log(f"  {name}: {result['seconds']:.1f} s, {result['samples']} samples; top own: {top}")
    return {"scenarios": results}


def part_choices(plan: Plan, seed: int) -> dict[str, Any]:
    cmd = ["-m", "bench.choices", "--seed", str(seed), "--rounds", str(plan.choices_rounds)]
    result = snapshot.json_of(cmd)
    log("  " + ", ".join(f"{k} {v:.2f}" for k, v in result.items() if k.endswith("speedup")))
    return result


def part_e2e(plan: Plan, out: Path) -> dict[str, Any]:
    """The committed webhook (`bench.e2e_code`): this part outlasts many edits of the tree.
    Its core compiled as the image builds it (`E2EConfig.compiled`)."""
    from bench import e2e, e2e_code

    config = e2e.QUICK if plan is QUICK else e2e.FULL
    with e2e_code.committed(compiled=config.compiled) as code:
        result = e2e.run(config, out=out, log=log)
    result["code"] = code
    return result


def _exit_on_sigterm() -> None:
    """SIGTERM ends a run as Ctrl-C does, through every `finally`: the servers, the API server
    and etcd that the parts started are stopped with it. (By default it ended the interpreter
    at once, and they were left running.)"""
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


def main(argv: list[str] | None = None) -> int:
    _exit_on_sigterm()
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "parts",
        nargs="*",
        metavar="PART",
        help=f"any of {', '.join(PARTS + EXTRA_PARTS)}, report (default: all but {', '.join(EXTRA_PARTS)})",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, short runs (about 3 minutes)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--out", type=Path, help="output folder (default bench/out, or bench/out/quick)"
    )
    parser.add_argument("--no-docs", action="store_true", help="do not rewrite docs/performance.*")
    parser.add_argument(
        "--http-scale", type=float, help="size of the HTTP webhook's state (x default)"
    )
    parser.add_argument("--growth-scales", help="comma-separated sizes, e.g. 1,2,4,8")
    parser.add_argument(
        "--no-snapshot",
        action="store_true",
        help="measure the working tree live (it may change mid-run)",
    )
    parser.add_argument(
        "--python",
        action="store_true",
        help="run the core as Python in every part (by default compiled as the image builds"
        " it); the end-to-end part has its own flag: python -m bench.e2e --python",
    )
    args = parser.parse_args(argv)
    unknown = set(args.parts) - {*PARTS, *EXTRA_PARTS, "report"}
    if unknown:
        parser.error(f"unknown part(s): {', '.join(sorted(unknown))}")
    plan = QUICK if args.quick else FULL
    if args.http_scale is not None:
        plan = replace(plan, http_scale=args.http_scale)
    if args.growth_scales:
        plan = replace(plan, growth_scales=tuple(float(x) for x in args.growth_scales.split(",")))
    out = args.out or (ROOT / "bench" / "out" / ("quick" if args.quick else ""))
    out.mkdir(parents=True, exist_ok=True)
    parts = [p for p in (args.parts or PARTS) if p != "report"]
    started = time.perf_counter()
    done: dict[str, Any] = {}
    frozen = None if args.no_snapshot or not parts else snapshot.take()
    measured = snapshot.identity()  # the snapshot's code (or the tree's, live)
    roots = {"python": snapshot.code_root()}
    try:
        if not args.python and set(parts) - {*PYTHON_PARTS, *EXTRA_PARTS}:
            log("== compiling the core with mypyc, as the image builds it")
            roots["compiled"] = snapshot.compiled_copy(roots["python"])
        _run_parts(parts, plan, args.seed, out, done, roots)
    finally:
        if "compiled" in roots:
            snapshot.drop(roots["compiled"])
        if frozen is not None:
            snapshot.drop(frozen)
    if parts and snapshot.identity(snapshot.REPO)["digest"] != measured["digest"]:
        log(
            "   note: webhook/ in the working tree changed during the run; the run measured the snapshot taken at its start"
        )
    report.write_all(out, docs=not args.quick and not args.no_docs, log=log, only=parts)
    log(f"== done in {time.perf_counter() - started:.0f} s")
    return 0


def _run_parts(
    parts: list[str],
    plan: Plan,
    seed: int,
    out: Path,
    done: dict[str, Any],
    roots: dict[str, Path],
) -> None:
    """Each part on the code of its build (`roots`: `python`, and `compiled` unless --python)."""
    for part in parts:
        core = "python" if part in PYTHON_PARTS or "compiled" not in roots else "compiled"
        log(f"== {part}" if part in EXTRA_PARTS else f"== {part} (core {core})")
        with snapshot.measuring(roots[core]):
            result = _run_part(part, plan, seed, out, done)
            result.setdefault("code", {**snapshot.identity(), "core": core})  # e2e names its own
        _check_core(part, result, core)
        done[part] = result
        (out / f"{part}.json").write_text(
            json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8"
        )


def _check_core(part: str, result: dict[str, Any], expected: str) -> None:
    """Stop the run if a measuring process imported another build of the core than the part
    was given (`core` in what it reported; `growth` reports per size): its numbers would be
    put on the page under the wrong name."""
    reported = [result, *result.get("runs", [])]
    found = {r["core"] for r in reported if isinstance(r, dict) and "core" in r}
    if found - {expected}:
        raise RuntimeError(
            f"part {part} was to time the core {expected}, and its processes ran it "
            f"{', '.join(sorted(found))}: nothing of it is written"
        )


def _run_part(part: str, plan: Plan, seed: int, out: Path, done: dict[str, Any]) -> dict[str, Any]:
    t = time.perf_counter()
    if part == "http":
        result = part_http(plan, seed)
    elif part == "scale":
        result = part_scale(plan, seed)
    elif part == "memory":
        result = part_memory(plan, seed)
    elif part == "growth":
        result = part_growth(plan, seed, done)
    elif part == "profile":
        result = part_profile(plan, seed, out)
    elif part == "e2e":
        result = part_e2e(plan, out)
    else:
        result = part_choices(plan, seed)
    result["wall_s"] = time.perf_counter() - t
    result["unix_time"] = time.time()
    log(f"   {part} took {result['wall_s']:.0f} s")
    return result


if __name__ == "__main__":
    sys.exit(main())
