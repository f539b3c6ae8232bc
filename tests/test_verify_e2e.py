"""`xlamigrate verify` from the command line on real torch-xla (PJRT_DEVICE=CPU).

Every runnable fixture is verified in all three modes (each verify runs the legacy original and
the three rewrites); deliberately broken rewrites, given with --rewritten, must come out failed
or divergent for the right reason. Each verify is one subprocess, so torch-xla never loads in
pytest's process.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import snapshots
from tests.conftest import needs_torch_xla_platform
from tests.test_rewrite_e2e import GATED, PARAM_DTYPE, RUNNABLE, clean_env
from xlamigrate.kinds.python.rewrite import MODES

# Fewer steps than most fixtures run, so both ways a run ends are covered: stopped by verify
# (stopped_at_limit) and finished by the script itself (the 8-step token LM).
pytestmark = needs_torch_xla_platform

STEPS = 10
LEGACY_WRITE = 'os.environ["XLA_USE_BF16"] = "1"\n'


def verify(
    script: Path,
    *options: str,
    cwd: Path | None = None,
    timeout: int = 400,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", "verify", str(script), *options],
        cwd=cwd or script.parent, env={**clean_env(), **(env or {})}, capture_output=True,
        text=True, timeout=timeout,
    )  # fmt: skip


def verify_json(script: Path, *options: str) -> tuple[int, dict[str, Any], str]:
    result = verify(script, "--format", "json", *options)
    try:
        document = json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"exit {result.returncode}, no JSON:\n{result.stdout}\n{result.stderr}")
    return result.returncode, document, result.stderr


def copy_fixture(tmp_path: Path, case: str, name: str) -> Path:
    """The fixture case's input (the legacy original), as `name` in tmp_path."""
    target = tmp_path / name
    shutil.copyfile(snapshots.case_input(case), target)
    return target


# -- every runnable fixture, all three modes -------------------------------------------------


@pytest.fixture(scope="module")
def fixture_verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    verdicts = {}
    for case, args in RUNNABLE.items():
        folder = tmp_path_factory.mktemp(case)
        script = copy_fixture(folder, case, "train.py")
        before = script.read_bytes()
        options = ["--mode", "all", "--steps", str(STEPS), *(["--", *args] if args else [])]
        code, document, stderr = verify_json(script, *options)
        verdicts[case] = {
            "code": code,
            "document": document,
            "stderr": stderr,
            "untouched": script.read_bytes() == before and sorted(folder.iterdir()) == [script],
        }
    return verdicts


@pytest.mark.parametrize("case", RUNNABLE)
def test_verify_finds_every_mode_of_a_runnable_fixture_equivalent(
    fixture_verdicts: dict[str, Any], case: str
) -> None:
    verdict = fixture_verdicts[case]
    document = verdict["document"]
    assert verdict["code"] == 0, json.dumps(document, indent=1)
    assert document["equivalent"] is True
    assert [c["mode"] for c in document["comparisons"]] == list(MODES)
    for comparison in document["comparisons"]:
        assert comparison["verdict"] == "equivalent", comparison
        assert [check["name"] for check in comparison["checks"]] == [
            "runs", "steps", "flags", "dtypes", "mechanism", "census", "losses"
        ]  # fmt: skip
        assert comparison["max_gap"] < document["rtol"]
    # the census saw the whole model on the device, as each run stored it
    for label, run in document["runs"].items():
        kinds = {entry["kind"] for entry in run["census"]["tensors"]}
        assert "parameter" in kinds, label
    # the mechanism really was in place: autocast around every forward, never around backward
    autocast = document["runs"]["autocast"]["mechanism"]
    assert autocast["backwards"] > 0
    assert autocast["backwards_after_autocast_forward"] == autocast["backwards"]
    assert autocast["backwards_in_autocast"] == 0
    assert document["runs"]["full-bf16"]["flags"]["NEURON_RT_STOCHASTIC_ROUNDING_EN"] == "1"
    assert "3 equivalent, 0 divergent, 0 failed" in verdict["stderr"]


@pytest.mark.parametrize("case", RUNNABLE)
def test_verify_runs_the_original_with_its_legacy_flag_and_rewrites_in_the_mode_dtypes(
    fixture_verdicts: dict[str, Any], case: str
) -> None:
    runs = fixture_verdicts[case]["document"]["runs"]
    legacy = fixture_verdicts[case]["document"]["legacy_flags"]
    assert legacy in (["XLA_USE_BF16=1"], ["XLA_DOWNCAST_BF16=1"])
    assert runs["original"]["dtypes"]["params"].keys() == {"torch.float32"}  # as the flag hid it
    for mode in MODES:
        assert runs[mode]["flags"]["XLA_USE_BF16"] is None
        assert runs[mode]["flags"]["XLA_DOWNCAST_BF16"] is None
        assert runs[mode]["dtypes"]["params"].keys() == {PARAM_DTYPE[mode]}
        assert runs[mode]["devices"].keys() == {"xla"}
    assert runs["fp32-copy"]["dtypes"]["masters"].keys() == {"torch.float32"}
    steps = {label: run["steps"] for label, run in runs.items()}
    assert len(set(steps.values())) == 1 and 0 < steps["original"] <= STEPS


def test_verify_stops_runs_at_the_step_limit_or_lets_them_finish(
    fixture_verdicts: dict[str, Any],
) -> None:
    stopped = {
        case: verdict["document"]["runs"]["original"]["stopped_at_limit"]
        for case, verdict in fixture_verdicts.items()
    }
    assert stopped["token_lm_adamw_scheduler"] is False  # the script trains 8 steps
    assert stopped["flag_at_top_float_mlp"] is True  # 12 steps, stopped at 10


def test_verify_leaves_the_users_script_and_folder_untouched(
    fixture_verdicts: dict[str, Any],
) -> None:
    assert all(verdict["untouched"] for verdict in fixture_verdicts.values())


# -- broken rewrites --------------------------------------------------------------------------


def broken(tmp_path: Path, mode: str, case: str, old: str, new: str) -> Path:
    text = snapshots.rewritten(case, mode).decode()
    assert text.count(old) == 1, old
    path = tmp_path / "broken.py"
    path.write_text(text.replace(old, new))
    return path


def test_a_model_cast_without_input_handling_is_reported_failed_with_the_crash(
    tmp_path: Path,
) -> None:
    original = copy_fixture(tmp_path, "flag_at_top_float_mlp", "train.py")
    rewrite = broken(
        tmp_path,
        "full-bf16",
        "flag_at_top_float_mlp",
        "cast_inputs_to_module_dtype(model, output_dtype=torch.float32)\n",
        "",
    )
    result = verify(original, "--rewritten", str(rewrite), "--mode", "full-bf16", "--steps", "4")
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "full-bf16: FAILED: the rewrite crashed (exit code 1) on mixed dtypes" in out
    assert "cast_inputs_to_module_dtype" in out
    assert "mixed precision is disallowed" in out  # the tail of the run's stderr
    # The rewrite runs as a copy named like the script, in a temporary folder it does not show.
    assert 'File "<full-bf16>/train.py", line 28' in out
    assert "xlamigrate-verify-" not in out
    assert "0 equivalent, 0 divergent, 1 failed" in result.stderr


def test_a_rewrite_in_the_wrong_dtype_is_reported_failed(tmp_path: Path) -> None:
    original = copy_fixture(tmp_path, "flag_at_top_float_mlp", "train.py")
    rewrite = broken(
        tmp_path, "full-bf16", "flag_at_top_float_mlp", "model.to(torch.bfloat16)",
        "model.to(torch.float16)",
    )  # fmt: skip
    code, document, _ = verify_json(original, "--rewritten", str(rewrite), "--steps", "4")
    assert code == 1
    (comparison,) = document["comparisons"]
    assert comparison["verdict"] == "failed"
    assert comparison["reason"] == (
        "parameters are torch.float16 (4); full-bf16 promises torch.bfloat16"
    )


def test_a_rewrite_that_no_longer_learns_is_reported_divergent(tmp_path: Path) -> None:
    original = copy_fixture(tmp_path, "flag_at_top_float_mlp", "train.py")
    rewrite = broken(
        tmp_path, "full-bf16", "flag_at_top_float_mlp", "    optimizer.step()\n",
        "    optimizer.zero_grad()  # the gradients are gone before the step\n"
        "    optimizer.step()\n",
    )  # fmt: skip
    code, document, _ = verify_json(original, "--rewritten", str(rewrite), "-m", "full-bf16")
    assert code == 1
    (comparison,) = document["comparisons"]
    assert comparison["verdict"] == "divergent"
    assert comparison["first_divergence"] == 2
    assert comparison["reason"].startswith("the loss diverges at step 2:")
    assert comparison["max_gap"] > 1.0  # the original's loss falls 10x; this one barely moves


def test_fp32_copy_without_master_weights_is_reported_failed(tmp_path: Path) -> None:
    original = copy_fixture(tmp_path, "setdefault_cnn", "train.py")
    rewrite = broken(
        tmp_path, "fp32-copy", "setdefault_cnn",
        "FP32ParamsCopy(torch.optim.Adam(net.parameters(), lr=1e-2))",
        "torch.optim.Adam(net.parameters(), lr=1e-2)",
    )  # fmt: skip
    code, document, _ = verify_json(
        original, "--rewritten", str(rewrite), "-m", "fp32-copy", "--steps", "4"
    )
    assert code == 1
    assert document["comparisons"][0]["reason"] == (
        "the optimizer holds no master weights; fp32-copy keeps float32 master weights"
    )


AUTOCAST_REGION = 'torch.autocast(dtype=torch.bfloat16, device_type="xla")'
BROKEN_MECHANISMS = {
    # The region is gone: plain fp32, whose losses stay close to the legacy run's.
    "autocast without its region": (
        "autocast",
        f"with {AUTOCAST_REGION}:",
        "with contextlib.nullcontext():  # import contextlib below",
        "the model's forward pass ran outside a torch.autocast('xla', bf16) region before 4 of 4",
    ),
    "autocast around backward": (
        "autocast",
        "        loss = loss_fn(model(inputs), targets)\n    optimizer.zero_grad()\n"
        "    loss.backward()\n",
        "        loss = loss_fn(model(inputs), targets)\n        optimizer.zero_grad()\n"
        "        loss.backward()\n",
        "backward() ran inside the autocast region 4 of 4 times",
    ),
    "autocast without --auto-cast=none": (
        "autocast",
        ' + " --auto-cast=none"',
        "",
        "NEURON_CC_FLAGS is '' in the rewrite; autocast needs --auto-cast=none there",
    ),
    "full-bf16 without stochastic rounding": (
        "full-bf16",
        'os.environ["NEURON_RT_STOCHASTIC_ROUNDING_EN"] = "1"',
        "",
        "NEURON_RT_STOCHASTIC_ROUNDING_EN is unset in the rewrite; full-bf16 sets it to 1",
    ),
    "full-bf16 still setting the legacy flag": (
        "full-bf16",
        'os.environ["NEURON_RT_STOCHASTIC_ROUNDING_EN"] = "1"',
        'os.environ["NEURON_RT_STOCHASTIC_ROUNDING_EN"] = "1"\nos.environ["XLA_USE_BF16"] = "1"',
        "the rewrite still runs with XLA_USE_BF16=1",
    ),
}


@pytest.mark.parametrize("broken_case", BROKEN_MECHANISMS)
def test_a_rewrite_without_its_mechanism_fails_even_where_its_losses_match(
    tmp_path: Path, broken_case: str
) -> None:
    """An "autocast" rewrite that changed nothing ran in plain fp32 and was called equivalent:
    the verdict checks that the mode's mechanism was really active, not only the losses."""
    mode, old, new, reason = BROKEN_MECHANISMS[broken_case]
    original = copy_fixture(tmp_path, "flag_at_top_float_mlp", "train.py")
    rewrite = broken(tmp_path, mode, "flag_at_top_float_mlp", old, new)
    if "contextlib" in new:
        rewrite.write_text("import contextlib\n" + rewrite.read_text())
    options = ("--rewritten", str(rewrite), "-m", mode, "--steps", "4")
    code, document, _ = verify_json(original, *options)
    assert code == 1
    (comparison,) = document["comparisons"]
    assert comparison["verdict"] == "failed"
    assert comparison["reason"].startswith(reason), comparison["reason"]
    if broken_case == "full-bf16 without stochastic rounding":  # TPU has no such variable
        code, document, _ = verify_json(original, *options, "--target", "tpu")
        assert code == 0, json.dumps(document, indent=1)


# -- an original that is no reference --------------------------------------------------------


def test_an_original_with_nan_losses_is_named_diverged_and_the_rewrites_judged_alone(
    tmp_path: Path,
) -> None:
    """Under XLA_USE_BF16 float32's minimum becomes -inf and the mask's 0 * -inf NaN: the
    legacy run is NaN from step 1. Each rewrite was called "DIVERGENT at step 1: x vs nan"."""
    original = copy_fixture(tmp_path, "masked_pool_nan_original", "t.py")
    code, document, stderr = verify_json(original, "--mode", "all", "--steps", "6")
    assert code == 0, json.dumps(document, indent=1)
    assert document["reference_problem"] == "the original's loss is nan at step 1: it diverged"
    assert document["runs"]["original"]["losses"] == ["nan"] * 6
    assert [c["verdict"] for c in document["comparisons"]] == ["trains"] * 3
    for comparison in document["comparisons"]:
        assert "judged on its own, the rewrite trains" in comparison["reason"]
    assert "0 equivalent, 3 trains, 0 divergent, 0 failed" in stderr


# -- where the flag comes from ----------------------------------------------------------------


def test_a_gated_flag_left_off_compares_float32_runs_and_says_so(tmp_path: Path) -> None:
    """Without --bf16 both runs train in float32: the rewrite keeps its promise (it stays
    float32), but that verifies nothing about the migration (issue 33, item 7): not verified,
    exit 1, with the option to pass."""
    original = copy_fixture(tmp_path, GATED, "train.py")
    code, document, _ = verify_json(original, "-m", "full-bf16", "--steps", "4")
    assert code == 1, json.dumps(document, indent=1)
    assert document["legacy_flags"] == []
    assert document["runs"]["full-bf16"]["dtypes"]["params"].keys() == {"torch.float32"}
    assert any("ran without a legacy flag on" in note for note in document["notes"])
    (comparison,) = document["comparisons"]
    assert comparison["verdict"] == "not verified"
    assert all(check["passed"] for check in comparison["checks"][:-1])  # float32, as before
    assert "give the script the options that set the flag after `--`" in comparison["reason"]


def test_legacy_env_sets_a_launchers_flag_for_the_original_only(tmp_path: Path) -> None:
    """A script whose launcher set the flag: the script itself has nothing to rewrite, so the
    unchanged copy trains in fp32 and fails the mode's promise; the hand-migrated one passes."""
    text = snapshots.case_input("flag_at_top_float_mlp").read_text()
    assert text.count(LEGACY_WRITE) == 1
    script = tmp_path / "train.py"
    script.write_text(text.replace(LEGACY_WRITE, ""))
    legacy = ("--legacy-env", "XLA_USE_BF16=1", "-m", "full-bf16", "--steps", "4")

    code, document, _ = verify_json(script, *legacy)
    assert code == 1
    assert document["legacy_flags"] == ["XLA_USE_BF16=1"]
    assert document["runs"]["full-bf16"]["flags"]["XLA_USE_BF16"] is None
    assert document["comparisons"][0]["reason"] == (
        "parameters are torch.float32 (4); full-bf16 promises torch.bfloat16"
    )
    # (its rewrite migrates xm.xla_device()/xm.mark_step(), not its precision: issue 33 item 7)
    assert any(
        "changes only torch-xla API calls in this script" in note for note in document["notes"]
    )

    migrated = tmp_path / "new.py"
    migrated.write_bytes(snapshots.rewritten("flag_at_top_float_mlp", "full-bf16"))
    code, document, _ = verify_json(script, *legacy, "--rewritten", str(migrated))
    assert code == 0, json.dumps(document, indent=1)


# -- what the user sees -----------------------------------------------------------------------


def test_text_output_and_plot_of_a_passing_verify(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    original = copy_fixture(tmp_path, "train_loop_fn_mark_step", "t.py")
    chart = tmp_path / "chart.png"
    result = verify(original, "-m", "autocast", "--steps", "6", "--plot", str(chart))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "xlamigrate verify t.py: original ran with XLA_USE_BF16=1"
    rows = {line.split()[0]: line.split() for line in lines if line.split()}
    assert rows["original"][1] == "6" and rows["original"][-1] == "reference"
    # weights+grads+optimizer bytes per parameter (plain SGD keeps no state): the legacy run's
    # "float32" weights and gradients are stored in bf16, autocast's in fp32
    assert rows["original"][3] == "fp32" and rows["original"][5] == "2+2+0"
    assert rows["autocast"][3:6] == ["fp32", "-", "4+4+0"]
    assert rows["autocast"][-1] == "equivalent"
    assert "loss per optimizer step: O original  A autocast  * overlap" in result.stdout
    assert "autocast: EQUIVALENT: losses agree within 5.00% over 6 steps" in result.stdout
    assert chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert f"wrote {chart}" in result.stderr


def test_a_script_that_needs_arguments_is_told_how_to_pass_them(tmp_path: Path) -> None:
    script = tmp_path / "needs_args.py"
    script.write_text(
        "import argparse\nparser = argparse.ArgumentParser()\n"
        'parser.add_argument("--data", required=True)\nparser.parse_args()\n'
    )
    code, document, _ = verify_json(script, "--steps", "2")
    assert code == 1
    assert document["comparisons"][0]["reason"].startswith(
        "the original exited with a usage error: the script needs command-line arguments; "
        "give them after `--`"
    )
    assert "required: --data" in document["runs"]["original"]["stderr_tail"]


def test_a_script_missing_its_data_names_the_file(tmp_path: Path) -> None:
    script = tmp_path / "reads_data.py"
    script.write_text('import torch\nbatches = torch.load("data/train.pt")\n')
    code, document, _ = verify_json(script, "--steps", "2")
    assert code == 1
    reason = document["comparisons"][0]["reason"]
    assert "could not find a file it reads (data/train.pt)" in reason
