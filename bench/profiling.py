"""Where the time goes: the hot paths at scale, sampled by py-spy (cProfile when it is missing).

    python -m bench.profiling validate --scale 1     # one scenario, in this process

The harness runs each scenario in a fresh process under `py-spy record` (a sampling profiler:
it does not slow the code down the way cProfile does) and keeps only the samples taken inside
the scenario function, so building the cluster does not count. Each function's share is given
twice: *own* (samples where it was running) and *inclusive* (where it was on the stack).

Scenarios: `validate` (the /validate mix of `bench.traffic`), `validate_light` (the same mix
without Gateway- and Namespace-level policies), `cold` (summaries of a sample of the annotated
objects, empty cache), `fanout` (one edit of the busy Gateway's policy: invalidate, recompute).
"""

from __future__ import annotations

import argparse
import copy
import pstats
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import snapshot, synth, traffic
from webhook.core.admission import validation as admission
from webhook.core.engine import memo
from webhook.core.model.refs import key_of
from webhook.core.model.settings import Settings
from webhook.core.state.store import Store

SCENARIOS = ("validate", "validate_light", "cold", "fanout")


# --- the scenarios (run inside the profiled process) ------------------------------------------


def _setup(scale: float, seed: int) -> tuple[synth.Cluster, Store, Any, Settings]:
    from webhook.core.annotation.cache import SummaryCache
    from webhook.shell.process import heap

    heap.tune()  # the collector as `serve` runs it (bench.scale says why)
    settings = Settings()
    cluster = synth.generate(synth.Shape().scaled(scale), seed=seed)
    store = Store()
    cache = SummaryCache(store, settings)
    for obj in cluster.objects():
        store.upsert(obj)
    memo.index_of(store)
    return cluster, store, cache, settings


def scenario_validate(
    cluster: synth.Cluster, store: Store, settings: Settings, light: bool
) -> None:
    # The light mix is ~50x cheaper per review: more of them, for as many samples.
    for category, review in traffic.validate_reviews(cluster, 600 if light else 120):
        if light and category in traffic.HEAVY:
            continue
        admission.validate(review["request"], view=store, settings=settings)


def scenario_cold(cluster: synth.Cluster, cache: Any, sample: int) -> None:
    keys = [key_of(obj) for obj in cluster.annotated()]
    for key in random.Random(5).sample(keys, k=min(sample, len(keys))):
        cache.get(key)


def scenario_fanout(cluster: synth.Cluster, store: Store, cache: Any) -> None:
    assert cluster.busy_policy is not None
    cache.get(key_of(cluster.busy_gateway))  # one entry, so the cache tracks dependencies
    seen: list[frozenset[Any]] = []
    cache.feed.subscribe(lambda key, old, new, affected: seen.append(affected))
    edited = copy.deepcopy(cluster.busy_policy)
    edited["spec"]["default"]["retryOn"] = ["599"]
    store.upsert(edited)
    for key in seen[0]:
        cache.get(key)


def run_scenario(name: str, scale: float, seed: int) -> None:
    cluster, store, cache, settings = _setup(scale, seed)
    started = time.perf_counter()
    if name in ("validate", "validate_light"):
        scenario_validate(cluster, store, settings, light=name == "validate_light")
    elif name == "cold":
        scenario_cold(cluster, cache, sample=4000)
    else:
        scenario_fanout(cluster, store, cache)
    print(f"SCENARIO-SECONDS {time.perf_counter() - started:.3f}", flush=True)


# --- the harness side --------------------------------------------------------------------------


def profile(name: str, *, scale: float, seed: int, top: int = 15) -> dict[str, Any]:
    """Profile one scenario in a fresh process; the top functions by own and inclusive share."""
    if shutil.which("py-spy") or (Path(sys.executable).parent / "py-spy").exists():
        try:
            return _with_py_spy(name, scale=scale, seed=seed, top=top)
        except (subprocess.CalledProcessError, OSError, ValueError) as exc:
            print(f"  py-spy failed ({exc}); falling back to cProfile", file=sys.stderr)
    return _with_cprofile(name, scale=scale, seed=seed, top=top)


def _py_spy() -> str:
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else "py-spy"


def _with_py_spy(name: str, *, scale: float, seed: int, top: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-prof-") as folder:
        raw = Path(folder) / "raw.txt"
        cmd = [_py_spy(), "record", "-r", "250", "-F", "-f", "raw", "-o", str(raw), "--"]
        cmd += [
            sys.executable,
            "-m",
            "bench.profiling",
            name,
            "--scale",
            str(scale),
            "--seed",
            str(seed),
        ]
        done = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            cwd=snapshot.code_root(),
            env=snapshot.env(),
            check=True,
        )
        seconds = _scenario_seconds(done.stdout)
        stacks = _read_collapsed(
            raw.read_text(encoding="utf-8"), f"scenario_{name.removesuffix('_light')}"
        )
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for frames, count in stacks:
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    if not total:
        raise ValueError("no samples inside the scenario")

    def share(counter: Counter[str]) -> list[list[Any]]:
        return [[fn, round(100 * n / total, 1)] for fn, n in counter.most_common(top)]

    return {
        "tool": "py-spy",
        "samples": total,
        "seconds": seconds,
        "own": share(own),
        "inclusive": share(inclusive),
    }


_FRAME = re.compile(r"^(?P<fn>.+?) \((?P<file>[^()]*)\)$")


def _read_collapsed(text: str, entry: str) -> list[tuple[list[str], int]]:
    """Collapsed stacks (`a (file);b (file) 12`) below `entry`, frames named `file:function`."""
    out = []
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [_frame_name(f) for f in stack.split(";")]
        names = [f.rpartition(":")[2] for f in frames]
        if entry not in names:
            continue
        out.append((frames[names.index(entry) + 1 :] or [frames[-1]], int(count)))
    return out


def _frame_name(frame: str) -> str:
    match = _FRAME.match(frame)
    if not match:
        return frame
    fn, path = match["fn"], match["file"].rsplit(":", 1)[0]
    if path == "<string>" and fn.startswith("__create_fn__.<locals>."):
        return f"(dataclass-generated {fn.rsplit('.', 1)[1]})"  # Source, Policy, Loser, ...
    if path == "<string>" and fn == "<lambda>":
        return "(namedtuple-generated __new__)"  # ObjectKey, Rung, GroupKind, ContextResult
    return f"{_short_path(path)}:{fn}"


def _short_path(path: str) -> str:
    """No machine paths in reports: `webhook/core/x.py`, `json/encoder.py`, `aiohttp/web.py`."""
    if not path.startswith("/"):
        return path  # already relative to the working directory (the repository)
    for marker in ("/webhook/", "/bench/", "/site-packages/"):
        if marker in path:
            kept = path.split(marker, 1)[1]
            return kept if marker == "/site-packages/" else marker.strip("/") + "/" + kept
    match = re.search(r"/lib/python3\.\d+/(.*)$", path)
    return match.group(1) if match else Path(path).name


def _scenario_seconds(stdout: str) -> float:
    for line in stdout.splitlines():
        if line.startswith("SCENARIO-SECONDS "):
            return float(line.split()[1])
    return float("nan")


def _with_cprofile(name: str, *, scale: float, seed: int, top: int) -> dict[str, Any]:
    """Fallback, in a subprocess as well; cProfile's overhead favours many small calls."""
    code = (
        "import cProfile, sys; from bench import profiling as p; "
        "pr = cProfile.Profile(); pr.enable(); p.run_scenario(sys.argv[1], float(sys.argv[2]), int(sys.argv[3])); "
        "pr.disable(); pr.dump_stats(sys.argv[4])"
    )
    with tempfile.TemporaryDirectory(prefix="bench-prof-") as folder:
        stats_file = str(Path(folder) / "stats")
        cmd = [sys.executable, "-c", code, name, str(scale), str(seed), stats_file]
        done = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            cwd=snapshot.code_root(),
            env=snapshot.env(),
            check=True,
        )
        stats = pstats.Stats(stats_file)
    entries = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in entries.values())  # tottime of everything
    rows = [(f"{_short_path(f)}:{fn}", v[2], v[3]) for (f, _, fn), v in entries.items()]
    scenario = max(v[3] for v in entries.values())
    own = sorted(rows, key=lambda r: -r[1])[:top]
    inclusive = sorted(rows, key=lambda r: -r[2])[:top]
    return {
        "tool": "cProfile",
        "samples": int(total * 1000),
        "seconds": _scenario_seconds(done.stdout),
        "own": [[fn, round(100 * t / total, 1)] for fn, t, _ in own],
        "inclusive": [[fn, round(100 * c / scenario, 1)] for fn, _, c in inclusive],
    }


def as_text(name: str, result: dict[str, Any]) -> str:
    lines = [
        f"# {name}: {result['tool']}, {result['samples']} samples, scenario {result['seconds']:.2f} s",
        "",
    ]
    for column in ("own", "inclusive"):
        lines.append(f"## {column} time")
        lines += [f"{pct:6.1f}%  {fn}" for fn, pct in result[column]]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profiling")
    parser.add_argument("scenario", choices=SCENARIOS)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--report", action="store_true", help="profile it in a subprocess and print the tables"
    )
    args = parser.parse_args(argv)
    if args.report:
        print(as_text(args.scenario, profile(args.scenario, scale=args.scale, seed=args.seed)))
    else:
        run_scenario(args.scenario, args.scale, args.seed)


if __name__ == "__main__":
    main()
