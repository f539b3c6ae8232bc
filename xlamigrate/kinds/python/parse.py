"""Parses Python source bytes with libcst; a failure becomes a FileError with its line."""

from __future__ import annotations

import ast

import libcst as cst

from xlamigrate.results import FileError

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
        return syntax_error(path, python_error)
    except (ValueError, RecursionError, MemoryError):
        pass
    line = getattr(error, "raw_line", None)
    if isinstance(error, UnicodeDecodeError):
        line = data.count(b"\n", 0, error.start) + 1
    column = getattr(error, "editor_column", None) if line else None
    message = getattr(error, "message", None) or str(error).splitlines()[0]
    return FileError(path, line, f"could not parse: {message}", column=column)


def syntax_error(path: str, error: SyntaxError) -> FileError:
    """Python's parser's words, line and column (an encoding error has line 0: lines are
    1-based, so that is "no line")."""
    line = error.lineno or None
    column = error.offset if line and error.offset and error.offset > 0 else None
    return FileError(path, line, f"could not parse: {error.msg}", column=column)
