"""Scan speed where the flags live: a tree made from the repositories this tool is for, scanned by
xlamigrate, `ruff check --select E,F` and `grep -rlE`, side by side (median of --repeat runs after
one warm-up). Measures only; the tree is built in a temporary folder and never committed.

Each source is a local copy of a public repository: a git directory (a mirror or a clone's
`.git`: the regular files of its HEAD are exported, as `git archive` would, less any blob a
partial mirror lacks) or a plain folder (copied). By default the
sources are the repositories the figures in docs/performance.md were measured on, looked up
under --mirrors as `<owner>+<name>/repo` (the layout the team's `fetch` tool writes):

    python benchmarks/scan_neuron_tree.py --mirrors /work/.mirror [--repeat 5]
    python benchmarks/scan_neuron_tree.py --source xla=~/src/xla/.git --source samples=~/samples
    python benchmarks/scan_neuron_tree.py ... --findings before.json   # the findings, to compare

`--findings FILE` writes xlamigrate's JSON findings (paths relative to the tree), so a change can
be checked to find the same things: run it before and after, then `cmp` the files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from measured import measured_checkout, run_measured

REPOSITORIES = (
    "pytorch/xla",
    "huggingface/accelerate",
    "aws-neuron/neuronx-distributed",
    "aws-neuron/neuronx-distributed-training",
    "huggingface/optimum-neuron",
    "aws-neuron/aws-neuron-samples",
    "facebookresearch/fairseq",
    "pytorch/ao",
)
FLAG_PATTERN = "XLA_USE_BF16|XLA_DOWNCAST_BF16"


def sources(arguments: argparse.Namespace) -> dict[str, Path]:
    named: dict[str, Path] = {}
    for given in arguments.source or ():
        name, _, path = given.partition("=")
        if not path:
            sys.exit(f"--source takes NAME=PATH, not {given!r}")
        named[name] = Path(path).expanduser()
    if not named:
        if arguments.mirrors is None:
            sys.exit("give --mirrors DIR (with <owner>+<name>/repo git dirs) or --source NAME=PATH")
        for repository in REPOSITORIES:
            mirror = arguments.mirrors / repository.replace("/", "+") / "repo"
            if not mirror.exists():
                sys.exit(f"{mirror}: missing; fetch {repository} first (or pass --source)")
            named[repository.replace("/", "+")] = mirror
    return named


def build_tree(named: dict[str, Path], tree: Path) -> None:
    for name, path in named.items():
        target = tree / name
        if (path / "HEAD").is_file() and (path / "objects").is_dir():  # a git directory
            export_head(path, target)
        else:
            shutil.copytree(path, target, symlinks=True, ignore=shutil.ignore_patterns(".git"))


def export_head(git_dir: Path, target: Path) -> None:
    """The regular files of HEAD, as `git archive` would give them, less the blobs a partial
    mirror lacks (large data files): `git archive` stops at the first of those."""
    git = ["git", f"--git-dir={git_dir}"]
    listing = subprocess.run(
        [*git, "ls-tree", "-r", "-z", "HEAD"], capture_output=True, check=True
    ).stdout.split(b"\0")
    entries = []
    for entry in filter(None, listing):
        meta, _, path = entry.partition(b"\t")
        mode, kind, sha = meta.split()
        if kind == b"blob" and mode in (b"100644", b"100755"):
            entries.append((sha, os.fsdecode(path)))
    batch = subprocess.run(
        [*git, "cat-file", "--batch"], input=b"".join(sha + b"\n" for sha, _ in entries),
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    offset = 0
    for _, path in entries:
        header_end = batch.index(b"\n", offset)
        header = batch[offset:header_end].split()
        offset = header_end + 1
        if header[-1] == b"missing":
            continue
        size = int(header[2])
        destination = target / path
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(batch[offset : offset + size])
        offset += size + 1  # the object, then a newline


def describe(tree: Path) -> str:
    files = [p for p in tree.rglob("*") if p.is_file() and not p.is_symlink()]
    python = [p for p in files if p.suffix == ".py"]
    size = sum(p.stat().st_size for p in files) / 1e6
    flagged = subprocess.run(
        ["grep", "-rlE", FLAG_PATTERN, "--include=*.py", "."], cwd=tree, capture_output=True,
        text=True, check=False,
    ).stdout.split()  # fmt: skip
    flagged_bytes = sum((tree / p).stat().st_size for p in flagged) / 1e6
    return (
        f"{len(files)} files ({size:.0f} MB), {len(python)} Python files, {len(flagged)} of "
        f"them naming a flag ({flagged_bytes:.2f} MB)"
    )


def median_seconds(command: list[str], cwd: Path, repeat: int) -> tuple[float, float]:
    """Median wall and median CPU (its processes' user+sys) seconds, after one warm-up run."""
    walls, cpus = [], []
    for attempt in range(repeat + 1):
        result, wall, cpu = run_measured(command, cwd)
        if result.returncode not in (0, 1):
            sys.exit(f"{' '.join(command)} failed:\n{result.stderr.decode()[-2000:]}")
        if attempt:  # the first run warms the page cache
            walls.append(wall)
            cpus.append(cpu)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, help="folder of <owner>+<name>/repo git dirs")
    parser.add_argument("--source", action="append", help="NAME=PATH (git dir or folder)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="build the tree here and keep it")
    parser.add_argument("--findings", type=Path, help="write xlamigrate's JSON findings here")
    arguments = parser.parse_args()
    named = sources(arguments)
    holder = None
    if arguments.keep is not None:
        tree = arguments.keep
        if tree.exists():
            shutil.rmtree(tree)
    else:
        holder = tempfile.TemporaryDirectory(prefix="xlamigrate-neuron-tree-")
        tree = Path(holder.name)
    try:
        build_tree(named, tree)
        print(measured_checkout())
        print(f"tree: {describe(tree)}, from {len(named)} repositories")
        xlamigrate = [sys.executable, "-m", "xlamigrate.cli", "scan", "--exit-zero", "."]
        commands = {
            "grep -rlE (floor)": ["grep", "-rlE", FLAG_PATTERN, "."],
            "ruff check --select E,F": [_ruff(), "check", "--no-cache", "--exit-zero",
                                        "--select", "E,F", "."],
            "xlamigrate scan": xlamigrate,
        }  # fmt: skip
        timed = {label: median_seconds(c, tree, arguments.repeat) for label, c in commands.items()}
        ruff_wall = timed["ruff check --select E,F"][0]
        print(f"{'command':<26} {'wall s':>8} {'cpu s':>8} {'vs ruff':>8}")
        for label, (wall, cpu) in timed.items():
            print(f"{label:<26} {wall:>8.2f} {cpu:>8.2f} {wall / ruff_wall:>7.2f}x")
        if arguments.findings is not None:
            result = subprocess.run(
                [*xlamigrate[:-1], "--format", "json", "."], cwd=tree, capture_output=True,
                text=True, check=False,
            )  # fmt: skip
            document = json.loads(result.stdout)
            document.pop("version", None)
            arguments.findings.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
            count = len(document["findings"])
            print(f"findings: {count} in {document['files_scanned']} files scanned, written to "
                  f"{arguments.findings}")  # fmt: skip
    finally:
        if holder is not None:
            holder.cleanup()


def _ruff() -> str:
    found = shutil.which("ruff")
    if found is None:
        sys.exit("ruff is not installed: pip install ruff")
    return found


if __name__ == "__main__":
    main()
