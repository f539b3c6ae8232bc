"""Launch APIs followed into the project (kinds/python/launchapis.py): a legacy flag written under
a string key into a SageMaker estimator's `environment=`, Ray's `runtime_env` or Metaflow's
`@environment(vars=...)` in a .py file is a launcher's enabling write. The rewrite renames the
key to the signal and puts the recipe in the script the launch names, or in the function of
the file its processes start in. What cannot be followed stays XM301, manual.

The fixture projects sagemaker_estimator and ray_worker_env are the before/after spec;
tests/test_ray_e2e.py trains the Ray one."""

from __future__ import annotations

from pathlib import Path

from tests.test_cli import run_cli, write_files
from tests.test_framework_recipes import diff_of, remaining, rewrite_json

TRAIN = """\
import torch
import torch_xla

model = torch.nn.Linear(4, 4).to(torch_xla.device())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss = model(torch.ones(2, 4, device="xla")).sum()
loss.backward()
optimizer.step()
"""


def test_a_literal_environment_key_becomes_the_signal_in_its_own_quotes(tmp_path: Path) -> None:
    launcher = """\
from sagemaker.pytorch import PyTorch

PyTorch(entry_point="train.py", environment={'XLA_USE_BF16': '1'}).fit()
"""
    document = rewrite_json(tmp_path, {"job.py": launcher, "train.py": TRAIN}, "full-bf16")
    assert "+PyTorch(entry_point=\"train.py\", environment={'BF16_RECIPE': '1'}).fit()" in diff_of(
        document, "job.py"
    )
    script = diff_of(document, "train.py")
    assert '+BF16_RECIPE = os.environ.get("BF16_RECIPE") == "1"' in script
    assert '+    os.environ["NEURON_RT_STOCHASTIC_ROUNDING_EN"] = "1"' in script
    assert "+    model.to(torch.bfloat16)" in script
    assert remaining(document) == []


def test_a_write_under_a_condition_reaches_only_the_runs_that_make_it(tmp_path: Path) -> None:
    launcher = """\
import sys

from sagemaker.pytorch import PyTorch

env = {}
if "--bf16" in sys.argv:
    env["XLA_USE_BF16"] = "1"
PyTorch(entry_point="train.py", environment=env).fit()
"""
    write_files(tmp_path, {"job.py": launcher, "train.py": TRAIN})
    result = run_cli("scan", "--select", "XM1", "--output-format", "concise", ".", cwd=tmp_path)
    assert result.stdout.startswith(
        'job.py:7:9: XM101 XLA_USE_BF16 set to "1" (on); SageMaker passes it to the training'
        " job's containers; it starts train.py, which gets the recipe under BF16_RECIPE=1, set"
        " here instead:"
    ), result.stdout


def test_a_key_the_rewrite_cannot_rename_stays_xm301(tmp_path: Path) -> None:
    launcher = """\
import ray
from ray.runtime_env import RuntimeEnv
from ray.train import RunConfig
from ray.train.torch import TorchTrainer


def train_func(config):
    import torch

    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()


run = RunConfig(worker_runtime_env=RuntimeEnv(env_vars=dict(XLA_USE_BF16="1")))
TorchTrainer(train_func, run_config=run).fit()
"""
    document = rewrite_json(tmp_path, {"train_ray.py": launcher}, "full-bf16")
    assert diff_of(document, "train_ray.py") == ""
    ((code, message),) = remaining(document)
    assert code == "XM301"
    assert "Ray Train passes it to Ray Train's worker processes" in message
    assert "(a launch xlamigrate cannot follow)" in message


def test_a_worker_function_from_another_module_is_not_followed(tmp_path: Path) -> None:
    launcher = """\
import ray
from ray.train.torch import TorchTrainer
from worker import train_func

ray.init(runtime_env={"env_vars": {"XLA_USE_BF16": "1"}})
TorchTrainer(train_func).fit()
"""
    document = rewrite_json(tmp_path, {"launch.py": launcher}, "full-bf16")
    assert diff_of(document, "launch.py") == ""
    assert [code for code, _ in remaining(document)] == ["XM301"]


def test_an_entry_point_in_s3_is_no_file_of_this_project(tmp_path: Path) -> None:
    launcher = """\
from sagemaker.pytorch import PyTorch

PyTorch(
    entry_point="train.py",
    source_dir="s3://bucket/code.tar.gz",
    environment={"XLA_USE_BF16": "1"},
).fit()
"""
    document = rewrite_json(tmp_path, {"job.py": launcher, "train.py": TRAIN}, "full-bf16")
    assert diff_of(document, "job.py") == diff_of(document, "train.py") == ""
    ((code, message),) = remaining(document)
    assert code == "XM101"
    assert "which is not a Python file of this project" in message


def test_a_metaflow_step_takes_the_recipe_where_it_starts(tmp_path: Path) -> None:
    flow = """\
from metaflow import FlowSpec, environment, step


class TrainFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.train)

    @environment(vars={"XLA_USE_BF16": "1"})
    @step
    def train(self):
        \"\"\"Trains on one trn1 instance.\"\"\"
        import torch
        import torch_xla

        model = torch.nn.Linear(4, 4).to(torch_xla.device())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = model(torch.ones(2, 4, device="xla")).sum()
        loss.backward()
        optimizer.step()
        self.next(self.end)

    @step
    def end(self):
        pass
"""
    document = rewrite_json(tmp_path, {"flow.py": flow}, "autocast")
    diff = diff_of(document, "flow.py")
    assert '-    @environment(vars={"XLA_USE_BF16": "1"})' in diff
    assert '+    @environment(vars={"BF16_RECIPE": "1"})' in diff
    assert "+# Set by flow.py where it used to set XLA_USE_BF16, in the processes that run" in diff
    assert "         import torch_xla\n+        if bf16_recipe():\n" in diff  # (after its imports)
    assert "+import torch\n" not in diff  # the step imports it itself: a top one is unused
    assert "enabled=bf16_recipe()" in diff
    assert remaining(document) == []
