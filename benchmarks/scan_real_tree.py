"""Scan throughput on real code: the `.py` files of the installed torch package (copied to a
temporary tree, plus a few injected flag-setting files), against the tools users know:

- `grep -rlE 'XLA_USE_BF16|XLA_DOWNCAST_BF16'`: the physical floor (reading the bytes);
- `ruff check --select E9`: a fast full-tree pass (ruff parses every file).

Prints wall times (median of --repeat runs, one warm-up), files per second and the ratios, and
how many files xlamigrate parsed (only those that mention a flag). Measures only.

    python benchmarks/scan_real_tree.py [--repeat 5] [--inject 10]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLAGGED = 'import os\n\nos.environ["XLA_USE_BF16"] = "1"  # injected file {index}\n'


def torch_tree() -> Path:
    spec = importlib.util.find_spec("torch")  # located, not imported
    if spec is None or not spec.submodule_search_locations:
        sys.exit("torch is not installed: pip install -e '.[runtime]'")
    return Path(next(iter(spec.submodule_search_locations)))


def copy_python_files(source: Path, target: Path) -> int:
    count = 0
    for folder, _, names in os.walk(source):
        for name in names:
            if name.endswith(".py"):
                relative = Path(folder).relative_to(source) / name
                (target / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(Path(folder) / name, target / relative)
                count += 1
    return count


def median_seconds(command: list[str], cwd: Path, repeat: int) -> float:
    samples = []
    for attempt in range(repeat + 1):
        started = time.perf_counter()
        result = subprocess.run(command, cwd=cwd, capture_output=True, check=False)
        if result.returncode not in (0, 1):
            sys.exit(f"{' '.join(command)} failed:\n{result.stderr.decode()[-2000:]}")
        if attempt:  # the first run warms the page cache
            samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def parsed_files(tree: Path) -> tuple[int, int, int]:
    """(files scanned, files parsed, findings) of one in-process scan."""
    from xlamigrate.catalogue import load_catalogue
    from xlamigrate.config import Settings
    from xlamigrate.engine import scan_paths

    report = scan_paths([tree], Settings(root=tree), load_catalogue())
    return report.files_scanned, report.files_parsed, len(report.findings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--inject", type=int, default=10, help="flag-setting files to add")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="xlamigrate-realtree-") as scratch:
        tree = Path(scratch) / "torch"
        files = copy_python_files(torch_tree(), tree)
        for index in range(args.inject):
            (tree / f"injected_{index}.py").write_text(FLAGGED.format(index=index))
        files += args.inject
        megabytes = sum(p.stat().st_size for p in tree.rglob("*.py")) / 1e6
        commands = {
            "grep -rlE (floor)": ["grep", "-rlE", "XLA_USE_BF16|XLA_DOWNCAST_BF16", "torch"],
            "ruff check --select E9": ["ruff", "check", "--select", "E9", "--no-cache",
                                       "--exit-zero", "--quiet", "torch"],
            "xlamigrate scan": [sys.executable, "-m", "xlamigrate.cli", "scan", "--exit-zero",
                                "torch"],
            "xlamigrate scan -j 1": [sys.executable, "-m", "xlamigrate.cli", "scan",
                                     "--exit-zero", "-j", "1", "torch"],
        }  # fmt: skip
        if shutil.which("ruff") is None:
            del commands["ruff check --select E9"]
        # Run from the tree's parent: inside it, torch's own `__future__.py` would shadow Python's.
        times = {label: median_seconds(command, tree.parent, args.repeat) for label, command in
                 commands.items()}  # fmt: skip
        scanned, parsed, findings = parsed_files(tree)
    print(f"torch tree: {files} .py files, {megabytes:.1f} MB ({os.cpu_count()} CPUs); "
          f"median of {args.repeat}")  # fmt: skip
    reference = times.get("ruff check --select E9")
    for label, seconds in times.items():
        ratio = f"{seconds / reference:5.2f}x ruff" if reference else ""
        print(f"  {label:<26} {seconds:7.3f} s  {files / seconds:9.0f} files/s  {ratio}")
    print(f"xlamigrate: {scanned} files scanned, {parsed} parsed, {findings} findings")


if __name__ == "__main__":
    main()
