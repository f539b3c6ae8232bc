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

    def bind(self, name: str, qualified: str | None = None) -> None:
        self.bindings.setdefault(name, set()).add(qualified or f"{self.prefix}{name}")

    def lookup(self, name: str) -> set[str]:
        """The qualified names `name` has here: the first scope that binds it decides."""
        scope: Scope | None = self
        first = True
        while scope is not None:
            visible = scope.kind != "class" or first  # a class body is no enclosing scope
            if visible and name in scope.bindings and name not in scope.globals:
                return scope.bindings[name]
            first = False
            scope = scope.parent
        return {f"builtins.{name}"} if name in _BUILTINS else set()

    def qualified(self, node: ast.expr) -> set[str]:
        """The qualified names of a Name or a chain of attributes on one."""
        if isinstance(node, ast.Name):
            return self.lookup(node.id)
        if isinstance(node, ast.Attribute):
            return {f"{base}.{node.attr}" for base in self.qualified(node.value)}
        return set()


class Scopes:
    """The scopes of a module and the scope of each node that opens one (a function's body,
    a class body, a comprehension) or is found in one."""

    def __init__(self, module: ast.Module) -> None:
        self.module = Scope("module", None, "")
        self.opened: dict[int, Scope] = {}  # id of a def, lambda, class or comprehension
        self._fill(module, self.module)

    def inner(self, node: ast.AST, enclosing: Scope) -> Scope:
        """The scope `node` opens (its body's), made when it was first seen."""
        return self.opened.get(id(node), enclosing)

    def _fill(self, root: ast.AST, root_scope: Scope) -> None:
        stack: list[tuple[ast.AST, Scope]] = [(root, root_scope)]
        while stack:
            node, scope = stack.pop()
            for child, child_scope in _children(node, scope, self):
                self._bind(child, child_scope)
                stack.append((child, child_scope))

    def _bind(self, node: ast.AST, scope: Scope) -> None:
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            _target_scope(scope, node.id).bind(node.id)
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
                    joined = (
                        f"{module}.{alias.name}"
                        if module and module[-1] != "."
                        else f"{module}{alias.name}"
                    )
                    scope.bind(alias.asname or alias.name, joined)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            scope.globals.update(node.names)
        elif (isinstance(node, ast.ExceptHandler) and node.name) or (
            isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name
        ):
            scope.bind(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            scope.bind(node.rest)


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
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        scope.bind(node.name)
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
    return [(child, scope) for child in ast.iter_child_nodes(node)]


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


def children_in_scope(node: ast.AST, scope: Scope, scopes: Scopes) -> list[tuple[ast.AST, Scope]]:
    """For a walk: `node`'s children with their scopes (the module's scopes already made)."""
    return _children(node, scope, scopes)
