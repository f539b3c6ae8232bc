"""A migrated project, launched through its own launcher, on real torch-xla (PJRT_DEVICE=CPU).

tests/fixtures/projects/precision_switch_launcher/before/ is a bash launcher (`run_clm.sh
BF16|MIXED|FP32`: BF16 exports XLA_USE_BF16=1, MIXED XLA_DOWNCAST_BF16=1, FP32 neither) that
ends in `torchrun ... train_clm.py`. The folder is copied and migrated with
`python -m xlamigrate rewrite --mode MODE .` for every mode; then the original and every
migration run `bash run_clm.sh CONFIG` in every configuration, each as one CPU process: a
`torchrun` shim first on PATH drops torchrun's own options and runs the script with this
interpreter.

What each training process did is observed, not read from the source: the recorder shim of
`xlamigrate verify` (xlamigrate/verify/recorder.py, loaded as `sitecustomize`) notes the dtypes
of the parameters, optimizer state and master weights at the first optimizer step and the loss
of every step; a probe of this module, chained after it, notes whether autocast was on around the
model's forward passes and the environment the process saw at its first step (after the script's
own writes to os.environ).

The configurations that set a legacy flag must show the mode's recipe; FP32, which never set
one, must be the very same run as before: same dtypes, same environment, same losses.

torch-xla never loads in pytest's process: every run is a `bash` subprocess, two at a time (the
machines this runs on have two cores), from one module-scoped fixture.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.conftest import FIXTURES, needs_torch_xla_platform
from tests.test_rewrite_e2e import LEGACY_NOTICE, LOSS_RTOL, is_bf16_value
from xlamigrate.kinds.python.rewrite import MODES
from xlamigrate.verify import recorder
from xlamigrate.verify.runs import install_shim, run_environment

pytestmark = [
    needs_torch_xla_platform,
    pytest.mark.skipif(shutil.which("bash") is None, reason="the launcher is a bash script"),
]

PROJECT = FIXTURES / "projects" / "precision_switch_launcher" / "before"
LAUNCHER = "run_clm.sh"
CONFIGS = ("BF16", "MIXED", "FP32")
ENABLED = {"BF16": "XLA_USE_BF16", "MIXED": "XLA_DOWNCAST_BF16"}  # config -> the flag it set
STEPS = 2  # the launcher's $STEPS: the second loss shows the first update
LEGACY_FLAGS = ("XLA_USE_BF16", "XLA_DOWNCAST_BF16")
SIGNAL = "BF16_RECIPE"  # what the migrated launcher exports where it exported a legacy flag
ROUNDING = "NEURON_RT_STOCHASTIC_ROUNDING_EN"
CC_FLAGS = "NEURON_CC_FLAGS"
AUTO_CAST_NONE = "--auto-cast=none"
# Everything the probe reads from os.environ at the first optimizer step. None: unset.
PROBED_ENV = (*LEGACY_FLAGS, SIGNAL, ROUNDING, CC_FLAGS)
# Set by the caller's shell, these would leak into every run and blur what the launcher set.
SCRUBBED_ENV = (*PROBED_ENV, "STEPS", recorder.RECORD_DIR, recorder.STEP_LIMIT)

PROBE_DIR = "XLAMIGRATE_E2E_PROBE"
PROBE = r'''
"""Loaded as `sitecustomize` after the recorder shim (which chains it): notes, in
$XLAMIGRATE_E2E_PROBE/probe-<pid>.json at the first optimizer step, the autocast state around
every outermost module forward before that step, the output dtype of those forwards, and the
environment the process saw then. Chains the next `sitecustomize` on sys.path, if any."""

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = __PROBED_ENV__


class Probe:
    def __init__(self, folder):
        self.folder = folder
        self.depth = 0
        self.forwards = []  # per outermost forward: autocast state and output dtype
        self.written = False

    def install(self, torch):
        import torch.nn.modules.module as module_hooks
        import torch.optim.optimizer as optimizer_hooks

        def pre_forward(module, args):
            self.depth += 1
            if self.depth == 1 and not self.written:
                self.forwards.append(
                    {
                        "module": type(module).__name__,
                        "autocast_xla": torch.is_autocast_enabled("xla"),
                        "autocast_xla_dtype": str(torch.get_autocast_dtype("xla")),
                        "output": None,
                    }
                )

        def post_forward(module, args, output):
            self.depth -= 1
            if self.depth == 0 and not self.written and self.forwards:
                dtype = getattr(output, "dtype", None)
                self.forwards[-1]["output"] = None if dtype is None else str(dtype)

        module_hooks.register_module_forward_pre_hook(pre_forward)
        module_hooks.register_module_forward_hook(post_forward)
        optimizer_hooks.register_optimizer_step_pre_hook(lambda opt, a, k: self.first_step())

    def first_step(self):
        if self.written:
            return
        self.written = True
        record = {
            "pid": os.getpid(),
            "env": {name: os.environ.get(name) for name in ENV},
            "forwards": self.forwards,
        }
        path = os.path.join(self.folder, "probe-%d.json" % os.getpid())
        with open(path + ".part", "w", encoding="utf-8") as stream:
            json.dump(record, stream)
        os.replace(path + ".part", path)


class AfterTorchImport(importlib.abc.MetaPathFinder):
    def __init__(self, probe):
        self.probe = probe

    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute = loader.exec_module

        def exec_module(module):
            execute(module)
            self.probe.install(module)

        loader.exec_module = exec_module
        return spec


def chain_next_sitecustomize():
    paths = [os.path.abspath(entry or os.curdir) for entry in sys.path]
    rest = sys.path[paths.index(HERE) + 1 :] if HERE in paths else []
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if os.environ.get("XLAMIGRATE_E2E_PROBE"):
    probe = Probe(os.environ["XLAMIGRATE_E2E_PROBE"])
    if "torch" in sys.modules:
        probe.install(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, AfterTorchImport(probe))
chain_next_sitecustomize()
'''.replace("__PROBED_ENV__", repr(PROBED_ENV))

TORCHRUN_SHIM = """#!/bin/bash
# torchrun, reduced to one local process: drops torchrun's own options, runs the script.
printf '%s\\n' "$*" >> "$TORCHRUN_SHIM_LOG"
while [[ "$1" == -* ]]; do shift; done
exec {python} "$@"
"""

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class LaunchRun:
    """One `bash run_clm.sh CONFIG`: its exit, output, the recorder's record and the probe's."""

    label: str
    returncode: int | None  # None: killed at the timeout
    output: str
    torchrun_calls: tuple[str, ...]
    record: Mapping[str, Any] = field(default_factory=dict)
    probe: Mapping[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def describe(self) -> str:
        return (
            f"{self.label} exited {self.returncode} in {self.seconds:.1f} s; "
            f"record {self.record}; probe {self.probe}; output:\n{self.output[-4000:]}"
        )

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and bool(self.record) and bool(self.probe)

    @property
    def params(self) -> dict[str, int]:
        return dict(self.record["dtypes"]["params"])

    @property
    def masters(self) -> dict[str, int]:
        return dict(self.record["dtypes"]["masters"])

    @property
    def env(self) -> dict[str, str | None]:
        return dict(self.probe["env"])

    @property
    def losses(self) -> list[float | None]:
        return list(self.record["losses"])

    def autocast_states(self) -> set[tuple[bool, str]]:
        """(enabled, dtype) of autocast on the xla device around each outermost forward."""
        return {(f["autocast_xla"], f["autocast_xla_dtype"]) for f in self.probe["forwards"]}

    def output_dtypes(self) -> set[str | None]:
        return {f["output"] for f in self.probe["forwards"]}


@dataclass(frozen=True)
class Tools:
    """The shims every run shares: PATH entry with `torchrun`, the sitecustomize folders."""

    bin: Path
    recorder: Path
    probe: Path


def make_tools(folder: Path) -> Tools:
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    torchrun = bin_dir / "torchrun"
    torchrun.write_text(TORCHRUN_SHIM.format(python=sys.executable))
    torchrun.chmod(torchrun.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    probe = folder / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(PROBE)
    return Tools(bin=bin_dir, recorder=install_shim(folder / "recorder"), probe=probe)


def base_environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key not in SCRUBBED_ENV}


def launch(
    tools: Tools,
    project: Path,
    config: str,
    label: str,
    out: Path,
    launcher: str = LAUNCHER,
    step_limit: int = STEPS,
) -> LaunchRun:
    """`bash LAUNCHER CONFIG` in `project`, under the recorder and the probe (which ends the
    process after `step_limit` optimizer steps; 0: the script ends on its own)."""
    out.mkdir(parents=True)
    records, probes, log = out / "records", out / "probes", out / "torchrun.log"
    records.mkdir()
    probes.mkdir()
    log.touch()
    # The recorder first on PYTHONPATH: it is `sitecustomize` and chains the probe after it.
    env = run_environment(base_environment(), [tools.recorder, tools.probe])
    env.update(
        {
            "PATH": os.pathsep.join([str(tools.bin), os.environ.get("PATH", "")]),
            "STEPS": str(STEPS),
            recorder.RECORD_DIR: str(records),
            recorder.STEP_LIMIT: str(step_limit),
            PROBE_DIR: str(probes),
            "TORCHRUN_SHIM_LOG": str(log),
        }
    )
    started = time.monotonic()
    try:
        completed = subprocess.run(
            ["bash", launcher, config],
            cwd=project, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        returncode: int | None = completed.returncode
        output = completed.stdout + completed.stderr
    except subprocess.TimeoutExpired as expired:
        returncode, output = None, str(expired.stdout or "") + str(expired.stderr or "")
    seconds = time.monotonic() - started
    record = main_record(records)
    probe: dict[str, Any] = {}
    if record:
        path = probes / f"probe-{record['pid']}.json"
        probe = json.loads(path.read_text()) if path.exists() else {}
    return LaunchRun(
        label=label,
        returncode=returncode,
        output=output,
        torchrun_calls=tuple(log.read_text().splitlines()),
        record=record,
        probe=probe,
        seconds=seconds,
    )


def main_record(folder: Path) -> dict[str, Any]:
    """The record of the process that stepped most ({} if none stepped)."""
    records = [json.loads(path.read_text()) for path in sorted(folder.glob("record-*.json"))]
    return max(records, key=lambda record: record["steps"], default={})


def in_parallel(function: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """Two at a time: the machines this runs on have two cores."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(function, items))


@dataclass(frozen=True)
class Migration:
    folder: Path
    returncode: int
    output: str


def migrate(folder: Path, mode: str, project: Path = PROJECT) -> Migration:
    shutil.copytree(project, folder)
    result = subprocess.run(
        [sys.executable, "-m", "xlamigrate", "rewrite", "--mode", mode, "."],
        cwd=folder, env=base_environment(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return Migration(folder, result.returncode, result.stdout + result.stderr)


# -- everything runs once -----------------------------------------------------------------------


@dataclass(frozen=True)
class Results:
    migrations: dict[str, Migration]
    runs: dict[tuple[str, str], LaunchRun]  # (variant, config); variant "original" or a mode
    seconds: float


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Results:
    started = time.monotonic()
    root = tmp_path_factory.mktemp("project-e2e")
    tools = make_tools(root / "tools")
    migrations = dict(
        zip(MODES, in_parallel(lambda mode: migrate(root / mode, mode), MODES), strict=True)
    )
    original = root / "original"
    shutil.copytree(PROJECT, original)
    projects = {"original": original} | {
        mode: migration.folder for mode, migration in migrations.items()
    }
    jobs = [(variant, config) for variant in projects for config in CONFIGS]

    def run(job: tuple[str, str]) -> LaunchRun:
        variant, config = job
        label, out = f"{variant} {LAUNCHER} {config}", root / "runs" / f"{variant}-{config}"
        return launch(tools, projects[variant], config, label, out)

    runs = dict(zip(jobs, in_parallel(run, jobs), strict=True))
    seconds = time.monotonic() - started
    print_table(runs, seconds)
    return Results(migrations, runs, seconds)


def print_table(runs: dict[tuple[str, str], LaunchRun], seconds: float) -> None:
    print(f"\n{'variant':<10} {'config':<6} {'rc':>4} {'params':<24} {'masters':<22} losses")
    for (variant, config), run in runs.items():
        dtypes = run.record.get("dtypes", {})
        print(
            f"{variant:<10} {config:<6} {run.returncode!s:>4} {dtypes.get('params')!s:<24} "
            f"{dtypes.get('masters')!s:<22} {run.record.get('losses')} "
            f"autocast={run.autocast_states() if run.probe else None} ({run.seconds:.1f} s)"
        )
    print(f"{len(runs)} launcher runs in {seconds:.0f} s")


def good_run(results: Results, variant: str, config: str) -> LaunchRun:
    return checked(results.runs[(variant, config)])


def checked(run: LaunchRun) -> LaunchRun:
    """The run went through the launcher's torchrun line, as one process that stepped STEPS
    times, and the probe saw its forwards."""
    assert run.ok, run.describe()
    assert len(run.torchrun_calls) == 1, run.describe()
    assert run.record["steps"] == STEPS, run.describe()
    assert run.probe["forwards"], run.describe()
    return run


# -- the migration itself -----------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_rewrite_of_the_project_exits_0(results: Results, mode: str) -> None:
    migration = results.migrations[mode]
    assert migration.returncode == 0, migration.output


# -- the original, as the reference -------------------------------------------------------------


@pytest.mark.parametrize("config", ENABLED)
def test_original_enabled_configuration_trains_under_its_legacy_flag(
    results: Results, config: str
) -> None:
    """The reference really took the legacy path: the launcher's flag reached the training
    process, torch-xla announced it, every loss is a bf16 value (the device computed in bf16),
    and the parameters still *report* float32."""
    run = good_run(results, "original", config)
    assert run.env[ENABLED[config]] == "1"
    assert run.record["flags"][ENABLED[config]] == "1"  # the recorder saw it too
    assert [name for name in LEGACY_FLAGS if run.env[name] is not None] == [ENABLED[config]]
    assert LEGACY_NOTICE in run.output
    assert all(loss is not None and is_bf16_value(loss) for loss in run.losses), run.losses
    assert set(run.params) == {"torch.float32"}
    assert run.masters == {}
    assert run.env[SIGNAL] is None


def test_original_fp32_configuration_sets_no_flag(results: Results) -> None:
    run = good_run(results, "original", "FP32")
    assert all(run.env[name] is None for name in LEGACY_FLAGS)
    assert run.env[SIGNAL] is None
    # The launcher's unconditional exports.
    assert run.env[ROUNDING] == "1"
    assert run.env[CC_FLAGS] == "--model-type transformer"
    assert LEGACY_NOTICE not in run.output
    assert set(run.params) == {"torch.float32"}
    assert run.masters == {}
    assert run.autocast_states() == {(False, "torch.bfloat16")}
    assert run.output_dtypes() == {"torch.float32"}


# -- the migrated project: the enabled configurations take the recipe ---------------------------


@pytest.mark.parametrize("config", ENABLED)
@pytest.mark.parametrize("mode", MODES)
def test_migrated_enabled_configuration_runs_without_a_legacy_flag(
    results: Results, mode: str, config: str
) -> None:
    run = good_run(results, mode, config)
    assert all(run.env[name] is None for name in LEGACY_FLAGS), run.env
    assert all(run.record["flags"][name] is None for name in LEGACY_FLAGS), run.record["flags"]
    assert LEGACY_NOTICE not in run.output


@pytest.mark.parametrize("config", ENABLED)
@pytest.mark.parametrize("mode", MODES)
def test_migrated_enabled_configuration_has_the_dtypes_of_the_recipe(
    results: Results, mode: str, config: str
) -> None:
    """full-bf16: bf16 parameters, no masters; fp32-copy: bf16 parameters, fp32 masters (one
    per parameter); autocast: fp32 parameters, no masters."""
    run = good_run(results, mode, config)
    count = sum(good_run(results, "original", config).params.values())
    if mode == "autocast":
        assert run.params == {"torch.float32": count}
    else:
        assert run.params == {"torch.bfloat16": count}
    if mode == "fp32-copy":
        assert run.masters == {"torch.float32": count}
        assert set(run.record["dtypes"]["state"]) == {"torch.float32"}  # Adam on the masters
    else:
        assert run.masters == {}


@pytest.mark.parametrize("config", ENABLED)
@pytest.mark.parametrize("mode", MODES)
def test_migrated_enabled_configuration_autocasts_only_in_autocast_mode(
    results: Results, mode: str, config: str
) -> None:
    """autocast: every forward runs under xla autocast to bf16, so the logits come out bf16;
    the other recipes cast the model instead (bf16 logits too) and never autocast."""
    run = good_run(results, mode, config)
    if mode == "autocast":
        assert run.autocast_states() == {(True, "torch.bfloat16")}
    else:
        assert {enabled for enabled, _ in run.autocast_states()} == {False}
    assert run.output_dtypes() == {"torch.bfloat16"}


@pytest.mark.parametrize("config", ENABLED)
@pytest.mark.parametrize("mode", MODES)
def test_migrated_enabled_configuration_has_the_environment_of_the_recipe(
    results: Results, mode: str, config: str
) -> None:
    """The environment of the legacy run, less the legacy flag, with the recipe's settings:
    full-bf16 keeps stochastic rounding on, fp32-copy turns it off (the masters replace it),
    autocast tells the Neuron compiler not to auto-cast on top of it."""
    original, run = good_run(results, "original", config), good_run(results, mode, config)
    expected = {name: original.env[name] for name in (ROUNDING, CC_FLAGS)}
    if mode == "full-bf16":
        expected[ROUNDING] = "1"
    elif mode == "fp32-copy":
        expected[ROUNDING] = "0"
    else:
        flags, launcher_flags = run.env[CC_FLAGS], original.env[CC_FLAGS]
        assert flags is not None and launcher_flags is not None
        assert flags.endswith(AUTO_CAST_NONE)
        # The launcher's own compiler flags are kept, in order, before the new one.
        assert flags.split() == [*launcher_flags.split(), AUTO_CAST_NONE]
        expected[CC_FLAGS] = flags
    assert {name: run.env[name] for name in (ROUNDING, CC_FLAGS)} == expected


@pytest.mark.parametrize("config", ENABLED)
@pytest.mark.parametrize("mode", MODES)
def test_migrated_enabled_configuration_trains_like_the_legacy_run(
    results: Results, mode: str, config: str
) -> None:
    """Same losses as the legacy run up to bf16 rounding noise (the tolerance of
    tests/test_rewrite_e2e.py): the recipe trains the same model on the same data."""
    original, run = good_run(results, "original", config), good_run(results, mode, config)
    assert None not in run.losses and None not in original.losses
    assert run.losses == pytest.approx(original.losses, rel=LOSS_RTOL)
    assert run.losses[-1] != run.losses[0]  # the update changed the model


# -- the migrated project: FP32 is exactly as before --------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_migrated_fp32_configuration_is_exactly_the_original_fp32_run(
    results: Results, mode: str
) -> None:
    """FP32 never set a legacy flag, so nothing of the recipe may apply: fp32 parameters, no
    masters, no autocast, the launcher's environment untouched, the same losses, bit for bit."""
    original, run = good_run(results, "original", "FP32"), good_run(results, mode, "FP32")
    assert run.env == original.env
    assert run.env[SIGNAL] is None
    assert run.env[ROUNDING] == "1"  # the launcher's unconditional export
    assert run.env[CC_FLAGS] == original.env[CC_FLAGS]
    assert all(run.env[name] is None for name in LEGACY_FLAGS)
    assert run.record["dtypes"] == original.record["dtypes"]
    assert set(run.params) == {"torch.float32"}
    assert run.masters == {}
    assert run.probe["forwards"] == original.probe["forwards"]
    assert run.autocast_states() == {(False, "torch.bfloat16")}
    assert run.output_dtypes() == {"torch.float32"}
    assert LEGACY_NOTICE not in run.output
    assert None not in run.losses
    assert run.losses == original.losses
