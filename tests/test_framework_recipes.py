"""Recipes in a framework's own terms: an optimizer factory names the model (neuronx-distributed),
ZeRO-1's master shards take the recipe's dtype, a framework that owns the training step is named
where the recipe cannot be placed, and an added keyword keeps the call's layout. The whole
projects are tests/fixtures/projects/{nxd_parallel_model,zero1_launcher}; these are the edges."""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest

from tests.test_cli import run_cli, write_files
from xlamigrate.kinds.python.training import TrainingScript, keyword_added

NXD_PIPELINE = """\
import os

import neuronx_distributed as nxd
import torch
from training_utils import get_param_groups_by_weight_decay


def train(args, nxd_config, get_model):
    model = nxd.initialize_parallel_model(nxd_config, get_model, True, args)
    param_groups = get_param_groups_by_weight_decay(model)
    optimizer = nxd.initialize_parallel_optimizer(nxd_config, torch.optim.AdamW, param_groups)
    for batch in range(3):
        loss = model(batch)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    os.environ["XLA_DOWNCAST_BF16"] = "1"
    train(None, None, None)
"""

NXD_PIPELINE_STEP = """\
import os

import neuronx_distributed as nxd
import torch


def train(args, nxd_config, get_model, batches):
    model = nxd.initialize_parallel_model(nxd_config, get_model, True, args)
    optimizer = nxd.initialize_parallel_optimizer(nxd_config, torch.optim.AdamW, model.parameters())
    for batch in batches:
        loss = model.run_train(input_ids=batch)
        optimizer.step()


if __name__ == "__main__":
    if os.environ.get("PRECISION") == "bf16":
        os.environ["XLA_USE_BF16"] = "1"
    train(None, None, None, [])
"""

LIGHTNING = """\
import os

from lightning.pytorch.trainer.trainer import Trainer
from module import LitModule

if __name__ == "__main__":
    os.environ["XLA_USE_BF16"] = "1"
    Trainer(max_steps=10).fit(LitModule())
"""

ZERO1_BF16_SHARDS = """\
import os

import torch
from torch_xla.distributed.zero_redundancy_optimizer import ZeroRedundancyOptimizer

os.environ["XLA_USE_BF16"] = "1"
model = torch.nn.Linear(4, 4).to("xla")
optimizer = ZeroRedundancyOptimizer(
    model.parameters(), torch.optim.AdamW, optimizer_dtype=torch.bfloat16, lr=0.1
)
for _ in range(2):
    loss = model(torch.ones(2, 4, device="xla")).sum()
    loss.backward()
    optimizer.step()
"""


def rewrite_json(tmp_path: Path, files: dict[str, str], mode: str) -> dict[str, object]:
    write_files(tmp_path, files)
    result = run_cli(
        "rewrite", "--mode", mode, "--diff", "--format", "json", "--ignore", "XM5,XM409", ".",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    document: dict[str, object] = json.loads(result.stdout)
    return document


def remaining(document: dict[str, object]) -> list[tuple[str, str]]:
    files = document["files"]
    assert isinstance(files, list)
    return [(f["code"], f["message"]) for file in files for f in file["remaining"]]


def diff_of(document: dict[str, object], path: str) -> str:
    files = document["files"]
    assert isinstance(files, list)
    return "".join(file.get("diff", "") for file in files if file["path"] == path)


@pytest.mark.parametrize("mode", ["full-bf16", "fp32-copy"])
def test_a_model_built_by_nxd_is_found_through_the_projects_param_group_helper(
    tmp_path: Path, mode: str
) -> None:
    document = rewrite_json(tmp_path, {"train.py": NXD_PIPELINE}, mode)
    diff = diff_of(document, "train.py")
    assert "XM401" not in [code for code, _ in remaining(document)]
    if mode == "full-bf16":
        assert "+        model.to(torch.bfloat16)" in diff
        assert "optimizer_dtype" not in diff  # ZeRO-1 is not known to be on
    else:  # no literal turns ZeRO-1 on: NxD's own knob, by hand, and the write stays
        messages = [message for code, message in remaining(document) if code == "XM408"]
        assert messages and "mixed_precision_config" in messages[0]
        assert "use_master_weights" in messages[0]
        assert diff == ""


def test_autocast_goes_around_a_pipeline_models_training_step(tmp_path: Path) -> None:
    """NxD pipeline parallel runs forward and backward in `model.run_train(...)`: the recipe's
    autocast goes around that call (it reads the autocast state when it starts)."""
    document = rewrite_json(tmp_path, {"train.py": NXD_PIPELINE_STEP}, "autocast")
    diff = diff_of(document, "train.py")
    assert '+        with torch.autocast(dtype=torch.bfloat16, device_type="xla", enabled=' in diff
    assert "+            loss = model.run_train(input_ids=batch)" in diff
    assert [code for code, _ in remaining(document) if code.startswith("XM40")] == []


def test_a_lightning_script_is_told_where_lightning_takes_the_recipe(tmp_path: Path) -> None:
    document = rewrite_json(tmp_path, {"train.py": LIGHTNING}, "full-bf16")
    messages = [message for code, message in remaining(document) if code == "XM401"]
    assert len(messages) == 1
    assert "Lightning's `Trainer`" in messages[0]
    assert "configure_model()" in messages[0]
    assert diff_of(document, "train.py") == ""  # the write stays: the recipe is not in


def test_fp32_copy_refuses_zero1_shards_the_script_makes_bf16(tmp_path: Path) -> None:
    document = rewrite_json(tmp_path, {"train.py": ZERO1_BF16_SHARDS}, "fp32-copy")
    messages = [message for code, message in remaining(document) if code == "XM408"]
    assert len(messages) == 1 and "optimizer_dtype=torch.bfloat16" in messages[0]
    assert diff_of(document, "train.py") == ""


def test_full_bf16_leaves_the_scripts_own_shard_dtype(tmp_path: Path) -> None:
    document = rewrite_json(tmp_path, {"train.py": ZERO1_BF16_SHARDS}, "full-bf16")
    diff = diff_of(document, "train.py")
    assert "optimizer_dtype=torch.bfloat16, lr=0.1" in diff  # as written, not changed
    assert "-os.environ" in diff


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("f()", "f(k=1)"),
        ("f(a, b=2)", "f(a, b=2, k=1)"),
        ("f(a, b=2,)", "f(a, b=2, k=1,)"),
        (
            """\
            if x:
                o = f(
                    a,
                    b=2,  # keep
                )
            """,
            "f(\n    a,\n    b=2,  # keep\n    k=1,\n)",
        ),
        (
            """\
            o = f(
                a,
                b=2
            )
            """,
            "f(\n    a,\n    b=2,\n    k=1\n)",
        ),
    ],
)
def test_an_added_keyword_keeps_the_calls_layout(code: str, expected: str) -> None:
    source = textwrap.dedent(code)
    script = TrainingScript(ast.parse(source), source)
    call = next(c for c in script.calls() if script.code(c.func) == "f")
    assert keyword_added(script, call, "k=1") == expected
