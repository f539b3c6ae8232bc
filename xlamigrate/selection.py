"""What a run is about: every file of the project, found from its root, which the launch graph is
built over; and among them the files named (or found under named folders), the only ones a run
reports on and edits. So a file gets the same findings whatever else is named with it."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from xlamigrate.config import Settings
from xlamigrate.discover import Discovery, SourceFile, discover
from xlamigrate.walkcache import project_files


@dataclass(frozen=True)
class Selection:
    project: Discovery  # every file below the root, and the named files its walk skips
    named: Discovery  # the files of `project` named, or found under named folders
    paths: tuple[str, ...]  # the named paths, absolute and resolved

    @property
    def displays(self) -> frozenset[str]:
        return frozenset(source.display for source in self.named.files)

    @property
    def whole(self) -> bool:
        """Whether every file of the project is selected."""
        return len(self.named.files) == len(self.project.files)

    def covers(self, path: Path) -> bool:
        """Whether a file is named, or lies under a named folder (a dependency list the rewrite
        may edit, say, which is no kind xlamigrate checks)."""
        real = os.path.realpath(path)
        return any(real == named or real.startswith(named + os.sep) for named in self.paths)


def named_files(
    paths: Sequence[Path],
    settings: Settings,
    use_cache: bool,
    found: Callable[[SourceFile], None] | None = None,
) -> Discovery:
    """The files of the named paths; where the root alone is named (`scan .` from it), its
    walk, kept in the cache with `use_cache` (walkcache.py), and `found` hears of each file it
    finds as it does."""
    if len(paths) == 1 and os.path.abspath(paths[0]) == os.path.abspath(settings.root):
        return project_files(settings, use_cache, found)
    return discover(paths, settings)


def select(
    paths: Sequence[Path],
    settings: Settings,
    named: Discovery | None = None,
    whole: bool = False,
    use_cache: bool = False,
) -> Selection:
    """The project below `settings.root`, and the named files in it (all of them when `whole`);
    with `use_cache`, the root's walk is kept in its cache folder (walkcache.py)."""
    named = named if named is not None else discover(paths, settings)
    root = os.path.realpath(settings.root)
    real_paths = tuple(os.path.realpath(path) for path in paths)
    if root in real_paths and not whole:  # the root named: its walk is the project's
        return Selection(named, named, real_paths)
    walked = project_files(settings, use_cache).files
    matched = None if whole else _matched(walked, named.files)
    if matched is not None:
        return Selection(replace_files(named, walked), replace_files(named, matched), real_paths)
    real = _RealPaths()
    by_real = _joined(walked, named.files, real)
    project = tuple(sorted(by_real.values(), key=lambda source: source.display))
    if whole:
        return Selection(replace_files(named, project), replace_files(named, project), (root,))
    chosen = [by_real[real(source.location)] for source in named.files]
    return Selection(replace_files(named, project), replace_files(named, chosen), real_paths)


def replace_files(discovery: Discovery, files: Sequence[SourceFile]) -> Discovery:
    """The discovery with these files (its missing, skipped and unlisted paths kept)."""
    return Discovery(tuple(files), discovery.missing, discovery.skipped, discovery.unlisted)


def _matched(walked: Sequence[SourceFile], named: Sequence[SourceFile]) -> list[SourceFile] | None:
    """The walk's files that are the named files, where each named file's real path is the
    path the walk found it by (as it is, but for a link, below a root that is real); None
    where some is not, and the real path of every file decides."""
    by_path = {source.location: source for source in walked}
    found = [by_path.get(os.path.realpath(source.location)) for source in named]
    return None if None in found else cast("list[SourceFile]", found)


def _joined(
    walked: Sequence[SourceFile], named: Sequence[SourceFile], real: _RealPaths
) -> dict[str, SourceFile]:
    """The walk's files and the named files it skipped, by their real paths (one per real
    file: a named file keeps the walk's display path, so the launch graph and the report name
    it alike)."""
    files = {real(source.location): source for source in walked}
    for source in named:
        files.setdefault(real(source.location), source)
    return files


class _RealPaths:
    """os.path.realpath of files, each folder resolved once: a project's thousands of files
    share some hundreds of folders, and realpath stats every part of every path."""

    def __init__(self) -> None:
        self._folders: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        folder, name = os.path.split(path)
        if not os.path.isabs(folder) or name in ("", ".", "..") or os.path.islink(path):
            return os.path.realpath(path)
        real = self._folders.get(folder)
        if real is None:
            real = self._folders[folder] = os.path.realpath(folder)
        return os.path.join(real, name)
