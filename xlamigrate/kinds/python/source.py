"""A Python file's text and `ast` tree, read as Python reads it (its PEP 263 encoding, a BOM),
and why a file does not parse."""

from __future__ import annotations

import ast
import functools
import io
import tokenize
import warnings
from dataclasses import dataclass

from xlamigrate.kinds.python.astpositions import SourceLines
from xlamigrate.kinds.python.astscopes import Scopes
from xlamigrate.results import FileError


@dataclass(frozen=True)
class PythonFile:
    """A parsed Python file as its analyses read it: its display path, text and tree, its lines
    (where a node is, as findings say it) and the tree's scopes, made when an analysis first
    needs them (a file its analyses find nothing to resolve in never has them built)."""

    path: str
    source: str
    module: ast.Module
    lines: SourceLines

    @functools.cached_property
    def scopes(self) -> Scopes:
        return Scopes(self.module)


def parsed_python(data: bytes) -> tuple[str, ast.Module] | None:
    """The file's text and `ast` tree; None where it does not parse (`parse_failure` says
    why)."""
    if b"\0" in data:
        return None
    try:
        source = decoded(data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences: the compiler's to say
            return source, ast.parse(data)
    except (SyntaxError, ValueError, UnicodeDecodeError, LookupError, RecursionError, MemoryError):
        return None


def parse_failure(path: str, data: bytes) -> FileError:
    """Why a file does not parse, with its line: nested too deeply for the parsers, or
    Python's own words (parse.py)."""
    from xlamigrate.kinds.python.parse import parse_python, syntax_error
    from xlamigrate.nesting import nesting_error

    too_deep = nesting_error(path, data)
    if too_deep is not None:
        return too_deep
    parsed = parse_python(path, data)
    if isinstance(parsed, FileError):
        return parsed
    try:  # libcst reads it where Python's parser does not (newer syntax, say)
        compile(data, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        return syntax_error(path, error)
    except (ValueError, RecursionError, MemoryError) as error:
        return FileError(path, None, f"could not parse: {error}")
    return FileError(path, None, "could not parse: the file does not parse as Python")


def decoded(data: bytes) -> str:
    """The file's text, decoded as Python decodes it (PEP 263 cookie, BOM), newlines kept."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)
