"""The `xlamigrate` command run in this process: its exit code and what it wrote, stdout and
stderr apart (for tests that patch a module the command imports, or need no subprocess)."""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass

import pytest

from xlamigrate.cli import main


@dataclass(frozen=True)
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        """Both streams, stdout first."""
        return self.stdout + self.stderr


def invoke(*args: str, stdin: bytes = b"") -> Result:
    """`xlamigrate ARGS` with `stdin` on standard input; the exit code main() exits with."""
    streams = {
        name: io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
        for name in ("stdout", "stderr")
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
        for name, stream in streams.items():
            patch.setattr(sys, name, stream)
        try:
            main(list(args))
        except SystemExit as exit:
            code = exit.code
        else:  # pragma: no cover - main() always exits
            raise AssertionError("main() returned instead of exiting")
    written = {
        name: stream.buffer.getvalue().decode("utf-8")  # type: ignore[attr-defined]
        for name, stream in streams.items()
    }
    exit_code = code if isinstance(code, int) else (0 if code is None else 1)
    return Result(exit_code, written["stdout"], written["stderr"])
