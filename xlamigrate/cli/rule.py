"""`xlamigrate rule`: one rule's documentation, or the list of every rule."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xlamigrate.cli import running
from xlamigrate.cli.options import Command, Parser, add_help, sections
from xlamigrate.cli.running import EXIT_CLEAN, echo, fail

if TYPE_CHECKING:
    from argparse import Namespace


def add_arguments(parser: Parser) -> None:
    arguments, options = sections(parser)
    arguments.add_argument("code", nargs="?", metavar="CODE", help="The rule code, e.g. XM101.")
    options.add_argument("--all", action="store_true", dest="show_all", help="List every rule.")
    add_help(options)


def run(args: Namespace) -> int:
    from xlamigrate.apitable import api_table
    from xlamigrate.ruleexamples import examples_of
    from xlamigrate.ruletext import rule_listing, rule_text

    code: str | None = args.code
    catalogue = running.load_catalogue()
    if args.show_all:
        if code is not None:
            fail(f"give a rule code or --all, not both (`xlamigrate rule {code}` explains it)")
        for line in rule_listing(sorted(catalogue.rules.values(), key=lambda r: r.code)):
            echo(line)
        return EXIT_CLEAN
    if code is None:
        fail("give a rule code (e.g. `xlamigrate rule XM101`) or --all")
    found = catalogue.rules.get(code.upper())
    if found is None:
        fail(f"unknown rule {code!r}; `xlamigrate rule --all` lists them")
    examples = examples_of(found.code, tuple(catalogue.modes))
    echo(rule_text(found, examples, api_table()))
    return EXIT_CLEAN


COMMAND = Command(
    name="rule",
    summary="Explain a rule, or list them all.",
    description="Explain a rule, or list them all.",
    usage="%(prog)s [OPTIONS] [CODE]",
    add_arguments=add_arguments,
    run=run,
)
