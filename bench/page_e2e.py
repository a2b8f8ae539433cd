"""The end-to-end section of `docs/performance.md`, from `e2e.json` only.

The section sits between two markers, so that `python -m bench e2e` alone can replace it and
leave the rest of the page as the last full run wrote it (`splice`); a full render puts it
after the growth section. Like the rest of the page, it states no figure the file does not hold.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from typing import Any

from bench.e2e_summary import TARGETS

BEGIN = "<!-- e2e:begin — written by `python -m bench e2e` from bench/out/e2e.json -->"
END = "<!-- e2e:end -->"
X = "\N{MULTIPLICATION SIGN}"
SETUP_NAMES = {"none": "no webhook", "noop": "no-op webhook", "ours": "ours"}


def _n(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, int) or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _span(f: Mapping[str, float], key: str, unit: str = "") -> str:
    low, high = f.get(f"{key}_min"), f.get(f"{key}_max")
    spread = f" ({_n(low)} to {_n(high)})" if low is not None and high is not None else ""
    return f"{_n(f.get(key))}{unit}{spread}"


def section(e2e: Mapping[str, Any]) -> list[str]:
    f: Mapping[str, float] = e2e["figures"]
    cfg = e2e["config"]
    sizes, rounds = cfg["sizes"], cfg["rounds"]
    code = e2e.get("code", {})
    dirty = " plus uncommitted changes under `webhook/`" if code.get("webhook_dirty") else ""
    when = (
        datetime.datetime.fromtimestamp(e2e["unix_time"], datetime.UTC).strftime("%Y-%m-%d")
        if "unix_time" in e2e
        else "unknown"
    )
    out = [
        BEGIN,
        "## 4. End to end: bulk writes and convergence on a real API server",
        "",
        "What a user meets: `kubectl create -f` of many routes through kube-apiserver v1.20.2 "
        "(the end-to-end suite's, with etcd, on loopback), and the time until every annotation "
        "is right after a policy edit. One Gateway with a RetryPolicy; N HTTPRoutes in one "
        "`kind: List`, all on that Gateway and all sending to one backend Service (the worst "
        "case for a shared object: the Service has a context per route). Three set-ups side by "
        "side, the order flipping every round: no webhook registered; a no-op (an aiohttp HTTPS "
        "endpoint answering `allowed: true`, registered through the shipped configurations — "
        "same rules, timeouts and failure policies); ours (`policy-webhook serve` in cluster "
        "mode, leading, started from a converged state). Ratios are per round, then the median "
        "over rounds (lowest to highest in brackets). Admission latency is the API server's own "
        "`apiserver_admission_webhook_admission_duration_seconds`, the difference of two scrapes "
        "around the phase, pooled over rounds; its buckets in v1.20 are 5, 25, 100, 500 and 2,500 "
        "ms, so p50/p99 are interpolated inside a bucket and the share within 5 ms is exact. "
        f"Command: `make bench-e2e`. Measured on {when}, commit `{code.get('commit', '?')}`{dirty} "
        f"(webhook/ digest `{code.get('digest', '?')}`); "
        + ", ".join(
            f"{s:,} routes: {r} round{'s' if r != 1 else ''}"
            for s, r in zip(sizes, rounds, strict=True)
        )
        + ". Diagnosis of the gaps: [bench/e2e-findings.md](../bench/e2e-findings.md).",
        "",
        "| target (issue 18) | goal | measured | met? |",
        "|---|---|---|---|",
    ]
    for key, what, goal, unit, higher in TARGETS:
        value = f.get(key)
        verdict = "—" if value is None or not math.isfinite(value) else (
            "**yes**" if f.get(f"target_met_{key}") else "**no**")  # fmt: skip
        out.append(
            f"| {what} | {'≥' if higher else '≤'} {_n(goal)}{unit} | {_n(value)}{unit} | {verdict} |"
        )
    out += ["", *_bulk(f, sizes), *_latency(f, sizes), *_fanout(f, sizes), *_growth(e2e), END, ""]
    return out


def _bulk(f: Mapping[str, float], sizes: list[int]) -> list[str]:
    out = [
        "Bulk create (wall time of one `kubectl create -f`, median over rounds):",
        "",
        "| routes | no webhook | no-op webhook | ours | no-op / none | ours / no-op |",
        "|---|---|---|---|---|---|",
    ]
    for s in sizes:
        p = f"bulk_{s}_"
        out.append(
            f"| {s:,} | {_span(f, p + 'none_s', ' s')} | {_span(f, p + 'noop_s', ' s')} | "
            f"{_span(f, p + 'ours_s', ' s')} | {_span(f, p + 'noop_vs_none', X)} | "
            f"{_span(f, p + 'ours_vs_noop', X)} |"
        )
    out += ["", "CPU seconds spent during the bulk create (median over rounds):", "",
            "| routes | set-up | kube-apiserver | etcd | webhook process |", "|---|---|---|---|---|"]  # fmt: skip
    for s in sizes:
        for setup, name in SETUP_NAMES.items():
            p = f"bulk_{s}_{setup}_cpu_"
            out.append(
                f"| {s:,} | {name} | {_n(f.get(p + 'kube_apiserver_s'))} | "
                f"{_n(f.get(p + 'etcd_s'))} | {_n(f.get(p + 'webhook_s')) if setup != 'none' else '—'} |"
            )
    return [*out, ""]


def _latency(f: Mapping[str, float], sizes: list[int]) -> list[str]:
    out = [
        "Mutating admission calls as the API server timed them (pooled over rounds):",
        "",
        "| phase | routes | webhook | calls | p50 | p99 | within 5 ms | mean |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = [("bulk create", s, name, f"bulk_{s}_{setup}_admit_") for s in sizes
            for setup, name in (("noop", "no-op"), ("ours", "ours"))]  # fmt: skip
    rows += [("policy fan-out, default qps", s, "ours", f"fanout_{s}_admit_") for s in sizes]
    rows += [
        ("policy fan-out, limiter lifted", s, "ours", f"fanout_fast_{s}_admit_") for s in sizes
    ]
    for phase, s, name, p in rows:
        if f"{p}count" not in f:
            continue
        share = f.get(f"{p}share_within_5ms")
        out.append(
            f"| {phase} | {s:,} | {name} | {_n(f[p + 'count'])} | {_n(f.get(p + 'p50_ms'))} ms | "
            f"{_n(f.get(p + 'p99_ms'))} ms | {_n(100 * share if share is not None else None)}% | "
            f"{_n(f.get(p + 'mean_ms'))} ms |"
        )
    return [*out, ""]


def _fanout(f: Mapping[str, float], sizes: list[int]) -> list[str]:
    out = [
        "Convergence after one edit of the Gateway's RetryPolicy, timed by a watch on the "
        "routes (every route's annotation saying the new value; median over rounds):",
        "",
        "| routes | `--reconcile-qps` | until all right | objects/s | first right | half right | "
        "kube-apiserver CPU | webhook CPU | patches / skips / retries |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in sizes:
        for p in (f"fanout_{s}_", f"fanout_fast_{s}_"):
            if f"{p}seconds" not in f:
                continue
            qps = f[f"{p}qps"]
            label = (
                f"{_n(qps)} (default)"
                if p.startswith("fanout_") and "fast" not in p
                else f"{_n(qps)} (burst as much)"
            )
            out.append(
                f"| {s:,} | {label} | {_n(f[p + 'seconds'])} s | {_n(f[p + 'objects_per_s'])} | "
                f"{_n(f[p + 'first_s'])} s | {_n(f[p + 'half_s'])} s | "
                f"{_n(f[p + 'cpu_kube_apiserver_s'])} s | {_n(f[p + 'cpu_webhook_s'])} s | "
                f"{_n(f[p + 'reconcile_patches'])} / {_n(f[p + 'reconcile_skips'])} / "
                f"{_n(f[p + 'reconcile_retries'])} |"
            )
    return [*out, ""]


def _growth(e2e: Mapping[str, Any]) -> list[str]:
    growth = e2e.get("growth") or {}
    points = growth.get("points", [])
    if not points:
        return []
    out = [
        "Cost of one route event as the routes sharing one Service grow: single routes "
        "created one at a time, ours' CPU from the create until it is quiet again (its idle "
        "rate taken off), mean over the probes; the exponent is fitted on the means. Our "
        "handler's own /mutate time for the Service (its value has a context per route) is "
        "from the decision log.",
        "",
        "| routes sharing the Service | CPU per route event (mean / median) | /mutate of the route, median | /mutate of the Service, median |",
        "|---|---|---|---|",
    ]
    for p in points:
        h = p["handler"]
        route: Mapping[str, Any] = next(
            (v for k, v in h.items() if "HTTPRoute" in k and "CREATE" in k), {}
        )
        service: Mapping[str, Any] = next(
            (v for k, v in h.items() if " Service " in f"{k} " and "UPDATE" in k), {}
        )
        out.append(
            f"| {p['routes']:,} | {_n(p['event_cpu_ms'])} / {_n(p['event_cpu_ms_median'])} ms | "
            f"{_ms(route)} | {_ms(service)} |"
        )
    out += ["", f"Fitted exponent: **{_n(growth.get('exponent'), 2)}** (target ≤ 0.2).", ""]
    return out


def _ms(latency: Mapping[str, Any]) -> str:
    """A median from the decision log; none when the object was never patched (a Service
    whose value no longer changes once it is truncated to no context at all)."""
    return f"{_n(latency['median_ms'])} ms" if latency else "none (value unchanged)"


def splice(page: str, lines: list[str]) -> str:
    """`page` with its end-to-end section replaced by `lines` (or inserted before the plot)."""
    block = "\n".join(lines).rstrip() + "\n"
    if BEGIN in page and END in page:
        head, _, rest = page.partition(BEGIN)
        _, _, tail = rest.partition(END)
        return head + block.rstrip("\n") + tail
    for anchor in ("## Plot", "## Where the time goes", "## Choices"):
        if f"\n{anchor}" in page:
            head, _, tail = page.partition(f"\n{anchor}")
            return f"{head}\n{block}\n{anchor}{tail}"
    return page.rstrip() + "\n\n" + block
