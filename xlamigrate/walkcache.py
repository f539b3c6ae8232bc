"""The walk of a project's root, kept in its cache folder while nothing it depends on changed:
a pre-commit run names a few files, but the launch graph is built over the whole root, and
walking a large tree (its folders, each .gitignore's patterns compiled) cost a warm run more
than everything else it did.

What a walk depends on is what it looked at: the folders it listed (a folder's mtime changes
when an entry is added, removed or renamed in it: a pyvenv.cfg that makes it a virtualenv too),
the files it read (each .gitignore, .git/info/exclude, the first line of a file without a
suffix), and where a `.git` stands. A file's content does not change the walk, so editing
files keeps it. A path changed within 2 s of the walk (its mtime may not tell a second change
within the same tick) is compared by what it holds instead: a folder by its listing, a file by
a hash of its bytes (read before the walk reads it, so a change in between is a miss).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from xlamigrate.cache import (
    _RACY_NS,
    content_digest,
    is_project_root,
    read_side_file,
    side_file,
    write_side_file,
)
from xlamigrate.config import Settings
from xlamigrate.discover import Discovery, SourceFile, discover

_SUFFIX = ".walk"
# A path's state, as the walk saw it: ("d", mtime_ns) a folder, ("f", size, mtime_ns) a file,
# ("git", exists) a repository's marker, None nothing there.
_State = tuple[Any, ...] | None


def project_files(
    settings: Settings, use_cache: bool, found: Callable[[SourceFile], None] | None = None
) -> Discovery:
    """`discover([settings.root], settings)`: from the cache where nothing the walk depends on
    changed since a run made it (with `use_cache`, at a project's root). `found` hears of each
    file a walk finds (a walk kept in the cache: none)."""
    root = Path(settings.root)
    path = _cache_path(settings) if use_cache and is_project_root(settings) else None
    if path is None:
        return discover([root], settings, found=found)
    kept = _still_valid(read_side_file(path))
    if kept is not None:
        return kept
    recorder = _Recorder(time.time_ns())
    discovery = discover([root], settings, recorder, found=found)
    entries = recorder.entries(discovery)
    if entries is not None:
        write_side_file(path, entries)
    return discovery


def _cache_path(settings: Settings) -> Path | None:
    configuration = (
        os.getcwd(),  # (display paths are relative to it)
        os.path.abspath(settings.root),
        settings.exclude,
        os.path.abspath(settings.exclude_base),
        settings.respect_gitignore,
    )
    return side_file(Path(settings.root), _SUFFIX, configuration)


def _state(path: str) -> _State:
    if os.path.basename(path) == ".git":  # (its mtime changes with every commit)
        return ("git", os.path.lexists(path))
    try:
        status = os.stat(path)
    except OSError:
        return None
    if stat.S_ISDIR(status.st_mode):
        return ("d", status.st_mtime_ns)
    return ("f", status.st_size, status.st_mtime_ns)


def _state_kind(state: _State) -> object:
    return None if state is None else state[0]


def _listing(folder: str) -> tuple[str, ...] | None:
    try:
        with os.scandir(folder) as entries:
            return tuple(sorted(entry.name for entry in entries))
    except OSError:
        return None


def _digest(file: str) -> str | None:
    try:
        with open(file, "rb") as stream:
            return content_digest(stream.read())
    except OSError:
        return None


def _racy(state: _State, started_ns: int) -> bool:
    return state is not None and state[0] != "git" and state[-1] >= started_ns - _RACY_NS


class _Recorder:
    """Hears a walk (discover.Witness): the state of each path before the walk looked at it
    (a change after that shows as a newer mtime next time), and each folder's listing."""

    def __init__(self, started_ns: int) -> None:
        self.started_ns = started_ns
        self.states: dict[str, _State] = {}
        self.listings: dict[str, tuple[str, ...]] = {}
        self.digests: dict[str, str | None] = {}  # a file changed just before: its bytes' hash

    def before(self, path: str) -> None:
        if path not in self.states:
            state = self.states[path] = _state(path)
            if state is not None and state[0] == "f" and _racy(state, self.started_ns):
                self.digests[path] = _digest(path)

    def listed(self, folder: str, names: Sequence[str]) -> None:
        self.listings[folder] = tuple(names)

    def entries(self, discovery: Discovery) -> dict[str, Any] | None:
        """What to keep (None: the walk cannot be kept: a folder it could not list, a file
        changed within the racy window)."""
        if discovery.unlisted or discovery.missing or discovery.skipped:
            return None
        racy: dict[str, object] = {}  # a folder's listing, a file's hash: compared instead
        for path, state in self.states.items():
            if not _racy(state, self.started_ns):
                continue
            if path in self.digests and self.digests[path] is not None:
                racy[path] = ("f", self.digests[path])
            elif path in self.listings:
                racy[path] = ("d", tuple(sorted(self.listings[path])))
            else:
                return None
        states = {  # (a path found missing in a folder kept: the folder's mtime tells)
            path: state
            for path, state in self.states.items()
            if state is not None or _state_kind(self.states.get(os.path.dirname(path))) != "d"
        }
        return {
            "files": [(f.location, f.display, f.kind) for f in discovery.files],
            "states": states,
            "racy": racy,
        }


def _still_valid(entries: dict[str, Any]) -> Discovery | None:
    """The kept walk's discovery, where every path it looked at is as it was; else None."""
    try:
        states: dict[str, _State] = entries["states"]
        racy: dict[str, tuple[str, Any]] = entries["racy"]
        files = tuple(SourceFile(p, display, kind) for p, display, kind in entries["files"])
        for path, state in states.items():
            if path in racy:
                kind, held = racy[path]
                if (_listing(path) if kind == "d" else _digest(path)) != held:
                    return None
            elif _state(path) != state:
                return None
    except (KeyError, TypeError, ValueError, AttributeError):  # (not what a walk kept)
        return None
    return Discovery(files)
