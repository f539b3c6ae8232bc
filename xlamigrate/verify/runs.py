"""Runs one training script under the recorder shim, on torch-xla's CPU device, and reads back
what it recorded; a run that failed gets a diagnosis a user can act on."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from xlamigrate.flagvalue import torch_xla_enabled
from xlamigrate.verify import census, forkserver, recorder, zygote

LEGACY_FLAGS = ("XLA_USE_BF16", "XLA_DOWNCAST_BF16")
TAIL_LINES = 15


@dataclass(frozen=True)
class RunSpec:
    """One script to run: how it is labelled, what runs, where, with which environment."""

    label: str  # "original" or a mode name
    script: Path
    args: tuple[str, ...]
    cwd: Path
    env: Mapping[str, str]
    records: Path  # an empty folder the shim writes into
    steps: int
    timeout: float
    # A launcher runs under this program (`bash`) instead of verify's Python, and its launch
    # shims log the commands they were given here.
    interpreter: str | None = None
    launch_log: Path | None = None

    @property
    def command(self) -> list[str]:
        return [self.interpreter or sys.executable, str(self.script), *self.args]


@dataclass(frozen=True)
class RunResult:
    label: str
    returncode: int | None  # None: killed at the timeout
    losses: tuple[float | None, ...] = ()
    stopped_at_limit: bool = False
    dtypes: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    devices: Mapping[str, int] = field(default_factory=dict)
    flags: Mapping[str, str | None] = field(default_factory=dict)
    # backward passes, those whose model forward ran in an XLA bf16 autocast region, and those
    # that ran inside one (recorder.Recorder.mechanism)
    mechanism: Mapping[str, int] = field(default_factory=dict)
    # bytes of weights, gradients and optimizer (state and masters) at the first step, as
    # stored on the device, and the parameter count (recorder.Recorder._note_memory)
    memory: Mapping[str, int] = field(default_factory=dict)
    # every floating tensor on the device after the warm-up steps, named, and the step graph's
    # element types (census.take); empty where the run ended before it was taken
    census: Mapping[str, Any] = field(default_factory=dict)
    seconds_per_step: float | None = None  # median after the warm-up steps
    launches: tuple[str, ...] = ()  # the commands a launcher started, as its shims saw them
    peak_rss: int | None = None  # bytes: the process's resident-set high-water mark
    seconds: float = 0.0
    stderr_tail: str = ""
    problem: str | None = None  # why the run does not count, in a sentence

    @property
    def ok(self) -> bool:
        return self.problem is None

    def bytes_per_parameter(self, part: str) -> float | None:
        """Bytes per parameter that `part` ("weights", "grads", "optimizer") held at the first
        step; None where nothing was measured."""
        count = self.memory.get("parameters")
        return self.memory[part] / count if count and part in self.memory else None


def install_shim(folder: Path) -> Path:
    """Copies the recorder into `folder` as `sitecustomize.py`, and its census beside it; returns
    the folder to put first on PYTHONPATH. Where the runtime the rewrites import is not
    installed beside the CLI, the copy of it the CLI carries (for `--runtime vendor`) is linked
    there too."""
    from importlib.util import find_spec

    from xlamigrate.project.dependencies import RUNTIME_MODULE, runtime_source

    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(recorder.__file__, folder / "sitecustomize.py")
    shutil.copyfile(census.__file__, folder / f"{recorder.CENSUS_MODULE}.py")
    shutil.copyfile(zygote.__file__, folder / forkserver.SERVER_FILE)
    if find_spec(RUNTIME_MODULE) is None:
        (folder / RUNTIME_MODULE).symlink_to(runtime_source(), target_is_directory=True)
    return folder


def run_environment(
    base: Mapping[str, str],
    path: Sequence[Path],
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The caller's environment on the CPU PJRT device, `path` (the shim first) ahead of its
    PYTHONPATH. The original gets `extra` (--legacy-env) on top of any legacy flag it inherited;
    a rewrite (extra None) runs without them: the migration removes them wherever they were set."""
    env = (
        dict(base)
        if extra is not None
        else {key: value for key, value in base.items() if key not in LEGACY_FLAGS}
    )
    env.update(extra or {})
    env["PJRT_DEVICE"] = "CPU"
    env.setdefault("PYTHONHASHSEED", "0")
    entries = [*map(str, path), base.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(entry for entry in entries if entry)
    return env


def run(spec: RunSpec, server: forkserver.ForkServer | None = None) -> RunResult:
    """Runs `spec` as a child of `server` (a script verify's interpreter runs), else in a new
    process."""
    env = dict(spec.env)
    env[recorder.RECORD_DIR] = str(spec.records)
    env[recorder.STEP_LIMIT] = str(spec.steps)
    spec.records.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    outcome = None
    if server is not None and spec.interpreter is None:
        log = spec.records.parent / f"{spec.records.name}.stderr"
        shim = Path(env["PYTHONPATH"].split(os.pathsep)[0]) / "sitecustomize.py"
        argv = spec.command[1:]
        outcome = server.run(argv, spec.cwd, env, log, spec.timeout, shim)
    if outcome is not None:
        pid, returncode = outcome.pid, outcome.returncode
        stderr = log.read_bytes().decode("utf-8", "replace") if log.exists() else ""
    else:
        pid, returncode, stderr = _new_process(spec, env)
    seconds = time.monotonic() - started
    tail = "\n".join(stderr.rstrip().splitlines()[-TAIL_LINES:])
    record = _main_record(spec.records)
    if (
        record is not None
        and record["stopped_at_limit"]
        and record.get("pid") != pid
        and returncode is not None
    ):
        # The shim ended a worker the script started (xmp.spawn, a process pool) at the step
        # limit: whatever the script then did about a worker gone early (BrokenProcessPool) is
        # verify's doing, not the script's.
        returncode = 0
    result = RunResult(label=spec.label, returncode=returncode, seconds=seconds, stderr_tail=tail)
    if record is not None:
        losses = tuple(None if loss is None else float(loss) for loss in record["losses"])
        result = RunResult(
            label=spec.label,
            returncode=returncode,
            losses=losses,
            stopped_at_limit=bool(record["stopped_at_limit"]),
            dtypes=record["dtypes"],
            devices=record["devices"],
            flags=record["flags"],
            mechanism=record.get("mechanism", {}),
            memory=record.get("memory", {}),
            census=record.get("census") or {},
            seconds_per_step=record.get("seconds_per_step"),
            peak_rss=record.get("peak_rss"),
            seconds=seconds,
            stderr_tail=tail,
        )
    problem = diagnose(returncode, stderr, record is not None, spec.timeout)
    if spec.launch_log is not None:
        from xlamigrate.verify.launcher import launch_lines

        result = replace(result, launches=launch_lines(spec.launch_log))
        if problem is not None and not result.launches and returncode is not None:
            problem = (
                f"launcher exited {returncode} before it launched anything (no torchrun or "
                "python command reached): its own steps failed here; see its stderr"
            )
    return replace(result, problem=problem)


def _new_process(spec: RunSpec, env: Mapping[str, str]) -> tuple[int, int | None, str]:
    """(pid, exit code or None at the timeout, stderr) of `spec` run in a new process."""
    with subprocess.Popen(
        spec.command,
        cwd=spec.cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ) as process:  # fmt: skip
        try:
            _, raw = process.communicate(timeout=spec.timeout)
            returncode: int | None = process.returncode
        except subprocess.TimeoutExpired:
            process.kill()
            _, raw = process.communicate()
            returncode = None
    return process.pid, returncode, (raw or b"").decode("utf-8", "replace")


def _main_record(folder: Path) -> dict[str, Any] | None:
    """The record of the process that stepped most (a launcher's worker, or the script itself)."""
    records = []
    for path in sorted(folder.glob("record-*.json")):
        try:
            records.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return max(records, key=lambda record: record["steps"], default=None)


_USAGE = re.compile(r"^usage: ", re.MULTILINE)
_MISSING_FILE = re.compile(r"FileNotFoundError|No such file or directory")
_MISSING_PATH = re.compile(r"No such file or directory: '(?P<path>[^']+)'")
_DTYPE_MISMATCH = re.compile(
    r"same dtype|should be the same|expected scalar type|expected m1 and m2|dtype mismatch"
    r"|mixed precision is disallowed",
    re.IGNORECASE,
)
_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '(?P<name>[^']+)'")


def diagnose(returncode: int | None, stderr: str, recorded: bool, timeout: float) -> str | None:
    """None when the run counts; else what went wrong, with the next thing to try."""
    if returncode is None:
        return f"did not finish within {timeout:g} s (raise --timeout, or lower --steps)"
    if returncode != 0:
        if returncode == 2 and _USAGE.search(stderr):
            return (
                "exited with a usage error: the script needs command-line arguments; "
                "give them after `--` (xlamigrate verify SCRIPT -- ARGS)"
            )
        if _MISSING_FILE.search(stderr):
            path = _MISSING_PATH.search(stderr)
            what = f" ({path['path']})" if path else ""
            return (
                f"could not find a file it reads{what}: run verify from the folder the script "
                "expects, or pass the data's path after `--`"
            )
        module = _MISSING_MODULE.search(stderr)
        if module:
            return (
                f"cannot import {module['name']!r} in {sys.executable}: install it where "
                "xlamigrate runs (verify runs the scripts with that interpreter)"
            )
        if _DTYPE_MISMATCH.search(stderr):
            return (
                f"crashed (exit code {returncode}) on mixed dtypes: float32 tensors meet "
                "bf16 weights; cast the inputs where they enter the model "
                "(xlamigrate_runtime.cast_inputs_to_module_dtype) or cast the tensors it makes"
            )
        return f"crashed (exit code {returncode})"
    if not recorded:
        return (
            "finished without a single optimizer step: verify needs a script that trains "
            "(loss.backward() and optimizer.step() or xm.optimizer_step())"
        )
    return None


def link_siblings(script: Path, folder: Path) -> None:
    """Makes `folder` look like the script's own folder (modules it imports, data beside it,
    paths relative to `__file__`), by symlinks; where links fail, imports still resolve through
    PYTHONPATH."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in script.parent.iterdir():
        if entry.name in (script.name, "__pycache__"):
            continue
        try:
            (folder / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
        except OSError:
            return


def legacy_flags_on(flags: Mapping[str, str | None]) -> list[str]:
    """The legacy flags torch-xla read as on in a run (its GetEnvBool semantics)."""
    return [
        f"{name}={value}"
        for name in LEGACY_FLAGS
        if (value := flags.get(name)) is not None and torch_xla_enabled(value)
    ]
