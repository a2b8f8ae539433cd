"""Settings every test shares: Hypothesis profiles, nothing written into the checkout, and
which core the run tests.

`HYPOTHESIS_PROFILE=ci` (the default, and what `make test` runs): every property test's full
budget, no example database. `HYPOTHESIS_PROFILE=dev` (`make check`, the fast loop): a fifth of
each budget, failures remembered in a database under the user's cache folder, never in the
repository.

`POLICY_WEBHOOK_EXPECT_CORE=compiled` (`make test-compiled`): the run is meant for the core
compiled with mypyc, as the image has it; the session stops at once if the modules it imports
are anything else, so that a build that silently fell back to Python cannot pass for one.
"""

from __future__ import annotations

import importlib.machinery
import os
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.database import DirectoryBasedExampleDatabase

from tests.fixtures.budget import PROFILE

# Hypothesis keeps more than examples in its home (a cache of Unicode tables): not here either.
HOME = Path.home() / ".cache" / "policy-attachment-webhook" / "hypothesis"
set_hypothesis_home_dir(str(HOME))
settings.register_profile("ci", database=None, print_blob=True)
settings.register_profile("dev", database=DirectoryBasedExampleDatabase(HOME / "examples"))
settings.load_profile(PROFILE)


EXPECT_CORE = "POLICY_WEBHOOK_EXPECT_CORE"


def pytest_configure(config: pytest.Config) -> None:
    expected = os.environ.get(EXPECT_CORE)
    if not expected:
        return
    from webhook.core.admission import decisions  # any module of the core
    from webhook.shell.process import build

    found = build.core_build()
    loaded = decisions.__file__ or ""
    extension = loaded.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    if found != expected or extension != (expected == "compiled"):
        raise pytest.UsageError(
            f"{EXPECT_CORE}={expected}, but the core found is {found!r} "
            f"and {decisions.__name__} was loaded from {loaded}"
        )
