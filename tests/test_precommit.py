"""The hooks of `.pre-commit-hooks.yaml`, run by the real pre-commit against this checkout
(`pre-commit try-repo`, which also picks up uncommitted changes of tracked files), in a
throwaway git repository holding a flagged script and launcher."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from tests.conftest import ROOT
from xlamigrate.kinds import KINDS

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="pre-commit needs git")

TRAIN = (
    "import os\n\nimport torch\n\n"
    'os.environ["XLA_USE_BF16"] = "1"\n'
    "model = torch.nn.Linear(4, 1)\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
)
LAUNCH = "#!/bin/bash\nexport XLA_USE_BF16=1\npython train.py\n"
NOTEBOOK_CELL = (
    "%env XLA_DOWNCAST_BF16=1\n"
    "import torch\n"
    "net = torch.nn.Linear(2, 2)\n"
    "sgd = torch.optim.SGD(net.parameters(), lr=0.1)\n"
)
CONFIG = '[tool.xlamigrate]\nmode = "fp32-copy"\n'


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def pre_commit(repo: Path, home: Path, hook: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PRE_COMMIT_HOME": str(home), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), hook, "--all-files"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import nbformat

    repo = tmp_path_factory.mktemp("precommit-repo")
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "dev@example.com")
    git(repo, "config", "user.name", "dev")
    (repo / "train.py").write_text(TRAIN)
    (repo / "launch.sh").write_text(LAUNCH)
    (repo / "README.md").write_text("XLA_USE_BF16 in prose is not checked\n")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(NOTEBOOK_CELL)])
    nbformat.write(notebook, str(repo / "explore.ipynb"))
    (repo / "pyproject.toml").write_text(CONFIG)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "legacy flags")
    return repo


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pre-commit's cache: the hook environments it installs."""
    return tmp_path_factory.mktemp("pre-commit-home")


@pytest.fixture(scope="module")
def runs(repo: Path, home: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    """The hooks in the order a user meets them: scan fails, rewrite fixes and fails, rewrite
    again passes, scan passes."""
    results = {}
    for step in ("scan", "rewrite", "rewrite again", "scan again"):
        hook = "xlamigrate" if step.startswith("scan") else "xlamigrate-rewrite"
        results[step] = pre_commit(repo, home, hook)
    return results


def test_scan_hook_fails_with_each_finding(
    runs: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    scan = runs["scan"]
    assert scan.returncode == 1, scan.stdout + scan.stderr
    assert "xlamigrate (legacy XLA bf16 flags)" in scan.stdout and "Failed" in scan.stdout
    assert "train.py:5:1: XM101" in scan.stdout
    assert "launch.sh:2:8: XM101" in scan.stdout
    assert "explore.ipynb:cell-0:1:1: XM102" in scan.stdout
    assert "README.md" not in scan.stdout  # not a kind the hook passes


def test_rewrite_hook_rewrites_in_the_configured_mode_and_fails(
    runs: dict[str, subprocess.CompletedProcess[str]], repo: Path
) -> None:
    rewrite = runs["rewrite"]
    assert rewrite.returncode == 1, rewrite.stdout + rewrite.stderr
    assert "files were modified by this hook" in rewrite.stdout
    train = (repo / "train.py").read_text()
    assert "FP32ParamsCopy(torch.optim.SGD(model.parameters(), lr=0.1))" in train  # fp32-copy
    assert "XLA_USE_BF16" not in train
    assert "XLA_USE_BF16" not in (repo / "launch.sh").read_text()
    assert "XLA_DOWNCAST_BF16" not in (repo / "explore.ipynb").read_text()


def test_a_second_run_of_either_hook_passes(
    runs: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    for step in ("rewrite again", "scan again"):
        run = runs[step]
        assert run.returncode == 0, run.stdout + run.stderr
        assert "Passed" in run.stdout


def test_the_hooks_install_the_cli_dependencies_only() -> None:
    """`language: python` hooks install the project (`pip install .`) plus any
    additional_dependencies: so the project's own dependencies are what the hook gets, and
    torch, torch-xla and matplotlib stay in the extras (the runs above prove the CLI works)."""
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert {hook["id"] for hook in hooks} == {"xlamigrate", "xlamigrate-rewrite"}
    assert all(hook["language"] == "python" for hook in hooks)
    assert not any(hook.get("additional_dependencies") for hook in hooks)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {
        re.split(r"[<>=!~;\[ ]", dependency)[0].lower() for dependency in project["dependencies"]
    }
    assert names >= {"libcst", "rich"}
    assert not names & {"torch", "torch-xla", "matplotlib", "numpy"}


def test_the_hooks_pass_every_file_kind_xlamigrate_checks() -> None:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    for hook in hooks:
        assert set(hook["types_or"]) == {kind.identify for kind in KINDS}


# A launcher sets the flag, the script it starts only reads it: the read is fixable (the rewrite
# makes it read the signal the launcher then sets) only as part of the project, never alone.
READER = (
    "import os\n\nimport torch\n\n"
    'if os.environ.get("XLA_USE_BF16") == "1":\n    print("training in bf16")\n'
    "model = torch.nn.Linear(4, 1)\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
)
READER_LAUNCH = "#!/bin/bash\nexport XLA_USE_BF16=1\npython train.py\n"


def pre_commit_on_staged(repo: Path, home: Path, hook: str) -> subprocess.CompletedProcess[str]:
    """The hook as `git commit` runs it: on the staged files alone."""
    env = {**os.environ, "PRE_COMMIT_HOME": str(home), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), hook],
        cwd=repo, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def findings_for(path: str, output: str) -> list[str]:
    """The findings of one file in the hook's output, each with its help and note lines."""
    found = []
    for block in re.split(r"\n\s*\n", output):
        if not block.startswith(f"{path}:"):
            continue
        head, *rest = block.splitlines()
        # (the closing summary follows the last finding with no blank line between)
        details = itertools.takewhile(lambda line: line.startswith(" "), rest)
        found.append("\n".join([head, *details]).strip())
    return found


def test_the_hook_on_a_changed_script_says_what_the_full_scan_says(
    tmp_path: Path, home: Path
) -> None:
    repo = tmp_path / "reader-repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "dev@example.com")
    git(repo, "config", "user.name", "dev")
    (repo / "train.py").write_text(READER)
    (repo / "launch.sh").write_text(READER_LAUNCH)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a launcher and the script it starts")
    full = pre_commit(repo, home, "xlamigrate")
    (repo / "train.py").write_text(READER + 'print("changed")\n')
    git(repo, "add", "train.py")
    changed = pre_commit_on_staged(repo, home, "xlamigrate")
    assert full.returncode == changed.returncode == 1, full.stdout + changed.stdout
    expected = findings_for("train.py", full.stdout)
    assert expected and "XM201" in expected[0] and "[*]" in expected[0]  # fixable: the project
    assert findings_for("train.py", changed.stdout) == expected
    assert not findings_for("launch.sh", changed.stdout)  # not changed: not reported
