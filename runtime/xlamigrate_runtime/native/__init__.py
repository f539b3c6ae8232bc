"""The C kernel of CPU stochastic rounding: built on first use, cached, loaded with ctypes.

Eager PyTorch needs several passes over the data to round stochastically (noise, add, mask,
cast, a NaN check); `stochastic_rounding.c` does it in one, with counter-based noise, at about
the cost of a plain cast. It needs only a C compiler (no torch headers, no Python API, no
build step at install time), so the CLI stays pure Python and machines without a compiler
keep the eager path. `XLAMIGRATE_NATIVE`: "0" never builds it, "1" makes a failed build an
error instead of a fallback; unset, it is used where it builds.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("stochastic_rounding.c")
ENV = "XLAMIGRATE_NATIVE"
CACHE_ENV = "XLAMIGRATE_CACHE_DIR"
# Tried in turn: OpenMP (Apple's clang has none), then one thread.
_FLAGS = (
    ("-O3", "-std=c11", "-shared", "-fPIC", "-fopenmp"),
    ("-O3", "-std=c11", "-shared", "-fPIC"),
)
_COMPILE_TIMEOUT_S = 120


class NativeBuildError(RuntimeError):
    """The kernel could not be built or loaded; the message says why."""


class Piece(ctypes.Structure):
    """`count` fp32 values at address `source` rounded into bf16 at `destination`; `first` is
    the noise index of the first one (a multiple of 16). The C struct `xm_piece`."""

    _fields_ = [
        ("source", ctypes.c_void_p),
        ("destination", ctypes.c_void_p),
        ("count", ctypes.c_uint64),
        ("first", ctypes.c_uint64),
    ]


@dataclass(frozen=True)
class NativeKernel:
    library: ctypes.CDLL
    path: Path

    @property
    def vector_width(self) -> int:
        """8 where the AVX2 path runs, 1 for the portable one."""
        return int(self.library.xm_vector_width())

    def round_pieces(
        self, pieces: Sequence[Piece], mul: int, add: int, threads: int, vector: bool = True
    ) -> None:
        """Rounds every piece in one call (the GIL is released meanwhile). The result depends
        only on `mul`, `add` and each piece's `first`, not on `threads` or `vector`."""
        array = (Piece * len(pieces))(*pieces)
        self.library.xm_round_pieces(array, len(pieces), mul, add, threads, int(vector))


def load(
    source: Path = SOURCE, cache_dir: Path | None = None, compiler: Sequence[str] | None = None
) -> NativeKernel:
    """Builds the kernel unless a build of the same source with the same compiler is cached,
    then loads it: with OpenMP where the compiler has it, else single-threaded. Raises
    NativeBuildError."""
    command = list(compiler) if compiler is not None else find_compiler()
    directory = cache_dir if cache_dir is not None else _cache_dir()
    unsafe = _not_private(directory)
    if unsafe is not None:
        raise NativeBuildError(f"will not load code from {unsafe}")
    try:
        code = source.read_bytes()
    except OSError as error:  # e.g. imported from a zip
        raise NativeBuildError(f"cannot read {source}: {error}") from error
    candidates = [
        (flags, _library_path(directory, source, code, command, flags)) for flags in _FLAGS
    ]
    built = next((path for _, path in candidates if _is_our_build(path)), None)
    failure: NativeBuildError | None = None
    for flags, path in candidates if built is None else []:
        try:
            _build([*command, *flags], source, path)
        except NativeBuildError as error:
            failure = error
            continue
        built = path
        break
    if built is None:
        raise NativeBuildError(str(failure))  # the last try's: the one without OpenMP
    try:
        loaded = ctypes.CDLL(str(built))
    except OSError as error:
        raise NativeBuildError(f"could not load {built}: {error}") from error
    for name in ("xm_vector_width", "xm_threaded"):
        getattr(loaded, name).restype = ctypes.c_int
        getattr(loaded, name).argtypes = []
    loaded.xm_round_pieces.restype = None
    loaded.xm_round_pieces.argtypes = [
        ctypes.POINTER(Piece),
        ctypes.c_size_t,
        ctypes.c_uint32,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_int,
    ]
    return NativeKernel(loaded, built)


def _library_path(
    directory: Path, source: Path, code: bytes, command: list[str], flags: tuple[str, ...]
) -> Path:
    """The cached library for this source, compiler and flags, on this kind of machine."""
    parts = [code, *(part.encode() for part in (*command, *flags, platform.machine()))]
    key = hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]
    return directory / f"{source.stem}-{key}{_suffix()}"


@functools.cache
def kernel() -> NativeKernel | None:
    """The process's kernel, built once: None where it is switched off or does not build
    (the caller then rounds with eager PyTorch; a build that fails warns once). A process-wide
    cache because a loaded shared library is one per process anyway."""
    choice = _choice()
    if choice == "0":
        return None
    try:
        return load()
    except NativeBuildError as error:
        if choice == "1":
            raise
        warnings.warn(
            f"xlamigrate: CPU stochastic rounding uses eager PyTorch, several times slower than "
            f"its C kernel: {error}. {ENV}=0 chooses that path and silences this warning.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None


def describe() -> str:
    """One line for benchmarks and bug reports: which path rounds on CPU, and why."""
    if _choice() == "0":
        return f"eager PyTorch ({ENV}=0)"
    try:
        built = load()
    except NativeBuildError as error:
        return f"eager PyTorch (no native kernel: {error})"
    width = "AVX2" if built.vector_width > 1 else "portable C"
    threads = "OpenMP" if built.library.xm_threaded() else "one thread"
    return f"native kernel, {width}, {threads} ({built.path})"


def _choice() -> str:
    return os.environ.get(ENV, "").strip()


def find_compiler() -> list[str]:
    configured = os.environ.get("CC", "").strip()
    if configured:
        return shlex.split(configured)
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return [found]
    raise NativeBuildError("no C compiler found (install gcc or clang, or set CC)")


def _cache_dir() -> Path:
    """XLAMIGRATE_CACHE_DIR, else the user's cache folder, else a per-user temporary one: the
    first that is the user's own and writable by no one else (the library in it is loaded
    into the process, so a folder another user can write to is never used)."""
    configured = os.environ.get(CACHE_ENV)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    candidates = [Path(configured)] if configured else [Path(base) / "xlamigrate"]
    candidates.append(Path(tempfile.gettempdir()) / f"xlamigrate-{_user()}")
    refused = []
    for candidate in candidates:
        why = _not_private(candidate)
        if why is None:
            return candidate
        refused.append(why)
    raise NativeBuildError(f"no private cache folder ({'; '.join(refused)})")


def _not_private(folder: Path) -> str | None:
    """Why code must not be loaded from `folder` (None: it may): it is created 0700 when
    missing, and must be a folder of this user's that no one else can write to."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat()
    except OSError as error:
        return f"{folder}: {error.strerror or error}"
    owner = getattr(os, "getuid", None)
    if owner is not None and info.st_uid != owner():
        return f"{folder}: it belongs to another user"
    if os.name == "posix" and info.st_mode & 0o022:
        return f"{folder}: others can write to it"
    if not os.access(folder, os.W_OK):
        return f"{folder}: not writable"
    return None


def _digest_path(library: Path) -> Path:
    return library.with_name(library.name + ".sha256")


def _is_our_build(library: Path) -> bool:
    """Whether `library` is the file this user's build wrote: its content has the hash
    recorded beside it when it was built (anything else at that name is built again)."""
    try:
        recorded = _digest_path(library).read_text(encoding="ascii").strip()
        data = library.read_bytes()
        info = library.stat()
    except OSError:
        return False
    owner = getattr(os, "getuid", None)
    if owner is not None and info.st_uid != owner():
        return False
    return hashlib.sha256(data).hexdigest() == recorded


def _build(command: list[str], source: Path, library: Path) -> None:
    """Compiles next to the target and renames into place: processes building at once (one
    per data-parallel rank) never load a half-written library."""
    try:
        library.parent.mkdir(parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(
            prefix=library.stem, suffix=library.suffix, dir=library.parent
        )
    except OSError as error:
        raise NativeBuildError(f"cannot write to {library.parent}: {error}") from error
    os.close(handle)
    try:
        try:
            done = subprocess.run(
                [*command, str(source), "-o", partial],
                capture_output=True,
                text=True,
                timeout=_COMPILE_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise NativeBuildError(f"could not run {command[0]}: {error}") from error
        if done.returncode != 0:
            detail = " / ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            raise NativeBuildError(
                f"compiling {source.name} with {' '.join(command)} failed (exit "
                f"{done.returncode}){': ' + detail if detail else ''}"
            )
        os.chmod(partial, 0o755)  # readable and loadable; writable by its owner only
        digest = hashlib.sha256(Path(partial).read_bytes()).hexdigest()
        recorded = _digest_path(library)
        handle, partial_digest = tempfile.mkstemp(dir=library.parent, suffix=".sha256")
        with os.fdopen(handle, "w", encoding="ascii") as out:
            out.write(digest + "\n")
        os.replace(partial_digest, recorded)
        os.replace(partial, library)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def _suffix() -> str:
    return ".dylib" if sys.platform == "darwin" else ".dll" if os.name == "nt" else ".so"


def _user() -> str:
    try:
        return str(os.getuid())
    except AttributeError:  # Windows
        return os.environ.get("USERNAME", "user")
