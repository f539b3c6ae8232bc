"""The file kinds xlamigrate checks, each declared once: how its files are named, the interpreters
of its shebang lines, pre-commit's name for it, and the module that scans and rewrites it.

Adding a kind is one package under `kinds/` (exposing `scan` and `rewrite`, see `KindModule`)
and one line in `KINDS`. Nothing here imports a parser: a kind's module is imported only once a
file of that kind needs parsing.
"""

from __future__ import annotations

import fnmatch
import importlib
import os
import re
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Protocol

from xlamigrate.kinds.unreadtable import UNREAD_KINDS

if TYPE_CHECKING:
    from xlamigrate.catalogue import Catalogue
    from xlamigrate.kinds.textaccess import TextAnalysis
    from xlamigrate.request import FileTask, RewriteRequest
    from xlamigrate.results import FileResult, RewriteOutcome


@dataclass(frozen=True)
class KindSpec:
    name: str
    module: str  # exposes scan() and rewrite() (KindModule)
    # File names, matched case-sensitively: "*.sh" by suffix; "Dockerfile.*" by name, which
    # wins over any suffix (Dockerfile.py is a Dockerfile, as Docker and pre-commit read it).
    patterns: tuple[str, ...]
    not_patterns: tuple[str, ...] = ()  # names that look like the kind and are not (Dockerfile.md)
    shebangs: tuple[str, ...] = ()  # interpreters of a `#!` line, for files without a suffix
    identify: str = ""  # pre-commit's (identify's) type for these files: the hooks' types_or
    # What else (a regex over the bytes) makes a file worth parsing besides a flag's name: YAML
    # configs name the flags in lower case (NeuronX-Distributed-Training) or through accelerate's
    # settings, or NxDT's precision types that set them (`bf16SR`, `mixed_precision`).
    triggers: bytes = b""
    # Whether its files start processes (the module has `analyse_file`, LauncherKindModule):
    # said here so that asking does not import the kind's parser.
    launches: bool = False


KINDS: tuple[KindSpec, ...] = (
    KindSpec(
        "python",
        "xlamigrate.kinds.python.kind",
        ("*.py",),
        shebangs=("python",),
        identify="python",
        launches=True,
    ),
    KindSpec("notebook", "xlamigrate.kinds.notebook", ("*.ipynb",), identify="jupyter"),
    KindSpec(
        "shell",
        "xlamigrate.kinds.shell",
        ("*.sh", "*.bash", "*.sbatch", "*.slurm", ".envrc"),  # .envrc: direnv's, a bash file
        shebangs=("sh", "bash", "zsh", "dash", "ksh"),
        identify="shell",
        launches=True,
    ),
    KindSpec(
        "dockerfile",
        "xlamigrate.kinds.dockerfile",
        (
            "Dockerfile",
            "Dockerfile.*",
            "Containerfile",
            "Containerfile.*",
            "*.dockerfile",
            "*.Dockerfile",
            "*.Containerfile",
        ),
        not_patterns=("*.md", "*.txt"),
        identify="dockerfile",
        launches=True,
    ),
    KindSpec(
        "yaml",
        "xlamigrate.kinds.yaml",
        ("*.yaml", "*.yml"),
        identify="yaml",
        triggers=rb"(?i)xla_(?:use|downcast)_(?:bf16|fp16|f16)|downcast_bf16|mixed_precision"
        rb"|bf16sr",
        launches=True,
    ),
    KindSpec(
        "dotenv",
        "xlamigrate.kinds.dotenv",
        (".env", ".env.*", "*.env"),
        identify="dotenv",
        launches=True,
    ),
    KindSpec("ini", "xlamigrate.kinds.ini", ("*.ini", "*.cfg"), identify="ini"),
    *(
        KindSpec(
            kind.name,
            "xlamigrate.kinds.unread",
            kind.patterns,
            not_patterns=kind.not_patterns,
            identify=kind.identify,
        )
        for kind in UNREAD_KINDS
    ),
    KindSpec(
        "makefile",
        "xlamigrate.kinds.makefile",
        ("Makefile", "makefile", "GNUmakefile", "*.mk", "*.make"),
        identify="makefile",
    ),
)  # fmt: skip

KIND_NAMES: tuple[str, ...] = tuple(spec.name for spec in KINDS)


class KindModule(Protocol):
    """What the module of a kind provides: findings for a file's bytes, and a planned rewrite
    (and optionally `preload(task)`, see `preload`)."""

    def scan(self, task: FileTask) -> FileResult: ...

    def rewrite(self, task: FileTask, request: RewriteRequest) -> RewriteOutcome: ...


class LauncherKindModule(Protocol):
    """A kind whose files start processes (shell, Dockerfile, YAML, .env): the analysis the
    project's launch graph is built from."""

    def analyse_file(self, path: str, data: bytes, catalogue: Catalogue) -> TextAnalysis | None: ...

    def scan(self, task: FileTask, analysis: TextAnalysis | None = None) -> FileResult: ...


def analyses_launches(name: str) -> bool:
    """Whether the kind's files start processes (without importing the kind)."""
    return spec(name).launches


def load_launcher(name: str) -> LauncherKindModule:
    module: LauncherKindModule = importlib.import_module(spec(name).module)
    return module


def spec(name: str) -> KindSpec:
    return _by_name()[name]


def load(name: str) -> KindModule:
    """The module of a kind (imports its parser)."""
    module: KindModule = importlib.import_module(spec(name).module)
    return module


def preload(name: str, task: str) -> None:
    """Imports what a kind needs for `task` ("scan", "rewrite"): its module, and whatever its
    optional `preload(task)` names (modules too heavy to import for every task)."""
    module = load(name)
    hook = getattr(module, "preload", None)
    if hook is not None:
        hook(task)


def kind_by_name(name: str) -> str | None:
    """A file's kind from its name alone; None when only its shebang could tell, or nothing."""
    table = _tables()
    exact = table.by_name.match(name)
    if exact is not None:
        return _group_kind(exact)
    suffix = os.path.splitext(name)[1]
    kind = table.by_suffix.get(suffix)
    if kind is not None and not any(fnmatch.fnmatchcase(name, p) for p in spec(kind).not_patterns):
        return kind
    return None


def kind_by_shebang(first_line: bytes) -> str | None:
    """The kind a `#!` line names: `#!/bin/bash`, `#!/usr/bin/env -S python3 -u`."""
    if not first_line.startswith(b"#!"):
        return None
    words = first_line[2:].decode("utf-8", "replace").split()
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    if not words:
        return None
    interpreter = re.sub(r"[0-9.]+$", "", os.path.basename(words[0]))
    return _tables().by_shebang.get(interpreter)


def triggers() -> dict[str, re.Pattern[bytes]]:
    """The kinds with extra triggers, each with its compiled pattern."""
    return {s.name: re.compile(s.triggers) for s in KINDS if s.triggers}


@dataclass(frozen=True)
class _Tables:
    by_name: re.Pattern[str]  # one named group per kind, over its whole-name patterns
    by_suffix: dict[str, str]
    by_shebang: dict[str, str]


@cache
def _by_name() -> dict[str, KindSpec]:
    return {s.name: s for s in KINDS}


@cache
def _tables() -> _Tables:
    groups = []
    suffixes: dict[str, str] = {}
    shebangs: dict[str, str] = {}
    for kind in KINDS:
        names = [p for p in kind.patterns if not p.startswith("*.")]
        suffixes.update({p[1:]: kind.name for p in kind.patterns if p.startswith("*.")})
        shebangs.update({interpreter: kind.name for interpreter in kind.shebangs})
        if names:
            excluded = "".join(f"(?!{_regex(p)})" for p in kind.not_patterns)
            alternatives = "|".join(_regex(p) for p in names)
            groups.append(f"(?P<{kind.name}>{excluded}(?:{alternatives}))")
    by_name = re.compile("|".join(groups) if groups else "(?!)")
    return _Tables(by_name, suffixes, shebangs)


def _regex(pattern: str) -> str:
    """A whole-name regex for an fnmatch pattern (no `(?s:...)\\Z` wrapper, so it nests)."""
    return "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern) + "$"


def _group_kind(match: re.Match[str]) -> str:
    kind = match.lastgroup
    assert kind is not None
    return kind
