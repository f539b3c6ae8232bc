"""Jupyter notebooks: code cells go through the Python engine as one module (a flag set in one
cell and a model built in another are one script), `%env`/`%set_env` magics as the Python writes
they are, `!X=1 cmd` lines and `%%bash` cells through the shell engine. Findings carry the cell
index and the line within the cell. Rewrites change only the cells that need it; the notebook
is written back in Jupyter's own JSON layout, and one in another layout is not rewritten.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from xlamigrate.catalogue import Catalogue
from xlamigrate.kinds.notebook.lines import source_file_lines
from xlamigrate.model import FileError, FileResult, Finding, RewriteOutcome, Span
from xlamigrate.nesting import nesting_error

_CELL_MARKER = "# xlamigrate-cell {index}"
_CELL_MARKER_RE = re.compile(r"^# xlamigrate-cell (\d+)\n?$")
_MAGIC = "# xlamigrate-magic {index}"
_MAGIC_RE = re.compile(r"^(?P<indent>[ \t]*)# xlamigrate-magic (?P<index>\d+)\n?$")
_ENV_MAGIC = re.compile(
    r"^(?P<indent>[ \t]*)%(?:env|set_env)[ \t]+(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"(?:[ \t]*=[ \t]*|[ \t]+)(?P<value>.*?)[ \t]*$"
)
_ENV_WRITE_MARK = "  # xlamigrate-env-magic {index}"
_SHELL_CELL = re.compile(r"^%%(?:bash|sh|script (?:ba)?sh)\b")
# Lets `%env` writes, turned into `os.environ[...]` writes, resolve to os.environ.
_HIDDEN_IMPORT = "import os  # xlamigrate-hidden\n"


@dataclass
class _Module:
    """The code cells joined into one Python module, with what is needed to split it back."""

    code: str
    line_to_cell: list[tuple[int, int]] = field(default_factory=list)  # module line -> (cell, line)
    magics: dict[int, str] = field(default_factory=dict)  # masked line number -> original line
    shell_cells: list[int] = field(default_factory=list)


def _source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _load(path: str, data: bytes) -> dict[str, Any] | FileError:
    try:
        notebook = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        line = getattr(error, "lineno", None)
        return FileError(path, line, f"could not read the notebook: {error}")
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        return FileError(path, None, "could not read the notebook: no list of cells")
    for index, cell in enumerate(notebook["cells"]):
        if not isinstance(cell, dict):
            return FileError(
                path, None, f"could not read the notebook: cell {index} is not an object"
            )
        source = cell.get("source", "")
        if not isinstance(source, str) and not (
            isinstance(source, list) and all(isinstance(part, str) for part in source)
        ):
            return FileError(
                path,
                None,
                f"could not read the notebook: the source of cell {index} is not text "
                "(a string or a list of strings)",
            )
    return notebook


def _join(notebook: dict[str, Any]) -> _Module:
    lines: list[str] = [_HIDDEN_IMPORT]
    module = _Module("", line_to_cell=[(-1, 0)])
    for index, cell in enumerate(notebook["cells"]):
        if cell.get("cell_type") != "code":
            continue
        source = _source(cell)
        if _SHELL_CELL.match(source):
            module.shell_cells.append(index)
            continue
        lines.append(_CELL_MARKER.format(index=index) + "\n")
        module.line_to_cell.append((index, 0))
        for number, line in enumerate(source.splitlines(keepends=True), start=1):
            module.line_to_cell.append((index, number))
            stripped = line.lstrip()
            env = _ENV_MAGIC.match(line.rstrip("\r\n"))
            if env:
                mark = len(lines) + 1
                module.magics[mark] = line
                lines.append(
                    f"{env['indent']}os.environ[{env['name']!r}] = "
                    f"{env['value']!r}{_ENV_WRITE_MARK.format(index=mark)}\n"
                )
            elif stripped.startswith(("%", "!")):
                mark = len(lines) + 1
                module.magics[mark] = line
                indent = line[: len(line) - len(stripped)]
                lines.append(f"{indent}{_MAGIC.format(index=mark)}\n")
            else:
                lines.append(line if line.endswith("\n") else line + "\n")
    module.code = "".join(lines)
    return module


def _locate(module: _Module, finding: Finding) -> Finding:
    """A module finding as a notebook one: the cell and the line within it."""
    index = finding.span.line - 1
    if not 0 < index < len(module.line_to_cell):
        return finding
    cell, line = module.line_to_cell[index]
    end = module.line_to_cell[min(finding.span.end_line - 1, len(module.line_to_cell) - 1)]
    end_line = end[1] if end[0] == cell else line
    span = Span(line, finding.span.column, end_line, finding.span.end_column)
    message = _LINE_REFERENCE.sub(lambda match: _cell_line(module, match), finding.message)
    return replace(finding, span=span, cell=cell, message=message)


# A read's message names the line of the write it depends on (findings._subject).
_LINE_REFERENCE = re.compile(r"; line (\d+) sets it to ")


def _cell_line(module: _Module, match: re.Match[str]) -> str:
    index = int(match.group(1)) - 1
    if not 0 < index < len(module.line_to_cell):
        return match.group(0)
    cell, line = module.line_to_cell[index]
    return f"; cell {cell} line {line} sets it to "


def scan_notebook(
    path: str, data: bytes, catalogue: Catalogue, enabled: frozenset[str]
) -> FileResult:
    from xlamigrate.kinds.python.scan import scan_python

    notebook = _load(path, data)
    if isinstance(notebook, FileError):
        return FileResult(path, errors=(notebook,))
    module = _join(notebook)
    code = module.code.encode("utf-8")
    too_deep = nesting_error(path, code)
    result = (
        FileResult(path, errors=(too_deep,))
        if too_deep is not None
        else scan_python(path, code, catalogue, enabled)
    )
    findings = [_locate(module, f) for f in result.findings]
    errors = [_locate_error(module, e) for e in result.errors]
    shell_findings, shell_errors = _scan_shell(path, notebook, module, catalogue, enabled)
    found = _in_file(data, [*findings, *shell_findings])
    return FileResult(path, findings=found, errors=tuple(errors + shell_errors))


def _in_file(data: bytes, findings: list[Finding]) -> tuple[Finding, ...]:
    """Sorted, each with the line of the .ipynb file its cell line is written on."""
    if not findings:
        return ()
    lines = source_file_lines(data.decode("utf-8"))
    placed = [
        replace(f, file_line=lines.get(f.cell, {}).get(f.span.line)) if f.cell is not None else f
        for f in findings
    ]
    return tuple(sorted(placed, key=lambda f: f.sort_key))


def _locate_error(module: _Module, error: FileError) -> FileError:
    if error.line is None or not 0 < error.line <= len(module.line_to_cell):
        return error
    cell, line = module.line_to_cell[error.line - 1]
    return replace(error, line=line, message=f"cell {cell}: {error.message}")


def _shell_sources(notebook: dict[str, Any], module: _Module) -> list[tuple[int, str, int]]:
    """(cell, shell text, first line) for `%%bash` cells and `!cmd` lines."""
    sources = []
    for index in module.shell_cells:
        body = _source(notebook["cells"][index]).split("\n", 1)
        sources.append((index, body[1] if len(body) > 1 else "", 2))
    for mark, line in module.magics.items():
        stripped = line.lstrip()
        if stripped.startswith("!"):
            cell, number = module.line_to_cell[mark - 1]
            sources.append((cell, stripped[1:], number))
    return sources


def _scan_shell(
    path: str,
    notebook: dict[str, Any],
    module: _Module,
    catalogue: Catalogue,
    enabled: frozenset[str],
) -> tuple[list[Finding], list[FileError]]:
    from xlamigrate.kinds.shell import KIND as SHELL
    from xlamigrate.kinds.textscan import scan_text

    findings: list[Finding] = []
    errors: list[FileError] = []
    for cell, text, first_line in _shell_sources(notebook, module):
        if not any(flag in text for flag in catalogue.flags):
            continue
        result = scan_text(path, text.encode("utf-8"), SHELL, catalogue, enabled)
        for finding in result.findings:
            span = finding.span
            shifted = Span(
                span.line + first_line - 1,
                span.column,
                span.end_line + first_line - 1,
                span.end_column,
            )
            findings.append(replace(finding, span=shifted, cell=cell))
        errors.extend(replace(e, message=f"cell {cell}: {e.message}") for e in result.errors)
    return findings, errors


def rewrite_notebook(
    path: str,
    data: bytes,
    catalogue: Catalogue,
    enabled: frozenset[str],
    mode: str,
    unsafe_fixes: bool = False,
) -> RewriteOutcome:
    from xlamigrate.kinds.python.rewrite import rewrite_python

    notebook = _load(path, data)
    if isinstance(notebook, FileError):
        return RewriteOutcome(path, data, None, errors=(notebook,))
    module = _join(notebook)
    code = module.code.encode("utf-8")
    too_deep = nesting_error(path, code)
    if too_deep is not None:
        return RewriteOutcome(path, data, None, errors=(_locate_error(module, too_deep),))
    outcome = rewrite_python(path, code, catalogue, enabled, mode, unsafe_fixes)
    fixed = _in_file(data, [_locate(module, f) for f in outcome.fixed])
    remaining = [_locate(module, f) for f in outcome.remaining]
    shell_findings, shell_errors = _scan_shell(path, notebook, module, catalogue, enabled)
    remaining.extend(shell_findings)  # launched commands and %%bash cells: reported, not rewritten
    remaining_sorted = _in_file(data, remaining)
    errors = tuple(_locate_error(module, e) for e in outcome.errors) + tuple(shell_errors)
    if outcome.rewritten is None or not outcome.changed:
        return RewriteOutcome(path, data, None, fixed, remaining_sorted, errors)
    if _dump(notebook) != data:
        error = FileError(
            path,
            None,
            "not rewritten: the notebook is not in Jupyter's JSON layout (open and save it in "
            "Jupyter first, or apply the findings by hand)",
        )
        return RewriteOutcome(path, data, None, (), remaining_sorted, (*errors, error))
    originals = {index: _source(notebook["cells"][index]) for index, _ in module.line_to_cell[1:]}
    sources = _split(outcome.rewritten.decode("utf-8"), module, originals)
    for index, source in sources.items():
        cell = notebook["cells"][index]
        if source != _source(cell):
            lines = source.splitlines(keepends=True)
            cell["source"] = lines if isinstance(cell.get("source"), list) else source
    return RewriteOutcome(path, data, _dump(notebook), fixed, remaining_sorted, errors)


def _split(code: str, module: _Module, originals: dict[int, str]) -> dict[int, str]:
    """The rewritten module back into cell sources, magics restored, each cell's final newline
    as it was; `import os` is added to the first cell if new code needs it and no cell has it."""
    sources: dict[int, list[str]] = {}
    current: int | None = None
    code = code.replace(_HIDDEN_IMPORT, "", 1)
    env_marks = re.compile(r"^.*" + re.escape(_ENV_WRITE_MARK.format(index="")) + r"(\d+)\n?$")
    for line in code.splitlines(keepends=True):
        cell = _CELL_MARKER_RE.match(line)
        if cell:
            current = int(cell.group(1))
            sources.setdefault(current, [])
            continue
        if current is None:  # imports the rewrite put above the first cell
            first = min(index for index, _ in module.line_to_cell[1:])
            sources.setdefault(first, []).append(line)
            continue
        magic = _MAGIC_RE.match(line)
        env = env_marks.match(line)
        if magic:
            line = module.magics[int(magic.group("index"))]
        elif env:
            line = module.magics[int(env.group(1))]
        sources[current].append(line)
    result = {}
    for index, lines in sources.items():
        text = "".join(lines)
        if text.endswith("\n") and not originals.get(index, "").endswith("\n"):
            text = text[:-1]
        result[index] = text
    uses_os = any("os.environ" in text and text != originals.get(i) for i, text in result.items())
    imports_os = any(re.search(r"^\s*import os\b", text, re.M) for text in result.values())
    if uses_os and not imports_os and result:
        first = min(result)
        result[first] = "import os\n" + result[first]
    return result


def _dump(notebook: dict[str, Any]) -> bytes:
    """Jupyter's layout (nbformat.writes): one-space indent, sorted keys, UTF-8, final newline."""
    return (json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()
