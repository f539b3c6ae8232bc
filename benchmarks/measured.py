"""Which xlamigrate a benchmark measures: the one its interpreter imports, which is not always
this checkout (`.ci/run` in a clone re-points an editable install at the clone). Each benchmark
prints the line, so a figure says what it was taken of."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import xlamigrate

HERE = Path(__file__).resolve().parent.parent  # the checkout the benchmark lives in


def measured_checkout() -> str:
    """`xlamigrate <version> from <folder> at <commit>`, and a warning where that folder is
    not this benchmark's checkout."""
    folder = Path(xlamigrate.__file__).resolve().parent.parent
    commit = subprocess.run(
        ["git", "-C", str(folder), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False,
    ).stdout.strip() or "(not a git checkout)"  # fmt: skip
    dirty = subprocess.run(
        ["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    modified = " (modified)" if dirty else ""
    line = f"xlamigrate {xlamigrate.__version__} from {folder} at {commit}{modified}"
    if folder != HERE:
        line += f"\n  !! not this checkout ({HERE}): `pip install -e .` here to measure it"
    return line


_PR_SET_CHILD_SUBREAPER = 36  # (linux/prctl.h)


def run_measured(
    command: list[str], cwd: Path, env: Mapping[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[bytes], float, float]:
    """The command's result, its wall seconds and the CPU seconds (user+sys) of it and of every
    process it started. xlamigrate does not wait for its workers to exit (they end with it): this
    process adopts them (a child subreaper, on Linux) and waits for them, so their CPU counts."""
    _adopt_orphans()
    before, started = os.times(), time.perf_counter()
    result = subprocess.run(command, cwd=cwd, capture_output=True, check=False, env=env)
    wall = time.perf_counter() - started
    _reap_adopted()
    after = os.times()
    cpu = (
        after.children_user - before.children_user
        + after.children_system - before.children_system
    )  # fmt: skip
    return result, wall, cpu


def _adopt_orphans() -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _reap_adopted() -> None:
    """Waits for the adopted processes (the workers end as the command does)."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
