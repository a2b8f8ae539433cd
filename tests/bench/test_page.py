"""The performance page: its prose templates are whole, and the committed results render the
committed page byte for byte. Nothing is measured and nothing is written into the checkout."""

from __future__ import annotations

import copy
import json
import platform
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench import page, page_e2e, prose, report

OUT = report.ROOT / "bench" / "out"
PAGE = report.DOCS / "performance.md"
TEMPLATES = (page.TEMPLATE, page_e2e.TEMPLATE)

Parts = dict[str, Any]


def committed_parts() -> Parts:
    return report.load_parts(OUT)


def render(parts: Parts, flat: dict[str, Any] | None = None) -> str:
    flat = report.flatten(parts) if flat is None else flat
    return page.render(parts, flat, report.targets_table(flat), plotted=True)


def test_rendering_the_committed_results_reproduces_the_committed_page(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    committed = PAGE.read_text(encoding="utf-8")
    # The page names the interpreter that rendered it, a fact the results do not hold; the
    # machine's cores are in results.json, which is read as it is rather than recomputed here.
    python = re.search(r"with Python (\S+) on", committed)
    assert python, "the page no longer names its Python version"
    monkeypatch.setattr(platform, "python_version", lambda: python[1])
    flat = json.loads((OUT / "results.json").read_text(encoding="utf-8"))
    assert render(committed_parts(), flat) == committed


def _set(part: str, **values: Any) -> Callable[[Parts], None]:
    return lambda parts: parts[part].update(values)


def _code(*names: str, **values: Any) -> Callable[[Parts], None]:
    def edit(parts: Parts) -> None:
        for name in names:
            parts[name]["code"] = {**parts[name]["code"], **values}

    return edit


def _both(*edits: Callable[[Parts], None]) -> Callable[[Parts], None]:
    def edit(parts: Parts) -> None:
        for one in edits:
            one(parts)

    return edit


# Runs unlike the committed one, so that every alternative snippet is chosen once.
def _with_and_without_floor(parts: Parts) -> None:
    """An end-to-end run with the floor set-up (its figures: the no-op's, renamed), or, when
    the committed run has it, one from before it was added."""
    figures = parts["e2e"]["figures"]
    if any("_floor_" in key for key in figures):
        parts["e2e"]["figures"] = {k: v for k, v in figures.items() if "floor" not in k}
    else:
        figures.update(
            {k.replace("_noop_", "_floor_"): v for k, v in figures.items() if "_noop_" in k}
        )
        for key in [
            k
            for k in figures
            if k.endswith(("_noop_vs_none", "_noop_vs_none_min", "_noop_vs_none_max"))
        ]:
            figures[key.replace("noop_vs_none", "floor_vs_noop")] = 1.0
            figures[key.replace("noop_vs_none", "ours_vs_floor")] = figures[
                key.replace("noop_vs_none", "ours_vs_noop")
            ]


def _requests_counted(parts: Parts) -> None:
    """A run whose harness counted the API server's requests in each bulk create, ours making
    two Service patches in one round and three in the others, and a Lease renewal."""
    for row in parts["e2e"]["rows"]:
        row["requests"] = {"post httproutes": row["size"]}
        if row["setup"] == "ours":
            patches = 2 if row["round"] == 0 else 3
            row["requests"].update({"patch services": patches, "put leases": 1})


VARIANTS: dict[str, Callable[[Parts], None]] = {
    "the API server's requests counted": _requests_counted,
    "with or without the floor": _with_and_without_floor,
    "as committed": _both(),
    "a run at half the default size": _set("scale", scale=0.5),
    "cold summaries over their target on a slower machine": _set("scale", cold_summaries_s=6.0),
    "cold summaries that met full collections (before the harness tuned the collector)": _set(
        "scale",
        cold_summaries_s=6.0,
        cold_gc_full_collections=6,
        cold_gc_full_s=1.03,
        cold_gc_full_collected=0,
    ),
    "no summary cache": _set("scale", uses_cache=0),
    "a growth exponent over its target": lambda parts: parts["growth"]["exponents"].update(
        fanout_s=1.3
    ),
    "the wide reviews timed after a route's write": _set(
        "scale",
        validate_after_route_write_cat_valid_gateway_median_ms=1.9,
        validate_after_route_write_cat_valid_namespace_median_ms=2.0,
    ),
    "the fixed rate's p99 over its target": _set("http", http_validate_p99_ratio=2.5),
    "wrk well ahead of the Python client": _set("http", http_wrk_gain_over_python_client=2.0),
    "wrk no faster than the Python client": _set("http", http_wrk_gain_over_python_client=0.9),
    "uncommitted changes measured": _code(
        "http", "scale", "growth", "profile", "choices", "e2e", webhook_dirty=True
    ),
    "the core compiled but in the profiles, as `python -m bench` runs it": _both(
        _code("http", "scale", "memory", "growth", "choices", core="compiled", compiled_modules=59),
        _code("profile", core="python", compiled_modules=0),
    ),
    "the core as Python in every part (`--python`)": _code(
        "http", "scale", "memory", "growth", "profile", "choices", core="python"
    ),
    "ours' core compiled, as the image builds it": _code("e2e", compiled_modules=59),
    "ours' core as Python": _code("e2e", compiled_modules=0),
    "every part from one commit": _code(
        "http", "scale", "memory", "growth", "profile", "choices", commit="1234567"
    ),
    "parts run from different commits, the same webhook/": _code("http", commit="0000000"),
    "parts that measured different code": _both(
        _code("http", digest="000000000000"), _code("scale", changed_during_part=True)
    ),
}


def test_the_page_says_which_build_of_the_core_each_part_timed() -> None:
    parts = copy.deepcopy(committed_parts())
    VARIANTS["the core compiled but in the profiles, as `python -m bench` runs it"](parts)
    rendered = render(parts)
    assert (
        "Its core ran compiled with mypyc as the image builds it (59 modules) in §1, §2, "
        "§2's memory, §3 and *Choices*' library timings; the profiles (*Where the time goes*"
    ) in rendered
    VARIANTS["the core as Python in every part (`--python`)"](parts)
    assert "Its core ran as Python in every part" in render(parts)


def test_the_bulk_creates_other_requests_are_shown_per_set_up() -> None:
    parts = copy.deepcopy(committed_parts())
    for row in parts["e2e"]["rows"]:  # a run from before the harness counted them
        row.pop("requests", None)
    assert "API requests besides the creates" not in render(parts)
    VARIANTS["the API server's requests counted"](parts)
    rendered = render(parts)
    assert "| webhook process | API requests besides the creates |" in rendered
    # The creates themselves are not listed; a count is the median over rounds.
    assert "| 300 | ours | " in rendered
    ours_300 = next(line for line in rendered.splitlines() if line.startswith("| 300 | ours | "))
    assert ours_300.endswith(" patch services 3, put leases 1 |"), ours_300
    noop_300 = next(
        line for line in rendered.splitlines() if line.startswith("| 300 | no-op webhook | ")
    )
    assert noop_300.endswith(" none |"), noop_300


def test_every_snippet_of_the_templates_is_filled_by_some_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each snippet is used, and `substitute` found a value for each of its placeholders."""
    used: set[tuple[str, str]] = set()
    fill = prose.Prose.text

    def recording(
        self: prose.Prose, name: str, values: Any, /, **more: object
    ) -> str:  # the signature of Prose.text
        used.add((self.path.name, name))
        return fill(self, name, values, **more)

    monkeypatch.setattr(prose.Prose, "text", recording)
    base = committed_parts()
    for edit in VARIANTS.values():
        parts = copy.deepcopy(base)
        edit(parts)
        render(parts)
    for path in TEMPLATES:
        snippets = {(path.name, name) for name in prose.load(path).snippets}
        assert snippets - used == set(), f"snippets no run fills in {path.name}"


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_every_snippet_is_a_valid_template(path: Path) -> None:
    for name, template in prose.load(path).snippets.items():
        assert template.is_valid(), name


def test_a_figure_missing_from_the_results_stops_the_render() -> None:
    parts = committed_parts()
    flat = report.flatten(parts)
    del flat["http_noop_validate_rps_python_client"]  # quoted by the wrk reading
    with pytest.raises(KeyError, match="http_noop_validate_rps_python_client"):
        render(parts, flat)


# --- the snippet file ----------------------------------------------------------------------------


def snippets(tmp_path: Path, text: str) -> prose.Prose:
    path = tmp_path / "page.md.tmpl"
    path.write_text(text, encoding="utf-8")
    return prose.load(path)


def test_a_snippet_runs_to_the_next_header_without_the_blank_lines_between(
    tmp_path: Path,
) -> None:
    text = snippets(
        tmp_path, "the file's comment\n[[one]]  a note\n# $title\n\nbody\n\n\n[[two]]\nx\n"
    )
    assert text.lines("one", {"title": "T"}) == ["# T", "", "body"]
    assert text.block("two", {}) == ["x", ""]
    assert text.aside("two", {}) == " x"


def test_a_placeholder_without_a_value_is_an_error_not_left_on_the_page(tmp_path: Path) -> None:
    text = snippets(tmp_path, "[[one]]\n$known and $unknown\n")
    with pytest.raises(KeyError, match="unknown"):
        text.text("one", {"known": "1"})


def test_a_snippet_defined_twice_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="twice"):
        snippets(tmp_path, "[[one]]\na\n[[one]]\nb\n")


def test_a_later_end_to_end_run_leaves_the_day_of_the_other_parts_on_the_page() -> None:
    """`python -m bench e2e` rewrites §4 alone; the head keeps the day its own parts ran."""
    parts = committed_parts()
    before = render(parts)
    later = copy.deepcopy(parts)
    later["e2e"]["unix_time"] = (
        max(p["unix_time"] for p in parts.values() if isinstance(p, dict) and "unix_time" in p)
        + 40 * 86_400
    )
    head = before.split("\n## ")[0]
    assert render(later).split("\n## ")[0] == head
