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

# (its assertions explain themselves: the snapshot and what the engine gives, side by side)
pytest.register_assert_rewrite("tests.snapshots")

# The torch-xla runs the tests start compile for the CPU without LLVM's optimisations: their
# programs are tiny, compiling is most of a run's time (a verify of four runs costs 40% less
# CPU), and every run a test compares with another is compiled the same way. The results are
# the same to a few ulps. Every process the tests start inherits it (a test that drops the
# legacy XLA_* flags from its runs' environment keeps this one).
FAST_COMPILE = "--xla_backend_optimization_level=0"
if FAST_COMPILE not in os.environ.get("XLA_FLAGS", "").split():
    os.environ["XLA_FLAGS"] = " ".join(filter(None, (os.environ.get("XLA_FLAGS"), FAST_COMPILE)))


def environment_without(*prefixes: str) -> dict[str, str]:
    """This process's environment without the variables of these prefixes (a run's legacy
    XLA_* flags, say), XLA_FLAGS kept."""
    return {k: v for k, v in os.environ.items() if k == "XLA_FLAGS" or not k.startswith(prefixes)}


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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-snapshots",
        action="store_true",
        help="write what the engine now gives over the fixtures' snapshots that differ"
        " (tests/fixtures/cases/README.md); review with git diff",
    )


@pytest.fixture(scope="session")
def update_snapshots(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-snapshots"))


@pytest.fixture(scope="session")
def catalogue() -> Catalogue:
    return load_catalogue()


def fixture_kind(case: Path) -> str | None:
    """A fixture's kind, from its extension as for any file (tests/fixtures/cases/<case>.<ext>)."""
    return kind_by_name("case" + case.suffix)


# The precision migration's rules alone: the fixtures under tests/fixtures/{cases,projects}
# specify it; the torch-xla API rules (XM5xx) have their own (tests/fixtures/xla-apis), and so
# does the declaration of the runtime in the project's dependencies (XM409: a file rewritten
# alone in a folder without requirements; tests/test_runtime_dependencies.py).
PRECISION_IGNORE = ("XM5", "XM409")


@pytest.fixture(scope="session")
def precision_rules(catalogue: Catalogue) -> frozenset[str]:
    return catalogue.select((), PRECISION_IGNORE)


# -- several workers (pytest-xdist: `-n 2 --dist loadgroup` in pyproject.toml's addopts) --------
#
# Two rules make the parallel run as fast as the work allows, without changing what runs:
# - the tests that share a module-scoped fixture (one set of torch-xla runs that many tests
#   assert on) go to one worker together, as one unit, so the fixture runs once; every other
#   test is a unit of its own, handed to whichever worker is free;
# - units start in this order, the slowest modules first (measured: `--durations`), so the
#   last unit to finish is a short one and both workers end within seconds of each other.
#   (xdist keeps the order with --no-loadscope-reorder; without it, it sorts by test count.)
SLOWEST_FIRST = (
    "test_verify_e2e.py",
    "test_rewrite_e2e.py",
    "test_ray_e2e.py",
    "test_verify_census_e2e.py",
    "test_verify_manifest_e2e.py",
    "test_runtime_xla.py",
    "test_project_reads_e2e.py",
    "test_verify_launcher_e2e.py",
    "test_project_e2e.py",
    "test_hf_trainer_e2e.py",
    "test_zero1_xla_e2e.py",
    "test_precommit.py",
    "test_zero_gloo_e2e.py",
    "test_xla_apis_e2e.py",
    "test_lightning_e2e.py",
    "test_option_gated_e2e.py",
    "test_readme.py",
    "test_resume_e2e.py",
    "test_verify_recorder.py",
    "test_runtime_distribution.py",
    "test_scan_scaling.py",
    "test_reads.py",
    "test_runtime_dependencies.py",
    "test_bad_input.py",
)


def _module_fixtures(item: pytest.Item) -> set[str]:
    """The module- and class-scoped fixtures an item uses, directly or through others."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    return {
        name
        for name, fixturedefs in info.name2fixturedefs.items()
        if any(fixturedef.scope in ("module", "class") for fixturedef in fixturedefs)
    }


def _shared_fixture_groups(items: list[pytest.Item]) -> dict[pytest.Item, str]:
    """Per module, the tests joined by the module-scoped fixtures they share (a test using two
    joins their users): one group each, named after the module and one of the fixtures. Groups
    of one module may run on different workers: none shares a fixture with another."""
    parent: dict[tuple[str, str], tuple[str, str]] = {}

    def root(key: tuple[str, str]) -> tuple[str, str]:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    uses: dict[pytest.Item, tuple[str, str]] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        keys = sorted((module, name) for name in _module_fixtures(item))
        if keys:
            uses[item] = keys[0]
            for key in keys[1:]:
                parent[root(key)] = root(keys[0])
    return {item: "::".join(root(key)) for item, key in uses.items()}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups off the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.pluginmanager.hasplugin("xdist"):  # (which registers the marker)
        for item, group in _shared_fixture_groups(items).items():
            item.add_marker(pytest.mark.xdist_group(group))
    rank = {name: index for index, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: same order within
