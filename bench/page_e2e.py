"""The end-to-end section of `docs/performance.md`, from `e2e.json` only.

The section sits between two markers, so that `python -m bench e2e` alone can replace it and
leave the rest of the page as the last full run wrote it (`splice`); a full render puts it
after the growth section. Like the rest of the page, it states no figure the file does not hold;
its prose is `bench/performance-e2e.md.tmpl`.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import prose
from bench.e2e_summary import TARGETS, other_requests

BEGIN = "<!-- e2e:begin — written by `python -m bench e2e` from bench/out/e2e.json -->"
END = "<!-- e2e:end -->"
X = "\N{MULTIPLICATION SIGN}"
SETUP_NAMES = {"none": "no webhook", "noop": "no-op webhook", "floor": "floor", "ours": "ours"}
TEMPLATE = Path(__file__).with_name("performance-e2e.md.tmpl")


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
    text = prose.load(TEMPLATE)
    when = (
        datetime.datetime.fromtimestamp(e2e["unix_time"], datetime.UTC).strftime("%Y-%m-%d")
        if "unix_time" in e2e
        else "unknown"
    )
    targets = ["| target (issue 18) | goal | measured | met? |", "|---|---|---|---|"]
    for key, what, goal, unit, higher in TARGETS:
        value = f.get(key)
        verdict = "—" if value is None or not math.isfinite(value) else (
            "**yes**" if f.get(f"target_met_{key}") else "**no**")  # fmt: skip
        targets.append(
            f"| {what} | {'≥' if higher else '≤'} {_n(goal)}{unit} | {_n(value)}{unit} | {verdict} |"
        )
    floor = _has_floor(f, sizes)
    intro = text.block(
        "section",
        {},
        setups="Four" if floor else "Three",
        floor=text.text("floor", {}) + " " if floor else "",
        day=when,
        commit=code.get("commit", "?"),
        dirty=text.aside("dirty", {}) if code.get("webhook_dirty") else "",
        build=(
            text.text("compiled", {}, modules=code["compiled_modules"])
            if code.get("compiled_modules")
            else text.text("python", {})
        ),
        digest=code.get("digest", "?"),
        rounds=", ".join(
            f"{s:,} routes: {r} round{'s' if r != 1 else ''}"
            for s, r in zip(sizes, rounds, strict=True)
        ),
        targets="\n".join(targets),
    )
    return [
        BEGIN,
        *intro,
        *_bulk(text, f, sizes, e2e.get("rows", [])),
        *_latency(text, f, sizes),
        *_fanout(text, f, sizes),
        *_growth(text, e2e),
        END,
        "",
    ]


def _has_floor(f: Mapping[str, float], sizes: list[int]) -> bool:
    """Whether the run had the floor set-up (runs before it was added did not)."""
    return any(f"bulk_{s}_floor_s" in f for s in sizes)


def _bulk(
    text: prose.Prose, f: Mapping[str, float], sizes: list[int], rows: list[dict[str, Any]]
) -> list[str]:
    floor = _has_floor(f, sizes)
    columns = [("no webhook", "none_s", " s"), ("no-op webhook", "noop_s", " s")]
    columns += [("floor", "floor_s", " s")] if floor else []
    columns += [("ours", "ours_s", " s"), ("no-op / none", "noop_vs_none", X)]
    columns += [("floor / no-op", "floor_vs_noop", X)] if floor else []
    columns += [("ours / no-op", "ours_vs_noop", X)]
    columns += [("ours / floor", "ours_vs_floor", X)] if floor else []
    out = [
        "| routes | " + " | ".join(name for name, _, _ in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for s in sizes:
        p = f"bulk_{s}_"
        cells = [_span(f, p + key, unit) for _, key, unit in columns]
        out.append(f"| {s:,} | " + " | ".join(cells) + " |")
    # Runs before the harness counted the API server's requests have no such column.
    counted = any("requests" in r for r in rows)
    cpu = ["| routes | set-up | kube-apiserver | etcd | webhook process |", "|---|---|---|---|---|"]
    if counted:
        cpu = [cpu[0] + " API requests besides the creates |", cpu[1] + "---|"]
    setups = {k: v for k, v in SETUP_NAMES.items() if floor or k != "floor"}
    for s in sizes:
        for setup, name in setups.items():
            p = f"bulk_{s}_{setup}_cpu_"
            cpu.append(
                f"| {s:,} | {name} | {_n(f.get(p + 'kube_apiserver_s'))} | "
                f"{_n(f.get(p + 'etcd_s'))} | {_n(f.get(p + 'webhook_s')) if setup != 'none' else '—'} |"
                + (f" {_requests(other_requests(rows, s, setup))} |" if counted else "")
            )
    requests = text.text("requests", {}) if counted else ""
    return text.block("bulk", {}, table="\n".join(out), cpu_table="\n".join(cpu), requests=requests)


def _requests(counts: Mapping[str, float]) -> str:
    """`patch services 2, put leases 1`: a bulk create's other requests, medians over rounds."""
    return ", ".join(f"{kind} {_n(n)}" for kind, n in counts.items()) or "none"


def _latency(text: prose.Prose, f: Mapping[str, float], sizes: list[int]) -> list[str]:
    lagged = any(k.endswith("_lag_count") for k in f)  # runs before the loop's probe had none
    out = [
        "| phase | routes | webhook | calls | p50 | p99 | within 5 ms | mean |"
        + (" ours' loop lag: p99 / within 5 ms |" if lagged else ""),
        "|---|---|---|---|---|---|---|---|" + ("---|" if lagged else ""),
    ]
    rows = [("bulk create", s, name, f"bulk_{s}_{setup}_") for s in sizes
            for setup, name in (("noop", "no-op"), ("floor", "floor"), ("ours", "ours"))]  # fmt: skip
    rows += [("policy fan-out, default limits", s, "floor", f"floor_fanout_{s}_") for s in sizes]
    rows += [("policy fan-out, default qps", s, "ours", f"fanout_{s}_") for s in sizes]
    rows += [("policy fan-out, limiter lifted", s, "ours", f"fanout_fast_{s}_") for s in sizes]
    for phase, s, name, head in rows:
        p = head + "admit_"
        if f"{p}count" not in f:
            continue
        share = f.get(f"{p}share_within_5ms")
        cells = (
            f"| {phase} | {s:,} | {name} | {_n(f[p + 'count'])} | {_n(f.get(p + 'p50_ms'))} ms | "
            f"{_n(f.get(p + 'p99_ms'))} ms | {_percent(share)} | {_n(f.get(p + 'mean_ms'))} ms |"
        )
        if lagged:
            lag = head + "lag_"
            cells += (
                f" {_n(f[lag + 'p99_ms'])} ms / {_percent(f[lag + 'share_within_5ms'])} |"
                if lag + "count" in f
                else " — |"
            )
        out.append(cells)
    return text.block("latency", {}, table="\n".join(out))


def _percent(share: float | None) -> str:
    return f"{_n(100 * share if share is not None else None)}%"


def _fanout(text: prose.Prose, f: Mapping[str, float], sizes: list[int]) -> list[str]:
    out = [
        "| routes | `--reconcile-qps` | until all right | objects/s | first right | half right | "
        "kube-apiserver CPU | webhook CPU | patches / skips / retries |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in sizes:
        for p, how in (
            (f"floor_fanout_{s}_", ", the floor's patches"),
            (f"fanout_{s}_", " (default)"),
            (f"fanout_fast_{s}_", " (burst as much)"),
        ):
            if f"{p}seconds" not in f:
                continue
            label = _n(f[f"{p}qps"]) + how
            patches = (
                f"{_n(f[p + 'reconcile_patches'])} / {_n(f[p + 'reconcile_skips'])} / "
                f"{_n(f[p + 'reconcile_retries'])}"
                if p + "reconcile_patches" in f
                else "—"
            )
            out.append(
                f"| {s:,} | {label} | {_n(f[p + 'seconds'])} s | {_n(f[p + 'objects_per_s'])} | "
                f"{_n(f[p + 'first_s'])} s | {_n(f[p + 'half_s'])} s | "
                f"{_n(f[p + 'cpu_kube_apiserver_s'])} s | {_n(f[p + 'cpu_webhook_s'])} s | "
                f"{patches} |"
            )
    return text.block("fanout", {}, table="\n".join(out))


def _growth(text: prose.Prose, e2e: Mapping[str, Any]) -> list[str]:
    growth = e2e.get("growth") or {}
    points = growth.get("points", [])
    if not points:
        return []
    out = [
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
    return text.block("growth", {}, table="\n".join(out), exponent=_n(growth.get("exponent"), 2))


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
