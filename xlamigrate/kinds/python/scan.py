"""Scans one Python file's bytes: parse once, analyse once, filter by selection and noqa.

The analysis runs on the standard library's `ast` (the C parser, scopes and positions read off
its nodes: astwalk.py), shell command strings included (commands.py maps their characters into
the file from their tokens). libcst is loaded only where a finding depends on the rewriter's
plan: the reads a project's recipe resolves, and the file's own enabling writes, whose fix
depends on whether the rewriter can put their recipe in whole."""

from __future__ import annotations

import ast
import io
import tokenize
import warnings
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from xlamigrate.catalogue import Catalogue
from xlamigrate.findings import with_note
from xlamigrate.flagvalue import RECIPE_FLAGS
from xlamigrate.kinds.python.astpositions import SourceLines
from xlamigrate.kinds.python.detect import classified
from xlamigrate.kinds.python.envaccess import (
    EnvAccess,
    EnvAccessAnalysis,
    FlagMention,
    analyse_module_env_accesses,
)
from xlamigrate.model import FileError, FileResult, Finding, Fix, Span
from xlamigrate.neuronflags import RECIPE_VARIABLES
from xlamigrate.request import STANDALONE, FileContext
from xlamigrate.suppression import is_suppressed, parse_suppressions

if TYPE_CHECKING:
    pass

Pairs = list[tuple[EnvAccess | FlagMention, Finding]]


def scan_python(
    path: str,
    data: bytes,
    catalogue: Catalogue,
    enabled: frozenset[str],
    context: FileContext = STANDALONE,
) -> FileResult:
    parsed = _parsed(data)
    found = _scan_on_ast(path, *parsed, catalogue, enabled, context) if parsed else None
    if found is not None:
        return found
    tree = parsed[1] if parsed else None
    return _scan_on_libcst(path, data, catalogue, enabled, context, tree)


def _parsed(data: bytes) -> tuple[str, ast.Module] | None:
    """The file's text and `ast` tree; None where it does not parse (libcst's path words the
    error)."""
    if b"\0" in data:
        return None
    try:
        source = _decoded(data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences: the compiler's to say
            return source, ast.parse(data)
    except (SyntaxError, ValueError, UnicodeDecodeError, LookupError, RecursionError, MemoryError):
        return None


def _scan_on_ast(
    path: str,
    source: str,
    module: ast.Module,
    catalogue: Catalogue,
    enabled: frozenset[str],
    context: FileContext,
) -> FileResult | None:
    """The scan on `ast`, or None where the file needs libcst's tree (see the module's doc)."""
    analysis = analyse_module_env_accesses(module, source, catalogue.flags)
    lines = SourceLines(source)
    pairs = reported(path, source, analysis, lines.span, catalogue, enabled)
    if _needs_the_rewriter(pairs, context):
        return None
    pairs = kept_for_children(pairs, context, analysis.children)
    found = [finding for _, finding in pairs]
    if analysis.commands:
        from xlamigrate.kinds.python.commands import ast_command_findings

        commands = analysis.commands
        found += ast_command_findings(path, source, lines, commands, catalogue, enabled)  # type: ignore[arg-type]
    return FileResult(path, findings=tuple(sorted(found, key=lambda f: f.sort_key)))


def _needs_the_rewriter(pairs: Pairs, context: FileContext) -> bool:
    """Whether a finding's wording or fix depends on the rewriter's plan of the file."""
    reads = any(isinstance(a, EnvAccess) and a.kind == "read" for a, _ in pairs)
    if context.reads_against is not None and reads:
        return True
    return context.recipe is None and any(_removable_enabling(item, f) for item, f in pairs)


def _decoded(data: bytes) -> str:
    """The file's text, decoded as Python decodes it (PEP 263 cookie, BOM), newlines kept."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


def _scan_on_libcst(
    path: str,
    data: bytes,
    catalogue: Catalogue,
    enabled: frozenset[str],
    context: FileContext,
    tree: ast.Module | None = None,
) -> FileResult:
    from libcst.metadata import MetadataWrapper, PositionProvider

    from xlamigrate.kinds.python.commands import command_findings
    from xlamigrate.kinds.python.detect import span_of
    from xlamigrate.kinds.python.envaccess import analyse_env_accesses
    from xlamigrate.kinds.python.parse import parse_python
    from xlamigrate.nesting import nesting_error

    too_deep = nesting_error(path, data, tree)  # what would crash libcst's parser
    if too_deep is not None:
        return FileResult(path, errors=(too_deep,))
    parsed = parse_python(path, data)
    if isinstance(parsed, FileError):
        return FileResult(path, errors=(parsed,))
    wrapper = MetadataWrapper(parsed, unsafe_skip_copy=True)
    planned = context.recipe is None  # its own enabling writes may need the rewriter's plan
    also = RECIPE_VARIABLES if planned else ()
    analysis = analyse_env_accesses(wrapper, catalogue.flags, also)
    positions = wrapper.resolve(PositionProvider)
    pairs = reported(
        path, parsed.code, analysis, lambda node: span_of(node, positions), catalogue, enabled
    )
    recipe = context.reads_against
    reads = {a.node: f for a, f in pairs if isinstance(a, EnvAccess) and a.kind == "read"}
    if recipe is not None and reads:  # what the rewrite makes of them, as it would say it
        from xlamigrate.kinds.python.reads import read_outcomes
        from xlamigrate.kinds.python.training import TrainingScript

        script = TrainingScript(wrapper)
        outcomes = read_outcomes(script, analysis.accesses, reads, recipe, context.signal)
        worded = {(f.span, f.code): f for o in outcomes for f in o.findings}
        pairs = [(item, worded.get((f.span, f.code), f)) for item, f in pairs]
    pairs = kept_for_children(pairs, context, analysis.children)
    if context.recipe is None and any(_removable_enabling(item, f) for item, f in pairs):
        from xlamigrate.kinds.python.rewrite import kept_for_recipe

        pairs = kept_for_recipe(path, wrapper, pairs, catalogue, context, analysis.accesses)
    found = [finding for _, finding in pairs]
    found += command_findings(path, wrapper, analysis.commands, catalogue, enabled)
    return FileResult(path, findings=tuple(sorted(found, key=lambda f: f.sort_key)))


def reported(
    path: str,
    source: str,
    analysis: EnvAccessAnalysis,
    span: Callable[[Any], Span],
    catalogue: Catalogue,
    enabled: frozenset[str],
) -> Pairs:
    """The findings the user asked for: selected codes, not suppressed by a comment."""
    pairs = [
        (item, finding)
        for item, finding in classified(path, analysis, span, catalogue)
        if finding.code in enabled
    ]
    if not pairs:
        return pairs
    lines = SourceLines(source).lines
    marked = any(
        "#" in lines[line - 1]
        for _, finding in pairs
        for line in {finding.span.line, finding.span.end_line}
        if line - 1 < len(lines)
    )
    if not marked:  # no comment on a finding's line: nothing suppresses it (no tokenizing)
        return pairs
    table = parse_suppressions(_comments(source))
    return [
        (item, finding)
        for item, finding in pairs
        if not is_suppressed(finding.code, {finding.span.line, finding.span.end_line}, table)
    ]


def kept_for_children(
    pairs: list[tuple[EnvAccess | FlagMention, Finding]],
    context: FileContext,
    started: tuple[str, ...] = (),
) -> list[tuple[EnvAccess | FlagMention, Finding]]:
    """Where the file's process starts Python scripts (`context.children`, `started`), a write
    that turns a legacy flag on in that process reaches them too: it stays (manual) until they
    have the recipe, whatever the file itself gets."""
    children = tuple(dict.fromkeys((*context.children, *started)))
    if not children:
        return pairs
    scripts = ", ".join(children)
    note = (
        f"it also reaches {scripts}, which this file starts: these launches are not followed"
        " yet, so put the recipe in that script by hand, then remove this write"
    )
    kept = []
    for item, finding in pairs:
        if _enabling_process_write(item):
            finding = replace(finding, message=with_note(finding.message, note), fix=Fix("manual"))
        kept.append((item, finding))
    return kept


def _removable_enabling(item: EnvAccess | FlagMention, finding: Finding) -> bool:
    """A write of the process's own legacy flag that may turn it on, which the rewrite may
    remove (it does so only where the recipe goes in whole)."""
    return (
        _enabling_process_write(item)
        and finding.fix is not None
        and finding.fix.applicability != "manual"
    )


def _enabling_process_write(item: EnvAccess | FlagMention) -> bool:
    return (
        isinstance(item, EnvAccess)
        and item.kind == "write"
        and item.target == "process"
        and item.variable in RECIPE_FLAGS
        and item.value is not None
        and item.value.enabled is not False
    )


def _comments(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment: tokenize knows a `#` inside a string is not one."""
    readline = io.StringIO(source).readline
    try:
        for token in tokenize.generate_tokens(readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.string
    except (tokenize.TokenError, SyntaxError):
        return
