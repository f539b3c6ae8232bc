"""Scan throughput: a generated tree of N Python files, a fraction of which mention a legacy flag.

Prints wall time and files per second of the real `xlamigrate scan` command (serial and with the
process pool), and the CLI's start-up cost. Measures only; asserts no timing.

    python benchmarks/scan_throughput.py [--files 3000] [--flagged-fraction 0.01] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODULE = '''"""Generated module {index}: a model, a data loader and a training step."""

import math
import os

import torch
from torch import nn


class Block{index}(nn.Module):
    def __init__(self, width: int = {width}) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(x + torch.relu(self.linear(x)))


def schedule(step: int, warmup: int = {warmup}) -> float:
    if step < warmup:
        return step / warmup
    return 0.5 * (1 + math.cos(math.pi * step / {total}))


def data_dir() -> str:
    return os.environ.get("DATA_DIR", "/tmp/data")


def train_step(model, batch, optimizer):
    loss = model(batch).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss
'''

FLAGGED = """
if os.environ.get("USE_BF16", "0") == "1":
    os.environ["XLA_USE_BF16"] = "1"
"""


def make_tree(root: Path, files: int, flagged_fraction: float, seed: int = 0) -> int:
    rng = random.Random(seed)
    flagged = set(rng.sample(range(files), max(1, round(files * flagged_fraction))))
    for index in range(files):
        package = root / f"pkg{index // 100:03d}"
        package.mkdir(exist_ok=True)
        text = MODULE.format(
            index=index, width=rng.choice([64, 128, 256]), warmup=rng.randint(10, 500), total=10_000
        )
        if index in flagged:
            text += FLAGGED
        (package / f"module_{index:05d}.py").write_text(text)
    return len(flagged)


def timed(
    command: list[str], cwd: Path, repeat: int
) -> tuple[float, subprocess.CompletedProcess[str]]:
    times = []
    result = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
    assert result is not None
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--flagged-fraction", type=float, default=0.01)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    cli = [sys.executable, "-m", "xlamigrate.cli"]
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        flagged = make_tree(root, args.files, args.flagged_fraction)
        size_mb = sum(p.stat().st_size for p in root.rglob("*.py")) / 1e6
        print(f"tree: {args.files} files ({size_mb:.1f} MB), {flagged} mention a flag")
        print(f"cpus: {os.cpu_count()}")

        startup, _ = timed([*cli, "--version"], root, args.repeat)
        print(f"{'xlamigrate --version (start-up)':<40} {startup * 1000:8.0f} ms")
        for label, jobs in (("scan -j 1 (serial)", "1"), ("scan -j 0 (one worker per CPU)", "0")):
            wall, result = timed([*cli, "scan", ".", "-f", "json", "-j", jobs], root, args.repeat)
            report = json.loads(result.stdout)
            found = len({f["path"] for f in report["findings"]})
            print(
                f"{label:<40} {wall * 1000:8.0f} ms  {args.files / wall:8.0f} files/s  "
                f"exit={result.returncode} flagged files found={found}/{flagged}"
            )


if __name__ == "__main__":
    main()
