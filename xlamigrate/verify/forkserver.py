"""verify's runs forked from one interpreter that has imported torch and torch-xla (zygote.py),
instead of a new interpreter per run that imports them again.

A verify of three modes runs four scripts; each new interpreter spends ~10 CPU-seconds importing
torch and torch-xla before the script's first line, several times what four optimizer steps of
a small model cost. The server pays that once per verify. Runs under a launcher (`bash run.sh`)
start their own interpreters and do not use it; XLAMIGRATE_VERIFY_FORK=0 turns it off.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

SWITCH = "XLAMIGRATE_VERIFY_FORK"  # "0": a new interpreter per run
SERVER_FILE = "xlamigrate_verify_zygote.py"  # zygote.py, copied into the shim folder
START_TIMEOUT = 600.0  # seconds to import torch and torch-xla on a loaded machine


@dataclass
class _Job:
    started: threading.Event = field(default_factory=threading.Event)
    ended: threading.Event = field(default_factory=threading.Event)
    pid: int | None = None
    returncode: int | None = None


@dataclass(frozen=True)
class Outcome:
    pid: int
    returncode: int | None  # None: killed at the timeout


class ForkServer:
    """One server process; `run` may be called from several threads at once."""

    def __init__(self, server: Path, env: Mapping[str, str], log: Path) -> None:
        self._log = log.open("wb")
        self._process = subprocess.Popen(
            [sys.executable, str(server)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            env=dict(env), cwd=server.parent,
        )  # fmt: skip
        self._lock = threading.Lock()
        self._jobs: dict[int, _Job] = {}
        self._next = 0
        self._ready = threading.Event()
        self.error: str | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def wait_ready(self, timeout: float = START_TIMEOUT) -> bool:
        """Whether the server imported torch-xla and takes runs (else `error` says why)."""
        if not self._ready.wait(timeout):
            self.error = f"torch-xla not imported within {timeout:g} s"
            self.close()
        return self.error is None

    def run(
        self,
        argv: Sequence[str],
        cwd: Path,
        env: Mapping[str, str],
        stderr: Path,
        timeout: float,
        recorder: Path | None = None,
        stdout: Path | None = None,
    ) -> Outcome | None:
        """Runs `python ARGV` as a child of the server, its output in `stdout` (else dropped)
        and `stderr`; None if the server is gone."""
        request: dict[str, Any] = {
            "argv": list(argv), "cwd": str(cwd), "env": dict(env), "stderr": str(stderr),
            "stdout": str(stdout) if stdout else None,
            "recorder": str(recorder) if recorder else None,
        }  # fmt: skip
        job = _Job()
        with self._lock:
            if self.error is not None or self._process.stdin is None:
                return None
            self._next += 1
            request["id"] = self._next
            self._jobs[self._next] = job
            try:
                self._process.stdin.write((json.dumps(request) + "\n").encode())
                self._process.stdin.flush()
            except OSError:
                return None
        job.started.wait()
        if job.pid is None:
            return None
        if not job.ended.wait(timeout):
            _kill(job.pid)
            job.ended.wait()
            return Outcome(job.pid, None)
        return Outcome(job.pid, job.returncode)

    def close(self) -> None:
        with self._lock:
            if self._process.stdin is not None and not self._process.stdin.closed:
                self._process.stdin.close()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()

    def _read(self) -> None:
        stream: IO[bytes] | None = self._process.stdout
        for line in stream or ():
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if "ready" in message or "error" in message:
                self.error = message.get("error")
                self._ready.set()
                continue
            job = self._jobs.get(message.get("id", -1))
            if job is None:
                continue
            if "pid" in message:
                job.pid = message["pid"]
                job.started.set()
            if "returncode" in message:
                job.returncode = message["returncode"]
                job.ended.set()
        # the server is gone: nothing more will start or end
        self.error = self.error or "the fork server ended"
        self._ready.set()
        for job in list(self._jobs.values()):
            job.started.set()
            job.ended.set()


def start(shim: Path, env: Mapping[str, str], work: Path) -> ForkServer | None:
    """A ready server whose children see `shim` first on their path, or None (switched off,
    or torch-xla cannot be imported: each run then starts its own interpreter and says why)."""
    if os.environ.get(SWITCH, "1") == "0" or os.name != "posix":
        return None
    server = ForkServer(shim / SERVER_FILE, env, work / "fork-server.log")
    if server.wait_ready():
        return server
    server.close()
    return None


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
