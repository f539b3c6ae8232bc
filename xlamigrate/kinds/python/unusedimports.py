"""Imports a rewrite left unused: `import os` whose only use was the legacy flag's write,
`import torch_xla.core.xla_model as xm` whose calls all became `torch_xla.*`. The file was clean
before; it stays clean (ruff's F401 would flag what the rewrite left).

Only what the rewrite made unused goes: an import's binding (its scope and name, astscopes.py)
that some name read or deleted before and none does after. A function's own `xm` does not keep
the module's. Imports that were unused already stay (not the rewrite's business), as do
`from __future__` imports and names listed in `__all__` (a re-export).

Where the import stands decides too. In a module, class, function, `if`, loop, `with`,
`except` or `match` body it goes (an `if` it leaves empty goes with it, as cstedits.py removes
any statement; another block left empty keeps `pass`). In a `try` body it goes only while
another import of its top-level package stays there: the `try` is an availability probe
(`try: import torch_xla`), and what it probes stays.
"""

from __future__ import annotations

import ast
import bisect
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import libcst as cst

from xlamigrate.kinds.python.astscopes import Scope, Scopes
from xlamigrate.kinds.python.cstedits import CstEdits, apply_edits
from xlamigrate.kinds.python.lastreads import last_reads

ImportNode = ast.Import | ast.ImportFrom
# Where a scope is, the same in the file before and after the rewrite: the names of the
# definitions it is in, each with its count among its scope's definitions of that name.
Place = tuple[str, ...]
Binding = tuple[Place, str]
_ROUNDS = 8  # at most: each takes the imports only the previous one's removals left unused


def without_unused_imports(before: ast.Module, after: cst.Module) -> cst.Module:
    """`after` without the import names the rewrite left unused (see the module docstring)."""
    return unused_imports_dropped(Scopes(before), after)[0]


def unused_imports_dropped(
    old: Scopes, after: cst.Module, code_of: Callable[[cst.Module], str] | None = None
) -> tuple[cst.Module, str | None]:
    """`after` without the import names the rewrite left unused (`old`: the scopes of the
    file before it), and the module's code where it was made and parsed on the way (the
    module is what it was: a large file's code is not made again; `code_of` makes it)."""
    dropped = dropped_in_rounds(
        old, after, code_of or (lambda module: module.code), without_imports
    )
    assert dropped is not None  # (without_imports always gives a module)
    return dropped


Code = TypeVar("Code", str, bytes)
Rewritten = TypeVar("Rewritten")


def dropped_in_rounds(
    old: Scopes,
    after: Rewritten,
    code_of: Callable[[Rewritten], Code],
    without: Callable[[Rewritten, ast.Module, Scopes, dict[int, set[int]]], Rewritten | None],
) -> tuple[Rewritten, Code | None] | None:
    """The rounds of the pass on a rewrite (`after`: a libcst module, or bytes; `code_of`
    its code, `without` it without the import names that go: None where it cannot say),
    and its code where that was parsed on the way. Until none is left: an `if` that goes
    with its import may have been another's last use."""
    used: set[Binding] | None = None
    for _ in range(_ROUNDS):
        code = code_of(after)
        try:
            rewritten = ast.parse(code)
        except (SyntaxError, ValueError):
            return after, None
        if used is None:
            used = _uses(old, _places(old))
        scopes = Scopes(rewritten)
        dropped, again = _dropped(used, rewritten, scopes)
        if not dropped:
            return after, code
        edited = without(after, rewritten, scopes, dropped)
        if edited is None:
            return None
        if edited is after:
            return after, code
        if not again:
            return edited, None
        after = edited
    return after, None


def may_leave_unused(
    old: Scopes,
    before: cst.Module,
    after: cst.Module,
    lines: Sequence[tuple[int, int]],
    code_for: Callable[[cst.BaseStatement], str],
    kept_elsewhere: Sequence[tuple[int, int]] = (),
) -> bool:
    """Whether the rewrite may have left an import unused (False: `unused_imports_dropped`
    would drop nothing), told without reading the rewritten module: an import binding
    used before stays used where no statement the rewrite made binds its name, and a
    top-level statement it kept (the same object) reads it, or (the module's binding) a
    statement it made does (a large file's parse and scopes, made again, took a fifth of its
    rewrite). `lines`: each statement of `before`'s first and last line; `code_for`: a
    statement's code; `kept_elsewhere`: the lines of the file's statements `before` does not
    hold (the rewrite keeps them as they are)."""
    before_ids = {id(statement) for statement in before.body}
    made = [statement for statement in after.body if id(statement) not in before_ids]
    kept = {id(statement) for statement in after.body} & before_ids
    kept_lines = sorted([span for statement, span in zip(before.body, lines, strict=True)
                         if id(statement) in kept] + list(kept_elsewhere))  # fmt: skip
    imported = _import_bindings(old)
    if not imported:
        return False
    named = _names_in(made, code_for)
    if named is None or any(name in named[0] for _, name in imported):
        return True
    # (a name no statement it made binds reads the module's binding there)
    still_read = {(id(old.module), name) for name in named[1]}
    read: set[tuple[int, str]] = set()
    for node, scope, _ in old.of(ast.Name):
        if not isinstance(node, ast.Name) or isinstance(node.ctx, ast.Store):
            continue
        binder = scope.binder(node.id)
        key = (id(binder), node.id)
        if binder is None or key not in imported:
            continue
        read.add(key)
        if _within(node.lineno, kept_lines):
            still_read.add(key)
    return bool(read - still_read)


def _import_bindings(scopes: Scopes) -> set[tuple[int, str]]:
    """(id of the scope, name) of each name an import binds."""
    found: set[tuple[int, str]] = set()
    for node, scope, _ in scopes.of(ast.Import, ast.ImportFrom):
        if isinstance(node, ImportNode):
            from_import = isinstance(node, ast.ImportFrom)
            found |= {(id(scope), _bound(alias, from_import)) for alias in node.names}
    return found


def _names_in(
    statements: Sequence[cst.BaseStatement], code_for: Callable[[cst.BaseStatement], str]
) -> tuple[set[str], set[str]] | None:
    """The names the statements bind (or may) anywhere in them, and those they read (None:
    one does not parse)."""
    names: set[str] = set()
    read: set[str] = set()
    for statement in statements:
        try:
            tree = ast.parse(code_for(statement))
        except (SyntaxError, ValueError):
            return None
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                (read if isinstance(node.ctx, ast.Load) else names).add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ImportNode):
                from_import = isinstance(node, ast.ImportFrom)
                names |= {_bound(alias, from_import) for alias in node.names}
                names |= {alias.name.split(".", 1)[0] for alias in node.names}
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                names |= set(node.names)
            elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
                names.add(node.name)
            elif isinstance(node, ast.MatchMapping) and node.rest:
                names.add(node.rest)
    return names, read


def _within(line: int, spans: list[tuple[int, int]]) -> bool:
    """Whether the line is in one of the (sorted, disjoint) spans."""
    at = bisect.bisect_right(spans, (line, sys.maxsize)) - 1
    return at >= 0 and spans[at][0] <= line <= spans[at][1]


def without_imports(
    after: cst.Module, rewritten: ast.Module, scopes: Scopes, dropped: dict[int, set[int]]
) -> cst.Module:
    """`after` (`rewritten` on ast: its statements, of a module whose scopes are `scopes`)
    without the names `dropped` of its import statements (`after` itself where none went)."""
    found = _cst_imports(after.body, ())
    imports = _in_order(rewritten)
    if len(imports) != len(found):  # (the same code: never expected)
        return after
    edits = CstEdits()
    focus: set[cst.CSTNode] = set()
    parents = _parents(rewritten)
    around: dict[int, tuple[ast.If, cst.If]] = {}  # the `if`s holding what goes
    for node, (theirs, holders) in zip(imports, found, strict=True):
        names = dropped.get(id(node))
        if not names:
            continue
        focus.update((theirs, *holders))
        compounds = [h for h in holders if isinstance(h, cst.BaseCompoundStatement)]
        for mine, other in zip(_enclosing(node, parents), reversed(compounds), strict=False):
            if isinstance(mine, ast.If) and isinstance(other, cst.If):
                around[id(mine)] = (mine, other)
        if len(names) == len(node.names):
            edits.removed.add(theirs)
            continue
        assert not isinstance(theirs.names, cst.ImportStar)
        kept = [alias for i, alias in enumerate(theirs.names) if i not in names]
        kept[-1] = kept[-1].with_changes(comma=theirs.names[-1].comma)
        edits.swapped[theirs] = theirs.with_changes(names=kept)
    last = last_reads(scopes, [mine.test for mine, _ in around.values()])
    edits.kept_ifs = {other for mine, other in around.values() if id(mine.test) in last}
    return apply_edits(after, edits, focus)


def _parents(module: ast.Module) -> dict[int, ast.stmt]:
    """By the id of a statement, the compound statement whose body (or clause) holds it."""
    parents: dict[int, ast.stmt] = {}
    for node in ast.walk(module):
        if isinstance(node, ast.stmt):
            for body, _ in _clauses(node):
                parents.update((id(child), node) for child in body)
    return parents


def _enclosing(statement: ast.stmt, parents: dict[int, ast.stmt]) -> Iterator[ast.stmt]:
    """The compound statements around `statement`, innermost first."""
    parent = parents.get(id(statement))
    while parent is not None:
        yield parent
        parent = parents.get(id(parent))


def _dropped(
    used_before: set[Binding], after: ast.Module, new: Scopes
) -> tuple[dict[int, set[int]], bool]:
    """By the id of an import statement of `after` (its scopes: `new`), the indexes of its
    names that go; and whether an `if` may go with them (its test's names may have lost their
    last use)."""
    places = _places(new)
    used_after = _uses(new, places)
    exported = _exported(after)
    scope_of = {id(node): scope for node, scope, _ in new.order if isinstance(node, ImportNode)}
    dropped: dict[int, set[int]] = {}
    again = False
    for body, kind in _bodies(after):
        goes: list[tuple[ImportNode, int]] = []
        for statement in body:
            if not isinstance(statement, ImportNode) or _kept_always(statement):
                continue
            scope = scope_of[id(statement)]
            place = places.get(id(scope))
            for index, alias in enumerate(statement.names):
                name = _bound(alias, isinstance(statement, ast.ImportFrom))
                binding = (place, name) if place is not None else None
                if (
                    binding is not None
                    and binding in used_before
                    and binding not in used_after
                    and not (scope is new.module and name in exported)
                ):
                    goes.append((statement, index))
        if kind == "try":
            goes = _probed_stays(body, goes)
        for statement, index in goes:
            dropped.setdefault(id(statement), set()).add(index)
        again = again or (kind == "if" and all(_goes_whole(s, dropped) for s in body))
    return dropped, again


def _goes_whole(statement: ast.stmt, dropped: dict[int, set[int]]) -> bool:
    names = dropped.get(id(statement), ())
    return isinstance(statement, ImportNode) and len(names) == len(statement.names)


def _kept_always(statement: ImportNode) -> bool:
    if isinstance(statement, ast.ImportFrom):
        return statement.module == "__future__" or any(a.name == "*" for a in statement.names)
    return False


def _probed_stays(
    body: list[ast.stmt], goes: list[tuple[ImportNode, int]]
) -> list[tuple[ImportNode, int]]:
    """What goes of a `try` body's imports: of a package none of whose imports there would
    stay, the first stays (what the `try` probes)."""
    going = {(id(statement), index) for statement, index in goes}
    staying: set[str] = set()
    first_going: dict[str, tuple[int, int]] = {}
    for statement in body:
        if not isinstance(statement, ImportNode):
            continue
        for index, alias in enumerate(statement.names):
            package = _package(statement, alias)
            if (id(statement), index) not in going:
                staying.add(package)
            else:
                first_going.setdefault(package, (id(statement), index))
    kept = {where for package, where in first_going.items() if package not in staying}
    return [(s, i) for s, i in goes if (id(s), i) not in kept]


def _package(statement: ImportNode, alias: ast.alias) -> str:
    if isinstance(statement, ast.Import):
        return alias.name.split(".", 1)[0]
    return "." * statement.level + (statement.module or "").split(".", 1)[0]


def _bodies(module: ast.Module) -> Iterator[tuple[list[ast.stmt], str]]:
    """The bodies whose imports may go, each with its kind (`_clauses`)."""
    yield module.body, "goes"
    stack: list[ast.stmt] = list(module.body)
    while stack:
        for body, kind in _clauses(stack.pop()):
            if body and kind != "stays":
                yield body, kind
            stack.extend(body)


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _clauses(statement: ast.stmt) -> list[tuple[list[ast.stmt], str]]:
    """A compound statement's bodies, each with what becomes of its imports: "goes", "if"
    (goes, and the clause with it where nothing else is in it) or "try" (goes while the probe
    stays)."""
    if isinstance(statement, _DEFINITIONS):
        return [(statement.body, "goes")]
    if isinstance(statement, ast.If):
        return [(statement.body, "if"), (statement.orelse, "if")]
    if isinstance(statement, (ast.Try, ast.TryStar)):
        handlers = [(handler.body, "goes") for handler in statement.handlers]
        after = [(statement.orelse, "goes"), (statement.finalbody, "goes")]
        return [(statement.body, "try"), *handlers, *after]
    if isinstance(statement, ast.Match):
        return [(case.body, "goes") for case in statement.cases]
    bodies = (getattr(statement, "body", []), getattr(statement, "orelse", []))
    return [(body, "goes") for body in bodies if isinstance(body, list)]


def _places(scopes: Scopes) -> dict[int, Place]:
    """By the id of a scope of the module, its definitions, or the module's: where it is.
    (Lambdas and comprehensions bind no import: they have none.)"""
    places: dict[int, Place] = {id(scopes.module): ()}
    counts: dict[tuple[int, str], int] = {}
    for node, scope, _ in scopes.of(*_DEFINITIONS):
        if not isinstance(node, _DEFINITIONS):
            continue
        inner, outer = scopes.opened.get(id(node)), places.get(id(scope))
        if inner is None or outer is None:
            continue
        count = counts[id(scope), node.name] = counts.get((id(scope), node.name), 0) + 1
        places[id(inner)] = (*outer, f"{node.name}#{count}")
    return places


def _uses(scopes: Scopes, places: dict[int, Place]) -> set[Binding]:
    """The bindings names are read or deleted from."""
    used: set[Binding] = set()
    for node, scope, _ in scopes.of(ast.Name):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store):
            binder: Scope | None = scope.binder(node.id)
            place = places.get(id(binder)) if binder is not None else None
            if place is not None:
                used.add((place, node.id))
    return used


def _bound(alias: ast.alias, from_import: bool) -> str:
    if alias.asname:
        return alias.asname
    return alias.name if from_import else alias.name.split(".", 1)[0]


def _exported(module: ast.Module) -> set[str]:
    for statement in module.body:
        if (
            isinstance(statement, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in statement.targets)
            and isinstance(statement.value, ast.List | ast.Tuple)
        ):
            return {
                e.value
                for e in statement.value.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            }
    return set()


def _in_order(module: ast.Module) -> list[ImportNode]:
    """The module's import statements in the order of the file."""
    found = [node for node in ast.walk(module) if isinstance(node, ImportNode)]
    return sorted(found, key=lambda node: (node.lineno, node.col_offset))


_Found = list[tuple[cst.Import | cst.ImportFrom, tuple[cst.CSTNode, ...]]]


def _cst_imports(statements: Sequence[cst.CSTNode], holders: tuple[cst.CSTNode, ...]) -> _Found:
    """The import statements of a libcst body in the order of the file, each with the
    statements that hold it (what the edits' focus needs): only bodies are walked."""
    found: _Found = []
    for statement in statements:
        if isinstance(statement, (cst.Import, cst.ImportFrom)):
            found.append((statement, holders))
        elif isinstance(statement, cst.SimpleStatementLine):
            found += _cst_imports(statement.body, (*holders, statement))
        elif isinstance(statement, cst.BaseCompoundStatement):
            inner = (*holders, statement)
            for clause in _cst_clauses(statement):
                if isinstance(clause, cst.If):  # an `elif`: a statement of its own
                    found += _cst_imports([clause], inner)
                else:
                    found += _cst_imports(clause.body, inner)
    return found


def _cst_clauses(statement: cst.BaseCompoundStatement) -> list[cst.If | cst.BaseSuite]:
    """A compound statement's suites in the order of the file (an `elif` as its `if`)."""
    if isinstance(statement, cst.Match):
        return [case.body for case in statement.cases]
    suites: list[cst.If | cst.BaseSuite] = [statement.body]
    if isinstance(statement, (cst.Try, cst.TryStar)):
        suites += [handler.body for handler in statement.handlers]
    orelse = getattr(statement, "orelse", None)
    if isinstance(orelse, cst.If):
        suites.append(orelse)
    elif isinstance(orelse, cst.Else):
        suites.append(orelse.body)
    final = getattr(statement, "finalbody", None)
    if isinstance(final, cst.Finally):
        suites.append(final.body)
    return suites
