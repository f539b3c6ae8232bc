"""Which file of the project a launch line names (`torchrun train.py`, `CMD ["python",
"/app/train.py"]`): relative to the launcher's folder, to the project root, or as the one
project file whose path ends with what is written; a path the shell engine found below the
launcher's own folder (`$SCRIPT_DIR/train.py`) only there."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from xlamigrate.kinds.launch import OWN_FOLDER, split_function


@dataclass
class ScriptResolver:
    """Maps (launcher display path, script as written) to a project file's display path."""

    root: Path
    files: dict[str, Path]  # display path -> where it is, for every Python file discovered
    cache: dict[tuple[str, str], str | None] = field(default_factory=dict)

    def __call__(self, launcher: str, written: str) -> str | None:
        written, _ = split_function(written)  # (a function's launch: its file)
        key = (os.path.dirname(launcher), written)
        if key not in self.cache:
            self.cache[key] = self._resolve(launcher, written)
        return self.cache[key]

    def _resolve(self, launcher: str, written: str) -> str | None:
        if not written.endswith(".py") or "$" in written:
            return None
        here = os.path.dirname(launcher)
        if written.startswith(OWN_FOLDER + "/"):
            return self._beside(here, written[len(OWN_FOLDER) + 1 :])
        relative = posixpath.normpath(written.replace("\\", "/"))
        for base in (here, ""):
            candidate = posixpath.normpath(posixpath.join(base, relative)) if base else relative
            if candidate in self.files:
                return candidate
            on_disk = Path(candidate)
            if not written.startswith("/") and on_disk.is_file():
                return candidate  # beside the launcher though not among the paths given
        return one_ending_with(self.files, relative.lstrip("/"))

    def _beside(self, here: str, relative: str) -> str | None:
        """The file at `relative` from the launcher's folder `here`, and nowhere else."""
        candidate = posixpath.normpath(posixpath.join(here, relative) if here else relative)
        if candidate in self.files or Path(candidate).is_file():
            return candidate
        return None


def one_ending_with(files: Iterable[str], tail: str) -> str | None:
    """The one file whose path ends with `tail` (a container path `/app/src/train.py`, trimmed
    folder by folder from the left), or None when none or several do."""
    parts = tail.split("/")
    for start in range(len(parts)):
        suffix = "/".join(parts[start:])
        matches = [f for f in files if f == suffix or f.endswith("/" + suffix)]
        if len(matches) == 1:
            return matches[0]
        if matches:
            return None
    return None
