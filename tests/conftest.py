from __future__ import annotations

import os
import platform
import shutil
import sys
from pathlib import Path

import pytest

from xlamigrate.catalogue import Catalogue, load_catalogue
from xlamigrate.kinds import kind_by_name
from xlamigrate.request import FileContext

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
# A file rewritten on its own, as if every process it starts ran a script of the project that
# took the recipe (gated on the signal where the write is conditional): the premise of the
# per-file tests of a launcher's edits; tests/fixtures/projects/ test the decisions themselves.
RECIPE_APPLIED = FileContext(assume_migrated=True)

# The `test` extra installs torch-xla wherever wheels exist; there a missing install must fail.
needs_torch_xla_platform = pytest.mark.skipif(
    not (sys.platform == "linux" and platform.machine() == "x86_64"),
    reason="torch-xla wheels exist for Linux x86-64 only",
)

# The CPU stochastic-rounding kernel is built with the system C compiler where there is one;
# there a failed build must fail the tests, not skip them.
needs_c_compiler = pytest.mark.skipif(
    not (os.environ.get("CC") or any(shutil.which(cc) for cc in ("cc", "gcc", "clang"))),
    reason="no C compiler: the native rounding kernel cannot be built here",
)


@pytest.fixture(scope="session")
def catalogue() -> Catalogue:
    return load_catalogue()


def fixture_kind(case: Path) -> str | None:
    """A fixture's kind, from its extension as for any file (tests/fixtures/scan/<case>.<ext>,
    tests/fixtures/<mode>/<case>.in.<ext>)."""
    return kind_by_name("case" + case.suffix)


# The precision migration's rules alone: the fixtures under tests/fixtures/{scan,<mode>,projects}
# specify it; the torch-xla API rules (XM5xx) have their own (tests/fixtures/xla-apis), and so
# does the declaration of the runtime in the project's dependencies (XM409: a file rewritten
# alone in a folder without requirements; tests/test_runtime_dependencies.py).
PRECISION_IGNORE = ("XM5", "XM409")


@pytest.fixture(scope="session")
def precision_rules(catalogue: Catalogue) -> frozenset[str]:
    return catalogue.select((), PRECISION_IGNORE)
