"""Walks the given paths to the files to check: skips VCS, virtualenv and build folders, honours
.gitignore files and the configured excludes, and classifies each file's kind."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pathspec

from xlamigrate.config import Settings

FileKind = Literal["python"]

# Folder names never walked into (explicitly named files inside them are still checked).
SKIPPED_DIRECTORIES = frozenset(
    {
        ".git", ".hg", ".svn", ".bzr", ".jj", ".venv", "venv", ".tox", ".nox", ".direnv",
        "node_modules", "site-packages", "dist-packages", "__pypackages__", "__pycache__",
        "build", "dist", "_build", "buck-out", ".eggs", ".mypy_cache", ".pytest_cache",
        ".ruff_cache", ".ipynb_checkpoints", ".pants.d",
    }
)  # fmt: skip
_SUFFIX_KINDS: dict[str, FileKind] = {".py": "python"}


@dataclass(frozen=True)
class SourceFile:
    path: Path  # where to read it
    display: str  # how to report it: relative to the cwd when below it, with / separators
    kind: FileKind


@dataclass(frozen=True)
class Discovery:
    files: tuple[SourceFile, ...]
    missing: tuple[str, ...] = ()  # named paths that do not exist
    skipped: tuple[str, ...] = field(default=())  # named files of a kind xlamigrate does not check


def discover(paths: Sequence[Path], settings: Settings) -> Discovery:
    excludes = pathspec.GitIgnoreSpec.from_lines(settings.exclude)
    files: list[SourceFile] = []
    missing: list[str] = []
    skipped: list[str] = []
    seen: set[Path] = set()
    for given in paths:
        if not given.exists():
            missing.append(str(given))
            continue
        if given.is_dir():
            candidates: Iterator[Path] = _walk(given, settings, excludes)
        elif _excluded(given, settings.root, excludes, is_dir=False):
            continue
        else:
            if classify(given, explicit=True) is None:
                skipped.append(str(given))
                continue
            candidates = iter([given])
        for path in candidates:
            key = path.resolve()
            kind = classify(path, explicit=path is given)
            if key in seen or kind is None:
                continue
            seen.add(key)
            files.append(SourceFile(path, display_path(path), kind))
    files.sort(key=lambda source: source.display)
    return Discovery(tuple(files), tuple(missing), tuple(skipped))


def classify(path: Path, explicit: bool = False) -> FileKind | None:
    """The kind of a file by its suffix; a named file without one may be Python by its shebang."""
    kind = _SUFFIX_KINDS.get(path.suffix)
    if kind is None and explicit and not path.suffix:
        try:
            with path.open("rb") as handle:
                first = handle.readline(200)
        except OSError:
            return None
        if first.startswith(b"#!") and b"python" in first:
            return "python"
    return kind


def display_path(path: Path) -> str:
    absolute = Path(os.path.abspath(path))
    try:
        return absolute.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return absolute.as_posix()


def _walk(top: Path, settings: Settings, excludes: pathspec.PathSpec) -> Iterator[Path]:
    ignores = _GitIgnores(top) if settings.respect_gitignore else None
    for directory, dirnames, filenames in os.walk(top):
        current = Path(directory)
        if ignores is not None:
            ignores.enter(current)
        kept = []
        for name in sorted(dirnames):
            child = current / name
            if name in SKIPPED_DIRECTORIES or (child / "pyvenv.cfg").exists():
                continue
            if _excluded(child, settings.root, excludes, is_dir=True):
                continue
            if ignores is not None and ignores.ignored(child, is_dir=True):
                continue
            kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            child = current / name
            if _SUFFIX_KINDS.get(child.suffix) is None:
                continue
            if _excluded(child, settings.root, excludes, is_dir=False):
                continue
            if ignores is not None and ignores.ignored(child, is_dir=False):
                continue
            yield child


def _excluded(path: Path, root: Path, excludes: pathspec.PathSpec, is_dir: bool) -> bool:
    if not excludes.patterns:
        return False
    try:
        relative = Path(os.path.abspath(path)).relative_to(root).as_posix()
    except ValueError:
        relative = path.as_posix()
    return excludes.match_file(relative + "/" if is_dir else relative)


class _GitIgnores:
    """The .gitignore files in force while walking: those above the start up to the repository
    root, and those met on the way down. The deepest file with a matching pattern decides."""

    def __init__(self, top: Path) -> None:
        self.specs: dict[Path, pathspec.PathSpec] = {}
        self.loaded: set[Path] = set()
        top = Path(os.path.abspath(top))
        for directory in (top, *top.parents):
            is_repository_root = (directory / ".git").exists()
            if is_repository_root:  # lower priority than .gitignore: loaded first
                self._load_file(directory, directory / ".git" / "info" / "exclude")
            self._load(directory)
            if is_repository_root:
                break

    def enter(self, directory: Path) -> None:
        self._load(Path(os.path.abspath(directory)))

    def _load(self, directory: Path) -> None:
        if directory not in self.loaded:
            self.loaded.add(directory)
            self._load_file(directory, directory / ".gitignore")

    def _load_file(self, directory: Path, file: Path) -> None:
        try:
            lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return
        spec = pathspec.GitIgnoreSpec.from_lines(lines)
        previous = self.specs.get(directory)
        if previous is not None:
            spec = pathspec.GitIgnoreSpec(list(previous.patterns) + list(spec.patterns))
        self.specs[directory] = spec

    def ignored(self, path: Path, is_dir: bool) -> bool:
        absolute = Path(os.path.abspath(path))
        for directory in absolute.parents:
            spec = self.specs.get(directory)
            if spec is None:
                continue
            relative = absolute.relative_to(directory).as_posix() + ("/" if is_dir else "")
            result = spec.check_file(relative)
            if result.include is not None:
                return bool(result.include)
        return False
