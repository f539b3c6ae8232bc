"""What the commands do alike once their options are parsed: a usage, configuration or internal
error as exit code 2, the catalogue and the settings, the files a run reports on, the progress
bar, a buffer on stdin. Each imports what it needs when called: a command's module stays light."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from argparse import Namespace

    from xlamigrate.catalogue import Catalogue
    from xlamigrate.config import Settings
    from xlamigrate.discover import Discovery
    from xlamigrate.engine import RunOptions
    from xlamigrate.progress import Progress
    from xlamigrate.selection import Selection

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def echo(message: str, err: bool = False) -> None:
    """A line on stdout, or on stderr (the summaries, warnings and errors)."""
    stream = sys.stderr if err else sys.stdout
    stream.write(f"{message}\n")
    stream.flush()


def fail(message: str) -> NoReturn:
    echo(f"xlamigrate: error: {message}", err=True)
    raise SystemExit(EXIT_ERROR)


def fail_on_missing(targets: list[Path]) -> None:
    """Before anything resolves the paths: a symlink loop is missing too (and made the search
    for pyproject.toml crash)."""
    missing = [str(target) for target in targets if not target.exists()]
    if missing:
        fail(f"no such file or directory: {', '.join(missing)}")


def codes(values: list[str] | None) -> list[str] | None:
    """Accepts repeated options and comma-separated lists alike."""
    if values is None:
        return None
    return [code.strip() for value in values for code in value.split(",") if code.strip()]


def load_catalogue() -> Catalogue:
    from xlamigrate.catalogue import CatalogueError
    from xlamigrate.catalogue import load_catalogue as load

    try:
        return load()
    except CatalogueError as error:
        fail(f"internal error: {error}")


def targets_and_settings(
    args: Namespace,
) -> tuple[list[Path] | None, list[Path], Catalogue, Settings]:
    """What scan and rewrite start from: the PATHS given (None: none), the paths the run is
    about (the PATHS, else the current folder), the catalogue, and the settings of the
    project found from the paths (from the buffer's name with --stdin-filename, as ruff finds
    its configuration), the options applied."""
    paths = as_paths(args.paths)
    targets = paths or [Path(".")]
    if args.stdin_filename is None:
        fail_on_missing(targets)
    else:
        targets = [Path(args.stdin_filename)]
    catalogue = load_catalogue()
    settings = load_settings(
        targets,
        catalogue,
        args.config,
        args.select,
        args.ignore,
        args.exclude,
        args.respect_gitignore,
        args.torch_xla_version,
    )
    return paths, targets, catalogue, settings


def load_settings(
    targets: list[Path],
    catalogue: Catalogue,
    config: Path | None,
    select: list[str] | None,
    ignore: list[str] | None,
    exclude: list[str] | None,
    respect_gitignore: bool,
    torch_xla_version: str | None = None,
) -> Settings:
    """[tool.xlamigrate] with the command line's overrides; a bad value is a usage error."""
    from dataclasses import replace

    from xlamigrate.catalogue import UnknownCodeError
    from xlamigrate.config import ConfigError
    from xlamigrate.config import load_settings as load

    try:
        settings = load(targets, catalogue, config)
        settings = settings.with_overrides(codes(select), codes(ignore) or (), exclude or ())
        catalogue.select(settings.select, settings.ignore)
    except (ConfigError, UnknownCodeError) as error:
        fail(str(error))
    if torch_xla_version is not None:
        from xlamigrate.apitable import Version

        try:
            settings = replace(settings, torch_xla_version=Version.parse(torch_xla_version))
        except ValueError:
            fail(f"--torch-xla-version takes a release like 2.1, not {torch_xla_version!r}")
    return settings if respect_gitignore else replace(settings, respect_gitignore=False)


def selection(
    targets: list[Path], settings: Settings, discovery: Discovery, whole: bool, use_cache: bool
) -> Selection:
    """The files a run reports on and edits, in the project found from the paths (warned of,
    as ruff does, where there are none)."""
    from xlamigrate.selection import select

    chosen = select(targets, settings, discovery, whole, use_cache)
    if not chosen.named.files:
        echo("xlamigrate: warning: No files to check under the given path(s)", err=True)
    return chosen


def run_options(
    args: Namespace,
    discovery: Discovery,
    progress: Progress,
    selection: Selection,
    use_cache: bool,
) -> RunOptions:
    """How the engine runs a command of these arguments over these files."""
    return {
        "jobs": args.jobs or None,
        "discovery": discovery,
        "progress": progress,
        "use_cache": use_cache,
        "selection": selection,
    }


def progress(human: bool) -> contextlib.AbstractContextManager[Progress]:
    """A progress bar on a terminal's stderr for a long run in a human format; else nothing."""
    from xlamigrate.progress import SILENT, for_terminal

    bar = for_terminal(human)
    return bar if bar is not None else contextlib.nullcontext(SILENT)


def stdin_source(
    name: str, paths: list[Path] | None, settings: Settings
) -> tuple[str, bytes, str] | None:
    """(display path, bytes, kind) of the buffer on stdin; None when the name is excluded."""
    from xlamigrate.discover import classify_buffer, display_path, is_excluded

    if paths and paths != [Path("-")]:
        fail("--stdin-filename reads standard input: give no paths (or `-`)")
    data = sys.stdin.buffer.read()
    kind = classify_buffer(name, data)
    if kind is None:
        fail(f"{name}: not a file kind xlamigrate checks (from its name or shebang)")
    if is_excluded(Path(name), settings):
        return None
    return display_path(Path(name)), data, kind


def in_project(
    name: str, data: bytes, settings: Settings, use_cache: bool
) -> tuple[Selection, dict[str, bytes]] | None:
    """A buffer named after a file of the project, judged in it as that file would be (the
    launch graph over the whole root, its bytes the buffer's): its selection and the overlay;
    None for a name no file of the project has (judged alone)."""
    from xlamigrate.discover import discover
    from xlamigrate.selection import select

    path = Path(name)
    if not path.is_file():
        return None
    discovery = discover([path], settings)
    if len(discovery.files) != 1:
        return None
    chosen = select([path], settings, discovery, use_cache=use_cache)
    return chosen, {discovery.files[0].display: data}


def as_paths(values: list[str] | None) -> list[Path] | None:
    """The PATHS arguments (None where none was given)."""
    return [Path(value) for value in values] if values else None
