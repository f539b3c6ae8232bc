"""What a Python expression evaluates to, as far as can be told without running it."""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst

from xlamigrate.flagvalue import FlagValue


def string_value(node: cst.BaseExpression) -> str | None:
    """The text of a plain string literal (bytes decoded as latin-1), else None."""
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        try:
            value = node.evaluated_value
        except Exception:  # malformed escapes: treat as unknown rather than crash
            return None
        if isinstance(value, bytes):
            return value.decode("latin-1")
        return value
    if isinstance(node, cst.FormattedString):
        texts = [part.value for part in node.parts if isinstance(part, cst.FormattedStringText)]
        if len(texts) == len(node.parts):  # an f-string without placeholders
            return "".join(texts)
    return None


def static_value(expr: cst.BaseExpression, constants: Mapping[str, str]) -> FlagValue:
    """The value(s) an expression evaluates to, as far as can be told without running it."""
    text = string_value(expr)
    if text is not None:
        return FlagValue((text,))
    if isinstance(expr, cst.Integer):
        try:
            return FlagValue((str(int(expr.value.replace("_", ""), 0)),))
        except ValueError:
            return FlagValue.unknown()
    if isinstance(expr, cst.Name):
        if expr.value in ("True", "False"):
            return FlagValue((expr.value,))
        constant = constants.get(expr.value)
        return FlagValue((constant,)) if constant is not None else FlagValue.unknown()
    if isinstance(expr, cst.IfExp):
        body = static_value(expr.body, constants).candidates
        orelse = static_value(expr.orelse, constants).candidates
        if body is None or orelse is None:
            return FlagValue.unknown()
        return FlagValue(body + orelse)
    if (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Name)
        and expr.func.value == "str"
        and len(expr.args) == 1
    ):
        return static_value(expr.args[0].value, constants)
    return FlagValue.unknown()
