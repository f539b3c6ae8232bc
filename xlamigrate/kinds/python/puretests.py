"""Whether an `if` test may go with the body a rewrite emptied: evaluating it does nothing the
program could miss. A test that may act (a call of the program's own, a walrus, an `await`)
keeps its `if`, under `pass`: the call may be what the `if` was written for.

Names, attributes, constants, comparisons, boolean operators, `not` and subscripts of these
count as pure (a property or an `__eq__` with effects is not the code this tool rewrites), and
so do the calls of the predicates below, with pure arguments.
"""

from __future__ import annotations

import libcst as cst

# Calls taken for pure predicates, by their dotted name as the file spells it.
PURE_CALLS = frozenset(
    {
        "os.environ.get",
        "environ.get",  # from os import environ
        "os.getenv",
        "getenv",  # from os import getenv
        "isinstance",
        "issubclass",
        "hasattr",
        "callable",
    }
)
# ... or by the shape of their last name: `torch.cuda.is_available()`, `has_xla()`,
# `is_torch_xla_available()` ask, they do not act.
PURE_PREFIXES = ("is_", "has_")
PURE_SUFFIXES = ("_available",)

_CONSTANTS = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.Ellipsis)


def is_pure(test: cst.BaseExpression) -> bool:
    """Whether evaluating `test` has no side effect (see the module docstring)."""
    if isinstance(test, (cst.Name, *_CONSTANTS)):
        return True
    if isinstance(test, cst.Attribute):
        return is_pure(test.value)
    if isinstance(test, cst.ConcatenatedString):
        return is_pure(test.left) and is_pure(test.right)
    if isinstance(test, cst.Comparison):
        return is_pure(test.left) and all(is_pure(c.comparator) for c in test.comparisons)
    if isinstance(test, cst.BooleanOperation):
        return is_pure(test.left) and is_pure(test.right)
    if isinstance(test, cst.UnaryOperation):
        return is_pure(test.expression)
    if isinstance(test, cst.IfExp):
        return is_pure(test.test) and is_pure(test.body) and is_pure(test.orelse)
    if isinstance(test, cst.Subscript):
        return is_pure(test.value) and all(_pure_slice(e.slice) for e in test.slice)
    if isinstance(test, cst.Call):
        return _pure_predicate(test.func) and all(is_pure(arg.value) for arg in test.args)
    return False


def _pure_slice(part: cst.BaseSlice) -> bool:
    if isinstance(part, cst.Index):
        return is_pure(part.value)
    assert isinstance(part, cst.Slice)
    bounds = (part.lower, part.upper, part.step)
    return all(bound is None or is_pure(bound) for bound in bounds)


def _pure_predicate(function: cst.BaseExpression) -> bool:
    dotted = _dotted(function)
    if dotted is None:
        return False
    last = dotted.rsplit(".", 1)[-1]
    return dotted in PURE_CALLS or last.startswith(PURE_PREFIXES) or last.endswith(PURE_SUFFIXES)


def _dotted(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr.value}"
    return None
