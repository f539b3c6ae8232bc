"""What every command's parser shares: the help layout, usage errors (exit code 2, a value an
option does not take named with the nearest one it does), checked values, and the options that
scan and rewrite both take. The standard library only: `--help` must start fast."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

EXIT_USAGE = 2
HELP = "Show this message and exit."


class Command(NamedTuple):
    """One subcommand: its texts, the options it adds to its parser, and what it runs (which
    imports the command's dependencies only when called)."""

    name: str
    summary: str  # its line in `xlamigrate -h`
    description: str  # paragraphs separated by blank lines
    usage: str
    add_arguments: Callable[[Parser], None]
    run: Callable[[argparse.Namespace], int]
    epilog: str | None = None


class HelpFormatter(argparse.HelpFormatter):
    """click's layout, which the help had before: `-f, --format <text|json>` with the value
    named once, `PATHS...` for an argument that takes several, `[default: ...]` after the text,
    and each paragraph of a description kept."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=30)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings:  # an argument, named as the usage line names it
            name = str(action.metavar or action.dest)
            return name + ("..." if action.nargs in ("*", "+") else "")
        flags = ", ".join(action.option_strings)
        if action.nargs == 0:
            return flags
        return f"{flags} {action.metavar or action.dest.upper()}"

    def _get_help_string(self, action: argparse.Action) -> str:
        notes = []
        default = action.default
        if isinstance(action, Toggle):
            notes.append(f"default: {action.option_strings[0 if default else 1]}")
        elif action.option_strings and action.nargs != 0 and default is not None:
            notes.append(f"default: {default}")
        minimum = getattr(action.type, "minimum", None)
        if minimum is not None:
            notes.append(f"at least {minimum}")
        text = action.help or ""
        if notes:  # (argparse %-formats the help: a '%' in a default stays one)
            text += f"  [{'; '.join(notes)}]".replace("%", "%%")
        return text

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        paragraphs = (" ".join(paragraph.split()) for paragraph in text.split("\n\n"))
        return "\n\n".join(
            textwrap.fill(paragraph, width, initial_indent=indent, subsequent_indent=indent)
            for paragraph in paragraphs
        )


class Parser(argparse.ArgumentParser):
    """A command's parser: usage errors on stderr, exit code 2, with the usage line and a
    pointer to `-h`; options anywhere among the arguments, as before."""

    def __init__(self, prog: str, usage: str, description: str, epilog: str | None) -> None:
        super().__init__(
            prog=prog,
            usage=usage,
            description=description,
            epilog=epilog,
            formatter_class=HelpFormatter,
            add_help=False,  # (-h, --help: added last, as each command lists it)
            allow_abbrev=False,  # --form is no --format
        )

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\nTry '{self.prog} -h' for help.\n")

    def parse_command(self, args: Sequence[str]) -> argparse.Namespace:
        """Options anywhere among the arguments, and every word after `--` an argument even
        where it starts with '-' (Python 3.11's intermixed parsing drops such a word: each one
        reaches the parser as a stand-in, put back after)."""
        words = list(args)
        options = words[: words.index("--")] if "--" in words else words
        if "-h" in options or "--help" in options:  # (not amid the intermixed parsing, whose
            self.print_help()  # first pass shows every argument as taking no value)
            self.exit()
        stand_ins: dict[str, str] = {}
        if "--" in words:
            cut = words.index("--")
            rest = words[cut + 1 :]
            for index, word in enumerate(rest):
                if word.startswith("-"):
                    stand_ins[f"\0{index}"] = word  # (no argument a shell passes holds a NUL)
                    rest[index] = f"\0{index}"
            words = [*words[:cut], *rest]
        namespace, extras = self.parse_known_intermixed_args(words)
        for word in extras:
            if word.startswith("-"):
                self.error(f"No such option: {word}{self._nearest_option(word)}")
        if extras:
            named = " ".join(stand_ins.get(word, word) for word in extras)
            self.error(f"Got unexpected extra argument(s) ({named})")
        for action in self._actions if stand_ins else ():
            value = getattr(namespace, action.dest, None)
            if action.option_strings:
                continue
            if isinstance(value, list):
                setattr(namespace, action.dest, [stand_ins.get(v, v) for v in value])
            elif isinstance(value, str):
                setattr(namespace, action.dest, stand_ins.get(value, value))
        return namespace

    def _nearest_option(self, word: str) -> str:
        flags = [flag for action in self._actions for flag in action.option_strings]
        near = nearest(word.partition("=")[0], flags, cutoff=0.6)
        return f"; did you mean {near}?" if near else ""


class RootParser(Parser):
    """`xlamigrate` itself: its options, then one row per command."""

    def __init__(self, description: str, commands: Sequence[Command]) -> None:
        super().__init__("xlamigrate", "%(prog)s [OPTIONS] COMMAND [ARGS]...", description, None)
        self.commands = tuple(commands)

    def format_help(self) -> str:
        formatter = HelpFormatter(self.prog)
        formatter.start_section("Commands")
        for command in self.commands:  # (an argument-like row: the name, then its summary)
            formatter.add_argument(
                argparse.Action(option_strings=[], dest=command.name, help=command.summary)
            )
        formatter.end_section()
        return super().format_help() + "\n" + formatter.format_help()


def nearest(word: str, candidates: Sequence[str], cutoff: float = 0.6) -> str | None:
    """The candidate closest to a mistyped word, if any is close (difflib: only on an error)."""
    import difflib

    near = difflib.get_close_matches(word, candidates, n=1, cutoff=cutoff)
    return near[0] if near else None


class Choice:
    """An option's value, one of `values`; anything else is a usage error that lists them and
    names the nearest (`'jsn' is not one of 'text', ...; did you mean 'json'?`)."""

    def __init__(self, values: Sequence[str]) -> None:
        self.values = tuple(values)
        self.metavar = f"<{'|'.join(self.values)}>"

    def __call__(self, value: str) -> str:
        if value in self.values:
            return value
        message = f"'{value}' is not one of {', '.join(repr(v) for v in self.values)}"
        near = nearest(value, self.values, cutoff=0.5)
        raise argparse.ArgumentTypeError(f"{message}; did you mean '{near}'?" if near else message)


class AtLeast:
    """A whole number (or, with `kind=float`, any number) no smaller than `minimum`."""

    def __init__(self, minimum: float, kind: type[int] | type[float] = int) -> None:
        self.minimum = minimum
        self.kind = kind

    def __call__(self, text: str) -> float:
        try:
            value = self.kind(text)
        except ValueError:
            wanted = "a whole number" if self.kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}") from None
        if not value >= self.minimum:
            raise argparse.ArgumentTypeError(f"{text} is less than the minimum, {self.minimum}")
        return value


class Toggle(argparse.BooleanOptionalAction):
    """`--x / --no-x`, its help as written (Python 3.11's own appends "(default: True)")."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = kwargs.get("help")


def sections(parser: Parser) -> tuple[argparse._ArgumentGroup, argparse._ArgumentGroup]:
    """The Arguments and Options sections of a command's help, in that order."""
    return parser.add_argument_group("Arguments"), parser.add_argument_group("Options")


def add_choice(
    options: argparse._ActionsContainer, *flags: str, values: Sequence[str], **kwargs: Any
) -> None:
    choice = Choice(values)
    options.add_argument(
        *flags, type=choice, choices=choice.values, metavar=choice.metavar, **kwargs
    )


def add_format(options: argparse._ActionsContainer, formats: Sequence[str]) -> None:
    add_choice(
        options,
        "-f",
        "--format",
        "--output-format",
        values=formats,
        dest="output_format",
        default=formats[0],
        help="Output format.",
    )


def add_codes(options: argparse._ActionsContainer, select: str, ignore: str, exclude: str) -> None:
    """--select, --ignore and --exclude, each repeatable (codes also comma-separated)."""
    options.add_argument("--select", action="append", metavar="CODES", help=select)
    options.add_argument("--ignore", action="append", metavar="CODES", help=ignore)
    options.add_argument("--exclude", action="append", metavar="PATTERN", help=exclude)


def add_gitignore(options: argparse._ActionsContainer) -> None:
    options.add_argument(
        "--respect-gitignore", action=Toggle, default=True, help="Skip files .gitignore ignores."
    )


def add_torch_xla_version(options: argparse._ActionsContainer, not_done: str) -> None:
    """`not_done`: what happens to the fixes newer than that release ("offered", "written")."""
    options.add_argument(
        "--torch-xla-version",
        metavar="X.Y",
        help="The oldest torch-xla the project runs on (default: [tool.xlamigrate]"
        f" torch-xla-version, else its requirements' pins): newer API fixes are not {not_done}.",
    )


def add_cache_and_project(options: argparse._ActionsContainer) -> None:
    """scan and rewrite: results of earlier runs are kept in <root>/.xlamigrate_cache (cache.py),
    and the whole project below the root can be named, not only the paths."""
    options.add_argument(
        "--no-cache",
        action="store_true",
        help="Neither read nor write the cache of earlier results in .xlamigrate_cache (also"
        " with XLAMIGRATE_NO_CACHE=1).",
    )
    options.add_argument(
        "--project",
        action="store_true",
        dest="whole_project",
        help="Every file of the project: below the nearest folder up from the paths with .git,"
        " a pyproject.toml or the configuration (the paths' common folder, where none has).",
    )


def add_help(options: argparse._ActionsContainer) -> None:
    options.add_argument("-h", "--help", action="help", help=HELP)


def add_run_options(options: argparse._ActionsContainer, stdin: str, not_done: str) -> None:
    """What scan and rewrite end their options with: workers, the configuration file,
    .gitignore, standard input (`stdin`: what is done with it), the torch-xla floor
    (`not_done`: see add_torch_xla_version), the cache and the whole project, help."""
    options.add_argument(
        "-j",
        "--jobs",
        type=AtLeast(0),
        default=0,
        metavar="N",
        help="Worker processes (0: one per CPU).",
    )
    options.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="Read [tool.xlamigrate] from this pyproject.toml.",
    )
    add_gitignore(options)
    options.add_argument("--stdin-filename", metavar="PATH", help=stdin)
    add_torch_xla_version(options, not_done)
    add_cache_and_project(options)
    add_help(options)


def command_parser(command: Command) -> Parser:
    """The parser of `xlamigrate NAME`, with every option."""
    parser = Parser(
        f"xlamigrate {command.name}", command.usage, command.description, command.epilog
    )
    command.add_arguments(parser)
    return parser
