"""The pure core never imports the IO shell, the event loop or the network libraries.

Checked on the source (every import statement of every module under webhook/core), so the
boundary holds even for imports hidden inside functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.fixtures.paths import REPO

CORE = REPO / "webhook" / "core"
FORBIDDEN = ("aiohttp", "kubernetes_asyncio", "asyncio", "webhook.shell")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize(
    "module", sorted(CORE.rglob("*.py")), ids=lambda p: str(p.relative_to(CORE))
)
def test_core_module_imports_nothing_from_the_io_world(module: Path) -> None:
    bad = {
        name
        for name in imported_modules(module)
        if name.split(".")[0] in FORBIDDEN or name.startswith("webhook.shell")
    }
    assert not bad, f"{module.name} imports {sorted(bad)}"


def test_the_check_really_sees_imports() -> None:
    server = CORE.parent / "shell" / "https" / "server.py"
    assert {"aiohttp", "aiohttp.web"} & imported_modules(server)
