"""`xlamigrate rewrite`: migrate the code to an explicit BF16 recipe and current torch-xla APIs,
writing the files (or, with --diff / --check, saying what would change)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from xlamigrate.cli import running
from xlamigrate.cli.options import (
    Command,
    Parser,
    add_choice,
    add_codes,
    add_format,
    add_run_options,
    sections,
)
from xlamigrate.cli.running import EXIT_CLEAN, EXIT_FINDINGS, echo, fail
from xlamigrate.results import WRITE_FAILED
from xlamigrate.settingvalues import RUNTIMES, TARGETS

if TYPE_CHECKING:
    from argparse import Namespace

    from xlamigrate.catalogue import Catalogue
    from xlamigrate.config import Settings
    from xlamigrate.request import RewriteRequest
    from xlamigrate.results import RewriteReport

FORMATS = ("text", "json")


def add_arguments(parser: Parser) -> None:
    from xlamigrate.recipes import DEFAULT_MODE, MODES  # (the recipes' names: rules/modes.toml)

    arguments, options = sections(parser)
    arguments.add_argument(
        "paths",
        nargs="*",
        default=[],
        metavar="PATHS",
        help="Files or folders to rewrite (default: .).",
    )
    add_choice(
        options,
        "--mode",
        values=MODES,
        help=f"The recipe (default: [tool.xlamigrate] mode, else {DEFAULT_MODE}).",
    )
    add_choice(
        options,
        "--target",
        values=TARGETS,
        help="The platform (default: [tool.xlamigrate] target, else what each launcher says,"
        " else neuron).",
    )
    add_choice(
        options,
        "--runtime",
        values=RUNTIMES,
        help="How rewritten scripts get the xlamigrate_runtime they import: package adds"
        " xlamigrate-runtime to the project's requirements.txt or pyproject.toml; vendor"
        " copies the package next to each script (default: [tool.xlamigrate] runtime, else"
        " package).",
    )
    options.add_argument("--diff", action="store_true", help="Print a diff; write nothing.")
    options.add_argument(
        "--check", action="store_true", help="Write nothing; exit 1 if something would change."
    )
    options.add_argument(
        "--unsafe-fixes", action="store_true", help="Also apply fixes marked unsafe."
    )
    add_format(options, FORMATS)
    add_codes(
        options,
        select="Rule codes or prefixes.",
        ignore="Rule codes or prefixes not to fix.",
        exclude="Patterns to skip.",
    )
    add_run_options(
        options, "Rewrite standard input (named as this path) to standard output.", "written"
    )


def run(args: Namespace) -> int:
    from xlamigrate.config import DEFAULT_RUNTIME
    from xlamigrate.engine import rewrite_paths
    from xlamigrate.recipes import DEFAULT_MODE
    from xlamigrate.report.rewrite_format import grouped_diffs, render_json, render_text, summary
    from xlamigrate.report.text_format import error_line
    from xlamigrate.request import DEFAULT_SIGNAL, RewriteRequest
    from xlamigrate.selection import named_files
    from xlamigrate.writer import unified_diff

    diff: bool = args.diff
    use_cache = not args.no_cache
    paths, targets, catalogue, settings = running.targets_and_settings(args)
    chosen: str = args.mode or settings.mode or DEFAULT_MODE
    request = RewriteRequest(
        chosen,
        args.unsafe_fixes,
        target=args.target or settings.target,
        signal=settings.signal or DEFAULT_SIGNAL,
        runtime=args.runtime or settings.runtime or DEFAULT_RUNTIME,
    )
    if args.stdin_filename is not None:
        return _rewrite_stdin(
            args.stdin_filename, paths, settings, catalogue, request, diff, use_cache
        )
    discovery = named_files(targets, settings, use_cache)
    if discovery.missing:
        fail(f"no such file or directory: {', '.join(discovery.missing)}")
    selection = running.selection(targets, settings, discovery, args.whole_project, use_cache)
    with running.progress(args.output_format == "text") as progress:
        options = running.run_options(args, discovery, progress, selection, use_cache)
        report = rewrite_paths(targets, settings, catalogue, request, **options)
    for skipped in discovery.skipped:
        echo(f"xlamigrate: skipped {skipped}: not a file kind xlamigrate checks", err=True)
    apply = not (diff or args.check)
    if apply:
        report = _write_rewrites(report, {s.display: s.path for s in selection.project.files})
    diffs = {
        outcome.path: unified_diff(
            outcome.path, outcome.original, outcome.rewritten, outcome.created
        )
        for outcome in report.outcomes
        if diff and outcome.changed and outcome.rewritten is not None
    }
    if args.output_format == "json":
        sys.stdout.write(render_json(report, chosen, apply, diffs))
    elif diff:
        sys.stdout.write(grouped_diffs(report, diffs))
        for error in report.errors:  # (the diff says what changes; these, what could not)
            echo(error_line(error), err=True)
    else:
        sys.stdout.write(render_text(report, apply))
    sys.stdout.flush()
    echo(summary(report, apply), err=True)
    pending = not apply and any(outcome.changed for outcome in report.outcomes)
    left = any(outcome.remaining for outcome in report.outcomes) or bool(report.errors)
    return EXIT_FINDINGS if pending or left else EXIT_CLEAN


def _write_rewrites(report: RewriteReport, sources: dict[str, Path]) -> RewriteReport:
    """Writes each changed file; a file that could not be written is reported as unchanged."""
    from dataclasses import replace

    from xlamigrate.report.written_positions import as_written
    from xlamigrate.results import FileError
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
                errors.append(FileError(outcome.path, None, str(error), code=WRITE_FAILED))
                outcome = replace(outcome, rewritten=None, fixed=())
            else:  # what is left is reported where it now is
                outcome = replace(outcome, remaining=as_written(outcome))
        outcomes.append(outcome)
    return replace(report, outcomes=tuple(outcomes), errors=tuple(errors))


def _rewrite_stdin(
    name: str,
    paths: list[Path] | None,
    settings: Settings,
    catalogue: Catalogue,
    request: RewriteRequest,
    diff: bool,
    use_cache: bool = False,
) -> int:
    """An editor's buffer: the rewrite (or, with --diff, the diff) on stdout, the rest on
    stderr; exit 1 when findings are left for manual work (or, with --diff, a change is due).
    A buffer named after a file of the project is planned as `rewrite NAME` plans that file,
    with the buffer's bytes; else alone."""
    from xlamigrate.engine import rewrite_paths, rewrite_source
    from xlamigrate.report.text_format import error_line, finding_line
    from xlamigrate.results import RewriteOutcome
    from xlamigrate.writer import unified_diff

    source = running.stdin_source(name, paths, settings)
    if source is None:
        return EXIT_CLEAN  # excluded: nothing to say (the editor keeps its buffer)
    display, data, kind = source
    enabled = catalogue.select(settings.select, settings.ignore)
    project = running.in_project(name, data, settings, use_cache)
    outcome = None
    if project is not None:
        selection, overlay = project
        report = rewrite_paths(
            [Path(name)],
            settings,
            catalogue,
            request,
            use_cache=use_cache,
            selection=selection,
            overlay=overlay,
        )
        outcome = next((o for o in report.outcomes if o.path in overlay), None)
        errors = [e for e in report.errors if e.path in overlay]
        if outcome is None:  # (nothing in it to rewrite or report)
            outcome = RewriteOutcome(display, data, None, errors=tuple(errors))
    if outcome is None:
        outcome = rewrite_source(display, data, kind, catalogue, enabled, request)
    rewritten = outcome.rewritten if outcome.changed and outcome.rewritten is not None else data
    if diff:
        sys.stdout.write(unified_diff(display, data, rewritten) if rewritten != data else "")
    else:
        sys.stdout.buffer.write(rewritten)
    sys.stdout.flush()
    for finding in outcome.remaining:
        echo(finding_line(finding), err=True)
    for error in outcome.errors:
        echo(error_line(error), err=True)
    left = bool(outcome.remaining or outcome.errors) or (diff and rewritten != data)
    return EXIT_FINDINGS if left else EXIT_CLEAN


COMMAND = Command(
    name="rewrite",
    summary="Rewrite code to an explicit BF16 recipe and current torch-xla APIs.",
    description="Rewrite scripts to an explicit BF16 recipe (full-bf16, fp32-copy or autocast),"
    " and torch-xla API calls removed or deprecated on the way to torch-xla 2.9 to their"
    " successors (`--select XM5` for those alone, `--ignore XM5` for the recipe alone).",
    usage="%(prog)s [OPTIONS] [PATHS]...",
    add_arguments=add_arguments,
    run=run,
    epilog="Exit codes: 0 nothing left to do; 1 a change pending (--diff, --check), findings"
    " left for manual work, or files that could not be rewritten; 2 usage, configuration or"
    " internal error.",
)
