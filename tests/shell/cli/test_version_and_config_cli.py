"""`policy-webhook version`, `--version` and `config validate`, through the console script.

The version names the git revision when it is known (here: the checkout the tests run from).
A config file's `off` means off however YAML read it, and a value it cannot read says to quote.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.console import run
from tests.fixtures.paths import EXAMPLES, REPO
from webhook.shell.process import build

LINE = re.compile(
    r"^policy-webhook \d+\.\d+\.\d+\S* "
    r"\(git ([0-9a-f]{12}(, modified)?|revision unknown), core (compiled|python)\)$"
)
# The core this run imports: Python in a checkout, compiled in `make test-compiled`'s copy.
CORE = os.environ.get("POLICY_WEBHOOK_EXPECT_CORE", "python")


def checkout_head() -> str | None:
    if not (REPO / ".git").exists():  # e.g. `make compiled`'s copy: `version` asks no git there
        return None
    done = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() if done.returncode == 0 else None


@pytest.mark.parametrize("args", [["version"], ["--version"]])
def test_version_is_one_line_with_the_git_revision(args: list[str]) -> None:
    ran = run(*args)
    assert ran.code == 0, ran
    assert LINE.match(ran.out.strip()), ran
    head = checkout_head()
    if head is not None and not os.environ.get(build.REVISION_ENV):
        assert head[:12] in ran.out


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_version_for_machines(output: str) -> None:
    import yaml

    ran = run("version", "-o", output)
    info = json.loads(ran.out) if output == "json" else yaml.safe_load(ran.out)
    assert set(info) == {"version", "gitCommit", "gitTreeState", "python", "core"}
    assert info["core"] == CORE
    assert info["gitTreeState"] in ("clean", "modified", "unknown")
    head = checkout_head()
    if head is not None and not os.environ.get(build.REVISION_ENV):
        assert info["gitCommit"] == head


def test_the_revision_an_image_build_sets_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    """An image has no `.git`: its build sets the revision in the environment."""
    monkeypatch.setenv(build.REVISION_ENV, "0123456789abcdef0123456789abcdef01234567")
    info = build.build_info()
    assert (info.git_commit, info.git_tree_state) == (
        "0123456789abcdef0123456789abcdef01234567",
        "clean",
    )
    assert info.line().endswith(f"(git 0123456789ab, core {CORE})")


def test_git_is_not_asked_once_the_environment_has_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`version` must answer at once; a git that hangs costs seconds."""

    def no_git(*_: object) -> str | None:
        raise AssertionError("git was run although the build's revision was known")

    monkeypatch.setenv(build.REVISION_ENV, "0123456789abcdef0123456789abcdef01234567")
    monkeypatch.setattr(build, "_git", no_git)
    assert build.build_info().git_commit == "0123456789abcdef0123456789abcdef01234567"


def test_the_core_is_named_by_what_import_would_load(tmp_path: Path) -> None:
    """An extension module beside a source is the one imported: every module so is a compiled
    core, none is Python, and some are a half-built tree, which must not pass for either."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (tmp_path / "model").mkdir()
    sources = [
        tmp_path / "__init__.py",
        tmp_path / "model" / "__init__.py",
        tmp_path / "model" / "refs.py",
    ]
    for source in sources:
        source.write_text("")
    assert build.core_build(tmp_path) == "python"
    for source in sources[:2]:
        source.with_name(source.stem + suffix).write_bytes(b"")
    assert build.core_build(tmp_path) == "mixed"
    sources[2].with_name("refs" + suffix).write_bytes(b"")
    assert build.core_build(tmp_path) == "compiled"
    # mypyc's shared runtime, a lone extension, does not make a Python tree compiled.
    python_tree = tmp_path / "other"
    python_tree.mkdir()
    (python_tree / "refs.py").write_text("")
    (python_tree / ("policy_webhook_core__mypyc" + suffix)).write_bytes(b"")
    assert build.core_build(python_tree) == "python"


# --- config validate ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "code", "message"),
    [
        ("ruleActions:\n  PA-T06: off\n", 0, "valid (0 kind profiles, 1 global rule action)"),
        ('ruleActions:\n  PA-T06: "off"\n', 0, "valid"),
        ("ruleActions:\n  PA-T06: no\n", 0, "valid"),
        (
            "kinds:\n  - {group: policies.example.com, kind: RetryPolicy, ruleActions: {PA-T06: off}}\n",
            0,
            "valid (1 kind profile, 0 global rule actions)",
        ),
        ("ruleActions:\n  PA-T06: on\n", 2, "got true (a boolean) — quote the value"),
        ("ruleActions:\n  PA-T06: fatal\n", 2, "audit, off; got 'fatal'\n"),  # a word: no hint
        ("ruleActions:\n  PA-T99: deny\n", 2, "unknown rule 'PA-T99'"),
        ("ruleActions: [unclosed\n", 2, "config.yaml:2: not valid YAML: "),
        (
            "kinds:\n  - {group: policies.example.com, kind: RetryPolicy, class: Direct}\n"
            "  - {group: policies.example.com, kind: RetryPolicy, class: Inherited}\n",
            2,
            "kinds[1] profiles RetryPolicy.policies.example.com again (kinds[0])\n",
        ),
        (
            "ruleActions:\n  PA-T06: warn\nruleActions:\n  PA-T06: deny\n",
            2,
            "config.yaml:3: not valid YAML: key 'ruleActions' is written twice in one mapping "
            "(first on line 1)\n",
        ),
    ],
    ids=[
        "off-bare",
        "off-quoted",
        "no",
        "kind-off",
        "on",
        "unknown-value",
        "unknown-rule",
        "bad-yaml",
        "kind-twice",
        "key-twice",
    ],
)
def test_config_validate(tmp_path: Path, text: str, code: int, message: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text, encoding="utf-8")
    ran = run("config", "validate", str(config))
    assert ran.code == code, ran
    assert message in (ran.out if code == 0 else ran.err), ran
    if code:
        assert ran.err.count("\n") == 1, ran  # one line
    assert "Traceback" not in ran.err


def test_a_rule_switched_off_by_a_bare_off_is_off(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("ruleActions:\n  PA-T06: off\n", encoding="utf-8")
    t06 = EXAMPLES / "broken" / "t06-target-does-not-exist.yaml"
    before = run("check", str(EXAMPLES / "cluster"), str(t06))
    after = run("check", "--config", str(config), str(EXAMPLES / "cluster"), str(t06))
    assert "[PA-T06]" in before.out and "[PA-T06]" not in after.out, after
