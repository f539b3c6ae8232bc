"""Which file of the project a launch line names (`torchrun train.py`, `CMD ["python",
"/app/train.py"]`), from the working directory of the process that runs it: a shell script's
or notebook's folder, then the project root (what real launchers mean); a CI step's checkout
(its working-directory applied); a container's image, through the COPY and ADD instructions of
the project's Dockerfile that builds it; a path the shell engine found below the launcher's own
folder (`$SCRIPT_DIR/train.py`) only there. Never by a file's name alone: a path found nowhere
is not a file of this project, and the resolver says why."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from xlamigrate.discover import folder_display
from xlamigrate.kinds import kind_by_name
from xlamigrate.kinds.launch import IMAGE, OWN_FOLDER, REPOSITORY_ROOT, anchored, split_function
from xlamigrate.project.images import Image, image_of, images_mapping

_WORKFLOWS = ".github/"  # a GitHub Actions workflow's checkout holds the folder of this name


@dataclass(frozen=True)
class Resolution:
    """A launch's script as a project file (`path`), or None and why (`why`: a clause said
    after "which is not a Python file of this project", "" where nothing more is known)."""

    path: str | None
    why: str = ""


def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


@dataclass
class ScriptResolver:
    """Maps (launcher display path, script as written) to a project file's display path."""

    root: Path
    files: dict[str, Path]  # display path -> where it is, for every Python file discovered
    dockerfiles: Sequence[str] = ()  # the project's Dockerfiles (display paths)
    read: Callable[[str], str | None] = _read_text
    cache: dict[tuple[str, str], Resolution] = field(default_factory=dict)
    _images: dict[str, Image] = field(default_factory=dict)
    _file_folders: frozenset[str] | None = None
    _disk_folders: dict[str, bool] = field(default_factory=dict)

    def __call__(self, launcher: str, written: str) -> str | None:
        return self.resolution(launcher, written).path

    def unresolved(self, launcher: str, written: str) -> str:
        """Why the launch's script is not a file of this project ("" when nothing is known)."""
        return self.resolution(launcher, written).why

    def resolution(self, launcher: str, written: str) -> Resolution:
        written, _ = split_function(written)  # (a function's launch: its file)
        key = (launcher, written)
        if key not in self.cache:
            self.cache[key] = self._resolve(launcher, written)
        return self.cache[key]

    def _resolve(self, launcher: str, written: str) -> Resolution:
        if not written.endswith(".py") or "$" in written:
            return Resolution(None)
        here = os.path.dirname(launcher)
        anchor, path = anchored(written.replace("\\", "/"))
        if anchor == OWN_FOLDER:
            return self._beside(here, path)
        if anchor == REPOSITORY_ROOT:
            return self._in_checkout(launcher, path)
        if anchor == IMAGE:
            return self._in_image(launcher, path)
        if path.startswith("/"):
            return Resolution(None, "an absolute path outside the project")
        relative = posixpath.normpath(path)
        for base in dict.fromkeys((here, folder_display(self.root))):
            candidate = _join(base, relative)
            if self._is_file(candidate):
                return Resolution(candidate)
        where = f"{here}/ nor the project root" if here else "the project root"
        return Resolution(None, f"neither {where} holds {relative}")

    def _beside(self, here: str, relative: str) -> Resolution:
        """The file at `relative` from the launcher's folder `here`, and nowhere else."""
        candidate = _join(here, relative)
        if self._is_file(candidate):
            return Resolution(candidate)
        return Resolution(None, f"the launcher's folder holds no {relative}")

    def _in_checkout(self, launcher: str, path: str) -> Resolution:
        """A CI step's script, from the checkout (the folder holding `.github/`)."""
        checkout = launcher.rpartition(_WORKFLOWS)[0].rstrip("/") if _WORKFLOWS in launcher else ""
        candidate = _join(checkout, path)
        if self._is_file(candidate):
            return Resolution(candidate)
        folder = posixpath.dirname(path)
        where = f"{folder}/ of the repository" if folder else "the repository root"
        name = posixpath.basename(path)
        return Resolution(None, f"the step runs it from {where}, which holds no {name}")

    def _in_image(self, launcher: str, path: str) -> Resolution:
        """A container's script: the file the image's Dockerfile copies to that path. The
        launcher's own image where it is a Dockerfile; else the one file every project
        Dockerfile that copies one there agrees on."""
        own = kind_by_name(posixpath.basename(launcher)) == "dockerfile"
        names = [launcher] if own else list(self.dockerfiles)
        images = [image for name in names if (image := self._image(name)) is not None]
        found = images_mapping(path, images, self._is_file, self._is_folder)
        sources = set(found.values())
        if len(sources) == 1:
            return Resolution(sources.pop())
        if own:
            where = (images[0].absolute(path) if images else None) or path
            return Resolution(None, f"this Dockerfile copies no file of the project to {where}")
        if not sources:
            return Resolution(None, f"no Dockerfile of the project copies a file to {path}")
        which = ", ".join(sorted(found))
        return Resolution(
            None, f"the Dockerfiles {which} copy different files there: which image runs is unknown"
        )

    def _image(self, dockerfile: str) -> Image | None:
        if dockerfile not in self._images:
            text = self.read(dockerfile)
            if text is None:
                return None
            self._images[dockerfile] = image_of(dockerfile, text)
        return self._images[dockerfile]

    def _is_file(self, path: str) -> bool:
        return path in self.files or (not path.startswith("/") and Path(path).is_file())

    def _is_folder(self, path: str) -> bool:
        folder = posixpath.normpath(path.rstrip("/") or ".")
        if folder in self._folders():
            return True
        if folder not in self._disk_folders:
            self._disk_folders[folder] = not path.startswith("/") and Path(folder).is_dir()
        return self._disk_folders[folder]

    def _folders(self) -> frozenset[str]:
        """Every folder holding a project file, at any depth (computed once: a lookup per
        call, where a scan of every file per call made a large tree quadratic)."""
        if self._file_folders is None:
            folders = {"."}
            for display in self.files:
                folder = posixpath.dirname(display)
                while folder and folder not in folders:
                    folders.add(folder)
                    folder = posixpath.dirname(folder)
            self._file_folders = frozenset(folders)
        return self._file_folders


def _join(base: str, path: str) -> str:
    return posixpath.normpath(posixpath.join(base, path)) if base else posixpath.normpath(path)
