"""What a Python file's analyses report, as the findings a scan lists and a rewrite starts
from: the flags' accesses classified and worded (`reported`, kept manual where the file's
process starts other scripts), the torch-xla API uses (`api_pairs`), the runtime variables 2.9
no longer reads (`python_variables`) and the framework options that set a flag
(`framework_options`); each less what a comment suppresses. Shared by scan.py and rewrite.py,
which import it, never each other's."""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Callable, Collection, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from xlamigrate.catalogue import Catalogue
from xlamigrate.findings import with_note
from xlamigrate.flagvalue import RECIPE_FLAGS
from xlamigrate.frameworktable import FRAMEWORK_OPTION_SETS_LEGACY_FLAG, framework_table
from xlamigrate.kinds.python.astpositions import SourceLines
from xlamigrate.kinds.python.astscopes import Scopes
from xlamigrate.kinds.python.detect import classified
from xlamigrate.kinds.python.envaccess import EnvAccess, EnvAccessAnalysis, FlagMention
from xlamigrate.kinds.python.envanalysis import analyse_env_accesses
from xlamigrate.kinds.python.source import PythonFile
from xlamigrate.request import STANDALONE, FileContext
from xlamigrate.results import Finding, Fix, Span
from xlamigrate.suppression import finding_suppressed, parse_suppressions

if TYPE_CHECKING:
    from xlamigrate.kinds.python.xlaapis import ApiFinding

Pairs = list[tuple[EnvAccess | FlagMention, Finding]]


def env_analysis(
    file: PythonFile, catalogue: Catalogue, also: Collection[str]
) -> EnvAccessAnalysis:
    """The env analysis of the flags (and the `also` variables); none where the file names
    none of them (a file read for its torch-xla API uses alone: the walk is half a scan)."""
    if not any(name in file.source for name in (*catalogue.flags, *also)):
        return EnvAccessAnalysis((), ())
    return analyse_env_accesses(file.module, file.source, catalogue.flags, also, file.scopes)


def python_variables(
    file: PythonFile, catalogue: Catalogue, enabled: frozenset[str]
) -> list[Finding]:
    """The file's writes of torch-xla runtime variables 2.9 no longer reads (XM503)."""
    from xlamigrate.xlavariables import variable_findings, variable_names

    names = variable_names(enabled)
    if not any(name in file.source for name in names):
        return []
    analysis = analyse_env_accesses(file.module, file.source, names, (), file.scopes)
    lines = file.lines
    found = variable_findings(
        file.path, analysis.accesses, lambda a: lines.span(a.node), catalogue, enabled
    )
    return _unsuppressed(found, lines)


def framework_options(
    file: PythonFile, catalogue: Catalogue, enabled: frozenset[str], context: FileContext
) -> list[Finding]:
    """The file's framework options that make the framework set a legacy flag itself (XM104)
    (the analysis is loaded only for a file that names one of the options' calls)."""
    if FRAMEWORK_OPTION_SETS_LEGACY_FLAG not in enabled:
        return []
    if not any(name in file.source for name in framework_table().last_names):
        return []
    from xlamigrate.kinds.python.frameworks import framework_findings

    return _unsuppressed(framework_findings(file, catalogue, context), file.lines)


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
    file: PythonFile, catalogue: Catalogue, enabled: frozenset[str], context: FileContext
) -> list[tuple[ApiFinding, Finding]]:
    """The file's uses of deprecated and removed torch-xla APIs (XM5xx) the user asked for,
    each with what its fix writes (the analysis is loaded only for a file that names torch_xla:
    a use resolves through an import of one of its modules)."""
    if "torch_xla" not in file.source:
        return []
    from xlamigrate.kinds.python.xlaapis import api_findings

    def code(node: ast.AST) -> str:
        text = file.lines.text(node)
        return f"({text})" if isinstance(node, ast.GeneratorExp) else text

    paired = api_findings(file, code, catalogue, enabled, context.torch_xla)
    if not _commented(file.lines, [finding for _, finding in paired]):
        return paired  # no comment on a finding's line: nothing suppresses one (no tokenizing)
    table = parse_suppressions(_comments(file.source))
    suppressed = frozenset(
        id(found.node) for found, finding in paired if finding_suppressed(finding, table)
    )
    if any(id(node) in suppressed for found, _ in paired for node in found.needs):
        # a use that stays keeps the import its name needs: found again, knowing which stay
        paired = api_findings(file, code, catalogue, enabled, context.torch_xla, suppressed)
    return [(found, finding) for found, finding in paired if id(found.node) not in suppressed]


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
