"""`docs/performance.md`, written from the measured results only (`python -m bench` rewrites it).

Every number on the page comes from the part files of one output folder; the prose around them
is `bench/performance.md.tmpl`, and says how they were measured, never a result the files do not
hold. This module formats the figures, builds the tables and picks the snippets that apply.
"""

from __future__ import annotations

import datetime
import math
import platform
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench import page_e2e, prose, traffic
from bench.report import GROWTH_COSTS, SEPARATE_PARTS, TIMES

X = TIMES
TEMPLATE = Path(__file__).with_name("performance.md.tmpl")

# The fastest full run so far (`68f6d24`): named on the page when a slower machine misses a
# target that run met, so that a reader can tell the machine from the code.
_FASTEST_REFERENCE_MS = 13.6
_FASTEST_RUN = "`68f6d24`: cold summaries 3.51 s, fan-out 0.433 s"


def _n(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, int) or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _ratio(value: Any) -> str:
    return "n/a" if value is None else f"{_n(value)}{X}"


def _figures(
    numbers: Mapping[str, Any], prefix: str = "", *, optional: tuple[str, ...] = ()
) -> dict[str, str]:
    """The template's values: every number by its results.json name, formatted; the `optional`
    names a run may lack read "n/a" (any other missing name stops the render)."""
    values = {f"{prefix}{name}": "n/a" for name in optional}
    values.update(
        (f"{prefix}{k}", _n(v))
        for k, v in numbers.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    )
    return values


def _when(parts: Mapping[str, Any]) -> str:
    stamps = [p["unix_time"] for p in parts.values() if isinstance(p, Mapping) and "unix_time" in p]
    if not stamps:
        return "unknown"
    day = datetime.datetime.fromtimestamp(max(stamps), datetime.UTC)
    return day.strftime("%Y-%m-%d")


def render(
    parts: Mapping[str, Any], flat: Mapping[str, float], targets: list[str], *, plotted: bool
) -> str:
    text = prose.load(TEMPLATE)
    values = _figures(
        flat, optional=("growth_exponent_cold_summaries_s", "growth_exponent_fanout_s")
    )
    out = text.block(
        "head",
        values,
        # The head's day is that of the parts it introduces: §4 (e2e) says its own, and is
        # rewritten alone (`python -m bench e2e`) on whatever day it runs.
        day=_when({name: part for name, part in parts.items() if name != "e2e"}),
        python=platform.python_version(),
        cores=int(flat.get("machine_cpus", 0)),
        fastest_reference_ms=_FASTEST_REFERENCE_MS,
        targets="\n".join(targets),
    )
    if flat.get("scale_scale", 1.0) != 1.0:
        out += text.block("not_default_size", values, size=f"{flat['scale_scale']:g}")
    out += text.block("targets_note", values)
    out += _not_met(text, flat, values)
    out += _code(text, parts)
    out += text.block("reproduce", values)
    if "http" in parts:
        out += _http(text, parts["http"], flat, values)
    if "scale" in parts:
        out += _scale(text, parts["scale"])
    if "memory" in parts:
        out += _memory(text, parts["memory"])
    if "growth" in parts:
        out += _growth(text, parts["growth"])
    if "e2e" in parts:
        out += page_e2e.section(parts["e2e"])
    if plotted:
        out += text.block("plot", values)
    if "profile" in parts:
        out += _profile(text, parts["profile"])
    out += _choices(text, parts, flat, values)
    return "\n".join(out).rstrip() + "\n"


def _missing(f: Mapping[str, float], *names: str) -> bool:
    """Whether a reading lacks a figure it quotes (a partial run, an older results file)."""
    return any(name not in f for name in names)


def _not_met(text: prose.Prose, f: Mapping[str, float], values: Mapping[str, str]) -> list[str]:
    """Why the targets still missed are missed, from this run's own figures."""
    if _missing(
        f,
        "http_validate_core_ms_per_request",
        "http_validate_stack_ms_per_request",
        "http_noop_validate_cpu_ms_per_request",
        "http_mutate_core_ms_per_request",
        "http_mutate_stack_ms_per_request",
        "http_noop_mutate_cpu_ms_per_request",
        *_wide_medians("validate"),
        "scale_validate_light_p99_ms",
    ):
        return []
    # What the ratios could reach with a serving stack as cheap as the no-op's.
    ceiling = {
        mix: f[f"http_noop_{mix}_cpu_ms_per_request"]
        / (f[f"http_noop_{mix}_cpu_ms_per_request"] + f[f"http_{mix}_core_ms_per_request"])
        for mix in ("validate", "mutate")
    }
    return [
        *text.lines(
            "not_met",
            values,
            ceiling_validate=_n(ceiling["validate"]),
            ceiling_mutate=_n(ceiling["mutate"]),
            again=""
            if _missing(f, *_wide_medians("validate_again"))
            else text.aside("again", values, after_write=_after_write(text, f, values)),
        ),
        *_fixed_rate_reading(text, f, values),
        *_machine_reading(text, f, values),
        *_growth_reading(text, f, values),
        "",
    ]


def _after_write(text: prose.Prose, f: Mapping[str, float], values: Mapping[str, str]) -> str:
    missing = _missing(f, *_wide_medians("validate_after_route_write"))
    return "" if missing else text.aside("after_write", values)


def _wide_medians(phase: str) -> list[str]:
    """The median figures of the Gateway- and Namespace-wide reviews (`traffic.HEAVY`) in one
    phase of `bench.scale` (`validate`, `validate_again`, …), named as it names them."""
    return [f"scale_{phase}_cat_{c.replace('-', '_')}_median_ms" for c in sorted(traffic.HEAVY)]


def _fixed_rate_reading(
    text: prose.Prose, f: Mapping[str, float], values: Mapping[str, str]
) -> list[str]:
    if (
        _missing(
            f,
            "http_validate_p99_ratio",
            "http_validate_rps",
            "http_noop_validate_rps",
            "http_offered_rps",
        )
        or f["http_validate_p99_ratio"] <= 2
    ):
        return []
    light = "http_validate_light_p99_ratio" in f
    return text.lines(
        "fixed_rate",
        values,
        light=text.aside("fixed_rate_light", values) if light else "",
        load=f"{f['http_offered_rps'] / f['http_validate_rps']:.0%}",
        noop_load=f"{f['http_offered_rps'] / f['http_noop_validate_rps']:.0%}",
    )


def _machine_reading(
    text: prose.Prose, f: Mapping[str, float], values: Mapping[str, str]
) -> list[str]:
    """Absolute targets that the fastest full run met and this one misses: name the machine."""
    missed = [
        what
        for name, what in (
            ("target_met_scale_cold_summaries_s", "cold summaries"),
            ("target_met_scale_fanout_s_per_1000_routes", "fan-out"),
        )
        if f.get(name) == 0
    ]
    if not missed or "scale_calibration_ms" not in f:
        return []
    gc = ""
    if f.get("scale_cold_gc_full_collections", 0) > 0:
        gc = text.aside(
            "machine_gc",
            values,
            collections=int(f["scale_cold_gc_full_collections"]),
            collected=int(f["scale_cold_gc_full_collected"]),
        )
    return text.lines(
        "machine",
        values,
        missed=" and ".join(missed).capitalize(),
        fastest_reference_ms=_FASTEST_REFERENCE_MS,
        fastest_run=_FASTEST_RUN,
        gc=gc,
    )


def _growth_reading(
    text: prose.Prose, f: Mapping[str, float], values: Mapping[str, str]
) -> list[str]:
    costs = ("cold_summaries_s", "fanout_s", "load_s")
    if any(f"growth_{k}x_{c}" not in f for k in (1, 8) for c in costs):
        return []
    if all(f.get(f"target_met_growth_exponent_{c}") == 1 for c in costs):
        return []  # a reading of what is not met
    per_object = {c: _n(f[f"growth_8x_{c}"] / f[f"growth_1x_{c}"] / 8) for c in costs}
    return text.lines(
        "growth_reading",
        values,
        per_object_cold=per_object["cold_summaries_s"],
        per_object_fanout=per_object["fanout_s"],
        per_object_load=per_object["load_s"],
    )


def _code(text: prose.Prose, parts: Mapping[str, Any]) -> list[str]:
    """Which code was measured; a loud note when parts saw different code."""
    codes = {
        name: p["code"]
        for name, p in parts.items()
        if isinstance(p, Mapping) and "code" in p and name not in SEPARATE_PARTS
    }
    if not codes:
        return []
    digests = {c["digest"] for c in codes.values()}
    changed = [name for name, c in codes.items() if c.get("changed_during_part")]
    first = next(iter(codes.values()))
    if len(digests) == 1 and not changed:
        dirty = text.aside("code_dirty", {}) if first.get("webhook_dirty") else ""
        by_commit: dict[str, list[str]] = {}
        for name, c in codes.items():
            by_commit.setdefault(c["commit"], []).append(name)
        build = _build(text, codes)
        if len(by_commit) == 1:
            return text.block("code_same", first, dirty=dirty, build=build)
        # A part run again after a change outside `webhook/` (the harness): the same product
        # code, measured from more than one commit.
        commits = "; ".join(f"`{c}`: {', '.join(names)}" for c, names in by_commit.items())
        return text.block("code_same_webhook", first, dirty=dirty, commits=commits, build=build)
    return text.block(
        "code_differs",
        {},
        where=", ".join(f"{name}: `{c['commit']}`/`{c['digest']}`" for name, c in codes.items()),
        changed=text.text("code_changed", {}, parts=", ".join(changed)) if changed else "",
    )


_PART_NAMES = {
    "http": "§1",
    "scale": "§2",
    "memory": "§2's memory",
    "growth": "§3",
    "choices": "*Choices*' library timings",
}


def _build(text: prose.Prose, codes: Mapping[str, Mapping[str, Any]]) -> str:
    """Which build of the core each part ran (`python -m bench` gives the profiles Python,
    the rest the compiled core unless `--python`); parts from before builds were recorded
    count as Python, which is what they ran."""
    compiled = [name for name, c in codes.items() if c.get("core") == "compiled"]
    if not compiled:
        return text.text("build_python", {})
    python = [name for name in codes if name not in compiled]
    named = [_PART_NAMES.get(name, name) for name in python if name != "profile"]
    if "profile" in python:
        named.append(text.text("build_profile_python", {}))
    return text.text(
        "build_compiled",
        {},
        modules=max(codes[name].get("compiled_modules", 0) for name in compiled),
        parts=_joined([_PART_NAMES.get(name, name) for name in compiled]),
        python_parts=_joined(named) if named else "no part",
    )


def _joined(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _http(
    text: prose.Prose, http: Mapping[str, Any], flat: Mapping[str, float], values: Mapping[str, str]
) -> list[str]:
    cfg = http["config"]
    mixes = [m for m in ("validate", "validate_light", "mutate") if f"http_{m}_rps" in flat]
    times = ", ".join(
        f"{m} {_n(1000 / flat[f'http_{m}_rps'])} ms vs {_n(1000 / flat[f'http_noop_{m}_rps'])} ms"
        for m in mixes
        if flat.get(f"http_{m}_rps") and flat.get(f"http_noop_{m}_rps")
    )
    out = text.block(
        "http",
        values,
        state_scale=f"{cfg['scale']:g}",
        bodies=cfg["distinct_bodies"],
        connections=cfg["connections"],
        validate_mix=", ".join(f"{c} {w:.0%}" for c, w in traffic.VALIDATE_MIX.items()),
        mutate_mix=", ".join(f"{c} {w:.0%}" for c, w in traffic.MUTATE_MIX.items()),
        tool=http["tool"],
        saturation_seconds=f"{cfg['saturation_seconds']:g}",
        rate=f"{cfg['rate']:g}",
        rate_seconds=f"{cfg['rate_seconds']:g}",
        rounds=cfg["rounds"],
        table="\n".join(_http_table(flat, mixes)),
        times=times,
    )
    sanity = http.get("sanity", {})
    if sanity:
        v, m = sanity.get("validate", {}), sanity.get("mutate", {})
        out += text.block(
            "http_sanity",
            {},
            denied=v.get("denied"),
            validate_ok=v.get("ok"),
            patched=m.get("patched"),
            mutate_ok=m.get("ok"),
        )
    return out


def _http_table(flat: Mapping[str, float], mixes: list[str]) -> list[str]:
    out = [
        "| mix | ours, req/s | no-op, req/s | throughput ratio (min to max) | ours p50 / p99 | no-op p50 / p99 | p99 ratio | ours answered/s at the fixed rate |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in mixes:
        f = {k.removeprefix(f"http_{m}_"): v for k, v in flat.items() if k.startswith(f"http_{m}_")}
        out.append(
            f"| {m} | {_n(f['rps'])} | {_n(flat[f'http_noop_{m}_rps'])} | "
            f"{_ratio(f['throughput_ratio'])} ({_n(f['throughput_ratio_min'])} to {_n(f['throughput_ratio_max'])}) | "
            f"{_n(f['p50_ms'])} / {_n(f['p99_ms'])} ms | {_n(flat[f'http_noop_{m}_p50_ms'])} / "
            f"{_n(flat[f'http_noop_{m}_p99_ms'])} ms | {_ratio(f['p99_ratio'])} | "
            f"{_n(f['achieved_rps'])} of {_n(flat['http_offered_rps'])} ({_n(f['unfinished'])} unanswered) |"
        )
    return out


def _scale(text: prose.Prose, s: Mapping[str, Any]) -> list[str]:
    values = _figures(
        s,
        "scale_",
        optional=(
            "cached_lookup_median_us",
            "cached_lookup_p99_us",
            "validate_light_median_ms",
            "validate_light_p99_ms",
        ),
    )
    return text.block(
        "scale",
        values,
        size=f"{s['scale']:g}",
        cache=text.text("cache_used" if s.get("uses_cache") else "cache_missing", {}),
        consistent="yes" if s["fanout_consistent"] else "**no**",
        validate_categories="\n".join(_category_table(s, "validate_cat_")),
        mutate_categories="\n".join(_category_table(s, "mutate_cat_")),
    )


# The parts that hold the cluster and the answers themselves (`bench.memory.PARTS`); besides
# them the store's indexes, and every other part is kept to make computing the answers cheap.
_HELD_FOR_USERS = ("store_objects", "summary_values")
_STORE_INDEXES = "store_indexes"


def _memory(text: prose.Prose, m: Mapping[str, Any]) -> list[str]:
    objects = m["objects"]
    counted = sum(part["bytes"] for part in m["parts"])
    table = [
        "| part | what it holds | MB | bytes per object | share | largest: MB (count) |",
        "|---|---|---|---|---|---|",
    ]
    for part in m["parts"]:
        largest = "; ".join(
            f"{name} {size / 1e6:,.1f} ({count:,})" for name, size, count in part["top"][:2]
        )
        table.append(
            f"| {part['name'].replace('_', ' ')} | {part['what']} | {part['bytes'] / 1e6:,.1f} "
            f"| {part['bytes'] / objects:,.0f} | {part['bytes'] / counted:.0%} | {largest} |"
        )

    def kb_per_object(chosen: Callable[[str], bool]) -> str:
        held = sum(part["bytes"] for part in m["parts"] if chosen(part["name"]))
        return _n(held / objects / 1000)

    return text.block(
        "memory",
        _figures(m, "memory_"),
        size=f"{m['scale']:g}",
        table="\n".join(table),
        held_kb=kb_per_object(lambda name: name in _HELD_FOR_USERS),
        indexes_kb=kb_per_object(lambda name: name == _STORE_INDEXES),
        derived_kb=kb_per_object(lambda name: name not in (*_HELD_FOR_USERS, _STORE_INDEXES)),
    )


def _category_table(s: Mapping[str, Any], prefix: str) -> list[str]:
    out = ["| category | median | max |", "|---|---|---|"]
    for key in sorted(k for k in s if k.startswith(prefix) and k.endswith("_median_ms")):
        name = key.removeprefix(prefix).removesuffix("_median_ms")
        out.append(
            f"| {name.replace('_', '-')} | {_n(s[key])} | {_n(s[key.replace('_median_ms', '_max_ms')])} |"
        )
    return out


def _growth(text: prose.Prose, g: Mapping[str, Any]) -> list[str]:
    runs = g["runs"]
    head = (
        "| cost | "
        + " | ".join(f"{r['scale']:g}{X}" for r in runs)
        + " | exponent (CPU time) | exponent (wall time) |"
    )
    table = [head, "|---|" + "---|" * (len(runs) + 2)]
    units = {"_s": "s", "_ms": "ms", "_us": "µs", "_mb": "MB"}
    for cost, label in GROWTH_COSTS.items():
        if not all(cost in r for r in runs):
            continue
        unit = next(u for suffix, u in units.items() if cost.endswith(suffix))
        cells = " | ".join(f"{_n(r[cost])} {unit}" for r in runs)
        table.append(
            f"| {label} | {cells} | **{_n(g['exponents'][cost], 2)}** | {_n(g['exponents'].get(f'{cost}_wall'), 2)} |"
        )
    objects = " | ".join(f"{r['objects']:,}" for r in runs)
    calib = " | ".join(f"{_n(r['calibration_ms'])} ms" for r in runs)
    table += [f"| (objects) | {objects} | | |", f"| (reference workload) | {calib} | | |"]
    return text.block(
        "growth",
        {},
        sizes=", ".join(f"{r['scale']:g}{X}" for r in runs),
        table="\n".join(table),
    )


def _profile(text: prose.Prose, p: Mapping[str, Any]) -> list[str]:
    scenarios = p.get("scenarios", {})
    out = text.block("profile", {}, scale=_n(_profile_scale(scenarios)))
    for name, result in scenarios.items():
        title = f"title_{name}"
        table = ["| own | function | | inclusive | function |", "|---|---|---|---|---|"]
        for (fn_own, pct_own), (fn_inc, pct_inc) in zip(
            result["own"][:10], result["inclusive"][:10], strict=False
        ):
            table.append(f"| {pct_own}% | `{fn_own}` | | {pct_inc}% | `{fn_inc}` |")
        out += text.block(
            "profile_scenario",
            {},
            title=text.text(title, {}) if title in text.snippets else name,
            samples=result["samples"],
            tool=result["tool"],
            seconds=_n(result["seconds"]),
            table="\n".join(table),
        )
    return out


def _profile_scale(scenarios: Mapping[str, Any]) -> float:
    return next((float(r.get("scale", 1.0)) for r in scenarios.values()), 1.0)


# The orjson comparisons of `bench/choices.py`, in the page's order.
_ORJSON_CASES = (
    ("decode_review", "review bodies, orjson alone"),
    ("encode_review", "compact responses, orjson alone"),
    ("summary_dump", "summary values with sorted keys (`summary.dump`)"),
    ("decode_review_guarded", "`reviews` decoding as shipped, its guards included"),
    ("encode_review_guarded", "`reviews` encoding as shipped, its guards included"),
    ("log_line_guarded", "a JSON decision log line as shipped (`logs`)"),
)


def _choices(
    text: prose.Prose,
    parts: Mapping[str, Any],
    flat: Mapping[str, float],
    values: Mapping[str, str],
) -> list[str]:
    out = text.block("choices", values)
    if "http_wrk_gain_over_python_client" in flat:
        gains = flat["http_wrk_gain_over_python_client"] >= 1.1
        reading = text.text("wrk_gains" if gains else "wrk_no_gain", {})
        out += text.lines("wrk", values, reading=reading)
    uv = [m for m in ("validate", "validate_light", "mutate") if f"http_{m}_uvloop_gain" in flat]
    if uv:
        gains_text = ", ".join(f"{m} {_ratio(flat[f'http_{m}_uvloop_gain'])}" for m in uv)
        out += text.lines("uvloop", values, gains=gains_text)
    c = parts.get("choices", {})
    if c:
        out += text.lines("orjson", values)
        for name, what in _ORJSON_CASES:
            if f"orjson_{name}_speedup" in c:
                out += text.lines(
                    "orjson_row",
                    {},
                    what=what,
                    speedup=_n(c[f"orjson_{name}_speedup"]),
                    json_us=_n(c[f"json_{name}_us_per_item"]),
                    same="identical" if c[f"orjson_{name}_identical"] else "**different**",
                )
    gc_pause = text.aside("gc_pause", values) if "scale_gc_full_pause_s" in flat else ""
    return [*out, *text.lines("choices_adopted", values, gc_pause=gc_pause), ""]
