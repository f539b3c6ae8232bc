"""Which xlamigrate a benchmark measures: the one its interpreter imports, which is not always
this checkout (`.ci/run` in a clone re-points an editable install at the clone). Each benchmark
prints the line, so a figure says what it was taken of."""

from __future__ import annotations

import subprocess
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
