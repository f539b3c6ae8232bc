"""Which file of the project a launch line names (`torchrun train.py`, `CMD ["python",
"/app/train.py"]`), from the working directory of the process that runs it: a shell script's
or notebook's folder, then the project root (what real launchers mean), with the shell's own
`cd`/`pushd` applied (the shell engine's path; a GitLab job's items run in one shell, so an
item's `cd` moves the items after it); a CI step's checkout (its working-directory applied); a
container's image (a Kubernetes or compose container, a `docker run IMAGE` of a shell script),
through the COPY and ADD instructions of the project's Dockerfile that builds it; a path the
shell engine found below the launcher's own folder (`$SCRIPT_DIR/train.py`,
`cd "$(dirname "$0")"`) only there. Never by a file's name alone: a path found nowhere, or run
from a folder the launcher moved to without saying which, is not a file of this project, and
the resolver says why."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from xlamigrate.discover import folder_display
from xlamigrate.kinds import kind_by_name
from xlamigrate.kinds.launch import (
    BUILT,
    IMAGE,
    NAMED,
    OWN_FOLDER,
    REPOSITORY_ROOT,
    anchored,
    image_spec,
    split_function,
    unknown_folder,
)
from xlamigrate.project.disk import Disk

if TYPE_CHECKING:  # (the containers' modules load only where a container's launch is resolved)
    from xlamigrate.project.builds import Build
    from xlamigrate.project.dockerignore import DockerIgnore
    from xlamigrate.project.images import Built, Image

_WORKFLOWS = ".github/"  # a GitHub Actions workflow's checkout holds the folder of this name


@dataclass(frozen=True)
class Resolution:
    """A launch's script as a project file (`path`), or None and why (`why`: a clause said
    after "which is not a Python file of this project", "" where nothing more is known)."""

    path: str | None
    why: str = ""


@dataclass
class ScriptResolver:
    """Maps (launcher display path, script as written) to a project file's display path."""

    root: Path
    files: Collection[str]  # the display path of every Python file discovered
    dockerfiles: Sequence[str] = ()  # the project's Dockerfiles (display paths)
    builders: Sequence[str] = ()  # files that may build images (scripts, Makefiles, YAML)
    disk: Disk = field(default_factory=Disk)
    cache: dict[tuple[str, str], Resolution] = field(default_factory=dict)
    _images: dict[str, Image] = field(default_factory=dict)
    _ignores: dict[str, DockerIgnore | None] = field(default_factory=dict)
    _builds: dict[str, list[Build]] | None = None
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
        moved = unknown_folder(written)
        if moved is not None:
            return Resolution(None, moved)
        if not written.endswith(".py"):
            return Resolution(None)
        here = os.path.dirname(launcher)
        anchor, path = anchored(written.replace("\\", "/"))
        if "$" in path:  # (the image's name may be a variable: the path may not)
            return Resolution(None)
        if anchor == OWN_FOLDER:
            return self._beside(here, path)
        if anchor == REPOSITORY_ROOT:
            return self._in_checkout(launcher, path)
        if anchor == IMAGE:
            return self._in_image(launcher, path, image_spec(written))
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

    def _in_image(self, launcher: str, path: str, spec: str | None = None) -> Resolution:
        """A container's script: the file the image's Dockerfile copies to that path. The
        launcher's own image where it is a Dockerfile; the one its `build:` or its image's
        name says (a `docker build -t NAME` of the project, or `-t "$VAR"` in the script that
        runs `"$VAR"`); else the one file every Dockerfile of the project that copies one there
        agrees on, each read from the contexts the project's builds of it give."""
        from xlamigrate.project.images import images_mapping

        own = kind_by_name(posixpath.basename(launcher)) == "dockerfile"
        linked = True  # the image is known: the Dockerfile is the one that builds it
        if own:
            builds = self._built([launcher])
        elif spec is not None and spec.startswith(BUILT):
            context, _, dockerfile = spec[len(BUILT) :].partition(";")
            folder = _join(os.path.dirname(launcher), context)
            named = _join(folder, dockerfile)
            builds = self._built([named], folder)
            if not builds:
                return Resolution(None, f"its build names {named}, which is not in the project")
        else:
            name = (
                _image_name(spec[len(NAMED) :], launcher)
                if spec and spec.startswith(NAMED)
                else None
            )
            matched = self._image_builds().get(name, []) if name else []
            builds = [b for m in matched for b in self._built([m.dockerfile], m.context)]
            if not builds:
                builds, linked = self._every_image(), False
        mapping = images_mapping(path, builds, self._is_file, self._is_folder)
        found = mapping.found
        sources = set(found.values())
        if len(sources) == 1:
            return Resolution(sources.pop())
        if not sources and mapping.left_out:
            return Resolution(None, "; ".join(dict.fromkeys(mapping.left_out)))
        if linked and builds:
            image = builds[0].image
            where = image.absolute(path) or path
            which = "this Dockerfile" if own else f"{image.dockerfile}, which builds its image,"
            return Resolution(None, f"{which} copies no file of the project to {where}")
        if not sources:
            return Resolution(None, f"no Dockerfile of the project copies a file to {path}")
        which = ", ".join(sorted(found))
        return Resolution(
            None, f"the Dockerfiles {which} copy different files there: which image runs is unknown"
        )

    def _built(self, dockerfiles: Sequence[str], context: str | None = None) -> list[Built]:
        """The images of `dockerfiles`, built from `context` (None: the one each implies),
        less what the context's `.dockerignore` leaves out."""
        from xlamigrate.project.images import Built

        out = []
        for dockerfile in dockerfiles:
            image = self._image(dockerfile)
            if image is None:
                continue
            folder = (
                context if context is not None else image.context(self._is_file, self._is_folder)
            )
            out.append(Built(image, folder, self._ignore(folder, dockerfile)))
        return out

    def _every_image(self) -> list[Built]:
        """Every image the project may run: each Dockerfile from the contexts the project's
        builds of it give, or from the one its copies imply where no build of it is known."""
        contexts: dict[str, list[str]] = {}
        for builds in self._image_builds().values():
            for build in builds:
                contexts.setdefault(build.dockerfile, []).append(build.context)
        out = []
        for dockerfile in dict.fromkeys([*self.dockerfiles, *contexts]):
            known = contexts.get(dockerfile)
            if known is None:
                out += self._built([dockerfile])
            for context in dict.fromkeys(known or ()):
                out += self._built([dockerfile], context)
        return out

    def _ignore(self, context: str, dockerfile: str) -> DockerIgnore | None:
        """The ignore file of a build: the Dockerfile's own (`Dockerfile.dockerignore`, as
        BuildKit reads it), else the context's `.dockerignore`."""
        from xlamigrate.project.dockerignore import parse_dockerignore

        for path in (f"{dockerfile}.dockerignore", _join(context, ".dockerignore")):
            if path not in self._ignores:
                text = self.disk.read_text(path) if self.disk.is_file(path) else None
                self._ignores[path] = None if text is None else parse_dockerignore(text, path)
            if self._ignores[path] is not None:
                return self._ignores[path]
        return None

    def _image_builds(self) -> dict[str, list[Build]]:
        if self._builds is None:
            from xlamigrate.project.builds import image_builds

            self._builds = image_builds(self.builders, self.disk.read_text, self._is_file)
        return self._builds

    def _image(self, dockerfile: str) -> Image | None:
        if dockerfile not in self._images:
            text = self.disk.read_text(dockerfile)
            if text is None:
                return None
            from xlamigrate.project.images import image_of

            self._images[dockerfile] = image_of(dockerfile, text)
        return self._images[dockerfile]

    def _is_file(self, path: str) -> bool:
        return path in self.files or (not path.startswith("/") and self.disk.is_file(path))

    def _is_folder(self, path: str) -> bool:
        folder = posixpath.normpath(path.rstrip("/") or ".")
        if folder in self._folders():
            return True
        if folder not in self._disk_folders:
            self._disk_folders[folder] = not path.startswith("/") and self.disk.is_dir(folder)
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


def _image_name(named: str, launcher: str) -> str:
    """The key in the project's builds of an image a launch names: its name with its tag, or
    the launcher's own variable (`docker run "$IMAGE"` of a script that builds `-t "$IMAGE"`)."""
    from xlamigrate.project.builds import normal_name, variable_image

    if named.startswith("$"):
        return variable_image(named[1:], launcher)
    return normal_name(named)
