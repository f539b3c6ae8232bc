"""What earlier runs found, kept in `<root>/.xlamigrate_cache/` so that a run over a mostly
unchanged tree (pre-commit naming one file of a project analysed whole) reads and parses only
what changed. As ruff's cache: a file is known by its path, size and mtime, else by a hash of
its bytes; a result by those bytes and everything else it depends on (the file's context, the
request); the whole by the tool (its version and its own files) and the settings.

A damaged or foreign cache is a miss, never an error: values are unpickled by a loader that
makes nothing but xlamigrate's own dataclasses and enums, and the cache is written atomically
(a temporary file renamed over the old one), so concurrent runs leave one of their caches whole.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import enum
import functools
import importlib
import io
import os
import pickle
import stat
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

try:  # (hashlib's own blake2b: importing hashlib also loads OpenSSL, 2 ms of a warm run)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover (an interpreter without CPython's module)
    from hashlib import blake2b

from xlamigrate import __version__
from xlamigrate.rulesdata import rules_directory

if TYPE_CHECKING:
    from xlamigrate.config import Settings

CACHE_DIRECTORY = ".xlamigrate_cache"
PROJECT_MARKERS = (".git", "pyproject.toml")  # a folder with one is a project's root
DISABLE_VARIABLE = "XLAMIGRATE_NO_CACHE"  # set (to anything but "" or "0"): no cache is used
_FORMAT = 1  # the layout of a cache file; a change makes every older one a miss
_GITIGNORE = "# Automatically created by xlamigrate.\n*\n"
_CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by xlamigrate.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)
# Bounds: files remembered per cache file, bytes of results kept (the least recently stored go
# first), and cache files (one per tool build and settings) kept in a version's folder.
_MAX_FILES = 250_000
_MAX_RESULT_BYTES = 128 << 20
_SHARDS = 16
# A result used again is marked recently used once it is this many runs old (not at every use:
# each mark rewrites its shard).
_TOUCHED_EVERY = 8
_MAX_CACHE_FILES = 8
_SETTINGS_NOT_KEYED = frozenset({"root", "config_path"})  # where the settings come from
# A file changed this close before the run started may change again within the same mtime
# tick (as git's "racily clean" entries): it is remembered by its hash only.
_RACY_NS = 2_000_000_000
_ALLOWED_BUILTINS = frozenset({"frozenset", "set", "complex", "bytearray", "slice"})
MISS = object()  # what `get` gives for a result it does not have
_NOT_NORMAL, _DOUBLED = f"{os.sep}.", os.sep * 2  # (in a path abspath would change)

# A file's entry: size, mtime_ns (-1: compare hashes), hash of its bytes, kind, prefilter verdict.
_FileEntry = tuple[int, int, str, str, bool]


def disabled_by_environment() -> bool:
    return os.environ.get(DISABLE_VARIABLE, "") not in ("", "0")


def stable_digest(*values: object) -> str:
    """A digest of plain values and frozen dataclasses that is the same in every process (sets
    and mappings are ordered by their items' digests, so hash randomisation does not show).
    TypeError for a value it cannot describe."""
    hasher = blake2b(digest_size=16)
    _feed(hasher, values)
    return hasher.hexdigest()


def content_digest(data: bytes) -> str:
    return blake2b(data, digest_size=16).hexdigest()


class RunCache:
    """One run's view of the cache: looked up while the run goes, written back by `save`."""

    def __init__(self, path: Path, root: Path, entries: dict[str, Any]) -> None:
        self.path = path
        self.root = os.path.abspath(root)
        self.started_ns = time.time_ns()
        self._files: dict[str, _FileEntry] = _files_of(entries.get("files"))
        # The results, in shards by key (a run reads the shards of the keys it asks, and writes
        # back those it changed: a warm run with one file changed rewrites one shard, not all).
        self._shards: dict[int, dict[str, tuple[int, bytes]]] = {}
        self._dirty_shards: set[int] = set()
        generation = entries.get("generation", 0)
        self._generation = (generation if isinstance(generation, int) else 0) + 1
        self._stats: dict[str, os.stat_result] = {}
        self._dirty = False
        self._digests: dict[str, str] = {}  # a file's bytes' hash, as this run knows them
        # Per-file pieces of the cross-file work (which names a file holds): a table per
        # question, each file's answer under the hash of its bytes, kept in a file of their
        # own (read once a run asks a question: a run that reuses the project's decision
        # asks none). A question asked keeps the answers of the files it was asked of.
        self._pieces: dict[str, dict[str, Any]] | None = None
        self._pieces_changed = False
        self._asked: dict[str, set[str]] = {}  # a question -> the files' hashes asked about
        self._names: dict[str, str] = {}
        self._below = os.path.join(self.root, "")  # (the root and a separator)
        # The digest of bytes this run hashed or knew from a file's unchanged stat, by the
        # identity of the bytes object (kept with it, so the identity is not reused).
        self._known_data: dict[int, tuple[bytes, str]] = {}
        self._described: dict[tuple[int, int], tuple[object, object, str]] = {}

    @classmethod
    def open(cls, root: Path, *configuration: object) -> RunCache | None:
        """The cache of `root` for a run configured by `configuration` (settings, rules...);
        None where the environment turns it off or the configuration cannot be keyed."""
        if disabled_by_environment():
            return None
        try:
            key = stable_digest(_FORMAT, sys.version_info[:2], _tool_files(), configuration)
        except (TypeError, OSError):
            return None
        return cls.open_file(Path(root) / CACHE_DIRECTORY / __version__ / f"{key}.pickle", root)

    @classmethod
    def open_file(cls, path: Path, root: Path) -> RunCache:
        """The cache kept in `path` (empty where it is missing or damaged)."""
        return cls(path, root, _load_entries(path))

    # The prefilter's verdicts: whether a file may have findings, from its stat where it can.

    def known_unflagged(self, path: str | Path, kind: str) -> bool:
        """Whether the file is unchanged since a run found it names nothing worth parsing
        (then it is not read at all)."""
        return self.known_verdicts([(os.fspath(path), kind)])[0] is False

    def known_verdicts(self, files: Iterable[tuple[str, str]]) -> list[bool | None]:
        """The prefilter's verdict on each file (its location, its kind) where it is unchanged
        by its stat since a run gave it (its digest is then known too); None where it may have
        changed. One loop over a warm run's thousands of files: each costs a stat and a few
        lookups, not a call chain."""
        entries, stats, digests, names = self._files, self._stats, self._digests, self._names
        verdicts: list[bool | None] = []
        for location, kind in files:
            name = names.get(location)
            if name is None:
                name = names[location] = self._named(location)
            try:
                status = os.stat(location)
            except OSError:
                verdicts.append(None)
                continue
            entry = entries.get(name)
            if (
                entry is None
                or entry[1] == -1  # (racy when remembered: its mtime is not trusted)
                or entry[0] != status.st_size
                or entry[1] != status.st_mtime_ns
                or entry[3] != kind
                or not stat.S_ISREG(status.st_mode)
            ):
                stats[name] = status  # (`flagged` reads it: the file is read next)
                verdicts.append(None)
                continue
            digests[name] = entry[2]
            if entry[4]:  # (flagged: read when its job is asked for, `flagged` then)
                stats[name] = status
            verdicts.append(entry[4])
        return verdicts

    def flagged(self, path: str | Path, kind: str, data: bytes, decide: Callable[[], bool]) -> bool:
        """The prefilter's verdict on the file's bytes: remembered for the same bytes, else
        `decide()` (and remembered)."""
        name = self._name(path)
        entry = self._files.get(name)
        status = self._stats.pop(name, None)
        if _unchanged(entry, status, kind, len(data)) and entry is not None:
            digest = entry[2]  # (as ruff: a file of the same size and mtime is not hashed)
        else:
            digest = content_digest(data)
        self._digests[name] = digest
        self._known_data[id(data)] = (data, digest)
        if entry is not None and entry[2] == digest and entry[3] == kind:
            verdict = entry[4]
        else:
            verdict = bool(decide())
        trusted = (
            status is not None
            and status.st_size == len(data)
            and status.st_mtime_ns < self.started_ns - _RACY_NS
        )
        mtime = status.st_mtime_ns if status is not None and trusted else -1
        remembered: _FileEntry = (len(data), mtime, digest, kind, verdict)
        if remembered != entry and (entry is not None or len(self._files) < _MAX_FILES):
            self._files[name] = remembered
            self._dirty = True
        return verdict

    # Results of a file's analysis, scan or plan.

    def key(self, task: object, path: str, kind: str, data: bytes, context: object) -> str | None:
        """The key of one job's result (None: its context cannot be keyed, so it is not kept)."""
        known = self._known_data.get(id(data))
        digest = known[1] if known is not None and known[0] is data else content_digest(data)
        described = self._described.get((id(task), id(context)))
        if described is None or described[0] is not task or described[1] is not context:
            try:
                # (many jobs share a task and a context: each pair is described once)
                described = (task, context, stable_digest(task, context))
            except TypeError:
                return None
            self._described[(id(task), id(context))] = described
        return stable_digest(described[2], path, kind, digest)

    def get(self, key: str) -> object:
        """The result stored under `key`, or MISS (also for an entry that does not load)."""
        number, shard = self._shard(key)
        stored = shard.get(key)
        if stored is None:
            return MISS
        try:
            value = _Loader(io.BytesIO(stored[1]), values=True).load()
        except Exception:  # a damaged entry, or one naming what no longer exists: a miss
            del shard[key]
            self._dirty_shards.add(number)
            return MISS
        if stored[0] < self._generation - _TOUCHED_EVERY:  # (kept as recently used)
            shard[key] = (self._generation, stored[1])
            self._dirty_shards.add(number)
        return value

    def put(self, key: str, value: object) -> None:
        try:
            blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # (a value that does not pickle is simply not kept)
            return
        number, shard = self._shard(key)
        shard[key] = (self._generation, blob)
        self._dirty_shards.add(number)
        self._dirty = True  # (the index keeps the generation the shard's new entries have)

    def _shard(self, key: str) -> tuple[int, dict[str, tuple[int, bytes]]]:
        number = zlib.crc32(key.encode()) % _SHARDS
        shard = self._shards.get(number)
        if shard is None:
            loaded = _load_entries(self._shard_path(number)).get("results")
            shard = self._shards[number] = _results_of(loaded)
        return number, shard

    def _shard_path(self, number: int) -> Path:
        return self.companion(f"results-{number:x}")

    def companion(self, name: str) -> Path:
        """Where a file kept with this cache lies (of its configuration, pruned with it)."""
        return self.path.with_name(f"{self.path.stem}.{name}{self.path.suffix}")

    def piece(self, question: str, path: str | Path, compute: Callable[[], Any]) -> Any:
        """One file's answer to a cross-file question (`question`: a key for it and whatever
        it depends on besides the file): remembered for the file's bytes, where this run knows
        them (the file was read, or is unchanged by its stat); else `compute()`. The answer
        must be plain values (tuples, strings, numbers)."""
        digest = self._digests.get(self._name(path))
        if digest is None:
            return compute()
        return self._answer(question, digest, compute)

    def answer(self, question: str, data: bytes, compute: Callable[[], Any]) -> Any:
        """An answer about some bytes (a pin file's: the releases it pins), remembered for
        those bytes; as `piece`'s, plain values."""
        return self._answer(question, content_digest(data), compute)

    def digest_of(self, path: str | Path) -> str | None:
        """The digest of the file's bytes as this run knows them (read, or unchanged by its
        stat); None where it does not."""
        return self._digests.get(self._name(path))

    def _answer(self, question: str, digest: str, compute: Callable[[], Any]) -> Any:
        self._asked.setdefault(question, set()).add(digest)
        if self._pieces is None:
            self._pieces = _pieces_of(_load_entries(self.companion("pieces")).get("pieces"))
        table = self._pieces.setdefault(question, {})
        if digest in table:
            return table[digest]
        answer = table[digest] = compute()
        self._pieces_changed = True
        return answer

    def save(self) -> None:
        """Writes the cache back, if this run added to it; a cache that cannot be written is
        left as it was (the run's results are not affected)."""
        with contextlib.suppress(OSError):
            for number in sorted(self._dirty_shards):
                kept = _bounded(self._shards[number], _MAX_RESULT_BYTES // _SHARDS)
                _made(self.path.parent)
                data = pickle.dumps({"results": kept}, protocol=pickle.HIGHEST_PROTOCOL)
                _write_atomically(self._shard_path(number), data)
        self._dirty_shards.clear()
        if self._pieces is not None and self._pieces_changed:
            pieces = {  # (a question asked: the answers for the files of this run)
                question: (
                    {d: table[d] for d in self._asked[question] if d in table}
                    if question in self._asked
                    else table
                )
                for question, table in self._pieces.items()
            }
            with contextlib.suppress(OSError):
                _made(self.path.parent)
                data = pickle.dumps({"pieces": pieces}, protocol=pickle.HIGHEST_PROTOCOL)
                _write_atomically(self.companion("pieces"), data)
            self._pieces_changed = False
        if not self._dirty:
            return
        entries = {"files": self._files, "generation": self._generation}
        with contextlib.suppress(OSError):
            folder = _made(self.path.parent)
            data = pickle.dumps(entries, protocol=pickle.HIGHEST_PROTOCOL)
            _write_atomically(self.path, data)
            _prune(folder, keep=self.path)
        self._dirty = False

    def _name(self, path: str | Path) -> str:
        """The file's name in the cache: relative to the root where it lies below it."""
        given = os.fspath(path)
        name = self._names.get(given)
        if name is None:
            name = self._names[given] = self._named(given)
        return name

    def _named(self, given: str) -> str:
        below = self._below
        if given.startswith(below) and _NOT_NORMAL not in given and _DOUBLED not in given:
            name = given[len(below) :]  # (a walk's paths: absolute and normal already)
        else:
            absolute = os.path.abspath(given)
            if not absolute.startswith(below):
                return absolute
            name = absolute[len(below) :]
        return name if os.sep == "/" else name.replace(os.sep, "/")


def _unchanged(
    entry: _FileEntry | None, status: os.stat_result | None, kind: str, size: int
) -> bool:
    """Whether a remembered file is as the run finds it by its stat: the same kind, size and
    (trusted: not racy when it was remembered) mtime."""
    return (
        entry is not None
        and status is not None
        and entry[1] != -1
        and entry[0] == status.st_size == size
        and entry[1] == status.st_mtime_ns
        and entry[3] == kind
    )


class _Loader(pickle.Unpickler):
    """Unpickles what the cache wrote: containers and scalars, and (for `values`) instances of
    xlamigrate's own dataclasses and enums; any other class is refused (a cache is a file in
    the project, so loading it must not run code it names)."""

    def __init__(self, stream: io.BytesIO, values: bool) -> None:
        super().__init__(stream)
        self.values = values

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in _ALLOWED_BUILTINS:
            return getattr(builtins, name)
        if self.values and module.partition(".")[0] == "xlamigrate" and "." not in name:
            found = getattr(importlib.import_module(module), name, None)
            if isinstance(found, type) and (
                dataclasses.is_dataclass(found) or issubclass(found, enum.Enum)
            ):
                return found
        raise pickle.UnpicklingError(f"not a cached value: {module}.{name}")


def _load_entries(path: Path, values: bool = False) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    try:
        loaded = _Loader(io.BytesIO(data), values=values).load()
    except Exception:  # damaged, truncated, or not ours: an empty cache
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _files_of(value: object) -> dict[str, _FileEntry]:
    if not isinstance(value, dict):
        return {}
    return {
        name: entry
        for name, entry in value.items()
        if isinstance(name, str)
        and isinstance(entry, tuple)
        and len(entry) == 5
        and type(entry[0]) is int
        and type(entry[1]) is int
        and isinstance(entry[2], str)
        and isinstance(entry[3], str)
        and type(entry[4]) is bool
    }


def _results_of(value: object) -> dict[str, tuple[int, bytes]]:
    if not isinstance(value, dict):
        return {}
    return {
        key: entry
        for key, entry in value.items()
        if isinstance(key, str)
        and isinstance(entry, tuple)
        and len(entry) == 2
        and type(entry[0]) is int
        and isinstance(entry[1], bytes)
    }


def _pieces_of(value: object) -> dict[str, dict[str, Any]]:
    if not isinstance(value, dict):
        return {}
    return {
        question: table
        for question, table in value.items()
        if isinstance(question, str) and isinstance(table, dict)
    }


def _bounded(results: dict[str, tuple[int, bytes]], budget: int) -> dict[str, tuple[int, bytes]]:
    """The results, the most recently used first, up to `budget` bytes."""
    if sum(len(blob) for _, blob in results.values()) <= budget:
        return results
    kept: dict[str, tuple[int, bytes]] = {}
    for key, (generation, blob) in sorted(results.items(), key=lambda item: -item[1][0]):
        if len(blob) > budget:
            continue
        kept[key] = (generation, blob)
        budget -= len(blob)
    return kept


def _made(folder: Path) -> Path:
    """The cache's folder, with the .gitignore and CACHEDIR.TAG of the cache's top folder
    (`.xlamigrate_cache` alone: a cache kept elsewhere marks no folder of the user's, whose
    files a `*` .gitignore would hide from every later walk)."""
    folder.mkdir(parents=True, exist_ok=True)
    top = folder.parent
    if top.name != CACHE_DIRECTORY:
        return folder
    for name, text in ((".gitignore", _GITIGNORE), ("CACHEDIR.TAG", _CACHEDIR_TAG)):
        if not (top / name).exists():
            _write_atomically(top / name, text.encode())
    return folder


def _write_atomically(path: Path, data: bytes) -> None:
    # (a name of this process's own beside the file, not tempfile's: importing it, with
    # random and shutil, cost a warm run more than the write)
    temporary = path.parent / f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _prune(folder: Path, keep: Path, suffix: str = ".pickle") -> None:
    """Leaves the folder's newest caches of this suffix (other settings, earlier builds) up to
    the bound: a cache is its files of one name before the first dot (a run cache's index, its
    result shards and its decision), as new as the newest of them."""
    caches: dict[str, list[tuple[int, str]]] = {}
    for entry in os.scandir(folder):
        if entry.name.endswith(suffix) and not entry.name.startswith("."):
            with contextlib.suppress(OSError):
                stem = entry.name.partition(".")[0]
                caches.setdefault(stem, []).append((entry.stat().st_mtime_ns, entry.path))
    kept = keep.name.partition(".")[0]
    others = sorted(
        ((max(files), stem) for stem, files in caches.items() if stem != kept), reverse=True
    )
    for _, stem in others[_MAX_CACHE_FILES - 1 :]:
        for _, path in caches[stem]:
            with contextlib.suppress(OSError):
                os.unlink(path)


@functools.cache
def _tool_files() -> tuple[tuple[str, int, int], ...]:
    """The files the tool's results come from (its code and its rules), by size and mtime: a
    changed checkout of the same version is another tool."""
    package = Path(__file__).resolve().parent
    folders = [package]
    rules = rules_directory()
    if isinstance(rules, Path) and package not in rules.parents:
        folders.append(rules)
    return tuple(item for folder in folders for item in _signature(folder))


def _signature(folder: Path) -> Iterator[tuple[str, int, int]]:
    entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            if entry.name != "__pycache__":
                yield from _signature(Path(entry.path))
        elif not entry.name.endswith(".pyc"):
            status = entry.stat()
            yield (entry.path, status.st_size, status.st_mtime_ns)


def _feed(hasher: Any, value: object) -> None:
    """Adds one value's description to the hash: its type, then its parts."""
    if value is None or isinstance(value, (bool, int, float)):
        hasher.update(f"{type(value).__name__}:{value!r};".encode())
    elif isinstance(value, str):
        encoded = value.encode("utf-8", "surrogatepass")
        hasher.update(b"s%d:" % len(encoded) + encoded)
    elif isinstance(value, (bytes, bytearray)):
        hasher.update(b"b%d:" % len(value) + bytes(value))
    elif isinstance(value, enum.Enum):
        hasher.update(f"e:{type(value).__qualname__}.{value.name};".encode())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        hasher.update(f"d:{type(value).__module__}.{type(value).__qualname__}(".encode())
        for item in dataclasses.fields(value):
            hasher.update(item.name.encode() + b"=")
            _feed(hasher, getattr(value, item.name))
        hasher.update(b")")
    elif isinstance(value, (tuple, list)):
        hasher.update(b"t%d(" % len(value))
        for item in value:
            _feed(hasher, item)
        hasher.update(b")")
    elif isinstance(value, Mapping):
        items = sorted(stable_digest(key, item) for key, item in value.items())
        hasher.update(b"m%d(" % len(items) + "".join(items).encode() + b")")
    elif isinstance(value, (set, frozenset)):
        members = sorted(stable_digest(item) for item in value)
        hasher.update(b"u%d(" % len(members) + "".join(members).encode() + b")")
    elif isinstance(value, PurePath):
        _feed(hasher, ("path", str(value)))
    else:
        raise TypeError(f"no stable digest for {type(value).__name__}")


def is_project_root(settings: Settings) -> bool:
    """Whether the settings' root keeps a cache: a project's root (.git, pyproject.toml or a
    configuration); a scan of loose files leaves nothing behind."""
    root = Path(settings.root)
    return settings.config_path is not None or any((root / m).exists() for m in PROJECT_MARKERS)


def side_file(root: Path, suffix: str, *configuration: object) -> Path | None:
    """Where a cache of another kind than RunCache's (walkcache.py) keeps what a run with this
    configuration found, beside RunCache's files; its folder made. None where the environment
    turns the cache off, or the configuration cannot be keyed, or the folder cannot be made."""
    if disabled_by_environment():
        return None
    try:
        key = stable_digest(_FORMAT, suffix, sys.version_info[:2], _tool_files(), configuration)
        folder = _made(Path(root) / CACHE_DIRECTORY / __version__)
    except (TypeError, OSError):
        return None
    return folder / f"{key}{suffix}"


def read_side_file(path: Path, values: bool = False) -> dict[str, Any]:
    """A side file's plain values (with `values`: xlamigrate's dataclasses and enums too);
    empty where it is missing, damaged or not ours."""
    return _load_entries(path, values)


def write_side_file(path: Path, entries: dict[str, Any]) -> None:
    """Writes a side file atomically, leaving the newest few of its suffix; one that cannot
    be written is left as it was."""
    with contextlib.suppress(OSError):
        _made(path.parent)
        _write_atomically(path, pickle.dumps(entries, protocol=pickle.HIGHEST_PROTOCOL))
        _prune(path.parent, keep=path, suffix=path.suffix)


def open_for_run(settings: Settings, enabled: frozenset[str]) -> RunCache | None:
    """The cache of the settings' root for a run with these settings and rules (every field
    of the settings that can change a result is part of the key: all but where they live).
    None for a folder that is no project's root (no .git, pyproject.toml or configuration):
    a scan of loose files leaves nothing behind."""
    if not is_project_root(settings):
        return None
    configuration = {
        item.name: getattr(settings, item.name)
        for item in dataclasses.fields(settings)
        if item.name not in _SETTINGS_NOT_KEYED
    }
    return RunCache.open(settings.root, configuration, sorted(enabled))
