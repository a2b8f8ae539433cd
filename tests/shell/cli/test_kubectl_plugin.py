"""Installing the package also installs `kubectl-policy_attachment`, so that kubectl finds it
on PATH and `kubectl policy-attachment explain …` works as any kubectl subcommand."""

from __future__ import annotations

import os
import shutil
import subprocess
from importlib import metadata

import pytest

from tests.fixtures.console import KUBECTL_PLUGIN, path_with_scripts, run
from tests.fixtures.paths import EXAMPLES

PLUGIN = "kubectl-policy_attachment"


def test_the_plugin_is_a_console_script_of_the_package() -> None:
    scripts = metadata.entry_points(group="console_scripts")
    (entry,) = [e for e in scripts if e.name == PLUGIN]
    assert entry.value == "webhook.shell.cli.main:kubectl_plugin"
    assert entry.dist is not None and entry.dist.name == "policy-attachment-webhook"


def test_pip_install_put_the_plugin_beside_the_interpreter() -> None:
    assert KUBECTL_PLUGIN.is_file() and os.access(KUBECTL_PLUGIN, os.X_OK)
    ran = run("explain", "svc", "foo", "-n", "apps", "--manifests", str(EXAMPLES / "cluster"),
              script=KUBECTL_PLUGIN)  # fmt: skip
    assert ran.code == 0 and ran.out.startswith("Service/apps/foo\n"), ran


def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl is not installed")
    env = {**os.environ, "PATH": path_with_scripts()}
    env.pop("KUBECONFIG", None)
    return subprocess.run(
        [found, *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_kubectl_finds_the_plugin_on_path() -> None:
    done = kubectl("policy-attachment", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: kubectl policy-attachment ")


def test_kubectl_policy_attachment_explain_is_explain() -> None:
    args = (
        "explain",
        "HTTPRoute",
        "storefront",
        "-n",
        "apps",
        "--manifests",
        str(EXAMPLES / "cluster"),
    )
    through_kubectl = kubectl("policy-attachment", *args)
    assert through_kubectl.returncode == 0, through_kubectl.stderr
    assert through_kubectl.stdout == run(*args).out
