"""The recorder shim `xlamigrate verify` loads into each run, on plain CPU torch (fast; the
torch-xla runs are in test_verify_e2e.py): what it counts as a step and a loss, when it stops
the process, and what it leaves alone."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from xlamigrate.verify.runs import RunResult, RunSpec, install_shim, run, run_environment

TRAIN = """
import sys
import torch
from xlamigrate_runtime import FP32ParamsCopy

torch.manual_seed(0)
model = torch.nn.Linear(4, 1).to(torch.bfloat16)
optimizer = FP32ParamsCopy(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
printed = []
for step in range({steps}):
    total = 0.0
    for micro in range(2):  # gradient accumulation: two backward passes per step
        x = torch.randn(8, 4, dtype=torch.bfloat16)
        loss = (model(x) - 1.0).float().pow(2).mean()
        loss.backward()
        total += loss.item()
    optimizer.step()
    optimizer.zero_grad()
    printed.append(total / 2)
    {after_step}
print(repr(printed))
"""
SAVE_PRINTED = "open('printed.json', 'w').write(repr(printed))"


def run_script(
    tmp_path: Path, text: str, steps: int = 0, extra_path: tuple[Path, ...] = ()
) -> RunResult:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(text))
    shim = install_shim(tmp_path / "shim")
    spec = RunSpec(
        label="original",
        script=script,
        args=(),
        cwd=tmp_path,
        env=run_environment(os.environ, [shim, *extra_path], {}),
        records=tmp_path / "records",
        steps=steps,
        timeout=120,
    )
    return run(spec)


def printed_losses(tmp_path: Path) -> list[float]:
    """The losses the script computed itself, as it saved them after its last full step."""
    values: list[float] = json.loads((tmp_path / "printed.json").read_text())
    return values


def test_one_loss_per_outer_step_averaged_over_accumulated_backwards(tmp_path: Path) -> None:
    after = SAVE_PRINTED
    result = run_script(tmp_path, TRAIN.format(steps=4, after_step=after))
    assert result.ok, result.stderr_tail
    assert len(result.losses) == 4  # the wrapper's inner SGD step is the same step
    assert not result.stopped_at_limit
    assert result.losses == pytest.approx(printed_losses(tmp_path), rel=1e-6)


def test_dtypes_of_params_state_and_masters_after_the_first_step(tmp_path: Path) -> None:
    result = run_script(tmp_path, TRAIN.format(steps=2, after_step="pass"))
    assert result.dtypes["params"] == {"torch.bfloat16": 2}
    assert result.dtypes["masters"] == {"torch.float32": 2}
    assert result.dtypes["state"] == {"torch.float32": 2}  # SGD momentum on the masters
    assert result.devices == {"cpu": 2}


def test_the_run_ends_after_the_step_limit(tmp_path: Path) -> None:
    after = SAVE_PRINTED
    result = run_script(tmp_path, TRAIN.format(steps=50, after_step=after), steps=3)
    assert result.ok and result.returncode == 0
    assert result.stopped_at_limit
    assert len(result.losses) == 3
    assert len(printed_losses(tmp_path)) == 2  # ended inside step 3's optimizer.step()


def test_a_crash_keeps_the_steps_before_it(tmp_path: Path) -> None:
    after = "if step == 1: raise RuntimeError('boom')"
    result = run_script(tmp_path, TRAIN.format(steps=5, after_step=after))
    assert result.returncode == 1
    assert len(result.losses) == 2
    assert "boom" in result.stderr_tail
    assert result.problem == "crashed (exit code 1)"


def test_a_script_without_torch_never_imports_it(tmp_path: Path) -> None:
    text = "import sys\nopen('modules.txt', 'w').write(str('torch' in sys.modules))\n"
    result = run_script(tmp_path, text)
    assert (tmp_path / "modules.txt").read_text() == "False"
    assert result.problem is not None and "without a single optimizer step" in result.problem


def test_the_environments_own_sitecustomize_still_runs(tmp_path: Path) -> None:
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['OWN_SITE'] = 'ran'\n")
    after = "open('site.txt', 'w').write(__import__('os').environ.get('OWN_SITE', 'missing'))"
    result = run_script(tmp_path, TRAIN.format(steps=1, after_step=after), extra_path=(own,))
    assert result.ok, result.stderr_tail
    assert (tmp_path / "site.txt").read_text() == "ran"


def test_the_legacy_flags_the_script_set_are_recorded(tmp_path: Path) -> None:
    text = "import os\nos.environ['XLA_DOWNCAST_BF16'] = '1'\n" + TRAIN.format(
        steps=1, after_step="pass"
    )
    result = run_script(tmp_path, text)
    assert result.flags["XLA_DOWNCAST_BF16"] == "1"
    assert result.flags["XLA_USE_BF16"] is None
    assert result.flags["PJRT_DEVICE"] == "CPU"
