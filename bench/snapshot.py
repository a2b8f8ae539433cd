"""One frozen copy of the code for a whole run, so every part measures the same webhook.

A full run takes a quarter of an hour while others keep committing; without this, the HTTP
part could measure one version of `webhook/` and the growth runs another. `take()` copies
`webhook/`, `bench/` and the example CRDs into a temporary folder; every measuring process
(servers, load generators, scale runs, profiles) starts there, with that folder first on its
path. Outputs still go to the repository (`bench/out/`, `docs/`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
_ENV = "BENCH_CODE_ROOT"


def code_root() -> Path:
    """Where measuring processes import the code from: the snapshot, else the repository."""
    return Path(os.environ.get(_ENV) or REPO)


def env(root: Path | None = None) -> dict[str, str]:
    """Environment for a measuring subprocess (run it with `cwd=code_root()`, or `root`)."""
    paths = [str(root or code_root()), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def json_of(args: list[str], *, quiet: bool = False) -> dict[str, Any]:
    """What `python ARGS` prints (one JSON object), run as a measuring process: in a fresh
    interpreter, on the measured code. `quiet`: its standard error is kept from the terminal
    (and shown in the error if it fails)."""
    done = subprocess.run(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if quiet else None,
        text=True,
        cwd=code_root(),
        env=env(),
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def take() -> Path:
    """Copy the code aside and make it the code of every later measuring process."""
    folder = Path(tempfile.mkdtemp(prefix="bench-code-"))
    _copy_code(REPO, folder)
    shutil.copytree(REPO / "bench", folder / "bench", ignore=_IGNORE)
    os.environ[_ENV] = str(folder)
    return folder


def drop(folder: Path) -> None:
    if os.environ.get(_ENV) == str(folder):
        os.environ.pop(_ENV, None)
    shutil.rmtree(folder, ignore_errors=True)


def compiled_copy(source: Path) -> Path:
    """A copy of the code at `source` (a snapshot, or the repository) with its core compiled
    as the image builds it (`compile_core`): what the parts that time the shipped build run.
    The caller `drop`s it."""
    folder = Path(tempfile.mkdtemp(prefix="bench-code-compiled-"))
    try:
        _copy_code(source, folder)
        shutil.copytree(source / "bench", folder / "bench", ignore=_IGNORE)
        compile_core(folder, None)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


@contextlib.contextmanager
def measuring(root: Path) -> Iterator[None]:
    """For the block, measuring processes start at `root` (`code_root()`) and import from it."""
    previous = os.environ.get(_ENV)
    os.environ[_ENV] = str(root)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(_ENV, None)
        else:
            os.environ[_ENV] = previous


@contextlib.contextmanager
def code_tree(source: str, prefix: str) -> Iterator[Path]:
    """A folder of its own, for the block, holding `webhook/` and the example CRDs of `source`
    and `bench/` of this tree (the harness is what runs): how a benchmark runs a baseline.

    `source` is a revision (`git archive`: nothing in the repository is written) or a folder
    holding a `webhook/` as no commit holds it, such as a build whose modules are compiled to
    extensions: copied as it is, with the runtime mypyc puts beside the package its modules
    share, and the folder's example CRDs where it has them (else this tree's)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        given = Path(source)
        if given.is_dir():
            _copy_code(given, folder)
        else:
            extract_revision(source, folder)
        shutil.copytree(REPO / "bench", folder / "bench", ignore=_IGNORE)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _copy_code(given: Path, folder: Path) -> None:
    """`webhook/` of the folder `given` as it is, the runtime mypyc puts beside the package for
    its compiled modules to share (if any), and its example CRDs where it has them (else this
    tree's): what `take` copies of this tree and `code_tree` of a folder baseline."""
    shutil.copytree(given / "webhook", folder / "webhook", ignore=_IGNORE)
    for shared in given.iterdir():
        if shared.is_file() and shared.name.endswith(EXTENSIONS):
            shutil.copy2(shared, folder / shared.name)
    crds = given / "examples" / "cluster"
    crds = crds if crds.is_dir() else REPO / "examples" / "cluster"
    shutil.copytree(crds, folder / "examples" / "cluster")


_IGNORE = shutil.ignore_patterns("__pycache__", "out", "*.pyc")
EXTENSIONS = tuple(importlib.machinery.EXTENSION_SUFFIXES)  # a compiled module's file names


def identity(root: Path | None = None) -> dict[str, Any]:
    """The repository's commit, whether `webhook/` had uncommitted changes, and a digest of
    the `webhook/` sources under `root` (the snapshot, by default the code being measured)."""
    root = root or code_root()

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=REPO, check=False)
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "--short", "HEAD") or "unknown",
        "webhook_dirty": bool(git("status", "--porcelain", "--", "webhook")),
        "digest": source_digest(root),
        "compiled_modules": compiled_modules(root),
    }


def compiled_modules(root: Path) -> int:
    """How many modules of `webhook/` under `root` are compiled extensions: what the digest of
    the sources does not see."""
    return sum(1 for path in (root / "webhook").rglob("*") if path.name.endswith(EXTENSIONS))


def source_digest(root: Path) -> str:
    """A digest of the `webhook/` sources under `root` (paths and contents): the code measured."""
    digest = hashlib.sha256()
    for path in sorted((root / "webhook").rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def extract_revision(rev: str, folder: Path) -> None:
    """`webhook/` and the example CRDs as of `rev` into `folder` (`git archive`: nothing in
    the repository is written)."""
    _extract(rev, ["webhook", "examples/cluster"], folder)


def _extract(rev: str, paths: list[str], folder: Path) -> None:
    """`paths` as of `rev` into `folder`, with `git archive`: nothing in the repository is
    written."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev, *paths],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")


def compile_core(folder: Path, rev: str | None) -> None:
    """Compile `webhook/core` in `folder` (extracted from `rev`) as the image builds it: the
    build recipe (`setup.py`, `pyproject.toml`) as of `rev` (None: this tree's), mypyc through
    setuptools, the extension modules beside their sources; the build's scratch removed."""
    recipe = ["setup.py", "pyproject.toml"]
    if rev is None:
        for name in recipe:
            shutil.copy2(REPO / name, folder / name)
    else:
        _extract(rev, recipe, folder)
    subprocess.run(
        [sys.executable, "setup.py", "--quiet", "build_ext", "--inplace"],
        cwd=folder,
        env={**os.environ, "POLICY_WEBHOOK_COMPILE": "1"},
        capture_output=True,
        check=True,
    )
    shutil.rmtree(folder / "build", ignore_errors=True)
