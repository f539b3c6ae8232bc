"""The project model's decisions, unit by unit: where a write takes effect, when the recipe is
gated on the signal, which platform a launcher configures, how a launch names a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from xlamigrate.catalogue import Catalogue
from xlamigrate.config import ConfigError, load_settings
from xlamigrate.kinds.launch import IMAGE
from xlamigrate.kinds.shell.analysis import analyse
from xlamigrate.project.build import ProjectBuilder
from xlamigrate.project.model import Analysed
from xlamigrate.project.platform import platform_of
from xlamigrate.project.resolve import ScriptResolver

NAMES = frozenset({"XLA_USE_BF16", "XLA_DOWNCAST_BF16", "NEURON_RT_STOCHASTIC_ROUNDING_EN"})


def build(files: dict[str, str], signal: str = "BF16_RECIPE", configured: bool = False):  # type: ignore[no-untyped-def]
    launchers = [
        Analysed(path, "shell", text, analyse(text, NAMES))
        for path, text in files.items()
        if path.endswith(".sh")
    ]
    builder = ProjectBuilder(
        resolver=ScriptResolver(Path("."), {p: Path(p) for p in files if p.endswith(".py")}),
        read=lambda path: files[path].encode(),
        others=list(files),
        signal=signal,
        signal_configured=configured,
    )
    return builder.build(launchers)


def test_a_top_level_export_before_the_only_launch_makes_the_recipe_unconditional() -> None:
    project, _, _ = build({"run.sh": "export XLA_USE_BF16=1\ntorchrun train.py\n", "train.py": ""})
    assert project.scripts["train.py"].signal is None
    (decision,) = project.writes["run.sh"].values()
    assert decision.migrated and decision.signal is None and decision.scripts == ("train.py",)


def test_a_write_in_one_branch_gates_the_recipe_on_the_signal() -> None:
    text = 'if [ "$1" = bf16 ]; then\n  export XLA_USE_BF16=1\nfi\npython train.py\n'
    project, signal, _ = build({"run.sh": text, "train.py": ""})
    assert signal == "BF16_RECIPE" and project.scripts["train.py"].signal == "BF16_RECIPE"
    (decision,) = project.writes["run.sh"].values()
    assert decision.migrated and decision.signal == "BF16_RECIPE"


def test_an_export_in_another_case_arm_does_not_reach_the_launch() -> None:
    text = "case $1 in\n  a) export XLA_USE_BF16=1 ;;\n  b) python train.py ;;\nesac\n"
    project, _, _ = build({"run.sh": text, "train.py": ""})
    (decision,) = project.writes["run.sh"].values()
    assert not decision.migrated and "no Python script" in decision.reason


def test_a_second_launcher_without_the_flag_gates_the_recipe() -> None:
    files = {
        "bf16.sh": "export XLA_USE_BF16=1\ntorchrun train.py\n",
        "fp32.sh": "torchrun train.py\n",
        "train.py": "",
    }
    project, _, _ = build(files)
    assert project.scripts["train.py"].signal == "BF16_RECIPE"


def test_a_script_outside_the_project_keeps_the_write() -> None:
    project, _, _ = build({"run.sh": "export XLA_USE_BF16=1\npython /opt/image/pretrain.py\n"})
    (decision,) = project.writes["run.sh"].values()
    assert not decision.migrated and "/opt/image/pretrain.py" in decision.reason
    assert project.scripts == {}


@pytest.mark.parametrize(
    "helper", ["NODES=$(/root/nodelist_helper.py)", "HOSTS=`python3 /root/hosts.py`"]
)
def test_a_helper_run_for_its_output_is_not_a_process_the_write_is_for(helper: str) -> None:
    text = f"export XLA_DOWNCAST_BF16=1\n{helper}\ntorchrun train.py\n"
    project, _, _ = build({"run.sh": text, "train.py": ""})
    (decision,) = project.writes["run.sh"].values()
    assert decision.migrated and decision.scripts == ("train.py",)


def test_the_default_signal_steps_aside_for_a_name_the_tree_already_uses() -> None:
    files = {
        "run.sh": 'export BF16_RECIPE=fast\nif [ "$1" ]; then export XLA_USE_BF16=1; fi\n'
        "python train.py\n",
        "train.py": "",
    }
    assert build(files)[1] == "XLAMIGRATE_BF16_RECIPE"
    assert build(files, "BF16_RECIPE", configured=True)[1] == "BF16_RECIPE"


@pytest.mark.parametrize(
    ("text", "platform"),
    [
        ("export PJRT_DEVICE=TPU\n", "tpu"),
        ("resources:\n  limits:\n    google.com/tpu: 4\n", "tpu"),
        ("export NEURON_CC_FLAGS=-O1\n", "neuron"),
        ("    aws.amazon.com/neuron: 16\n", "neuron"),
        ("python train.py\n", None),
        ("export PJRT_DEVICE=TPU NEURON_RT_NUM_CORES=2\n", None),  # both: the file does not say
    ],
)
def test_platform_of_a_launcher(text: str, platform: str | None) -> None:
    assert platform_of(text) == platform


def test_a_container_path_is_no_project_file_by_its_ending_alone() -> None:
    # (tests/test_launch_resolution.py: through the Dockerfile that copies it, it is one)
    resolver = ScriptResolver(Path("."), {"src/train.py": Path("src/train.py")})
    assert resolver("k8s/job.yaml", f"{IMAGE}/workspace/src/train.py") is None
    assert "no Dockerfile" in resolver.unresolved("k8s/job.yaml", f"{IMAGE}/workspace/src/train.py")
    assert resolver("k8s/job.yaml", "/workspace/src/train.py") is None
    assert resolver("k8s/job.yaml", "$SCRIPT") is None


@pytest.mark.parametrize(
    ("setting", "message"),
    [('signal = "1BAD"', "signal must be"), ('target = "gpu"', "target must be one of")],
)
def test_signal_and_target_settings_are_checked(
    tmp_path: Path, catalogue: Catalogue, setting: str, message: str
) -> None:
    (tmp_path / "pyproject.toml").write_text(f"[tool.xlamigrate]\n{setting}\n")
    with pytest.raises(ConfigError, match=message):
        load_settings([tmp_path], catalogue)


def test_signal_and_target_settings_are_read(tmp_path: Path, catalogue: Catalogue) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.xlamigrate]\nsignal = "TRAIN_BF16"\ntarget = "tpu"\n'
    )
    settings = load_settings([tmp_path], catalogue)
    assert (settings.signal, settings.target) == ("TRAIN_BF16", "tpu")
