"""Parses Python source bytes with libcst; a failure becomes a FileError with its line."""

from __future__ import annotations

import libcst as cst

from xlamigrate.model import FileError


def parse_python(path: str, data: bytes) -> cst.Module | FileError:
    """Parses bytes honouring the PEP 263 cookie and BOM, as Python itself would."""
    if b"\0" in data:
        line = data.count(b"\n", 0, data.index(b"\0")) + 1
        return FileError(path, line, "could not parse: the file contains NUL bytes (binary?)")
    try:
        return cst.parse_module(data)
    except cst.ParserSyntaxError as error:
        return FileError(path, error.raw_line, f"could not parse: {error.message}")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        return FileError(path, line, f"could not decode: {error.reason} ({error.encoding})")
    except (SyntaxError, LookupError, ValueError) as error:
        # LookupError: an unknown encoding in the coding cookie.
        lineno: int | None = getattr(error, "lineno", None)
        return FileError(path, lineno, f"could not parse: {error}")
