"""`xlamigrate verify --plot FILE.png`: both loss curves and their smoothed gap, with matplotlib
(the optional `plot` extra), drawn off-screen."""

from __future__ import annotations

from pathlib import Path

from xlamigrate.verify.verifier import ORIGINAL, VerifyReport

INSTALL_HINT = "python -m pip install 'xlamigrate[plot]'"


def matplotlib_missing() -> str | None:
    """Why --plot cannot work here, or None; checked before any run starts."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return f"--plot needs matplotlib: {INSTALL_HINT}"
    return None


def write_plot(report: VerifyReport, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (losses, gaps) = plt.subplots(
        2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    for label, run in report.runs.items():
        steps = [i + 1 for i, loss in enumerate(run.losses) if loss is not None]
        values = [loss for loss in run.losses if loss is not None]
        if label == ORIGINAL:
            flags = f" ({', '.join(report.legacy_on)})" if report.legacy_on else ""
            losses.plot(steps, values, "-", marker=".", label=f"{label}{flags}")
        else:
            losses.plot(steps, values, "--", marker=".", label=label)
    losses.set_ylabel("loss")
    losses.set_title(f"xlamigrate verify {report.script}")
    losses.legend()
    for comparison in report.comparisons:
        gaps.plot(
            range(1, len(comparison.gaps) + 1),
            [100 * gap for gap in comparison.gaps],
            marker=".",
            label=comparison.mode,
        )
    gaps.axhline(100 * report.options.rtol, color="red", linewidth=1, label="tolerance")
    gaps.set_ylabel(f"smoothed gap, %\n(window {report.options.window})")
    gaps.set_xlabel("optimizer step")
    gaps.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
