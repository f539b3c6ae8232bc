"""Start-up cost of the CLI where users feel it: `xlamigrate --version`, a scan of one small file
without a flag (the common commit: libcst is never imported) and with one, and the latter
through the pre-commit hook (`pre-commit run xlamigrate --files one.py`, the hook environment
installed beforehand, as on every commit after the first). Also lists the heaviest imports of
a one-file scan. Measures only; asserts no timing.

    python benchmarks/startup.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL = 'import os\n\nos.environ["XLA_USE_BF16"] = "1"\nprint("training")\n'
CLEAN = 'import os\n\nprint("training")\n'  # no flag named: nothing to parse, libcst not loaded
HOOK_CONFIG = """repos:
-   repo: {root}
    rev: {rev}
    hooks:
    -   id: xlamigrate
"""


def timed(command: list[str], cwd: Path, repeat: int, env: dict[str, str] | None = None) -> float:
    """Median wall seconds of `repeat` runs (after one warm-up run)."""
    samples = []
    for attempt in range(repeat + 1):
        started = time.perf_counter()
        subprocess.run(command, cwd=cwd, env=env, capture_output=True, check=False)
        if attempt:
            samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def heaviest_imports(cwd: Path, count: int = 8) -> list[tuple[int, str]]:
    """(cumulative microseconds, module) of the slowest imports of a one-file scan."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "xlamigrate.cli", "scan", "one.py"],
        cwd=cwd, capture_output=True, text=True, check=False,
    )  # fmt: skip
    rows = []
    for line in result.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \|(\s*)(\S+)", line)
        if match and len(match[2]) == 1:  # one space: imported by the program, not a module
            rows.append((int(match[1]), match[3]))
    return sorted(rows, reverse=True)[:count]


def hook_times(folder: Path, repeat: int) -> dict[str, float]:
    """The scan hook on one file through the real pre-commit, and the hook environment's own
    CLI (its dependencies only) on the clean and flagged file; empty without git or pre-commit."""
    if shutil.which("git") is None:
        return {}
    try:
        import pre_commit  # noqa: F401
    except ImportError:
        return {}
    rev = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    repo = folder / "repo"
    repo.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "b@example.com"],
                 ["config", "user.name", "bench"]):  # fmt: skip
        subprocess.run(["git", *args], cwd=repo, check=True)
    (repo / "one.py").write_text(SMALL)
    (repo / ".pre-commit-config.yaml").write_text(HOOK_CONFIG.format(root=ROOT, rev=rev))
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    env = {**os.environ, "PRE_COMMIT_HOME": str(folder / "home")}
    command = [sys.executable, "-m", "pre_commit", "run", "xlamigrate", "--files", "one.py"]
    subprocess.run(command, cwd=repo, env=env, capture_output=True, check=False)  # installs
    times = {"pre-commit run xlamigrate --files one.py": timed(command, repo, repeat, env)}
    for python in sorted((folder / "home").glob("repo*/py_env-*/bin/python"))[:1]:
        (repo / "clean.py").write_text(CLEAN)
        for name in ("clean.py", "one.py"):
            hook_cli = [str(python), "-m", "xlamigrate.cli", "scan", name]
            times[f"hook env: xlamigrate scan {name}"] = timed(hook_cli, repo, repeat)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    cli = [sys.executable, "-m", "xlamigrate.cli"]
    with tempfile.TemporaryDirectory(prefix="xlamigrate-startup-") as scratch:
        folder = Path(scratch)
        (folder / "one.py").write_text(SMALL)
        (folder / "clean.py").write_text(CLEAN)
        figures = {
            "python -c pass": timed([sys.executable, "-c", "pass"], folder, args.repeat),
            "xlamigrate --version": timed([*cli, "--version"], folder, args.repeat),
            "xlamigrate scan clean.py (no flag)": timed(
                [*cli, "scan", "clean.py"], folder, args.repeat
            ),
            "xlamigrate scan one.py (a flag)": timed([*cli, "scan", "one.py"], folder, args.repeat),
        }
        imports = heaviest_imports(folder)  # (before the hook's clone and venv land in it)
        hook = hook_times(folder, args.repeat)
    print(f"median of {args.repeat} runs (python {sys.version.split()[0]}, {os.cpu_count()} CPUs)")
    for label, seconds in figures.items():
        print(f"  {label:<44} {seconds * 1000:7.0f} ms")
    if not hook:
        print("  pre-commit hook: skipped (needs git and pre-commit)")
    for label, seconds in hook.items():
        print(f"  {label:<44} {seconds * 1000:7.0f} ms")
    print("heaviest top-level imports of `xlamigrate scan one.py` (cumulative):")
    for microseconds, module in imports:
        print(f"  {module:<44} {microseconds / 1000:7.1f} ms")


if __name__ == "__main__":
    main()
