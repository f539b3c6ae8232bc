"""What `xlamigrate verify` prints: a table of the runs, a compact loss plot, the verdict per
mode (text, through rich), or all of it as JSON."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from xlamigrate.recipes import RECIPES
from xlamigrate.verify.compare import EQUIVALENT, Comparison
from xlamigrate.verify.runs import RunResult
from xlamigrate.verify.verifier import ORIGINAL, VerifyReport

MARKERS = {ORIGINAL: "O", **{name: recipe.marker for name, recipe in RECIPES.items()}}
OVERLAP = "*"
PLOT_WIDTH, PLOT_HEIGHT = 60, 10
COLUMNS = ("run", "exit", "steps", "first loss", "last loss", "params", "masters", "max gap",
           "verdict")  # fmt: skip
PLAIN: dict[str, Any] = {"markup": False, "highlight": False, "soft_wrap": True}  # text as is
NUMERIC = frozenset({"first loss", "last loss", "max gap"})


def render_text(report: VerifyReport, color: bool = False, width: int | None = 100) -> str:
    """Plain text unless `color`; `width` None follows the terminal."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=width, force_terminal=color, no_color=not color, record=True)
    with console.capture() as captured:
        legacy = ", ".join(report.legacy_on) or "no legacy flag on"
        console.print(f"xlamigrate verify {report.script}: original ran with {legacy}", **PLAIN)
        table = Table(show_edge=False, pad_edge=False)
        for column in COLUMNS:
            table.add_column(column, justify="right" if column in NUMERIC else "left")
        verdicts = {comparison.mode: comparison for comparison in report.comparisons}
        for label, run in report.runs.items():
            table.add_row(*_row(label, run, verdicts.get(label)), style=_style(verdicts.get(label)))
        console.print(table)
        console.print()
        for line in loss_plot(_curves(report.runs)):
            console.print(line, **PLAIN)
        console.print()
        for comparison in report.comparisons:
            console.print(f"{comparison.mode}: {comparison.verdict.upper()}: ", end="", **PLAIN)
            console.print(comparison.reason, **PLAIN)
            run = report.runs[comparison.mode]
            if run.problem is not None and run.stderr_tail:
                console.print(_indent(run.stderr_tail), style="dim", **PLAIN)
        original = report.runs[ORIGINAL]
        if original.problem is not None and original.stderr_tail:
            console.print(
                f"original's stderr:\n{_indent(original.stderr_tail)}", style="dim", **PLAIN
            )
        for note in report.notes:
            console.print(f"note: {note}", **PLAIN)
    return captured.get()


def _row(label: str, run: RunResult, comparison: Comparison | None) -> list[str]:
    losses = [loss for loss in run.losses if loss is not None]
    exit_code = "timeout" if run.returncode is None else str(run.returncode)
    params = ", ".join(_short(dtype) for dtype in run.dtypes.get("params", {})) or "-"
    masters = ", ".join(_short(dtype) for dtype in run.dtypes.get("masters", {})) or "-"
    gap = comparison.max_gap if comparison is not None else None
    reference = "reference" if run.ok else "failed"
    verdict = comparison.verdict if comparison is not None else reference
    return [
        label,
        exit_code,
        f"{len(run.losses)}{'' if run.stopped_at_limit or not run.losses else ' (end)'}",
        f"{losses[0]:.6g}" if losses else "-",
        f"{losses[-1]:.6g}" if losses else "-",
        params,
        masters,
        "-" if gap is None else f"{gap:.2%}",
        verdict,
    ]


def _style(comparison: Comparison | None) -> str:
    if comparison is None:
        return ""
    return "green" if comparison.verdict == EQUIVALENT else "red"


def _short(dtype: str) -> str:
    return dtype.removeprefix("torch.")


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())


def _curves(runs: Mapping[str, RunResult]) -> dict[str, list[float]]:
    return {label: [loss for loss in run.losses if loss is not None] for label, run in runs.items()}


def loss_plot(
    curves: Mapping[str, Sequence[float]], width: int = PLOT_WIDTH, height: int = PLOT_HEIGHT
) -> list[str]:
    """The curves on one character grid, one letter per run, `*` where runs share a cell."""
    values = [value for curve in curves.values() for value in curve if math.isfinite(value)]
    steps = max((len(curve) for curve in curves.values()), default=0)
    if not values or steps == 0:
        return ["(no losses recorded)"]
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    columns = width
    grid = [[" "] * columns for _ in range(height)]
    for label, curve in curves.items():
        marker = MARKERS.get(label, label[:1].upper())
        for index, value in enumerate(curve):
            if not math.isfinite(value):
                continue
            column = round(index * (columns - 1) / max(steps - 1, 1))
            row = height - 1 - round((value - low) / span * (height - 1))
            cell = grid[row][column]
            grid[row][column] = marker if cell in (" ", marker) else OVERLAP
    label_width = max(len(f"{high:.4g}"), len(f"{low:.4g}"))
    lines = []
    for number, row_cells in enumerate(grid):
        axis = f"{high:.4g}" if number == 0 else f"{low:.4g}" if number == height - 1 else ""
        lines.append(f"{axis:>{label_width}} |{''.join(row_cells).rstrip()}")
    lines.append(f"{'':>{label_width}} +{'-' * columns}")
    last = f"step {steps}"
    lines.append(f"{'':>{label_width}}  step 1{last:>{columns - 6}}")
    legend = "  ".join(f"{MARKERS.get(label, label[:1].upper())} {label}" for label in curves)
    lines.append(f"loss per optimizer step: {legend}  {OVERLAP} overlap")
    return lines


def render_json(report: VerifyReport) -> str:
    options = report.options
    document: dict[str, Any] = {
        "script": report.script,
        "equivalent": report.equivalent,
        "steps": options.steps,
        "rtol": options.rtol,
        "window": options.window,
        "legacy_flags": list(report.legacy_on),
        "runs": {label: _run_json(run) for label, run in report.runs.items()},
        "comparisons": [_comparison_json(comparison) for comparison in report.comparisons],
        "notes": list(report.notes),
    }
    return json.dumps(document, indent=2, allow_nan=False) + "\n"


def _run_json(run: RunResult) -> dict[str, Any]:
    return {
        "returncode": run.returncode,
        "ok": run.ok,
        "problem": run.problem,
        "steps": len(run.losses),
        "stopped_at_limit": run.stopped_at_limit,
        "losses": [_number(loss) for loss in run.losses],
        "dtypes": run.dtypes,
        "devices": run.devices,
        "flags": run.flags,
        "seconds": round(run.seconds, 3),
        "stderr_tail": run.stderr_tail if not run.ok else "",
    }


def _comparison_json(comparison: Comparison) -> dict[str, Any]:
    return {
        "mode": comparison.mode,
        "verdict": comparison.verdict,
        "reason": comparison.reason,
        "first_divergence": comparison.first_divergence,
        "max_gap": _number(comparison.max_gap),
        "gaps": [_number(gap) for gap in comparison.gaps],
        "checks": [
            {"name": check.name, "passed": check.passed, "detail": check.detail}
            for check in comparison.checks
        ],
    }


def _number(value: float | None) -> float | str | None:
    """JSON has no NaN or infinity: those become the strings "nan", "inf", "-inf"."""
    if value is None or math.isfinite(value):
        return value
    return str(value)
