"""Which webhook the end-to-end part measures: the committed code, not the working tree.

The part runs for the best part of an hour while others edit `webhook/`; a tree caught
half-way through a change may not even import. So `webhook/` (and the example CRDs) come from
a commit, read with `git archive` (nothing in the repository is written), and `bench/` from the
working tree, since the harness is what is being run. Every measuring process starts in that
folder (`bench.snapshot.code_root()`), as the other parts' processes start in their snapshot.
A baseline (`--baseline`) may also be a folder: its `webhook/` as it is, built another way.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import snapshot


@contextlib.contextmanager
def committed(rev: str = "HEAD", *, compiled: bool = False) -> Iterator[dict[str, Any]]:
    """For the block, measuring processes run `webhook/` as of `rev`, with `compiled` its
    core compiled as the image builds it (`snapshot.compile_core`); yields its identity."""
    with extracted(rev) as (folder, code):
        if compiled:
            snapshot.compile_core(folder, rev)
            code = identity(folder, rev)  # now with its compiled modules counted
        with snapshot.measuring(folder):
            yield code


@contextlib.contextmanager
def extracted(source: str) -> Iterator[tuple[Path, dict[str, Any]]]:
    """`webhook/` of `source`, a revision or a folder (`snapshot.code_tree`), and `bench/` as it
    is, in a folder of its own, for the block: the folder and the code's identity. `committed`
    makes it every process's; a baseline (`--baseline`) is started from its folder explicitly.
    A folder is a build that no commit holds as it is, such as one compiled to extensions,
    run alternating with the committed code."""
    with snapshot.code_tree(source, "bench-e2e-code-") as folder:
        yield folder, identity(folder, None if Path(source).is_dir() else source)


def identity(folder: Path, rev: str | None) -> dict[str, Any]:
    """The commit (None: a folder, not a commit) and `snapshot.source_digest` of its `webhook/`,
    as `snapshot.identity` reads it, with how many of its modules are compiled
    extensions (which the digest of the sources does not see)."""
    digest = snapshot.source_digest(folder)
    compiled = snapshot.compiled_modules(folder)
    if rev is None:
        return {
            "commit": "folder",
            "webhook_dirty": True,  # no commit holds it as it is
            "digest": digest,
            "compiled_modules": compiled,
            "source": "a folder given as the baseline",
        }
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
        "digest": digest,
        "compiled_modules": compiled,
        "source": f"git archive {rev}",
    }
