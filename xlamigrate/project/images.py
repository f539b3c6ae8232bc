"""What a project's Dockerfile puts in its image, as far as launches need it: the image's working
directory and, for a path of the image (`/app/train.py`), the file of the build context its
COPY or ADD instructions copied there. Read with the Dockerfile kind's own parser."""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xlamigrate.kinds.dockerfile.execform import exec_words
from xlamigrate.kinds.dockerfile.image import moved
from xlamigrate.kinds.dockerfile.parse import (
    Instruction,
    docker_value,
    docker_words,
    from_stage,
    parse,
)
from xlamigrate.project.dockerignore import DockerIgnore

_GLOB = frozenset("*?[")

Exists = Callable[[str], bool]  # a display path -> whether it is a file (or a folder)


@dataclass(frozen=True)
class Copy:
    """One COPY or ADD from the build context: its sources as written (relative to the
    context) and the image path they go to (the WORKDIR of its place applied)."""

    sources: tuple[str, ...]
    destination: str
    into_folder: bool  # the destination is a folder: each source's file goes inside it


@dataclass(frozen=True)
class Image:
    """The final image of one Dockerfile (its last stage, with the stages it is built FROM)."""

    dockerfile: str  # display path
    workdir: str | None  # None: set from a variable (not known here)
    copies: tuple[Copy, ...]

    def absolute(self, path: str) -> str | None:
        """An image path, a relative one taken from the image's WORKDIR (None: not known)."""
        if path.startswith("/"):
            return posixpath.normpath(path)
        if self.workdir is None:
            return None
        return posixpath.normpath(posixpath.join(self.workdir, path))

    def lookup(
        self,
        path: str,
        is_file: Exists,
        is_folder: Exists,
        context: str | None = None,
        ignore: DockerIgnore | None = None,
    ) -> tuple[str | None, str | None]:
        """(The project file, by display path, the image's absolute `path` holds: the last COPY
        that puts a file of the build `context` there, not left out by its `ignore` file; a
        file a COPY would put there that the ignore file leaves out of the context, where that
        is all there is.) Without a context, the Dockerfile's folder, or the nearest folder
        above it that holds every source its copies name."""
        context = self.context(is_file, is_folder) if context is None else context
        left_out = None
        for copy in reversed(self.copies):
            for source in copy.sources:
                found = _copied_to(path, source, copy, context, is_file, is_folder)
                if found is None:
                    continue
                inside = posixpath.relpath(found, context or ".")
                if ignore is not None and ignore.ignores(inside):
                    left_out = left_out or found
                    continue
                return found, None
        return None, left_out

    def context(self, is_file: Exists, is_folder: Exists) -> str:
        here = posixpath.dirname(self.dockerfile)
        named = [s for c in self.copies for s in c.sources if not _GLOB & set(s) and s != "."]
        folder = here
        while named:
            if all(is_file(_join(folder, s)) or is_folder(_join(folder, s)) for s in named):
                return folder
            parent = posixpath.dirname(folder)
            if not folder or folder.startswith("..") or parent == folder:  # ("/": the top)
                break
            folder = parent
        return here


def image_of(dockerfile: str, text: str) -> Image:
    """The final image `text` (the Dockerfile at display path `dockerfile`) builds."""
    instructions = parse(text).instructions
    stages: list[tuple[int | None, list[Instruction]]] = []
    names: list[str] = []
    for instruction in instructions:
        if instruction.onbuild:
            continue
        if instruction.keyword == "FROM":
            image, name = from_stage(instruction)
            stages.append((names.index(image) if image in names else None, []))
            names.append(name)
        elif stages and instruction.keyword in ("WORKDIR", "COPY", "ADD"):
            stages[-1][1].append(instruction)
    chain: list[Instruction] = []
    stage: int | None = len(stages) - 1 if stages else None
    while stage is not None:
        stage, own = stages[stage]
        chain[:0] = own
    workdir: str | None = "/"
    copies: list[Copy] = []
    for instruction in chain:
        if instruction.keyword == "WORKDIR":
            workdir = moved(workdir, instruction.args.text.strip())
            continue
        copy = _copy(instruction, workdir)
        if copy is not None:
            copies.append(copy)
    return Image(dockerfile, workdir, tuple(copies))


def _copy(instruction: Instruction, workdir: str | None) -> Copy | None:
    """A COPY or ADD of files of the build context (not `--from` a stage or an image, not a
    URL), its paths all written out."""
    words = _words(instruction)
    if words is None:
        return None
    options = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    if any(o.startswith("--from") for o in options) or len(paths) < 2:
        return None
    *sources, destination = paths
    if any("$" in p or "://" in p for p in paths):
        return None
    folder = destination.endswith("/") or destination in (".", "./") or destination.endswith("/.")
    target = moved(workdir, destination)
    if target is None:
        return None
    into = folder or len(sources) > 1 or any(_GLOB & set(s) for s in sources)
    cleaned = tuple(posixpath.normpath(s.lstrip("/")) or "." for s in sources)
    return Copy(cleaned, target, into)


def _words(instruction: Instruction) -> list[str] | None:
    if instruction.heredocs:
        return None
    exec_form = exec_words(instruction.args)
    if exec_form is not None:
        return [word.text for word in exec_form]
    text = instruction.args.text
    values = [docker_value(text[start:end], "\\") for start, end in docker_words(text, "\\")]
    return None if any(v is None for v in values) else [v for v in values if v is not None]


def _copied_to(
    path: str, source: str, copy: Copy, context: str, is_file: Exists, is_folder: Exists
) -> str | None:
    """The context file that `copy` puts at `path` from `source`, if it does."""
    written = _join(context, source)
    if source == "." or (not _GLOB & set(source) and is_folder(written)):
        if not path.startswith(copy.destination.rstrip("/") + "/"):
            return None
        inside = path[len(copy.destination.rstrip("/")) + 1 :]
        candidate = _join(written, inside)
        return candidate if is_file(candidate) else None
    name = posixpath.basename(path)
    if posixpath.dirname(path) == copy.destination and fnmatch.fnmatchcase(
        name, posixpath.basename(source)
    ):
        candidate = _join(posixpath.dirname(written), name)
        if is_file(candidate):
            return candidate
    if not copy.into_folder and path == copy.destination and is_file(written):
        return written
    return None


def _join(folder: str, path: str) -> str:
    return posixpath.normpath(posixpath.join(folder, path)) if folder else posixpath.normpath(path)


@dataclass(frozen=True)
class Built:
    """An image as a build makes it: its Dockerfile's, from a build context (None: the one
    its copies imply), less what that context's ignore file leaves out."""

    image: Image
    context: str | None = None
    ignore: DockerIgnore | None = None


@dataclass(frozen=True)
class Mapping:
    """Per image (its Dockerfile) that holds a project file at an image path: that file; and
    the files a COPY would have put there that an ignore file leaves out."""

    found: dict[str, str]
    left_out: tuple[str, ...] = ()  # why each was left out


def images_mapping(
    path: str, builds: Sequence[Built], is_file: Exists, is_folder: Exists
) -> Mapping:
    """Per image that holds a project file at the image path `path` (absolute, or relative to
    each image's WORKDIR): that file."""
    found: dict[str, str] = {}
    left_out = []
    for build in builds:
        image = build.image
        absolute = image.absolute(path)
        if absolute is None:
            continue
        source, ignored = image.lookup(absolute, is_file, is_folder, build.context, build.ignore)
        if source is not None:
            key = image.dockerfile  # (one Dockerfile built from two contexts: both are kept)
            if found.get(key, source) != source:
                key = f"{image.dockerfile} built from {build.context or '.'}"
            found[key] = source
        elif ignored is not None and build.ignore is not None:
            left_out.append(f"{build.ignore.path} leaves {ignored} out of the build context")
    return Mapping(found, tuple(left_out))
