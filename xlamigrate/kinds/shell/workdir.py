"""The folder a shell is in at each of its commands, as `cd`, `pushd` and `popd` move it: from
the folder it started in, to an absolute path or one below the launcher's own folder
(`cd "$(dirname "$0")"`), so that `cd src && python train.py` launches src/train.py. A move to
a folder not known statically leaves the folder unknown, and says which move it was."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

from xlamigrate.kinds.launch import OWN_FOLDER, in_unknown_folder

_CD_OPTIONS = frozenset({"-L", "-P", "-e", "-@", "-LP", "-PL", "-Pe"})
MOVERS = frozenset({"cd", "pushd", "popd"})


@dataclass(frozen=True)
class Folder:
    """Where the shell is: `path` from the folder it started in (".": there), absolute, or
    below the launcher's own (`OWN_FOLDER/..`); or not known (`why` says which move)."""

    path: str = "."
    why: str | None = None

    def placed(self, script: str) -> str:
        """A script the shell runs here, as the path from where the shell started."""
        if script.startswith(("/", "<")):
            return script
        if self.why is not None:
            return in_unknown_folder(self.why, script)
        if self.path == ".":
            return script  # (as written where the shell has not moved: `./train.py`)
        return _join(self.path, script)

    def to(self, target: str) -> Folder:
        """The folder after moving to `target` (a known path) from here."""
        if target.startswith(("/", OWN_FOLDER)):
            return Folder(_join(target, "."))
        return self if self.why is not None else Folder(_join(self.path, target))


START = Folder()


@dataclass(frozen=True)
class WorkingDirectory:
    """The shell's folder, its `pushd` stack and the folder `cd -` goes back to."""

    folder: Folder = START
    stack: tuple[Folder, ...] = ()
    previous: Folder | None = None

    def after(self, words: Sequence[str | None], spelled: str) -> WorkingDirectory:
        """The state after the command of `words` (values, None where not known statically),
        the mover first; `spelled` names the command in a reason."""
        name, arguments = words[0], list(words[1:])
        if name == "popd":
            if arguments or not self.stack:
                return self._unknown(f"{spelled} returns to a folder not known here")
            return WorkingDirectory(self.stack[0], self.stack[1:], self.folder)
        if name == "pushd" and not arguments:
            if not self.stack:
                return self._unknown(f"{spelled} returns to a folder not known here")
            return WorkingDirectory(self.stack[0], (self.folder, *self.stack[1:]), self.folder)
        operands = _operands(arguments)
        if name == "pushd" and operands is not None and any(o == "-n" for o in arguments):
            return self  # -n: the stack changes, not the folder
        if operands is None or len(operands) > 1 or (name == "pushd" and not operands):
            return self._unknown(f"{spelled} moves to a folder not known here")
        if not operands:
            return self._unknown(f"{spelled} moves to the home folder, not known here")
        (target,) = operands
        if target is None:
            return self._unknown(f"{spelled} moves to a folder not known here")
        if target == "-" and name == "cd":
            if self.previous is None:
                return self._unknown(f"{spelled} returns to a folder not known here")
            return WorkingDirectory(self.previous, self.stack, self.folder)
        if target.startswith(("~", "+", "-")):
            return self._unknown(f"{spelled} moves to a folder not known here")
        stack = (self.folder, *self.stack) if name == "pushd" else self.stack
        return WorkingDirectory(self.folder.to(target), stack, self.folder)

    def unknown(self, why: str) -> WorkingDirectory:
        """This state with its folder no longer known (`why`)."""
        return self if self.folder.why is not None else self._unknown(why)

    def _unknown(self, why: str) -> WorkingDirectory:
        return WorkingDirectory(Folder(why=why), self.stack, self.folder)


START_DIRECTORY = WorkingDirectory()  # where a script starts: the folder it was started in


def _operands(arguments: Sequence[str | None]) -> list[str | None] | None:
    """The operands of `cd`/`pushd` after their options (None: an option not known)."""
    operands: list[str | None] = []
    options = True
    for word in arguments:
        if options and word == "--":
            options = False
        elif options and word is not None and word.startswith("-") and word != "-":
            if word not in _CD_OPTIONS and word != "-n":
                return None
        else:
            operands.append(word)
            options = False
    return operands


def _join(base: str, path: str) -> str:
    """`path` from `base`, normalised; below the launcher's folder it stays so spelled."""
    if base.startswith(OWN_FOLDER):
        inside = posixpath.normpath(posixpath.join(base[len(OWN_FOLDER) :].lstrip("/"), path))
        return OWN_FOLDER if inside == "." else f"{OWN_FOLDER}/{inside}"
    return posixpath.normpath(posixpath.join(base, path))
