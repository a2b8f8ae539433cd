"""Fast start: `--help`, `version` and `check` import only what they need.

The server (aiohttp), the API client (kubernetes_asyncio, which loads every API model),
Prometheus and the certificate library take most of a second to import; a command that does
not serve or talk to a cluster must not pay for them. Measured figures are in the report of
the change that set this up; this holds the imports, which is what makes them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.fixtures.paths import EXAMPLES

SERVER_AND_CLIENT = ("aiohttp", "kubernetes_asyncio", "prometheus_client", "cryptography")
ENGINE = ("webhook.core.engine", "webhook.core.state", "webhook.core.rules", "yaml")

PROBE = """
import atexit, sys
def imported():
    sys.stderr.write("IMPORTED " + " ".join(sorted(sys.modules)) + "\\n")
atexit.register(imported)
from webhook.shell.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def imported_by(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    line = next(x for x in done.stderr.splitlines() if x.startswith("IMPORTED "))
    return set(line.split()[1:])


def loaded(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["version"],
        ["--version"],
        ["check", "--help"],
        ["explain", "--help"],
        ["report", "--help"],
        ["rules"],
    ],
)
def test_help_and_version_import_neither_server_nor_engine(args: list[str]) -> None:
    modules = imported_by(*args)
    assert loaded(modules, SERVER_AND_CLIENT) == []
    if args[0] in ("--help", "version", "--version"):
        assert loaded(modules, ENGINE) == []


@pytest.mark.parametrize(
    "args",
    [
        ["check", str(EXAMPLES / "cluster")],
        ["check", "-o", "sarif", str(EXAMPLES / "cluster")],
        ["explain", "HTTPRoute/storefront", "-n", "apps", "--manifests", str(EXAMPLES / "cluster")],
        ["report", "-A", "--manifests", str(EXAMPLES / "cluster")],
    ],
    ids=["check", "check-sarif", "explain-manifests", "report-manifests"],
)
def test_offline_commands_never_import_the_server_or_the_api_client(args: list[str]) -> None:
    assert loaded(imported_by(*args), SERVER_AND_CLIENT) == []
