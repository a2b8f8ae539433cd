"""What this build is: the release, and the git revision when it is known.

One answer for `policy-webhook version` and the `policy_webhook_build_info` metric. The
revision is looked for where each way of installing leaves it: the environment variable the
image sets from its build argument (`POLICY_WEBHOOK_BUILD_REVISION`; an image has no `.git`),
pip's record of a VCS install (PEP 610 `direct_url.json`), or the git checkout the package
runs from (an editable install; `modified` when tracked files differ from that commit).
Otherwise it is `unknown`, never a guess. Also which core runs: the image's is compiled with
mypyc (setup.py), a checkout's is Python; read from the files Python's import would load (an
extension module beside a source is the one imported). Imports nothing of the webhook:
`version` must answer at once.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import platform
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

DISTRIBUTION = "policy-attachment-webhook"
PACKAGE_DIR = Path(__file__).resolve().parents[2]  # …/webhook
CORE_DIR = PACKAGE_DIR / "core"
REVISION_ENV = "POLICY_WEBHOOK_BUILD_REVISION"  # set by the Dockerfile from its REVISION arg
GIT_SECONDS = 2.0  # a git that hangs (a network file system) must not hang `version`


@dataclass(frozen=True, slots=True)
class BuildInfo:
    version: str
    git_commit: str  # 40 hex digits, or "unknown"
    git_tree_state: str  # "clean" | "modified" | "unknown" (kubectl's `gitTreeState`)
    python: str
    core: str  # "compiled" | "python" | "mixed" (some modules of each: a half-built tree)

    def line(self) -> str:
        """`policy-webhook 0.1.0 (git 926c83f1a2b3, core compiled)`, what `--version` prints."""
        core = f"core {self.core}"
        if self.git_commit == "unknown":
            return f"policy-webhook {self.version} (git revision unknown, {core})"
        state = ", modified" if self.git_tree_state == "modified" else ""
        return f"policy-webhook {self.version} (git {self.git_commit[:12]}{state}, {core})"

    def as_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "gitCommit": self.git_commit,
            "gitTreeState": self.git_tree_state,
            "python": self.python,
            "core": self.core,
        }


def build_info() -> BuildInfo:
    commit, state = _revision()
    return BuildInfo(package_version(), commit, state, platform.python_version(), core_build())


def core_build(core_dir: Path = CORE_DIR) -> str:
    """`compiled` when every module of the core would be imported from an extension module,
    `python` when none would, `mixed` otherwise: a tree where a compiled build was left behind
    (a stale extension shadows its edited source), which the log and the metric then show."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    modules = {path.with_suffix("") for path in core_dir.rglob("*.py")}
    compiled = {
        path.parent / path.name.split(".", 1)[0]
        for path in core_dir.rglob("*")
        if path.name.endswith(suffixes)
    }
    if not compiled & modules:
        return "python"
    return "compiled" if modules <= compiled else "mixed"


def package_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


def _revision() -> tuple[str, str]:
    # In order, and only as far as needed: the checkout's asks git, which may take seconds.
    for source in (_from_environment, _from_direct_url, _from_checkout):
        found = source()
        if found is not None:
            return found
    return "unknown", "unknown"


def _from_environment() -> tuple[str, str] | None:
    value = os.environ.get(REVISION_ENV, "").strip()
    return (value, "clean") if value and value != "unknown" else None


def _from_direct_url() -> tuple[str, str] | None:
    try:
        raw = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    try:
        commit = json.loads(raw or "{}").get("vcs_info", {}).get("commit_id")
    except (ValueError, AttributeError):
        return None
    return (commit, "clean") if isinstance(commit, str) and commit else None


def _from_checkout() -> tuple[str, str] | None:
    root = PACKAGE_DIR.parent
    if not (root / ".git").exists():
        return None  # installed into site-packages: not ours to ask git about
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return None
    # Read-only: `--no-optional-locks` keeps `status` from refreshing the index file.
    changes = _git(root, "--no-optional-locks", "status", "--porcelain", "--untracked-files=no")
    state = "unknown" if changes is None else ("modified" if changes else "clean")
    return commit, state


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=GIT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
