"""The `xlamigrate` command: parses flags, calls the engine, picks a reporter, sets the exit code.

Exit codes (as ruff): 0 nothing found, 1 findings or files that could not be checked,
2 usage, configuration or internal error. Machine output goes to stdout, summaries to stderr.
"""

from __future__ import annotations

import contextlib
import difflib
import re
import sys
from collections.abc import Sequence
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, cast

import typer
from typer.core import TyperArgument, TyperCommand

from xlamigrate import __version__
from xlamigrate.catalogue import Catalogue, CatalogueError, UnknownCodeError, load_catalogue
from xlamigrate.config import DEFAULT_RUNTIME, RUNTIMES, ConfigError, Settings, load_settings
from xlamigrate.model import FileError, RewriteReport, ScanReport
from xlamigrate.recipes import DEFAULT_MODE, MODES
from xlamigrate.request import DEFAULT_SIGNAL, RewriteRequest

if TYPE_CHECKING:
    from typer._click import Context, HelpFormatter

    from xlamigrate.discover import Discovery
    from xlamigrate.progress import Progress
    from xlamigrate.selection import Selection

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
SUMMARY = (
    "Find and migrate code that relies on the deprecated XLA_USE_BF16 / XLA_DOWNCAST_BF16 flags."
)

app = typer.Typer(
    name="xlamigrate",
    help=SUMMARY,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class _Command(TyperCommand):
    """A command whose help names each argument as its usage line does, `PATHS...`, with no
    Python type after it: typer writes `PATHS <list[Path]>`, and a metavar hides the type of an
    option but not of an argument. (Every command is made with `cls=_Command`.)"""

    def format_options(self, ctx: Context, formatter: HelpFormatter) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if isinstance(param, TyperArgument):
                name = param.display_name_raw + ("..." if param.nargs != 1 else "")
                arguments.append((name, record[1]))  # (its help, with [default: ...] if any)
            else:
                options.append(record)
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


# scan and rewrite: results of earlier runs are kept in <root>/.xlamigrate_cache (cache.py)
NoCache = Annotated[
    bool,
    typer.Option(
        "--no-cache",
        help="Neither read nor write the cache of earlier results in .xlamigrate_cache (also"
        " with XLAMIGRATE_NO_CACHE=1).",
    ),
]


# scan and rewrite: the whole project below the root, not only the paths named
WholeProject = Annotated[
    bool,
    typer.Option(
        "--project",
        help="Every file of the project: below the nearest folder up from the paths with .git,"
        " a pyproject.toml or the configuration (the paths' common folder, where none has).",
    ),
]


class OutputFormat(str, Enum):
    text = "text"
    concise = "concise"
    json = "json"
    sarif = "sarif"
    github = "github"
    gitlab = "gitlab"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"xlamigrate {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", callback=_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Top-level options (the help text is SUMMARY)."""


def _codes(values: list[str] | None) -> list[str] | None:
    """Accepts repeated options and comma-separated lists alike."""
    if values is None:
        return None
    return [code.strip() for value in values for code in value.split(",") if code.strip()]


def _fail(message: str) -> NoReturn:
    typer.echo(f"xlamigrate: error: {message}", err=True)
    raise typer.Exit(EXIT_ERROR)


def _fail_on_missing(targets: list[Path]) -> None:
    """Before anything resolves the paths: a symlink loop is missing too (and made the search
    for pyproject.toml crash)."""
    missing = [str(target) for target in targets if not target.exists()]
    if missing:
        _fail(f"no such file or directory: {', '.join(missing)}")


def _catalogue() -> Catalogue:
    try:
        return load_catalogue()
    except CatalogueError as error:
        _fail(f"internal error: {error}")


@app.command(
    cls=_Command,
    short_help="Report legacy precision flags and outdated torch-xla APIs.",
    epilog="Exit codes: 0 nothing found; 1 findings, or files that could not be parsed; 2 usage,"
    " configuration or internal error.",
)
def scan(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(
            metavar="PATHS",
            help="Files or folders to scan (default: the current folder).",
        ),
    ] = None,
    output_format: Annotated[
        OutputFormat, typer.Option("--format", "--output-format", "-f", help="Output format.")
    ] = OutputFormat.text,
    select: Annotated[
        list[str] | None,
        typer.Option(
            metavar="CODES", help="Rule codes or prefixes to report (replaces the config)."
        ),
    ] = None,
    ignore: Annotated[
        list[str] | None,
        typer.Option(metavar="CODES", help="Rule codes or prefixes not to report."),
    ] = None,
    exclude: Annotated[
        list[str] | None,
        typer.Option(metavar="PATTERN", help="Extra gitignore-style patterns to skip."),
    ] = None,
    exit_zero: Annotated[
        bool, typer.Option("--exit-zero", help="Exit 0 even when something was found.")
    ] = False,
    jobs: Annotated[
        int,
        typer.Option("--jobs", "-j", min=0, metavar="N", help="Worker processes (0: one per CPU)."),
    ] = 0,
    config: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Read [tool.xlamigrate] from this pyproject.toml."),
    ] = None,
    respect_gitignore: Annotated[
        bool,
        typer.Option(
            "--respect-gitignore/--no-respect-gitignore", help="Skip files .gitignore ignores."
        ),
    ] = True,
    statistics: Annotated[
        bool, typer.Option("--statistics", help="Print the number of findings per rule.")
    ] = False,
    stdin_filename: Annotated[
        str | None,
        typer.Option(
            metavar="PATH", help="Scan standard input, reported (and classified) as this path."
        ),
    ] = None,
    torch_xla_version: Annotated[
        str | None,
        typer.Option(
            metavar="X.Y",
            help="The oldest torch-xla the project runs on (default: [tool.xlamigrate]"
            " torch-xla-version, else its requirements' pins): newer API fixes are not offered.",
        ),
    ] = None,
    no_cache: NoCache = False,
    whole_project: WholeProject = False,
) -> None:
    """Report every place the code touches a legacy Torch-XLA precision flag, and every use of
    a torch-xla API removed or deprecated on the way to torch-xla 2.9."""
    from xlamigrate.engine import scan_paths
    from xlamigrate.selection import named_files

    if statistics and output_format not in (OutputFormat.text, OutputFormat.json):
        _fail("--statistics prints text or json: drop --format or choose one of those")
    targets = paths or [Path(".")]
    if stdin_filename is None:
        _fail_on_missing(targets)
    catalogue = _catalogue()
    settings = _settings(
        targets, catalogue, config, select, ignore, exclude, respect_gitignore, torch_xla_version
    )
    if stdin_filename is not None:
        report = _scan_stdin(stdin_filename, paths, settings, catalogue)
    else:
        discovery = named_files(targets, settings, not no_cache)
        if discovery.missing:
            _fail(f"no such file or directory: {', '.join(discovery.missing)}")
        for skipped in discovery.skipped:
            typer.echo(
                f"xlamigrate: skipped {skipped}: not a file kind xlamigrate checks", err=True
            )
        with _progress(output_format is OutputFormat.text) as progress:
            selection = _selection(targets, settings, discovery, whole_project, not no_cache)
            report = scan_paths(
                targets,
                settings,
                catalogue,
                jobs or None,
                discovery,
                progress,
                not no_cache,
                selection=selection,
            )
    if statistics:
        from xlamigrate.report.statistics import render_statistics

        as_json = output_format is OutputFormat.json
        sys.stdout.write(render_statistics(report, catalogue, as_json))
        sys.stdout.flush()
    else:
        _print_report(report, catalogue, output_format, settings.mode or DEFAULT_MODE)
    code = EXIT_FINDINGS if report.has_problems and not exit_zero else EXIT_CLEAN
    raise typer.Exit(code)


def _selection(
    targets: list[Path], settings: Settings, discovery: Discovery, whole: bool, use_cache: bool
) -> Selection:
    """The files a run reports on and edits, in the project found from the paths (warned of,
    as ruff does, where there are none)."""
    from xlamigrate.selection import select

    selection = select(targets, settings, discovery, whole, use_cache)
    if not selection.named.files:
        typer.echo("xlamigrate: warning: No files to check under the given path(s)", err=True)
    return selection


def _progress(human: bool) -> contextlib.AbstractContextManager[Progress]:
    """A progress bar on a terminal's stderr for a long run in a human format; else nothing."""
    from xlamigrate.progress import SILENT, for_terminal

    bar = for_terminal(human)
    return bar if bar is not None else contextlib.nullcontext(SILENT)


def _stdin_source(
    name: str, paths: list[Path] | None, settings: Settings
) -> tuple[str, bytes, str] | None:
    """(display path, bytes, kind) of the buffer on stdin; None when the name is excluded."""
    from xlamigrate.discover import classify_buffer, display_path, is_excluded

    if paths and paths != [Path("-")]:
        _fail("--stdin-filename reads standard input: give no paths (or `-`)")
    data = sys.stdin.buffer.read()
    kind = classify_buffer(name, data)
    if kind is None:
        _fail(f"{name}: not a file kind xlamigrate checks (from its name or shebang)")
    if is_excluded(Path(name), settings):
        return None
    return display_path(Path(name)), data, kind


def _scan_stdin(
    name: str, paths: list[Path] | None, settings: Settings, catalogue: Catalogue
) -> ScanReport:
    from xlamigrate.engine import scan_source
    from xlamigrate.findings import worded_report

    source = _stdin_source(name, paths, settings)
    if source is None:
        return ScanReport(files_scanned=0)
    display, data, kind = source
    enabled = catalogue.select(settings.select, settings.ignore)
    result = scan_source(display, data, kind, catalogue, enabled)
    report = ScanReport(1, result.findings, result.errors, files_parsed=1)
    return worded_report(report, catalogue)


def _settings(
    targets: list[Path],
    catalogue: Catalogue,
    config: Path | None,
    select: list[str] | None,
    ignore: list[str] | None,
    exclude: list[str] | None,
    respect_gitignore: bool,
    torch_xla_version: str | None = None,
) -> Settings:
    try:
        settings = load_settings(targets, catalogue, config)
        settings = settings.with_overrides(_codes(select), _codes(ignore) or (), exclude or ())
        catalogue.select(settings.select, settings.ignore)
    except (ConfigError, UnknownCodeError) as error:
        _fail(str(error))
    if torch_xla_version is not None:
        from xlamigrate.apitable import Version

        try:
            settings = replace(settings, torch_xla_version=Version.parse(torch_xla_version))
        except ValueError:
            _fail(f"--torch-xla-version takes a release like 2.1, not {torch_xla_version!r}")
    return settings if respect_gitignore else replace(settings, respect_gitignore=False)


def _write_rewrites(report: RewriteReport, sources: dict[str, Path]) -> RewriteReport:
    """Writes each changed file; a file that could not be written is reported as unchanged."""
    from xlamigrate.positions import as_written
    from xlamigrate.writer import WriteError, create_file, write_atomically

    outcomes = []
    errors = list(report.errors)
    for outcome in report.outcomes:
        if outcome.changed and outcome.rewritten is not None:
            try:
                where = sources.get(outcome.path, Path(outcome.path))  # a launched script
                if outcome.created:
                    create_file(where, outcome.rewritten)
                else:
                    write_atomically(where, outcome.rewritten, outcome.original)
            except WriteError as error:
                errors.append(FileError(outcome.path, None, str(error), code="XM902"))
                outcome = replace(outcome, rewritten=None, fixed=())
            else:  # what is left is reported where it now is
                outcome = replace(outcome, remaining=as_written(outcome))
        outcomes.append(outcome)
    return replace(report, outcomes=tuple(outcomes), errors=tuple(errors))


def _print_report(
    report: ScanReport, catalogue: Catalogue, output_format: OutputFormat, mode: str
) -> None:
    """`mode`: the recipe the scan judged the fixes for, which the summary names."""
    from xlamigrate.report import renderer
    from xlamigrate.report.scan_summary import summary

    if output_format is OutputFormat.text and sys.stdout.isatty():
        from xlamigrate.report.rich_text import print_report

        print_report(report)
    else:
        sys.stdout.write(renderer(output_format.value)(report, catalogue))
        sys.stdout.flush()
    typer.echo(summary(report, mode), err=True)


class RewriteFormat(str, Enum):
    text = "text"
    json = "json"


EVERY_MODE = "all"  # `verify --mode all`: each recipe in turn


def _choices(name: str, values: Sequence[str]) -> type[Enum]:
    """An option's choices as typer wants them, an Enum, made from data (the recipes' names)."""
    return cast("type[Enum]", Enum(name, [(v.replace("-", "_"), v) for v in values], type=str))


if TYPE_CHECKING:  # made at run time from the registry; a type checker sees an Enum
    Mode = Enum
    VerifyMode = Enum
    Runtime = Enum
else:
    Mode = _choices("Mode", MODES)
    VerifyMode = _choices("VerifyMode", (*MODES, EVERY_MODE))
    Runtime = _choices("Runtime", RUNTIMES)


class Target(str, Enum):
    neuron = "neuron"
    tpu = "tpu"


@app.command(
    cls=_Command,
    short_help="Rewrite code to an explicit BF16 recipe and current torch-xla APIs.",
    epilog="Exit codes: 0 nothing left to do; 1 a change pending (--diff, --check), findings"
    " left for manual work, or files that could not be rewritten; 2 usage, configuration or"
    " internal error.",
)
def rewrite(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(metavar="PATHS", help="Files or folders to rewrite (default: .)."),
    ] = None,
    mode: Annotated[
        Mode | None,
        typer.Option(help=f"The recipe (default: [tool.xlamigrate] mode, else {DEFAULT_MODE})."),
    ] = None,
    target: Annotated[
        Target | None,
        typer.Option(
            help="The platform (default: [tool.xlamigrate] target, else what each launcher says,"
            " else neuron)."
        ),
    ] = None,
    runtime: Annotated[
        Runtime | None,
        typer.Option(
            help="How rewritten scripts get the xlamigrate_runtime they import: package adds"
            " xlamigrate-runtime to the project's requirements.txt or pyproject.toml; vendor"
            " copies the package next to each script (default: [tool.xlamigrate] runtime, else"
            " package)."
        ),
    ] = None,
    diff: Annotated[bool, typer.Option("--diff", help="Print a diff; write nothing.")] = False,
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 if something would change.")
    ] = False,
    unsafe_fixes: Annotated[
        bool, typer.Option("--unsafe-fixes", help="Also apply fixes marked unsafe.")
    ] = False,
    output_format: Annotated[
        RewriteFormat, typer.Option("--format", "--output-format", "-f", help="Output format.")
    ] = RewriteFormat.text,
    select: Annotated[
        list[str] | None, typer.Option(metavar="CODES", help="Rule codes or prefixes.")
    ] = None,
    ignore: Annotated[
        list[str] | None, typer.Option(metavar="CODES", help="Rule codes or prefixes not to fix.")
    ] = None,
    exclude: Annotated[
        list[str] | None, typer.Option(metavar="PATTERN", help="Patterns to skip.")
    ] = None,
    jobs: Annotated[
        int, typer.Option("--jobs", "-j", min=0, metavar="N", help="Worker processes.")
    ] = 0,
    config: Annotated[
        Path | None, typer.Option(metavar="FILE", help="pyproject.toml to read.")
    ] = None,
    respect_gitignore: Annotated[
        bool,
        typer.Option(
            "--respect-gitignore/--no-respect-gitignore", help="Skip files .gitignore ignores."
        ),
    ] = True,
    stdin_filename: Annotated[
        str | None,
        typer.Option(
            metavar="PATH",
            help="Rewrite standard input (named as this path) to standard output.",
        ),
    ] = None,
    torch_xla_version: Annotated[
        str | None,
        typer.Option(
            metavar="X.Y",
            help="The oldest torch-xla the project runs on (default: [tool.xlamigrate]"
            " torch-xla-version, else its requirements' pins): newer API fixes are not written.",
        ),
    ] = None,
    no_cache: NoCache = False,
    whole_project: WholeProject = False,
) -> None:
    """Rewrite scripts to an explicit BF16 recipe (full-bf16, fp32-copy or autocast), and
    torch-xla API calls removed or deprecated on the way to torch-xla 2.9 to their successors
    (`--select XM5` for those alone, `--ignore XM5` for the recipe alone)."""
    from xlamigrate.engine import rewrite_paths
    from xlamigrate.report.rewrite_format import (
        grouped_diffs,
        render_json,
        render_text,
        summary,
    )
    from xlamigrate.report.text_format import error_line
    from xlamigrate.selection import named_files
    from xlamigrate.writer import unified_diff

    targets = paths or [Path(".")]
    if stdin_filename is None:
        _fail_on_missing(targets)
    catalogue = _catalogue()
    settings = _settings(
        targets, catalogue, config, select, ignore, exclude, respect_gitignore, torch_xla_version
    )
    chosen = mode.value if mode is not None else (settings.mode or DEFAULT_MODE)
    request = RewriteRequest(
        chosen,
        unsafe_fixes,
        target=target.value if target is not None else settings.target,
        signal=settings.signal or DEFAULT_SIGNAL,
        runtime=runtime.value if runtime is not None else settings.runtime or DEFAULT_RUNTIME,
    )
    if stdin_filename is not None:
        _rewrite_stdin(stdin_filename, paths, settings, catalogue, request, diff)
    discovery = named_files(targets, settings, not no_cache)
    if discovery.missing:
        _fail(f"no such file or directory: {', '.join(discovery.missing)}")
    selection = _selection(targets, settings, discovery, whole_project, not no_cache)
    with _progress(output_format is RewriteFormat.text) as progress:
        report = rewrite_paths(
            targets,
            settings,
            catalogue,
            request,
            jobs or None,
            discovery,
            progress,
            not no_cache,
            selection=selection,
        )
    for skipped in discovery.skipped:
        typer.echo(f"xlamigrate: skipped {skipped}: not a file kind xlamigrate checks", err=True)
    apply = not (diff or check)
    if apply:
        report = _write_rewrites(report, {s.display: s.path for s in selection.project.files})
    diffs = {
        outcome.path: unified_diff(
            outcome.path, outcome.original, outcome.rewritten, outcome.created
        )
        for outcome in report.outcomes
        if diff and outcome.changed and outcome.rewritten is not None
    }
    if output_format is RewriteFormat.json:
        sys.stdout.write(render_json(report, chosen, apply, diffs))
    elif diff:
        sys.stdout.write(grouped_diffs(report, diffs))
        for error in report.errors:  # (the diff says what changes; these, what could not)
            typer.echo(error_line(error), err=True)
    else:
        sys.stdout.write(render_text(report, apply))
    sys.stdout.flush()
    typer.echo(summary(report, apply), err=True)
    pending = not apply and any(outcome.changed for outcome in report.outcomes)
    left = any(outcome.remaining for outcome in report.outcomes) or bool(report.errors)
    raise typer.Exit(EXIT_FINDINGS if pending or left else EXIT_CLEAN)


@app.command(
    cls=_Command,
    short_help="Compare how a script and its rewrites train on torch-xla's CPU.",
)
def verify(
    script: Annotated[
        Path,
        typer.Argument(
            metavar="SCRIPT",
            help="The training script, or the launcher (run.sh, a Kubernetes or compose YAML,"
            " a Dockerfile) that uses a legacy flag.",
        ),
    ],
    script_args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="ARGS",
            help="After `--`: the script's or launcher's arguments; for a YAML file the container"
            " (job/container) to run; for a Dockerfile, what replaces its CMD.",
        ),
    ] = None,
    mode: Annotated[
        list[VerifyMode] | None,
        typer.Option(
            "--mode",
            "-m",
            metavar=f"<{'|'.join((*MODES, EVERY_MODE))}>",  # (not typer's `<list[...]>`)
            help="Recipe(s) to verify; repeat, or `all` (default: config, else full-bf16).",
        ),
    ] = None,
    steps: Annotated[int, typer.Option(min=1, metavar="N", help="Optimizer steps per run.")] = 20,
    rtol: Annotated[
        float,
        typer.Option(
            min=0.0,
            metavar="FRACTION",
            help="Tolerated relative gap of the smoothed loss curves.",
        ),
    ] = 0.05,
    window: Annotated[
        int, typer.Option(min=1, metavar="N", help="Steps per trailing mean of the losses.")
    ] = 5,
    legacy_env: Annotated[
        list[str] | None,
        typer.Option(
            "--legacy-env",
            metavar="NAME=VALUE",
            help="An environment variable for the original run only (a launcher's flag);"
            " repeat for more.",
        ),
    ] = None,
    rewritten: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Verify this rewrite (made or edited by hand) instead of making one.",
        ),
    ] = None,
    target: Annotated[
        Target | None,
        typer.Option(
            help="The platform the rewrite is for; its environment (NEURON_* variables) is"
            " checked (default: [tool.xlamigrate] target, else neuron)."
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Write a PNG chart of the curves (needs matplotlib)."),
    ] = None,
    output_format: Annotated[
        RewriteFormat, typer.Option("--format", "--output-format", "-f", help="Output format.")
    ] = RewriteFormat.text,
    timeout: Annotated[
        float, typer.Option(min=1.0, metavar="SECONDS", help="Seconds allowed per run.")
    ] = 600.0,
    jobs: Annotated[
        int, typer.Option("--jobs", "-j", min=1, metavar="N", help="Runs at a time.")
    ] = 2,
    unsafe_fixes: Annotated[
        bool, typer.Option("--unsafe-fixes", help="Also apply fixes marked unsafe.")
    ] = False,
    config: Annotated[
        Path | None, typer.Option(metavar="FILE", help="pyproject.toml to read.")
    ] = None,
) -> None:
    """Run the script and its rewrite(s) on torch-xla's CPU device and compare their training.

    A launcher runs as it is, its `torchrun`/`python`/`mpirun` launches intercepted as one
    local process, against a copy of the project migrated by `xlamigrate rewrite` in each mode;
    a YAML container or a Dockerfile image runs its command with its environment.

    Exit 0 when every rewrite trains like the original, 1 when one diverges or fails, or when
    no legacy flag took effect in the original (not verified: pass the flag, or verify the
    launcher that sets it).
    """
    from xlamigrate.verify.plot import matplotlib_missing, write_plot
    from xlamigrate.verify.render import WIDTH as TEXT_WIDTH
    from xlamigrate.verify.render import render_json, render_text
    from xlamigrate.verify.verifier import VerifyError, VerifyOptions, torch_xla_missing
    from xlamigrate.verify.verifier import verify as run_verify

    if not script.is_file():
        _fail(f"{script}: no such file")
    catalogue = _catalogue()
    settings = _settings([script], catalogue, config, None, None, None, True)
    chosen = _verify_modes(mode, settings.mode)
    from xlamigrate.verify.launcher import is_launcher

    if rewritten is not None and is_launcher(script):
        _fail(
            f"{script}: --rewritten takes the rewrite of a Python script; a launcher is verified"
            " through a migrated copy of the project (leave --rewritten out)"
        )
    if rewritten is not None and len(chosen) != 1:
        _fail("--rewritten verifies one rewrite: give exactly one --mode (the recipe it follows)")
    missing = torch_xla_missing() or (matplotlib_missing() if plot is not None else None)
    if missing:
        _fail(missing)
    options = VerifyOptions(
        modes=chosen,
        steps=steps,
        rtol=rtol,
        window=window,
        args=tuple(script_args or ()),
        legacy_env=_assignments(legacy_env or []),
        timeout=timeout,
        jobs=jobs,
        rewritten=rewritten,
        unsafe_fixes=unsafe_fixes,
        target=target.value if target is not None else settings.target or "neuron",
    )
    progress = lambda message: typer.echo(f"xlamigrate: {message}", err=True)  # noqa: E731
    try:
        report = run_verify(
            script, options, catalogue, catalogue.select(settings.select, settings.ignore), progress
        )
    except VerifyError as error:
        _fail(str(error))
    if output_format is RewriteFormat.json:
        sys.stdout.write(render_json(report))
    else:
        tty = sys.stdout.isatty()
        sys.stdout.write(render_text(report, color=tty, width=None if tty else TEXT_WIDTH))
    sys.stdout.flush()
    if plot is not None:
        write_plot(report, plot)
        typer.echo(f"xlamigrate: wrote {plot}", err=True)
    verdicts = [comparison.verdict for comparison in report.comparisons]
    shown = (
        "equivalent",
        *(("trains",) if "trains" in verdicts else ()),
        "divergent",
        "failed",
        *(("not verified",) if "not verified" in verdicts else ()),
    )
    counts = ", ".join(f"{verdicts.count(v)} {v}" for v in shown)
    typer.echo(f"xlamigrate: verify: {counts}", err=True)
    raise typer.Exit(EXIT_CLEAN if report.equivalent else EXIT_FINDINGS)


def _verify_modes(modes: list[VerifyMode] | None, configured: str | None) -> tuple[str, ...]:
    if not modes:
        return (configured or DEFAULT_MODE,)
    named = {chosen.value for chosen in modes}
    if EVERY_MODE in named:
        return MODES
    return tuple(mode for mode in MODES if mode in named)


def _assignments(values: list[str]) -> dict[str, str]:
    pairs = {}
    for value in values:
        name, equals, setting = value.partition("=")
        if not equals or not name.strip():
            _fail(f"--legacy-env wants NAME=VALUE, got {value!r}")
        pairs[name.strip()] = setting
    return pairs


def _rewrite_stdin(
    name: str,
    paths: list[Path] | None,
    settings: Settings,
    catalogue: Catalogue,
    request: RewriteRequest,
    diff: bool,
) -> NoReturn:
    """An editor's buffer: the rewrite (or, with --diff, the diff) on stdout, the rest on
    stderr; exit 1 when findings are left for manual work (or, with --diff, a change is due)."""
    from xlamigrate.engine import rewrite_source
    from xlamigrate.report.text_format import error_line, finding_line
    from xlamigrate.writer import unified_diff

    source = _stdin_source(name, paths, settings)
    if source is None:
        raise typer.Exit(EXIT_CLEAN)  # excluded: nothing to say (the editor keeps its buffer)
    display, data, kind = source
    enabled = catalogue.select(settings.select, settings.ignore)
    outcome = rewrite_source(display, data, kind, catalogue, enabled, request)
    rewritten = outcome.rewritten if outcome.changed and outcome.rewritten is not None else data
    if diff:
        sys.stdout.write(unified_diff(display, data, rewritten) if rewritten != data else "")
    else:
        sys.stdout.buffer.write(rewritten)
    sys.stdout.flush()
    for finding in outcome.remaining:
        typer.echo(finding_line(finding), err=True)
    for error in outcome.errors:
        typer.echo(error_line(error), err=True)
    left = bool(outcome.remaining or outcome.errors) or (diff and rewritten != data)
    raise typer.Exit(EXIT_FINDINGS if left else EXIT_CLEAN)


@app.command(cls=_Command, short_help="Explain a rule, or list them all.")
def rule(
    code: Annotated[
        str | None, typer.Argument(metavar="CODE", help="The rule code, e.g. XM101.")
    ] = None,
    show_all: Annotated[bool, typer.Option("--all", help="List every rule.")] = False,
) -> None:
    """Explain a rule, or list them all."""
    from xlamigrate.ruletext import rule_listing, rule_text

    catalogue = _catalogue()
    if show_all:
        if code is not None:
            _fail(f"give a rule code or --all, not both (`xlamigrate rule {code}` explains it)")
        for line in rule_listing(sorted(catalogue.rules.values(), key=lambda r: r.code)):
            typer.echo(line)
        return
    if code is None:
        _fail("give a rule code (e.g. `xlamigrate rule XM101`) or --all")
    found = catalogue.rules.get(code.upper())
    if found is None:
        _fail(f"unknown rule {code!r}; `xlamigrate rule --all` lists them")
    typer.echo(rule_text(found))


def main() -> None:
    """Console-script entry point: usage errors as click words them (a value an option does not
    take, with the nearest one it does); any unexpected crash becomes exit code 2."""
    try:
        code = app(standalone_mode=False)
    except typer.BadParameter as error:
        error.message = _suggested(error.message)
        error.show()
        sys.exit(error.exit_code)
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        sys.exit(1)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as error:
        show, exit_code = getattr(error, "show", None), getattr(error, "exit_code", None)
        if callable(show) and isinstance(exit_code, int):  # click's own: no such option...
            show()
            sys.exit(exit_code)
        # (a bug: still honour the exit-code contract)
        typer.echo(f"xlamigrate: internal error: {type(error).__name__}: {error}", err=True)
        sys.exit(EXIT_ERROR)
    sys.exit(code if isinstance(code, int) else EXIT_CLEAN)


_NOT_ONE_OF = re.compile(r"'(?P<given>[^']*)' is not one of (?P<choices>.*?)\.?$")


def _suggested(message: str) -> str:
    """The message without the validator's "Value error, " and, for a value that is not one of
    the choices, the nearest choice (`'jsn' is not one of ...; did you mean 'json'?`)."""
    message = message.removeprefix("Value error, ")
    found = _NOT_ONE_OF.search(message)
    if found is None:
        return message
    choices = re.findall(r"'([^']*)'", found["choices"])
    near = difflib.get_close_matches(found["given"], choices, n=1, cutoff=0.5)
    return f"{message.rstrip('.')}; did you mean '{near[0]}'?" if near else message


if __name__ == "__main__":
    main()
