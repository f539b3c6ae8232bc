"""The `xlamigrate` command: parses the arguments (argparse), runs one command, sets the exit code.

Exit codes (as ruff): 0 nothing found, 1 findings or files that could not be checked,
2 usage, configuration or internal error. Machine output goes to stdout, summaries to stderr.
One module per command (scan, rewrite, verify, rule); each imports what it runs only when it
runs, so `--version` and `--help` load no parser, engine or catalogue.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from xlamigrate import __version__

if TYPE_CHECKING:
    from xlamigrate.cli.options import Command, Parser, RootParser

SUMMARY = (
    "Find and migrate code that relies on the deprecated XLA_USE_BF16 / XLA_DOWNCAST_BF16 flags."
)
EXIT_ERROR, EXIT_INTERRUPTED = 2, 130  # (usage, configuration or internal error; ^C)
VERSION = f"xlamigrate {__version__}"


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point (`argv`: the arguments, else sys.argv's); any unexpected crash
    still exits 2, the exit-code contract."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["--version"], ["-V"]):  # (the quickest answer: not even argparse)
        print(VERSION, flush=True)
        sys.exit(0)
    try:
        code = _run(args)
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    except Exception as error:  # a bug
        print(f"xlamigrate: internal error: {type(error).__name__}: {error}", file=sys.stderr)
        code = EXIT_ERROR
    sys.exit(code)


def entry() -> NoReturn:
    """The `xlamigrate` command's process: main(), then an exit that skips the interpreter's
    teardown once the output is flushed (freeing every module and a large tree's tables took
    some 0.1 s of a warm pre-commit run; as mypy's hard exit). Called in-process, main()
    exits as any function does. The cyclic collector runs every 200,000 allocations, not
    700: a command keeps nearly all it allocates (its modules, the cache's tables), which each
    collection walked again (a tenth of a warm run's CPU; the threshold mypy sets)."""
    gc.set_threshold(200_000, 30, 30)
    try:
        main()
    except SystemExit as done:
        code = done.code
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # (sys.exit("message"))
        print(code, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # (a closed pipe: nothing more to say)
            stream.flush()
    os._exit(status)


def commands() -> dict[str, Command]:
    """Every command by name, in the order `xlamigrate -h` lists them."""
    from xlamigrate.cli import rewrite, rule, scan, verify

    return {c.name: c for c in (scan.COMMAND, rewrite.COMMAND, verify.COMMAND, rule.COMMAND)}


def root_parser() -> RootParser:
    """`xlamigrate [OPTIONS] COMMAND`: its own options and the list of commands."""
    from xlamigrate.cli.options import HELP, RootParser

    parser = RootParser(SUMMARY, tuple(commands().values()))
    options = parser.add_argument_group("Options")
    options.add_argument(
        "-V", "--version", action="version", version=VERSION, help="Print the version."
    )
    options.add_argument("-h", "--help", action="help", help=HELP)
    return parser


def command_parser(name: str) -> Parser:
    """The parser of `xlamigrate NAME`, every option added."""
    from xlamigrate.cli.options import command_parser as build

    return build(commands()[name])


def _run(args: list[str]) -> int:
    """The root's options (up to the first word that is not one), then the command's: only
    that command's parser is built."""
    from xlamigrate.cli.options import command_parser as build
    from xlamigrate.cli.options import nearest

    root = root_parser()
    if not args:  # the help, where a command was due
        root.print_help(sys.stderr)
        return EXIT_ERROR
    at = next((index for index, word in enumerate(args) if not word.startswith("-")), len(args))
    root.parse_command(args[:at])  # -V, -h, or a usage error
    if at == len(args):
        root.error("Missing command.")
    table = commands()
    command = table.get(args[at])
    if command is None:
        near = nearest(args[at], list(table))
        hint = f" Did you mean '{near}'?" if near else ""
        root.error(f"No such command '{args[at]}'.{hint}")
    return command.run(build(command).parse_command(args[at + 1 :]))
