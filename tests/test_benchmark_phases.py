"""The rewrite benchmark times the functions the rewrite calls: each phase it patches exists
and takes time on a rewrite (a renamed entry point once made it crash)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_rewrite_benchmark_times_every_phase_it_names() -> None:
    spec = importlib.util.spec_from_file_location(
        "rewrite_throughput", ROOT / "benchmarks" / "rewrite_throughput.py"
    )
    assert spec is not None and spec.loader is not None
    benchmark = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = benchmark
    try:
        spec.loader.exec_module(benchmark)
        sources = [benchmark.make_source(index).encode() for index in range(3)]
        latencies, phases = benchmark.in_process(sources, "full-bf16")
    finally:
        del sys.modules[spec.name]
    assert len(latencies) == 3
    for phase in ("analysis", "planning", "transform (edits paired and made)",
                  "imports left unused", "codegen"):  # fmt: skip
        assert phases.get(phase, 0) > 0, phase
