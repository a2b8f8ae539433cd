"""A fixed reference workload: how fast this machine runs Python like ours, right now.

The scale runs happen minutes apart on a shared machine; each process times this workload
between its phases and reports the median, so a reader can see how busy the machine was
during each size (about 20 ms on a quiet core; more means neighbours took the CPU). The
workload is the engine's kind of work — frozen slotted dataclasses as dict keys, tuple
hashing, sorting, compact JSON — and the same every time (no randomness, no IO).
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class _Key:
    group: str
    kind: str
    namespace: str
    name: str


def _workload() -> int:
    keys = [_Key("g", ("Route", "Service")[i % 2], f"ns-{i % 40}", f"obj-{i}") for i in range(6000)]
    table: dict[tuple[_Key, str | None], list[int]] = {}
    for i, key in enumerate(keys):
        table.setdefault((key, None if i % 3 else "http"), []).append(i)
    hits = sum(len(table.get((key, None), ())) for key in keys)
    ordered = sorted(keys, key=lambda k: (k.namespace, k.name))
    text = json.dumps(
        [{"k": k.name, "n": k.namespace, "v": [1, 2]} for k in ordered[:3000]], sort_keys=True
    )
    return hits + len(text)


def reference_ms(repeats: int = 5) -> float:
    """Median wall time of the workload, in milliseconds (about 20 ms on a quiet core)."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        _workload()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)
