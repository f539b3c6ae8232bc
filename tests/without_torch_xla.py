"""Imports Python files as a machine without torch-xla (nor the Neuron packages built on it)
would: run by tests/cleanliness.py as `python tests/without_torch_xla.py < jobs.json`, one
process per batch. torch, and the other packages the files import at module level, are
imported once; each file is then imported in a forked child (at most `workers` at a time), so a
hang, a crash or a module's side effects end with the child. A module that starts a process
while it is imported is a launcher, not a module: the child refuses (PermissionError), and it
did not import.

Input (stdin): {"timeout": seconds, "workers": n, "pairs": [[original, rewritten], ...]}
(absolute paths). Output (stdout): one JSON object per pair, in order, {"original": error,
"rewritten": error, "seconds": {...}}: each error null where the file imported; the rewritten
file is imported only where the original did (SKIPPED otherwise)."""

from __future__ import annotations

import ast
import contextlib
import gc
import importlib
import importlib.util
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import traceback
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# What a machine without torch-xla lacks: its packages, and its distributions' metadata.
ABSENT = ("torch_xla", "torch_neuronx", "neuronx_distributed", "libneuronxla")
SKIPPED = "skipped"
HERE = Path(__file__).resolve()
GRACE = 10.0  # seconds past the timeout before a child that ignores its alarm is killed


def _absent(name: str) -> bool:
    return re.sub(r"[-_.]+", "_", name).lower().split(".")[0] in ABSENT


class _Hiding:
    """A meta path finder wrapped so that the absent packages are not there: `import torch_xla`
    raises ModuleNotFoundError, and `importlib.util.find_spec("torch_xla")` and
    `importlib.metadata.version("torch-xla")` say it is not installed (the checks availability
    helpers such as transformers' `is_torch_xla_available` make)."""

    def __init__(self, finder: Any) -> None:
        self.finder = finder

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        find = getattr(self.finder, "find_spec", None)
        if _absent(name) or find is None:
            return None
        return find(name, path, target)

    def find_distributions(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        find = getattr(self.finder, "find_distributions", None)
        if find is None:
            return iter(())
        return (d for d in find(*args, **kwargs) if not _absent(d.metadata["Name"] or ""))

    def invalidate_caches(self) -> None:
        invalidate = getattr(self.finder, "invalidate_caches", None)
        if invalidate is not None:
            invalidate()


def hide_absent_packages() -> None:
    sys.meta_path[:] = [
        finder if isinstance(finder, _Hiding) else _Hiding(finder) for finder in sys.meta_path
    ]
    for name in list(sys.modules):
        if _absent(name):
            del sys.modules[name]


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise PermissionError("started a process while it was imported (a launcher, not a module)")


def refuse_processes() -> None:
    subprocess.Popen._execute_child = _refuse  # type: ignore[attr-defined]
    for name in (
        "system", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execv", "execve", "execl",
        "execle", "execlp", "execlpe", "execvp", "execvpe", "spawnv", "spawnve", "spawnl",
        "spawnle", "spawnlp", "spawnlpe", "spawnvp", "spawnvpe",
    ):  # fmt: skip
        if hasattr(os, name):
            setattr(os, name, _refuse)


def _module_level_imports(path: Path) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(module, names) of each absolute import the file makes outside functions and classes."""
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError, RecursionError):
        return
    statements: list[ast.stmt] = list(tree.body)
    while statements:
        statement = statements.pop()
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                yield alias.name, ()
        elif isinstance(statement, ast.ImportFrom) and statement.level == 0 and statement.module:
            yield statement.module, tuple(alias.name for alias in statement.names)
        elif not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for child in ast.iter_child_nodes(statement):
                if isinstance(child, ast.stmt):
                    statements.append(child)
                elif isinstance(child, ast.ExceptHandler | ast.match_case):
                    statements.extend(child.body)


def preload(paths: list[Path], timeout: float) -> None:
    """Imports once, here, the installed packages the files import at module level (never
    one of theirs, never an absent one), so that no child imports them again: lightning or
    transformers' Trainer take seconds each. A package that fails here is left to the child."""
    folders = {path.parent for path in paths}
    for path in paths:  # a package's own modules are imported from its root
        package = _package_import(path)
        if package is not None:
            folders.add(package[0])
    local = {entry.stem for folder in folders for entry in folder.iterdir()}
    wanted: dict[str, set[str]] = {}
    for path in paths:
        for module, names in _module_level_imports(path):
            top = module.split(".")[0]
            if top not in local and not _absent(top) and top not in sys.builtin_module_names:
                wanted.setdefault(module, set()).update(names)
    null = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(1), os.dup(2)
    os.dup2(null, 1)
    os.dup2(null, 2)
    try:
        for module, attributes in sorted(wanted.items()):
            with contextlib.suppress(BaseException):
                signal.setitimer(signal.ITIMER_REAL, timeout)
                loaded = importlib.import_module(module)
                for name in sorted(attributes):  # a lazy package loads its submodules on access
                    with contextlib.suppress(BaseException):
                        getattr(loaded, name)
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)


def _package_import(path: Path) -> tuple[Path, str] | None:
    """(the folder to put on sys.path, the dotted name) of a file inside a package (a folder
    with __init__.py): its relative imports only work when it is imported by that name."""
    parts = [path.stem] if path.name != "__init__.py" else []
    folder = path.parent
    if not (folder / "__init__.py").is_file():
        return None
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    if not all(part.isidentifier() for part in parts):
        return None
    return folder, ".".join(parts)


def _import(path: Path, index: int) -> None:
    """Imports the file as its project would: by its package name inside a package, else as a
    module of its own (never as __main__, so a script's `if __name__ == "__main__":` stays
    shut), from its folder, with its path as sys.argv."""
    os.chdir(path.parent)
    sys.argv = [str(path)]
    package = _package_import(path)
    if package is not None:
        root, name = package
        sys.path.insert(0, str(root))
        importlib.import_module(name)
        return
    sys.path.insert(0, str(path.parent))
    name = f"_cleanliness_{index}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"no loader for {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


def _describe(error: BaseException, path: Path) -> str:
    """`Type: message (line N)`, N the last line of the file itself the traceback passed; and
    where the error came from when that was another file of the project (a module it imports:
    `(line N; from ../state.py:56)`, the path relative to the file's folder)."""
    package = _package_import(path)
    project = str(package[0] if package is not None else path.parent) + os.sep
    line, origin = None, None
    for frame in traceback.extract_tb(error.__traceback__):
        if frame.filename == str(path):
            line, origin = frame.lineno, None
        elif frame.filename.startswith(project):
            origin = f"{os.path.relpath(frame.filename, path.parent)}:{frame.lineno}"
    text = " ".join(str(error).split())[:300]
    where = "; ".join(
        part
        for part in (f"line {line}" if line else "", f"from {origin}" if origin else "")
        if part
    )
    return f"{type(error).__name__}: {text}" + (f" ({where})" if where else "")


def _child(path: Path, index: int, timeout: float, report: int) -> None:
    os.setpgid(0, 0)  # its own group: whatever it starts ends with it
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)

    def out_of_time(signum: int, frame: Any) -> None:
        raise TimeoutError(f"did not import within {timeout:g} s")

    signal.signal(signal.SIGALRM, out_of_time)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    refuse_processes()
    try:
        _import(path, index)
        error = None
    except BaseException as caught:  # SystemExit and KeyboardInterrupt count too
        error = _describe(caught, path)
    signal.setitimer(signal.ITIMER_REAL, 0)
    os.write(report, json.dumps(error).encode())
    os._exit(0)


@dataclass
class _Running:
    pair: int
    side: str  # "original" or "rewritten"
    pid: int
    fd: int
    started: float
    deadline: float
    data: bytes = b""
    timed_out: bool = False
    status: int | None = field(default=None)


def _start(pair: int, side: str, path: Path, timeout: float) -> _Running:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            _child(path, 2 * pair + (side == "rewritten"), timeout, write)
        finally:
            os._exit(1)
    os.close(write)
    now = time.monotonic()
    return _Running(pair, side, pid, read, now, now + timeout + GRACE)


def _finish(job: _Running) -> str | None:
    """None where the file imported; else what went wrong. Ends whatever the child left."""
    os.set_blocking(job.fd, False)  # what an exited child wrote is there; nothing more comes
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(job.fd, 65536):
            job.data += chunk
    os.close(job.fd)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(job.pid, signal.SIGKILL)
    status = job.status if job.status is not None else os.waitpid(job.pid, 0)[1]
    if job.data:
        with contextlib.suppress(ValueError):
            error: str | None = json.loads(job.data)
            return error
    if job.timed_out:
        return "TimeoutError: killed: it ignored its alarm"
    if os.WIFSIGNALED(status):
        return f"crashed: signal {os.WTERMSIG(status)}"
    return f"exited with status {os.waitstatus_to_exitcode(status)} before it imported"


def import_pairs(pairs: list[list[str]], timeout: float, workers: int) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = [{} for _ in pairs]
    pending = deque((index, "original") for index in range(len(pairs)))
    running: dict[int, _Running] = {}
    while pending or running:
        while pending and len(running) < workers:
            pair, side = pending.popleft()
            path = Path(pairs[pair][0 if side == "original" else 1])
            job = _start(pair, side, path, timeout)
            running[job.fd] = job
        now = time.monotonic()
        wait = max(0.0, min(1.0, *(job.deadline - now for job in running.values())))
        ready, _, _ = select.select(list(running), [], [], wait)
        done = []
        for fd in ready:
            chunk = os.read(fd, 65536)
            if chunk:
                running[fd].data += chunk
            else:
                done.append(fd)
        for fd, job in running.items():
            if fd in done:
                continue
            if time.monotonic() > job.deadline:
                job.timed_out = True
                done.append(fd)
                continue
            exited, status = os.waitpid(job.pid, os.WNOHANG)
            if exited:  # gone, yet a process it started holds the pipe open
                job.status = status
                done.append(fd)
        for fd in done:
            job = running.pop(fd)
            error = _finish(job)
            results[job.pair][job.side] = error
            results[job.pair].setdefault("seconds", {})[job.side] = round(
                time.monotonic() - job.started, 2
            )
            if job.side == "original":
                if error is None:
                    pending.appendleft((job.pair, "rewritten"))
                else:
                    results[job.pair]["rewritten"] = SKIPPED
    return results


def main() -> None:
    # Run as a script, this file's folder (tests/) heads sys.path: its modules are no one's.
    sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != HERE.parent]
    jobs = json.load(sys.stdin)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a module that downloads at import fails fast
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    sys.dont_write_bytecode = True
    hide_absent_packages()
    timeout = float(jobs.get("timeout", 20))

    def out_of_time(signum: int, frame: Any) -> None:
        raise TimeoutError

    signal.signal(signal.SIGALRM, out_of_time)
    with contextlib.suppress(ImportError):
        import torch  # shared by every child
        import torch._dynamo  # what torch imports lazily at the first optimizer (2 s a child)

        torch.set_num_threads(1)  # the children run side by side
    preload([Path(path) for pair in jobs["pairs"] for path in pair], timeout)
    gc.freeze()  # what the children share stays shared: the collector never writes to it
    results = import_pairs(jobs["pairs"], timeout, int(jobs.get("workers", 1)))
    for result in results:
        sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
