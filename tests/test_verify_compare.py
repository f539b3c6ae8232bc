"""`xlamigrate verify`'s judgement without running anything: smoothing, the loss tolerance, the
dtype promises of each mode, failure diagnoses, and what the report prints."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from xlamigrate.catalogue import load_catalogue
from xlamigrate.verify.compare import (
    DIVERGENT,
    EQUIVALENT,
    FAILED,
    NOT_VERIFIED,
    RTOL,
    TRAINS,
    compare,
    not_verified,
    reference_problem,
    relative_gaps,
    smooth,
)
from xlamigrate.verify.render import loss_plot, render_json, render_text
from xlamigrate.verify.runs import RunResult, diagnose, legacy_flags_on
from xlamigrate.verify.verifier import ORIGINAL, VerifyOptions, VerifyReport

MODES = load_catalogue().modes
LEGACY_LOSSES = (3.484375, 1.8671875, 1.6328125, 0.71484375, 0.54296875, 0.25, 0.12109375)
# flag_at_top_float_mlp's full-bf16 rewrite as measured: 4.9% off the legacy run at step 7.
REWRITE_LOSSES = (3.4775, 1.8809, 1.6062, 0.7151, 0.5444, 0.2520, 0.1270)
BF16 = {"params": {"torch.bfloat16": 4}, "state": {"torch.bfloat16": 4}, "masters": {}}
BF16_WITH_MASTERS = {"params": {"torch.bfloat16": 4}, "masters": {"torch.float32": 4}}
FP32 = {"params": {"torch.float32": 4}, "state": {"torch.float32": 4}, "masters": {}}


def run_result(
    label: str = "full-bf16",
    losses: tuple[float | None, ...] = REWRITE_LOSSES,
    dtypes: dict[str, dict[str, int]] | None = None,
    problem: str | None = None,
    returncode: int | None = 0,
) -> RunResult:
    return RunResult(
        label=label,
        returncode=returncode,
        losses=losses,
        stopped_at_limit=True,
        dtypes=BF16 if dtypes is None else dtypes,
        flags={"XLA_USE_BF16": "1"} if label == ORIGINAL else {},
        problem=problem,
    )


ORIGINAL_RUN = run_result(ORIGINAL, LEGACY_LOSSES, FP32)


# -- smoothing and gaps ---------------------------------------------------------------------------


def test_smooth_is_a_trailing_mean_over_the_window() -> None:
    assert smooth([1.0, 2.0, 3.0, 4.0], window=2) == [1.0, 1.5, 2.5, 3.5]
    assert smooth([4.0, 2.0], window=5) == [4.0, 3.0]


def test_relative_gaps_compare_smoothed_curves() -> None:
    gaps = relative_gaps([1.0, 1.0, 1.0], [1.0, 1.3, 1.0], window=3)
    assert gaps == pytest.approx([0.0, 0.15, 0.1])


def test_a_non_finite_rewrite_loss_is_an_infinite_gap() -> None:
    assert relative_gaps([1.0, 1.0], [1.0, math.nan], window=1) == [0.0, math.inf]
    assert relative_gaps([1.0, 1.0], [1.0, math.inf], window=1) == [0.0, math.inf]


def test_window_5_absorbs_the_measured_bf16_noise_that_one_step_shows() -> None:
    """The unsmoothed gap of this measured pair reaches 4.9%; smoothed it stays near 1%."""
    assert max(relative_gaps(LEGACY_LOSSES, REWRITE_LOSSES, window=1)) > 0.045
    assert max(relative_gaps(LEGACY_LOSSES, REWRITE_LOSSES, window=5)) < 0.02


# -- verdicts -------------------------------------------------------------------------------------


def test_matching_curves_and_promised_dtypes_are_equivalent() -> None:
    result = compare(ORIGINAL_RUN, run_result(), MODES["full-bf16"], legacy_on=True)
    assert result.verdict == EQUIVALENT
    assert [check.name for check in result.checks] == [
        "runs", "steps", "flags", "dtypes", "mechanism", "losses"
    ]  # fmt: skip
    assert all(check.passed for check in result.checks)
    assert result.max_gap is not None and result.max_gap < RTOL


def test_first_divergent_step_is_reported() -> None:
    flat = tuple(3.48 for _ in LEGACY_LOSSES)  # the loss never falls: training stopped
    result = compare(ORIGINAL_RUN, run_result(losses=flat), MODES["full-bf16"], legacy_on=True)
    assert result.verdict == DIVERGENT
    assert result.first_divergence == 2  # mean(3.48, 3.48) vs mean(3.48, 1.87): 30% apart
    assert "diverges at step 2" in result.reason
    assert "tolerance 5.00%" in result.reason


def test_nan_loss_in_the_rewrite_diverges_at_that_step() -> None:
    losses = (*REWRITE_LOSSES[:4], math.nan, *REWRITE_LOSSES[5:])
    result = compare(
        ORIGINAL_RUN,
        run_result(losses=losses),
        MODES["autocast"],
        legacy_on=True,
    )
    assert result.verdict == FAILED  # autocast promises fp32 params; BF16 given
    result = compare(
        ORIGINAL_RUN, run_result(losses=losses, dtypes=FP32), MODES["autocast"], legacy_on=True
    )
    assert result.verdict == DIVERGENT
    assert result.first_divergence == 5


def test_rtol_is_the_callers_choice() -> None:
    strict = compare(ORIGINAL_RUN, run_result(), MODES["full-bf16"], True, rtol=0.001)
    assert strict.verdict == DIVERGENT


@pytest.mark.parametrize(
    ("mode", "dtypes", "expected"),
    [
        ("full-bf16", {"params": {"torch.float16": 4}}, "parameters are torch.float16 (4); "
         "full-bf16 promises torch.bfloat16"),
        ("full-bf16", FP32, "full-bf16 promises torch.bfloat16"),
        ("autocast", BF16, "autocast promises torch.float32"),
        ("fp32-copy", BF16, "the optimizer holds no master weights; fp32-copy keeps float32"),
        ("fp32-copy", {"params": {"torch.bfloat16": 4}, "masters": {"torch.bfloat16": 4}},
         "master weights in torch.bfloat16 (4)"),
        ("full-bf16", {"params": {"torch.bfloat16": 3, "torch.float32": 1}},
         "parameters are torch.bfloat16 (3), torch.float32 (1)"),
    ],
)  # fmt: skip
def test_dtypes_other_than_the_mode_promises_fail(
    mode: str, dtypes: dict[str, dict[str, int]], expected: str
) -> None:
    result = compare(ORIGINAL_RUN, run_result(mode, dtypes=dtypes), MODES[mode], legacy_on=True)
    assert result.verdict == FAILED
    assert expected in result.reason
    assert result.checks[-1].name == "dtypes" and not result.checks[-1].passed


def test_fp32_copy_with_float32_masters_passes_the_dtype_check() -> None:
    rewrite = run_result("fp32-copy", dtypes=BF16_WITH_MASTERS)
    assert compare(ORIGINAL_RUN, rewrite, MODES["fp32-copy"], True).verdict == EQUIVALENT


def test_without_a_legacy_flag_the_rewrite_must_stay_float32() -> None:
    """A gated flag left off: the original trained in fp32, so a cast rewrite is wrong."""
    result = compare(ORIGINAL_RUN, run_result(), MODES["full-bf16"], legacy_on=False)
    assert result.verdict == FAILED
    assert "the original trained in float32" in result.reason
    fp32 = run_result(dtypes=FP32)
    assert compare(ORIGINAL_RUN, fp32, MODES["full-bf16"], legacy_on=False).verdict == EQUIVALENT


def test_a_failed_run_fails_the_comparison_with_its_problem() -> None:
    crashed = run_result(problem="crashed (exit code 1)", returncode=1, losses=())
    result = compare(ORIGINAL_RUN, crashed, MODES["full-bf16"], True)
    assert (result.verdict, result.reason) == (FAILED, "the rewrite crashed (exit code 1)")


# -- an original that is no reference -------------------------------------------------------------

NAN_LOSSES = (math.nan,) * len(LEGACY_LOSSES)


def test_an_original_that_did_not_finish_leaves_the_rewrite_judged_on_its_own() -> None:
    timed_out = run_result(ORIGINAL, losses=(), problem="did not finish", returncode=None)
    result = compare(timed_out, run_result(), MODES["full-bf16"], True)
    assert result.verdict == TRAINS
    assert result.reason.startswith(
        "the original did not finish; judged on its own, the rewrite trains: its loss is finite"
        " and falls from "
    )


def test_an_original_with_nan_losses_is_no_reference_and_a_finite_rewrite_trains() -> None:
    """A T5-style mask (float32's minimum, -inf in bf16, times 0) gives NaN at every step under
    the legacy flag; all three rewrites train. They were called "DIVERGENT at step 1"."""
    diverged = run_result(ORIGINAL, NAN_LOSSES, FP32)
    assert reference_problem(diverged) == "the original's loss is nan at step 1: it diverged"
    result = compare(diverged, run_result(), MODES["full-bf16"], True)
    assert result.verdict == TRAINS
    assert [check.name for check in result.checks] == [
        "runs", "steps", "flags", "dtypes", "mechanism", "losses"
    ]  # fmt: skip


def test_judged_on_its_own_a_rewrite_must_still_keep_its_promises_and_learn() -> None:
    diverged = run_result(ORIGINAL, NAN_LOSSES, FP32)
    cases = {
        "nan too": (run_result(losses=NAN_LOSSES), "the rewrite's loss is nan at step 1 too"),
        "flat": (run_result(losses=(2.0,) * 7), "the rewrite's loss does not fall: 2 over"),
        "fp32": (run_result(dtypes=FP32), "parameters are torch.float32 (4); full-bf16 promises"),
        "one step": (run_result(losses=(1.0,)), "the rewrite recorded 1 usable steps"),
    }
    for name, (rewrite, reason) in cases.items():
        result = compare(diverged, rewrite, MODES["full-bf16"], True)
        assert result.verdict == FAILED, name
        assert result.reason.startswith(
            f"the original's loss is nan at step 1: it diverged; {reason}"
        )


def test_a_rewrite_that_stops_early_fails() -> None:
    short = run_result(losses=REWRITE_LOSSES[:3])
    result = compare(ORIGINAL_RUN, short, MODES["full-bf16"], True)
    assert result.verdict == FAILED
    assert "stopped after 3 optimizer steps; the original ran 7" in result.reason


def test_a_rewrite_that_still_sets_the_legacy_flag_fails() -> None:
    """A write left for manual work keeps the legacy path on: nothing was migrated yet."""
    kept = replace(run_result(), flags={"XLA_USE_BF16": "1"})
    result = compare(ORIGINAL_RUN, kept, MODES["autocast"], True)
    assert result.verdict == FAILED
    assert result.reason.startswith("the rewrite still runs with XLA_USE_BF16=1")


NEURON = {mode: MODES[mode].environment_on("neuron") for mode in MODES}
UNDER_AUTOCAST = {"backwards": 7, "backwards_after_autocast_forward": 7, "backwards_in_autocast": 0}
AUTOCAST_FLAGS = {"NEURON_CC_FLAGS": " --auto-cast=none"}


def autocast_run(mechanism: dict[str, int], flags: dict[str, str] | None = None) -> RunResult:
    return replace(
        run_result("autocast", dtypes=FP32),
        mechanism=mechanism,
        flags=AUTOCAST_FLAGS if flags is None else flags,
    )


def test_an_autocast_rewrite_whose_forward_runs_outside_autocast_fails() -> None:
    """The rewrite changed nothing (the flag came from a launcher): verify ran plain fp32 and
    called it equivalent, the losses being close."""
    idle = autocast_run({**UNDER_AUTOCAST, "backwards_after_autocast_forward": 0})
    result = compare(ORIGINAL_RUN, idle, MODES["autocast"], True, environment=NEURON["autocast"])
    assert result.verdict == FAILED
    assert result.reason.startswith(
        "the model's forward pass ran outside a torch.autocast('xla', bf16) region before 7 of 7"
    )
    assert [c.name for c in result.checks][-1] == "mechanism"


def test_an_autocast_region_around_backward_fails() -> None:
    around = autocast_run({**UNDER_AUTOCAST, "backwards_in_autocast": 7})
    result = compare(ORIGINAL_RUN, around, MODES["autocast"], True, environment=NEURON["autocast"])
    assert result.verdict == FAILED
    assert "backward() ran inside the autocast region 7 of 7 times" in result.reason


def test_autocast_without_auto_cast_none_fails_on_neuron_only() -> None:
    for flags, expected in (
        ({}, FAILED),
        ({"NEURON_CC_FLAGS": "--auto-cast=none --auto-cast=all"}, FAILED),
        (AUTOCAST_FLAGS, EQUIVALENT),
    ):
        run = autocast_run(UNDER_AUTOCAST, flags)
        result = compare(ORIGINAL_RUN, run, MODES["autocast"], True, environment=NEURON["autocast"])
        assert result.verdict == expected, (flags, result.reason)
    tpu = MODES["autocast"].environment_on("tpu")
    result = compare(
        ORIGINAL_RUN, autocast_run(UNDER_AUTOCAST, {}), MODES["autocast"], True, environment=tpu
    )
    assert result.verdict == EQUIVALENT


def test_full_bf16_without_stochastic_rounding_fails_on_neuron() -> None:
    rewrite = run_result()
    result = compare(
        ORIGINAL_RUN, rewrite, MODES["full-bf16"], True, environment=NEURON["full-bf16"]
    )
    assert result.verdict == FAILED
    assert result.reason.startswith("NEURON_RT_STOCHASTIC_ROUNDING_EN is unset in the rewrite")
    rounding = replace(rewrite, flags={"NEURON_RT_STOCHASTIC_ROUNDING_EN": "1"})
    passed = compare(
        ORIGINAL_RUN, rounding, MODES["full-bf16"], True, environment=NEURON["full-bf16"]
    )
    assert passed.verdict == EQUIVALENT


def test_fp32_copy_needs_a_master_for_every_parameter() -> None:
    half = run_result(
        "fp32-copy", dtypes={"params": {"torch.bfloat16": 4}, "masters": {"torch.float32": 2}}
    )
    result = compare(ORIGINAL_RUN, half, MODES["fp32-copy"], True)
    assert result.verdict == FAILED
    assert result.reason == (
        "the optimizer holds 2 float32 master weights for 4 parameters;"
        " fp32-copy keeps one for each"
    )


def test_an_autocast_region_where_the_original_had_no_flag_fails() -> None:
    fp32 = replace(ORIGINAL_RUN, flags={})
    active = autocast_run(UNDER_AUTOCAST)
    result = compare(fp32, active, MODES["autocast"], False, environment=NEURON["autocast"])
    assert result.verdict == FAILED
    assert "the rewrite autocasts where the original did not" in result.reason


def test_a_lost_loss_value_fails() -> None:
    lost = run_result(losses=(*REWRITE_LOSSES[:6], None))
    assert compare(ORIGINAL_RUN, lost, MODES["full-bf16"], True).verdict == FAILED


# -- diagnoses ------------------------------------------------------------------------------------


def test_diagnose_a_usage_error_points_at_the_double_dash() -> None:
    stderr = (
        "usage: train.py [-h] --data DATA\ntrain.py: error: the following arguments are required"
    )
    problem = diagnose(2, stderr, recorded=False, timeout=60)
    assert problem is not None and "after `--`" in problem


def test_diagnose_missing_data_names_the_path() -> None:
    stderr = "FileNotFoundError: [Errno 2] No such file or directory: 'data/train.pt'\n"
    problem = diagnose(1, stderr, recorded=False, timeout=60)
    assert problem is not None and "(data/train.pt)" in problem


def test_diagnose_a_missing_module() -> None:
    stderr = "ModuleNotFoundError: No module named 'transformers'\n"
    problem = diagnose(1, stderr, recorded=False, timeout=60)
    assert problem is not None and "'transformers'" in problem


def test_diagnose_a_dtype_mismatch_suggests_casting_inputs() -> None:
    stderr = "RuntimeError: mat1 and mat2 must have the same dtype, but got Float and BFloat16\n"
    problem = diagnose(1, stderr, recorded=True, timeout=60)
    assert problem is not None and "cast_inputs_to_module_dtype" in problem


def test_diagnose_timeout_crash_and_no_steps() -> None:
    assert "within 30 s" in (diagnose(None, "", recorded=False, timeout=30) or "")
    assert diagnose(-9, "Killed", recorded=True, timeout=30) == "crashed (exit code -9)"
    assert "without a single optimizer step" in (diagnose(0, "", False, 30) or "")
    assert diagnose(0, "warnings only", recorded=True, timeout=30) is None


@pytest.mark.parametrize(
    ("value", "on"),
    [("1", True), ("2", True), ("true", True), ("0", False), ("True", False), ("", False)],
)
def test_legacy_flags_on_follows_torch_xla(value: str, on: bool) -> None:
    assert bool(legacy_flags_on({"XLA_USE_BF16": value})) is on
    assert legacy_flags_on({"XLA_USE_BF16": None, "XLA_DOWNCAST_BF16": "1"}) == [
        "XLA_DOWNCAST_BF16=1"
    ]


# -- report ---------------------------------------------------------------------------------------


def report_of(*comparisons_for: str) -> VerifyReport:
    runs = {ORIGINAL: ORIGINAL_RUN}
    comparisons = []
    for mode in comparisons_for:
        runs[mode] = run_result(mode, dtypes=BF16_WITH_MASTERS if mode == "fp32-copy" else BF16)
        comparisons.append(compare(ORIGINAL_RUN, runs[mode], MODES[mode], True))
    return VerifyReport(
        script="train.py",
        options=VerifyOptions(modes=comparisons_for),
        rewrites=(),
        runs=runs,
        comparisons=tuple(comparisons),
        legacy_on=("XLA_USE_BF16=1",),
        notes=("a note",),
    )


def test_loss_plot_draws_each_run_with_its_letter() -> None:
    lines = loss_plot({ORIGINAL: [4.0, 2.0, 1.0], "full-bf16": [4.0, 3.0, 3.0]}, width=21, height=5)
    assert lines[0] == "4 |*"  # both start at 4: one cell, two runs
    grid = "\n".join(lines[:5])
    assert grid.count("O") == 2 and grid.count("F") == 2
    assert lines[4].startswith("1 |") and lines[4].rstrip().endswith("O")
    assert lines[-1] == "loss per optimizer step: O original  F full-bf16  * overlap"


def test_loss_plot_without_losses() -> None:
    assert loss_plot({ORIGINAL: []}) == ["(no losses recorded)"]


def test_text_report_has_the_table_the_verdicts_and_the_notes() -> None:
    text = render_text(report_of("full-bf16", "fp32-copy"))
    assert "original ran with XLA_USE_BF16=1" in text
    rows = {line.split()[0]: line for line in text.splitlines() if line.split()}
    assert "reference" in rows["original"] and " fp32 " in rows["original"]
    assert "equivalent" in rows["fp32-copy"] and " bf16 " in rows["fp32-copy"]
    assert "full-bf16: EQUIVALENT: losses agree within 5.00% over 7 steps" in text
    assert "note: a note" in text


def test_the_table_shows_memory_and_time_and_a_recommendation_follows() -> None:
    measured = {
        "full-bf16": ({"parameters": 10, "weights": 20, "grads": 20, "optimizer": 40}, 0.004),
        "fp32-copy": ({"parameters": 10, "weights": 20, "grads": 20, "optimizer": 120}, 0.006),
    }
    report = report_of(*measured)
    runs = {
        label: replace(run, memory=measured[label][0], seconds_per_step=measured[label][1],
                       peak_rss=900 * 2**20)
        if label in measured else run
        for label, run in report.runs.items()
    }  # fmt: skip
    report = replace(report, runs=runs)
    text = render_text(report)
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.split()}
    assert rows["fp32-copy"][5:8] == ["2+2+12", "900", "6.0"]
    assert rows["full-bf16"][5:8] == ["2+2+4", "900", "4.0"]
    assert (
        "recommendation: full-bf16 holds the least per parameter (8 B, against 16 B for"
        " fp32-copy); full-bf16 steps fastest (4.0 ms on this CPU)"
    ) in " ".join(text.split())
    document = json.loads(render_json(report))
    assert document["runs"]["fp32-copy"]["bytes_per_parameter"] == {
        "weights": 2.0, "grads": 2.0, "optimizer": 12.0
    }  # fmt: skip
    assert document["recommendation"].startswith("full-bf16 holds the least per parameter")


def test_json_report_round_trips_without_nan() -> None:
    report = report_of("autocast")
    document = json.loads(render_json(report))
    assert document["equivalent"] is False  # autocast given bf16 params
    assert document["comparisons"][0]["verdict"] == FAILED
    assert document["runs"][ORIGINAL]["losses"] == list(LEGACY_LOSSES)
    assert document["legacy_flags"] == ["XLA_USE_BF16=1"]


def test_json_writes_non_finite_numbers_as_strings(tmp_path: Path) -> None:
    losses = (*REWRITE_LOSSES[:6], math.inf)
    runs = {ORIGINAL: ORIGINAL_RUN, "full-bf16": run_result(losses=losses)}
    comparison = compare(ORIGINAL_RUN, runs["full-bf16"], MODES["full-bf16"], True)
    report = VerifyReport("t.py", VerifyOptions(("full-bf16",)), (), runs, (comparison,), (), ())
    document = json.loads(render_json(report))
    assert document["runs"]["full-bf16"]["losses"][-1] == "inf"
    assert document["comparisons"][0]["gaps"][-1] == "inf"
    assert document["comparisons"][0]["first_divergence"] == 7


def test_a_configuration_without_the_flag_must_launch_as_before() -> None:
    """`verify run.sh -- FP32`: the migrated launcher must start the very same commands."""
    fp32 = replace(ORIGINAL_RUN, flags={}, launches=("torchrun --nproc_per_node=2 train.py",))
    same = replace(run_result(dtypes=FP32), launches=fp32.launches)
    result = compare(fp32, same, MODES["full-bf16"], False)
    assert result.verdict == EQUIVALENT
    assert "launch" in [check.name for check in result.checks]
    other = replace(same, launches=("torchrun --nproc_per_node=2 train.py --bf16",))
    result = compare(fp32, other, MODES["full-bf16"], False)
    assert result.verdict == FAILED
    assert result.reason.startswith(
        "the migrated launcher starts `torchrun --nproc_per_node=2 train.py --bf16` where the"
        " original started `torchrun --nproc_per_node=2 train.py`"
    )


# -- the census: the whole device, not the optimizer (issue 33) -----------------------------------


def entry(name: str, element_type: str, kind: str = "parameter") -> dict[str, object]:
    return {"name": name, "group": name.split(".")[0], "kind": kind, "type": element_type,
            "elements": 8}  # fmt: skip


def device(*entries: dict[str, object], dots: dict[str, int] | None = None) -> dict[str, object]:
    """A run's census as the recorder writes it (census.take)."""
    graph = {"ops": {}, "dot": dots or {"bf16": 2}, "convolution": {}}
    return {"tensors": list(entries), "graph": graph, "step": 3, "seconds": 0.003}


LEGACY_DEVICE = device(
    entry("model.0.weight", "bf16"), entry("model.1.weight", "bf16"),
    entry("model.1.weight.grad", "bf16", "grad"), entry("ema.0.weight", "bf16"),
    entry("ema.1.weight", "bf16"), entry("running", "bf16", "buffer"),
    entry("optimizer.state[model.1.weight].exp_avg", "bf16", "state"),
    entry("inputs", "bf16", "tensor"),
)  # fmt: skip


def with_census(run: RunResult, *changes: tuple[str, str], dots: dict[str, int] | None = None,
                extra: tuple[dict[str, object], ...] = ()) -> RunResult:  # fmt: skip
    """`run` holding what the legacy run held, but for `changes` (name, element type)."""
    changed = dict(changes)
    tensors = [{**e, "type": changed.get(str(e["name"]), e["type"])}
               for e in LEGACY_DEVICE["tensors"]]  # type: ignore[attr-defined]  # fmt: skip
    return replace(run, census=device(*tensors, *extra, dots=dots))


CENSUS_ORIGINAL = replace(ORIGINAL_RUN, census=LEGACY_DEVICE)


def test_a_module_the_optimizer_does_not_hold_left_fp32_is_divergent_and_named() -> None:
    rewrite = with_census(run_result(), ("ema.0.weight", "f32"), ("ema.1.weight", "f32"))
    result = compare(CENSUS_ORIGINAL, rewrite, MODES["full-bf16"], legacy_on=True)
    assert result.verdict == DIVERGENT
    assert result.reason.startswith(
        "2 tensors the legacy run stored in bf16 are f32 in the rewrite: ema (2 tensors: "
        "ema.0.weight, ema.1.weight); the flag changed every tensor on the device"
    )
    assert [check.name for check in result.checks][-1] == "census"
    assert result.max_gap is not None  # the losses were still compared, for the table


def test_the_missed_tensors_are_grouped_under_their_module() -> None:
    """model.0 is wholly missed; model.1 is not, so model.0's own path names the group."""
    rewrite = with_census(run_result(), ("model.0.weight", "f32"), ("running", "f32"))
    result = compare(CENSUS_ORIGINAL, rewrite, MODES["full-bf16"], legacy_on=True)
    assert "model.0 (1 tensor: model.0.weight); running (1 tensor: running)" in result.reason


def test_a_census_as_the_legacy_run_stored_it_passes() -> None:
    result = compare(CENSUS_ORIGINAL, with_census(run_result()), MODES["full-bf16"], True)
    assert result.verdict == EQUIVALENT
    check = next(check for check in result.checks if check.name == "census")
    assert check.passed and check.detail == "8 tensors on the device as the legacy run stored them"


def test_inputs_and_optimizer_state_may_stay_f32_but_never_become_f64() -> None:
    """The recipes keep inputs fp32 until the model's input cast, and fp32-copy's (optionally
    full-bf16's) optimizer state in fp32; float64 is what DOWNCAST's trick becomes."""
    kept = with_census(
        run_result(), ("inputs", "f32"), ("optimizer.state[model.1.weight].exp_avg", "f32")
    )
    assert compare(CENSUS_ORIGINAL, kept, MODES["full-bf16"], True).verdict == EQUIVALENT
    wide = with_census(run_result(), ("inputs", "f64"))
    result = compare(CENSUS_ORIGINAL, wide, MODES["full-bf16"], True)
    assert result.verdict == DIVERGENT
    assert result.reason.startswith("1 tensor the legacy run stored in bf16 is f64 in the rewrite")


def test_autocast_keeps_the_model_f32_by_design_and_its_matmuls_must_run_bf16() -> None:
    everything = [str(e["name"]) for e in LEGACY_DEVICE["tensors"]]  # type: ignore[attr-defined]
    fp32 = with_census(run_result(dtypes=FP32), *((name, "f32") for name in everything))
    result = compare(CENSUS_ORIGINAL, fp32, MODES["autocast"], True)
    assert result.verdict == EQUIVALENT, result.reason
    check = next(check for check in result.checks if check.name == "census")
    assert "or wider by autocast's design (1 buffer, 1 grad, 4 parameters" in check.detail
    # a frozen module's forward left outside the autocast region: f32 dots in the step graph
    outside = replace(fp32, census={**fp32.census, "graph": {"dot": {"bf16": 2, "f32": 1}}})
    result = compare(CENSUS_ORIGINAL, outside, MODES["autocast"], True)
    assert result.verdict == DIVERGENT
    assert result.reason.startswith(
        "1 of the 3 matmuls (dot, convolution) of the rewrite's step graph run in float32 where "
        "the legacy run ran 0"
    )


def test_masters_have_no_legacy_counterpart_and_are_left_to_the_dtype_check() -> None:
    masters = (entry("optimizer.master[model.1.weight]", "f32", "master"),)
    rewrite = with_census(run_result(dtypes=BF16_WITH_MASTERS), extra=masters)
    assert compare(CENSUS_ORIGINAL, rewrite, MODES["fp32-copy"], True).verdict == EQUIVALENT


def test_no_census_no_census_check() -> None:
    """A run that ended before the census (or an old record) is compared as before."""
    result = compare(CENSUS_ORIGINAL, run_result(), MODES["full-bf16"], True)
    assert "census" not in [check.name for check in result.checks]


def test_the_table_shows_the_census_and_says_what_its_columns_are() -> None:
    report = report_of("full-bf16")
    runs = {ORIGINAL: CENSUS_ORIGINAL,
            "full-bf16": with_census(report.runs["full-bf16"], ("ema.0.weight", "f32"),
                                     dots={"bf16": 2, "f32": 1})}  # fmt: skip
    report = replace(report, runs=runs)
    text = render_text(report)
    rows = {line.split()[0]: line for line in text.splitlines() if line.split()}
    assert "8 bf16 " in rows["original"] and " 2 bf16 " in rows["original"]
    assert "7 bf16, 1 f32" in rows["full-bf16"] and "2 bf16, 1 f32" in rows["full-bf16"]
    assert "device: floating tensors on the XLA device after step 3, by the element type" in (
        " ".join(text.split())
    )
    assert json.loads(render_json(report))["runs"]["full-bf16"]["census"]["step"] == 3


# -- an original in which no legacy flag took effect (issue 33, item 7) ----------------------------


def test_an_equivalent_float32_pair_is_not_verified() -> None:
    fp32 = replace(ORIGINAL_RUN, flags={})
    result = compare(fp32, run_result(dtypes=FP32), MODES["full-bf16"], False)
    assert result.verdict == EQUIVALENT
    unverified = not_verified(result, "try --legacy-env XLA_USE_BF16=1")
    assert unverified.verdict == NOT_VERIFIED
    assert unverified.reason.startswith("no legacy flag took effect in the original")
    assert unverified.reason.endswith("try --legacy-env XLA_USE_BF16=1")
    assert unverified.checks[-1].name == "reference" and not unverified.checks[-1].passed


def test_a_failure_without_the_flag_stays_a_failure() -> None:
    """A rewrite that casts where the float32 original did not is wrong, verified or not."""
    fp32 = replace(ORIGINAL_RUN, flags={})
    result = compare(fp32, run_result(), MODES["full-bf16"], False)
    assert not_verified(result, "hint").verdict == FAILED


def test_a_not_verified_report_fails_recommends_nothing_and_prints_the_verdict() -> None:
    fp32 = replace(ORIGINAL_RUN, flags={})
    rewrite = run_result(dtypes=FP32)
    comparison = not_verified(compare(fp32, rewrite, MODES["full-bf16"], False), "the hint")
    runs = {ORIGINAL: fp32, "full-bf16": rewrite}
    report = VerifyReport("t.py", VerifyOptions(("full-bf16",)), (), runs, (comparison,), (), ())
    assert not report.equivalent  # exit 1
    text = render_text(report)
    assert "original ran with no legacy flag on" in text
    assert "full-bf16: NOT VERIFIED: no legacy flag took effect" in text
    assert "recommendation" not in text
    rows = {line.split()[0]: line for line in text.splitlines() if line.split()}
    assert rows["full-bf16"].rstrip().endswith("not verified")


def evaluation(
    dots: dict[str, int], module: str = "model", site: str = "train.py:18"
) -> dict[str, object]:
    return {"module": module, "context": "no_grad", "site": site,
            "graph": {"ops": {}, "dot": dots, "convolution": {}}, "seconds": 0.01}  # fmt: skip


def test_an_evaluation_forward_wider_than_the_legacy_runs_is_divergent_and_named() -> None:
    """Issue 33 item 4: the step graph holds the training forward only; an evaluation under
    no_grad is noted on its own and compared by module and context."""
    original = replace(
        CENSUS_ORIGINAL, census={**LEGACY_DEVICE, "evaluations": [evaluation({"bf16": 2})]}
    )
    rewrite = with_census(run_result())
    outside = replace(rewrite, census={**rewrite.census, "evaluations": [evaluation({"f32": 2})]})
    result = compare(original, outside, MODES["full-bf16"], True)
    assert result.verdict == DIVERGENT
    assert result.reason.startswith(
        "the forward of model under no_grad at train.py:18 runs 2 of its 2 matmuls in float32 "
        "where the legacy run ran 0"
    )
    inside = replace(rewrite, census={**rewrite.census, "evaluations": [evaluation({"bf16": 2})]})
    result = compare(original, inside, MODES["full-bf16"], True)
    assert result.verdict == EQUIVALENT
    check = next(check for check in result.checks if check.name == "census")
    assert check.detail.endswith("; 1 forward outside training as well (model (no_grad))")
    # a forward only one run made (another module's name) is not compared
    other = replace(
        rewrite, census={**rewrite.census, "evaluations": [evaluation({"f32": 2}, "teacher")]}
    )
    assert compare(original, other, MODES["full-bf16"], True).verdict == EQUIVALENT


def test_a_flag_that_took_no_effect_is_seen_in_the_census() -> None:
    from xlamigrate.verify.compare import no_flag_effect

    assert not no_flag_effect(LEGACY_DEVICE)
    everything = list(LEGACY_DEVICE["tensors"])  # type: ignore[call-overload]
    assert no_flag_effect({"tensors": [{**e, "type": "f32"} for e in everything]})
    assert not no_flag_effect({"tensors": []})  # nothing to tell by
