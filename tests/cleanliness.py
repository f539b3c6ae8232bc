"""Is a rewritten Python file as clean as its original (issue 34)? Two checks, each run over a
whole batch of files at once: the pyflakes findings (ruff's F401, F811, F821, F841) the rewrite
adds, and the modules that imported on a machine without torch-xla and no longer do.

Used by tests/test_clean_rewrites.py and benchmarks/clean_rewrites.py (it imports nothing of
pytest). A batch is two trees, the originals and the rewrites, with the same relative paths;
`new_lint` and `breaks_without_torch_xla` take (path, original, rewritten) pairs instead."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

RULES = ("F401", "F811", "F821", "F841")
SUFFIXES = (".py", ".ipynb")  # what ruff reads; only .py files are imported
RUNNER = Path(__file__).with_name("without_torch_xla.py")
SKIPPED = "skipped"  # the runner's word for a rewrite not imported: its original did not import
WORKERS = min(2, os.cpu_count() or 1)  # files imported side by side
_ARGUMENTS_PER_RUN = 2000  # paths per ruff command line


@dataclass(frozen=True)
class Pair:
    path: str  # relative, POSIX: where both files go in their trees
    original: bytes
    rewritten: bytes


@dataclass(frozen=True)
class Lint:
    path: str
    code: str  # a rule code, or "syntax" where ruff cannot parse the file
    message: str  # without line numbers
    line: int  # where the file has it (for the report)
    cell: int | None = None  # a notebook's cell
    # What a finding is matched by, lines apart: its message, or for an unused import the name
    # it binds (the rewrite may change the module: `import torch_xla.runtime as pjrt`).
    subject: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return self.code, self.subject or self.message

    def __str__(self) -> str:
        cell = "" if self.cell is None else f"cell {self.cell}:"
        return f"{self.path}:{cell}{self.line}: {self.code} {self.message}"


@dataclass(frozen=True)
class ImportCheck:
    path: str
    original: str | None  # None: it imported; else why not ("Type: message (line N)")
    rewritten: str | None  # likewise; SKIPPED where the original did not import

    @property
    def broken(self) -> bool:
        """The original imported without torch-xla; the rewrite does not."""
        return self.original is None and self.rewritten is not None

    def __str__(self) -> str:
        return f"{self.path}: {self.rewritten}"


# -- ruff ----------------------------------------------------------------------------------------


def _ruff() -> list[str]:
    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"]
    found = shutil.which("ruff")
    if found is None:
        raise RuntimeError("ruff is not installed (pip install ruff)")
    return [found]


def _normalized(message: str) -> str:
    """The message without the line numbers some carry (F811: "... from line 3")."""
    return re.sub(r"\b(line|cell) \d+", r"\1 _", message)


def _segment(lines: list[str], start: dict[str, int], end: dict[str, int]) -> str:
    """The text ruff's range covers, where it is on one line (ruff counts from 1)."""
    row = start["row"] - 1
    if start["row"] != end["row"] or not 0 <= row < len(lines):
        return ""
    return lines[row][start["column"] - 1 : end["column"] - 1]


def ruff_findings(root: Path, paths: Sequence[str]) -> dict[str, list[Lint]]:
    """What ruff's pyflakes rules find in each file (relative to root), in one run; the
    project's own ruff configuration is ignored (--isolated), so every tree is read alike."""
    found: dict[str, list[Lint]] = {path: [] for path in paths}
    resolved = root.resolve()
    for start in range(0, len(paths), _ARGUMENTS_PER_RUN):
        chunk = list(paths[start : start + _ARGUMENTS_PER_RUN])
        if not chunk:
            continue
        command = [
            *_ruff(), "check", "--isolated", "--no-cache", "--exit-zero",
            "--select", ",".join(RULES), "--output-format", "json", "--", *chunk,
        ]  # fmt: skip
        run = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
        try:
            diagnostics = json.loads(run.stdout or "[]")
        except ValueError as error:
            raise RuntimeError(f"ruff failed ({run.returncode}): {run.stderr[-2000:]}") from error
        lines: dict[str, list[str]] = {}
        for item in diagnostics:
            path = Path(item["filename"]).resolve().relative_to(resolved).as_posix()
            subject = ""
            if item.get("code") == "F401" and item.get("cell") is None:
                if path not in lines:
                    lines[path] = (root / path).read_text("utf-8", "replace").splitlines()
                subject = _segment(lines[path], item["location"], item["end_location"])
            found.setdefault(path, []).append(
                Lint(
                    path,
                    item.get("code") or "syntax",
                    _normalized(item["message"]),
                    item["location"]["row"],
                    item.get("cell"),
                    subject,
                )
            )
    return found


def lint_trees(original: Path, rewritten: Path, paths: Sequence[str]) -> list[Lint]:
    """The findings each rewritten file has that its original did not (a file absent from the
    original tree has none there): one ruff run per tree."""
    paths = [path for path in paths if path.endswith(SUFFIXES)]
    before = ruff_findings(original, [path for path in paths if (original / path).is_file()])
    after = ruff_findings(rewritten, [path for path in paths if (rewritten / path).is_file()])
    new: list[Lint] = []
    for path in paths:
        known = Counter(lint.key for lint in before.get(path, []))
        for lint in after.get(path, []):
            if known[lint.key] > 0:
                known[lint.key] -= 1
            else:
                new.append(lint)
    return new


# -- importing without torch-xla -----------------------------------------------------------------


def _copy(tree: Path, into: Path) -> Path:
    """A copy of the tree under `into`, named as the tree (a tree that is itself a package is
    imported by its folder's name)."""
    name = tree.resolve().name
    target = into / (name if name.isidentifier() else "tree")
    shutil.copytree(
        tree, target, symlinks=True, ignore=shutil.ignore_patterns(".git", "__pycache__")
    )
    return target


def import_trees(
    original: Path,
    rewritten: Path,
    paths: Sequence[str],
    timeout: float = 20.0,
    workers: int = WORKERS,
) -> list[ImportCheck]:
    """Imports each original .py file without torch-xla and, where it imported, its rewrite:
    from copies of both trees, in one process (tests/without_torch_xla.py), `workers` files at
    a time; a file that takes longer than `timeout` seconds did not import."""
    paths = [path for path in paths if path.endswith(".py")]
    with tempfile.TemporaryDirectory(prefix="cleanliness-") as scratch:
        work = Path(scratch)
        (work / "original").mkdir()
        (work / "rewritten").mkdir()
        before = _copy(original, work / "original")
        after = _copy(rewritten, work / "rewritten")
        checked = [path for path in paths if (before / path).is_file() and (after / path).is_file()]
        jobs = {
            "timeout": timeout,
            "workers": workers,
            "pairs": [[str(before / path), str(after / path)] for path in checked],
        }
        run = subprocess.run(
            [sys.executable, str(RUNNER)],
            input=json.dumps(jobs),
            cwd=work,
            capture_output=True,
            text=True,
            check=False,
        )
    results = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    if run.returncode != 0 or len(results) != len(checked):
        raise RuntimeError(f"the import runner failed ({run.returncode}): {run.stderr[-2000:]}")
    return [
        ImportCheck(path, result["original"], result["rewritten"])
        for path, result in zip(checked, results, strict=True)
    ]


# -- pairs of sources ----------------------------------------------------------------------------


def write_tree(root: Path, files: Iterable[tuple[str, bytes]]) -> None:
    for path, data in files:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _pair_trees(pairs: Sequence[Pair], scratch: Path) -> tuple[Path, Path]:
    original, rewritten = scratch / "original", scratch / "rewritten"
    write_tree(original, ((pair.path, pair.original) for pair in pairs))
    write_tree(rewritten, ((pair.path, pair.rewritten) for pair in pairs))
    return original, rewritten


def new_lint(pairs: Sequence[Pair]) -> list[Lint]:
    """The pyflakes findings the rewrites add to their originals."""
    with tempfile.TemporaryDirectory(prefix="cleanliness-") as scratch:
        original, rewritten = _pair_trees(pairs, Path(scratch))
        return lint_trees(original, rewritten, [pair.path for pair in pairs])


def import_checks(
    pairs: Sequence[Pair], timeout: float = 20.0, workers: int = WORKERS
) -> list[ImportCheck]:
    with tempfile.TemporaryDirectory(prefix="cleanliness-") as scratch:
        original, rewritten = _pair_trees(pairs, Path(scratch))
        return import_trees(original, rewritten, [pair.path for pair in pairs], timeout, workers)


def breaks_without_torch_xla(
    pairs: Sequence[Pair], timeout: float = 20.0, workers: int = WORKERS
) -> list[ImportCheck]:
    """The rewrites that no longer import without torch-xla where their originals did."""
    return [check for check in import_checks(pairs, timeout, workers) if check.broken]
