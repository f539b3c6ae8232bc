"""The CLI stays light (no torch, no parser until needed); the wheel carries the rule catalogue."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import ROOT


def imported_modules(code: str, cwd: Path | None = None) -> set[str]:
    """Top-level module names imported by running `code` in a fresh interpreter (-X importtime)."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True, text=True, check=True, cwd=cwd,
    )  # fmt: skip
    names = set()
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


def test_importing_the_cli_does_not_import_torch_or_libcst() -> None:
    modules = imported_modules("import xlamigrate.cli")
    assert "xlamigrate" in modules  # the probe itself works
    assert "torch" not in modules
    assert "torch_xla" not in modules
    assert "libcst" not in modules
    assert not modules & {"tree_sitter", "tree_sitter_bash", "ruamel", "nbformat"}  # per file kind


def test_scanning_files_without_flags_never_loads_the_parser(tmp_path: Path) -> None:
    for index in range(3):
        (tmp_path / f"m{index}.py").write_text("import os\nprint(os.environ.get('HOME'))\n")
    code = (
        "import sys\n"
        "from xlamigrate.cli import main\n"
        "sys.argv = ['xlamigrate', 'scan', '.']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
    )
    modules = imported_modules(code, cwd=tmp_path)
    assert "libcst" not in modules
    assert "torch" not in modules


TRAINING = (
    "import os\nimport torch\n\nos.environ['XLA_USE_BF16'] = '1'\n"
    "model = torch.nn.Linear(2, 2)\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "loss = model(torch.ones(2)).sum()\nloss.backward()\n"
)


def cli(*arguments: str, status: int) -> str:
    return (
        "import sys\n"
        "from xlamigrate.cli import main\n"
        f"sys.argv = ['xlamigrate', {', '.join(map(repr, arguments))}]\n"
        f"try:\n    main()\nexcept SystemExit as e:\n    assert e.code == {status}, e.code\n"
    )


def test_scanning_flagged_files_imports_neither_libcst_nor_torch(tmp_path: Path) -> None:
    """The scan analyses and plans on Python's own `ast`, the recipe's plan included (a
    notebook's cells too)."""
    (tmp_path / "train.py").write_text(TRAINING)
    (tmp_path / "reads.py").write_text("import os\nBF16 = os.environ.get('XLA_USE_BF16')\n")
    (tmp_path / "job.yaml").write_text("env:\n  - name: XLA_USE_BF16\n    value: '1'\n")
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
    notebook = {
        "cells": [{**cell, "source": ["%env XLA_USE_BF16=1\n", "import torch\n"]}],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "train.ipynb").write_text(json.dumps(notebook))
    modules = imported_modules(cli("scan", ".", "-f", "json", status=1), cwd=tmp_path)
    assert "xlamigrate" in modules
    assert "libcst" not in modules
    assert "torch" not in modules


def test_a_rewrite_with_edits_to_make_imports_libcst_but_not_torch(tmp_path: Path) -> None:
    """libcst writes the edits (every byte the plan does not touch kept)."""
    (tmp_path / "train.py").write_text(TRAINING)
    modules = imported_modules(cli("rewrite", ".", "--diff", status=1), cwd=tmp_path)
    assert "libcst" in modules
    assert "torch" not in modules


def test_wheel_ships_the_rule_catalogue_and_the_rounding_kernel_source(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path)],
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("xlamigrate-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {Path(name).name for name in names if name.startswith("xlamigrate/rules/")}
    in_repo = {path.name for path in (ROOT / "rules").glob("*.toml")}
    assert shipped == in_repo
    # What the CLI shares with the runtime (links in the checkout) ships as files of its own; the
    # runtime's source ships as data for `rewrite --runtime vendor`, never as a package.
    assert {"xlamigrate/neuronflags.py", "xlamigrate/optimizer_facts.py"} <= names
    assert "xlamigrate/_runtime/native/stochastic_rounding.c" in names
    assert not any(name.startswith("xlamigrate_runtime/") for name in names)
    # Import straight from the wheel (zipimport), away from the source tree.
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import xlamigrate.catalogue as c\n"
        "assert c.__file__.startswith(sys.argv[1]), c.__file__\n"
        "print(sorted(c.load_catalogue().rules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", code, str(wheel)],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "XM101" in result.stdout and "XM901" in result.stdout


def test_importing_the_runtime_does_not_import_the_cli_stack() -> None:
    modules = imported_modules("import xlamigrate_runtime")
    assert "torch" in modules  # the probe works: the runtime does need torch
    assert not modules & {"xlamigrate", "libcst", "rich", "pathspec"}


def test_the_shell_engine_is_imported_only_for_shell_text_naming_a_flag(tmp_path: Path) -> None:
    (tmp_path / "training.env").write_text("XLA_USE_BF16=1\n")
    (tmp_path / "Dockerfile").write_text("FROM x\nENV XLA_USE_BF16=1\nRUN pip install torch\n")
    (tmp_path / "job.yaml").write_text(
        "env:\n  - name: XLA_USE_BF16\n    value: '1'\ncommand: [python, t.py]\n"
    )
    (tmp_path / "run.sh").write_text("python train.py\n")  # no flag: not even parsed
    code = (
        "import sys\n"
        "from xlamigrate.cli import main\n"
        "sys.argv = ['xlamigrate', 'scan', '.', '-f', 'json', '-j', '1']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 1, e.code\n"
    )
    modules = imported_modules(code, cwd=tmp_path)
    assert not modules & {"tree_sitter", "tree_sitter_bash", "libcst"}
    (tmp_path / "run.sh").write_text("export XLA_USE_BF16=1\npython train.py\n")
    assert "tree_sitter_bash" in imported_modules(code, cwd=tmp_path)


def test_a_scan_of_reads_and_launchers_alone_never_imports_the_rewriter(tmp_path: Path) -> None:
    """The rewrite modules are start-up a pre-commit scan pays only where it must say what the
    rewrite will do: a file that turns the flag on for itself (is its recipe possible?), a
    launcher of a script in the tree (does that script take it?)."""
    (tmp_path / "train.py").write_text("import os\nflag = os.environ.get('XLA_USE_BF16')\n")
    (tmp_path / "run.sh").write_text("export XLA_USE_BF16=1\npython /opt/ml/pretrain.py\n")
    code = (
        "import sys\nfrom xlamigrate.cli import main\n"
        "sys.argv = ['xlamigrate', 'scan', '.', '-f', 'json']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('xlamigrate.kinds.python.rewrite' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert result.stdout.strip().splitlines()[-1] == "False"
