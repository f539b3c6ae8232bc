"""A script's own precision path, behind an option its bf16 launches never pass, is not the
recipe: migrated projects run through their launchers on real torch-xla (PJRT_DEVICE=CPU).

tests/fixtures/projects/option_gated_autocast/before: `run_pretrain.sh [amp|bf16]`. amp passes
`--enable_pt_autocast` (the script's own `torch.autocast(enabled=args.enable_pt_autocast)`),
bf16 exports XLA_DOWNCAST_BF16=1 and passes nothing. The autocast rewrite used to take that
region for the recipe and leave the bf16 configuration in float32: the region's `enabled=` is
widened by the signal instead, and NEURON_CC_FLAGS gets `--auto-cast=none` once, after the
script's own reassignment.

tests/fixtures/projects/option_gated_own_cast/before: `run_train.sh [BF16|FP32]`. BF16 exports
XLA_USE_BF16=1 and passes `--bf16`, under which the script casts its model itself. The autocast
recipe keeps the model float32: that cast is turned off where the recipe is on.

Each run is a `bash` subprocess (tests/test_project_e2e.py's launch shims, recorder and probe),
two at a time.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, needs_torch_xla_platform
from tests.test_project_e2e import (
    AUTO_CAST_NONE,
    CC_FLAGS,
    LEGACY_FLAGS,
    SIGNAL,
    LaunchRun,
    Migration,
    checked,
    in_parallel,
    launch,
    make_tools,
    migrate,
    print_table,
)
from tests.test_rewrite_e2e import LEGACY_NOTICE, LOSS_RTOL
from xlamigrate.kinds.python.rewrite import MODES

pytestmark = [
    needs_torch_xla_platform,
    pytest.mark.skipif(shutil.which("bash") is None, reason="the launchers are bash scripts"),
]

PROJECTS = FIXTURES / "projects"
AUTOCAST_CASE = "option_gated_autocast"
OWN_CAST_CASE = "option_gated_own_cast"
# case -> (launcher, {variant: the configurations it runs}); "original" is the project as it was
CASES = {
    AUTOCAST_CASE: (
        "run_pretrain.sh",
        {"original": ("bf16", "amp"), "autocast": ("bf16", "amp"), "full-bf16": ("bf16",)},
    ),
    OWN_CAST_CASE: ("run_train.sh", {"original": ("BF16", "FP32"), "autocast": ("BF16", "FP32")}),
}
OWN_CC_FLAG = "--model-type=transformer"  # what option_gated_autocast's script appends itself


@dataclass(frozen=True)
class Results:
    migrations: dict[tuple[str, str], Migration]  # (case, mode)
    runs: dict[tuple[str, str, str], LaunchRun]  # (case, variant, config)

    def run(self, case: str, variant: str, config: str) -> LaunchRun:
        return checked(self.runs[(case, variant, config)])


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Results:
    started = time.monotonic()
    root = tmp_path_factory.mktemp("option-gated-e2e")
    tools = make_tools(root / "tools")
    wanted = [(case, v) for case, (_, variants) in CASES.items() for v in variants if v in MODES]
    migrations = dict(
        zip(
            wanted,
            in_parallel(
                lambda job: migrate(root / job[0] / job[1], job[1], PROJECTS / job[0] / "before"),
                wanted,
            ),
            strict=True,
        )
    )
    folders: dict[tuple[str, str], Path] = {}
    for case in CASES:
        original = root / case / "original"
        shutil.copytree(PROJECTS / case / "before", original)
        folders[(case, "original")] = original
    folders |= {key: migration.folder for key, migration in migrations.items()}
    jobs = [
        (case, variant, config)
        for case, (_, variants) in CASES.items()
        for variant, configs in variants.items()
        for config in configs
    ]

    def run(job: tuple[str, str, str]) -> LaunchRun:
        case, variant, config = job
        launcher = CASES[case][0]
        out = root / "runs" / f"{case}-{variant}-{config}"
        label = f"{case}: {variant} {launcher} {config}"
        return launch(tools, folders[(case, variant)], config, label, out, launcher=launcher)

    runs = dict(zip(jobs, in_parallel(run, jobs), strict=True))
    print_table({(f"{c}:{v}", k): r for (c, v, k), r in runs.items()}, time.monotonic() - started)
    return Results(migrations, runs)


def test_every_rewrite_succeeds(results: Results) -> None:
    """Exit 1 where a finding is left for manual work (the amp arm's `unset`), never 2."""
    for key, migration in results.migrations.items():
        assert migration.returncode in (0, 1), (key, migration.output)
        assert "rewrote" in migration.output, (key, migration.output)


# -- option_gated_autocast ----------------------------------------------------------------------


def test_original_bf16_configuration_trains_under_the_flag_without_its_own_autocast(
    results: Results,
) -> None:
    run = results.run(AUTOCAST_CASE, "original", "bf16")
    assert run.env["XLA_DOWNCAST_BF16"] == "1"
    assert LEGACY_NOTICE in run.output
    assert {enabled for enabled, _ in run.autocast_states()} == {False}


def test_autocast_rewrite_trains_the_bf16_configuration_under_autocast(results: Results) -> None:
    """The configuration that set the flag (and never passed --enable_pt_autocast) now runs
    its forward passes under xla autocast to bf16, with float32 parameters and no legacy flag."""
    run = results.run(AUTOCAST_CASE, "autocast", "bf16")
    assert all(run.env[name] is None for name in LEGACY_FLAGS), run.env
    assert LEGACY_NOTICE not in run.output
    assert run.env[SIGNAL] == "1"
    assert run.autocast_states() == {(True, "torch.bfloat16")}
    assert run.output_dtypes() == {"torch.bfloat16"}
    assert set(run.params) == {"torch.float32"}
    original = results.run(AUTOCAST_CASE, "original", "bf16")
    assert run.losses == pytest.approx(original.losses, rel=LOSS_RTOL)


def test_autocast_rewrite_appends_auto_cast_none_once_after_the_scripts_own_flags(
    results: Results,
) -> None:
    run = results.run(AUTOCAST_CASE, "autocast", "bf16")
    flags = run.env[CC_FLAGS]
    assert flags is not None
    assert flags.split() == [OWN_CC_FLAG, AUTO_CAST_NONE]


def test_amp_configuration_is_exactly_as_before(results: Results) -> None:
    """amp never set the flag: its own autocast, environment and losses are untouched."""
    original = results.run(AUTOCAST_CASE, "original", "amp")
    run = results.run(AUTOCAST_CASE, "autocast", "amp")
    assert original.autocast_states() == {(True, "torch.bfloat16")}
    assert run.env == original.env
    assert run.record["dtypes"] == original.record["dtypes"]
    assert run.probe["forwards"] == original.probe["forwards"]
    assert run.losses == original.losses


def test_full_bf16_gives_the_bf16_configuration_a_bf16_model_without_its_autocast(
    results: Results,
) -> None:
    run = results.run(AUTOCAST_CASE, "full-bf16", "bf16")
    assert set(run.params) == {"torch.bfloat16"}
    assert {enabled for enabled, _ in run.autocast_states()} == {False}
    assert all(run.env[name] is None for name in LEGACY_FLAGS)


# -- option_gated_own_cast ----------------------------------------------------------------------


def test_original_bf16_configuration_casts_its_own_model(results: Results) -> None:
    run = results.run(OWN_CAST_CASE, "original", "BF16")
    assert run.env["XLA_USE_BF16"] == "1"
    assert set(run.params) == {"torch.bfloat16"}


def test_autocast_rewrite_keeps_the_bf16_configurations_model_float32(results: Results) -> None:
    """--bf16 is still passed, but where the recipe is on the script's own cast is off: an fp32
    model under autocast, as the recipe says, not a bf16 model beside autocast."""
    run = results.run(OWN_CAST_CASE, "autocast", "BF16")
    assert all(run.env[name] is None for name in LEGACY_FLAGS)
    assert set(run.params) == {"torch.float32"}
    assert run.autocast_states() == {(True, "torch.bfloat16")}
    assert run.output_dtypes() == {"torch.bfloat16"}
    assert run.losses[-1] != run.losses[0]


def test_own_cast_fp32_configuration_is_exactly_as_before(results: Results) -> None:
    original = results.run(OWN_CAST_CASE, "original", "FP32")
    run = results.run(OWN_CAST_CASE, "autocast", "FP32")
    assert run.env == original.env
    assert run.record["dtypes"] == original.record["dtypes"]
    assert run.probe["forwards"] == original.probe["forwards"]
    assert run.losses == original.losses
