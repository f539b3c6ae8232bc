"""How much of what real launchers and notebooks set does `xlamigrate scan` report?

Give it folders holding copies of public repositories (never committed here), for example every
version of every shell script and notebook that ever named a flag in aws-neuron-samples,
neuronx-distributed and neuronx-nemo-megatron. For each folder it prints: the shell files
(.sh, .slurm, .sbatch) and notebooks that name a flag; the lines that set one (an assignment
`XLA_USE_BF16=...` or an export of it, comments excluded; in notebooks the lines of code cells
that assign it, `%env` it or write `os.environ[...]`); how many of those lines have a finding;
the files reported as unparsable, and how many of those `bash -n` accepts (it must be none).

    python benchmarks/real_launchers.py /tmp/real/aws-neuron-samples /tmp/hist
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from xlamigrate.catalogue import load_catalogue
from xlamigrate.config import Settings
from xlamigrate.discover import display_path
from xlamigrate.engine import scan_paths

NAMES = r"(?:XLA_USE_BF16|XLA_DOWNCAST_BF16)"
FLAGS = rf"(?<![A-Za-z0-9_]){NAMES}"
SHELL_SETS = re.compile(rf"{FLAGS}\+?=|\bexport\b[^#\n]*{FLAGS}")
PRINTS = re.compile(r"\s*(?:echo|printf)\b")  # a flag's name in a message sets nothing
NOTEBOOK_SETS = re.compile(
    rf"{FLAGS}\+?=|%(?:set_)?env\s+{FLAGS}|environ\s*\[\s*['\"]{NAMES}|{FLAGS}['\"]\s*[,:]"
)
SHELL_SUFFIXES = (".sh", ".slurm", ".sbatch")


def setting_lines(path: Path) -> list[tuple[int | None, int]]:
    """(cell, line) of each line that sets a flag (cell None for a shell file)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".ipynb":
        try:
            cells = json.loads(text)["cells"]
        except (ValueError, KeyError, TypeError):
            return []
        found = []
        for index, cell in enumerate(cells):
            if cell.get("cell_type") != "code":
                continue
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else source
            for number, line in enumerate(source.splitlines(), start=1):
                if not line.lstrip().startswith("#") and NOTEBOOK_SETS.search(line):
                    found.append((index, number))
        return found
    return [
        (None, number)
        for number, line in enumerate(text.splitlines(), start=1)
        if not line.lstrip().startswith("#") and not PRINTS.match(line) and SHELL_SETS.search(line)
    ]


def bash_accepts(path: Path) -> bool | None:
    bash = shutil.which("bash")
    if bash is None:
        return None
    return subprocess.run([bash, "-n", str(path)], capture_output=True).returncode == 0


def measure(folder: Path) -> dict[str, object]:
    catalogue = load_catalogue()
    settings = Settings(root=folder, respect_gitignore=False)
    report = scan_paths([folder], settings, catalogue)
    reported: dict[str, set[tuple[int | None, int]]] = defaultdict(set)
    for finding in report.findings:
        reported[finding.path].add((finding.cell, finding.span.line))
    files = [
        path
        for path in sorted(folder.rglob("*"))
        if path.is_file()
        and path.suffix in (*SHELL_SUFFIXES, ".ipynb")
        and re.search(FLAGS, path.read_text(encoding="utf-8", errors="replace"))
    ]
    present = found = 0
    missed = []
    for path in files:
        display = display_path(path)
        for place in setting_lines(path):
            present += 1
            if place in reported.get(display, set()):
                found += 1
            else:
                missed.append(f"{path}:{'' if place[0] is None else f'cell {place[0]} '}{place[1]}")
    unparsable = sorted({e.path for e in report.errors})
    accepted = [p for p in unparsable if p.endswith(SHELL_SUFFIXES) and bash_accepts(Path(p))]
    return {
        "folder": str(folder),
        "shell files": sum(p.suffix in SHELL_SUFFIXES for p in files),
        "notebooks": sum(p.suffix == ".ipynb" for p in files),
        "setting lines": present,
        "reported": found,
        "missed": missed,
        "unparsable": unparsable,
        "unparsable that bash -n accepts": accepted,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args()
    print(
        f"{'folder':<40} {'shell':>6} {'nb':>4} {'set':>5} {'found':>6} {'XM901':>6} {'bash ok':>8}"
    )
    failed = False
    for folder in args.folders:
        row = measure(folder)
        print(
            f"{Path(str(row['folder'])).name:<40} {row['shell files']:>6} {row['notebooks']:>4} "
            f"{row['setting lines']:>5} {row['reported']:>6} {len(row['unparsable']):>6} "  # type: ignore[arg-type]
            f"{len(row['unparsable that bash -n accepts']):>8}"  # type: ignore[arg-type]
        )
        for line in row["missed"]:  # type: ignore[attr-defined]
            print(f"  missed: {line}")
        for path in row["unparsable"]:  # type: ignore[attr-defined]
            print(f"  unparsable: {path}")
        failed |= bool(row["missed"]) or bool(row["unparsable that bash -n accepts"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
