"""What an expression built on reads of legacy flags evaluates to, for a given environment.

`os.environ.get("XLA_USE_BF16") == "1"`, `"XLA_DOWNCAST_BF16" in os.environ`,
`int(os.getenv("XLA_USE_BF16", 0))`, `os.environ.get("A") or os.environ.get("B")`: the reads and
whatever literal arithmetic sits on them (comparisons, `not`, `and`/`or`, `int()`, `bool()`,
`str()`, `.lower()`) are evaluated with Python's own semantics for an environment that holds the
flags a launcher set. Anything else is UNKNOWN: the expression is not the flag's alone.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

import libcst as cst

from xlamigrate.kinds.python.envaccess import EnvAccess
from xlamigrate.kinds.python.literals import string_value


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


UNKNOWN: Any = _Sentinel("UNKNOWN")  # not the flags' alone
RAISES: Any = _Sentinel("KeyError")  # `os.environ["X"]` with X unset, `int(None)`...

_COMPARE: dict[type[cst.BaseCompOp], Callable[[Any, Any], bool]] = {
    cst.Equal: operator.eq,
    cst.NotEqual: operator.ne,
    cst.LessThan: operator.lt,
    cst.LessThanEqual: operator.le,
    cst.GreaterThan: operator.gt,
    cst.GreaterThanEqual: operator.ge,
    cst.In: lambda a, b: a in b,
    cst.NotIn: lambda a, b: a not in b,
}
_CONVERSIONS: dict[str, Callable[[Any], Any]] = {"int": int, "bool": bool, "str": str}
_STRING_METHODS = ("lower", "upper", "strip")


class FlagEvaluator:
    """Evaluates expressions over the flag reads of one module (keyed by their nodes)."""

    def __init__(self, reads: Mapping[cst.CSTNode, EnvAccess]) -> None:
        self.reads = reads

    def value(self, node: cst.CSTNode, env: Mapping[str, str]) -> Any:
        try:
            return self._value(node, env)
        except Exception:  # int(None), "1" < 2...: what the code itself would raise
            return RAISES

    def _value(self, node: cst.CSTNode, env: Mapping[str, str]) -> Any:
        access = self.reads.get(node)
        if access is not None:
            return self._read(access, node, env)
        if isinstance(node, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
            text = string_value(node)
            return UNKNOWN if text is None else text
        if isinstance(node, cst.Integer):
            return int(node.value, 0)
        if isinstance(node, cst.Name) and node.value in ("None", "True", "False"):
            return {"None": None, "True": True, "False": False}[node.value]
        if isinstance(node, (cst.Tuple, cst.List, cst.Set)):
            items = [self._value(element.value, env) for element in node.elements]
            return UNKNOWN if _unknown(*items) else tuple(items)
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
            inner = self._value(node.expression, env)
            return inner if _unknown(inner) else not inner
        if isinstance(node, cst.BooleanOperation):
            return self._boolean(node, env)
        if isinstance(node, cst.Comparison):
            return self._comparison(node, env)
        if isinstance(node, cst.Call):
            return self._call(node, env)
        return UNKNOWN

    def _read(self, access: EnvAccess, node: cst.CSTNode, env: Mapping[str, str]) -> Any:
        name = access.variable
        if access.form == "in" and isinstance(node, cst.Comparison):
            present = name in env
            return not present if isinstance(node.comparisons[0].operator, cst.NotIn) else present
        if access.form == "subscript":
            return env.get(name, RAISES)
        if access.form in ("get", "getenv") and isinstance(node, cst.Call):
            if name in env:
                return env[name]
            args = [arg for arg in node.args if arg.keyword is None]
            default = [arg for arg in node.args if arg.keyword and arg.keyword.value == "default"]
            given = args[1:2] or default
            return self._value(given[0].value, env) if given else None
        return UNKNOWN

    def _boolean(self, node: cst.BooleanOperation, env: Mapping[str, str]) -> Any:
        left = self._value(node.left, env)
        if _unknown(left):
            return left
        right = self._value(node.right, env)
        if _unknown(right):
            return right  # even where Python would short-circuit: the whole is not ours
        if isinstance(node.operator, cst.And):
            return left and right
        return left or right

    def _comparison(self, node: cst.Comparison, env: Mapping[str, str]) -> Any:
        left = self._value(node.left, env)
        if _unknown(left):
            return left
        for target in node.comparisons:
            right = self._value(target.comparator, env)
            if _unknown(right):
                return right
            op = type(target.operator)
            if op in (cst.Is, cst.IsNot):
                if right is not None and left is not None:
                    return UNKNOWN  # identity of strings: not something to reason about
                result = (left is right) == (op is cst.Is)
            elif op in _COMPARE:
                result = _COMPARE[op](left, right)
            else:
                return UNKNOWN
            if not result:
                return False
            left = right
        return True

    def _call(self, node: cst.Call, env: Mapping[str, str]) -> Any:
        func = node.func
        if any(arg.keyword is not None or arg.star for arg in node.args):
            return UNKNOWN
        if isinstance(func, cst.Name) and func.value in _CONVERSIONS and len(node.args) == 1:
            inner = self._value(node.args[0].value, env)
            return inner if _unknown(inner) else _CONVERSIONS[func.value](inner)
        if isinstance(func, cst.Attribute) and func.attr.value in _STRING_METHODS:
            inner = self._value(func.value, env)
            if _unknown(inner) or not isinstance(inner, str) or node.args:
                return UNKNOWN if not _unknown(inner) else inner
            return getattr(inner, func.attr.value)()
        return UNKNOWN


def _unknown(*values: Any) -> bool:
    return any(value is UNKNOWN or value is RAISES for value in values)


def enclosing_expression(
    node: cst.CSTNode, parent: Callable[[cst.CSTNode], cst.CSTNode | None]
) -> cst.BaseExpression | None:
    """The expression `node` is an operand of (through call arguments, comparison targets and
    method attributes), or None where it is not an operand of one."""
    current = parent(node)
    while isinstance(current, (cst.Arg, cst.ComparisonTarget, cst.Attribute)):
        if isinstance(current, cst.Attribute):
            call = parent(current)
            return call if isinstance(call, cst.Call) and call.func is current else None
        current = parent(current)
    if isinstance(current, (cst.Call, cst.Comparison, cst.BooleanOperation, cst.UnaryOperation)):
        return current
    return None
