"""Training scripts the tests run on torch-xla, as children of verify's fork server (one per
test process, started at the first run): `python SCRIPT ARGS` without importing torch and
torch-xla again (~10 CPU-seconds each, most of the suite's time).

A child behaves as a new interpreter would where these tests look (tests/test_verify_forkserver.py:
the legacy flag is read when the device starts, exit codes, tracebacks, atexit). Where the
server cannot start, each run starts its own interpreter. XLAMIGRATE_VERIFY_FORK=0 turns the
server off here as in verify.
"""

from __future__ import annotations

import atexit
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from xlamigrate.verify import forkserver, zygote

_lock = threading.Lock()
_server: list[forkserver.ForkServer | None] = []  # [] until started; [None] if it cannot


def run_python(
    argv: Sequence[str],
    cwd: Path | str,
    env: Mapping[str, str],
    timeout: float,
    fresh: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`python ARGV` in `cwd` with `env`, as subprocess.run(capture_output=True, text=True)
    would answer (TimeoutExpired past `timeout`); `fresh`: in a new interpreter (a script that
    tests what happens before torch-xla is imported)."""
    command = [sys.executable, *argv]
    server = None if fresh else _started(env)
    if server is not None:
        with tempfile.TemporaryDirectory(prefix="xlamigrate-child-") as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            outcome = server.run(argv, Path(cwd), env, err, timeout, stdout=out)
            if outcome is not None:
                if outcome.returncode is None:
                    raise subprocess.TimeoutExpired(command, timeout)
                return subprocess.CompletedProcess(
                    command, outcome.returncode, _text(out), _text(err)
                )
    return subprocess.run(
        command, cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout
    )


def _started(env: Mapping[str, str]) -> forkserver.ForkServer | None:
    with _lock:
        if not _server:
            folder = Path(tempfile.mkdtemp(prefix="xlamigrate-forkserver-"))
            shutil.copyfile(zygote.__file__, folder / forkserver.SERVER_FILE)
            legacy = ("XLA_USE_BF16", "XLA_DOWNCAST_BF16")  # read by a child, never the server
            server_env = {key: value for key, value in env.items() if key not in legacy}
            server = forkserver.start(folder, server_env, folder)
            _server.append(server)
            atexit.register(_stop, server, folder)
        return _server[0]


def _stop(server: forkserver.ForkServer | None, folder: Path) -> None:
    if server is not None:
        server.close()
    shutil.rmtree(folder, ignore_errors=True)


def _text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", "replace") if path.exists() else ""
