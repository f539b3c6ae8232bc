"""What a migrated project depends on: a rewrite that makes a script import `xlamigrate_runtime`
declares the runtime where the project declares its own dependencies, once, or says where to.

The declaration is the nearest one from the script's folder up to the project's root: a
`requirements.txt` (or the one `requirements*.txt` that names torch), else `pyproject.toml`'s
`[project] dependencies`. A line is appended to the first, an item to the second (the result
read back by a TOML parser before it is offered). Files it does not edit (`setup.py`, a
Dockerfile that `pip install`s packages by name, several candidate requirements files) and a
project with no declaration at all are named in an XM409 finding on the script.

`--runtime vendor` declares nothing: the package is copied beside each such script instead,
from the source the CLI carries (`runtime_source`)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from xlamigrate.catalogue import Catalogue
from xlamigrate.findings import manual_finding
from xlamigrate.kinds import kind_by_name
from xlamigrate.project.projectfiles import folders_up, read_small
from xlamigrate.results import RewriteOutcome, Span

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

RUNTIME_MODULE = "xlamigrate_runtime"
RUNTIME_DISTRIBUTION = "xlamigrate-runtime"
RUNTIME_REQUIREMENT = f"{RUNTIME_DISTRIBUTION}>=0.1.0"  # the release with what rewrites import
RUNTIME_NOT_DECLARED = "XM409"

_REQUIREMENTS = re.compile(r"requirements.*\.txt")
_TORCH = re.compile(r"^\s*(torch|torch[-_.]xla|torch[-_.]neuronx)\b", re.I | re.M)
_PIP_INSTALL = re.compile(r"\bpip3?\s+install\b")


@dataclass(frozen=True)
class Declaration:
    """Where one script's dependency goes: edit the file at `path`, or tell the user:
    `problem` says what was found, `{files}` in it standing for the files `named`."""

    path: Path | None
    problem: str | None = None
    named: tuple[Path, ...] = ()


def adds_runtime_import(outcome: RewriteOutcome) -> bool:
    """Whether the rewrite makes the file import the runtime (a notebook's cells included)."""
    name = RUNTIME_MODULE.encode()
    return outcome.changed and name in (outcome.rewritten or b"") and name not in outcome.original


def declare_runtime(
    outcomes: Sequence[RewriteOutcome],
    sources: dict[str, Path],
    root: Path,
    catalogue: Catalogue,
    report: bool,
    editable: Callable[[Path], bool] = lambda path: True,
) -> tuple[list[RewriteOutcome], list[RewriteOutcome]]:
    """(the outcomes, with XM409 on scripts whose runtime could not be declared when `report`;
    the dependency files rewritten to declare it), each dependency file edited once, and only
    where `editable` (a rewrite edits the files it was given alone)."""
    root = root.resolve()
    edits: dict[Path, RewriteOutcome] = {}
    result = []
    for outcome in outcomes:
        if not adds_runtime_import(outcome):
            result.append(outcome)
            continue
        script = sources.get(outcome.path, Path(outcome.path))
        declaration = _declaration(script.resolve().parent, root)
        problem = declaration.problem
        if problem is not None:  # the files as the user named the script: from the same place
            files = ", ".join(_display(named, script, outcome.path) for named in declaration.named)
            problem = problem.replace("{files}", files)
        if declaration.path is not None and problem is None and not editable(declaration.path):
            display = _display(declaration.path, script, outcome.path)
            problem = f"{display}, which declares the dependencies, is not among the files named"
        if declaration.path is not None and declaration.path not in edits and problem is None:
            display = _display(declaration.path, script, outcome.path)
            edit = _declared(declaration.path, display)
            if isinstance(edit, str):
                problem = edit
            elif edit is not None:
                edits[declaration.path] = edit
        if problem is not None and report:
            finding = manual_finding(
                catalogue, RUNTIME_NOT_DECLARED, outcome.path, Span(1, 1, 1, 1), problem
            )
            outcome = replace(outcome, remaining=(*outcome.remaining, finding))
        result.append(outcome)
    return result, list(edits.values())


def _declaration(folder: Path, root: Path) -> Declaration:
    """The nearest folder's dependency list, from `folder` up to `root`."""
    for parent in folders_up(folder, root):
        found = _in_folder(parent)
        if found is not None:
            return found
    return Declaration(
        None, f"no requirements.txt or pyproject.toml dependencies up to {root.name}/"
    )


def _in_folder(folder: Path) -> Declaration | None:
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return None
    requirements = [folder / n for n in names if _REQUIREMENTS.fullmatch(n)]
    if requirements:
        return _requirements_file(requirements)
    if "pyproject.toml" in names:
        text = _read(folder / "pyproject.toml")
        if text is not None and _dependencies(text) is not None:
            return Declaration(folder / "pyproject.toml")
    for name in names:
        if name in ("setup.py", "setup.cfg"):
            return Declaration(None, "{files} declares the dependencies", (folder / name,))
    for name in names:
        if kind_by_name(name) == "dockerfile":
            line = _pip_line(folder / name)
            if line is not None:
                problem = f"{{files}} line {line} installs the training's packages"
                return Declaration(None, problem, (folder / name,))
    return None


def _requirements_file(candidates: list[Path]) -> Declaration:
    for path in candidates:
        if path.name == "requirements.txt":
            return Declaration(path)
    naming_torch = [p for p in candidates if _TORCH.search(_read(p) or "")]
    if len(naming_torch) == 1:
        return Declaration(naming_torch[0])
    problem = "the training's requirements file is one of {files}"
    return Declaration(None, problem, tuple(naming_torch or candidates))


def _pip_line(path: Path) -> int | None:
    """The first line of a Dockerfile that `pip install`s torch by name (not from a file)."""
    for number, line in enumerate((_read(path) or "").splitlines(), 1):
        if _PIP_INSTALL.search(line) and " -r " not in line and re.search(r"\btorch", line):
            return number
    return None


def _declared(path: Path, display: str) -> RewriteOutcome | str | None:
    """The file rewritten to declare the runtime; None: it already does; a string: why not."""
    raw = read_small(path)
    if raw is None:
        return f"{display} could not be read"
    text = raw.decode("utf-8", "replace")
    if path.name == "pyproject.toml":
        new = _with_dependency(text)
        if new is None:
            return f"its dependencies in {display} are written in a way it does not edit"
    elif any(_names_runtime(line) for line in text.splitlines()):
        return None
    else:
        newline = "\r\n" if "\r\n" in text else "\n"
        ending = "" if not text or text.endswith(("\n", "\r")) else newline
        new = f"{text}{ending}{RUNTIME_REQUIREMENT}{newline}"
    if new == text:
        return None
    return RewriteOutcome(display, raw, new.encode("utf-8"), why=f"declares {RUNTIME_DISTRIBUTION}")


def _names_runtime(requirement: str) -> bool:
    word = re.split(r"[\s<>=!~;\[@#]", requirement.strip(), maxsplit=1)[0]
    return word.lower().replace("_", "-").replace(".", "-") == RUNTIME_DISTRIBUTION


def _with_dependency(text: str) -> str | None:
    """The pyproject text with the runtime last in `[project] dependencies`; the same text
    where it is there already; None where the array is not one it can find and extend."""
    dependencies = _dependencies(text) or []
    if any(_names_runtime(item) for item in dependencies):
        return text
    span = _dependencies_array(text)
    if span is None:
        return None
    start, end = span  # the `[` and the `]`
    body = text[start + 1 : end]
    item = f'"{RUNTIME_REQUIREMENT}"'
    if "\n" in body:
        lines = body.splitlines(keepends=True)
        items = [line for line in lines if _without_comment(line).strip()]
        indent = re.match(r"[ \t]*", items[-1]).group() if items else "    "  # type: ignore[union-attr]
        last = body.rstrip(" \t")
        ended = _with_comma(last, "" if _ends_with_comma(last) else ",")
        ended += "" if ended.endswith("\n") else "\n"
        new_body = f"{ended}{indent}{item},\n{body[len(last) :]}"
    else:
        kept = body.rstrip()
        separator = "" if not kept.strip() else " " if kept.endswith(",") else ", "
        new_body = f"{kept}{separator}{item}"
    new = text[: start + 1] + new_body + text[end:]
    return new if _dependencies(new) == [*dependencies, RUNTIME_REQUIREMENT] else None


def _ends_with_comma(body: str) -> bool:
    code = [_without_comment(line).strip() for line in body.splitlines()]
    code = [line for line in code if line]
    return not code or code[-1].endswith(",")


def _with_comma(body: str, comma: str) -> str:
    """`body` with `comma` after its last item (before that line's comment)."""
    if not comma:
        return body
    lines = body.splitlines(keepends=True)
    for index in range(len(lines) - 1, -1, -1):
        code = _without_comment(lines[index]).rstrip()
        if code.strip():
            lines[index] = code + comma + lines[index][len(code) :]
            break
    return "".join(lines)


def _without_comment(line: str) -> str:
    quote = None
    for index, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char == "#":
            return line[:index]
    return line


def _dependencies_array(text: str) -> tuple[int, int] | None:
    """Offsets of the `[` and `]` of `dependencies = [...]` in the `[project]` table."""
    table = re.search(r"(?m)^\[project\][ \t]*(?:#.*)?$", text)
    if table is None:
        return None
    following = re.search(r"(?m)^\[", text[table.end() :])
    limit = table.end() + following.start() if following else len(text)
    key = re.compile(r"(?m)^dependencies[ \t]*=[ \t]*\[").search(text, table.end(), limit)
    if key is None:
        return None
    start = key.end() - 1
    closing = _closing_bracket(text, start)
    return (start, closing) if closing is not None else None


def _closing_bracket(text: str, start: int) -> int | None:
    depth, quote, index = 0, None, start
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\" and quote == '"':
                index += 1
            elif char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char == "#":
            newline = text.find("\n", index)
            index = len(text) if newline < 0 else newline
            continue
        elif char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth == 0:
                return index
        index += 1
    return None


def _dependencies(text: str) -> list[str] | None:
    """`[project] dependencies`; None where the table has no such list."""
    project = _toml(text).get("project")
    items = project.get("dependencies") if isinstance(project, dict) else None
    return [item for item in items if isinstance(item, str)] if isinstance(items, list) else None


def _toml(text: str) -> dict[str, object]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {}


def _display(path: Path, script: Path, script_display: str) -> str:
    """`path` as the user named the script: relative to the same place."""
    try:
        base = script.resolve().parent
        relative = os.path.relpath(path, base)
    except ValueError:
        return str(path)
    folder = os.path.dirname(script_display)
    return os.path.normpath(os.path.join(folder, relative)) if folder else relative


def _read(path: Path) -> str | None:
    raw = read_small(path)
    return raw.decode("utf-8", "replace") if raw is not None else None


def vendor_runtime(
    outcomes: Sequence[RewriteOutcome], sources: dict[str, Path]
) -> list[RewriteOutcome]:
    """The runtime package written next to each script the rewrite makes import it (Python
    looks in the script's own folder first), where that folder has none yet."""
    package = list(runtime_files(runtime_source()))
    created: dict[str, RewriteOutcome] = {}
    for outcome in outcomes:
        if not adds_runtime_import(outcome):
            continue
        script = sources.get(outcome.path, Path(outcome.path))
        if (script.parent / RUNTIME_MODULE).exists():
            continue
        folder = os.path.dirname(outcome.path)
        for relative, data in package:
            display = os.path.join(folder, RUNTIME_MODULE, relative)
            created[display] = RewriteOutcome(
                display, b"", data, created=True, why="the runtime, --runtime vendor"
            )
    return list(created.values())


def runtime_source() -> Path:
    """The runtime package's source: shipped inside the CLI's wheel (as data, for `--runtime
    vendor`), or at runtime/ in a source checkout."""
    packaged = resources.files("xlamigrate").joinpath("_runtime")
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / "runtime" / RUNTIME_MODULE


def runtime_files(source: Path) -> Iterator[tuple[str, bytes]]:
    """(relative path, bytes) of every file of the runtime package at `source`."""
    for folder, subfolders, files in os.walk(source):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = Path(folder) / name
            yield path.relative_to(source).as_posix(), path.read_bytes()
