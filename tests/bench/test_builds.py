"""`python -m bench` times the core as the image ships it, and says so only when it did: a
part whose processes imported another build than the part was given stops the run."""

from __future__ import annotations

from typing import Any

import pytest

from bench.__main__ import PYTHON_PARTS, _check_core


def test_a_part_whose_processes_ran_the_build_it_was_given_passes() -> None:
    _check_core("scale", {"core": "compiled", "validate_p99_ms": 1.0}, "compiled")
    growth = {"runs": [{"core": "compiled"}, {"core": "compiled"}], "exponents": {}}
    _check_core("growth", growth, "compiled")


@pytest.mark.parametrize(
    ("part", "result"),
    [
        ("scale", {"core": "python"}),
        ("http", {"core": "mixed"}),  # a compiled build beside edited sources
        ("growth", {"runs": [{"core": "compiled"}, {"core": "python"}]}),
    ],
)
def test_a_part_that_timed_another_build_stops_the_run(part: str, result: dict[str, Any]) -> None:
    with pytest.raises(RuntimeError, match=f"part {part} was to time the core compiled"):
        _check_core(part, result, "compiled")


def test_the_profiles_run_the_core_as_python() -> None:
    """py-spy samples Python's frames; a compiled function has none to sample."""
    assert "profile" in PYTHON_PARTS
    assert {"http", "scale", "memory", "growth", "choices"}.isdisjoint(PYTHON_PARTS)
