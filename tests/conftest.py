"""Settings every test shares: Hypothesis profiles, and nothing written into the checkout.

`HYPOTHESIS_PROFILE=ci` (the default, and what `make test` runs): every property test's full
budget, no example database. `HYPOTHESIS_PROFILE=dev` (`make check`, the fast loop): a fifth of
each budget, failures remembered in a database under the user's cache folder, never in the
repository.
"""

from __future__ import annotations

from pathlib import Path

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
