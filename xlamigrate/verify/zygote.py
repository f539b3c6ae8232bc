"""The program behind verify's fork server: it imports torch and torch-xla once, then forks one
child per training run, which runs the script as `python SCRIPT ARGS` would.

Importing torch and torch-xla takes ~10 CPU-seconds, most of a short verify run; the fork
takes milliseconds. torch-xla reads the legacy flags, PJRT_DEVICE and XLA_FLAGS when the device
starts, not when it is imported (the child's environment decides them), and the server never
starts the device: a child is as fresh as a new interpreter where precision is concerned.

Standalone like the recorder: run by its path with verify's interpreter, standard library and
torch only. It speaks JSON lines, single-threaded (fork with other threads running is unsafe):
- it prints `{"ready": true}` once torch-xla is imported, or `{"error": ...}` and exits;
- each request `{"id", "argv", "cwd", "env", "stdout", "stderr", "recorder"}` (stdout and
  recorder optional) forks a child and answers
  `{"id", "pid"}`; when the child ends, `{"id", "returncode"}` (negative: killed by a signal);
- at the end of its input it waits for its children and exits.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import select
import sys
import threading
import traceback
import types
from typing import Any

POLL_SECONDS = 0.05  # how often ended children are looked for while no request comes
_PROTOCOL: Any = sys.stdout  # where the answers go (the server's first stdout)


def main() -> None:
    global _PROTOCOL
    _PROTOCOL = os.fdopen(os.dup(1), "w")  # the answers; what an import prints goes to stderr
    os.dup2(2, 1)
    del sys.path[0]  # this file's folder: no module of a child's is looked up there
    before = dict(os.environ)
    try:
        import torch  # noqa: F401
        import torch_xla  # noqa: F401
    except BaseException as error:  # any failure means: no server
        _answer({"error": f"{type(error).__name__}: {error}"})
        return
    # what importing torch-xla set in the environment (XLA_FLAGS additions, log levels): a
    # child's environment gets it as a fresh import would have set it
    imported = {key: (before.get(key), value) for key, value in os.environ.items()
                if before.get(key) != value}  # fmt: skip
    base_path = [entry for entry in sys.path if entry not in _python_path(before)]
    _answer({"ready": True})
    children: dict[int, Any] = {}  # pid -> request id
    stream = sys.stdin.buffer
    buffered = b""
    open_input = True
    while open_input or children:
        _reap(children, block=not open_input)
        if not open_input:
            continue
        readable, _, _ = select.select([stream], [], [], POLL_SECONDS)
        if not readable:
            continue
        chunk = os.read(stream.fileno(), 65536)
        if not chunk:
            open_input = False
            continue
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _child(request, imported, base_path)  # never returns
            children[pid] = request["id"]
            _answer({"id": request["id"], "pid": pid})


def _reap(children: dict[int, Any], block: bool) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        if pid in children:
            _answer({"id": children.pop(pid), "returncode": os.waitstatus_to_exitcode(status)})
        if block:
            return


def _child(
    request: dict[str, Any], imported: dict[str, tuple[str | None, str]], base_path: list[str]
) -> None:
    """Becomes `python SCRIPT ARGS` in `cwd` with `env`, the recorder shim active; exits."""
    code = 1
    try:
        _PROTOCOL.close()
        _redirect(request.get("stdout"), request["stderr"])
        os.chdir(request["cwd"])
        process = sys.modules.get("multiprocessing.process")
        if process is not None:  # where spawned workers find a relative script: the cwd at start
            process.ORIGINAL_DIR = os.path.abspath(request["cwd"])  # type: ignore[attr-defined]
        env = dict(request["env"])
        for key, (was, now) in imported.items():
            if env.get(key) == was:  # the child's value is what the import started from
                env[key] = now
        os.environ.clear()
        os.environ.update(env)
        script, *_ = sys.argv = list(request["argv"])
        sys.path[:] = [
            os.path.dirname(os.path.realpath(script)),
            *_python_path(env),
            *base_path,
        ]
        if request.get("recorder"):
            _activate_recorder(request["recorder"])
        code = _run_main(script)
        code = _shutdown(code)
    except BaseException:  # a child never returns into the server's loop
        traceback.print_exc()
    finally:
        os._exit(code)


def _run_main(script: str) -> int:
    """Runs `script` as the `__main__` module, as the interpreter would; its exit code."""
    main = types.ModuleType("__main__")
    main.__file__ = os.path.abspath(script)  # as Python 3.9+ sets it; sys.argv[0] as given
    main.__builtins__ = __builtins__  # type: ignore[attr-defined]
    main.__cached__ = None  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    try:
        with open(main.__file__, "rb") as stream:
            code = compile(stream.read(), main.__file__, "exec")
        exec(code, main.__dict__)
    except SystemExit as error:
        return _exit_code(error.code)
    except BaseException as error:  # printed as the interpreter prints it: from the script on
        trace = error.__traceback__.tb_next if error.__traceback__ else None
        sys.excepthook(type(error), error.with_traceback(trace), trace)
        return 1
    return 0


def _shutdown(code: int) -> int:
    """What the interpreter does at exit: wait for threads, run atexit, flush."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    except SystemExit as error:
        code = _exit_code(error.code)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed stream: nothing left to write
            stream.flush()
    return code


def _exit_code(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def _activate_recorder(path: str) -> None:
    """The shim's recorder, as its `sitecustomize` would start it in a new interpreter (the
    server ran the shim at its own start, without a record folder: it did nothing then)."""
    spec = importlib.util.spec_from_file_location("_xlamigrate_verify_recorder", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.activate_recorder()


def _redirect(stdout: str | None, stderr: str) -> None:
    """stdin from /dev/null; stdout to its file or /dev/null; stderr to its file."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    for fd, path in ((1, stdout), (2, stderr)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) if path else null
        os.dup2(target, fd)
        if target != null:
            os.close(target)
    os.close(null)


def _python_path(env: dict[str, str]) -> list[str]:
    return [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]


def _answer(message: dict[str, Any]) -> None:
    _PROTOCOL.write(json.dumps(message) + "\n")
    _PROTOCOL.flush()


if __name__ == "__main__":
    main()
