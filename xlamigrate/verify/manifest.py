"""What a Kubernetes (or Argo, or compose) YAML file or a Dockerfile runs, as a command verify can
run: the argv of one container and the environment its manifest gives it, written as a small
shell launcher (`export NAME=value`, then `exec` the argv) for the launch shims to intercept.

The manifest is read by the same modules the scan uses (the YAML sites, the Dockerfile stages),
so verify runs what the migration reads. Paths inside the image (`/workspace/train.py`) are
mapped to the one project file whose path ends the same way (a manifest verify is asked to
run, not a migration's decision); a value the cluster fills in (`valueFrom`, `envFrom`) is not
known here and is left out, with a note.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from xlamigrate.discover import classify
from xlamigrate.kinds.yaml.nodes import Node, fields, is_list, is_string, text

MANIFEST_KINDS = frozenset({"yaml", "dockerfile"})
# Words in a command that name a file of the project: a script, however it is prefixed.
_PATH = re.compile(r"(?<![\w$.-])((?:/|\./)?(?:[\w.-]+/)*[\w.-]+\.(?:py|sh|bash))(?![\w/])")
_KUBERNETES_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_INTERPRETERS = {".py": "python", ".sh": "bash", ".bash": "bash"}
_SKIPPED = ("__pycache__", ".git", ".venv", "venv", "node_modules", ".mypy_cache", ".tox")


@dataclass(frozen=True)
class ContainerCommand:
    """One container (or service, or image) of a manifest: what it runs and with what."""

    name: str  # how `-- NAME` selects it: the container's, the service's, or the image's
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]  # (name, value) in order; a value may expand earlier ones
    unknown: tuple[str, ...] = ()  # variables set by the cluster, not known here
    workdir: str | None = None  # the image's WORKDIR, where relative script paths lead


class ManifestError(Exception):
    """The manifest runs nothing verify can run, or not the configuration asked for."""


def is_manifest(path: Path) -> bool:
    return classify(path) in MANIFEST_KINDS


def is_dockerfile(path: Path) -> bool:
    return classify(path) == "dockerfile"


def manifest_commands(path: Path, arguments: Sequence[str] = ()) -> list[ContainerCommand]:
    """The commands a manifest runs (a Dockerfile: its final image's, with `arguments` replacing
    CMD as `docker run IMAGE ARGS` does)."""
    source = path.read_text(encoding="utf-8")
    if classify(path) == "dockerfile":
        return [_image_command(path.name, source, arguments)]
    return _yaml_commands(source)


def select(
    commands: Sequence[ContainerCommand], words: Sequence[str], where: str
) -> ContainerCommand:
    """The command `words[0]` names (a container, service or `job/container`); the only one
    when the manifest runs one and no name is given."""
    names = ", ".join(command.name for command in commands)
    if not commands:
        raise ManifestError(f"{where}: runs no container command verify can read")
    if not words:
        if len(commands) == 1:
            return commands[0]
        raise ManifestError(f"{where}: runs several containers; name one after `--`: {names}")
    chosen = [c for c in commands if words[0] == c.name] or [
        c for c in commands if words[0] in (c.name.partition("/")[0], c.name.rpartition("/")[2])
    ]
    if len(chosen) != 1:
        problem = "names several containers" if chosen else "is not a container of it"
        raise ManifestError(f"{where}: {words[0]!r} {problem}; one of: {names}")
    return chosen[0]


def launcher_text(command: ContainerCommand, root: Path, source: str) -> str:
    """A shell launcher that runs `command` from `root` (the project, or its migrated copy):
    its environment exported, then its argv from the project folder that stands for the image's
    working directory, with image paths mapped to the project's files (relative to that folder,
    so the launches of the original and of a copy read the same)."""
    paths = _PathMap(root, command.workdir, _project_files(root))
    here = paths.working_folder(command.argv)
    lines = [
        "#!/bin/sh",
        f"# {command.name} of {source}, as xlamigrate verify runs it (one local process)",
        f"cd {shlex.quote(str(here))}",
    ]
    lines.extend(f"export {name}={value}" for name, value in command.env)
    argv = [paths.mapped(word, here) for word in command.argv]
    interpreter = _INTERPRETERS.get(os.path.splitext(argv[0])[1]) if argv else None
    if interpreter and (here / argv[0]).is_file() and not os.access(here / argv[0], os.X_OK):
        argv.insert(0, interpreter)  # made executable in the image (`RUN chmod +x`), not here
    lines.append("exec " + " ".join(shlex.quote(word) for word in argv))
    return "\n".join(lines) + "\n"


def unmapped_scripts(command: ContainerCommand, root: Path) -> list[str]:
    """The scripts the command names by a path inside the image that no project file ends
    with (`/opt/ml/code/train.py` when the project has no `code/train.py`)."""
    paths = _PathMap(root, command.workdir, _project_files(root))
    return [
        match.group(1)
        for word in command.argv
        for match in _PATH.finditer(word)
        if match.group(1).startswith("/")
        and paths.local(match.group(1)) is None
        and not Path(match.group(1)).is_file()
    ]


@dataclass(frozen=True)
class _PathMap:
    """Paths of the image (absolute, or relative to its working directory) as project files."""

    root: Path
    workdir: str | None
    files: Sequence[str]  # the project's scripts, relative to root

    def local(self, written: str) -> str | None:
        """The project file (relative to root) a path of the image is, or None."""
        relative = written.removeprefix("./")
        if not written.startswith("/") and self.workdir:
            relative = f"{self.workdir.rstrip('/')}/{relative}"
        if not relative.startswith("/") and (self.root / relative).is_file():
            return relative
        return _one_ending_with(self.files, relative.lstrip("/"))

    def working_folder(self, argv: Sequence[str]) -> Path:
        """The project folder that stands for the image's working directory: the one holding the
        first script the command names relative to it (`./llama_7b.sh` found in `examples/`;
        `/app/train.py` under WORKDIR /app found in `src/`), else root."""
        inside = f"{self.workdir.rstrip('/')}/" if self.workdir else None
        for word in argv:
            for match in _PATH.finditer(word):
                written = match.group(1)
                relative = written.removeprefix("./")
                if written.startswith("/"):  # under the working directory: relative to it
                    if inside is None or not written.startswith(inside):
                        continue
                    relative = written[len(inside) :]
                found = self.local(written)
                if found is not None and found.endswith(relative):
                    return self.root / found[: len(found) - len(relative)]
        return self.root

    def mapped(self, word: str, here: Path) -> str:
        """`word` with each script path in it (`/workspace/train.py`) made the project's own,
        relative to `here`."""

        def local(match: re.Match[str]) -> str:
            written = match.group(1)
            if not written.startswith("/") and (here / written).is_file():
                return written
            found = self.local(written)
            return os.path.relpath(self.root / found, here) if found is not None else written

        return _PATH.sub(local, word)


def _project_files(root: Path) -> list[str]:
    found = []
    for path in root.rglob("*"):
        parts = path.relative_to(root).parts
        if any(part in _SKIPPED for part in parts) or path.suffix not in (".py", ".sh", ".bash"):
            continue
        if path.is_file():
            found.append("/".join(parts))
    return sorted(found)


# YAML: Kubernetes and Argo containers, compose services --------------------------------------


def _yaml_commands(source: str) -> list[ContainerCommand]:
    from xlamigrate.kinds.yaml.nodes import compose
    from xlamigrate.kinds.yaml.nodetext import Positions
    from xlamigrate.kinds.yaml.sites import find_sites

    documents = compose(source)
    if isinstance(documents, tuple):
        line, message = documents
        raise ManifestError(f"line {line}: {message}" if line else message)
    commands = []
    positions = Positions(source)
    for document in documents:
        services = _services(document)
        job = _metadata_name(document)
        for site in find_sites(document, positions):
            if not site.argv or not all(is_string(node) for node in site.argv):
                continue
            argv = [text(node) for node in site.argv]
            if site.dialect == "compose":
                name = services.get(id(site.owner), "service")
                env, unknown = _compose_environment(site.owner)
                argv = [word.replace("$$", "$") for word in argv]
            else:
                own = fields(site.owner).get("name")
                name = text(own) if own is not None and is_string(own) else "container"
                name = f"{job}/{name}" if job else name
                env, unknown = _kubernetes_environment(site.owner)
                if site.dialect == "kubernetes":
                    argv = [_kubernetes_expanded(word, dict(env)) for word in argv]
                    env = [(n, _kubernetes_expanded(v, dict(env))) for n, v in env]
            workdir = fields(site.owner).get("workingDir") or fields(site.owner).get("working_dir")
            commands.append(
                ContainerCommand(
                    name,
                    tuple(argv),
                    tuple((n, shlex.quote(v)) for n, v in env),
                    tuple(unknown),
                    text(workdir) if workdir is not None and is_string(workdir) else None,
                )
            )
    return commands


def _metadata_name(document: Node) -> str | None:
    if document.id != "mapping":
        return None
    metadata = fields(document).get("metadata")
    if metadata is None or metadata.id != "mapping":
        return None
    name = fields(metadata).get("name")
    return text(name) if name is not None and is_string(name) else None


def _services(document: Node) -> dict[int, str]:
    """Compose services by the id of their mapping."""
    if document.id != "mapping":
        return {}
    services = fields(document).get("services")
    if services is None or services.id != "mapping":
        return {}
    return {id(value): str(key.value) for key, value in services.value}


def _kubernetes_environment(container: Node) -> tuple[list[tuple[str, str]], list[str]]:
    env: list[tuple[str, str]] = []
    unknown: list[str] = []
    listed = fields(container).get("env")
    for item in listed.value if listed is not None and is_list(listed) else ():
        entry = fields(item) if item.id == "mapping" else {}
        name, value = entry.get("name"), entry.get("value")
        if name is None or not is_string(name):
            continue
        if value is not None and is_string(value):
            env.append((text(name), text(value)))
        elif "valueFrom" in entry:
            unknown.append(text(name))
        else:
            env.append((text(name), ""))
    if "envFrom" in fields(container):
        unknown.append("envFrom")
    return env, unknown


def _compose_environment(service: Node) -> tuple[list[tuple[str, str]], list[str]]:
    env: list[tuple[str, str]] = []
    unknown: list[str] = []
    given = fields(service).get("environment")
    if given is not None and given.id == "mapping":
        for key, value in given.value:
            if is_string(value):
                env.append((str(key.value), text(value)))
            else:
                unknown.append(str(key.value))  # `NAME:` passes the host's value on
    elif given is not None and is_list(given):
        for item in given.value:
            if is_string(item):
                name, has_value, value = text(item).partition("=")
                (env.append((name, value)) if has_value else unknown.append(name))
    if "env_file" in fields(service):
        unknown.append("env_file")
    return env, unknown


def _kubernetes_expanded(word: str, env: dict[str, str]) -> str:
    """Kubernetes' `$(NAME)` (a variable defined in the container's env) and `$$` (a `$`)."""

    def expand(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _KUBERNETES_REFERENCE.sub(expand, word)


# Dockerfiles ---------------------------------------------------------------------------------


def _image_command(name: str, source: str, arguments: Sequence[str]) -> ContainerCommand:
    """The final stage's command, with the ENV of its stages (written for a POSIX shell as
    Docker reads them: quotes kept, `${X}` expanded by the shell as Docker would)."""
    from xlamigrate.kinds.dockerfile.image import Stages, image_argv
    from xlamigrate.kinds.dockerfile.parse import parse

    parsed = parse(source)
    stages = Stages.of(parsed.instructions)
    if not stages.commands:
        raise ManifestError("no FROM instruction: not a Dockerfile verify can read")
    final = len(stages.commands) - 1
    argv = image_argv(
        stages.effective(final, "ENTRYPOINT"), stages.effective(final, "CMD"), arguments
    )
    if not argv:
        raise ManifestError("the image has no CMD or ENTRYPOINT: give its command after `--`")
    env: list[tuple[str, str]] = []
    workdir = "/"  # Docker's, where no WORKDIR says otherwise
    for instruction in stages.inherited_settings(final):
        if instruction.keyword == "WORKDIR":
            path = instruction.args.text.strip()
            workdir = path if path.startswith("/") else f"{workdir.rstrip('/')}/{path}"
        else:
            env.extend(_env_assignments(instruction.args.text, parsed.escape))
    return ContainerCommand(f"image of {name}", tuple(argv), tuple(env), (), workdir)


def _env_assignments(args: str, escape: str) -> list[tuple[str, str]]:
    """`ENV A=1 B="x y"` and the legacy `ENV A the rest`: (name, value as shell text)."""
    from xlamigrate.kinds.dockerfile.parse import docker_value, docker_words

    spans = docker_words(args, escape)
    if not spans:
        return []
    first = args[spans[0][0] : spans[0][1]]
    if "=" not in first:  # the legacy form: the value is the rest of the line
        rest = args[spans[0][1] :].strip()
        value = docker_value(rest, escape)
        return [(first, shlex.quote(value) if value is not None else f'"{rest}"')]
    found = []
    for start, end in spans:
        name, has_value, raw = args[start:end].partition("=")
        if has_value and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            found.append((name, _shell_value(raw, escape)))
    return found


def _shell_value(raw: str, escape: str) -> str:
    """A Dockerfile value as POSIX shell text: its value quoted, or, where it expands a variable
    (`"${PATH}:/opt/bin"`), as written: Docker's quoting and expansions are the shell's (with
    another escape character, the text is taken literally)."""
    from xlamigrate.kinds.dockerfile.parse import docker_value

    value = docker_value(raw, escape)
    if value is not None:
        return shlex.quote(value)
    return raw if escape == "\\" else shlex.quote(raw)


def _one_ending_with(files: Sequence[str], tail: str) -> str | None:
    """The one file whose path ends with `tail` (a container path `/app/src/train.py`, trimmed
    folder by folder from the left), or None when none or several do. (Verify runs a manifest
    it is asked to run; the migration's own resolver maps image paths through the Dockerfile.)"""
    parts = tail.split("/")
    for start in range(len(parts)):
        suffix = "/".join(parts[start:])
        matches = [f for f in files if f == suffix or f.endswith("/" + suffix)]
        if len(matches) == 1:
            return matches[0]
        if matches:
            return None
    return None
