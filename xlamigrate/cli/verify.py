"""`xlamigrate verify`: run a script (or its launcher) and its rewrites on torch-xla's CPU device
and compare how they train."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from xlamigrate.cli import running
from xlamigrate.cli.options import (
    AtLeast,
    Command,
    Parser,
    add_choice,
    add_format,
    add_help,
    sections,
)
from xlamigrate.cli.running import EXIT_CLEAN, EXIT_FINDINGS, echo, fail
from xlamigrate.settingvalues import TARGETS

if TYPE_CHECKING:
    from argparse import Namespace

EVERY_MODE = "all"  # `verify --mode all`: each recipe in turn
FORMATS = ("text", "json")


def add_arguments(parser: Parser) -> None:
    from xlamigrate.recipes import MODES  # (the recipes' names: rules/modes.toml)

    arguments, options = sections(parser)
    arguments.add_argument(
        "script",
        metavar="SCRIPT",
        help="The training script, or the launcher (run.sh, a Kubernetes or compose YAML,"
        " a Dockerfile) that uses a legacy flag.",
    )
    arguments.add_argument(
        "script_args",
        nargs="*",
        default=[],  # (not a required argument, to argparse)
        metavar="ARGS",
        help="After `--`: the script's or launcher's arguments; for a YAML file the container"
        " (job/container) to run; for a Dockerfile, what replaces its CMD.",
    )
    add_choice(
        options,
        "-m",
        "--mode",
        values=(*MODES, EVERY_MODE),
        action="append",
        help="Recipe(s) to verify; repeat, or `all` (default: config, else full-bf16).",
    )
    options.add_argument(
        "--steps", type=AtLeast(1), default=20, metavar="N", help="Optimizer steps per run."
    )
    options.add_argument(
        "--rtol",
        type=AtLeast(0.0, float),
        default=0.05,
        metavar="FRACTION",
        help="Tolerated relative gap of the smoothed loss curves.",
    )
    options.add_argument(
        "--window",
        type=AtLeast(1),
        default=5,
        metavar="N",
        help="Steps per trailing mean of the losses.",
    )
    options.add_argument(
        "--legacy-env",
        action="append",
        metavar="NAME=VALUE",
        help="An environment variable for the original run only (a launcher's flag);"
        " repeat for more.",
    )
    options.add_argument(
        "--rewritten",
        type=Path,
        metavar="FILE",
        help="Verify this rewrite (made or edited by hand) instead of making one.",
    )
    add_choice(
        options,
        "--target",
        values=TARGETS,
        help="The platform the rewrite is for; its environment (NEURON_* variables) is"
        " checked (default: [tool.xlamigrate] target, else neuron).",
    )
    options.add_argument(
        "--plot",
        type=Path,
        metavar="FILE",
        help="Write a PNG chart of the curves (needs matplotlib).",
    )
    add_format(options, FORMATS)
    options.add_argument(
        "--timeout",
        type=AtLeast(1.0, float),
        default=600.0,
        metavar="SECONDS",
        help="Seconds allowed per run.",
    )
    options.add_argument(
        "-j", "--jobs", type=AtLeast(1), default=2, metavar="N", help="Runs at a time."
    )
    options.add_argument(
        "--unsafe-fixes", action="store_true", help="Also apply fixes marked unsafe."
    )
    options.add_argument("--config", type=Path, metavar="FILE", help="pyproject.toml to read.")
    add_help(options)


def run(args: Namespace) -> int:
    from xlamigrate.verify.launcher import is_launcher
    from xlamigrate.verify.plot import matplotlib_missing, write_plot
    from xlamigrate.verify.render import WIDTH as TEXT_WIDTH
    from xlamigrate.verify.render import render_json, render_text
    from xlamigrate.verify.verifier import VerifyError, VerifyOptions, torch_xla_missing
    from xlamigrate.verify.verifier import verify as run_verify

    script = Path(args.script)
    rewritten: Path | None = args.rewritten
    plot: Path | None = args.plot
    if not script.is_file():
        fail(f"{script}: no such file")
    catalogue = running.load_catalogue()
    settings = running.load_settings([script], catalogue, args.config, None, None, None, True)
    chosen = _modes(args.mode, settings.mode)
    if rewritten is not None and is_launcher(script):
        fail(
            f"{script}: --rewritten takes the rewrite of a Python script; a launcher is verified"
            " through a migrated copy of the project (leave --rewritten out)"
        )
    if rewritten is not None and len(chosen) != 1:
        fail("--rewritten verifies one rewrite: give exactly one --mode (the recipe it follows)")
    missing = torch_xla_missing() or (matplotlib_missing() if plot is not None else None)
    if missing:
        fail(missing)
    options = VerifyOptions(
        modes=chosen,
        steps=args.steps,
        rtol=args.rtol,
        window=args.window,
        args=tuple(args.script_args),
        legacy_env=_assignments(args.legacy_env or []),
        timeout=args.timeout,
        jobs=args.jobs,
        rewritten=rewritten,
        unsafe_fixes=args.unsafe_fixes,
        target=args.target or settings.target or "neuron",
    )
    try:
        report = run_verify(
            script,
            options,
            catalogue,
            catalogue.select(settings.select, settings.ignore),
            lambda message: echo(f"xlamigrate: {message}", err=True),
        )
    except VerifyError as error:
        fail(str(error))
    if args.output_format == "json":
        sys.stdout.write(render_json(report))
    else:
        tty = sys.stdout.isatty()
        sys.stdout.write(render_text(report, color=tty, width=None if tty else TEXT_WIDTH))
    sys.stdout.flush()
    if plot is not None:
        write_plot(report, plot)
        echo(f"xlamigrate: wrote {plot}", err=True)
    verdicts = [comparison.verdict for comparison in report.comparisons]
    shown = (
        "equivalent",
        *(("trains",) if "trains" in verdicts else ()),
        "divergent",
        "failed",
        *(("not verified",) if "not verified" in verdicts else ()),
    )
    counts = ", ".join(f"{verdicts.count(v)} {v}" for v in shown)
    echo(f"xlamigrate: verify: {counts}", err=True)
    return EXIT_CLEAN if report.equivalent else EXIT_FINDINGS


def _modes(named: list[str] | None, configured: str | None) -> tuple[str, ...]:
    from xlamigrate.recipes import DEFAULT_MODE, MODES

    if not named:
        return (configured or DEFAULT_MODE,)
    if EVERY_MODE in named:
        return MODES
    return tuple(mode for mode in MODES if mode in named)


def _assignments(values: list[str]) -> dict[str, str]:
    pairs = {}
    for value in values:
        name, equals, setting = value.partition("=")
        if not equals or not name.strip():
            fail(f"--legacy-env wants NAME=VALUE, got {value!r}")
        pairs[name.strip()] = setting
    return pairs


COMMAND = Command(
    name="verify",
    summary="Compare how a script and its rewrites train on torch-xla's CPU.",
    description="""Run the script and its rewrite(s) on torch-xla's CPU device and compare their
    training.

    A launcher runs as it is, its `torchrun`/`python`/`mpirun` launches intercepted as one
    local process, against a copy of the project migrated by `xlamigrate rewrite` in each mode;
    a YAML container or a Dockerfile image runs its command with its environment.

    Exit 0 when every rewrite trains like the original, 1 when one diverges or fails, or when
    no legacy flag took effect in the original (not verified: pass the flag, or verify the
    launcher that sets it).""",
    usage="%(prog)s [OPTIONS] SCRIPT [ARGS]...",
    add_arguments=add_arguments,
    run=run,
)
