"""The one build step pyproject.toml cannot declare: the core compiled with mypyc, on request.

    POLICY_WEBHOOK_COMPILE=1 pip wheel --no-deps .      # the image's build (Dockerfile)
    make compiled                                       # a compiled copy of this tree, to test

Without the variable the package is pure Python: `pip install -e .` and the development loop
stay as they are, with no compiler needed. With it, every module of `webhook/core` becomes a
C extension built by mypyc from the same sources (`webhook/shell` stays Python: it is IO, and
it patches nothing of the core). Why, with the measurements: docs/performance.md, *Choices*.

Compiled code checks declared types at run time, where Python would not; docs/architecture.md
(*The compiled core*) says what that asks of the core's code and how the tests hold it.
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import Extension, setup

COMPILE_ENV = "POLICY_WEBHOOK_COMPILE"
# Named, not hashed, so that the runtime module mypyc puts beside the package says whose it is.
RUNTIME_GROUP = "policy_webhook_core"


def compiled_core() -> list[Extension]:
    if os.environ.get(COMPILE_ENV) != "1":
        return []
    from mypyc.build import mypycify  # a build requirement (pyproject.toml), needed only here

    root = Path(__file__).resolve().parent
    sources = sorted(
        str(path.relative_to(root)) for path in (root / "webhook" / "core").rglob("*.py")
    )
    return mypycify(sources, opt_level="3", group_name=RUNTIME_GROUP)


setup(ext_modules=compiled_core())
