"""Jupyter notebooks, cell by cell. The cells the kernel runs go through the Python engine as one
module (`kernel.py`); a cell magic decides what any other cell is (`magics.py`): the Python file
`%%writefile train.py` writes is a module of its own, `%%bash` and `!cmd` lines go through the
shell engine (`shell.py`), a cell xlamigrate does not read is skipped, and a flag it names is
still reported. A cell that cannot be read is an error naming it; every other cell is still
checked and rewritten. Findings carry the cell and the line within it.

Rewrites change only the cells that need it, and only Python: shell commands start processes of
their own; a cell the rewrite empties goes. The notebook is written back in Jupyter's own JSON
layout; one in another layout is not rewritten.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from xlamigrate import kinds
from xlamigrate.apitable import api_table
from xlamigrate.catalogue import Catalogue
from xlamigrate.findings import with_note
from xlamigrate.kinds.notebook.document import Notebook, code_sources, dump, load, set_source
from xlamigrate.kinds.notebook.kernel import Kernel, R, join, run_kernel, split
from xlamigrate.kinds.notebook.magics import CellRole, cell_role
from xlamigrate.kinds.notebook.mentions import NOT_READ, line_magics, mentions
from xlamigrate.kinds.notebook.place import Where, in_file, placed
from xlamigrate.kinds.notebook.shell import launched_scripts, scan_shell, shell_slices
from xlamigrate.request import DEFAULT_MODE, FileContext, FileTask, RewriteRequest
from xlamigrate.results import FileError, FileResult, Finding, Fix, RewriteOutcome

_LOST_MAGIC = (
    "not rewritten: the rewrite would lose a magic line of a cell (apply the findings by hand)"
)
_NOT_UTF8 = "not rewritten: its coding cookie names an encoding a notebook cannot hold"
_NOT_JUPYTER = (
    "not rewritten: the notebook is not in Jupyter's JSON layout (open and save it in "
    "Jupyter first, or apply the findings by hand)"
)


@dataclass(frozen=True)
class _Cell:
    index: int
    source: str
    role: CellRole

    def body(self) -> bytes:
        return self.source[self.role.body :].encode("utf-8")

    def where(self, line: int) -> tuple[int, int]:
        """A line of the cell's body as a line of the cell."""
        return self.index, line + self.role.body_line - 1


@dataclass
class _Collected:
    """What the parts of one notebook found; `found` is the findings of a scan, or what a
    rewrite leaves for manual work."""

    fixed: list[Finding] = field(default_factory=list)
    found: list[Finding] = field(default_factory=list)
    errors: list[tuple[int, FileError]] = field(default_factory=list)  # (cell or -1, error)
    sources: dict[int, str] = field(default_factory=dict)  # cell -> its new source

    def error(self, error: FileError, where: Where, cell: int | None = None) -> None:
        """An error of a part, named by the cell it is in."""
        at = where(error.line) if error.line is not None else None
        if at is not None:
            cell, line = at
            error = replace(error, line=line)
        if cell is not None:
            error = replace(error, message=f"cell {cell}: {error.message}")
        self.errors.append((-1 if cell is None else cell, error))

    def sorted_errors(self) -> tuple[FileError, ...]:
        ordered = sorted(self.errors, key=lambda pair: (pair[0], pair[1].line or 0))
        return tuple(error for _, error in ordered)


def scan_notebook(task: FileTask) -> FileResult:
    """(The task's context: a notebook is never a launched script or a module one imports.)"""
    from xlamigrate.kinds.python.scan import scan_python

    path, data, catalogue, enabled = task.path, task.data, task.catalogue, task.enabled
    notebook = load(path, data)
    if isinstance(notebook, FileError):
        return FileResult(path, errors=(notebook,))
    cells, collected = _cells(notebook), _Collected()
    mode = task.context.mode if task.context is not None else DEFAULT_MODE
    kernel_context = FileContext(children=_children(cells), mode=mode)

    def run(code: bytes) -> FileResult:
        return scan_python(FileTask(path, code, catalogue, enabled, kernel_context))

    kernel = _kernel(path, cells, catalogue, collected, run)
    if kernel.result is not None:
        collected.found.extend(placed(f, kernel.module.where) for f in kernel.result.findings)
        for error in kernel.result.errors:
            collected.error(error, kernel.module.where)
    for cell in cells:
        if _python_text(cell):
            if not _names_a_flag(cell, catalogue):
                continue
            result = kinds.load("python").scan(FileTask(path, cell.body(), catalogue, enabled))
            collected.found.extend(placed(f, cell.where) for f in result.findings)
            for error in result.errors:
                collected.error(error, cell.where, cell.index)
        elif cell.index not in kernel.broken_cells:
            _reported_only(path, cell, catalogue, enabled, collected)
    findings = in_file(data, collected.found)
    return FileResult(path, findings=findings, errors=collected.sorted_errors())


def rewrite_notebook(task: FileTask, request: RewriteRequest) -> RewriteOutcome:
    """The kernel's cells as one script; shell cells are reported, not edited (their launches
    are not followed yet, so the task's context has nothing for them)."""
    from xlamigrate.kinds.python.rewrite import rewrite_python

    path, data, catalogue, enabled = task.path, task.data, task.catalogue, task.enabled
    notebook = load(path, data)
    if isinstance(notebook, FileError):
        return RewriteOutcome(path, data, None, errors=(notebook,))
    cells, collected = _cells(notebook), _Collected()
    context = FileContext(children=_children(cells))
    every_cell = join(_kernel_sources(cells)).code.encode("utf-8")

    def run(code: bytes) -> RewriteOutcome:
        """The kernel's rewrite; where a cell was left out (unreadable), imports stay: that
        cell may use one the others no longer do."""
        chosen = request if code == every_cell else replace(request, keep_imports=True)
        return rewrite_python(FileTask(path, code, catalogue, enabled, context), chosen)

    kernel = _kernel(path, cells, catalogue, collected, run)
    if kernel.result is not None:
        _kernel_rewrite(path, kernel, collected)
    for cell in cells:
        if _python_text(cell):
            if not _names_a_flag(cell, catalogue):
                continue
            cell_task = FileTask(path, cell.body(), catalogue, enabled)
            outcome = kinds.load("python").rewrite(cell_task, request)
            _text_rewrite(path, cell, outcome, collected)
        elif cell.index not in kernel.broken_cells:
            _reported_only(path, cell, catalogue, enabled, collected)
    fixed = in_file(data, collected.fixed)
    remaining = in_file(data, collected.found)
    errors = collected.sorted_errors()
    if not collected.sources:
        return RewriteOutcome(path, data, None, fixed, remaining, errors)
    if dump(notebook) != data:
        error = FileError(path, None, _NOT_JUPYTER)
        return RewriteOutcome(path, data, None, (), remaining, (*errors, error))
    for index, source in collected.sources.items():
        set_source(notebook["cells"][index], source)
    emptied = _emptied(cells, collected.sources)
    notebook["cells"] = [cell for i, cell in enumerate(notebook["cells"]) if i not in emptied]
    return RewriteOutcome(path, data, dump(notebook), fixed, remaining, errors)


def _cells(notebook: Notebook) -> list[_Cell]:
    return [_Cell(index, source, cell_role(source)) for index, source in code_sources(notebook)]


def _emptied(cells: list[_Cell], sources: dict[int, str]) -> set[int]:
    """The cells the rewrite left with nothing in them (a cell of `%env XLA_USE_BF16=1`, of a
    write and the import it used): they go, as the lines did. One empty before stays."""
    return {
        cell.index
        for cell in cells
        if cell.source.strip() and not sources.get(cell.index, cell.source).strip()
    }


def _kernel(
    path: str,
    cells: list[_Cell],
    catalogue: Catalogue,
    collected: _Collected,
    run: Callable[[bytes], R],
) -> Kernel[R]:
    """The kernel's cells through `run`; the cells it could not read are errors."""
    kernel = run_kernel(path, _kernel_sources(cells), _python_words(catalogue), run)
    collected.errors.extend(kernel.broken)
    return kernel


def _kernel_sources(cells: list[_Cell]) -> list[tuple[int, str]]:
    return [(cell.index, cell.source) for cell in cells if cell.role.role == "python"]


def _children(cells: list[_Cell]) -> tuple[str, ...]:
    """The scripts the notebook's shell lines and cells start (they inherit the kernel's
    environment, `%env` included)."""
    return launched_scripts([(cell.source, cell.role) for cell in cells])


def _python_text(cell: _Cell) -> bool:
    """A Python file of its own: what `%%writefile train.py` writes, what `%%python` runs."""
    return cell.role.role == "text" and cell.role.kind == "python"


def _names_a_flag(cell: _Cell, catalogue: Catalogue) -> bool:
    """Whether the cell's Python may have a finding: a flag's name, or a torch-xla API's."""
    body = cell.source[cell.role.body :]
    return any(word in body for word in _python_words(catalogue))


def _python_words(catalogue: Catalogue) -> tuple[str, ...]:
    """What Python code with a finding names: a flag, or a torch-xla API of the table."""
    return (*catalogue.flags, *sorted(api_table().last_names))


def _kernel_rewrite(path: str, kernel: Kernel[RewriteOutcome], collected: _Collected) -> None:
    outcome = kernel.result
    assert outcome is not None
    where = kernel.module.where
    fixed = [placed(f, where) for f in outcome.fixed]
    collected.found.extend(placed(f, where) for f in outcome.remaining)
    for error in outcome.errors:
        collected.error(error, where)
    sources = None
    if outcome.rewritten is not None and outcome.changed:
        sources = split(outcome.rewritten.decode("utf-8"), kernel.module, kernel.originals)
        if sources is None:
            collected.errors.append((-1, FileError(path, None, _LOST_MAGIC)))
            collected.found.extend(fixed)
            return
    collected.fixed.extend(fixed)
    for index, source in (sources or {}).items():
        if source != kernel.originals.get(index):
            collected.sources[index] = source


# -- cells read alone ---------------------------------------------------------------------------


def _text_rewrite(path: str, cell: _Cell, outcome: RewriteOutcome, collected: _Collected) -> None:
    """A Python file's cell (`%%writefile train.py`, `%%python`), rewritten as that file."""
    fixed = [placed(f, cell.where) for f in outcome.fixed]
    collected.found.extend(placed(f, cell.where) for f in outcome.remaining)
    for error in outcome.errors:
        collected.error(error, cell.where, cell.index)
    if outcome.rewritten is not None and outcome.changed:
        try:
            body = outcome.rewritten.decode("utf-8")
        except UnicodeDecodeError:  # a coding cookie made libcst write another encoding
            collected.error(FileError(path, None, _NOT_UTF8), cell.where, cell.index)
            collected.found.extend(fixed)
            return
        collected.sources[cell.index] = cell.source[: cell.role.body] + body
    collected.fixed.extend(fixed)


_NOT_REWRITTEN = (
    "a notebook's shell lines and written files are reported, not rewritten: give the script"
    " it starts the recipe by hand (or move the launch into a launcher script, which"
    " `xlamigrate rewrite` migrates with its script), then edit this line"
)


def _by_hand(finding: Finding) -> Finding:
    """A finding of a cell the rewrite leaves as it is: whatever its fix, it is done by hand."""
    if finding.fix is None or finding.fix.applicability == "manual":
        return finding
    return replace(finding, message=with_note(finding.message, _NOT_REWRITTEN), fix=Fix("manual"))


def _reported_only(
    path: str, cell: _Cell, catalogue: Catalogue, enabled: frozenset[str], collected: _Collected
) -> None:
    """What a cell that is not rewritten names: shell texts, files of other kinds, the flags
    in a cell or line magic xlamigrate does not read."""
    role = cell.role
    if role.role == "skipped":
        stretch = (role.body, len(cell.source), NOT_READ.format(magic=role.magic))
        collected.found.extend(
            mentions(path, cell.index, cell.source, [stretch], catalogue, enabled)
        )
        return
    if role.role == "text" and role.kind != "shell":
        assert role.kind is not None
        result = kinds.load(role.kind).scan(FileTask(path, cell.body(), catalogue, enabled))
        collected.found.extend(placed(_by_hand(f), cell.where) for f in result.findings)
        for error in result.errors:
            collected.error(error, cell.where, cell.index)
        return
    slices = shell_slices(cell.source, role)
    if slices:
        result = scan_shell(path, cell.source, slices, catalogue, enabled)
        index = cell.index
        collected.found.extend(
            placed(_by_hand(f), lambda line: (index, line)) for f in result.findings
        )
        for error in result.errors:
            collected.error(error, lambda line: (index, line), index)
    if role.role == "python":
        stretches = line_magics(cell.source)
        collected.found.extend(
            mentions(path, cell.index, cell.source, stretches, catalogue, enabled)
        )
