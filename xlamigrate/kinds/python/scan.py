"""Scans one Python file's bytes: parse once, analyse once, filter by selection and noqa.

The analysis runs on the standard library's `ast` (the C parser, scopes and positions read off
its nodes: astwalk.py), shell command strings included (commands.py maps their characters into
the file from their tokens). Where a finding depends on the rewriter's plan (the reads a
project's recipe resolves; the file's own enabling writes, whose fix depends on whether the
recipe can go in whole), the planner says it, on the same tree: libcst is never loaded."""

from __future__ import annotations

import ast
import io
import tokenize
import warnings
from collections.abc import Callable, Collection, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from xlamigrate.catalogue import Catalogue
from xlamigrate.findings import with_note
from xlamigrate.flagvalue import RECIPE_FLAGS
from xlamigrate.kinds.python.astpositions import SourceLines
from xlamigrate.kinds.python.astscopes import Scopes
from xlamigrate.kinds.python.detect import classified
from xlamigrate.kinds.python.envaccess import (
    EnvAccess,
    EnvAccessAnalysis,
    FlagMention,
    analyse_env_accesses,
)
from xlamigrate.model import FileError, FileResult, Finding, Fix, Span
from xlamigrate.neuronflags import RECIPE_VARIABLES
from xlamigrate.request import STANDALONE, FileContext, FileTask
from xlamigrate.suppression import finding_suppressed, parse_suppressions

if TYPE_CHECKING:
    from xlamigrate.kinds.python.training import TrainingScript
    from xlamigrate.kinds.python.xlaapis import ApiFinding

Pairs = list[tuple[EnvAccess | FlagMention, Finding]]


def scan_python(task: FileTask) -> FileResult:
    parsed = parsed_python(task.data)
    if parsed is None:
        return FileResult(task.path, errors=(parse_failure(task.path, task.data),))
    return _scan_on_ast(task.path, *parsed, task.catalogue, task.enabled, task.decided)


def parsed_python(data: bytes) -> tuple[str, ast.Module] | None:
    """The file's text and `ast` tree; None where it does not parse (`parse_failure` says
    why)."""
    if b"\0" in data:
        return None
    try:
        source = _decoded(data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences: the compiler's to say
            return source, ast.parse(data)
    except (SyntaxError, ValueError, UnicodeDecodeError, LookupError, RecursionError, MemoryError):
        return None


def parse_failure(path: str, data: bytes) -> FileError:
    """Why a file does not parse, with its line: nested too deeply for the parsers, or
    Python's own words (parse.py)."""
    from xlamigrate.kinds.python.parse import parse_python, syntax_error
    from xlamigrate.nesting import nesting_error

    too_deep = nesting_error(path, data)
    if too_deep is not None:
        return too_deep
    parsed = parse_python(path, data)
    if isinstance(parsed, FileError):
        return parsed
    try:  # libcst reads it where Python's parser does not (newer syntax, say)
        compile(data, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        return syntax_error(path, error)
    except (ValueError, RecursionError, MemoryError) as error:
        return FileError(path, None, f"could not parse: {error}")
    return FileError(path, None, "could not parse: the file does not parse as Python")


def _scan_on_ast(
    path: str,
    source: str,
    module: ast.Module,
    catalogue: Catalogue,
    enabled: frozenset[str],
    context: FileContext,
) -> FileResult:
    """The scan: the env analysis on `ast`, worded as the rewrite would word it (the reads a
    project's recipe resolves; the file's own enabling writes, which the rewrite removes only
    where their recipe goes in whole)."""
    planned = context.recipe is None  # its own enabling writes may need the rewriter's plan
    scopes = Scopes(module)
    also = RECIPE_VARIABLES if planned else ()
    analysis = env_analysis(module, source, catalogue, also, scopes)
    lines = SourceLines(source)
    pairs = reported(path, source, analysis, lines.span, catalogue, enabled, scopes, context)
    script: TrainingScript | None = None
    recipe = context.reads_against
    reads = {
        a.node: f
        for a, f in pairs
        if isinstance(a, EnvAccess) and a.kind == "read" and isinstance(a.node, ast.AST)
    }
    planning = (recipe is not None and reads) or (
        planned and any(removable_enabling(item, f) for item, f in pairs)
    )
    if planning:  # the rewrite would write its plan with libcst: can libcst take this file?
        from xlamigrate.kinds.python.training import TrainingScript
        from xlamigrate.nesting import too_deep

        script = TrainingScript(module, source, scopes)
        if script.too_deep is not None:
            return FileResult(path, errors=(too_deep(path, script.too_deep),))
    if recipe is not None and reads:  # what the rewrite makes of them, as it would say it
        from xlamigrate.kinds.python.reads import read_outcomes

        assert script is not None
        outcomes = read_outcomes(script, analysis.accesses, reads, recipe, context.signal)
        worded = {(f.span, f.code): f for o in outcomes for f in o.findings}
        pairs = [(item, worded.get((f.span, f.code), f)) for item, f in pairs]
    pairs = kept_for_children(pairs, context, analysis.children)
    problems: list[Finding] = []
    if planned and any(removable_enabling(item, f) for item, f in pairs):
        from xlamigrate.kinds.python.rewrite import kept_for_recipe

        assert script is not None
        pairs, problems = kept_for_recipe(
            path, script, pairs, catalogue, context, analysis.accesses
        )
    found = [finding for _, finding in pairs] + problems
    if analysis.commands:
        from xlamigrate.kinds.python.commands import command_findings

        commands = analysis.commands
        found += command_findings(path, source, lines, commands, catalogue, enabled)
    found += [
        finding
        for _, finding in api_pairs(path, source, scopes, lines, catalogue, enabled, context)
    ]
    found += python_variables(path, source, module, scopes, lines, catalogue, enabled)
    found += framework_options(path, source, scopes, lines, catalogue, enabled, context)
    return FileResult(path, findings=tuple(sorted(found, key=lambda f: f.sort_key)))


def env_analysis(
    module: ast.Module,
    source: str,
    catalogue: Catalogue,
    also: Collection[str],
    scopes: Scopes,
) -> EnvAccessAnalysis:
    """The env analysis of the flags (and the `also` variables); none where the file names
    none of them (a file read for its torch-xla API uses alone: the walk is half a scan)."""
    if not any(name in source for name in (*catalogue.flags, *also)):
        return EnvAccessAnalysis((), ())
    return analyse_env_accesses(module, source, catalogue.flags, also, scopes)


def python_variables(
    path: str,
    source: str,
    module: ast.Module,
    scopes: Scopes,
    lines: SourceLines,
    catalogue: Catalogue,
    enabled: frozenset[str],
) -> list[Finding]:
    """The file's writes of torch-xla runtime variables 2.9 no longer reads (XM503)."""
    from xlamigrate.xlavariables import variable_findings, variable_names

    names = variable_names(enabled)
    if not any(name in source for name in names):
        return []
    analysis = analyse_env_accesses(module, source, names, (), scopes)
    found = variable_findings(
        path, analysis.accesses, lambda a: lines.span(a.node), catalogue, enabled
    )
    return _unsuppressed(found, lines)


def framework_options(
    path: str,
    source: str,
    scopes: Scopes,
    lines: SourceLines,
    catalogue: Catalogue,
    enabled: frozenset[str],
    context: FileContext,
) -> list[Finding]:
    """The file's framework options that make the framework set a legacy flag itself (XM104)."""
    from xlamigrate.kinds.python.frameworks import framework_findings

    found = framework_findings(
        path, source, scopes, lines.span, lines.text, catalogue, enabled, context
    )
    return _unsuppressed(found, lines)


def _unsuppressed(found: list[Finding], lines: SourceLines) -> list[Finding]:
    """The findings no comment suppresses (the file is tokenized only where a `#` stands on a
    finding's line)."""
    if not _commented(lines, found):
        return found
    table = parse_suppressions(_comments(lines.source))
    return [f for f in found if not finding_suppressed(f, table)]


def _commented(lines: SourceLines, findings: list[Finding]) -> bool:
    """Whether a `#` stands on a line of a finding (else no comment can suppress one)."""
    text = lines.lines
    return any(
        "#" in text[line - 1]
        for finding in findings
        for line in {finding.span.line, finding.span.end_line}
        if line - 1 < len(text)
    )


def api_pairs(
    path: str,
    source: str,
    scopes: Scopes,
    lines: SourceLines,
    catalogue: Catalogue,
    enabled: frozenset[str],
    context: FileContext,
) -> list[tuple[ApiFinding, Finding]]:
    """The file's uses of deprecated and removed torch-xla APIs (XM5xx) the user asked for,
    each with what its fix writes."""
    from xlamigrate.kinds.python.xlaapis import api_findings

    def code(node: ast.AST) -> str:
        text = lines.text(node)
        return f"({text})" if isinstance(node, ast.GeneratorExp) else text

    paired = api_findings(
        path, source, scopes, lines.span, code, catalogue, enabled, context.torch_xla
    )
    if not _commented(lines, [finding for _, finding in paired]):
        return paired  # no comment on a finding's line: nothing suppresses one (no tokenizing)
    table = parse_suppressions(_comments(source))
    suppressed = frozenset(
        id(found.node) for found, finding in paired if finding_suppressed(finding, table)
    )
    if any(id(node) in suppressed for found, _ in paired for node in found.needs):
        # a use that stays keeps the import its name needs: found again, knowing which stay
        paired = api_findings(
            path, source, scopes, lines.span, code, catalogue, enabled, context.torch_xla,
            suppressed,
        )  # fmt: skip
    return [(found, finding) for found, finding in paired if id(found.node) not in suppressed]


def _decoded(data: bytes) -> str:
    """The file's text, decoded as Python decodes it (PEP 263 cookie, BOM), newlines kept."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


def reported(
    path: str,
    source: str,
    analysis: EnvAccessAnalysis,
    span: Callable[[Any], Span],
    catalogue: Catalogue,
    enabled: frozenset[str],
    scopes: Scopes | None = None,
    context: FileContext = STANDALONE,
) -> Pairs:
    """The findings the user asked for: selected codes, not suppressed by a comment (with
    `scopes`, a flag written into a launch API's environment says where it goes, and, where
    the project decided on that write, what becomes of it)."""
    pairs = list(classified(path, analysis, span, catalogue))
    if scopes is not None and analysis.mentions:
        from xlamigrate.kinds.python.launchcalls import launched
        from xlamigrate.kinds.python.mentionholders import held

        pairs = launched(held(pairs, scopes, source), scopes)  # a launch API's words win
        if context.writes:  # (an XM301 the project decided on is the flag's write rule's)
            from xlamigrate.kinds.python.launchapis import decided

            pairs = decided(path, SourceLines(source), scopes, pairs, catalogue, context)
    pairs = [(item, finding) for item, finding in pairs if finding.code in enabled]
    if not pairs:
        return pairs
    if not _commented(SourceLines(source), [finding for _, finding in pairs]):
        return pairs  # no comment on a finding's line: nothing suppresses it (no tokenizing)
    table = parse_suppressions(_comments(source))
    return [(item, finding) for item, finding in pairs if not finding_suppressed(finding, table)]


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


def removable_enabling(item: EnvAccess | FlagMention, finding: Finding) -> bool:
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
