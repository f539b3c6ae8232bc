"""Walks the given paths to the files to check: skips VCS, virtualenv and build folders, honours
.gitignore files and the configured excludes, and classifies each file's kind."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from xlamigrate.config import Settings
from xlamigrate.kinds import kind_by_name, kind_by_shebang

if TYPE_CHECKING:
    import pathspec

    from xlamigrate.ignorepatterns import IgnorePatterns

# Folder names never walked into (explicitly named files inside them are still checked).
SKIPPED_DIRECTORIES = frozenset(
    {
        ".git", ".hg", ".svn", ".bzr", ".jj", ".venv", "venv", ".tox", ".nox", ".direnv",
        "node_modules", "site-packages", "dist-packages", "__pypackages__", "__pycache__",
        "build", "dist", "_build", "buck-out", ".eggs", ".mypy_cache", ".pytest_cache",
        ".ruff_cache", ".ipynb_checkpoints", ".pants.d", ".xlamigrate_cache",
    }
)  # fmt: skip


@dataclass(frozen=True)
class SourceFile:
    location: str  # where to read it (a walk's paths: absolute and normal)
    display: str  # how to report it: relative to the cwd when below it, with / separators
    kind: str  # a name in xlamigrate.kinds.KINDS

    @functools.cached_property
    def path(self) -> Path:
        """`location` as a Path, made when asked (a warm run's thousands of files are looked
        at by their strings alone: a Path costs some 20 us to make)."""
        return Path(self.location)


@dataclass(frozen=True)
class Discovery:
    files: tuple[SourceFile, ...]
    missing: tuple[str, ...] = ()  # named paths that do not exist
    skipped: tuple[str, ...] = field(default=())  # named files of a kind xlamigrate does not check
    # folders that could not be listed (display path, reason): their files went unchecked
    unlisted: tuple[tuple[str, str], ...] = ()


class Witness(Protocol):
    """Hears what a walk's result depends on (walkcache.py keeps a walk while none changed)."""

    def before(self, path: str) -> None:
        """A folder about to be listed or looked into, a file about to be read."""

    def listed(self, folder: str, names: Sequence[str]) -> None:
        """What the listing of a folder held."""


def discover(
    paths: Sequence[Path],
    settings: Settings,
    witness: Witness | None = None,
    found: Callable[[SourceFile], None] | None = None,
) -> Discovery:
    """The checkable files of the paths (`witness`: hears what the walks depend on; `found`:
    hears of each file as the walk finds it, before the walk goes on)."""
    excludes = _excludes(settings)
    cwd = os.getcwd()
    root = str(settings.exclude_base)
    files: list[SourceFile] = []
    missing: list[str] = []
    skipped: list[str] = []
    seen: set[str] = set()
    real_folders: dict[str, str] = {}
    unlisted: list[OSError] = []
    for given in paths:
        if not given.exists():
            missing.append(str(given))
            continue
        if given.is_dir():
            candidates: Iterator[_Found] = _walk(
                os.path.abspath(given), settings, excludes, unlisted.append, witness, real_folders
            )
        elif _excluded(os.path.abspath(given), root, excludes, is_dir=False):
            continue
        elif (kind := classify(given)) is None:
            skipped.append(str(given))
            continue
        else:
            candidates = iter([_Found(os.path.realpath(given), kind, is_link=False)])
        for candidate in candidates:
            # A link and its target are one file: rewriting it twice would clash.
            key = _identity(candidate, real_folders)
            if key in seen:
                continue
            seen.add(key)
            source = SourceFile(candidate.path, _display(candidate.path, cwd), candidate.kind)
            files.append(source)
            if found is not None:
                found(source)
    files.sort(key=lambda source: source.display)
    folders = sorted(
        (_display(os.path.abspath(error.filename), cwd), error.strerror or str(error))
        for error in unlisted
    )
    return Discovery(tuple(files), tuple(missing), tuple(skipped), tuple(folders))


def _identity(found: _Found, real_folders: dict[str, str]) -> str:
    """The file's real path: a file reached through a link, or through a linked folder (one
    that points to its own parent, say), is the file it points to. Folders are resolved once."""
    if found.is_link:
        return os.path.realpath(found.path)
    folder, name = os.path.split(found.path)
    if folder not in real_folders:
        real_folders[folder] = os.path.realpath(folder)
    return os.path.join(real_folders[folder], name)


def classify(path: Path) -> str | None:
    """A file's kind by its name; a file without a suffix by its shebang."""
    kind = kind_by_name(path.name)
    if kind is None and not path.suffix:
        kind = _kind_by_shebang(path)
    return kind


def classify_buffer(name: str, data: bytes) -> str | None:
    """A buffer's kind (an editor's, through --stdin-filename): by the name, else its shebang."""
    kind = kind_by_name(os.path.basename(name))
    if kind is None and not os.path.splitext(name)[1]:
        kind = kind_by_shebang(data[:200].split(b"\n", 1)[0])
    return kind


def _kind_by_shebang(path: Path) -> str | None:
    try:
        if not path.is_file():  # a FIFO would block the walk, a device never end
            return None
        with path.open("rb") as handle:
            first = handle.readline(200)
    except OSError:
        return None
    return kind_by_shebang(first)


def display_path(path: Path) -> str:
    return _display(os.path.abspath(path), os.getcwd())


def folder_display(folder: Path) -> str:
    """A folder's display path, as its files' paths start: "" for the cwd itself."""
    absolute, cwd = os.path.abspath(folder), os.getcwd()
    return "" if absolute == cwd else _display(absolute, cwd)


def _display(absolute: str, cwd: str) -> str:
    """Relative to the cwd when below it (as linters print paths), with / separators."""
    below = cwd + os.sep
    # (`absolute` is normal: what follows the cwd is the path relative to it)
    relative = absolute[len(below) :] if absolute.startswith(below) else absolute
    return relative.replace(os.sep, "/")


def _walk(
    top: str,
    settings: Settings,
    excludes: pathspec.GitIgnoreSpec | None,
    unlisted: Callable[[OSError], None],
    witness: Witness | None = None,
    real_folders: dict[str, str] | None = None,
) -> Iterator[_Found]:
    """The checkable files below `top`, in a stable order (as os.walk goes: a folder's files,
    then its folders, each in name order; links to folders are not followed, nor virtualenvs:
    a folder holding a pyvenv.cfg); a folder that cannot be listed (no permission) goes to
    `unlisted` instead of being skipped silently. `real_folders` gets each folder's real path
    (its parent's and its name: no link is followed below `top`)."""
    ignores = _GitIgnores(top, witness) if settings.respect_gitignore else None
    root = str(settings.exclude_base)
    reals = real_folders if real_folders is not None else {}
    reals.setdefault(top, os.path.realpath(top))
    pending = [top]
    while pending:
        directory = pending.pop()
        if witness is not None:
            witness.before(directory)
        try:
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError as error:
            unlisted(error)
            continue
        if witness is not None:
            witness.listed(directory, [entry.name for entry in entries])
        if directory != top and _is_virtualenv(entries):
            continue
        if ignores is not None:
            ignores.enter(directory)
        folders = []
        for entry in entries:
            if _is_dir(entry):
                folders.append(entry)
                continue
            found = _checkable(entry, root, excludes, ignores, witness)
            if found is not None:
                yield found
        below = []
        for entry in folders:
            child = entry.path
            if entry.name in SKIPPED_DIRECTORIES:
                continue
            if _excluded(child, root, excludes, is_dir=True):
                continue
            if ignores is not None and ignores.ignored(child, is_dir=True):
                continue
            if not entry.is_symlink():
                below.append(child)
                if directory in reals:
                    reals[child] = os.path.join(reals[directory], entry.name)
        pending.extend(reversed(below))


def _is_virtualenv(entries: list[os.DirEntry[str]]) -> bool:
    """Whether a folder's listing holds a pyvenv.cfg (a link to one that exists)."""
    return any(e.name == "pyvenv.cfg" and os.path.exists(e.path) for e in entries)


@dataclass(frozen=True)
class _Found:
    path: str  # absolute
    kind: str
    is_link: bool


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _checkable(
    entry: os.DirEntry[str],
    root: str,
    excludes: pathspec.GitIgnoreSpec | None,
    ignores: _GitIgnores | None,
    witness: Witness | None = None,
) -> _Found | None:
    """A listed file, with its kind, where xlamigrate checks it (not excluded, not ignored)."""
    name = entry.name
    kind = kind_by_name(name)
    if kind is None:
        if os.path.splitext(name)[1]:
            return None  # fast path: most files are skipped by their name alone
        if witness is not None:
            witness.before(entry.path)
        kind = _kind_by_shebang(Path(entry.path))
        if kind is None:
            return None
    child = entry.path
    if _excluded(child, root, excludes, is_dir=False):
        return None
    if ignores is not None and ignores.ignored(child, is_dir=False):
        return None
    try:
        is_link = entry.is_symlink()
    except OSError:
        is_link = os.path.islink(child)
    return _Found(child, kind, is_link)


def is_excluded(path: Path, settings: Settings) -> bool:
    """Whether the configured excludes cover this path (one named on the command line too)."""
    excludes = _excludes(settings)
    return _excluded(os.path.abspath(path), str(settings.exclude_base), excludes, is_dir=False)


def _excludes(settings: Settings) -> pathspec.GitIgnoreSpec | None:
    """The configured excludes (None: there are none, and pathspec is not loaded)."""
    if not settings.exclude:
        return None
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(settings.exclude)


def _excluded(
    absolute: str, root: str, excludes: pathspec.GitIgnoreSpec | None, is_dir: bool
) -> bool:
    if excludes is None or not excludes.patterns:
        return False
    relative = os.path.relpath(absolute, root) if absolute.startswith(root + os.sep) else absolute
    relative = relative.replace(os.sep, "/")
    return excludes.match_file(relative + "/" if is_dir else relative)


class _GitIgnores:
    """The .gitignore files in force while walking: those above the start up to the repository
    root, and those met on the way down. The deepest file with a matching pattern decides."""

    def __init__(self, top: str, witness: Witness | None = None) -> None:
        self.witness = witness
        self.specs: dict[str, IgnorePatterns] = {}  # absolute directory -> its patterns
        self.loaded: set[str] = set()
        self.chains: dict[str, list[str]] = {}  # a folder -> the folders whose rules apply there
        directory = os.path.abspath(top)
        while True:
            if witness is not None:
                witness.before(os.path.join(directory, ".git"))
            is_repository_root = os.path.exists(os.path.join(directory, ".git"))
            if is_repository_root:  # lower priority than .gitignore: loaded first
                self._load_file(directory, os.path.join(directory, ".git", "info", "exclude"))
            self.enter(directory)
            parent = os.path.dirname(directory)
            if is_repository_root or parent == directory:
                break
            directory = parent

    def enter(self, directory: str) -> None:
        if directory not in self.loaded:
            self.loaded.add(directory)
            self._load_file(directory, os.path.join(directory, ".gitignore"))
            self.chains.pop(directory, None)  # (its own rules, if any, now apply too)

    def _load_file(self, directory: str, file: str) -> None:
        if self.witness is not None:
            self.witness.before(file)
        try:
            with open(file, encoding="utf-8", errors="replace") as handle:
                lines = handle.read().splitlines()
        except OSError:
            return
        if not any(line.strip() and not line.startswith("#") for line in lines):
            return  # (no pattern: .git/info/exclude as git writes it, an empty .gitignore)
        from xlamigrate.ignorepatterns import IgnorePatterns  # (a kept walk reads none)

        previous = self.specs.get(directory)
        self.specs[directory] = IgnorePatterns((previous.lines if previous else []) + lines)

    def ignored(self, absolute: str, is_dir: bool) -> bool:
        if not self.specs:
            return False
        for directory in self._in_force(os.path.dirname(absolute)):
            patterns = self.specs[directory]
            relative = absolute[len(directory) :].lstrip(os.sep).replace(os.sep, "/")
            relative = relative + "/" if is_dir else relative
            if patterns.may_match(relative):
                ignored = patterns.ignored(relative)
                if ignored is not None:
                    return ignored
        return False

    def _in_force(self, directory: str) -> list[str]:
        """The folders from `directory` up whose .gitignore files apply, deepest first (asked
        once per folder: the walk enters a folder before listing what is in it)."""
        chain = self.chains.get(directory)
        if chain is None:
            chain = []
            current = directory
            while True:
                if current in self.specs:
                    chain.append(current)
                parent = os.path.dirname(current)
                if parent == current:
                    break
                current = parent
            self.chains[directory] = chain
        return chain
