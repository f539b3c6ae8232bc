"""Where a YAML file runs commands: GitHub Actions steps (`run:`), GitLab CI jobs (`script:`,
`before_script:`, `after_script:`), Kubernetes and Argo containers (`command:` + `args:`) and
docker compose services (`entrypoint:` + `command:`). Each is a `Site`: the words of its exec
form, and the scalars a shell runs as scripts (a `run:` block, a GitLab list item, the string of
`bash -c` in a container's argv). Which words start a shell is the launch model's to say."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from xlamigrate.kinds.launch import (
    BUILT,
    NAMED,
    Launch,
    in_checkout,
    in_image,
    launch,
    program_named,
)
from xlamigrate.kinds.textaccess import TextEdit
from xlamigrate.kinds.yaml.nodes import Node, fields, is_list, is_null, is_string, text
from xlamigrate.kinds.yaml.nodetext import Positions

# Who reads the text before the shell does: compose interpolates `${VAR}` and Kubernetes expands
# `$(VAR)` in command/args, both writing a `$` as `$$` (the dialect names its encoding).
Dialect = Literal["shell", "kubernetes", "compose"]
_GITLAB_KEYS = ("before_script", "script", "after_script")  # in the order the runner runs them
_KEEP = "':'"  # a plain scalar whose only command went: a no-op (an empty one would be null)

# (a node, the key or index it is found under in its parent)
Path = tuple[tuple[Node, str | int], ...]


@dataclass(frozen=True)
class Script:
    """A scalar whose string a shell runs as a script."""

    node: Node
    dialect: Dialect
    flow: bool  # inside a flow collection (`[...]`): a plain scalar cannot take `,[]{}`
    may_be_empty: bool = True  # False: a `run:` or `script:` must keep a command
    whole: TextEdit | None = None  # removes the script where its only command goes
    session: int = 0  # scripts of a site with the same session run in one shell, in order
    templated: bool = False  # `{{ ... }}` is substituted before the shell runs (Argo)


@dataclass(frozen=True)
class Site:
    """A step, job, container or service: what it runs."""

    owner: Node  # the mapping that holds the command (and the `env:` of what it runs)
    argv: tuple[Node, ...] = ()  # the words of an exec form (`command:` + `args:`)
    dialect: Dialect = "shell"
    scripts: tuple[Script, ...] = ()
    # Where its processes start: a CI checkout, a container's image, or (None) not known here
    # (the launcher's folder, then the project root, stand for it); `workdir` within it.
    runs_in: Literal["checkout", "image"] | None = None
    workdir: str | None = None
    image: str | None = None  # which image a container runs (see `in_image`), where known

    def placed(self, script: str) -> str:
        """A script the site runs, as the project resolves it: from its working directory."""
        if self.runs_in == "checkout":
            return in_checkout(self.workdir, script)
        if self.runs_in == "image":
            return in_image(script, self.workdir, self.image)
        return script

    def launch(self) -> Launch | None:
        """What the exec form runs, through the launch model."""
        if not self.argv:
            return None
        written = [text(node) if is_string(node) else "" for node in self.argv]
        return launch(argv_words(self.argv, self.dialect), written)


def argv_words(argv: Sequence[Node], dialect: Dialect) -> list[str | None]:
    """The words a program gets (None: not a plain string, or one expanded before it runs)."""
    words: list[str | None] = []
    for node in argv:
        word = text(node) if is_string(node) else None
        expands = word is not None and dialect != "shell" and "$" in word.replace("$$", "")
        words.append(None if expands else word)
    return words


def find_sites(root: Node, positions: Positions) -> list[Site]:
    """The sites of one document, in the order they are written."""
    found: list[Site] = []
    if root.id != "mapping":
        return found
    top = fields(root)
    api = top.get("apiVersion")
    kubernetes = api is not None and is_string(api)
    argo = api is not None and kubernetes and text(api).startswith("argoproj.io/")
    context = _Context(root, positions, kubernetes, argo, top.get("services"))
    seen: set[int] = set()
    stack: list[tuple[Node, Path, bool]] = [(root, (), False)]
    while stack:
        node, path, flow = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        flow = flow or bool(node.flow_style)
        children: list[tuple[Node, str | int]]
        if node.id == "mapping":
            site = context.site(node, path, flow)
            if site is not None:
                found.append(site)
            children = [(value, str(name.value)) for name, value in node.value]
        else:
            children = list(zip(node.value, range(len(node.value)), strict=True))
        stack.extend(
            (child, (*path, (node, key)), flow)
            for child, key in reversed(children)
            if child.id != "scalar"
        )
    return found


@dataclass(frozen=True)
class _Context:
    """What a document tells about all its mappings."""

    root: Node
    positions: Positions
    kubernetes: bool  # a manifest (`apiVersion:`): command/args are expanded by Kubernetes
    argo: bool
    services: Node | None  # compose's `services:`

    def site(self, mapping: Node, path: Path, flow: bool) -> Site | None:
        """What `mapping` runs, if it is a step, a job, a service or a container."""
        if len(path) == 2 and path[0][1] == "services" and path[1][0] is self.services:
            return _compose_service(mapping, flow)
        if len(path) >= 2 and path[-2][1] == "steps" and path[-1][0].id == "sequence":
            step = _actions_step(self.root, path[-2][0], mapping, self.positions, flow)
            if step is not None:
                return step
        if len(path) <= 1:  # a GitLab job is a top-level key (and the top level has defaults)
            job = _gitlab_job(mapping, self.positions, flow)
            if job is not None:
                return job
        dialect: Dialect = "kubernetes" if self.kubernetes else "shell"
        return _container(mapping, dialect, self.argo, flow)


# GitHub Actions -------------------------------------------------------------------------------


def _actions_step(
    root: Node, job: Node, step: Node, positions: Positions, flow: bool
) -> Site | None:
    """A step's `run:` is a script of the step's shell (bash unless `shell:` or `defaults` say
    otherwise, or the job runs on Windows, where it is PowerShell)."""
    run = fields(step).get("run")
    if run is None or not is_string(run) or not _runs_a_posix_shell(root, job, step):
        return None
    script = Script(run, "shell", flow, may_be_empty=False, whole=_keep(run, positions))
    folder = fields(step).get("working-directory")
    folder = (
        folder or _run_default(job, "working-directory") or _run_default(root, "working-directory")
    )
    workdir = text(folder) if folder is not None and is_string(folder) else None
    return Site(step, scripts=(script,), runs_in="checkout", workdir=workdir)


def _runs_a_posix_shell(root: Node, job: Node, step: Node) -> bool:
    shell = fields(step).get("shell") or _run_default(job, "shell") or _run_default(root, "shell")
    if shell is None:
        runs_on = fields(job).get("runs-on") if job.id == "mapping" else None
        return runs_on is None or not is_string(runs_on) or "windows" not in text(runs_on).lower()
    words = text(shell).split() if is_string(shell) else []
    program = program_named(os.path.basename(words[0])) if words else None
    return program is not None and program.role == "shell"


def _run_default(mapping: Node, key: str) -> Node | None:
    """A job's or workflow's `defaults: run: KEY:` (`shell`, `working-directory`)."""
    if mapping.id != "mapping":
        return None
    defaults = fields(mapping).get("defaults")
    run = fields(defaults).get("run") if defaults is not None and defaults.id == "mapping" else None
    return fields(run).get(key) if run is not None and run.id == "mapping" else None


# GitLab CI ------------------------------------------------------------------------------------


def _gitlab_job(job: Node, positions: Positions, flow: bool) -> Site | None:
    """A job's `before_script:` and `script:` items run in one shell, in order; `after_script:`
    in another. Each item is a script of its own (a list may nest lists, as anchors make)."""
    found = fields(job)
    scripts: list[Script] = []
    for key in _GITLAB_KEYS:
        value = found.get(key)
        if value is None:
            continue
        session = 1 if key == "after_script" else 0
        if is_string(value):
            whole = _keep(value, positions)
            scripts.append(Script(value, "shell", flow, False, whole, session))
        elif is_list(value):
            scripts.extend(_items(value, positions, flow or bool(value.flow_style), session))
    return Site(job, scripts=tuple(scripts)) if scripts else None


def _items(sequence: Node, positions: Positions, flow: bool, session: int) -> list[Script]:
    """The list's string items; an item that is one of several goes with its lines."""
    scripts: list[Script] = []
    for index, item in enumerate(sequence.value):
        if is_list(item):
            scripts.extend(_items(item, positions, flow or bool(item.flow_style), session))
        elif is_string(item):
            alone = len(sequence.value) == 1
            whole = None if alone else positions.removal(sequence, index, None)
            whole = whole or _keep(item, positions)
            scripts.append(Script(item, "shell", flow, False, whole, session))
    return scripts


# Containers and services ----------------------------------------------------------------------


def _container(container: Node, dialect: Dialect, argo: bool, flow: bool) -> Site | None:
    """A Kubernetes (or Argo) container: `command` followed by `args` is the argv (`args`
    alone: the image's entrypoint is not known, so they are read as the whole command). A null
    `args` (what jsonnet writes for none) is no args: it does not hide the command."""
    found = fields(container)
    parts = [
        part
        for part in (found.get("command"), found.get("args"))
        if part is not None and not is_null(part)
    ]
    if not parts or not all(is_list(part) for part in parts):
        return None
    return _exec_form(container, parts, dialect, argo, flow)


def _compose_service(service: Node, flow: bool) -> Site | None:
    """A compose service: `entrypoint` then `command`, each a list or a string compose splits
    into words. A lone string command is read by the shell engine as a command line (compose's
    splitting is a shell's, less expansions); lists are an argv."""
    found = fields(service)
    parts = [part for part in (found.get("entrypoint"), found.get("command")) if part is not None]
    if len(parts) == 1 and is_string(parts[0]):
        script = Script(parts[0], "compose", flow)
        return Site(service, dialect="compose", scripts=(script,), **_in_container(service))
    if not parts or not all(is_list(part) for part in parts):
        return None
    return _exec_form(service, parts, "compose", False, flow)


def _exec_form(
    owner: Node, parts: list[Node], dialect: Dialect, argo: bool, flow: bool
) -> Site | None:
    """The site of an argv made of the lists `parts`, with the words its shell runs as scripts
    (`bash -c STRING`) and an Argo script template's `source:` (a shell its `command` names
    reads it)."""
    argv = [(item, flow or bool(part.flow_style)) for part in parts for item in part.value]
    if not argv:
        return None
    site = Site(owner, tuple(node for node, _ in argv), dialect)
    made = site.launch()
    assert made is not None
    scripts = [
        Script(argv[index][0], dialect, argv[index][1], templated=argo)
        for index in made.shell_strings
        if index < len(argv) and is_string(argv[index][0])
    ]
    source = fields(owner).get("source")
    if source is not None and is_string(source) and _runs_a_shell_reading_stdin(made):
        scripts.append(Script(source, dialect, flow, templated=argo))
    return Site(owner, site.argv, dialect, tuple(scripts), **_in_container(owner, dialect))


def _in_container(owner: Node, dialect: Dialect = "compose") -> dict[str, Any]:
    """Where a Kubernetes container or compose service starts: its image, from `workingDir`
    (`working_dir`) or the image's WORKDIR (a container outside those: not known)."""
    if dialect == "shell":
        return {}
    key = "workingDir" if dialect == "kubernetes" else "working_dir"
    folder = fields(owner).get(key)
    workdir = text(folder) if folder is not None and is_string(folder) else None
    return {"runs_in": "image", "workdir": workdir, "image": _image(owner, dialect)}


def _image(owner: Node, dialect: Dialect) -> str | None:
    """Which image the container runs: a compose service's `build:` (its context and
    Dockerfile, from the compose file's folder), else its `image:` name (None: not known)."""
    found = fields(owner)
    build = found.get("build") if dialect == "compose" else None
    if build is not None:
        context, dockerfile = compose_build(build)
        if context is None or dockerfile is None:
            return None
        return f"{BUILT}{context};{dockerfile}"
    name = found.get("image")
    if name is None or not is_string(name):
        return None
    value = text(name).strip()
    return f"{NAMED}{value}" if value and "$" not in value and ";" not in value else None


def compose_build(build: Node) -> tuple[str | None, str | None]:
    """(context, Dockerfile from the context) of a compose `build:`; None where not known."""
    if is_string(build):
        context: Node | None = build
        dockerfile: Node | None = None
    elif build.id == "mapping":
        context, dockerfile = fields(build).get("context"), fields(build).get("dockerfile")
        if "dockerfile_inline" in fields(build):
            return None, None
    else:
        return None, None
    folder = text(context) if context is not None and is_string(context) else "."
    name = text(dockerfile) if dockerfile is not None and is_string(dockerfile) else "Dockerfile"
    if context is not None and not is_string(context):
        return None, None
    if dockerfile is not None and not is_string(dockerfile):
        return None, None
    if any(c in word for word in (folder, name) for c in "$;") or "://" in folder:
        return None, None
    if folder.startswith("git@") or folder.endswith(".git"):
        return None, None
    return folder, name


def _runs_a_shell_reading_stdin(made: Launch) -> bool:
    """`command: [bash]`: a shell with no script nor `-c` string (Argo gives it the source)."""
    if not made.programs or made.script is not None or made.shell_strings:
        return False
    program = program_named(made.programs[-1])
    return program is not None and program.role == "shell"


def _keep(node: Node, positions: Positions) -> TextEdit | None:
    """For a plain scalar: `':'` in its place (removing its text would leave a null)."""
    if node.style is not None:
        return None
    return TextEdit(*positions.span(node), _KEEP)
