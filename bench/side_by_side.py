"""Two versions of the engine in one process: a change's ratio on admission decisions.

    python -m bench.side_by_side --baseline REV                  # the validation mix
    python -m bench.side_by_side --baseline REV --mix mutate --reps 10

On this shared machine a neighbour's burst moves a whole process's timings by half (the same
code's Gateway- and Namespace-wide reviews had a median of 5.5 ms in one process and 8.1 ms in
another, minutes apart), so processes run in turn resolve a change of a fifth at best. Here the
baseline's `webhook/` (`git archive` of REV: nothing in the repository is written) and this
tree's are imported into one process, each as a set of modules of its own, and each gets a
store of the same synthetic cluster as `bench.scale` makes it: loaded, every summary computed,
then converged as a leader's state. Each review of the mix (`bench.traffic`) is then decided by
one version and by the other, `--reps` times, alternating which goes first, and each keeps its
best time: a burst meets both within a millisecond. Before each validation the reach kept below
rungs is put back as it was, so that every review walks its target's tree as a first review
does (`--reach-known`: once walked, kept).

The two versions' answers (the AdmissionReview responses, as encoded) must be the same for every
review: a difference is printed and the run fails, since a change of behaviour is not a speed-up.
Prints and writes (`bench/out/side_by_side.json`) the ratio this tree / baseline per review:
the median over the mix, over the Gateway- and Namespace-wide reviews (`traffic.HEAVY`) and over
the twelve that the baseline took longest on among the others.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import bench
from bench import scale, snapshot, traffic
from webhook.shell.process import heap  # gc as `serve` runs it: one collector for both

OUT = snapshot.REPO / "bench" / "out" / "side_by_side.json"
SLOWEST = 12  # the light reviews slowest in the baseline, reported apart from the wide ones

# What a version is driven through, by its module paths. `bench.scale` is imported anew for
# each version too: its phases (load, converge, the reach put back) then run that version's code.
_MODULES = {
    "validation": "webhook.core.admission.validation",
    "mutation": "webhook.core.admission.mutation",
    "reviews": "webhook.core.admission.reviews",
    "cache": "webhook.core.annotation.cache",
    "memo": "webhook.core.engine.memo",
    "refs": "webhook.core.model.refs",
    "settings": "webhook.core.model.settings",
    "store": "webhook.core.state.store",
    "scale": "bench.scale",
}


@dataclass
class Version:
    """One version's modules (all of `webhook`, and its own `bench.scale`, kept apart from
    `sys.modules`) and its state."""

    name: str
    modules: dict[str, ModuleType]
    graph: dict[str, ModuleType]  # every module of this version, by name
    state: Any = None  # the store, once built
    settings: Any = None
    put_back: Callable[[], None] = field(default=lambda: None)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """This version's modules in `sys.modules` for the block: an import made while its code
        runs (none on the decision path today) finds its own version, not the other's."""
        saved = _set_apart()
        sys.modules.update(self.graph)
        try:
            yield
        finally:
            _set_apart()
            _put_back(saved)


def _ours(name: str) -> bool:
    return name in ("webhook", "bench.scale") or name.startswith("webhook.")


def _set_apart() -> dict[str, ModuleType]:
    """Every module of a version taken out of `sys.modules`, and returned."""
    return {name: sys.modules.pop(name) for name in list(sys.modules) if _ours(name)}


def _put_back(modules: dict[str, ModuleType]) -> None:
    """`modules` into `sys.modules` again, and `bench.scale` as the `bench` package's attribute
    (an import of a submodule sets it on the package)."""
    sys.modules.update(modules)
    if "bench.scale" in modules:
        bench.scale = modules["bench.scale"]


def load(name: str, root: Path) -> Version:
    """`webhook` as found under `root`, and `bench.scale` on it, imported afresh and then set
    apart from `sys.modules`, so that the next import of either is another version's."""
    kept = _set_apart()
    sys.path.insert(0, str(root))
    try:
        modules = {short: importlib.import_module(path) for short, path in _MODULES.items()}
    finally:
        sys.path.remove(str(root))
        graph = _set_apart()
        _put_back(kept)
    return Version(name, modules, graph)


def build_state(version: Version, lines: list[bytes], keys: list[tuple[str, ...]]) -> None:
    """The cluster in this version's store as `bench.scale` holds it before its decisions, by
    that version's own phases: every object trimmed and stored, every summary computed
    through the cache, every annotated object written back with its value (a converged
    leader's state); and the reach kept below rungs, to be put back before each review."""
    m, phases = version.modules, version.modules["scale"]
    settings = m["settings"].Settings()
    store = m["store"].Store()
    cache = m["cache"].SummaryCache(
        store, settings, maxsize=max(m["cache"].DEFAULT_MAXSIZE, len(keys))
    )
    with version.active():
        phases.load(lines, store)
        stored = phases.stored_keys([m["refs"].ObjectKey(*key) for key in keys], store)
        m["memo"].index_of(store)
        for key in stored:
            cache.get(key)
        phases.converge(stored, store, cache.get, settings.annotation_key)
    version.state, version.settings = store, settings
    version.put_back = phases.kept_reaches(store)


def decide(version: Version, mix: str, request: dict[str, Any]) -> tuple[float, bytes]:
    """One decision by this version: its wall time, and its response as the webhook encodes it."""
    m, store, settings = version.modules, version.state, version.settings
    started = time.perf_counter()
    if mix == "validate":
        verdict = m["validation"].validate(request, view=store, settings=settings)
        seconds = time.perf_counter() - started
        response = m["reviews"].from_verdict(request["uid"], verdict, request=request)
    else:
        operations = m["mutation"].mutate(request, view=store, settings=settings)
        seconds = time.perf_counter() - started
        response = m["reviews"].patched(request["uid"], operations)
    return seconds, m["reviews"].encode_review(response)


def compare(
    base: Version,
    ours: Version,
    mix: str,
    reviews: list[tuple[str, dict[str, Any]]],
    *,
    reps: int,
    reach_known: bool,
) -> dict[str, Any]:
    """Each review decided `reps` times by each version, interleaved; best times, ratios."""
    best = {base.name: [float("inf")] * len(reviews), ours.name: [float("inf")] * len(reviews)}
    differ: list[str] = []
    gc.collect()
    for i, (_, review) in enumerate(reviews):
        request = review["request"]
        answers: dict[str, bytes] = {}
        for rep in range(reps):
            for version in (base, ours) if rep % 2 == 0 else (ours, base):
                if not reach_known:
                    version.put_back()
                with version.active():
                    seconds, answers[version.name] = decide(version, mix, request)
                best[version.name][i] = min(best[version.name][i], seconds)
        if answers[base.name] != answers[ours.name]:
            differ.append(request["uid"])
    return summarize(reviews, best[base.name], best[ours.name], differ)


def summarize(
    reviews: list[tuple[str, dict[str, Any]]],
    base: list[float],
    ours: list[float],
    differ: list[str],
) -> dict[str, Any]:
    ratios = [o / b for b, o in zip(base, ours, strict=True)]
    wide = [
        r for r, (category, _) in zip(ratios, reviews, strict=True) if category in traffic.HEAVY
    ]
    light = [i for i, (category, _) in enumerate(reviews) if category not in traffic.HEAVY]
    slowest = sorted(light, key=lambda i: -base[i])[:SLOWEST]

    def spread(values: list[float]) -> dict[str, float] | None:
        if not values:
            return None
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    def third_slowest(times: list[float]) -> float:  # the p99 of 200, as §2 reads it
        return sorted(times)[-3] * 1000 if len(times) >= 3 else max(times) * 1000

    return {
        "reviews": len(reviews),
        "ratio_all": spread(ratios),
        "ratio_wide": spread(wide),
        "ratio_slowest_others": spread([ratios[i] for i in slowest]),
        "base_median_ms": statistics.median(base) * 1000,
        "ours_median_ms": statistics.median(ours) * 1000,
        "base_third_slowest_ms": third_slowest(base),
        "ours_third_slowest_ms": third_slowest(ours),
        "answers_differ": differ,
        "per_review": [
            {
                "category": category,
                "uid": review["request"]["uid"],
                "base_ms": b * 1000,
                "ours_ms": o * 1000,
            }
            for (category, review), b, o in zip(reviews, base, ours, strict=True)
        ],
    }


def run(
    baseline: str, *, mix: str, scale_k: float, reviews: int, reps: int, reach_known: bool
) -> dict[str, Any]:
    heap.tune()
    folder = Path(tempfile.mkdtemp(prefix="bench-side-by-side-"))
    try:
        snapshot.extract_revision(baseline, folder)
        base = load("base", folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # every module it needs is imported now
    ours = load("ours", snapshot.REPO)
    generated = scale.generate(scale_k, 1, reviews)
    with generated.listing as listing:
        lines = listing.read().splitlines()
    keys = [tuple(key) for key in generated.keys]
    for version in (base, ours):
        build_state(version, lines, keys)
    heap.settle("side by side: both states built")  # a freeze holds for both versions
    chosen = generated.validate_mix if mix == "validate" else generated.mutate_mix
    found = compare(base, ours, mix, chosen, reps=reps, reach_known=reach_known)
    return {
        "baseline": baseline,
        "mix": mix,
        "scale": scale_k,
        "reps": reps,
        "reach_known": reach_known,
        **found,
    }


def _line(name: str, spread: dict[str, float] | None) -> str:
    if spread is None:
        return f"  {name}: none"
    return f"  {name}: {spread['median']:.3f}x ({spread['min']:.3f} to {spread['max']:.3f})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="HEAD", help="the revision to compare with")
    parser.add_argument("--mix", choices=("validate", "mutate"), default="validate")
    parser.add_argument("--scale", type=float, default=1.0, help="the synthetic cluster's size")
    parser.add_argument(
        "--reviews", type=int, default=200, help="validation reviews (mutate: half)"
    )
    parser.add_argument("--reps", type=int, default=10, help="decisions per review and version")
    parser.add_argument("--reach-known", action="store_true", help="keep the reach once walked")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    result = run(
        args.baseline,
        mix=args.mix,
        scale_k=args.scale,
        reviews=args.reviews,
        reps=args.reps,
        reach_known=args.reach_known,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(
        f"{args.mix} mix, this tree / {args.baseline}, {result['reviews']} reviews, best of {args.reps}:"
    )
    print(_line("every review", result["ratio_all"]))
    print(_line("Gateway- and Namespace-wide reviews", result["ratio_wide"]))
    print(_line(f"the {SLOWEST} slowest others", result["ratio_slowest_others"]))
    print(
        f"  3rd slowest: {result['base_third_slowest_ms']:.2f} -> {result['ours_third_slowest_ms']:.2f} ms"
        f"; median {result['base_median_ms']:.3f} -> {result['ours_median_ms']:.3f} ms"
    )
    if result["answers_differ"]:
        print(
            f"answers differ for {len(result['answers_differ'])} reviews: {result['answers_differ'][:5]}"
        )
        raise SystemExit(1)


if __name__ == "__main__":
    main()
