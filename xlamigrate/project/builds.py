"""Which Dockerfile builds an image a launcher names (`image: train:latest` in a Kubernetes Job or
a compose service): the `docker build -t NAME [-f FILE] CONTEXT` commands of the project's
shell scripts, Makefiles and CI steps, and the compose services that pair `build:` with
`image:`. Only names written out match, and only exactly (a tag left out is `latest`); a tag
that is a shell variable (`docker build -t "$IMAGE"`) matches the image the same script runs by
that variable (`docker run "$IMAGE"`), where the script assigns it at most once. A build whose
tags are none of these is kept under UNNAMED: which Dockerfile it builds from which context
still tells what an image of unknown name may hold."""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from xlamigrate.kinds.launch import variable_reference
from xlamigrate.kinds.yaml.nodes import compose, fields, is_string, text
from xlamigrate.kinds.yaml.sites import compose_build

# `docker build`, `docker buildx build`, `docker image build`, `podman build`
_BUILD = re.compile(r"(?<![\w-])(?:docker|podman)\s+(?:buildx\s+|image\s+)?build(?=\s)")
_END = re.compile(r"&&|\|\||[;|&\n]")
_FLAGS = frozenset(
    {"-q", "--quiet", "--no-cache", "--pull", "--push", "--load", "--rm", "--force-rm",
     "--squash", "--compress", "--disable-content-trust"}
)  # fmt: skip
_WORKFLOWS = ".github/"
_SCRIPT_SUFFIXES = (".sh", ".bash")
UNNAMED = "?"  # the key of the builds whose image's name is not known


@dataclass(frozen=True)
class Build:
    """An image a project file builds: its Dockerfile and build context (display paths), and
    the file that builds it."""

    dockerfile: str
    context: str
    by: str


def image_builds(
    paths: Iterable[str], read: Callable[[str], str | None], exists: Callable[[str], bool]
) -> dict[str, list[Build]]:
    """Per image name (its tag defaulted): the builds of the files at `paths` that name it."""
    found: dict[str, list[Build]] = {}
    for path in paths:
        data = read(path)
        if data is None or "build" not in data:
            continue
        pairs = list(_command_builds(path, data, exists)) if _BUILD.search(data) else []
        if _is_compose(path, data):
            pairs += _compose_builds(path, data)
        for name, build in pairs:
            found.setdefault(name, []).append(build)
    return found


def variable_image(variable: str, script: str) -> str:
    """The key of an image a shell script names by a variable: the variable, in that script."""
    return f"${variable}@{script}"


def normal_name(name: str) -> str:
    """An image reference with its tag (`train` is `train:latest`; a digest stays)."""
    if "@" in name:
        return name
    last = name.rpartition("/")[2]
    return name if ":" in last else f"{name}:latest"


def _is_compose(path: str, data: str) -> bool:
    return (
        path.endswith((".yml", ".yaml"))
        and "services" in data
        and "build" in data
        and "image" in data
    )


def _compose_builds(path: str, data: str) -> list[tuple[str, Build]]:
    """The services of a compose file with both `build:` and `image:`."""
    documents = compose(data)
    if not isinstance(documents, list):  # (not YAML: nothing it builds is known)
        return []
    here = posixpath.dirname(path)
    out = []
    for document in documents:
        if document.id != "mapping":
            continue
        services = fields(document).get("services")
        if services is None or services.id != "mapping":
            continue
        for _, service in services.value:
            if service.id != "mapping":
                continue
            found = fields(service)
            image, build = found.get("image"), found.get("build")
            if image is None or build is None or not is_string(image):
                continue
            context, dockerfile = compose_build(build)
            if context is None or dockerfile is None or "$" in text(image):
                continue
            folder = _join(here, context)
            out.append((normal_name(text(image)), Build(_join(folder, dockerfile), folder, path)))
    return out


def _command_builds(
    path: str, data: str, exists: Callable[[str], bool]
) -> Iterable[tuple[str, Build]]:
    """The `docker build` commands of a shell script, Makefile or CI file."""
    joined = data.replace("\\\r\n", " ").replace("\\\n", " ")
    for match in _BUILD.finditer(joined):
        end = _END.search(joined, match.end())
        line = joined[match.end() : end.start() if end else len(joined)]
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        read = _read_build(words)
        if read is None:
            continue
        tags, file, context = read
        names = {_image_name(tag, path, data) for tag in tags} or {UNNAMED}
        for base in _folders(path):
            folder = _join(base, context)
            dockerfile = _join(base, file) if file is not None else _join(folder, "Dockerfile")
            if exists(dockerfile):
                for name in sorted(names):
                    yield name, Build(dockerfile, folder, path)
                break


def _image_name(tag: str, path: str, data: str) -> str:
    """A build's tag as a key of `image_builds`: the tag, a script's variable, or UNNAMED."""
    if "$" not in tag:
        return normal_name(tag)
    variable = variable_reference(tag)
    if variable is None or not path.endswith(_SCRIPT_SUFFIXES):
        return UNNAMED
    assignments = re.findall(rf"(?<![\w$]){variable}(?:\[[^\]]*\])?\+?=", data)
    return variable_image(variable, path) if len(assignments) <= 1 else UNNAMED


def _read_build(words: list[str]) -> tuple[list[str], str | None, str] | None:
    """(tags, -f file, context) of a build command's words (None: one is not known)."""
    tags: list[str] = []
    file: str | None = None
    operands: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        if word.startswith("-") and word != "-":
            option, equals, value = word.partition("=")
            if option in _FLAGS:
                index += 1
                continue
            if not equals:
                index += 1
                value = words[index] if index < len(words) else ""
            if option in ("-t", "--tag"):
                tags.append(value)
            elif option in ("-f", "--file"):
                file = value
        else:
            operands.append(word)
        index += 1
    if len(operands) != 1:
        return None
    context = operands[0]
    if file is not None and ("$" in file or file == "-"):
        return None
    if "$" in context or "://" in context or context == "-":
        return None
    return tags, file, context


def _folders(path: str) -> list[str]:
    """Where a build command in `path` may run: a CI step's checkout; a Makefile's folder; a
    script's folder, then the project root."""
    if _WORKFLOWS in path:
        return [path.rpartition(_WORKFLOWS)[0].rstrip("/")]
    here = posixpath.dirname(path)
    if posixpath.basename(path).lower() in ("makefile", "gnumakefile") or path.endswith(".mk"):
        return [here]
    return list(dict.fromkeys((here, "")))


def _join(folder: str, path: str) -> str:
    return posixpath.normpath(posixpath.join(folder, path)) if folder else posixpath.normpath(path)
