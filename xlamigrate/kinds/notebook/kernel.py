"""The cells the kernel runs, as one Python module: they share one namespace, so a flag set in
one cell and a model built in another are one script. IPython's lines are masked line for line
(as comments; as `pass` where indented, so a block holding only `!cmd` stays valid), `%env`
becomes the `os.environ` access it is, and the module splits back into cells after a rewrite
with every masked line restored.

Each cell is checked alone first (Python's compiler, top-level `await` allowed as IPython does):
one that cannot be read is left out of the module, so the other cells are still checked.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from xlamigrate.kinds.notebook.escapes import LineEscape, escaped_lines, is_automagic
from xlamigrate.kinds.python.markers import TOOL_MARKER
from xlamigrate.nesting import nesting_error
from xlamigrate.results import FileError, FileResult, RewriteOutcome

_CELL_MARKER = TOOL_MARKER + "cell {index}"
_CELL_MARKER_RE = re.compile(r"^# xlamigrate-cell (\d+)\n?$")
_MAGIC = TOOL_MARKER + "magic {mark}"
_MAGIC_IN_BLOCK = "pass  " + _MAGIC  # an indented magic may be all its block holds
_MAGIC_RE = re.compile(r"^(?P<indent>[ \t]*)(?:pass  )?# xlamigrate-magic (?P<mark>\d+)\n?$")
_ENV_MARK = "  " + TOOL_MARKER + "env-magic {mark}"
_ENV_MARK_RE = re.compile(r"^(?P<indent>[ \t]*).*  # xlamigrate-env-magic (?P<mark>\d+)\n?$")
# Lets `%env` writes, turned into `os.environ[...]` writes, resolve to os.environ.
_HIDDEN_IMPORT = "import os  # xlamigrate-hidden\n"
_BLANK_LINES = re.compile(r"\A(?:[ \t]*\r?\n)+")  # at a cell's start
_FLAGS = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
_TOO_DEEP = "nesting too deep"
_PARSE = "could not parse: "
R = TypeVar("R", FileResult, RewriteOutcome)
_Unreadable = tuple[int, int | None, str]  # a cell, the line and why it cannot be read


@dataclass(frozen=True)
class Module:
    """The joined code, and what is needed to split it back."""

    code: str
    lines: tuple[tuple[int, int], ...]  # module line - 1 -> (cell, line in the cell; 0: marker)
    magics: Mapping[int, tuple[str, str]]  # mark -> the line it masks, and the mask's indent
    env_marks: frozenset[int]  # the marks of `%env` lines (a rewrite may replace those)

    def where(self, line: int) -> tuple[int, int] | None:
        """The cell and the line within it of a module line (None: the hidden import)."""
        if not 0 < line <= len(self.lines) or self.lines[line - 1][0] < 0:
            return None
        cell, within = self.lines[line - 1]
        return cell, max(within, 1)


def _masks(source: str, first_mark: int) -> tuple[list[str], dict[int, tuple[str, str]], set[int]]:
    """The cell as module lines (each with its newline), the masked lines by mark (a mark is
    the module line it is on, counting from `first_mark`) with the indentation their mask took,
    and the marks of `%env` lines."""
    lines = source.splitlines(keepends=True)
    python = [line if line.endswith("\n") else line + "\n" for line in lines]
    masked: dict[int, tuple[str, str]] = {}
    env: set[int] = set()
    for escaped in escaped_lines(lines):
        escape = escaped.escape
        for index in range(escaped.first, escaped.first + escaped.count):
            mark = first_mark + index
            masked[mark] = (lines[index], escape.indent)
            if escape.role == "env":
                python[index] = (
                    f"{escape.indent}{_env_access(escape)}{_ENV_MARK.format(mark=mark)}\n"
                )
                env.add(mark)
            else:
                mask = _MAGIC_IN_BLOCK if escape.indent else _MAGIC
                python[index] = f"{escape.indent}{mask.format(mark=mark)}\n"
    return python, masked, env


def _env_access(escape: LineEscape) -> str:
    if escape.value is None:
        return f"os.environ.get({escape.name!r})"
    return f"os.environ[{escape.name!r}] = {escape.value!r}"


def cell_code(source: str) -> str:
    """The cell as Python, line for line."""
    return "".join(_masks(source, 0)[0])


def syntax_problem(source: str) -> tuple[int | None, str] | None:
    """Why the cell cannot be read as Python, with the line (None: it can)."""
    code = cell_code(source)
    try:
        compile(code, "<cell>", "exec", flags=_FLAGS, dont_inherit=True)
    except SyntaxError as error:
        if "too many nested" in (error.msg or ""):
            return error.lineno, error.msg
        if _libcst_reads(code):  # syntax newer than this Python, which libcst reads
            return None
        return error.lineno or None, error.msg
    except (RecursionError, MemoryError):
        return None, _TOO_DEEP
    except ValueError as error:  # NUL bytes
        return None, str(error)
    return None


def _libcst_reads(code: str) -> bool:
    """Whether libcst parses `code`; only asked of code Python's own parser went through
    without running out of depth, so libcst's native parser cannot overflow its stack."""
    import libcst as cst  # (only for code Python's parser refused)

    try:
        cst.parse_module(code)
    except (cst.ParserSyntaxError, SyntaxError, ValueError, RecursionError):
        return False
    return True


def join(cells: Sequence[tuple[int, str]]) -> Module:
    """The cells (index, source) in order, each after a marker line."""
    lines: list[str] = [_HIDDEN_IMPORT]
    where: list[tuple[int, int]] = [(-1, 0)]
    magics: dict[int, tuple[str, str]] = {}
    env_marks: set[int] = set()
    for index, source in cells:
        lines.append(_CELL_MARKER.format(index=index) + "\n")
        where.append((index, 0))
        python, masked, env = _masks(source, len(lines) + 1)
        magics.update(masked)
        env_marks.update(env)
        where.extend((index, number) for number in range(1, len(python) + 1))
        lines.extend(python)
    return Module("".join(lines), tuple(where), magics, frozenset(env_marks))


def split(code: str, module: Module, originals: Mapping[int, str]) -> dict[int, str] | None:
    """The rewritten module back into cell sources, masked lines restored (at the indentation
    the rewrite gave them), each cell's final newline as it was, no blank line opening a cell
    that had none, new imports after the cell magics of the first cell (that is not a
    one-line magic). None when a masked line went missing (never write that)."""
    sources: dict[int, list[str]] = {}
    preamble: list[str] = []  # what the rewrite put above the first cell (imports)
    current: int | None = None
    restored: set[int] = set()
    for line in code.replace(_HIDDEN_IMPORT, "", 1).splitlines(keepends=True):
        cell = _CELL_MARKER_RE.match(line)
        if cell:
            current = int(cell.group(1))
            sources.setdefault(current, [])
            continue
        masked = _MAGIC_RE.match(line) or _ENV_MARK_RE.match(line)
        if masked and int(masked["mark"]) in module.magics:
            mark = int(masked["mark"])
            restored.add(mark)
            original, indent = module.magics[mark]
            if mark in module.env_marks:
                original = _with_new_value(line, original)
            line = _reindented(original, indent, masked["indent"])
            line = line if line.endswith("\n") else line + "\n"  # code may follow it now
        if current is None:
            preamble.append(line)
        else:
            sources[current].append(line)
    if set(module.magics) - module.env_marks - restored:
        return None
    result = {}
    for index, lines in sources.items():
        text = "".join(lines)
        original = originals.get(index, "")
        if text.endswith("\n") and not original.endswith("\n"):
            text = text[:-1]
        if not _BLANK_LINES.match(original):  # (a removed first line's place is taken)
            text = _BLANK_LINES.sub("", text, count=1)
        result[index] = text
    uses_os = any("os.environ" in text and text != originals.get(i) for i, text in result.items())
    imports_os = any(re.search(r"^\s*import os\b", text, re.M) for text in result.values())
    if uses_os and not imports_os:
        preamble.insert(0, "import os\n")
    if preamble and result:
        first = min(
            (index for index in result if not is_automagic(originals.get(index, ""))),
            default=min(result),
        )
        result[first] = at_top(result[first], "".join(preamble))
    return result


def _with_new_value(python: str, original: str) -> str:
    """A `%env NAME=VALUE` line with the value the rewrite gave the write it stood for (a
    NEURON_CC_FLAGS merge), or as it was."""
    code = python.split(_ENV_MARK.format(mark=""), 1)[0].strip()
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return original
    statement = tree.body[0] if len(tree.body) == 1 else None
    value = statement.value if isinstance(statement, ast.Assign) else None
    if not isinstance(value, ast.Constant) or not isinstance(value.value, str):
        return original
    escaped = escaped_lines([original])
    old = escaped[0].escape.value if escaped else None
    text = original.rstrip("\r\n")
    if old is None or value.value == old or not text.endswith(old):
        return original
    return text[: len(text) - len(old)] + value.value + original[len(text) :]


def _reindented(line: str, indent: str, now: str) -> str:
    """A masked line as it was, moved with its mask if the rewrite moved that (into a block)."""
    return now + line[len(indent) :] if now != indent and line.startswith(indent) else line


_LEADING_CELL_MAGICS = re.compile(r"(?:[ \t\r\n]*%%[^\n]*(?:\n|$))*")


def at_top(source: str, text: str) -> str:
    """`text` put at the top of a cell: after its cell magics, which must stay first."""
    end = _LEADING_CELL_MAGICS.match(source)
    at = end.end() if end else 0
    if at and not source[:at].endswith("\n"):
        return source + "\n" + text
    return source[:at] + text + source[at:]


# -- running the engine on the module ----------------------------------------------------------


@dataclass(frozen=True)
class Kernel(Generic[R]):
    """What the Python engine made of the kernel's readable cells, and the unreadable ones."""

    module: Module
    originals: dict[int, str]  # the joined cells' sources
    result: R | None  # None: no joined cell names a flag
    broken: tuple[tuple[int, FileError], ...]  # (cell, error) for each cell left out

    @property
    def broken_cells(self) -> frozenset[int]:
        return frozenset(cell for cell, _ in self.broken)


def run_kernel(
    path: str, cells: Sequence[tuple[int, str]], flags: Collection[str], run: Callable[[bytes], R]
) -> Kernel[R]:
    """The readable cells (index, source) joined, through `run` (the Python engine). A cell the
    engine cannot read after all (libcst is stricter than Python's compiler in corners, and
    deep nesting only shows in the whole) is left out in turn, and the rest run again."""
    readable: list[tuple[int, str]] = []
    broken: list[tuple[int, FileError]] = []
    for index, source in cells:
        problem = syntax_problem(source)
        if problem is None:
            readable.append((index, source))
        else:
            broken.append((index, _cell_error(path, index, *problem)))
    while True:
        module = join(readable)
        originals = dict(readable)
        if not any(flag in source for _, source in readable for flag in flags):
            return Kernel(module, originals, None, tuple(broken))
        unreadable = _too_deep(path, module, readable)
        if not unreadable:
            result = run(module.code.encode("utf-8"))
            unreadable = _unparsed(module, result.errors)
            if not unreadable:
                return Kernel(module, originals, result, tuple(broken))
        broken.extend(
            (index, _cell_error(path, index, line, why)) for index, line, why in unreadable
        )
        gone = {index for index, _, _ in unreadable}
        readable = [(index, source) for index, source in readable if index not in gone]


def _cell_error(path: str, cell: int, line: int | None, message: str) -> FileError:
    return FileError(path, line, f"cell {cell}: {_PARSE}{message}")


def _too_deep(path: str, module: Module, readable: list[tuple[int, str]]) -> list[_Unreadable]:
    """The cells nested too deep for libcst (checked one by one only when the module is)."""
    if nesting_error(path, module.code.encode("utf-8")) is None:
        return []
    found: list[_Unreadable] = []
    for index, source in readable:
        error = nesting_error(path, cell_code(source).encode("utf-8"))
        if error is not None:
            found.append((index, error.line, error.message.removeprefix(_PARSE)))
    return found or [(index, None, _TOO_DEEP) for index, _ in readable]


def _unparsed(module: Module, errors: Sequence[FileError]) -> list[_Unreadable]:
    """The cells the engine's parse errors are in."""
    found: list[_Unreadable] = []
    for error in errors:
        at = module.where(error.line) if error.line is not None else None
        if at is not None and error.message.startswith(_PARSE):
            found.append((at[0], at[1], error.message.removeprefix(_PARSE)))
    return found
