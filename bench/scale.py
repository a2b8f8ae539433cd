"""Part 2, scale: one synthetic cluster in the webhook's own store, and what it costs.

    python -m bench.scale --scale 1 --seed 1

Run by the harness in a fresh process per size, so that peak RSS (`ru_maxrss`) is this size's.
The garbage collector runs with the thresholds `policy-webhook serve` sets (`heap.tune`: full
passes a hundred times rarer), so that no phase is charged for full passes the webhook does not
make. Prints one JSON object of named numbers. Measured, in order:
- load: every object trimmed and `Store.upsert`ed (with the summary cache subscribed, as in the
  webhook's informers), each decoded from its JSON as the informers decode what they list, one
  line at a time of the listing that a forked child generated (`generate`): the process never
  holds the generator's objects, and of the cluster it holds the webhook's state and the review
  mixes only; then the heap settled, as the webhook settles it once its state is synced;
- cold summaries: the hierarchy index built, then every annotated object's summary computed
  through the cache (`SummaryCache.get` on an empty cache), with the full garbage collections
  that ran meanwhile;
- cached lookup: `SummaryCache.get` of objects already cached, one call at a time;
- converged: every annotated object written again as the watch brings it back after the
  reconciler's patch, with our annotation, trimmed as the informers trim it (a leader's state);
- the pause of a full garbage collection over that state, before and after it is settled as the
  webhook settles it (`webhook.shell.process.heap`); what follows runs in the settled state;
- validation and mutation decisions: `admission.validate`/`mutate` on the review mixes of
  `bench.traffic`, one at a time (no HTTP); then the Gateway- and Namespace-wide reviews again,
  their targets' reach known, and once more after one route's write elsewhere;
- fan-out: one change of a policy on the busy Gateway, written to the store (the cache drops
  what it affects), then every affected summary computed again;
- peak RSS of the process.
"""

from __future__ import annotations

import argparse
import copy
import functools
import gc
import json
import os
import pickle
import random
import resource
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, Any, TypeVar

import orjson

from bench import synth, traffic
from bench.calibrate import reference_ms
from bench.loadgen import percentile
from webhook.core.admission import mutation
from webhook.core.admission import validation as admission
from webhook.core.annotation import summary
from webhook.core.engine import hierarchy, memo
from webhook.core.model.refs import ObjectKey, key_of
from webhook.core.model.settings import Settings
from webhook.core.state.store import WRITE_LOG, Store
from webhook.core.state.trim import trim
from webhook.shell.process.build import core_build

_T = TypeVar("_T")

try:
    from webhook.shell.process import heap
except ImportError:  # before the heap was settled: what an unsettled one costs
    heap = None  # type: ignore[assignment]

try:
    from webhook.core.annotation.cache import DEFAULT_MAXSIZE, SummaryCache
except ImportError:  # before the cache existed: measure the engine without one
    SummaryCache = None  # type: ignore[assignment,misc]
    DEFAULT_MAXSIZE = 0


def rss_mb() -> float:
    """This process's peak resident memory so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def resident_mb() -> float:
    """This process's resident memory now: the baseline that a peak is measured above.

    Not the peak (`rss_mb`): a process keeps the peak of the one that forked it across fork
    and exec, so a fresh process started by `python -m bench` began with its parent's peak
    (about 20 MB above its own at start) and every figure above the baseline read that
    much less. Where /proc is absent, the peak it is.
    """
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return rss_mb()
    return pages * resource.getpagesize() / 2**20


class Stopwatch:
    """Wall time and this process's CPU time of one phase.

    On a shared machine a phase's wall time includes the time other processes held the core;
    its CPU time does not. Targets are read on wall time (what a user waits); growth exponents
    are fitted on CPU time, which a neighbour's burst during one size cannot inflate.
    """

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def stop(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


class FullCollections:
    """The full garbage collections that run while a phase does: how many, their time, and
    how many objects they found to free (none, when the phase makes no cyclic garbage)."""

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        self.collected = 0
        self._started = 0.0
        gc.callbacks.append(self._heard)

    def _heard(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.count += 1
            self.seconds += time.perf_counter() - self._started
            self.collected += info["collected"]

    def stop(self, name: str) -> dict[str, float]:
        gc.callbacks.remove(self._heard)
        return {
            f"{name}_gc_full_collections": self.count,
            f"{name}_gc_full_s": self.seconds,
            f"{name}_gc_full_collected": self.collected,
        }


def measure(
    k: float, *, seed: int, reviews: int, lookups: int, fanout_repeats: int
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "scale": k,
        "rss_baseline_mb": resident_mb(),
        "uses_cache": int(SummaryCache is not None),
    }
    tune = getattr(heap, "tune", None)  # absent before `serve` tuned its collector
    if tune is not None:
        tune()
    out["gc_tuned"] = int(tune is not None)
    settings = Settings()
    calibration = [_reference_ms()]  # again between phases: the machine's speed while we ran

    watch = Stopwatch()
    cluster = generate(k, seed, reviews)
    out["generate_s"], _ = watch.stop()
    out.update({f"objects_{name}": n for name, n in cluster.described.items()})
    out["objects"] = cluster.objects
    keys, validate_mix, mutate_mix = cluster.keys, cluster.validate_mix, cluster.mutate_mix
    busy_policy, busy_gateway = cluster.busy_policy, cluster.busy_gateway

    store = Store()
    # Sized to hold every annotated object, as --cache-max-objects should be in a deployment:
    # past the default (65,536, reached between 4x and 8x) evictions would be measured instead.
    annotated = len(keys)
    cache = (
        SummaryCache(store, settings, maxsize=max(DEFAULT_MAXSIZE, annotated))
        if SummaryCache is not None
        else None
    )
    get: Callable[[ObjectKey], str | None] = (
        cache.get if cache is not None else (lambda key: summary.summarize(key, store, settings))
    )
    gc.collect()
    watch = Stopwatch()
    with cluster.listing as listed:
        load(listed, store)
    out["load_s"], out["load_cpu_s"] = watch.stop()
    keys = stored_keys(keys, store)
    gc.collect()
    out["rss_after_load_mb"] = rss_mb()
    # Settled as the webhook settles its state once synced, before its first pass computes
    # every summary (`heap`): full collections during the cold summaries then walk what those
    # make, not the store too.
    if heap is not None:
        out["gc_settle_loaded_s"] = heap.settle("benchmark: state loaded")

    calibration.append(_reference_ms())
    watch = Stopwatch()
    memo.index_of(store)
    out["index_build_s"], index_cpu = watch.stop()
    collections = FullCollections()
    watch = Stopwatch()
    for key in keys:
        get(key)  # and dropped, as the reconciler drops each value once it is compared or sent
    out["summaries_s"], summaries_cpu = watch.stop()
    out.update(collections.stop("cold"))
    out["cold_summaries_s"] = out["summaries_s"] + out["index_build_s"]
    out["cold_summaries_cpu_s"] = summaries_cpu + index_cpu
    out["annotated_objects"] = len(keys)
    # What the values are like, read one at a time (untimed): held all at once, they would be
    # a copy of every value in the peak RSS that the webhook never holds.
    sizes = [(len(v), '"truncated":true' in v) for key in keys if (v := get(key)) is not None]
    out["summaries_nonempty"] = len(sizes)
    out["summary_mean_bytes"] = statistics.fmean(n for n, _ in sizes)
    out["summaries_truncated"] = sum(cut for _, cut in sizes)
    out["cold_summary_per_object_us"] = out["summaries_s"] / len(keys) * 1e6

    if cache is not None:
        rng = random.Random(seed)
        sample = [rng.choice(keys) for _ in range(lookups)]
        timings = []
        clock = time.perf_counter_ns
        for key in sample:
            t_ns = clock()
            cache.get(key)
            timings.append(clock() - t_ns)
        timings.sort()
        out["cached_lookup_median_us"] = percentile(timings, 50) / 1000
        out["cached_lookup_p99_us"] = percentile(timings, 99) / 1000
        out["cached_lookup_mean_us"] = statistics.fmean(timings) / 1000
        # CPU-time view for the growth fit: a batch, since one lookup is below the clock's reach
        batch = sample[: min(len(sample), 5000)]
        watch = Stopwatch()
        for key in batch:
            cache.get(key)
        out["cached_lookup_cpu_us"] = watch.stop()[1] / len(batch) * 1e6

    # A leader's state once every annotation is written: each annotated object comes back from
    # the watch with our annotation (the echo of the reconciler's patch), trimmed as the
    # informers trim it — a write that changes nothing any summary reads.
    watch = Stopwatch()
    out["converged_objects"] = converge(keys, store, get, settings.annotation_key)
    out["converge_s"], _ = watch.stop()
    out["rss_converged_mb"] = rss_mb()

    # The pause of a full collection over the computed state, then what the webhook does after
    # its first reconcile pass (`webhook.shell.process.heap`): freeze it, so later passes skip it. The
    # figures below are measured in that settled state, as a serving replica runs.
    if heap is not None:  # its collection is the full pass over all of it, then the freeze
        out["gc_full_pause_s"] = heap.settle("benchmark: state computed")
    else:
        watch = Stopwatch()
        gc.collect()
        out["gc_full_pause_s"] = watch.stop()[0]
    watch = Stopwatch()
    gc.collect()
    out["gc_full_pause_settled_s"] = watch.stop()[0]
    out["gc_frozen_objects"] = gc.get_freeze_count()

    calibration.append(_reference_ms())
    out["decision_passes"] = DECISION_PASSES
    # Each pass meets the reach below rungs as the first met it: none of its targets walked.
    reaches = kept_reaches(store)
    out.update(
        _decisions(
            "validate", admission.validate, validate_mix, store, settings, before_pass=reaches
        )
    )
    # The wide reviews again: their targets' reach is known now (kept until the hierarchy
    # changes), so what they lose is the walk below a target seen for the first time.
    wide = [(category, review) for category, review in validate_mix if category in traffic.HEAVY]
    out.update(_decisions("validate_again", admission.validate, wide, store, settings))
    # And once a route elsewhere is written, as routes are in a live cluster: what that write
    # drops of the reach below rungs (`memo.StructureMemo.forget_route`) is walked again.
    out.update(
        _decisions(
            "validate_after_route_write",
            admission.validate,
            wide,
            store,
            settings,
            before_pass=lambda: _write_a_route(store, keys, seed),
        )
    )
    out.update(_decisions("mutate", mutation.mutate, mutate_mix, store, settings))
    calibration.append(_reference_ms())
    out.update(_fanout(busy_policy, busy_gateway, store, cache, settings, fanout_repeats))
    calibration.append(_reference_ms())
    out["calibration_ms"] = statistics.median(calibration)
    out["calibration_spread"] = max(calibration) / min(calibration)
    out["peak_rss_mb"] = rss_mb()
    out["state_rss_mb"] = out["peak_rss_mb"] - out["rss_baseline_mb"]
    return out


@dataclass(frozen=True)
class Generated:
    """The synthetic cluster as the measuring process receives it from `generate`."""

    listing: IO[bytes]  # each object's JSON, one per line, read from its start
    described: dict[str, int]  # `synth.describe`
    objects: int
    keys: list[ObjectKey]  # of the annotated objects
    validate_mix: list[tuple[str, traffic.Review]]
    mutate_mix: list[tuple[str, traffic.Review]]
    busy_policy: dict[str, Any]  # the RetryPolicy on the busy Gateway
    busy_gateway: ObjectKey


def generate(k: float, seed: int, reviews: int) -> Generated:
    """The synthetic cluster at `k`x, generated in a forked child: each object's JSON goes to an
    unnamed file, one per line, and what the phases take of the cluster besides comes back
    pickled.

    Not in this process, because memory a process frees is not given back to the system: at 8x
    the generator's objects and their JSON took this process to 947 MB before one object was
    stored, and the store was then built in the space they had freed. The peak RSS, which
    measures the webhook's state, was the generator's, and the state's own did not show apart
    from it (docs/performance.md, *Choices*).
    """
    listing = tempfile.TemporaryFile()  # noqa: SIM115 - the caller reads it, then closes it
    try:
        taken = _forked(functools.partial(_generate_into, listing, k, seed, reviews))
    except ChildFailed:
        listing.close()
        raise
    listing.seek(0)
    return Generated(listing, *taken)


def _generate_into(listing: IO[bytes], k: float, seed: int, reviews: int) -> tuple[Any, ...]:
    """The cluster's objects written to `listing`; what the phases take of it besides, in the
    order of `Generated`'s fields after the listing."""
    cluster = synth.generate(synth.Shape().scaled(k), seed=seed)
    for obj in cluster.objects():
        listing.write(orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE))
    listing.flush()
    assert cluster.busy_policy is not None
    return (
        synth.describe(cluster),
        cluster.count(),
        [key for obj in cluster.annotated() if (key := key_of(obj)) is not None],
        traffic.validate_reviews(cluster, reviews),
        traffic.mutate_reviews(cluster, reviews // 2),
        cluster.busy_policy,
        key_of(cluster.busy_gateway),
    )


def load(listed: Iterable[bytes], store: Store) -> None:
    """Each listed object into the store as the informers keep it: decoded, trimmed, stored,
    one by one (they list a page at a time; all the untrimmed objects held at once would set
    the peak RSS)."""
    for text in listed:
        store.upsert(trim(orjson.loads(text), parts=store.parts))


def stored_keys(keys: list[ObjectKey], store: Store) -> list[ObjectKey]:
    """The same keys, as the store holds them. A leader's pass over its objects reads the
    store's own keys (`Store.keys`), and every table a computation keys by them shares them;
    keys made from the generator's objects would hold copies of their names besides."""
    held = {key: key for gk in list(store.all_kinds()) for key in store.keys(gk)}
    return [held.get(key, key) for key in keys]


def converge(
    keys: list[ObjectKey], store: Store, get: Callable[[ObjectKey], str | None], key: str
) -> int:
    """Every annotated object written again with its value as our annotation, trimmed.

    The memos hear the writes as a live process's do: there the reconciler and admission ask
    for them between watch events; unheard for longer than the store's write log, they would
    start over (and the figures after this would be a cold state's, not a leader's).
    """
    written = 0
    for i, found in enumerate(keys):
        if i % (WRITE_LOG // 2) == 0:
            memo.index_of(store)
        value = get(found)
        obj = store.get(found)
        if value is None or obj is None:
            continue
        # The value as a watch event decodes it: a string of its own, not the cache's. (The rest
        # of the object is shared with the one it replaces in the store: held once, as the
        # event's own copy would be.)
        annotations = {key: value.encode().decode()}
        event = {**obj, "metadata": {**obj["metadata"], "annotations": annotations}}
        store.upsert(trim(event, keep_annotation=key, parts=store.parts))
        written += 1
    return written


def kept_reaches(store: Store) -> Callable[[], None]:
    """A function that puts the reach kept below rungs (`memo.StructureMemo.reach`) back as it
    is now: before each pass of the validation mix, so that each meets the same walks."""
    structure = memo.shared_structure(store)
    if structure is None:
        return lambda: None
    reach, reached = dict(structure.reach), structure.reached
    reach_at = {key: list(kept) for key, kept in structure.reach_at.items()}

    def put_back() -> None:
        if memo.shared_structure(store) is not structure:  # the hierarchy was written since
            return
        structure.reach = dict(reach)
        structure.reach_at = {key: list(kept) for key, kept in reach_at.items()}
        structure.reached = reached

    return put_back


def _write_a_route(store: Store, keys: list[ObjectKey], seed: int) -> None:
    """One route, drawn at random, its first backend's port moved: a change of its contexts."""
    routes = [key for key in keys if key.kind == "HTTPRoute"]
    key = random.Random(seed).choice(routes)
    obj = copy.deepcopy(dict(store.get(key) or {}))
    backend = obj["spec"]["rules"][0]["backendRefs"][0]
    backend["port"] = int(backend.get("port") or 80) + 1
    store.upsert(obj)


def _as_computed_afresh(
    keys: list[ObjectKey], store: Store, cache: Any, settings: Settings
) -> bool:
    """Whether the values of `keys` are what a store that shares nothing with the cache gives."""
    rebuilt = Store(store.config)
    for gk in list(store.all_kinds()):
        for obj in store.objects(gk):
            rebuilt.upsert(obj)
    kept = cache.get if cache is not None else (lambda key: summary.summarize(key, store, settings))
    return all(kept(key) == summary.summarize(key, rebuilt, settings) for key in keys)


class ChildFailed(RuntimeError):
    """The work given to `_forked` raised in the child (its traceback is on stderr)."""


def _forked(work: Callable[[], _T]) -> _T:
    """`work()` in a forked copy of this process, its result pickled back.

    What the work allocates is the child's, not in this process's peak RSS, which measures the
    webhook's state: the generator's cluster, the reference workload between phases, a second
    store to check values against."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its answer is what it writes, or its exit status
        os.close(read)
        try:
            with os.fdopen(write, "wb") as answer:
                pickle.dump(work(), answer)
            os._exit(0)
        except BaseException:
            traceback.print_exc()
            os._exit(2)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        data = answer.read()  # before waiting: a large answer fills the pipe
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise ChildFailed(f"{getattr(work, '__name__', work)!s} failed in a forked child")
    result: _T = pickle.loads(data)
    return result


def _reference_ms() -> float:
    """`reference_ms`, timed in a forked child (`_forked`): at 1x the last calibration, after
    the fan-out, had added 3.6 MB to the peak."""
    return _forked(reference_ms)


def _in_a_child(check: Callable[[], bool]) -> bool:
    """`check()` in a forked child (`_forked`); False when it raises there."""
    try:
        return _forked(check)
    except ChildFailed:
        return False


# Passes over a review mix: each review's time is the best of its passes (`_decisions`).
DECISION_PASSES = 3


def _decisions(
    name: str,
    decide: Callable[..., Any],
    mix: list[tuple[str, traffic.Review]],
    store: Store,
    settings: Settings,
    *,
    before_pass: Callable[[], None] = lambda: None,
) -> dict[str, float]:
    """Each review of `mix` decided in `DECISION_PASSES` passes over the mix, each pass after
    `before_pass()` (which puts back what the first pass met); a review's time is the best of
    its passes, wall and CPU apart, as `timeit` reports.

    Not one pass: on this shared machine a neighbour's burst inflates what it meets, CPU time
    too, and one pass of 200 reviews gave a p99 of 4.9 and 7.4 ms for the same code in two
    full runs an hour apart. A review's best of three is what its code costs."""
    walls = [float("inf")] * len(mix)
    cpus = [float("inf")] * len(mix)
    for done in range(DECISION_PASSES):
        if done:
            # What the pass before left for a full collection (an overlay and its memo refer to
            # each other) goes, so that the passes leave what one pass left: at 8x, the three
            # passes' garbage had raised the peak RSS, reached in the fan-out after, by 27 MB.
            gc.collect()
        before_pass()
        for i, (_, review) in enumerate(mix):
            request = review["request"]
            watch = Stopwatch()
            decide(request, view=store, settings=settings)
            seconds, cpu = watch.stop()
            walls[i] = min(walls[i], seconds)
            cpus[i] = min(cpus[i], cpu)
    by_category: dict[str, list[float]] = {}
    for (category, _), seconds in zip(mix, walls, strict=True):
        by_category.setdefault(category, []).append(seconds)
    every, every_cpu = list(walls), list(cpus)
    out: dict[str, float] = {}
    every.sort()
    every_cpu.sort()
    out[f"{name}_median_cpu_ms"] = percentile(every_cpu, 50) * 1000
    out[f"{name}_p99_cpu_ms"] = percentile(every_cpu, 99) * 1000
    light = sorted(s for c, ss in by_category.items() if c not in traffic.HEAVY for s in ss)
    for label, values in ((name, every), (f"{name}_light", light)):
        if values and (label == name or name == "validate"):
            out[f"{label}_median_ms"] = percentile(values, 50) * 1000
            out[f"{label}_p99_ms"] = percentile(values, 99) * 1000
            out[f"{label}_mean_ms"] = statistics.fmean(values) * 1000
            out[f"{label}_n"] = len(values)
    for category, values in by_category.items():
        values.sort()
        out[f"{name}_cat_{category.replace('-', '_')}_median_ms"] = percentile(values, 50) * 1000
        out[f"{name}_cat_{category.replace('-', '_')}_max_ms"] = values[-1] * 1000
    return out


def _fanout(
    policy: dict[str, Any],
    target: ObjectKey,
    store: Store,
    cache: Any,
    settings: Settings,
    repeats: int,
) -> dict[str, float]:
    """One edit of the busy Gateway's RetryPolicy: invalidate, then recompute what it reaches."""
    runs = []
    for j in range(repeats):
        edited = copy.deepcopy(policy)
        edited["spec"]["default"]["retryOn"] = [str(500 + j % 4), "reset"]
        edited["spec"].setdefault("override", {})["maxRetries"] = 2 + j
        seen: list[frozenset[ObjectKey]] = []

        def listen(
            key: ObjectKey,
            old: Any,
            new: Any,
            affected: frozenset[ObjectKey],
            seen: list[Any] = seen,
        ) -> None:
            seen.append(affected)

        if cache is not None:
            cache.feed.subscribe(listen)
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        store.upsert(edited)
        if cache is not None:
            affected = seen[0]
            cache.feed.unsubscribe(listen)
        else:
            affected = frozenset(hierarchy.affected_by(target, None, store))
        t1 = time.perf_counter()
        for key in affected:
            # Each value made and dropped, as the reconciler drops it once compared or sent.
            cache.get(key) if cache is not None else summary.summarize(key, store, settings)
        t2 = time.perf_counter()
        cpu = time.process_time() - cpu0
        # Checked against this edit's state, before the next one (untimed): a sample of the
        # values now kept must equal a computation that shares nothing with the cache.
        sample = random.Random(3).sample(sorted(affected), k=min(25, len(affected)))
        same = _in_a_child(functools.partial(_as_computed_afresh, sample, store, cache, settings))
        runs.append((t2 - t0, t1 - t0, t2 - t1, affected, same, cpu))
        policy = edited
    consistent = all(run[4] for run in runs)
    runs.sort(key=lambda r: r[0])
    total, invalidate, recompute, affected, _, cpu = runs[len(runs) // 2]
    routes = sum(1 for key in affected if key.kind.endswith("Route"))
    return {
        "fanout_s": total,
        "fanout_cpu_s": cpu,
        "fanout_invalidate_s": invalidate,
        "fanout_recompute_s": recompute,
        "fanout_affected_objects": len(affected),
        "fanout_affected_routes": routes,
        "fanout_affected_services": sum(1 for key in affected if key.kind == "Service"),
        "fanout_s_per_1000_routes": total / max(1, routes) * 1000,
        "fanout_consistent": int(consistent),
        "fanout_repeats": len(runs),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scale")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reviews", type=int, default=200, help="validation decisions timed")
    parser.add_argument("--lookups", type=int, default=20_000, help="cached lookups timed")
    parser.add_argument("--fanout-repeats", type=int, default=3)
    args = parser.parse_args(argv)
    result = measure(
        args.scale,
        seed=args.seed,
        reviews=args.reviews,
        lookups=args.lookups,
        fanout_repeats=args.fanout_repeats,
    )
    result["core"] = core_build()  # which build of the core was timed (`bench` checks it)
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
