"""Writes rewritten files atomically and renders diffs; nothing else touches the user's files."""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import stat
import tempfile
import tokenize
from pathlib import Path


class WriteError(Exception):
    """A file that could not be written safely; it was left as it was."""


def create_file(path: Path, data: bytes) -> None:
    """Writes a new file (its folders too); an existing file is never overwritten."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("xb") as stream:
            stream.write(data)
    except OSError as error:
        raise WriteError(f"could not create: {error.strerror or error}") from error


def write_atomically(path: Path, new: bytes, expected_old: bytes) -> None:
    """Replaces the file's bytes with `new` via a temporary file and a rename.

    The permission bits are kept, a symlink's target is written (the link stays), and a file
    whose bytes are no longer `expected_old` (changed since it was read) is not overwritten.
    An interrupted run leaves either the old file or the new one, never a mix.
    """
    real = Path(os.path.realpath(path))
    try:
        if real.read_bytes() != expected_old:
            raise WriteError("the file changed since it was read; not overwritten")
        mode = stat.S_IMODE(real.stat().st_mode)
        handle, temporary = tempfile.mkstemp(
            dir=real.parent, prefix=f".{real.name}.", suffix=".tmp"
        )
    except OSError as error:
        raise WriteError(f"could not write: {error.strerror or error}") from error
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(new)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, real)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise WriteError(f"could not write: {error.strerror or error}") from error
        raise


def unified_diff(path: str, old: bytes, new: bytes, created: bool = False) -> str:
    """A `git diff`-style unified diff of two versions of a Python file, in its own encoding;
    from /dev/null for a file the rewrite `created`."""
    encoding = _encoding(new if created else old)
    before = old.decode(encoding).splitlines(keepends=True)
    after = new.decode(encoding).splitlines(keepends=True)
    source = "/dev/null" if created else f"a/{path}"
    lines = difflib.unified_diff(before, after, fromfile=source, tofile=f"b/{path}")
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )


def _encoding(data: bytes) -> str:
    try:
        return tokenize.detect_encoding(io.BytesIO(data).readline)[0]
    except SyntaxError:
        return "utf-8"
