"""A Python file as one of the project's launchers: the legacy flags it writes into a launch API's
environment dict (a SageMaker estimator's `environment=`, Ray's `runtime_env`, Metaflow's
`@environment(vars=...)`; rules/launch_apis.toml) as enabling writes, each with the script or
the function of this file that the launched process runs, and the launches themselves.

Only a write the rewrite can turn into the signal is one: a string key naming the flag
(`{"XLA_USE_BF16": "1"}`, `env["XLA_USE_BF16"] = "1"`) set to a literal that turns it on, with
a script or function to put the recipe in. The rest stay XM301 (launchcalls.py says where they
go). Offsets are character offsets into the decoded text, as the other launcher kinds give."""

from __future__ import annotations

import ast
import posixpath
from collections.abc import Iterator

from xlamigrate.catalogue import Catalogue
from xlamigrate.findings import access_findings
from xlamigrate.flagvalue import RECIPE_FLAGS, FlagValue
from xlamigrate.kinds.decided import with_decision
from xlamigrate.kinds.launch import in_function
from xlamigrate.kinds.python.astpositions import SourceLines
from xlamigrate.kinds.python.astscopes import Scopes
from xlamigrate.kinds.python.envaccess import FlagMention
from xlamigrate.kinds.python.launchcalls import LaunchWrite, Pairs, launch_writes
from xlamigrate.kinds.textaccess import Branch, LaunchSite, TextAccess, TextAnalysis
from xlamigrate.launchtable import launch_table
from xlamigrate.request import FileContext
from xlamigrate.results import Span

FORM = "launch-api"  # the form of these writes (the Python rewrite renames their key)


def analyse_source(path: str, data: bytes) -> TextAnalysis | None:
    """The file's launch-API enabling writes and launches (an empty analysis where it makes no
    launch, None where it does not parse)."""
    table = launch_table()
    if not table.may_launch(data):
        return TextAnalysis()
    from xlamigrate.kinds.python.source import parsed_python

    parsed = parsed_python(data)
    if parsed is None:
        return None
    source, module = parsed
    scopes = Scopes(module)
    writes = launch_writes(scopes, table)
    if not writes:
        return TextAnalysis()
    places = _Places(module, SourceLines(source))
    functions = _functions(module)
    accesses: list[TextAccess] = []
    sites: list[LaunchSite] = []
    for write in writes:
        script = _launched(path, write, functions)
        access = _access(write, script, places)
        if access is None or script is None:
            continue
        accesses.append(access)
        at = write.runner or write.call
        sites.append(LaunchSite(script, places.start(at), places.branch(at)))
    return TextAnalysis(tuple(accesses), launches=tuple(dict.fromkeys(sites)))


def decided(
    path: str,
    lines: SourceLines,
    scopes: Scopes,
    pairs: Pairs,
    catalogue: Catalogue,
    context: FileContext,
) -> Pairs:
    """The pairs, each launch-API write the project decided on reported as the flag's write
    (what it reaches and what the rewrite makes of it), as a launcher kind's write is."""
    mentions = {
        key_offset(lines, item.node): index
        for index, (item, _) in enumerate(pairs)
        if isinstance(item, FlagMention) and isinstance(item.node, ast.Constant)
    }
    if not mentions.keys() & context.writes.keys():
        return pairs
    places = _Places(scopes.tree, lines)
    decided_pairs = list(pairs)
    for write in launch_writes(scopes, launch_table()):
        start = key_offset(lines, write.node)
        index = mentions.get(start)
        if index is None or start not in context.writes:
            continue
        item, finding = pairs[index]
        access = _access(write, None, places)
        if access is None:
            continue
        access = with_decision(access, context)

        def at(_: TextAccess, span: Span = finding.span) -> Span:  # (the mention's own span)
            return span

        _, worded = next(iter(access_findings(path, [access], at, catalogue)))
        decided_pairs[index] = (item, worded)
    return decided_pairs


def key_offset(source: SourceLines, node: ast.AST) -> int:
    """Where a write's key starts (what identifies the write to the project)."""
    span = source.span(node)
    return source.offset(span.line, span.column - 1)


def _access(write: LaunchWrite, script: str | None, places: _Places) -> TextAccess | None:
    node, reach = write.node, write.reach
    if not isinstance(node, ast.Constant) or node.value not in RECIPE_FLAGS:
        return None  # a keyword (`dict(XLA_USE_BF16="1")`), a name: no key to rename
    value = FlagValue((reach.value,)) if reach.value is not None else None
    if value is None or value.enabled is not True:
        return None
    start, end = places.start(node), places.end(node)
    return TextAccess(
        variable=node.value,
        kind="write",
        form=FORM,
        value=value,
        start=start,
        end=end,
        assignment=(start, end),
        syntax="python",
        launched=(script,) if script is not None else (),
        note=f"; {reach.api.framework} passes it to {reach.api.process}",
        branch=places.branch(node),
    )


def _launched(path: str, write: LaunchWrite, functions: dict[str, int]) -> str | None:
    """The script the launched process runs, as written (joined to its folder), or the function
    of this file it runs (`train.py::train_func`, where the file defines one of that name)."""
    reach = write.reach
    if reach.script is not None:
        return reach.script
    if reach.function is None or functions.get(reach.function) != 1:
        return None
    return in_function(posixpath.basename(path), reach.function)


def _functions(module: ast.Module) -> dict[str, int]:
    """How many `def`s of each name the file has (a function the recipe goes into is one)."""
    counts: dict[str, int] = {}
    for node in ast.walk(module):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            counts[node.name] = counts.get(node.name, 0) + 1
    return counts


class _Places:
    """Character offsets of nodes, and the conditional arms around them (see `Branch`)."""

    def __init__(self, module: ast.Module, lines: SourceLines) -> None:
        self.lines = lines
        self.parents: dict[int, ast.AST] = {}
        for parent in ast.walk(module):
            for child in ast.iter_child_nodes(parent):
                self.parents[id(child)] = parent

    def start(self, node: ast.AST) -> int:
        return key_offset(self.lines, node)

    def end(self, node: ast.AST) -> int:
        span = self.lines.span(node)
        return self.lines.offset(span.end_line, span.end_column - 1)

    def branch(self, node: ast.AST) -> Branch:
        return tuple(reversed(list(self._arms(node))))

    def _arms(self, node: ast.AST) -> Iterator[tuple[int, int]]:
        child = node
        parent = self.parents.get(id(child))
        while parent is not None:
            arm = _arm(parent, child)
            if arm is not None:
                yield self.start(parent), arm
            child, parent = parent, self.parents.get(id(parent))


def _arm(parent: ast.AST, child: ast.AST) -> int | None:
    """Which arm of a conditional construct `child` is in (None: it runs whenever `parent`
    does)."""
    if isinstance(parent, (ast.If, ast.While)):
        return None if child is parent.test else 0 if child in parent.body else 1
    if isinstance(parent, ast.IfExp):
        return None if child is parent.test else 0 if child is parent.body else 1
    if isinstance(parent, (ast.For, ast.AsyncFor)):
        if child is parent.iter or child is parent.target:
            return None
        return 0 if child in parent.body else 1
    if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return 0 if child in parent.body else None  # (decorators, defaults: where defined)
    if isinstance(parent, ast.Lambda):
        return 0 if child is parent.body else None
    if isinstance(parent, ast.Try):
        if isinstance(child, ast.ExceptHandler):
            return 1 + parent.handlers.index(child)
        return 0 if child in parent.body or child in parent.orelse else None
    if isinstance(parent, ast.Match) and isinstance(child, ast.match_case):
        return parent.cases.index(child)
    if isinstance(parent, ast.BoolOp) and isinstance(child, ast.expr):
        index = parent.values.index(child)
        return index if index else None
    return None
