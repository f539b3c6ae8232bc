"""Parses Python source bytes with libcst; a failure becomes a FileError with its line."""

from __future__ import annotations

import ast

import libcst as cst

from xlamigrate.model import FileError

_FAILURES = (cst.ParserSyntaxError, SyntaxError, UnicodeDecodeError, LookupError, ValueError)


def parse_python(path: str, data: bytes) -> cst.Module | FileError:
    """Parses bytes honouring the PEP 263 cookie and BOM, as Python itself would."""
    if b"\0" in data:
        line = data.count(b"\n", 0, data.index(b"\0")) + 1
        return FileError(path, line, "could not parse: the file contains NUL bytes (binary?)")
    try:
        return cst.parse_module(data)
    except _FAILURES as error:
        return _failure(path, data, error)


def _failure(path: str, data: bytes, error: Exception) -> FileError:
    """Python's compiler names the line and cause best (libcst points at the next token and
    gives no line for decoding errors); libcst's own words are the fallback."""
    try:
        compile(data, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as python_error:
        # an encoding error has line 0: lines are 1-based, so that is "no line"
        return FileError(path, python_error.lineno or None, f"could not parse: {python_error.msg}")
    except (ValueError, RecursionError, MemoryError):
        pass
    line = getattr(error, "raw_line", None)
    if isinstance(error, UnicodeDecodeError):
        line = data.count(b"\n", 0, error.start) + 1
    message = getattr(error, "message", None) or str(error).splitlines()[0]
    return FileError(path, line, f"could not parse: {message}")
