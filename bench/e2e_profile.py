"""Where ours spends its event loop during an end-to-end phase, from py-spy's collapsed stacks.

py-spy samples only threads that are running, so the shares are of the time ours was busy.
Each sample is put in one *activity* by the outermost frame of ours on its stack: answering
admission, reconciling, applying watch events (and, inside them, the cache's dependency
tracking and the reconciler's listener), leader election, or else (aiohttp, TLS, asyncio).
Inclusive shares of the summary functions say how much of each went into computing values.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

# (activity, module, function): a frame of that function (any class's method of that name; any
# function of the module when None) puts a sample in it; the outermost match wins.
ACTIVITIES: tuple[tuple[str, str, str | None], ...] = (
    ("admission (/mutate, /validate)", "webhook/shell/https/endpoints.py", "_review"),
    ("reconciler workers", "webhook/shell/cluster/reconciler.py", "_work"),
    ("watch events into the store", "webhook/shell/cluster/informers.py", None),
    ("leader election", "webhook/shell/cluster/leader.py", None),
    ("metrics export", "webhook/shell/cluster/live.py", "export"),
    ("reconciler's patch requests (API client)", "webhook/shell/cluster/kubeapi.py", None),
)
# Functions whose inclusive share is worth a line of its own, whatever activity holds them.
WATCHED: tuple[tuple[str, str, str | None], ...] = (
    ("summary values computed (any caller)", "webhook/core/annotation/summary.py", "summarize_in_pieces"),
    ("contexts of the shared Service (one per route)", "webhook/core/engine/hierarchy.py", "_service_contexts"),
    ("hierarchy index rebuilt from scratch", "webhook/core/engine/hierarchy_index.py", "build_index"),
    ("… of which the truncation of an oversized value", "webhook/core/annotation/summary.py", "truncated"),
    ("a busy Service's value from its pieces by route", "webhook/core/annotation/hubs.py", "summarize_in_pieces"),
    ("one kind's piece recomputed (cache refresh)", "webhook/core/annotation/summary.py", "kind_pieces"),
    ("/mutate's annotation patch (summary on an overlay)", "webhook/core/admission/mutation.py", "annotation_patch"),
    ("what a store write affects (dependencies)", "webhook/core/annotation/dependencies.py", "affected_by_change"),
    ("reconciler: value wanted (cache.get)", "webhook/shell/cluster/reconciler.py", "_wanted"),
    ("reconciler: one PATCH sent and read", "webhook/shell/cluster/reconciler.py", "_patch"),
    ("watch stream read and decoded", "webhook/shell/cluster/informers.py", "watch"),
    ("garbage collection (gc.collect, heap settle)", "webhook/shell/process/heap.py", None),
)  # fmt: skip


def matches(frame: str, module: str, function: str | None) -> bool:
    """Whether `frame` (`path:Class.function` or `path:function`) is that function."""
    path, _, name = frame.partition(":")
    if path != module:
        return False
    return function is None or name == function or name.endswith("." + function)


_FRAME = re.compile(r"^(?P<fn>.+?) \((?P<file>[^()]*)\)$")


def frame_name(frame: str) -> str:
    """`path/inside/the/repo.py:function`, no machine paths (`aiohttp/web.py` for libraries)."""
    match = _FRAME.match(frame)
    if not match:
        return frame
    fn, path = match["fn"], match["file"].rsplit(":", 1)[0]
    if not path.startswith("/") and not path.startswith("<"):
        return f"{path}:{fn}"  # relative to ours' working directory: the code root
    for marker in ("/webhook/", "/bench/"):
        if marker in path:
            return f"{marker.strip('/')}/{path.split(marker, 1)[1]}:{fn}"
    for marker in ("/site-packages/", "/lib/python3."):
        if marker in path:
            tail = path.split(marker, 1)[1]
            return f"{tail.split('/', 1)[1] if marker.endswith('.') else tail}:{fn}"
    return f"{Path(path).name}:{fn}"


def read(raw: str) -> list[tuple[list[str], int]]:
    """py-spy's raw format: one `frame;frame;… count` line per distinct stack, root first."""
    out = []
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            out.append(([frame_name(f) for f in stack.split(";")], int(count)))
    return out


def summarize(raw: str, *, top: int = 15) -> dict[str, Any]:
    """Samples, activity shares, watched functions' inclusive shares, top own and inclusive."""
    stacks = read(raw)
    total = sum(n for _, n in stacks)
    activity: Counter[str] = Counter()
    watched: Counter[str] = Counter()
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for frames, n in stacks:
        activity[_activity(frames)] += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
        for label, module, function in WATCHED:
            if any(matches(f, module, function) for f in frames):
                watched[label] += n

    def shares(counter: Counter[str], k: int | None = None) -> list[list[Any]]:
        pairs = counter.most_common(k)
        return [[name, round(100 * n / total, 1)] for name, n in pairs] if total else []

    return {
        "samples": total,
        "activities": shares(activity),
        "watched": [
            [label, round(100 * watched[label] / total, 1) if total else 0.0]
            for label, _, _ in WATCHED
        ],
        "own": shares(own, top),
        "inclusive": shares(inclusive, top),
    }


def _activity(frames: list[str]) -> str:
    for frame in frames:
        for label, module, function in ACTIVITIES:
            if matches(frame, module, function):
                return label
    return "other (aiohttp, TLS, asyncio, GC)"


def as_text(title: str, result: dict[str, Any]) -> str:
    lines = [f"# {title}", f"# {result['samples']} samples of ours while busy (py-spy, 200 Hz)", ""]
    for heading in ("activities", "watched", "own", "inclusive"):
        lines.append(f"## {heading}")
        lines += [f"{pct:5.1f}%  {name}" for name, pct in result[heading]]
        lines.append("")
    return "\n".join(lines)
