"""Under which condition a legacy write turned the flag on, and whether that condition can be
written at another place of the file (the same names must mean the same things there), on the
standard library's `ast`. A condition is code (`Expression`): the tests it is made of are the
file's own, its text is theirs as written."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from xlamigrate.kinds.python.astscopes import Scope
from xlamigrate.kinds.python.astwalk import static_value
from xlamigrate.kinds.python.envaccess import EnvAccess
from xlamigrate.kinds.python.training import Block, Node, TrainingScript


@dataclass(frozen=True)
class Expression:
    """An expression as code: the file's own (`node`), or made of the file's tests (`parts`)."""

    code: str
    parts: tuple[ast.expr, ...] = ()  # the file's expressions it is made of
    node: ast.expr | None = None  # the file's expression itself, where it is one
    parenthesized: bool = False  # written in parentheses of its own

    @property
    def atomic(self) -> bool:
        """Needs no parentheses as an operand (a name, an attribute, a call, a subscript)."""
        return self.parenthesized or isinstance(
            self.node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)
        )

    @property
    def is_name(self) -> bool:
        return isinstance(self.node, ast.Name) and not self.parenthesized

    def as_argument(self) -> str:
        """As a keyword argument's value: a bare `:=` needs parentheses there."""
        if isinstance(self.node, ast.NamedExpr) and not self.parenthesized:
            return f"({self.code})"
        return self.code


def expression(script: TrainingScript, node: ast.expr) -> Expression:
    return Expression(script.code(node), (node,), node, script.has_parentheses(node))


def negated(condition: Expression) -> Expression:
    """`not <condition>`, the condition parenthesized unless atomic."""
    inner = condition.code if condition.atomic else f"({_bare(condition)})"
    return Expression(f"not {inner}", condition.parts)


def _bare(condition: Expression) -> str:
    """The condition's code without its own outer parentheses."""
    if condition.parenthesized and condition.code.startswith("(") and condition.code.endswith(")"):
        return condition.code[1:-1]
    return condition.code


@dataclass(frozen=True)
class Condition:
    possible: bool  # False: every value the write can set is off
    in_place: Expression | None  # the value's own condition: holds at the write itself
    full: Expression | None  # with the enclosing `if`s; None: unconditional
    origin: Node | None  # where the condition's names are looked up (None: anywhere)
    tests: tuple[Expression, ...] = ()  # `full` as the conjunction of these tests


def enabling_condition(script: TrainingScript, access: EnvAccess) -> Condition:
    node = _node(access.node)
    value_condition = _value_condition(script, access)
    if value_condition is False:
        return Condition(False, None, None, node)
    in_place = value_condition if isinstance(value_condition, Expression) else None
    tests = [*enclosing_tests(script, node), *([in_place] if in_place else [])]
    return Condition(True, in_place, conjunction(tests), node, tuple(tests))


def _node(node: object) -> Node:
    """The ast node an access stands at (a dict entry's: its key)."""
    key = getattr(node, "key", None)
    if key is not None and not isinstance(node, ast.AST):
        return key  # type: ignore[no-any-return]
    return node  # type: ignore[return-value]


def _value_condition(script: TrainingScript, access: EnvAccess) -> Expression | bool:
    """True: always on; False: never; an expression: on exactly when it is true."""
    value = access.value
    if value is None or value.candidates is None or value.enabled is True:
        return True  # an unknown value is only rewritten as an unsafe fix: taken as on
    if value.enabled is False:
        return False
    node = access.value_node
    if isinstance(node, ast.IfExp):
        body_on = static_value(node.body, {}).enabled
        else_on = static_value(node.orelse, {}).enabled
        if body_on is True and else_on is False:
            return expression(script, node.test)
        if body_on is False and else_on is True:
            return negated(expression(script, node.test))
    return True


def enclosing_tests(script: TrainingScript, node: Node) -> list[Expression]:
    """The tests of the `if`s around `node` inside its function (negated in `else` branches)."""
    tests: list[Expression] = []
    child: Node = node
    for ancestor in script.ancestors(node):
        if isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            break
        if isinstance(ancestor, ast.If) and isinstance(child, Block):
            test = expression(script, ancestor.test)
            tests.append(test if child.part == "body" else negated(test))
        child = ancestor
    return list(reversed(tests))


def conjunction(tests: list[Expression]) -> Expression | None:
    if not tests:
        return None
    if len(tests) == 1:
        return tests[0]
    code = " and ".join(f"({test.code})" for test in tests)
    return Expression(code, tuple(part for test in tests for part in test.parts))


def disjunction(conjunctions: list[tuple[Expression, ...]]) -> Expression | None:
    """`(a and b) or (a and not b)` as `a`: conjunctions that differ in one test and its
    negation merge (exclusive branches that each enabled the flag); None: always true."""
    terms = [tuple(dict.fromkeys(t.code for t in tests)) for tests in conjunctions]
    by_code = {t.code: t for tests in conjunctions for t in tests}
    merged = True
    while merged:
        merged = False
        for i, first in enumerate(terms):
            for j in range(i + 1, len(terms)):
                rest = _merged(first, terms[j])
                if rest is not None:
                    terms = [t for k, t in enumerate(terms) if k not in (i, j)] + [rest]
                    merged = True
                    break
            if merged:
                break
    terms = list(dict.fromkeys(terms))
    if any(not term for term in terms):
        return None
    parts = [conjunction([by_code[code] for code in term]) for term in terms]
    if len(parts) == 1:
        return parts[0]
    present = [p for p in parts if p is not None]
    code = " or ".join(f"({p.code})" for p in present)
    return Expression(code, tuple(node for p in present for node in p.parts))


def _merged(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...] | None:
    """`a` and `b` without the one test where they negate each other (None: no such test)."""
    if len(a) != len(b):
        return None
    differ = [k for k in range(len(a)) if a[k] != b[k]]
    if len(differ) != 1:
        return None
    x, y = a[differ[0]], b[differ[0]]
    if y in (f"not {x}", f"not ({x})") or x in (f"not {y}", f"not ({y})"):
        return a[: differ[0]] + a[differ[0] + 1 :]
    return None


def expressible_at(
    script: TrainingScript, condition: Expression, origin: Node | None, at: Node
) -> bool:
    """Whether every name in `condition` is bound to the same thing at `at` as at `origin`, and
    the condition can run again there (an `await` or `yield` cannot: it belongs to its function,
    and repeating it awaits or yields once more). `origin` None: the condition reads nothing of
    the file (the signal)."""
    if origin is None:
        return True
    if any(_suspends(part) for part in condition.parts):
        return False
    origin_scope, target_scope = _scope_of(script, origin), _scope_of(script, at)
    if origin_scope is None or target_scope is None:
        return False
    for name in {name for part in condition.parts for name in _referenced_names(part)}:
        here, there = _binding(origin_scope, name), _binding(target_scope, name)
        if here is None or here != there:
            return False
    return True


def _binding(scope: Scope, name: str) -> object:
    binder = scope.binder(name)
    if binder is not None:
        return binder
    return "builtins" if scope.lookup(name) else None


def _suspends(expression: ast.expr) -> bool:
    return any(
        isinstance(node, (ast.Await, ast.Yield, ast.YieldFrom)) for node in ast.walk(expression)
    )


def _scope_of(script: TrainingScript, node: Node) -> Scope | None:
    """The scope of the first node (breadth first) in `node` that has one."""
    pending: list[object] = [node]
    while pending:
        current = pending.pop(0)
        if isinstance(current, ast.AST):
            scope = script.scope_of(current)
            if scope is not None:
                return scope
            pending.extend(ast.iter_child_nodes(current))
        elif isinstance(current, Block):
            pending.extend(current.statements)
        else:
            pending.extend(getattr(current, "body", ()))
    return None


def _referenced_names(expression: ast.expr) -> set[str]:
    """Names the expression reads: `args` in `args.bf16`, not the attribute `bf16`."""
    return {node.id for node in ast.walk(expression) if isinstance(node, ast.Name)}
