"""Scans one Python file's bytes: parse once, analyse once, filter by selection and noqa.

The analysis runs on the standard library's `ast` (the C parser, scopes and positions read off
its nodes: astwalk.py), shell command strings included (commands.py maps their characters into
the file from their tokens). Where a finding depends on the rewriter's plan (the reads a
project's recipe resolves; the file's own enabling writes, whose fix depends on whether the
recipe can go in whole), the planner says it, on the same tree: libcst is never loaded."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from xlamigrate.catalogue import Catalogue
from xlamigrate.kinds.python.astpositions import SourceLines
from xlamigrate.kinds.python.envaccess import EnvAccess
from xlamigrate.kinds.python.filefindings import (
    api_pairs,
    env_analysis,
    framework_options,
    kept_for_children,
    python_variables,
    removable_enabling,
    reported,
)
from xlamigrate.kinds.python.source import PythonFile, parse_failure, parsed_python
from xlamigrate.neuronflags import RECIPE_VARIABLES
from xlamigrate.request import FileContext, FileTask
from xlamigrate.results import FileResult, Finding

if TYPE_CHECKING:
    from xlamigrate.kinds.python.training import TrainingScript


def scan_python(task: FileTask) -> FileResult:
    parsed = parsed_python(task.data)
    if parsed is None:
        return FileResult(task.path, errors=(parse_failure(task.path, task.data),))
    return _scan_on_ast(task.path, *parsed, task.catalogue, task.enabled, task.decided)


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
    lines = SourceLines(source)
    file = PythonFile(path, source, module, lines)
    also = RECIPE_VARIABLES if planned else ()
    analysis = env_analysis(file, catalogue, also)
    scopes = file.scopes if analysis.mentions else None  # (a file naming no flag: none yet)
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

        script = TrainingScript(module, source, file.scopes)
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
    found += [finding for _, finding in api_pairs(file, catalogue, enabled, context)]
    found += python_variables(file, catalogue, enabled)
    found += framework_options(file, catalogue, enabled, context)
    return FileResult(path, findings=tuple(sorted(found, key=lambda f: f.sort_key)))
