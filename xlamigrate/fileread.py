"""A file's bytes, read as a scan reads every file of a tree: only a regular file's (a FIFO
blocks a read, a device never ends), in as few system calls as it takes."""

from __future__ import annotations

import os
import stat

# Opening a FIFO without it waits for a writer (the file is then found no regular file).
_NO_WAIT = getattr(os, "O_NONBLOCK", None)


def regular_file_bytes(location: str) -> bytes | None:
    """The bytes of a regular file; None for anything else (a FIFO blocks, a device never
    ends). On POSIX, one open, fstat and read for most files (the file object `open` makes
    costs as much again: a tree's thousands of reads took twice as long)."""
    if _NO_WAIT is None:
        if not stat.S_ISREG(os.stat(location).st_mode):
            return None
        with open(location, "rb") as stream:
            return stream.read()
    descriptor = os.open(location, os.O_RDONLY | _NO_WAIT | os.O_CLOEXEC)
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            return None
        data = os.read(descriptor, status.st_size + 1)
        if len(data) == status.st_size:  # (all of it: the usual case)
            return data
        parts = [data]  # (it grew or shrank since, or the read was short: on to its end)
        while part := os.read(descriptor, 1 << 20):
            parts.append(part)
        return b"".join(parts)
    finally:
        os.close(descriptor)
