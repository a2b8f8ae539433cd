"""Which webhook the end-to-end part measures: the committed code, not the working tree.

The part runs for the best part of an hour while others edit `webhook/`; a tree caught
half-way through a change may not even import. So `webhook/` (and the example CRDs) come from
a commit, read with `git archive` (nothing in the repository is written), and `bench/` from the
working tree, since the harness is what is being run. Every measuring process starts in that
folder (`bench.snapshot.code_root()`), as the other parts' processes start in their snapshot.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import snapshot

_ENV = "BENCH_CODE_ROOT"  # what `snapshot.code_root()` reads


@contextlib.contextmanager
def committed(rev: str = "HEAD") -> Iterator[dict[str, Any]]:
    """For the block, measuring processes run `webhook/` as of `rev`; yields its identity."""
    with extracted(rev) as (folder, code):
        previous = os.environ.get(_ENV)
        os.environ[_ENV] = str(folder)
        try:
            yield code
        finally:
            if previous is None:
                os.environ.pop(_ENV, None)
            else:
                os.environ[_ENV] = previous


@contextlib.contextmanager
def extracted(rev: str) -> Iterator[tuple[Path, dict[str, Any]]]:
    """`webhook/` as of `rev` (and `bench/` as it is) in a folder of its own, for the block:
    the folder and the code's identity. `committed` makes it every process's; a baseline
    (`--baseline`) is started from its folder explicitly."""
    folder = Path(tempfile.mkdtemp(prefix="bench-e2e-code-"))
    try:
        snapshot.extract_revision(rev, folder)
        ignore = shutil.ignore_patterns("__pycache__", "out", "*.pyc")
        shutil.copytree(snapshot.REPO / "bench", folder / "bench", ignore=ignore)
        yield folder, identity(folder, rev)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def identity(folder: Path, rev: str) -> dict[str, Any]:
    """The commit and a digest of its `webhook/` sources, computed as `snapshot.identity` does."""
    digest = hashlib.sha256()
    for path in sorted((folder / "webhook").rglob("*.py")):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    commit = subprocess.run(
        ["git", "rev-parse", "--short", rev],
        cwd=snapshot.REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {
        "commit": commit or rev,
        "webhook_dirty": False,  # a commit, whatever the working tree holds
        "digest": digest.hexdigest()[:12],
        "source": f"git archive {rev}",
    }
