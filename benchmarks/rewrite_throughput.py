"""Rewrite throughput on files that all need rewriting: per-file latency, where the time goes
(ast parse and analysis, planning, the libcst parse and transform writing the edits, codegen),
and the CLI's files per second. Measures only; asserts no timing.

    python benchmarks/rewrite_throughput.py [--files 200] [--mode full-bf16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SCRIPT = '''"""Generated training script {index}."""

import argparse
import os

import torch
import torch_xla.core.xla_model as xm

os.environ["XLA_USE_BF16"] = "1"


class Net{index}(torch.nn.Module):
    def __init__(self, width: int = {width}) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 1)
        )

    def forward(self, x):
        return self.layers(x)


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default={steps})
    parser.add_argument("--lr", type=float, default=1e-3)
    return parser.parse_args()


def main():
    args = parse_args()
    device = xm.xla_device()
    model = Net{index}().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_fn = torch.nn.MSELoss()
    for step in range(args.steps):
        x = torch.randn(32, {width}).to(device)
        loss = loss_fn(model(x), x.sum(dim=1, keepdim=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        xm.mark_step()
{padding}

if __name__ == "__main__":
    main()
'''
HELPER = '''

def helper_{index}_{number}(values, scale={number}):
    """Padding: the real scripts this stands for carry utilities too."""
    total = 0
    for value in values:
        if value > scale:
            total += value * scale
        else:
            total -= value
    return total
'''


def make_source(index: int) -> str:
    padding = "".join(HELPER.format(index=index, number=n) for n in range(index % 8))
    return SCRIPT.format(index=index, width=16 + index % 48, steps=10 + index, padding=padding)


class PhaseClock:
    """Exclusive time per phase: time inside a nested timed call counts for the inner phase."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.stack: list[list[Any]] = []  # [phase, started, time in nested phases]

    def wrap(self, phase: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.stack.append([phase, time.perf_counter(), 0.0])
            try:
                return function(*args, **kwargs)
            finally:
                name, started, nested = self.stack.pop()
                spent = time.perf_counter() - started
                self.totals[name] += spent - nested
                if self.stack:
                    self.stack[-1][2] += spent

        return timed


@contextmanager
def phases_timed(clock: PhaseClock) -> Iterator[None]:
    import libcst as cst
    from libcst.metadata import MetadataWrapper

    from xlamigrate.kinds.python import (
        apply,
        cstcode,
        cstslices,
        parse,
        planner,
        rewrite,
        training,
        unusedimports,
    )

    patches: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, phase: str) -> None:
        original = getattr(owner, name)
        patches.append((owner, name, original))
        setattr(owner, name, clock.wrap(phase, original))

    patch(rewrite, "parsed_python", "parse (ast)")
    patch(rewrite, "env_analysis", "analysis")
    patch(rewrite, "reported", "analysis")
    patch(training.TrainingScript, "__init__", "planning")
    patch(planner.Planner, "make_plan", "planning")
    patch(parse, "parse_python", "parse (libcst, to write the edits)")
    patch(cstslices._Slice, "parsed", "parse (libcst, to write the edits)")
    patch(apply, "applied", "transform (edits paired and made)")
    patch(cstslices, "applied", "transform (edits paired and made)")
    patch(unusedimports, "unused_imports_dropped", "imports left unused")
    patch(cstslices, "_unused_dropped", "imports left unused")
    patch(cstcode.ModuleCode, "code", "codegen")
    patch(cstslices._Slice, "spliced", "codegen")
    patch(MetadataWrapper, "resolve", "layout of the edited statements")
    codegen = cst.Module.bytes
    patches.append((cst.Module, "bytes", codegen))
    cst.Module.bytes = property(clock.wrap("codegen", codegen.fget))  # type: ignore[method-assign]
    try:
        yield
    finally:
        for owner, name, original in reversed(patches):
            setattr(owner, name, original)


def in_process(sources: list[bytes], mode: str) -> tuple[list[float], dict[str, float]]:
    from xlamigrate.catalogue import load_catalogue
    from xlamigrate.kinds.python.rewrite import rewrite_python
    from xlamigrate.request import FileTask, RewriteRequest

    catalogue = load_catalogue()
    enabled = catalogue.select((), ())
    request = RewriteRequest(mode)
    rewrite_python(FileTask("warm.py", sources[0], catalogue, enabled), request)  # imports, caches
    clock = PhaseClock()
    latencies = []
    with phases_timed(clock):
        for index, data in enumerate(sources):
            started = time.perf_counter()
            outcome = rewrite_python(FileTask(f"s{index}.py", data, catalogue, enabled), request)
            latencies.append(time.perf_counter() - started)
            assert outcome.changed, "every benchmark file needs rewriting"
    return latencies, dict(clock.totals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--mode", default="full-bf16")
    args = parser.parse_args()
    sources = [make_source(index).encode() for index in range(args.files)]
    latencies, phases = in_process(sources, args.mode)
    total = sum(latencies)
    lines = sum(source.count(b"\n") for source in sources) / len(sources)
    ordered = sorted(latencies)
    print(f"{args.files} files needing a {args.mode} rewrite, {lines:.0f} lines on average")
    print(f"  per file: median {statistics.median(latencies) * 1000:.1f} ms, "
          f"p95 {ordered[int(0.95 * (len(ordered) - 1))] * 1000:.1f} ms, "
          f"{args.files / total:.0f} files/s in one process")  # fmt: skip
    accounted = sum(phases.values())
    for phase, seconds in sorted(phases.items(), key=lambda item: -item[1]):
        print(f"  {phase:<36} {seconds / total:6.1%}  ({seconds / args.files * 1000:.1f} ms/file)")
    print(f"  {'other (glue, findings)':<36} {(total - accounted) / total:6.1%}")
    with tempfile.TemporaryDirectory(prefix="xlamigrate-rewrite-bench-") as scratch:
        for index, data in enumerate(sources):
            (Path(scratch) / f"train_{index:04}.py").write_bytes(data)
        for jobs in ("1", "0"):
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "xlamigrate.cli", "rewrite", "--check", "-j", jobs,
                 "--mode", args.mode, "."],
                cwd=scratch, capture_output=True, check=False,
            )  # fmt: skip
            seconds = time.perf_counter() - started
            label = "one process" if jobs == "1" else f"{os.cpu_count()} workers"
            print(f"  CLI rewrite --check, {label:<12} {seconds:6.2f} s  "
                  f"{args.files / seconds:6.0f} files/s")  # fmt: skip


if __name__ == "__main__":
    main()
