"""A guard run before libcst parses Python: code nested some thousands of levels deep overflows
the C stack of libcst's native parser, a segmentation fault that would end the whole run (every
other file unreported). Python's own parser judges the depth first, safely.

libcst's visitors give up (RecursionError) long before the native parser crashes, so refusing
what nests deeper than MAX_NESTING loses nothing that could have been analysed.
"""

from __future__ import annotations

import ast

from xlamigrate.results import FileError

# Levels of the syntax tree as libcst builds it. Its native parser crashed at about 3,000
# (parentheses) to 8,000 (unary minus) levels on an 8 MiB stack; its visitors stop near 500.
MAX_NESTING = 1000
_TOO_DEEP = "could not parse: nesting too deep"


def too_deep(path: str, line: int | None) -> FileError:
    """The error of code nested deeper than MAX_NESTING at `line`."""
    return FileError(path, line, _TOO_DEEP)


def nesting_error(path: str, data: bytes, tree: ast.AST | None = None) -> FileError | None:
    """A FileError for code nested too deep to hand to libcst; None for anything else (syntax
    errors included: the parser reports those, and it reads syntax newer than this Python).
    `tree`: the file's `ast`, where the caller has it already."""
    if tree is not None:
        line = _first_too_deep(tree)
        return None if line is None else FileError(path, line, _TOO_DEEP)
    try:
        tree = compile(data, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        if "too many nested" in (error.msg or ""):  # parentheses: Python allows 200 levels
            return FileError(path, error.lineno, f"could not parse: {error.msg}")
        return None
    except (RecursionError, MemoryError):  # Python's parser gave up: deeper still
        return FileError(path, None, _TOO_DEEP)
    except ValueError:  # NUL bytes: the parser names them
        return None
    line = _first_too_deep(tree)
    return None if line is None else FileError(path, line, _TOO_DEEP)


def _first_too_deep(tree: ast.AST) -> int | None:
    """The line of a node nested deeper than MAX_NESTING, counting `a and b and c` as libcst
    does (each operator one level; Python keeps the operands in one flat list)."""
    stack: list[tuple[ast.AST, int, int]] = [(tree, 0, 1)]
    while stack:
        node, depth, line = stack.pop()
        line = getattr(node, "lineno", line)
        if isinstance(node, ast.BoolOp):
            depth += len(node.values) - 1
        if depth > MAX_NESTING:
            return line
        stack.extend((child, depth + 1, line) for child in ast.iter_child_nodes(node))
    return None
