"""The side-by-side harness (`bench.side_by_side`): two versions of `webhook` in one process,
each with its own modules and state, and a change of answer caught rather than timed."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import bench
from bench import scale, side_by_side, snapshot

Versions = tuple[side_by_side.Version, side_by_side.Version, list[tuple[str, dict[str, Any]]]]


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Versions]:
    """A copy of this tree's `webhook/` (where a baseline's `git archive` would go; a checkout
    without `.git` runs this too) and this tree's, each holding the same small cluster."""
    folder = tmp_path_factory.mktemp("baseline")
    shutil.copytree(snapshot.REPO / "webhook", folder / "webhook")
    base = side_by_side.load("base", folder)
    ours = side_by_side.load("ours", snapshot.REPO)
    shutil.rmtree(folder)
    generated = scale.generate(0.02, 1, 20)
    with generated.listing as listing:
        lines = listing.read().splitlines()
    keys = [tuple(key) for key in generated.keys]
    for version in (base, ours):
        side_by_side.build_state(version, lines, keys)
    yield base, ours, generated.validate_mix


def test_each_version_runs_its_own_modules_and_leaves_sys_modules_as_it_was(
    versions: Versions,
) -> None:
    base, ours, _ = versions
    here = sys.modules["webhook.core.model.refs"]  # this test process's own import
    assert base.modules["refs"] is not ours.modules["refs"]
    assert here is not base.modules["refs"] and here is not ours.modules["refs"]
    assert Path(base.modules["refs"].__file__ or "").parts[-4:-3] == ("webhook",)
    assert not Path(base.modules["refs"].__file__ or "").is_relative_to(snapshot.REPO)
    assert type(base.state) is base.modules["store"].Store
    assert type(ours.state) is ours.modules["store"].Store
    with ours.active():
        assert sys.modules["webhook.core.model.refs"] is ours.modules["refs"]
    assert sys.modules["webhook.core.model.refs"] is here
    # Each version's scale phases run its own code; this process's stay as imported.
    assert base.modules["scale"].Store is base.modules["store"].Store
    assert sys.modules["bench.scale"] is scale and bench.scale is scale


def test_the_same_code_on_both_sides_answers_every_review_alike(
    versions: Versions,
) -> None:
    base, ours, mix = versions
    found = side_by_side.compare(base, ours, "validate", mix, reps=2, reach_known=False)
    assert found["answers_differ"] == []
    assert found["reviews"] == len(mix) == len(found["per_review"])
    assert all(row["base_ms"] > 0 and row["ours_ms"] > 0 for row in found["per_review"])
    assert found["ratio_wide"] is not None  # the mix holds Gateway- and Namespace-wide reviews


def test_a_version_that_answers_differently_is_reported(
    versions: Versions, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, ours, mix = versions
    validation = ours.modules["validation"]
    allow_all = validation.Verdict  # an empty verdict: allowed, no warnings
    monkeypatch.setattr(validation, "validate", lambda request, **_: allow_all())
    found = side_by_side.compare(base, ours, "validate", mix, reps=1, reach_known=True)
    judged = [review["request"]["uid"] for category, review in mix if category.startswith("broken")]
    assert judged  # the mix holds policies that the rules deny
    assert set(judged) <= set(found["answers_differ"])
