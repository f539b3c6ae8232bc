"""Under which condition a legacy write turned the flag on, and whether that condition can be
written at another place of the file (the same names must mean the same things there)."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
from libcst.metadata import Scope

from xlamigrate.kinds.python.envaccess import EnvAccess
from xlamigrate.kinds.python.literals import static_value
from xlamigrate.kinds.python.training import TrainingScript, collect_nodes


@dataclass(frozen=True)
class Condition:
    possible: bool  # False: every value the write can set is off
    in_place: cst.BaseExpression | None  # the value's own condition: holds at the write itself
    full: cst.BaseExpression | None  # with the enclosing `if`s; None: unconditional
    origin: cst.CSTNode  # where the condition's names are looked up
    tests: tuple[cst.BaseExpression, ...] = ()  # `full` as the conjunction of these tests


def enabling_condition(script: TrainingScript, access: EnvAccess) -> Condition:
    value_condition = _value_condition(access)
    if value_condition is False:
        return Condition(False, None, None, access.node)
    in_place = value_condition if isinstance(value_condition, cst.BaseExpression) else None
    tests = [*enclosing_tests(script, access.node), *([in_place] if in_place else [])]
    return Condition(True, in_place, _conjunction(tests), access.node, tuple(tests))


def _value_condition(access: EnvAccess) -> cst.BaseExpression | bool:
    """True: always on; False: never; an expression: on exactly when it is true."""
    value = access.value
    if value is None or value.candidates is None or value.enabled is True:
        return True  # an unknown value is only rewritten as an unsafe fix: taken as on
    if value.enabled is False:
        return False
    node = access.value_node
    if isinstance(node, cst.IfExp):
        body_on = static_value(node.body, {}).enabled
        else_on = static_value(node.orelse, {}).enabled
        if body_on is True and else_on is False:
            return node.test
        if body_on is False and else_on is True:
            return cst.UnaryOperation(cst.Not(), _parenthesised(node.test))
    return True


def enclosing_tests(script: TrainingScript, node: cst.CSTNode) -> list[cst.BaseExpression]:
    """The tests of the `if`s around `node` inside its function (negated in `else` branches)."""
    tests: list[cst.BaseExpression] = []
    child = node
    for ancestor in script.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            break
        if isinstance(ancestor, cst.If):
            if child is ancestor.body:
                tests.append(ancestor.test)
            elif child is ancestor.orelse:
                tests.append(cst.UnaryOperation(cst.Not(), _parenthesised(ancestor.test)))
        child = ancestor
    return list(reversed(tests))


def disjunction(conjunctions: list[tuple[cst.BaseExpression, ...]]) -> cst.BaseExpression | None:
    """`(a and b) or (a and not b)` as `a`: conjunctions that differ in one test and its
    negation merge (exclusive branches that each enabled the flag); None: always true."""
    terms = [tuple(dict.fromkeys(_code(t) for t in tests)) for tests in conjunctions]
    nodes = {_code(t): t for tests in conjunctions for t in tests}
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
    parts = [_conjunction([nodes[code] for code in term]) for term in terms]
    if len(parts) == 1:
        return parts[0]
    return cst.parse_expression(" or ".join(f"({_code(p)})" for p in parts if p is not None))


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


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _conjunction(tests: list[cst.BaseExpression]) -> cst.BaseExpression | None:
    if not tests:
        return None
    if len(tests) == 1:
        return tests[0]
    code = " and ".join(f"({cst.Module([]).code_for_node(test)})" for test in tests)
    return cst.parse_expression(code)


def _parenthesised(expression: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(expression, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
        return expression
    return expression.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def expressible_at(
    script: TrainingScript, condition: cst.BaseExpression, origin: cst.CSTNode, at: cst.CSTNode
) -> bool:
    """Whether every name in `condition` is bound to the same thing at `at` as at `origin`, and
    the condition can run again there (an `await` or `yield` cannot: it belongs to its function,
    and repeating it awaits or yields once more)."""
    if _suspends(condition):
        return False
    origin_scope, target_scope = _scope_of(script, origin), _scope_of(script, at)
    if origin_scope is None or target_scope is None:
        return False
    for name in _referenced_names(condition):
        here, there = origin_scope[name], target_scope[name]
        if not here or here != there:
            return False
    return True


def _suspends(expression: cst.BaseExpression) -> bool:
    return any(True for kind in (cst.Await, cst.Yield) for _ in collect_nodes(expression, kind))


def _scope_of(script: TrainingScript, node: cst.CSTNode) -> Scope | None:
    pending = [node]
    while pending:
        current = pending.pop(0)
        scope = script.scopes.get(current)
        if scope is not None:
            return scope
        pending.extend(current.children)
    return None


def _referenced_names(expression: cst.BaseExpression) -> set[str]:
    """Names the expression reads: `args` in `args.bf16`, not the attribute `bf16`."""
    names: set[str] = set()

    class Reader(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            names.add(node.value)

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            node.value.visit(self)
            return False

        def visit_Arg(self, node: cst.Arg) -> bool:
            node.value.visit(self)
            return False

    expression.visit(Reader())
    return names
