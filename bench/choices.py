"""Library choices, measured on our own data: json against orjson.

Alternating in rounds on the same inputs: decoding the /validate and /mutate review bodies,
encoding responses, dumping summary values (`summary.dump`, sorted keys) and writing a decision
log line. Each figure is a speed-up (json time / orjson time, median over rounds) and whether
orjson's output is identical to json's — a summary is compared byte for byte by the
reconciler, so a change of serializer must not change a single byte.

orjson is adopted for the review codec (`reviews.decode_review`/`encode_review`) and the JSON
log lines, each with json behind it for what orjson refuses or would read differently; the
`*_guarded` figures time those functions as shipped, guard and all, against json alone.
`summary.dump` still uses json. (uvloop is measured in the HTTP part.)
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
from webhook.core.admission import reviews
from webhook.core.annotation import summary
from webhook.core.engine import effective, memo
from webhook.core.model.refs import key_of
from webhook.core.state.store import Store
from webhook.shell.process import logs
from webhook.shell.process.build import core_build


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
    memo.index_of(store)
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

    def json_review(body: bytes) -> Any:
        return json.loads(body, parse_constant=float)

    def json_log_line(entry: Any) -> str:
        return json.dumps(entry, ensure_ascii=False, default=str, separators=(",", ":"))

    # A decision line as the server logs it (`decisions.log_fields`, SPEC 8.1), one per review.
    lines = [
        {
            "time": "2026-01-01T00:00:00.000+00:00",
            "level": "INFO",
            "logger": "webhook.decisions",
            "msg": "admission warned",
            "uid": f"valid-route-{i}",
            "operation": "CREATE",
            "dryRun": False,
            "kind": "RetryPolicy.policies.example.com",
            "namespace": "app-001",
            "name": f"retry-{i}",
            "user": "system:serviceaccount:ci:deployer",
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "verdict": "warned",
            "rules": ["PA-C01", "PA-C04"],
            "causes": [
                {"rule": "PA-C01", "field": "spec.targetRefs[0]",
                 "message": "RetryPolicy app-001/retry-0 also targets HTTPRoute/app-001/r and wins"},
                {"rule": "PA-C04", "field": "",
                 "message": "changes maxRetries on 3 HTTPRoutes (app-001/route-000001 5→3, …)"},
            ],
            "latencyMs": 1.234,
        }
        for i in range(200)
    ]  # fmt: skip

    def sorted_dump(value: Any) -> bytes:  # what summary.dump was before orjson
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
        )
        return text.encode()

    cases: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any], list[Any]]] = {
        "decode_review": (json.loads, orjson.loads, bodies),
        "encode_review": (compact, orjson.dumps, responses),
        "summary_dump": (sorted_dump, lambda v: summary.dump(v).encode(), values),
        "decode_review_guarded": (json_review, reviews._loads, bodies),
        "encode_review_guarded": (compact, reviews._json_bytes, responses),
        "log_line_guarded": (json_log_line, logs._dumps, lines),
    }
    out: dict[str, float] = {}
    for name, (ours, theirs, items) in cases.items():
        ratios = []
        for r in range(rounds):
            pair = (ours, theirs) if r % 2 == 0 else (theirs, ours)
            timings = {fn: _time(fn, items, 3) for fn in pair}
            ratios.append(timings[ours] / timings[theirs])
        out[f"orjson_{name}_speedup"] = statistics.median(ratios)
        out[f"orjson_{name}_identical"] = int(all(ours(i) == theirs(i) for i in items))
        out[f"json_{name}_us_per_item"] = _time(ours, items, 1) / len(items) * 1e6
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.choices")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    # With which build of the core it was timed (`bench` checks it).
    result: dict[str, Any] = {**run(seed=args.seed, rounds=args.rounds), "core": core_build()}
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
