"""Which webhook a benchmark runs as its baseline (`bench.snapshot.code_tree`, here through the
end-to-end part's `bench.e2e_code.extracted`): a folder's `webhook/` (a copy built another way,
such as one compiled to extensions) runs as it is, compiled modules included, and is said to be
a folder, not a commit."""

from __future__ import annotations

import importlib.machinery
import shutil
import subprocess
import sys
from pathlib import Path

from bench import e2e_code, snapshot


def test_a_folder_baseline_is_copied_with_its_compiled_modules_and_their_runtime(
    tmp_path: Path,
) -> None:
    given = tmp_path / "built"
    shutil.copytree(snapshot.REPO / "webhook", given / "webhook")
    compiled = "engine" + importlib.machinery.EXTENSION_SUFFIXES[0]
    (given / "webhook" / "core" / compiled).write_bytes(b"\x7fELF: a stand-in")
    shared = "0123abcd__mypyc" + importlib.machinery.EXTENSION_SUFFIXES[0]  # mypyc's runtime
    (given / shared).write_bytes(b"\x7fELF: the runtime the modules share")

    with e2e_code.extracted(str(given)) as (root, code):
        assert (root / "webhook" / "core" / compiled).read_bytes() == b"\x7fELF: a stand-in"
        assert (root / shared).read_bytes() == b"\x7fELF: the runtime the modules share"
        assert (root / "bench" / "e2e.py").is_file()  # the harness is this tree's
        assert (root / "examples" / "cluster").is_dir()  # the CRDs the scenarios install
        assert code["compiled_modules"] == 1
        assert code["commit"] == "folder"
        assert code["webhook_dirty"] is True
        # the same sources as this tree: the same digest as the code measured would have
        assert code["digest"] == snapshot.identity(snapshot.REPO)["digest"]
    assert not root.exists()  # nothing left behind


def test_a_folder_with_example_crds_of_its_own_runs_with_those(tmp_path: Path) -> None:
    """As `bench.route_event` runs a folder baseline: its CRDs, where it has them."""
    given = tmp_path / "built"
    shutil.copytree(snapshot.REPO / "webhook", given / "webhook")
    (given / "examples" / "cluster").mkdir(parents=True)
    (given / "examples" / "cluster" / "00-crds.yaml").write_text("# the folder's own\n")

    with e2e_code.extracted(str(given)) as (root, _):
        found = sorted(path.name for path in (root / "examples" / "cluster").iterdir())
    assert found == ["00-crds.yaml"]


def test_a_core_compiled_for_a_run_is_imported_as_extensions(tmp_path: Path) -> None:
    """`snapshot.compile_core`, what `bench.e2e` does to measure the build the image ships: a
    core of one small module, compiled by this tree's recipe, is imported from its extension
    (a real mypyc build, seconds for one module) and the build's scratch is gone."""
    core = tmp_path / "webhook" / "core"
    core.mkdir(parents=True)
    (tmp_path / "webhook" / "__init__.py").write_text("")
    (core / "__init__.py").write_text("")
    (core / "tiny.py").write_text("def double(n: int) -> int:\n    return 2 * n\n")
    snapshot.compile_core(tmp_path, None)
    ran = subprocess.run(
        [sys.executable, "-c", "import webhook.core.tiny as t; print(t.double(21), t.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    answer, loaded = ran.stdout.split()
    assert answer == "42"
    assert loaded.endswith(snapshot.EXTENSIONS)
    assert not (tmp_path / "build").exists()
