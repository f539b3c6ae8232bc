"""Scopes and qualified names on the standard library's `ast`, as libcst's ScopeProvider gives
them to the env-access walk: every name a scope binds (imports, definitions, assignments,
parameters, loop and `with` targets, handlers, patterns; `global`/`nonlocal` honoured), looked
up from a function through its enclosing functions (class bodies skipped) to the module and the
builtins, flow-insensitively. A name's qualified names are what its bindings import
(`from os import environ as E`: `E` is "os.environ"), or "builtins.X" for an unbound builtin;
an attribute chain extends its base's (`o.environ` after `import os as o`: "os.environ")."""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass, field
from typing import Literal

ScopeKind = Literal["module", "function", "class", "comprehension"]
_BUILTINS = frozenset(dir(builtins))
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


@dataclass(eq=False)
class Scope:
    """One scope: what it binds, each name to the qualified names its bindings give."""

    kind: ScopeKind
    parent: Scope | None
    prefix: str  # how libcst names what this scope binds: "", "f.<locals>.", "C."
    bindings: dict[str, set[str]] = field(default_factory=dict)
    globals: set[str] = field(default_factory=set)  # `global x` / `nonlocal x`: bound elsewhere
    # the names stored to (`x = ...`, `for x in`...), each with the ast.Name nodes storing it
    targets: dict[str, list[ast.Name]] = field(default_factory=dict)

    def bind(self, name: str, qualified: str | None = None) -> None:
        self.bindings.setdefault(name, set()).add(qualified or f"{self.prefix}{name}")

    def binder(self, name: str) -> Scope | None:
        """The scope whose bindings `name` has here (None: unbound, or a builtin)."""
        scope: Scope | None = self
        first = True
        while scope is not None:
            visible = scope.kind != "class" or first  # a class body is no enclosing scope
            if visible and name in scope.bindings and name not in scope.globals:
                return scope
            first = False
            scope = scope.parent
        return None

    def lookup(self, name: str) -> set[str]:
        """The qualified names `name` has here: the first scope that binds it decides."""
        binder = self.binder(name)
        if binder is not None:
            return binder.bindings[name]
        return {f"builtins.{name}"} if name in _BUILTINS else set()

    def qualified(self, node: ast.expr) -> set[str]:
        """The qualified names of a Name or a chain of attributes on one."""
        if isinstance(node, ast.Name):
            return self.lookup(node.id)
        if isinstance(node, ast.Attribute):
            return {f"{base}.{node.attr}" for base in self.qualified(node.value)}
        return set()


class Scopes:
    """The scopes of a module, and every node of it in walk order (pre-order, children in
    source order) with the scope it is evaluated in and its frame: the innermost `def` or
    `class` it is inside (a definition's decorators and defaults are in its frame, as libcst's
    visitors see them). An f-string's text parts are not nodes of the walk: only its
    placeholders' expressions are."""

    def __init__(self, module: ast.Module) -> None:
        self.tree = module
        self.module = Scope("module", None, "")
        self.opened: dict[int, Scope] = {}  # id of a def, lambda, class or comprehension
        self.order: list[tuple[ast.AST, Scope, ast.AST | None]] = []
        self._positions: dict[type, list[int]] = {}  # each node type's places in the order
        self._traverse(module)

    def of(self, *kinds: type[ast.AST]) -> list[tuple[ast.AST, Scope, ast.AST | None]]:
        """The nodes of these types (exactly), in walk order, each with its scope and frame."""
        order, positions = self.order, self._positions
        if len(kinds) == 1:
            return [order[index] for index in positions.get(kinds[0], ())]
        merged = sorted(index for kind in kinds for index in positions.get(kind, ()))
        return [order[index] for index in merged]

    def _traverse(self, root: ast.AST) -> None:
        order = self.order
        stack: list[tuple[ast.AST, Scope, ast.AST | None]] = [(root, self.module, None)]
        pop, push, extend = stack.pop, stack.append, stack.extend
        positions, known = self._positions, _CHILD_FIELDS
        while stack:
            item = pop()
            node, scope, frame = item
            kind = type(node)
            placed = positions.get(kind)
            if placed is None:
                positions[kind] = [len(order)]
            else:
                placed.append(len(order))
            order.append(item)
            if kind in _BINDERS:
                self._bind(node, scope)
            if kind in _OPENERS:
                inner_frame = node if kind in _FRAMES else frame
                children = _children(node, scope, self)
                extend([(child, s, inner_frame) for child, s in reversed(children)])
                continue
            try:
                fields = known[kind]
            except KeyError:
                fields = _fields_of(kind)
            if fields is None:
                extend([(child, scope, frame) for child in reversed(_child_nodes(node))])
                continue
            for name, many in reversed(fields):
                value = getattr(node, name, None)
                if value is None:
                    continue
                if many:
                    extend([(c, scope, frame) for c in reversed(value) if c is not None])
                else:
                    push((value, scope, frame))

    def _bind(self, node: ast.AST, scope: Scope) -> None:
        if isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Load):
                target = _target_scope(scope, node.id)
                target.bind(node.id)
                target.targets.setdefault(node.id, []).append(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope.bind(node.name)
        elif isinstance(node, ast.arg):
            scope.bind(node.arg)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    scope.bind(alias.asname, alias.name)
                else:
                    top = alias.name.split(".")[0]
                    scope.bind(top, top)
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name != "*":
                    dot = "." if module and module[-1] != "." else ""
                    scope.bind(alias.asname or alias.name, f"{module}{dot}{alias.name}")
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            scope.globals.update(node.names)
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)):
            if node.name:
                scope.bind(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            scope.bind(node.rest)


_FRAMES = frozenset({ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef})
_OPENERS = frozenset(
    {*_FRAMES, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.JoinedStr}
)
_BINDERS = frozenset(
    {
        ast.Name, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.arg, ast.Import,
        ast.ImportFrom, ast.Global, ast.Nonlocal, ast.ExceptHandler, ast.MatchAs, ast.MatchStar,
        ast.MatchMapping,
    }
)  # fmt: skip
# Nodes that carry no code of their own: a Name's Load, an operator.
_INERT = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


def _child_nodes(node: ast.AST) -> list[ast.AST]:
    """`ast.iter_child_nodes`, less the inert nodes (contexts, operators), as a list."""
    fields = _fields_of(type(node))
    if fields is None:  # (no grammar to go by: every field is looked at)
        return [child for child in ast.iter_child_nodes(node) if not isinstance(child, _INERT)]
    found: list[ast.AST] = []
    for name, many in fields:
        value = getattr(node, name, None)
        if value is None:
            continue
        if many:
            found.extend(item for item in value if item is not None)
        else:
            found.append(value)
    return found


def _fields_of(kind: type) -> tuple[tuple[str, bool], ...] | None:
    try:
        return _CHILD_FIELDS[kind]
    except KeyError:
        fields = _CHILD_FIELDS[kind] = _child_fields(kind)
        return fields


# Per node type, the fields that may hold a node with code in it: not a name, a string, a
# number, a constant, a context or an operator, as the grammar in the node's docstring types
# them (`Attribute(expr value, identifier attr, expr_context ctx)`: "value" alone), each with
# whether it holds a list (`expr* elts`, whose items may be None: a `**` in a dict's keys) or
# one node or None (`expr value`, `expr? returns`). None: the type has no grammar to go by.
_CHILD_FIELDS: dict[type, tuple[tuple[str, bool], ...] | None] = {}
_NO_NODE_TYPES = frozenset(
    {"identifier", "string", "constant", "int", "expr_context", "operator", "unaryop", "cmpop",
     "boolop"}
)  # fmt: skip
_DECLARATION = re.compile(r"^\w+\((?P<fields>[^()]*)\)$")


def _child_fields(kind: type) -> tuple[tuple[str, bool], ...] | None:
    fields: tuple[str, ...] = getattr(kind, "_fields", ())
    if not fields:
        return ()
    declared = _DECLARATION.match((kind.__doc__ or "").strip())
    if declared is None:
        return None
    types: dict[str, str] = {}
    for part in declared["fields"].split(","):
        words = part.split()
        if len(words) == 2:
            types[words[1]] = words[0]
    if set(fields) - set(types):
        return None  # (a field the grammar does not type)
    return tuple(
        (name, types[name].endswith("*"))
        for name in fields
        if types[name].rstrip("?*") not in _NO_NODE_TYPES
    )


def _target_scope(scope: Scope, name: str) -> Scope:
    """Where a store to `name` binds: the module for a `global` name, else here."""
    if name not in scope.globals:
        return scope
    outer = scope.parent
    while outer is not None and outer.kind == "class":
        outer = outer.parent
    return outer or scope


def _children(node: ast.AST, scope: Scope, scopes: Scopes) -> list[tuple[ast.AST, Scope]]:
    """`node`'s children, each with the scope it is evaluated in: a definition's decorators,
    defaults and bases in the enclosing scope, its body (and parameters) in its own."""
    if isinstance(node, ast.JoinedStr):
        return [(expression, scope) for expression in _placeholders(node)]
    if isinstance(node, _FUNCTIONS):
        inner = _open(node, scope, scopes, "function")
        outside: list[ast.AST] = [*node.args.defaults, *filter(None, node.args.kw_defaults)]
        if not isinstance(node, ast.Lambda):
            outside += node.decorator_list
            outside += [a.annotation for a in _arguments(node.args) if a.annotation]
            outside += [node.returns] if node.returns else []
        body: list[ast.AST] = [*_arguments(node.args)]
        body += [node.body] if isinstance(node, ast.Lambda) else node.body
        return [(child, scope) for child in outside] + [(child, inner) for child in body]
    if isinstance(node, ast.ClassDef):
        inner = _open(node, scope, scopes, "class")
        outside = [*node.decorator_list, *node.bases, *node.keywords]
        return [(child, scope) for child in outside] + [(child, inner) for child in node.body]
    if isinstance(node, _COMPREHENSIONS):
        inner = _open(node, scope, scopes, "comprehension")
        first, *rest = node.generators
        children: list[tuple[ast.AST, Scope]] = [(first.iter, scope)]  # evaluated outside
        children += [(first.target, inner), *((condition, inner) for condition in first.ifs)]
        children += [(generator, inner) for generator in rest]
        elements = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        return children + [(element, inner) for element in elements]
    return [(child, scope) for child in _child_nodes(node)]


def _placeholders(node: ast.JoinedStr) -> list[ast.expr]:
    """The expressions of an f-string's placeholders, those of format specs included."""
    found: list[ast.expr] = []
    for value in node.values:
        if isinstance(value, ast.FormattedValue):
            found.append(value.value)
            if isinstance(value.format_spec, ast.JoinedStr):
                found.extend(_placeholders(value.format_spec))
    return found


def _open(node: ast.AST, scope: Scope, scopes: Scopes, kind: ScopeKind) -> Scope:
    if id(node) not in scopes.opened:
        name = getattr(node, "name", "<lambda>")
        if kind == "comprehension":
            prefix = scope.prefix
        elif kind == "class":
            prefix = f"{scope.prefix}{name}."
        else:
            prefix = f"{scope.prefix}{name}.<locals>."
        scopes.opened[id(node)] = Scope(kind, scope, prefix)
    return scopes.opened[id(node)]


def _arguments(arguments: ast.arguments) -> list[ast.arg]:
    found = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    found += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return found


def last_name(node: ast.expr) -> str | None:
    """A Name's identifier, or an attribute chain's last one (`mark_step` in `xm.mark_step`)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None
