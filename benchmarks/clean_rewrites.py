"""Is a real repository's rewrite as clean as the repository (issue 34)? Rewrites a copy of it in
each mode with the CLI and prints, mode by mode: the files rewritten; the Python files (and
notebooks) with pyflakes findings (ruff F401, F811, F821, F841) the original did not have; the
`if ...: pass` blocks the rewrite left; the modules that imported without torch-xla before the
rewrite and fail after, with the exception. Then each finding: file, line, the rewritten line
and a category. The checks are tests/cleanliness.py's; the repository is never touched.

    python benchmarks/clean_rewrites.py --repo /tmp/aws-neuron-samples [--subdir PATH]
        [--mode full-bf16 ...] [--unsafe-fixes] [--timeout 20] [--source CHECKOUT]

Give it folders holding copies of public repositories (never committed here), for example a
tree from a bare mirror: `git --git-dir=MIRROR archive HEAD | tar -x -C /tmp/x`.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/ is a sibling

from tests.cleanliness import (
    SUFFIXES,
    ImportCheck,
    Lint,
    import_trees,
    lint_trees,
)

MODES = ("full-bf16", "fp32-copy", "autocast")
ABSENT = re.compile(r"No module named '(torch_xla|torch_neuronx|neuronx_distributed|libneuronxla)")
LINT_CATEGORIES = {
    "F401": "unused import left",
    "F821": "undefined name",
    "F811": "other: redefinition of an unused name",
    "F841": "other: local variable assigned, never used",
    "syntax": "other: syntax error",
}


@dataclass(frozen=True)
class EmptyIf:
    """An `if` (or `elif`) whose whole body is `pass`, with no else."""

    path: str
    line: int
    condition: str


@dataclass
class ModeResult:
    mode: str
    exit_code: int = 0
    seconds: float = 0.0
    rewritten: list[str] = field(default_factory=list)
    lint: list[Lint] = field(default_factory=list)
    empty_ifs: list[EmptyIf] = field(default_factory=list)
    imports: list[ImportCheck] = field(default_factory=list)
    tree: Path = Path()

    @property
    def broken(self) -> list[ImportCheck]:
        return [check for check in self.imports if check.broken]


def files(tree: Path) -> dict[str, bytes]:
    return {
        path.relative_to(tree).as_posix(): path.read_bytes()
        for path in tree.rglob("*")
        if path.is_file() and ".git" not in path.relative_to(tree).parts
    }


def empty_ifs(path: str, data: bytes) -> list[EmptyIf]:
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError):
        return []
    return [
        EmptyIf(path, node.lineno, ast.unparse(node.test))
        for node in ast.walk(tree)
        if isinstance(node, ast.If)
        and all(isinstance(statement, ast.Pass) for statement in node.body)
        and not node.orelse
    ]


def new_empty_ifs(path: str, before: bytes | None, after: bytes) -> list[EmptyIf]:
    known = Counter(found.condition for found in empty_ifs(path, before or b""))
    new = []
    for found in empty_ifs(path, after):
        if known[found.condition] > 0:
            known[found.condition] -= 1
        else:
            new.append(found)
    return new


def rewrite(original: Path, work: Path, mode: str, args: argparse.Namespace) -> ModeResult:
    tree = work / mode / original.name
    shutil.copytree(original, tree, symlinks=True)
    command = [sys.executable, "-m", "xlamigrate", "rewrite", "--mode", mode]
    if args.unsafe_fixes:
        command.append("--unsafe-fixes")
    command.append(args.subdir or ".")
    environment = dict(os.environ)
    if args.source is not None:  # another checkout's xlamigrate (a baseline)
        paths = [str(args.source.resolve()), environment.get("PYTHONPATH", "")]
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    started = time.monotonic()
    run = subprocess.run(
        command, cwd=tree, env=environment, capture_output=True, text=True, check=False
    )
    result = ModeResult(mode, run.returncode, tree=tree)
    if run.returncode == 2:
        print(f"{mode}: xlamigrate exited 2: {run.stderr[-1500:]}", file=sys.stderr)
    before, after = files(original), files(tree)
    result.rewritten = sorted(path for path, data in after.items() if before.get(path) != data)
    sources = [path for path in result.rewritten if path.endswith(SUFFIXES)]
    result.lint = lint_trees(original, tree, sources)
    for path in sources:
        if path.endswith(".py"):
            result.empty_ifs += new_empty_ifs(path, before.get(path), after[path])
    result.imports = import_trees(original, tree, sources, args.timeout, args.workers)
    result.seconds = time.monotonic() - started
    return result


def line_of(tree: Path, path: str, line: int) -> str:
    try:
        return tree.joinpath(path).read_text("utf-8", "replace").splitlines()[line - 1].strip()
    except (OSError, IndexError):
        return ""


def import_category(check: ImportCheck) -> str:
    error = check.rewritten or ""
    if ABSENT.search(error):
        return "conditional torch_xla import made unconditional"
    if error.startswith("NameError"):
        return "undefined name"
    return "other"


def report(repo: Path, results: list[ModeResult], verbose: bool) -> None:
    rows: list[tuple[str, Callable[[ModeResult], str]]] = [
        ("files rewritten", lambda r: str(len(r.rewritten))),
        ("xlamigrate exit code", lambda r: str(r.exit_code)),
        ("seconds (rewrite and checks)", lambda r: f"{r.seconds:.0f}"),
        ("Python files rewritten", lambda r: str(sum(p.endswith(".py") for p in r.rewritten))),
        ("notebooks rewritten", lambda r: str(sum(p.endswith(".ipynb") for p in r.rewritten))),
        ("files with new ruff findings", lambda r: str(len({lint.path for lint in r.lint}))),
        ("new ruff findings", lambda r: str(len(r.lint))),
        *(
            (f"  {code}", lambda r, code=code: str(sum(lint.code == code for lint in r.lint)))
            for code in LINT_CATEGORIES
        ),
        ("files with new `if ...: pass`", lambda r: str(len({f.path for f in r.empty_ifs}))),
        ("rewritten modules imported", lambda r: str(len(r.imports))),
        ("  originals importing w/o torch-xla", lambda r: str(sum(c.original is None for c in r.imports))),  # noqa: E501
        ("  rewrites that no longer import", lambda r: str(len(r.broken))),
    ]  # fmt: skip
    print(f"\n== {repo}")
    width = max(len(label) for label, _ in rows) + 2
    print("".ljust(width) + "".join(result.mode.rjust(12) for result in results))
    for label, value in rows:
        print(label.ljust(width) + "".join(value(result).rjust(12) for result in results))
    for result in results:
        problems = [
            *(
                (lint.path, lint.line, LINT_CATEGORIES.get(lint.code, "other"), str(lint))
                for lint in result.lint
            ),
            *(
                (f.path, f.line, "`if ...: pass`", f"{f.path}:{f.line}: if {f.condition}: pass")
                for f in result.empty_ifs
            ),
            *(
                (*_error_place(c), import_category(c), f"{c.path}: {c.rewritten}")
                for c in result.broken
            ),
        ]
        unimported = Counter(
            re.sub(r" \((line|from) [^()]*\)$", "", c.original)[:90]
            for c in result.imports
            if c.original is not None
        )
        if unimported:
            print(f"\n-- {result.mode}: originals that did not import without torch-xla")
            for cause, count in unimported.most_common(None if verbose else 8):
                print(f"{count:5} {cause}")
        if verbose:
            for check in result.imports:
                print(f"   {check.path}: {check.original or 'imported'}")
        if not problems:
            continue
        print(f"\n-- {result.mode}: {len(problems)} problems")
        for path, line, category, text in sorted(problems):
            print(f"[{category}] {text}")
            if line:
                print(f"    {path}:{line}: {line_of(result.tree, path, line)}")


def _error_place(check: ImportCheck) -> tuple[str, int]:
    """Where the rewritten module's error came from: the file (the module itself, or the
    project's module it imports that raised) and the line."""
    error = check.rewritten or ""
    origin = re.search(r"from ([^ ]+):(\d+)\)$", error)
    if origin:
        path = (Path(check.path).parent / origin.group(1)).as_posix()
        return os.path.normpath(path), int(origin.group(2))
    found = re.search(r"\(line (\d+)\)$", error)
    return check.path, int(found.group(1)) if found else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help="the repository's folder")
    parser.add_argument("--subdir", help="rewrite only this folder of it")
    parser.add_argument("--mode", action="append", choices=MODES, help="(default: all three)")
    parser.add_argument("--unsafe-fixes", action="store_true")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per import")
    parser.add_argument("--workers", type=int, default=2, help="files imported side by side")
    parser.add_argument("--verbose", action="store_true", help="list every module imported")
    parser.add_argument(
        "--source", type=Path, help="run xlamigrate from this checkout (default: the installed one)"
    )
    args = parser.parse_args()
    repo = args.repo.resolve()
    name = re.sub(r"\W", "_", repo.name)
    name = name if name.isidentifier() else f"_{name}"  # a repository that is a package
    with tempfile.TemporaryDirectory(prefix="clean-rewrites-") as scratch:
        work = Path(scratch)
        original = work / "original" / name
        shutil.copytree(repo, original, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        results = [rewrite(original, work, mode, args) for mode in args.mode or MODES]
        report(repo, results, args.verbose)


if __name__ == "__main__":
    main()
