"""`xlamigrate scan`: report every legacy flag and outdated torch-xla API, in a human or a
machine format; exit 1 when something was found."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from xlamigrate.cli import running
from xlamigrate.cli.options import (
    Command,
    Parser,
    add_codes,
    add_format,
    add_run_options,
    sections,
)
from xlamigrate.cli.running import EXIT_CLEAN, EXIT_FINDINGS, echo, fail

if TYPE_CHECKING:
    from argparse import Namespace

    from xlamigrate.catalogue import Catalogue
    from xlamigrate.config import Settings
    from xlamigrate.results import ScanReport

FORMATS = ("text", "concise", "json", "sarif", "github", "gitlab")  # (report/: one renderer each)


def add_arguments(parser: Parser) -> None:
    arguments, options = sections(parser)
    arguments.add_argument(
        "paths",
        nargs="*",
        default=[],  # (not a required argument, to argparse)
        metavar="PATHS",
        help="Files or folders to scan (default: the current folder).",
    )
    add_format(options, FORMATS)
    add_codes(
        options,
        select="Rule codes or prefixes to report (replaces the config).",
        ignore="Rule codes or prefixes not to report.",
        exclude="Extra gitignore-style patterns to skip.",
    )
    options.add_argument(
        "--exit-zero", action="store_true", help="Exit 0 even when something was found."
    )
    options.add_argument(
        "--statistics", action="store_true", help="Print the number of findings per rule."
    )
    add_run_options(
        options, "Scan standard input, reported (and classified) as this path.", "offered"
    )


def run(args: Namespace) -> int:
    from xlamigrate.engine import scan_paths
    from xlamigrate.recipes import DEFAULT_MODE
    from xlamigrate.selection import named_files
    from xlamigrate.workers import prefetching

    output_format: str = args.output_format
    use_cache = not args.no_cache
    if args.statistics and output_format not in ("text", "json"):
        fail("--statistics prints text or json: drop --format or choose one of those")
    paths, targets, catalogue, settings = running.targets_and_settings(args)
    if args.stdin_filename is not None:
        report = _scan_stdin(args.stdin_filename, paths, settings, catalogue, use_cache)
    else:
        with prefetching(catalogue, settings, use_cache, args.jobs or None) as prefetch:
            found = prefetch.found if prefetch is not None else None
            discovery = named_files(targets, settings, use_cache, found)
            if discovery.missing:
                fail(f"no such file or directory: {', '.join(discovery.missing)}")
            for skipped in discovery.skipped:
                echo(f"xlamigrate: skipped {skipped}: not a file kind xlamigrate checks", err=True)
            with running.progress(output_format == "text") as progress:
                selection = running.selection(
                    targets, settings, discovery, args.whole_project, use_cache
                )
                options = running.run_options(args, discovery, progress, selection, use_cache)
                options["prefetch"] = prefetch
                report = scan_paths(targets, settings, catalogue, **options)
    if args.statistics:
        from xlamigrate.report.statistics import render_statistics

        sys.stdout.write(render_statistics(report, catalogue, output_format == "json"))
        sys.stdout.flush()
    else:
        _print_report(report, catalogue, output_format, settings.mode or DEFAULT_MODE)
    return EXIT_FINDINGS if report.has_problems and not args.exit_zero else EXIT_CLEAN


def _scan_stdin(
    name: str, paths: list[Path] | None, settings: Settings, catalogue: Catalogue, use_cache: bool
) -> ScanReport:
    """The buffer's findings: those `scan NAME` gives the file with the buffer's bytes (a
    file of the project); else the buffer's alone."""
    from xlamigrate.engine import scan_paths, scan_source
    from xlamigrate.findings import worded_report
    from xlamigrate.results import ScanReport

    source = running.stdin_source(name, paths, settings)
    if source is None:
        return ScanReport(files_scanned=0)
    display, data, kind = source
    project = running.in_project(name, data, settings, use_cache)
    if project is not None:
        selection, overlay = project
        return scan_paths(
            [Path(name)],
            settings,
            catalogue,
            jobs=None,
            use_cache=use_cache,
            selection=selection,
            overlay=overlay,
        )
    enabled = catalogue.select(settings.select, settings.ignore)
    result = scan_source(display, data, kind, catalogue, enabled)
    report = ScanReport(1, result.findings, result.errors, files_parsed=1)
    return worded_report(report, catalogue)


def _print_report(report: ScanReport, catalogue: Catalogue, output_format: str, mode: str) -> None:
    """`mode`: the recipe the scan judged the fixes for, which the summary names."""
    from xlamigrate.report import renderer
    from xlamigrate.report.scan_summary import summary

    if output_format == "text" and sys.stdout.isatty():
        from xlamigrate.report.rich_text import print_report

        print_report(report)
    else:
        sys.stdout.write(renderer(output_format)(report, catalogue))
        sys.stdout.flush()
    echo(summary(report, mode), err=True)


COMMAND = Command(
    name="scan",
    summary="Report legacy precision flags and outdated torch-xla APIs.",
    description="Report every place the code touches a legacy Torch-XLA precision flag, and every"
    " use of a torch-xla API removed or deprecated on the way to torch-xla 2.9.",
    usage="%(prog)s [OPTIONS] [PATHS]...",
    add_arguments=add_arguments,
    run=run,
    epilog="Exit codes: 0 nothing found; 1 findings, or files that could not be parsed; 2 usage,"
    " configuration or internal error.",
)
