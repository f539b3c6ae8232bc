"""The torch-xla API migrations (XM501-XM504, rules/xla_apis.toml): the before/after fixtures
of tests/fixtures/xla-apis (every table entry, every import spelling, calls in lambdas and
default arguments, references), the project's torch-xla pins, and choosing what to migrate."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import MappingProxyType

import pytest

from tests import snapshots
from tests.conftest import FIXTURES, ROOT
from tests.test_cli import run_cli, write_files
from xlamigrate.apitable import ApiTable, Parameter, Version, XlaApi, api_table
from xlamigrate.catalogue import Catalogue, load_catalogue
from xlamigrate.engine import rewrite_source, scan_source
from xlamigrate.kinds.python.astpositions import SourceLines
from xlamigrate.kinds.python.astscopes import Scopes
from xlamigrate.kinds.python.source import PythonFile
from xlamigrate.kinds.python.xlaapis import ApiFixer, api_findings, api_uses
from xlamigrate.project.pins import Pins, _pinned
from xlamigrate.request import FileContext, RewriteRequest
from xlamigrate.ruleexamples import examples_of

CASES_DIR = FIXTURES / "xla-apis"
CASES = snapshots.cases(snapshots.SCAN, folder=CASES_DIR)
# Each case is rewritten (full-bf16, every rule) with the safe fixes, and with --unsafe-fixes.
REWRITES = {
    "rewrite": RewriteRequest("full-bf16"),
    "unsafe": RewriteRequest("full-bf16", unsafe_fixes=True),
}
REWRITE_CASES = [
    pytest.param(command, case, id=f"{command}/{case.stem}")
    for command in REWRITES
    for case in CASES
]


def stem(case: Path) -> str:
    return case.name.removesuffix(".py")


def scan_keys(case: Path) -> list[str]:
    """`line:col CODE applicability` of each finding of the case's scan snapshot."""
    return [
        f"{entry.key} {entry.lines[0].split('[fix: ')[1].split(']')[0]}"
        for entry in snapshots.read(stem(case), snapshots.SCAN, CASES_DIR).entries
    ]


@pytest.mark.parametrize("case", CASES, ids=stem)
def test_scan_reports_each_use_with_its_fix(
    case: Path, catalogue: Catalogue, update_snapshots: bool
) -> None:
    result = scan_source(
        case.name, case.read_bytes(), "python", catalogue, frozenset(catalogue.rules)
    )
    assert result.errors == ()
    produced = snapshots.scan_snapshot(result.findings, catalogue)
    path = snapshots.snapshot_path(stem(case), snapshots.SCAN, CASES_DIR)
    snapshots.assert_matches(path, produced, update_snapshots)


@pytest.mark.parametrize(("command", "case"), REWRITE_CASES)
def test_rewrite_gives_the_expected_file_and_leaves_the_rest(
    command: str, case: Path, catalogue: Catalogue, update_snapshots: bool
) -> None:
    enabled = frozenset(catalogue.rules)
    request = REWRITES[command]
    outcome = rewrite_source(case.name, case.read_bytes(), "python", catalogue, enabled, request)
    assert outcome.errors == ()
    produced = outcome.rewritten if outcome.rewritten is not None else outcome.original
    options = "--unsafe-fixes" if request.unsafe_fixes else ""
    snapshot = snapshots.rewrite_snapshot(
        "full-bf16", outcome.fixed, outcome.remaining, [("", produced)], catalogue, options
    )
    path = snapshots.snapshot_path(stem(case), command, CASES_DIR)
    snapshots.assert_matches(path, snapshot, update_snapshots)


@pytest.mark.parametrize(("command", "case"), REWRITE_CASES)
def test_the_rewritten_file_parses_and_is_a_fixed_point(
    command: str, case: Path, catalogue: Catalogue
) -> None:
    output = snapshots.rewritten(stem(case), command, CASES_DIR)
    ast.parse(output)
    enabled = frozenset(catalogue.rules)
    again = rewrite_source(case.name, output, "python", catalogue, enabled, REWRITES[command])
    assert not again.changed
    assert again.errors == ()


def test_the_fixtures_or_the_rules_examples_use_every_entry_of_the_table(
    catalogue: Catalogue,
) -> None:
    """Each entry is exercised: by a case of tests/fixtures/xla-apis, or by an example in its
    rule's own file (rules/<code>.toml, run by tests/test_rule_examples.py)."""
    table = api_table()
    sources = [case.read_bytes() for case in CASES]
    modes = tuple(catalogue.modes)
    for code in table.rules():
        for example in examples_of(code, modes):
            sources += [text.encode() for path, text in example.files if path.endswith(".py")]
    used = set()
    for source in sources:
        uses, imports = api_uses(Scopes(ast.parse(source)), table)
        used |= {use.api.name for use in uses} | {found.api.name for found in imports}
    assert used == set(table.apis)


def test_the_fixtures_cover_every_import_spelling() -> None:
    spellings = {
        "module_alias_xm": "import torch_xla.core.xla_model as xm",
        "from_module_import": "from torch_xla.core import xla_model",
        "from_function_import": "from torch_xla.core.xla_model import (",
        "dotted_path": "import torch_xla.core.xla_model\n",
    }
    for name, spelled in spellings.items():
        assert spelled in (CASES_DIR / f"{name}.py").read_text(), name


def test_a_call_in_a_lambda_a_default_and_a_reference_are_each_reported() -> None:
    found = scan_keys(CASES_DIR / "lambda_default_reference.py")
    assert "5:19 XM501 safe" in found  # lambda: xm.get_ordinal()
    assert "11:23 XM501 safe" in found  # def log(message, rank=xm.get_ordinal(), ...)
    assert "7:14 XM501 unsafe" in found  # world_size = xm.xrt_world_size (drops `defval`)
    assert "6:8 XM502 safe" in found  # step = xm.mark_step (same parameters)


def test_every_api_rule_is_documented_and_its_table_entries_name_evidence(
    catalogue: Catalogue,
) -> None:
    table = api_table()
    for code in table.rules():
        rule = catalogue.rule(code)
        assert rule.explanation.strip(), code
    for api in table.apis.values():
        assert api.evidence.startswith("v2."), api.name
        assert api.removed or api.deprecated or api.said, api.name
        if api.replacement is not None:
            assert api.since is not None, api.name
    for variable in table.variables.values():
        assert variable.evidence and variable.instead, variable.name


# --- a function that stays, with a parameter whose values torch-xla limits ----------------------

_START = XlaApi(  # (a stand-in: `start(fn, workers=None, join=True)` takes workers 1 or None)
    name="torch_xla.launch.start",
    rule="XM502",
    deprecated=None,
    removed=None,
    replacement="torch_xla.launch.start",
    since=Version.parse("2.1"),
    call="parameters",
    parameters=(
        Parameter("fn", "fn"),
        Parameter("workers", "workers", accepted=("1", "None")),
        Parameter("join", "join"),
    ),
    said="rejects workers other than 1 or None since torch-xla 2.6",
    note="2.1-2.5 ignored it, so the call goes on without it",
)
_LIMITED = ApiTable(MappingProxyType({_START.name: _START}), MappingProxyType({}), {})


def limited_findings(source: str) -> list[tuple[int, str, str, str | None]]:
    """(line, applicability, subject, the call's fixed text) of each finding on `source`."""
    scopes = Scopes(ast.parse(source))
    uses, imports = api_uses(scopes, _LIMITED)
    code = lambda node: ast.get_source_segment(source, node) or ""  # noqa: E731
    fixer = ApiFixer(scopes, _LIMITED, code, {"XM502": "safe"})
    return [
        (
            found.node.lineno,  # type: ignore[attr-defined]
            found.applicability,
            found.subject,
            next(iter(found.edits.swapped.values())) if found.edits is not None else None,
        )
        for found in fixer.findings(uses, imports)
    ]


def test_a_call_passing_a_value_torch_xla_rejects_drops_it_and_keeps_the_rest() -> None:
    source = (
        "from torch_xla.launch import start\n"
        "import torch_xla.launch as launch\n"
        "start(main, workers=8)\n"
        "launch.start(main, 8, False)\n"
        "start(main, workers=-1, join=False)\n"
    )
    assert limited_findings(source) == [
        (3, "safe", "`workers=8` in start(...): rejects workers other than 1 or None since "
         "torch-xla 2.6; 2.1-2.5 ignored it, so the call goes on without it", "start(main)"),
        (4, "safe", "`workers=8` in launch.start(...): rejects workers other than 1 or None "
         "since torch-xla 2.6; 2.1-2.5 ignored it, so the call goes on without it",
         "launch.start(main, join=False)"),
        (5, "safe", "`workers=-1` in start(...): rejects workers other than 1 or None since "
         "torch-xla 2.6; 2.1-2.5 ignored it, so the call goes on without it",
         "start(main, join=False)"),
    ]  # fmt: skip


def test_a_call_within_what_torch_xla_takes_and_a_reference_are_not_uses() -> None:
    source = (
        "from torch_xla.launch import start\n"
        "start(main)\nstart(main, workers=1)\nstart(main, None)\nrun = start\n"
        "start(*arguments)\nstart(main, **options)\n"
        "start(main, workers=1 if alone else None)\n"
    )
    assert limited_findings(source) == []


def test_a_computed_value_for_a_limited_parameter_is_left_to_a_hand_edit() -> None:
    found = limited_findings(
        "import torch_xla.launch as launch\nlaunch.start(main, workers=n)\n"
        "launch.start(main, workers=1 if alone else 8)\n"
    )
    assert [(line, fix, fixed) for line, fix, _, fixed in found] == [
        (2, "manual", None),
        (3, "manual", None),
    ]
    assert "`workers=n` is computed: where it may be 1 or None, the call needs it" in found[0][2]


# --- the torch-xla the project runs on ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "floor"),
    [
        ("torch-xla==2.1.0\n", "2.1"),
        ("torch_xla[tpu]~=2.3.0 ; python_version > '3.8'\n", "2.3"),
        ("torch-neuronx==2.1.2.2.3.0\n", "2.1"),  # built for torch 2.1.2: torch-xla 2.1
        ("# torch-xla==2.9\n", None),
        ("torch-xla<2.5\n", None),  # no floor
        ('install_requires=["torch-xla>=2.4,<2.6", "numpy"]\n', "2.4"),
        ("RUN pip install torch-neuronx==2.5.* neuronx-cc==2.*\n", "2.5"),
        ("RUN pip install https://example.invalid/torch_xla-2.2.0-cp310-linux_x86_64.whl\n", "2.2"),
        ('dependencies = [\n  "torch-xla==2.5.1",\n]\n', "2.5"),
    ],
)
def test_pins_are_read_as_pip_reads_requirements(text: str, floor: str | None) -> None:
    found = list(_pinned(text.encode()))
    assert (str(min(found)) if found else None) == floor


def test_a_file_takes_the_nearest_folders_pins_up_to_the_root(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {
            "requirements.txt": "torch-xla==2.4.0\n",
            "examples/old/requirements.txt": "torch-xla==2.1.0\n",
            "examples/old/train.py": "",
            "examples/new/deep/train.py": "",
        },
    )
    pins = Pins(tmp_path)
    assert pins.floor(tmp_path / "examples/old/train.py") == Version.parse("2.1")
    assert pins.floor(tmp_path / "examples/new/deep/train.py") == Version.parse("2.4")
    assert Pins(tmp_path / "examples").floor(tmp_path / "examples/new/deep/train.py") is None
    assert Pins(tmp_path, Version.parse("2.9")).floor(tmp_path / "examples/old/train.py") == (
        Version.parse("2.9")
    )


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("requirements-train.txt", "torch-xla==2.2.0\n"),
        ("constraints.txt", "torch-xla==2.2.0\n"),
        ("pyproject.toml", '[project]\ndependencies = ["torch-xla==2.2.0"]\n'),
        ("setup.py", 'setup(install_requires=["torch-xla==2.2.0"])\n'),
        ("Dockerfile", "RUN pip install torch-xla==2.2.0\n"),
        ("Dockerfile.neuron", "RUN pip install torch-neuronx==2.2.0.2.1.0\n"),
    ],
)
def test_each_kind_of_pin_file_is_read(tmp_path: Path, name: str, text: str) -> None:
    write_files(tmp_path, {name: text, "train.py": "", "notes.txt": "torch-xla==2.9.0\n"})
    assert Pins(tmp_path).floor(tmp_path / "train.py") == Version.parse("2.2")


@pytest.mark.parametrize(
    ("text", "floor"),
    [
        ("torch==1.13.1\n", "1.13"),  # torch-xla 1.13 is built for torch 1.13
        (
            "torch==1.13.1\ntorchvision==0.14.1\ntorchaudio==0.13.1\npytorch-lightning==1.9\n",
            "1.13",
        ),
        ("RUN pip install torch==2.1.0+cpu\n", "2.1"),
        ('install_requires=["torch>=2.2,<2.4", "torchvision"]\n', "2.2"),
        (
            "RUN pip install https://download.pytorch.org/whl/torch-2.3.0-cp310-linux_x86_64.whl\n",
            "2.3",
        ),
    ],
)
def test_a_torch_pin_gives_the_torch_xla_released_with_it(text: str, floor: str) -> None:
    assert [str(found) for found in _pinned(text.encode())] == [floor]


def test_a_file_pinning_torch_and_torch_xla_gives_the_oldest_release_both_allow() -> None:
    def floor(text: str) -> list[str]:
        return [str(found) for found in _pinned(text.encode())]

    assert floor("torch==2.1.0\ntorch-xla>=2.0\n") == ["2.1"]  # torch-xla 2.0 needs torch 2.0
    assert floor("torch>=2.0\ntorch-xla==2.2.0\n") == ["2.2"]
    assert floor("RUN pip install torch==2.3.0 torch-neuronx>=2.1.2.2.0.0\n") == ["2.3"]


def test_a_folders_files_pinning_torch_and_torch_xla_give_the_oldest_of_them(
    tmp_path: Path,
) -> None:
    write_files(
        tmp_path,
        {
            "requirements.txt": "torch==1.13.1\n",
            "Dockerfile": "RUN pip install torch-xla==2.1.0\n",
            "train.py": "",
        },
    )
    assert Pins(tmp_path).floor(tmp_path / "train.py") == Version.parse("1.13")


def test_a_torch_pin_keeps_a_successor_newer_than_its_torch_xla_unwritten(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {
            "requirements.txt": "torch==1.13.1\ntorchvision==0.14.1\n",
            "train.py": "import torch_xla.core.xla_model as xm\nprint(xm.get_ordinal())\n",
        },
    )
    document = json.loads(run_cli("scan", "--format", "json", ".", cwd=tmp_path).stdout)
    (finding,) = document["findings"]
    assert finding["fix"]["applicability"] == "manual"  # torch_xla.runtime is torch-xla 2.1's
    assert "the project runs on torch-xla 1.13" in finding["message"]


def test_a_use_takes_the_newer_of_the_projects_floor_and_its_version_checks(
    catalogue: Catalogue,
) -> None:
    source = (
        b"import torch_xla.core.xla_model as xm\n"
        b"from myproject.compat import is_pt21_plus\n"
        b"if is_pt21_plus:\n"
        b"    n = xm.xrt_world_size()\n"
        b"else:\n"
        b"    n = xm.xrt_world_size()\n"
    )
    enabled = frozenset(catalogue.rules)

    def fixes(floor: str) -> list[str]:
        context = FileContext(torch_xla=Version.parse(floor))
        found = scan_source("t.py", source, "python", catalogue, enabled, context=context)
        return [f.fix.applicability if f.fix else "-" for f in found.findings]

    assert fixes("2.0") == ["safe", "manual"]  # the check's 2.1 is newer than the pin's 2.0
    assert fixes("2.1") == ["safe", "safe"]  # the `else` runs on none of the project's releases


def test_a_replacement_newer_than_the_pinned_torch_xla_is_reported_not_written(
    catalogue: Catalogue,
) -> None:
    source = b"import torch_xla.core.xla_model as xm\nxm.mark_step()\nn = xm.xrt_world_size()\n"
    pinned = FileContext(torch_xla=Version.parse("2.1"))
    enabled = frozenset(catalogue.rules)
    outcome = rewrite_source(
        "t.py", source, "python", catalogue, enabled, "full-bf16", context=pinned
    )
    assert outcome.rewritten is not None
    assert b"xm.mark_step()" in outcome.rewritten  # torch_xla.sync() needs torch-xla 2.4
    assert b"xr.world_size()" in outcome.rewritten  # torch_xla.runtime has it since 2.1
    (left,) = outcome.remaining
    assert left.code == "XM502" and "the project runs on torch-xla 2.1" in left.message


def test_scan_and_rewrite_read_the_projects_pins_and_the_option_overrides_them(
    tmp_path: Path,
) -> None:
    write_files(
        tmp_path,
        {
            "requirements.txt": "torch-xla==2.1.0\n",
            "train.py": "import torch_xla.core.xla_model as xm\nxm.mark_step()\n",
        },
    )
    pinned = json.loads(run_cli("scan", "--format", "json", ".", cwd=tmp_path).stdout)
    assert [f["fix"]["applicability"] for f in pinned["findings"]] == ["manual"]
    overridden = run_cli(
        "scan", "--format", "json", "--torch-xla-version", "2.9", ".", cwd=tmp_path
    )
    assert [f["fix"]["applicability"] for f in json.loads(overridden.stdout)["findings"]] == [
        "safe"
    ]
    result = run_cli("rewrite", "--torch-xla-version", "2.4", ".", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # xm's one use became torch_xla.sync(): its import goes with it
    assert (tmp_path / "train.py").read_text() == "import torch_xla\n\ntorch_xla.sync()\n"
    bad = run_cli("scan", "--torch-xla-version", "two", ".", cwd=tmp_path)
    assert bad.returncode == 2 and "--torch-xla-version takes a release like 2.1" in bad.stderr


# --- what to migrate -------------------------------------------------------------------------

LAUNCHED = {
    "run.sh": "#!/bin/bash\nexport XLA_USE_BF16=1\npython train.py\n",
    "train.py": (
        "import torch\n"
        "import torch_xla.core.xla_model as xm\n"
        "\n"
        "device = xm.xla_device()\n"
        "model = torch.nn.Linear(2, 2).to(device)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "xm.mark_step()\n"
    ),
}


def test_select_xm5_migrates_the_apis_alone_and_ignore_xm5_the_precision_alone(
    tmp_path: Path,
) -> None:
    apis, precision = tmp_path / "apis", tmp_path / "precision"
    write_files(apis, LAUNCHED)
    write_files(precision, LAUNCHED)
    assert run_cli("rewrite", "--select", "XM5", ".", cwd=apis).returncode == 0
    assert (apis / "run.sh").read_text() == LAUNCHED["run.sh"]  # the flag stays
    train = (apis / "train.py").read_text()
    assert "torch_xla.device()" in train and "torch_xla.sync()" in train
    assert "bfloat16" not in train and "BF16_RECIPE" not in train
    assert run_cli("rewrite", "--ignore", "XM5,XM409", ".", cwd=precision).returncode == 0
    assert "XLA_USE_BF16" not in (precision / "run.sh").read_text()
    train = (precision / "train.py").read_text()
    assert "xm.xla_device()" in train and "xm.mark_step()" in train
    assert "torch.bfloat16" in train


def test_scan_reports_both_families_by_default(tmp_path: Path) -> None:
    write_files(tmp_path, LAUNCHED)
    document = json.loads(run_cli("scan", "--format", "json", ".", cwd=tmp_path).stdout)
    codes = sorted({finding["code"] for finding in document["findings"]})
    assert codes == ["XM101", "XM502"]


def test_a_notebook_cell_is_scanned_and_rewritten_too(catalogue: Catalogue) -> None:
    cell = {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {},
        "outputs": [],
        "source": ["import torch_xla.core.xla_model as xm\n", "xm.mark_step()\n"],
    }
    notebook = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    data = json.dumps(notebook, indent=1).encode() + b"\n"
    enabled = frozenset(catalogue.rules)
    scanned = scan_source("nb.ipynb", data, "notebook", catalogue, enabled)
    assert [(f.cell, f.span.line, f.code) for f in scanned.findings] == [(0, 2, "XM502")]
    outcome = rewrite_source("nb.ipynb", data, "notebook", catalogue, enabled, "full-bf16")
    assert outcome.rewritten is not None
    source = "".join(json.loads(outcome.rewritten)["cells"][0]["source"])
    assert source == "import torch_xla\n\ntorch_xla.sync()\n"  # xm, no longer used, is gone


# --- runtime variables (XM503) ---------------------------------------------------------------

VARIABLES = {
    "run.sh": (
        "#!/bin/bash\n"
        "export XLA_USE_SPMD=1\n"
        'export XRT_TPU_CONFIG="localservice;0;localhost:51011"\n'
        "GPU_NUM_DEVICES=4 python train.py\n"
        "export XRT_WORKERS=a:0  # xlamigrate: ignore[XM503]\n"
    ),
    "train.py": (
        "import os\n"
        'os.environ["XLA_USE_SPMD"] = "1"\n'
        'print(os.environ.get("XRT_WORKERS"))  # a read: the code\'s own business\n'
    ),
    "Dockerfile": "FROM python:3.10\nENV XRT_DEVICE_MAP=CPU:0;/job:localservice/0\n",
    "job.yaml": "spec:\n  containers:\n  - env:\n    - name: XLA_USE_SPMD\n      value: '1'\n",
    ".env": "GPU_NUM_DEVICES=8\nXRT_WORKERS=localservice:0;grpc://localhost:51011\n",
}


def test_runtime_variables_are_reported_wherever_set_and_never_rewritten(tmp_path: Path) -> None:
    write_files(tmp_path, VARIABLES)
    document = json.loads(run_cli("scan", "--format", "json", ".", cwd=tmp_path).stdout)
    found = [
        (f["path"], f["line"], f["variable"], f["fix"]["applicability"])
        for f in document["findings"]
    ]
    assert found == [
        (".env", 1, "GPU_NUM_DEVICES", "manual"),
        (".env", 2, "XRT_WORKERS", "manual"),
        ("Dockerfile", 2, "XRT_DEVICE_MAP", "manual"),
        ("job.yaml", 4, "XLA_USE_SPMD", "manual"),
        ("run.sh", 2, "XLA_USE_SPMD", "manual"),
        ("run.sh", 3, "XRT_TPU_CONFIG", "manual"),
        ("run.sh", 4, "GPU_NUM_DEVICES", "manual"),
        ("train.py", 2, "XLA_USE_SPMD", "manual"),
    ]
    spmd = next(f for f in document["findings"] if f["path"] == "train.py")
    assert "torch_xla.runtime.use_spmd()" in spmd["message"]
    result = run_cli("rewrite", ".", cwd=tmp_path)
    assert result.returncode == 1, result.stderr  # manual work left
    assert "8 findings left for manual work" in result.stderr
    for name, text in VARIABLES.items():
        assert (tmp_path / name).read_text() == text, name


def test_a_symlinked_script_gets_the_pins_of_the_folder_its_target_lies_in(tmp_path: Path) -> None:
    # (each folder's chain of pin folders is worked out once; a symlink is not in its folder's)
    for folder, pin in (("a", "torch==2.1.0\n"), ("b", "torch==2.3.0\n")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "requirements.txt").write_text(pin)
    (tmp_path / "a" / "train.py").write_text("")
    (tmp_path / "b" / "own.py").write_text("")
    (tmp_path / "b" / "link.py").symlink_to(tmp_path / "a" / "train.py")
    pins = Pins(tmp_path)
    assert pins.floor(tmp_path / "b" / "own.py") == Version.parse("2.3")
    assert pins.floor(tmp_path / "b" / "link.py") == Version.parse("2.1")
    assert pins.floor(tmp_path / "a" / "train.py") == Version.parse("2.1")


def test_the_docs_list_of_what_xm502_reports_is_what_rule_prints() -> None:
    """docs/xla-apis.md shows `xlamigrate rule XM502`'s entries: the table's, word for word."""
    docs = (ROOT / "docs" / "xla-apis.md").read_text(encoding="utf-8")
    shown = docs.split("$ xlamigrate rule XM502\n...\n", 1)[1].split("```", 1)[0]
    result = run_cli("rule", "XM502", cwd=ROOT)
    assert result.returncode == 0, result.stderr
    printed = result.stdout.split("What it reports", 1)[1].split("\n\n", 1)[0]
    assert shown == f"What it reports{printed}\n"


@pytest.mark.parametrize(
    ("source", "line"),
    [
        ("import torch_xla\ndevice = torch_xla.core.xla_model.xla_device()\n", 2),
        ("import torch_xla\ndevice = torch_xla . core.\\\n    xla_model.xla_device()\n", 2),
        (
            "import torch_xla\ndevice = (torch_xla.core  # it\n  .xla_model.xla_device())\n",
            2,
        ),
        ("import torch_xla\ndevice = (torch_xla.core).xla_model.xla_device()\n", 2),
        ("from torch_xla import amp\nwith amp.autocast(device):\n    pass\n", 2),
        ("def main():\n    import torch_xla.core.xla_model as xm\n    xm.mark_step()\n", 3),
        (
            "try:\n    pass\nexcept ValueError:\n    pass\nelse:\n"
            "    from torch_xla.core import xla_model\nxla_model.mark_step()\n",
            7,
        ),
        (
            "match mode:\n    case 1:\n        import torch_xla.core.xla_model as xm\n"
            "xm.mark_step()\n",
            4,
        ),
    ],
)
def test_a_use_is_found_through_whatever_import_reaches_it(
    source: str, line: int, catalogue: Catalogue
) -> None:
    """Files are analysed for API uses only where an import (at any depth of statements) binds
    a name the entry is reached through; every spelling that reaches one still does."""
    result = scan_source(
        "t.py", source.encode(), "python", catalogue, frozenset({"XM502", "XM504"})
    )
    assert [f.span.line for f in result.findings] == [line]


def test_a_file_that_imports_nothing_reaching_an_entry_is_not_resolved() -> None:
    """`mark_step` named, but only torch's own modules imported: no use, and no scopes built."""
    source = "import torch\n# xm.mark_step() used to go here\nmark_step = torch.compile\n"
    module = ast.parse(source)
    file = PythonFile("t.py", source, module, SourceLines(source))
    found = api_findings(file, lambda node: "", load_catalogue(), frozenset({"XM502"}), None)
    assert found == []
    assert "scopes" not in vars(file)
