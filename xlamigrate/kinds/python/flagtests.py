"""What an expression built on reads of legacy flags evaluates to, for a given environment, on
the standard library's `ast`.

`os.environ.get("XLA_USE_BF16") == "1"`, `"XLA_DOWNCAST_BF16" in os.environ`,
`int(os.getenv("XLA_USE_BF16", 0))`, `os.environ.get("A") or os.environ.get("B")`: the reads and
whatever literal arithmetic sits on them (comparisons, `not`, `and`/`or`, `int()`, `bool()`,
`str()`, `.lower()`) are evaluated with Python's own semantics for an environment that holds the
flags a launcher set. Anything else is UNKNOWN: the expression is not the flag's alone.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from typing import Any

from xlamigrate.kinds.python.astwalk import string_value
from xlamigrate.kinds.python.envaccess import EnvAccess


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


UNKNOWN: Any = _Sentinel("UNKNOWN")  # not the flags' alone
RAISES: Any = _Sentinel("KeyError")  # `os.environ["X"]` with X unset, `int(None)`...

_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_CONVERSIONS: dict[str, Callable[[Any], Any]] = {"int": int, "bool": bool, "str": str}
_STRING_METHODS = ("lower", "upper", "strip")


class FlagEvaluator:
    """Evaluates expressions over the flag reads of one module (keyed by their nodes)."""

    def __init__(self, reads: Mapping[ast.AST, EnvAccess]) -> None:
        self.reads = reads

    def value(self, node: ast.AST, env: Mapping[str, str]) -> Any:
        try:
            return self._value(node, env)
        except Exception:  # int(None), "1" < 2...: what the code itself would raise
            return RAISES

    def _value(self, node: ast.AST, env: Mapping[str, str]) -> Any:
        access = self.reads.get(node)
        if access is not None:
            return self._read(access, node, env)
        if isinstance(node, (ast.Constant, ast.JoinedStr)):
            return _literal(node)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = [self._value(element, env) for element in node.elts]
            return UNKNOWN if _unknown(*items) else tuple(items)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self._value(node.operand, env)
            return inner if _unknown(inner) else not inner
        if isinstance(node, ast.BoolOp):
            return self._boolean(node, env)
        if isinstance(node, ast.Compare):
            return self._comparison(node, env)
        if isinstance(node, ast.Call):
            return self._call(node, env)
        return UNKNOWN

    def _read(self, access: EnvAccess, node: ast.AST, env: Mapping[str, str]) -> Any:
        name = access.variable
        if access.form == "in" and isinstance(node, ast.Compare):
            present = name in env
            return not present if isinstance(node.ops[0], ast.NotIn) else present
        if access.form == "subscript":
            return env.get(name, RAISES)
        if access.form in ("get", "getenv") and isinstance(node, ast.Call):
            if name in env:
                return env[name]
            default = [keyword.value for keyword in node.keywords if keyword.arg == "default"]
            given = node.args[1:2] or default
            return self._value(given[0], env) if given else None
        return UNKNOWN

    def _boolean(self, node: ast.BoolOp, env: Mapping[str, str]) -> Any:
        """`a or b or c` left to right, as libcst's nested binary operations: an UNKNOWN (or
        RAISES) operand is the whole's value, even where Python would short-circuit before it
        (the whole is not ours)."""
        values = []
        for operand in node.values:
            value = self._value(operand, env)
            if _unknown(value):
                return value
            values.append(value)
        result = values[0]
        for value in values[1:]:
            result = (result and value) if isinstance(node.op, ast.And) else (result or value)
        return result

    def _comparison(self, node: ast.Compare, env: Mapping[str, str]) -> Any:
        left = self._value(node.left, env)
        if _unknown(left):
            return left
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = self._value(comparator, env)
            if _unknown(right):
                return right
            if isinstance(op, (ast.Is, ast.IsNot)):
                if right is not None and left is not None:
                    return UNKNOWN  # identity of strings: not something to reason about
                result = (left is right) == isinstance(op, ast.Is)
            elif type(op) in _COMPARE:
                result = _COMPARE[type(op)](left, right)
            else:
                return UNKNOWN
            if not result:
                return False
            left = right
        return True

    def _call(self, node: ast.Call, env: Mapping[str, str]) -> Any:
        func = node.func
        if node.keywords or any(isinstance(arg, ast.Starred) for arg in node.args):
            return UNKNOWN
        if isinstance(func, ast.Name) and func.id in _CONVERSIONS and len(node.args) == 1:
            inner = self._value(node.args[0], env)
            return inner if _unknown(inner) else _CONVERSIONS[func.id](inner)
        if isinstance(func, ast.Attribute) and func.attr in _STRING_METHODS:
            inner = self._value(func.value, env)
            if _unknown(inner) or not isinstance(inner, str) or node.args:
                return UNKNOWN if not _unknown(inner) else inner
            return getattr(inner, func.attr)()
        return UNKNOWN


def _literal(node: ast.Constant | ast.JoinedStr) -> Any:
    """A literal's value: None, a bool, an int, a string (an f-string without placeholders);
    UNKNOWN for the others (floats, complex numbers, `...`, f-strings with placeholders)."""
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, int)):
        return node.value  # (bools are ints)
    text = string_value(node)
    return UNKNOWN if text is None else text


def _unknown(*values: Any) -> bool:
    return any(value is UNKNOWN or value is RAISES for value in values)


def enclosing_expression(node: ast.AST, parent: Callable[[ast.AST], object]) -> ast.expr | None:
    """The expression `node` is an operand of (through keyword arguments and method
    attributes: `x.lower()` for `x`), or None where it is not an operand of one (a call's
    `func` is no operand of its call)."""
    current = parent(node)
    if isinstance(current, ast.keyword):
        node, current = current, parent(current)
    if isinstance(current, ast.Attribute):
        call = parent(current)
        return call if isinstance(call, ast.Call) and call.func is current else None
    if isinstance(current, ast.Call):
        is_argument = any(arg is node for arg in (*current.args, *current.keywords))
        return current if is_argument else None
    if isinstance(current, (ast.Compare, ast.BoolOp, ast.UnaryOp)):
        return current
    return None
