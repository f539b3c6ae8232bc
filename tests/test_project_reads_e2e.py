"""tests/fixtures/projects/reads_three_ways, migrated in every mode and launched through
`run_pretrain.sh bf16|fp32` on real torch-xla (PJRT_DEVICE=CPU), as tests/test_project_e2e.py
does for the precision switch (same shims, same recorder and probe).

The script and the modules it imports read XLA_DOWNCAST_BF16 three ways; what each became must
show in the run:
- the decision ("is this the bf16 run?" picks the dtype of run-time buffers) reads the signal:
  bf16 exactly where the legacy run had the flag;
- the float64 trick (fp32 moments in the optimizer, an fp32 norm and softmax) became float32:
  the optimizer's moments are float32, never float64, where the legacy run's were float64 that
  the device held in fp32;
- the read the tool could not classify (the flag's value, logged) reads what the finding said
  it would: '0' in every configuration.
The fp32 configuration never set the flag: it is the very same run as before.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import FIXTURES
from tests.test_project_e2e import (
    LaunchRun,
    Migration,
    in_parallel,
    launch,
    make_tools,
    migrate,
    pytestmark,  # noqa: F401 - the same platform and bash conditions
)
from tests.test_rewrite_e2e import LOSS_RTOL
from xlamigrate.kinds.python.rewrite import MODES

PROJECT = FIXTURES / "projects" / "reads_three_ways" / "before"
LAUNCHER = "run_pretrain.sh"
CONFIGS = ("bf16", "fp32")
# The one read left for a hand edit (README: exit 1 when something is left), reported where it
# is in the file as written: pretrain.py's `os.environ.get("XLA_DOWNCAST_BF16", "0")`.
LEFT_FILE, LEFT_READ = "pretrain.py", 'os.environ.get("XLA_DOWNCAST_BF16", "0")'


def summary(run: LaunchRun) -> dict[str, Any]:
    """The JSON line pretrain.py prints at the end."""
    lines = [line for line in run.output.splitlines() if line.startswith('{"precision"')]
    assert len(lines) == 1, run.describe()
    parsed: dict[str, Any] = json.loads(lines[0])
    return parsed


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    started = time.monotonic()
    root = tmp_path_factory.mktemp("reads-e2e")
    tools = make_tools(root / "tools")
    migrations = dict(
        zip(
            MODES,
            in_parallel(lambda mode: migrate(root / mode, mode, PROJECT), MODES),
            strict=True,
        )
    )
    original = root / "original"
    shutil.copytree(PROJECT, original)
    projects = {"original": original} | {m: x.folder for m, x in migrations.items()}
    jobs = [(variant, config) for variant in projects for config in CONFIGS]

    def run(job: tuple[str, str]) -> LaunchRun:
        variant, config = job
        out = root / "runs" / f"{variant}-{config}"
        return launch(tools, projects[variant], config, f"{variant} {config}", out, LAUNCHER, 0)

    results = dict(zip(jobs, in_parallel(run, jobs), strict=True))
    print(f"\n{len(results)} launcher runs in {time.monotonic() - started:.0f} s")
    for (variant, config), result in results.items():
        print(variant, config, result.returncode, result.record.get("dtypes"), result.losses)
    return Runs(migrations, results)


@dataclass(frozen=True)
class Runs:
    migrations: dict[str, Migration]
    launches: dict[tuple[str, str], LaunchRun]

    def good(self, variant: str, config: str) -> LaunchRun:
        run = self.launches[(variant, config)]
        assert run.ok, run.describe()
        assert len(run.torchrun_calls) == 1, run.describe()
        return run


@pytest.mark.parametrize("mode", MODES)
def test_the_rewrite_leaves_only_the_unclassifiable_read(runs: Runs, mode: str) -> None:
    migration = runs.migrations[mode]
    assert migration.returncode == 1, migration.output  # one finding left for a hand edit
    left = [line for line in migration.output.splitlines() if ": XM" in line]
    assert len(left) == 1, migration.output
    where, code = left[0].split(" XLA_")[0].rsplit(": ", 1)
    path, line, column = where.split(":")
    assert (path, code) == (LEFT_FILE, "XM201")
    written = (migration.folder / path).read_text().splitlines()[int(line) - 1]
    assert written[int(column) - 1 :].startswith(LEFT_READ), written


def test_the_legacy_run_took_the_float64_trick(runs: Runs) -> None:
    """The reference: under XLA_DOWNCAST_BF16 the moments were float64 tensors (fp32 on the
    device) and run-time buffers were bf16."""
    run = runs.good("original", "bf16")
    assert set(run.record["dtypes"]["state"]) == {"torch.float64"}
    assert summary(run)["buffers"] == "torch.bfloat16"
    assert summary(run)["precision"] == "1"


@pytest.mark.parametrize("mode", MODES)
def test_the_decision_read_follows_the_signal(runs: Runs, mode: str) -> None:
    assert summary(runs.good(mode, "bf16"))["buffers"] == "torch.bfloat16"
    assert summary(runs.good(mode, "fp32"))["buffers"] == "torch.float32"


@pytest.mark.parametrize("mode", MODES)
def test_float64_became_float32(runs: Runs, mode: str) -> None:
    """No float64 left anywhere in the migrated run: the moments are float32 (the optimizer
    upcasts the bf16 gradients to float32 where it upcast to float64)."""
    run = runs.good(mode, "bf16")
    assert set(run.record["dtypes"]["state"]) == {"torch.float32"}
    params = "torch.float32" if mode == "autocast" else "torch.bfloat16"
    assert set(run.record["dtypes"]["params"]) == {params}


@pytest.mark.parametrize("mode", MODES)
def test_the_unclassified_read_reads_what_the_finding_said(runs: Runs, mode: str) -> None:
    assert summary(runs.good(mode, "bf16"))["precision"] == "0"


@pytest.mark.parametrize("mode", MODES)
def test_the_bf16_configuration_trains_like_the_legacy_run(runs: Runs, mode: str) -> None:
    original, run = runs.good("original", "bf16"), runs.good(mode, "bf16")
    assert None not in run.losses
    assert run.losses == pytest.approx(original.losses, rel=LOSS_RTOL)


@pytest.mark.parametrize("mode", MODES)
def test_the_fp32_configuration_is_the_original_run(runs: Runs, mode: str) -> None:
    original, run = runs.good("original", "fp32"), runs.good(mode, "fp32")
    assert run.record["dtypes"] == original.record["dtypes"]
    assert run.env == original.env
    assert run.probe["forwards"] == original.probe["forwards"]
    assert run.losses == original.losses
    assert summary(run) == summary(original)
