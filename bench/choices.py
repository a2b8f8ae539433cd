"""Candidate library choices, measured on our own data before anyone adopts them.

`json` (what the webhook uses today) against `orjson`, alternating in rounds on the same
inputs: decoding the /validate and /mutate review bodies (`reviews.decode_review`), encoding
responses (`reviews.encode_review`), and dumping summary values (`summary.dump`, sorted keys).
Each figure is a speed-up (json time / orjson time, median over rounds) and whether orjson's
bytes are identical to json's — a summary is compared byte for byte by the reconciler, so a
change of serializer must not change a single byte. (uvloop is measured in the HTTP part.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from bench import synth, traffic
from webhook.core import effective, hierarchy, summary
from webhook.core.refs import key_of
from webhook.core.store import Store


def _time(fn: Callable[[Any], Any], items: list[Any], repeat: int) -> float:
    t = time.perf_counter()
    for _ in range(repeat):
        for item in items:
            fn(item)
    return time.perf_counter() - t


def run(*, scale: float = 0.1, seed: int = 1, rounds: int = 7) -> dict[str, float]:
    try:
        import orjson
    except ImportError:
        return {}
    cluster = synth.generate(synth.Shape().scaled(scale), seed=seed)
    store = Store()
    for obj in cluster.objects():
        store.upsert(obj)
    hierarchy.index_for(store)
    bodies = [
        json.dumps(r).encode()
        for _, r in traffic.validate_reviews(cluster, 200) + traffic.mutate_reviews(cluster, 200)
    ]
    responses = [{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": f"u{i}", "allowed": True, "warnings": ["[PA-C04] changes maxRetries on 3 HTTPRoutes (app-001/route-000001 5→3, …)"]}} for i in range(200)]  # fmt: skip
    values = []
    for obj in list(cluster.annotated())[:: max(1, len(list(cluster.annotated())) // 300)]:
        key = key_of(obj)
        results = effective.compute(key, store, with_losers=False) if key else []
        if results:
            values.append(summary.summary_value(results))

    def compact(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()

    def sorted_dump(value: Any) -> bytes:
        return summary.dump(value).encode()

    cases: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any], list[Any]]] = {
        "decode_review": (json.loads, orjson.loads, bodies),
        "encode_review": (compact, orjson.dumps, responses),
        "summary_dump": (
            sorted_dump,
            lambda v: orjson.dumps(v, option=orjson.OPT_SORT_KEYS),
            values,
        ),
    }
    out: dict[str, float] = {}
    for name, (ours, theirs, items) in cases.items():
        ratios = []
        for r in range(rounds):
            pair = (ours, theirs) if r % 2 == 0 else (theirs, ours)
            timings = {fn: _time(fn, items, 3) for fn in pair}
            ratios.append(timings[ours] / timings[theirs])
        out[f"orjson_{name}_speedup"] = statistics.median(ratios)
        out[f"orjson_{name}_identical"] = int(
            all(ours(i) == theirs(i) for i in items)
            if name != "decode_review"
            else all(json.loads(b) == orjson.loads(b) for b in items)
        )
        out[f"json_{name}_us_per_item"] = _time(ours, items, 1) / len(items) * 1e6
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.choices")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    json.dump(run(seed=args.seed, rounds=args.rounds), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
