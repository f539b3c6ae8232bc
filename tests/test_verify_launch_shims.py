"""The launch shims `xlamigrate verify run.sh` puts first on PATH, run without torch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import needs_torch_xla_platform
from xlamigrate.verify.launcher import (
    LAUNCH_LOG,
    copy_project,
    install_launch_shims,
    launch_lines,
)

pytestmark = pytest.mark.skipif(shutil.which("sh") is None, reason="the shims are sh scripts")

SCRIPT = """import json, os, sys
names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
print(json.dumps({"argv": sys.argv, "executable": sys.executable,
                  "env": {name: os.environ.get(name) for name in names}}))
"""


def launch(tmp_path: Path, command: list[str]) -> dict[str, object]:
    shims = install_launch_shims(tmp_path / "shims")
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "probe").mkdir(exist_ok=True)
    (tmp_path / "probe" / "__main__.py").write_text(SCRIPT)
    env = {key: value for key, value in os.environ.items() if key not in ("MASTER_PORT",)}
    env["PATH"] = f"{shims}{os.pathsep}{env.get('PATH', '')}"
    env[LAUNCH_LOG] = str(tmp_path / "launches.log")
    result = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    printed: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return printed


def test_torchrun_runs_one_local_worker_with_verifys_interpreter(tmp_path: Path) -> None:
    printed = launch(
        tmp_path,
        ["torchrun", "--nproc_per_node=4", "--nnodes", "1", "--standalone", "train.py", "--lr",
         "0.1"],
    )  # fmt: skip
    assert printed["argv"] == ["train.py", "--lr", "0.1"]  # torchrun's own options dropped
    assert os.path.realpath(str(printed["executable"])) == os.path.realpath(sys.executable)
    env = printed["env"]
    assert isinstance(env, dict)
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("0", "1", "1")
    assert env["MASTER_ADDR"] == "127.0.0.1" and str(env["MASTER_PORT"]).isdigit()
    assert launch_lines(tmp_path / "launches.log") == (
        "torchrun --nproc_per_node=4 --nnodes 1 --standalone train.py --lr 0.1",
    )


def test_torchrun_module_form_and_python_shims_are_logged(tmp_path: Path) -> None:
    assert launch(tmp_path, ["torchrun", "--nproc_per_node", "2", "-m", "probe"])["argv"][1:] == []
    assert launch(tmp_path, ["python3", "train.py", "--x"])["argv"] == ["train.py", "--x"]
    assert launch_lines(tmp_path / "launches.log") == (
        "torchrun --nproc_per_node 2 -m probe",
        "python3 train.py --x",
    )


def test_wrappers_run_the_command_they_wrap_once_with_the_variables_they_set(
    tmp_path: Path,
) -> None:
    (tmp_path / "run.sh").write_text('export B="$A-2"\npython3 train.py --from-run-sh\n')
    printed = launch(
        tmp_path,
        ["mpirun", "--allow-run-as-root", "-np", "4", "-bind-to", "none", "-x", "A=1", "-x",
         "PATH", "./run.sh"],
    )  # fmt: skip
    assert printed["argv"] == ["train.py", "--from-run-sh"]  # run.sh (not executable) ran in bash
    assert launch(tmp_path, ["srun", "--ntasks=8", "-l", "python3", "train.py"])["argv"] == [
        "train.py"
    ]
    compiled = launch(tmp_path, ["neuron_parallel_compile", "torchrun", "--nnodes=1", "train.py"])
    assert compiled["argv"] == ["train.py"] and compiled["env"]["WORLD_SIZE"] == "1"
    assert launch_lines(tmp_path / "launches.log") == (
        "mpirun --allow-run-as-root -np 4 -bind-to none -x A=1 -x PATH ./run.sh",
        "python3 train.py --from-run-sh",
        "srun --ntasks=8 -l python3 train.py",
        "python3 train.py",
        "neuron_parallel_compile torchrun --nnodes=1 train.py",
        "torchrun --nnodes=1 train.py",
    )


def test_a_wrapper_passes_on_the_variables_it_sets(tmp_path: Path) -> None:
    (tmp_path / "env.py").write_text("import json, os; print(json.dumps(os.environ.get('A')))")
    shims = install_launch_shims(tmp_path / "shims")
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
    env[LAUNCH_LOG] = str(tmp_path / "launches.log")
    command = ["mpirun", "-np", "2", "-x", "A=from-mpirun", "python", "env.py"]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == "from-mpirun"


@needs_torch_xla_platform
def test_a_launcher_that_fails_before_it_launches_is_reported_so(tmp_path: Path) -> None:
    launcher = tmp_path / "run.sh"
    launcher.write_text(
        "#!/bin/bash\nset -e\nexport XLA_USE_BF16=1\n"
        "echo 'no dataset here' >&2\nexit 3\ntorchrun --nproc_per_node=2 train.py\n"
    )
    (tmp_path / "train.py").write_text("import torch\n")
    result = subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", "verify", "run.sh", "--mode", "full-bf16"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    reason = "the original launcher exited 3 before it launched anything"
    assert f"original: NO REFERENCE: {reason}" in result.stdout
    assert "no dataset here" in result.stdout  # its stderr, shown
    assert "0 equivalent, 0 divergent, 1 failed" in result.stderr


def test_the_copy_verify_migrates_links_to_its_own_files_and_copies_what_lies_outside(
    tmp_path: Path,
) -> None:
    """A project that links a script shared with another (`train.py -> ../shared/train.py`)
    runs in the copy as it does in place, and a link into the project, absolute or relative,
    leads to the copy's file: the migration of the copy never writes the original."""
    shared = tmp_path / "shared" / "train.py"
    shared.parent.mkdir()
    shared.write_text("print('trained')\n")
    root = tmp_path / "project"
    (root / "data").mkdir(parents=True)
    (root / "data" / "config.txt").write_text("steps=2\n")
    (root / "train.py").symlink_to("../shared/train.py")
    (root / "config.txt").symlink_to(root / "data" / "config.txt")  # absolute, into the project
    (root / "same.txt").symlink_to("data/config.txt")
    (root / "gone.txt").symlink_to("missing.txt")
    copy = tmp_path / "work" / "full-bf16" / "project"
    copy_project(root, copy)
    assert not (copy / "train.py").is_symlink()
    assert (copy / "train.py").read_text() == "print('trained')\n"
    assert os.readlink(copy / "config.txt") == os.path.join("data", "config.txt")
    assert os.readlink(copy / "same.txt") == os.path.join("data", "config.txt")
    assert os.readlink(copy / "gone.txt") == "missing.txt"
    (copy / "config.txt").write_text("steps=3\n")  # what a rewrite of the link does
    assert (copy / "data" / "config.txt").read_text() == "steps=3\n"
    assert (root / "data" / "config.txt").read_text() == "steps=2\n"
