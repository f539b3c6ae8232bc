"""Rewritten code is as clean as the original and never breaks another configuration (issue 34).

For every before/after pair of tests/fixtures (the per-file cases of each mode folder, and the
project trees of tests/fixtures/projects/, before/ against each <mode>/), for training scripts
with legacy flags injected (tests/test_properties.py's strategy) and for small multi-backend
programs that use torch-xla APIs under the import guards real code uses, each rewritten file

(a) has no pyflakes finding (ruff F401, F811, F821, F841) its original did not have: no import
    left unused, none duplicated, no name read that nothing binds, no variable left unused;
(b) still imports on a machine without torch-xla (nor torch-neuronx, neuronx-distributed) when
    its original did: no torch-xla import moved out of the condition that guarded it.

Each batch is checked at once (tests/cleanliness.py: one ruff run per side, one process that
imports every file); the generated programs are drawn derandomized, 40 per mode and strategy.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import snapshots
from tests.cleanliness import (
    ImportCheck,
    Lint,
    Pair,
    import_checks,
    import_trees,
    lint_trees,
    new_lint,
)
from tests.conftest import FIXTURES
from tests.test_properties import CATALOGUE, ENABLED, injected_training_scripts
from xlamigrate.engine import rewrite_source
from xlamigrate.kinds.python.rewrite import MODES

PROJECTS = FIXTURES / "projects"
SOURCES = (".py", ".ipynb")
EXAMPLES = 40  # per mode and strategy
GENERATED = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


# -- the fixture pairs ---------------------------------------------------------------------------


def _file_cases() -> dict[str, tuple[bytes, bytes]]:
    """Each fixture case's <py|ipynb> input and its rewrite in each mode (keyed
    <mode>/<case>.<ext>), each torch-xla API case's with and without unsafe fixes, and each
    notebook with an unreadable cell's in each mode."""
    cases = {
        f"{mode}/{source.name}": (source.read_bytes(), snapshots.rewritten(source.stem, mode))
        for mode, source in snapshots.rewrites()
        if source.suffix in SOURCES
    }
    apis = FIXTURES / "xla-apis"
    for command in ("rewrite", "unsafe"):
        for source in snapshots.cases(command, folder=apis):
            rewritten = snapshots.rewritten(source.stem, command, apis)
            cases[f"xla-apis/{command}/{source.name}"] = (source.read_bytes(), rewritten)
    errors = FIXTURES / "notebook_errors"
    for mode, source in ((m, s) for m in MODES for s in snapshots.cases(m, folder=errors)):
        rewritten = snapshots.rewritten(source.stem, mode, errors)
        cases[f"notebook_errors/{mode}/{source.name}"] = (source.read_bytes(), rewritten)
    return cases


def _project_cases() -> dict[str, tuple[bytes, bytes]]:
    """Each file of tests/fixtures/projects/<case>/before/ and what its <mode>.snap makes of
    it: keyed projects/<case>/<mode>/<path>."""
    cases = {}
    for case in sorted(p for p in PROJECTS.iterdir() if (p / "before").is_dir()):
        before = snapshots.tree(case / "before")
        for mode in MODES:
            after = snapshots.project_tree(case, mode)
            for path, data in before.items():
                cases[f"projects/{case.name}/{mode}/{path}"] = (data, after[path])
    return cases


FIXTURE_PAIRS = {**_file_cases(), **_project_cases()}
PYTHON_FIXTURES = sorted(key for key in FIXTURE_PAIRS if key.endswith(SOURCES))


@dataclass(frozen=True)
class Checked:
    lint: list[Lint]
    imports: list[ImportCheck]

    def lint_of(self, path: str) -> list[str]:
        return [str(lint) for lint in self.lint if lint.path == path]

    def import_of(self, path: str) -> list[str]:
        return [str(check) for check in self.imports if check.path == path and check.broken]


@pytest.fixture(scope="module")
def fixture_pairs(tmp_path_factory: pytest.TempPathFactory) -> Checked:
    """Every pair, the projects' other files included (a script imports its neighbours), as
    two trees: checked in one batch."""
    root = tmp_path_factory.mktemp("fixture-pairs")
    original, rewritten = root / "original", root / "rewritten"
    for key, (source, output) in FIXTURE_PAIRS.items():
        for tree, data in ((original, source), (rewritten, output)):
            target = tree / key
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    return Checked(
        lint_trees(original, rewritten, PYTHON_FIXTURES),
        import_trees(original, rewritten, PYTHON_FIXTURES),
    )


@pytest.mark.parametrize("path", PYTHON_FIXTURES)
def test_a_rewritten_fixture_adds_no_pyflakes_finding(path: str, fixture_pairs: Checked) -> None:
    assert fixture_pairs.lint_of(path) == []


@pytest.mark.parametrize("path", [p for p in PYTHON_FIXTURES if p.endswith(".py")])
def test_a_rewritten_fixture_imports_without_torch_xla_where_its_original_did(
    path: str, fixture_pairs: Checked
) -> None:
    assert fixture_pairs.import_of(path) == []


# -- generated programs --------------------------------------------------------------------------


@dataclass(frozen=True)
class Rewrite:
    source: bytes
    mode: str
    unsafe_fixes: bool
    rewritten: bytes


def rewrites(strategy: st.SearchStrategy[bytes], mode: str, both: bool) -> list[Rewrite]:
    """The rewrites (in `mode`) of EXAMPLES programs drawn from the strategy that change them:
    each with the unsafe fixes or without, as drawn, or (`both`) each in both ways."""
    found: list[Rewrite] = []

    @GENERATED
    @given(data=strategy, unsafe_fixes=st.booleans())
    def collect(data: bytes, unsafe_fixes: bool) -> None:
        for flag in (False, True) if both else (unsafe_fixes,):
            outcome = rewrite_source("generated.py", data, "python", CATALOGUE, ENABLED, mode, flag)
            if outcome.changed and outcome.rewritten is not None:
                found.append(Rewrite(data, mode, flag, outcome.rewritten))

    collect()
    return found


@dataclass(frozen=True)
class Found:
    """What the checks found in one batch of rewrites: one entry per rewrite that fails, its
    findings, then the program and its rewrite (the failure message is the reproduction)."""

    total: int
    lint: list[str]
    imports: list[str]


def check(batches: dict[str, list[Rewrite]]) -> dict[str, Found]:
    """Both checks over every batch at once (one ruff run per side, one import process), each
    distinct (program, rewrite) once: the torch-xla API fixes are the same in every mode."""
    paths: dict[tuple[bytes, bytes], str] = {}
    for rewrite in (rewrite for batch in batches.values() for rewrite in batch):
        paths.setdefault((rewrite.source, rewrite.rewritten), f"case_{len(paths)}.py")
    pairs = [Pair(path, source, rewritten) for (source, rewritten), path in paths.items()]
    lints: dict[str, list[str]] = {}
    for lint in new_lint(pairs):
        lints.setdefault(lint.path, []).append(str(lint))
    broken = {check.path: str(check.rewritten) for check in import_checks(pairs) if check.broken}

    def shown(rewrite: Rewrite, findings: list[str]) -> str:
        return (
            f"{rewrite.mode}{' --unsafe-fixes' if rewrite.unsafe_fixes else ''}: "
            + "; ".join(findings)
            + "\n--- original\n"
            + rewrite.source.decode()
            + "--- rewritten\n"
            + rewrite.rewritten.decode()
        )

    def failures(batch: list[Rewrite], found: dict[str, list[str]]) -> list[str]:
        return [
            shown(rewrite, found[path])
            for rewrite in batch
            if (path := paths[rewrite.source, rewrite.rewritten]) in found
        ]

    return {
        name: Found(
            len(batch),
            failures(batch, lints),
            failures(batch, {path: [error] for path, error in broken.items()}),
        )
        for name, batch in batches.items()
    }


def _report(failures: list[str], total: int) -> str:
    return f"{len(failures)} of {total} rewrites:\n\n" + "\n\n".join(failures[:5])


@pytest.fixture(scope="module")
def generated() -> dict[str, Found]:
    """Each strategy's programs rewritten in each mode ("<strategy>/<mode>"), checked."""
    return check(
        {
            f"{name}/{mode}": rewrites(strategy(), mode, both)
            for name, (strategy, both) in STRATEGIES.items()
            for mode in MODES
        }
    )


every_mode = pytest.mark.parametrize("mode", MODES)


# Training scripts with legacy flags injected anywhere (tests/test_properties.py).


@every_mode
def test_rewritten_training_scripts_add_no_pyflakes_finding(
    mode: str, generated: dict[str, Found]
) -> None:
    found = generated[f"training_scripts/{mode}"]
    assert found.total >= EXAMPLES // 4  # (the strategy still makes programs the rewrite changes)
    assert not found.lint, _report(found.lint, found.total)


@every_mode
def test_rewritten_training_scripts_import_without_torch_xla_where_the_originals_did(
    mode: str, generated: dict[str, Found]
) -> None:
    found = generated[f"training_scripts/{mode}"]
    assert not found.imports, _report(found.imports, found.total)


# Small multi-backend programs using torch-xla APIs under the import guards real code uses.


@dataclass(frozen=True)
class Api:
    """One spelling of a torch-xla import, the names it binds and statements that use them."""

    imports: tuple[str, ...]
    names: tuple[str, ...]
    uses: tuple[str, ...]


XLA_MODEL_USES = (
    "device = xm.xla_device()",
    "world = xm.xrt_world_size()",
    "rank = xm.get_ordinal()",
    "xm.mark_step()",
    "local = xm.get_local_ordinal(defval=0)",
    # current APIs: the import stays for them
    'xm.master_print("step done")',
    'xm.rendezvous("init")',
    "master = xm.is_master_ordinal()",
)
AUTOCAST_USE = "with {}(device):\n    out = model(batch)"
# Per module of torch-xla, the ways code spells its import (a program draws one of each).
APIS: dict[str, tuple[Api, ...]] = {
    "xla_model": (
        Api(("import torch_xla.core.xla_model as xm",), ("xm",), XLA_MODEL_USES),
        Api(("from torch_xla.core import xla_model as xm",), ("xm",), XLA_MODEL_USES[1:7]),
        Api(
            (
                "from torch_xla.core.xla_model import get_ordinal, mark_step, master_print,"
                " xla_device",
            ),
            ("get_ordinal", "mark_step", "master_print", "xla_device"),
            ("device = xla_device()", "rank = get_ordinal()", "mark_step()", 'master_print("hi")'),
        ),
        Api(
            ("import torch_xla", "import torch_xla.core.xla_model as xm"),
            ("torch_xla", "xm"),
            ("device = xm.xla_device()", "xm.mark_step()", "rank = xm.get_ordinal()"),
        ),
    ),
    "amp": (
        Api(
            ("import torch_xla.amp",),
            ("torch_xla",),
            (AUTOCAST_USE.format("torch_xla.amp.autocast"),),
        ),
        Api(
            ("from torch_xla.amp import autocast",),
            ("autocast",),
            (AUTOCAST_USE.format("autocast"),),
        ),
    ),
    "pjrt": (
        Api(
            ("import torch_xla.experimental.pjrt as pjrt",),
            ("pjrt",),
            ("rank = pjrt.global_ordinal()", "world = pjrt.world_size()"),
        ),
        Api(
            ("from torch_xla.experimental import pjrt",),
            ("pjrt",),
            ("count = pjrt.local_device_count()", "rank = pjrt.global_ordinal()"),
        ),
    ),
}


@dataclass(frozen=True)
class Guard:
    """How a program imports torch-xla: the module's preamble and the imports in their block
    (or, `in_functions`, at the top of each function instead), and the test a function or the
    module makes before it uses them ("" where code runs on XLA only, untested)."""

    preamble: str
    block: str
    test: str
    in_functions: bool = False


def _indented(imports: list[str]) -> str:
    return textwrap.indent("\n".join(imports), "    ") + "\n"


def _guard(name: str, imports: list[str], names: tuple[str, ...]) -> Guard:
    inner = _indented(imports)
    if name == "top_level":
        return Guard("", "\n".join(imports) + "\n", "")
    if name == "is_torch_xla_available":  # transformers' and accelerate's helper, as they wrote it
        return Guard(
            "import importlib.util\n\n\ndef is_torch_xla_available():\n"
            '    return importlib.util.find_spec("torch_xla") is not None\n\n\n',
            f"if is_torch_xla_available():\n{inner}",
            "is_torch_xla_available()",
        )
    if name == "accelerate_helper":
        return Guard(
            "from accelerate.utils import is_torch_xla_available\n\n",
            f"if is_torch_xla_available():\n{inner}",
            "is_torch_xla_available()",
        )
    if name == "availability_else_fallback":
        fallback = "".join(f"    {bound} = None\n" for bound in names)
        return Guard(
            "import importlib.util\n\n"
            '_XLA_AVAILABLE = importlib.util.find_spec("torch_xla") is not None\n',
            f"if _XLA_AVAILABLE:\n{inner}else:\n{fallback}",
            "_XLA_AVAILABLE",
        )
    if name == "availability_constant":
        return Guard(
            "import importlib.util\n\n"
            '_XLA_AVAILABLE = importlib.util.find_spec("torch_xla") is not None\n',
            f"if _XLA_AVAILABLE:\n{inner}",
            "_XLA_AVAILABLE",
        )
    if name == "try_import_error_none":
        fallback = "".join(f"    {bound} = None\n" for bound in names)
        return Guard("", f"try:\n{inner}except ImportError:\n{fallback}", f"{names[0]} is not None")
    if name == "try_flag":
        return Guard(
            "",
            f"try:\n{inner}    HAS_XLA = True\nexcept (ImportError, RuntimeError):\n"
            "    HAS_XLA = False\n",
            "HAS_XLA",
        )
    if name == "try_pass":
        return Guard("", f"try:\n{inner}except ModuleNotFoundError:\n    pass\n", "")
    if name == "inside_functions":
        return Guard("", "", "", in_functions=True)
    assert name == "pjrt_device_env"
    return Guard(
        "import os\n",
        f'if os.environ.get("PJRT_DEVICE"):\n{inner}',
        'os.environ.get("PJRT_DEVICE")',
    )


GUARDS = (
    "top_level",
    "is_torch_xla_available",
    "accelerate_helper",
    "availability_else_fallback",
    "availability_constant",
    "try_import_error_none",
    "try_flag",
    "try_pass",
    "inside_functions",
    "pjrt_device_env",
)


def _bound(statement: str) -> set[str]:
    first = statement.split("\n")[-1].strip()
    return {first.split(" = ")[0]} if " = " in first else set()


@st.composite
def torch_xla_api_programs(draw: st.DrawFn) -> bytes:
    modules = draw(st.lists(st.sampled_from(sorted(APIS)), min_size=1, max_size=3, unique=True))
    apis = [draw(st.sampled_from(APIS[module])) for module in modules]
    imports = list(dict.fromkeys(line for api in apis for line in api.imports))
    names = tuple(dict.fromkeys(name for api in apis for name in api.names))
    uses = [use for api in apis for use in api.uses]
    guard = _guard(draw(st.sampled_from(GUARDS)), imports, names)
    parts = ["import torch\n"] if draw(st.booleans()) else []
    parts += [guard.preamble, guard.block]
    for number in range(draw(st.integers(1, 3))):
        chosen = draw(st.lists(st.sampled_from(uses), min_size=1, max_size=3))
        body = list(imports) if guard.in_functions else []
        if guard.test and draw(st.booleans()):
            body.append(f"if not ({guard.test}):\n    return None")
        body += chosen
        bound = sorted(set().union(*(_bound(use) for use in chosen)))
        body.append(f"return {', '.join(bound)}" if bound else "return None")
        parts.append(
            f"\n\ndef step_{number}(model, batch, device):\n"
            + textwrap.indent("\n".join(body), "    ")
            + "\n"
        )
    if guard.test and draw(st.booleans()):  # a use at module level, where the guard lets it run
        use = textwrap.indent(draw(st.sampled_from(uses)), "    ")
        parts.append(f"\n\nif {guard.test}:\n    model = batch = device = None\n{use}\n")
    if draw(st.booleans()):
        parts.append('\n\nif __name__ == "__main__":\n    step_0(None, None, None)\n')
    return "".join(parts).encode()


@every_mode
def test_rewritten_torch_xla_api_programs_add_no_pyflakes_finding(
    mode: str, generated: dict[str, Found]
) -> None:
    found = generated[f"torch_xla_api_programs/{mode}"]
    assert found.total >= EXAMPLES
    assert not found.lint, _report(found.lint, found.total)


@every_mode
def test_rewritten_torch_xla_api_programs_import_without_torch_xla_where_the_originals_did(
    mode: str, generated: dict[str, Found]
) -> None:
    found = generated[f"torch_xla_api_programs/{mode}"]
    assert not found.imports, _report(found.imports, found.total)


# The strategies, and whether each program is rewritten both with and without unsafe fixes
# (else as drawn).
STRATEGIES: dict[str, tuple[Callable[[], st.SearchStrategy[bytes]], bool]] = {
    "training_scripts": (injected_training_scripts, False),
    "torch_xla_api_programs": (torch_xla_api_programs, True),
}
