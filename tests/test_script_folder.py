"""Launchers that name their script from their own folder (`torchrun $DISTRIBUTED_ARGS
$SCRIPT_DIR/train.py`, `cd "$(dirname "$0")"` then `torchrun train.py`) and the Neuron
tutorials' `neuron_parallel_compile XLA_DOWNCAST_BF16=1 torchrun ...`: the project finds the
script beside the launcher and migrates the write as it does a plain `export` before `torchrun
train.py` (tests/fixtures/projects/script_dir_launcher is the whole case, in every mode)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_project import build
from xlamigrate.kinds.launch import OWN_FOLDER
from xlamigrate.project.resolve import ScriptResolver

SCRIPT_DIR = 'SCRIPT_DIR=$( cd -- "$( dirname -- "${BASH_SOURCE[0]}" )" &> /dev/null && pwd )\n'


def resolver(*files: str) -> ScriptResolver:
    return ScriptResolver(Path("."), {path: Path(path) for path in files})


def test_a_path_below_the_launchers_folder_names_the_file_there_and_nowhere_else() -> None:
    resolve = resolver("nxd/llama/train.py", "nxd/common/util.py", "train.py", "other/x.py")
    assert resolve("nxd/llama/run.sh", f"{OWN_FOLDER}/train.py") == "nxd/llama/train.py"
    assert resolve("nxd/llama/run.sh", f"{OWN_FOLDER}/../common/util.py") == "nxd/common/util.py"
    assert resolve("run.sh", f"{OWN_FOLDER}/train.py") == "train.py"
    # no other file that ends the same way, no file above the project
    assert resolve("nxd/llama/run.sh", f"{OWN_FOLDER}/x.py") is None
    assert resolve("run.sh", f"{OWN_FOLDER}/../train.py") is None


def test_an_nxd_launcher_migrates_its_export_for_the_script_beside_it() -> None:
    launcher = (
        SCRIPT_DIR
        + "export XLA_DOWNCAST_BF16=1\n"
        + 'DISTRIBUTED_ARGS="--nproc_per_node 32 --nnodes $NNODES"\n'
        + "torchrun $DISTRIBUTED_ARGS $SCRIPT_DIR/train.py --steps 20\n"
    )
    files = {"nxd/llama/run.sh": launcher, "nxd/llama/train.py": "", "nxd/gpt/train.py": ""}
    project, _, _ = build(files)
    (decision,) = project.writes["nxd/llama/run.sh"].values()
    assert decision.migrated and decision.scripts == ("nxd/llama/train.py",)
    assert project.scripts["nxd/llama/train.py"].signal is None  # every launch sets the flag


def test_a_script_named_through_an_unknown_folder_keeps_the_write_and_says_which() -> None:
    launcher = (
        'export XLA_DOWNCAST_BF16=1\ntorchrun --nproc_per_node=1 "$DIR/train.py" --steps 20\n'
    )
    project, _, _ = build({"run.sh": launcher, "train.py": ""})
    (decision,) = project.writes["run.sh"].values()
    assert not decision.migrated
    assert '"$DIR/train.py"' in decision.reason and "20" not in decision.reason


def test_cd_to_the_launchers_folder_makes_a_relative_script_the_one_beside_it() -> None:
    launcher = 'cd "$(dirname "$0")"\nexport XLA_USE_BF16=1\npython train.py\n'
    project, _, _ = build({"jobs/bert/run.sh": launcher, "jobs/bert/train.py": "", "train.py": ""})
    (decision,) = project.writes["jobs/bert/run.sh"].values()
    assert decision.scripts == ("jobs/bert/train.py",)


@pytest.mark.parametrize(
    "command",
    [
        "neuron_parallel_compile XLA_DOWNCAST_BF16=1 torchrun --nproc_per_node=32 train.py\n",
        "XLA_DOWNCAST_BF16=1 neuron_parallel_compile torchrun --nproc_per_node=32 train.py\n",
        "env XLA_DOWNCAST_BF16=1 torchrun --nproc_per_node=32 train.py\n",
    ],
)
def test_an_assignment_after_a_wrapper_is_migrated_as_the_prefix_form_is(command: str) -> None:
    project, _, _ = build({"compile.sh": command, "train.py": ""})
    (decision,) = project.writes["compile.sh"].values()
    assert decision.migrated and decision.scripts == ("train.py",)
    assert project.scripts["train.py"].signal is None
