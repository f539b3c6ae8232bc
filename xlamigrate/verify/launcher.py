"""Verifying a launcher configuration (`xlamigrate verify run.sh -- BF16`): the launcher runs as
it is, with its launch commands intercepted, on torch-xla's CPU device.

A folder of shims goes first on PATH: `torchrun` drops its own options (`--nproc_per_node=8`...)
and runs the script with verify's interpreter as one process with torchrun's environment for a
single worker (RANK=0, WORLD_SIZE=1, MASTER_ADDR/PORT), so one worker trains where the launcher
would start many; `python` and `python3` are verify's interpreter too (the one with
torch-xla). Each shim appends the command it was given to a log: a configuration that never set
a legacy flag must launch the same commands before and after the migration.

The migrated project is a copy of the launcher's folder, rewritten in the mode by
`xlamigrate rewrite` itself (launcher and scripts together, as a user would), then run the same
way; the recorder shim observes the training process in both.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

LAUNCH_LOG = "XLAMIGRATE_VERIFY_LAUNCHES"

# One line per intercepted command: the program, then its arguments.
_TORCHRUN = """#!/bin/sh
# torchrun, reduced to one local process: drops torchrun's own options, runs the script.
printf 'torchrun %s\\n' "$*" >> "${log}"
while [ $# -gt 0 ]; do
    case "$1" in
        -m|--module) break ;;
        --*=*|-?*=*) shift ;;
        --standalone|--no-python|--no_python|--run-path|--run_path) shift ;;
        -*) shift; [ $# -gt 0 ] && shift ;;
        *) break ;;
    esac
done
# what torchrun gives its one worker
export RANK=0 LOCAL_RANK=0 GROUP_RANK=0 ROLE_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1
export ROLE_WORLD_SIZE=1 MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
export MASTER_PORT="${MASTER_PORT:-$((20000 + $$ % 20000))}"
exec "{python}" "$@"
"""
_PYTHON = """#!/bin/sh
printf '{name} %s\\n' "$*" >> "${log}"
exec "{python}" "$@"
"""
_PYTHONS = ("python", "python3")


@dataclass(frozen=True)
class LauncherCopy:
    """A migrated copy of the launcher's folder: where it is, and what the rewrite said."""

    mode: str
    launcher: Path
    cwd: Path
    output: str


def is_launcher(script: Path) -> bool:
    """Whether verify is given a shell launcher rather than a Python script."""
    from xlamigrate.discover import classify

    return classify(script) == "shell"


def install_launch_shims(folder: Path) -> Path:
    """Writes the `torchrun`, `python` and `python3` shims into `folder`; returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    log = "$" + LAUNCH_LOG
    shims = {"torchrun": _TORCHRUN.replace("{python}", sys.executable).replace("${log}", log)}
    for name in _PYTHONS:
        text = _PYTHON.replace("{python}", sys.executable).replace("{name}", name)
        shims[name] = text.replace("${log}", log)
    for name, text in shims.items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


def launch_environment(env: dict[str, str], shims: Path, log: Path) -> dict[str, str]:
    """`env` with the launch shims first on PATH and the log they append to."""
    launched = dict(env)
    launched["PATH"] = os.pathsep.join(p for p in (str(shims), env.get("PATH", "")) if p)
    launched[LAUNCH_LOG] = str(log)
    return launched


def migrated_copy(launcher: Path, mode: str, work: Path, target: str) -> LauncherCopy:
    """Copies the launcher's folder into `work/mode` and migrates it with `xlamigrate rewrite`
    (exit 1, findings left for manual work, still gives a copy to run)."""
    root = launcher.parent
    copy = work / mode / root.name
    shutil.copytree(root, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    completed = subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", "rewrite", "--mode", mode, "--target", target,
         "."],
        cwd=copy, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if completed.returncode not in (0, 1):
        raise RuntimeError(f"xlamigrate rewrite --mode {mode} failed: {completed.stderr.strip()}")
    here = Path.cwd().resolve()
    inside = here == root or root in here.parents
    cwd = copy / here.relative_to(root) if inside else copy
    return LauncherCopy(mode, copy / launcher.name, cwd, completed.stdout + completed.stderr)


def launch_lines(log: Path) -> tuple[str, ...]:
    try:
        return tuple(log.read_text(encoding="utf-8").splitlines())
    except OSError:
        return ()
