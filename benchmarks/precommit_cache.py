"""What the cache (`.xlamigrate_cache/`) saves a pre-commit run: `xlamigrate scan <one changed
file>` from a repository's root, in a subprocess, without the cache, cold (cache emptied) and warm
after that one file changed, side by side; and the same for `scan .` (the whole tree, which is
what a run analyses once the project's root is walked whatever paths are named). Measures and
prints; asserts nothing about time. It does check that the JSON output is the same each way.
Cold: no cache folder (`.xlamigrate_cache/` removed); warm: the cache the cold run just left,
and one file changed since (a pre-commit hook's second run). The three are timed in turns (one
of each per turn, medians over the turns), so a burst of other work slows them alike. With
`ruff` on PATH, `ruff check` of the whole tree, cold (no .ruff_cache) and warm after the same
change, is the anchor. The children run with Python's
bytecode cache on (an installed package has its .pyc files), even where the environment sets
PYTHONDONTWRITEBYTECODE: compiling xlamigrate's modules on every start is no cost a user pays.

The children run the `xlamigrate` console script, as a pre-commit hook does (`entry:
xlamigrate`), where the interpreter's folder holds one; else `python -m xlamigrate`. With
--hook-env, they run in a virtual environment made as pre-commit makes a hook's: its own
site-packages, which here holds one `.pth` naming the folders this interpreter imports
xlamigrate and its dependencies from (as path lines: no `.pth` of those folders is run; a
sandbox's or a distribution's start-up hooks are not the hook's to pay), and the console script
pip writes for the `xlamigrate` entry point.

The repository is the Neuron tree of scan_neuron_tree.py (its 3,052 Python files, from local
mirrors) or, without --mirrors/--source, a generated tree of --files Python modules (1% of them
setting a flag, some started by a launcher). Built in a temporary folder (or --keep DIR), with a
`git init` so that it is a repository as pre-commit sees it.

    python benchmarks/precommit_cache.py --mirrors /work/.mirror [--repeat 3]
    python benchmarks/precommit_cache.py [--files 3000] [--hook-env]
"""

from __future__ import annotations

import argparse
import os
import shutil
import site
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scan_neuron_tree  # (sibling scripts, not a package)
import scan_throughput
from measured import measured_checkout, run_measured

CACHE = ".xlamigrate_cache"
LAUNCHER = (
    '#!/bin/bash\n# precision switch\nif [ "$1" = BF16 ]; then\n  export XLA_USE_BF16=1\nfi\n'
)


def build(arguments: argparse.Namespace, tree: Path) -> Path:
    """The tree, and the file a commit changes: a Python file that names a flag."""
    if arguments.mirrors is not None or arguments.source:
        scan_neuron_tree.build_tree(scan_neuron_tree.sources(arguments), tree)
    else:
        tree.mkdir(parents=True, exist_ok=True)
        scan_throughput.make_tree(tree, arguments.files, 0.01)
        for index, module in enumerate(sorted(tree.glob("pkg00*/module_*.py"))[:5]):
            (tree / f"run_{index}.sh").write_text(LAUNCHER + f"python {module.relative_to(tree)}\n")
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    flagged = subprocess.run(
        ["grep", "-rlE", scan_neuron_tree.FLAG_PATTERN, "--include=*.py", "."],
        cwd=tree, capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    return tree / sorted(flagged)[0]


_ENVIRONMENT = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_once(command: list[str], cwd: Path) -> tuple[float, float, str]:
    """Wall and CPU seconds (its processes' user+sys) of one run, and its standard output."""
    result, wall, cpu = run_measured(command, cwd, _ENVIRONMENT)
    if result.returncode not in (0, 1):
        sys.exit(f"{' '.join(command)} failed:\n{result.stderr.decode()[-2000:]}")
    return wall, cpu, result.stdout.decode()


def in_turns(
    variants: list[tuple[list[str], Callable[[], None]]], cwd: Path, repeat: int
) -> list[tuple[float, float, str]]:
    """Each variant (its command, what to do before it) run once per turn, `repeat` turns (a
    burst of other work on the box slows the variants of a turn alike): each one's median wall
    and CPU seconds, and its last output."""
    runs: list[list[tuple[float, float, str]]] = [[] for _ in variants]
    for _ in range(repeat):
        for (command, before), kept in zip(variants, runs, strict=True):
            before()
            kept.append(run_once(command, cwd))
    return [
        (
            statistics.median(wall for wall, _, _ in kept),
            statistics.median(cpu for _, cpu, _ in kept),
            kept[-1][2],
        )
        for kept in runs
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, help="folder of <owner>+<name>/repo git dirs")
    parser.add_argument("--source", action="append", help="NAME=PATH (git dir or folder)")
    parser.add_argument("--files", type=int, default=3000, help="generated tree: Python files")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="build the tree here and keep it")
    parser.add_argument(
        "--hook-env", action="store_true", help="run xlamigrate from a hook-like venv"
    )
    arguments = parser.parse_args()
    holder = None
    if arguments.keep is not None:
        tree = arguments.keep.resolve()
        shutil.rmtree(tree, ignore_errors=True)
    else:
        holder = tempfile.TemporaryDirectory(prefix="xlamigrate-precommit-")
        tree = Path(holder.name)
    environment = tempfile.TemporaryDirectory(prefix="xlamigrate-hook-env-")
    try:
        python = hook_env(Path(environment.name)) if arguments.hook_env else sys.executable
        changed = build(arguments, tree)
        where = changed.relative_to(tree)
        print(measured_checkout())
        print(f"tree: {scan_neuron_tree.describe(tree)}; the commit changes {where}")
        print(f"command: {' '.join(xlamigrate_command(python))}")
        measure(tree, changed, arguments.repeat, python)
    finally:
        environment.cleanup()
        if holder is not None:
            holder.cleanup()


def hook_env(folder: Path) -> str:
    """A venv whose site-packages names, by path lines, where this interpreter finds xlamigrate
    and its dependencies; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    own = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    import xlamigrate

    checkout = Path(xlamigrate.__file__).resolve().parent.parent
    folders = [str(checkout), *site.getsitepackages()]
    (Path(own) / "_xlamigrate_hook.pth").write_text("\n".join(folders) + "\n")
    script = folder / "bin" / "xlamigrate"  # (as pip writes a console script)
    script.write_text(
        f"#!{python}\n# -*- coding: utf-8 -*-\nimport re\nimport sys\n"
        "from xlamigrate.cli import entry\nif __name__ == '__main__':\n"
        "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
        "    sys.exit(entry())\n"
    )
    script.chmod(0o755)
    return str(python)


def xlamigrate_command(python: str) -> list[str]:
    """The console script beside `python` (what a hook runs), else `python -m xlamigrate`."""
    script = Path(python).parent / "xlamigrate"
    return [str(script)] if script.is_file() else [python, "-m", "xlamigrate"]


def measure(tree: Path, changed: Path, repeat: int, python: str) -> None:
    xlamigrate = xlamigrate_command(python)
    scan = [*xlamigrate, "scan", "--exit-zero", "--format", "json"]
    touches = 0

    def emptied() -> None:
        shutil.rmtree(tree / CACHE, ignore_errors=True)

    def one_file_changed() -> None:
        nonlocal touches
        touches += 1
        with changed.open("a", encoding="utf-8") as stream:
            stream.write(f"# edited {touches}\n")

    warm_up = [*scan, "--no-cache", str(changed.relative_to(tree))]
    run_once(warm_up, tree)  # (writes the .pyc files, reads the tree once)
    version = [*xlamigrate, "--version"]
    (startup,) = in_turns([(version, lambda: None)], tree, repeat)
    print(f"start-up (xlamigrate --version): {startup[0]:.3f} s wall, {startup[1]:.3f} s CPU")
    columns = ("no cache", "cold cache", "warm, 1 changed")
    print(f"{'command':<22} " + " ".join(f"{c:>16}" for c in columns) + f" {'warm/cold':>10}")
    for label, target in (("scan <changed file>", str(changed.relative_to(tree))), ("scan .", ".")):
        # In each turn: without the cache, then cold (the cache emptied), then warm (the cache
        # the cold run left: the second run of a pre-commit hook), one file changed before each.
        plain, cold, warm = in_turns(
            [
                ([*scan, "--no-cache", target], one_file_changed),
                ([*scan, target], lambda: (emptied(), one_file_changed())),
                ([*scan, target], one_file_changed),
            ],
            tree,
            repeat,
        )
        same = run_once([*scan, "--no-cache", target], tree)[2] == warm[2]
        report(
            label,
            plain,
            cold,
            warm,
            f"; the same output without the cache: {'yes' if same else 'NO'}",
        )
    ruff = shutil.which("ruff")
    if ruff is not None:
        check = [ruff, "check", "--exit-zero", "--quiet", "--select", "E,F", "."]

        def ruff_emptied() -> None:
            shutil.rmtree(tree / ".ruff_cache", ignore_errors=True)

        plain, cold, warm = in_turns(
            [
                ([*check, "--no-cache"], one_file_changed),
                (check, lambda: (ruff_emptied(), one_file_changed())),
                (check, one_file_changed),
            ],
            tree,
            repeat,
        )
        report("ruff check .", plain, cold, warm, "")


def report(
    label: str,
    plain: tuple[float, float, str],
    cold: tuple[float, float, str],
    warm: tuple[float, float, str],
    note: str,
) -> None:
    cells = [f"{wall:6.2f}s/{cpu:5.2f}s" for wall, cpu, _ in (plain, cold, warm)]
    print(
        f"{label:<22} " + " ".join(f"{cell:>16}" for cell in cells),
        f"{warm[0] / cold[0]:>9.3f}x  (wall; CPU {warm[1] / cold[1]:.3f}x{note})",
    )


if __name__ == "__main__":
    main()
