"""Notebooks cell by cell: the cells the kernel runs are one script, cell magics say what any
other cell is (a Python file of its own, shell, or text xlamigrate does not read), a cell that
cannot be read is reported with its number while the others are still checked and rewritten,
and only the cells that need it change."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests import snapshots
from tests.conftest import FIXTURES, PRECISION_IGNORE
from xlamigrate.catalogue import Catalogue
from xlamigrate.engine import rewrite_source, scan_source
from xlamigrate.kinds.notebook.magics import CellRole, cell_role
from xlamigrate.kinds.python.rewrite import MODES
from xlamigrate.results import FileResult, RewriteOutcome

NOTEBOOK = "env_magic_notebook"


@pytest.mark.parametrize("mode", MODES)
def test_rewritten_notebooks_are_valid_and_change_only_the_cells_that_need_it(mode: str) -> None:
    before = nbformat.read(snapshots.case_input(NOTEBOOK), as_version=4)
    after = nbformat.reads(snapshots.rewritten(NOTEBOOK, mode).decode(), as_version=4)
    nbformat.validate(after)
    assert len(before.cells) == len(after.cells)
    changed = [i for i, (a, b) in enumerate(zip(before.cells, after.cells, strict=True)) if a != b]
    assert changed and all(before.cells[i].cell_type == "code" for i in changed)
    assert before.cells[0] == after.cells[0]  # markdown untouched
    assert before.cells[4].outputs == after.cells[4].outputs  # outputs kept
    assert before.metadata == after.metadata
    assert all("XLA_USE_BF16" not in "".join(cell.source) for cell in after.cells[1:])


def test_the_flag_set_in_one_cell_drives_the_recipe_in_later_cells() -> None:
    after = nbformat.reads(snapshots.rewritten(NOTEBOOK, "full-bf16").decode(), as_version=4)
    assert "model.to(torch.bfloat16)" in after.cells[3].source
    wrapped = nbformat.reads(snapshots.rewritten(NOTEBOOK, "autocast").decode(), as_version=4)
    assert "with torch.autocast(" in wrapped.cells[4].source


def test_a_notebook_outside_jupyters_layout_is_reported_not_rewritten(
    catalogue: Catalogue,
) -> None:
    source = snapshots.case_input(NOTEBOOK).read_bytes()
    compact = json.dumps(json.loads(source)).encode()  # valid, but not Jupyter's layout
    outcome = rewrite_source(
        "nb.ipynb", compact, "notebook", catalogue, frozenset(catalogue.rules), "full-bf16"
    )
    assert outcome.rewritten is None
    assert any("Jupyter's JSON layout" in error.message for error in outcome.errors)


def test_a_broken_notebook_is_an_error_not_a_crash(catalogue: Catalogue) -> None:
    result = scan_source(
        "nb.ipynb", b'{"cells": [XLA_USE_BF16', "notebook", catalogue, frozenset(catalogue.rules)
    )
    assert result.findings == () and len(result.errors) == 1
    assert "could not read the notebook" in result.errors[0].message


def test_notebook_findings_carry_the_cell_in_json_and_sarif(tmp_path: Path) -> None:
    notebook = snapshots.case_input("notebook_cells")
    (tmp_path / "cells.ipynb").write_bytes(notebook.read_bytes())
    outputs = {}
    for fmt in ("json", "sarif", "text"):
        outputs[fmt] = subprocess.run(
            [sys.executable, "-m", "xlamigrate.cli", "scan", ".", "-f", fmt],
            cwd=tmp_path, capture_output=True, text=True,
        )  # fmt: skip
        assert outputs[fmt].returncode == 1, outputs[fmt].stderr
    findings = json.loads(outputs["json"].stdout)["findings"]
    assert [(f["cell"], f["line"], f["code"]) for f in findings] == [
        # (XM401: why the write is kept, as its message says)
        (1, 3, "XM102"), (1, 3, "XM401"), (2, 1, "XM101"), (2, 2, "XM201"),
    ]  # fmt: skip
    results = json.loads(outputs["sarif"].stdout)["runs"][0]["results"]
    assert [r["properties"]["cell"] for r in results] == [1, 1, 2, 2]
    assert outputs["text"].stdout.startswith("cells.ipynb:cell-1:3:1: XM102")


# -- where cell lines sit in the .ipynb file ------------------------------------------------------


def test_source_file_lines_maps_each_cell_line_to_its_json_string() -> None:
    from xlamigrate.kinds.notebook.lines import source_file_lines

    text = (
        '{\n "cells": [\n  {\n   "cell_type": "code",\n   "metadata": {"source": "x"},\n'
        '   "source": [\n    "a = 1\\n",\n    "b = 2\\nc = 3\\n",\n    "d"\n   ]\n  },\n'
        '  {"cell_type": "code", "source": "one\\ntwo"}\n ],\n "metadata": {}\n}\n'
    )
    assert source_file_lines(text) == {
        0: {1: 7, 2: 8, 3: 8, 4: 9},  # "b = 2\nc = 3\n" is one JSON string: lines 2 and 3
        1: {1: 12, 2: 12},  # a source given as one string: every line on its line
    }


def test_source_file_lines_ignores_sources_outside_the_cells() -> None:
    from xlamigrate.kinds.notebook.lines import source_file_lines

    text = '{"metadata": {"cells": [{"source": ["x"]}]}, "cells": [{"source": ["y\\n"]}]}'
    assert source_file_lines(text) == {0: {1: 1}}


def test_a_reads_message_names_the_cell_and_line_of_the_write(catalogue: Catalogue) -> None:
    path = snapshots.case_input("notebook_cells")
    enabled = catalogue.select((), ())
    result = scan_source("nb.ipynb", path.read_bytes(), "notebook", catalogue, enabled)
    (read,) = [f for f in result.findings if f.code == "XM201"]
    assert "; cell 2 line 1 sets it to " in read.message  # not the joined module's line 7


# -- building notebooks for the tests below --------------------------------------------------------


def notebook(*sources: str) -> bytes:
    """A notebook in Jupyter's own layout (so that a rewrite may write it), one code cell each."""
    cells: list[dict[str, Any]] = [
        {
            "cell_type": "code",
            "execution_count": None,
            "id": f"cell{index}",
            "metadata": {},
            "outputs": [],
            "source": source.splitlines(keepends=True),
        }
        for index, source in enumerate(sources)
    ]
    document = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    return (json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def scan(catalogue: Catalogue, *sources: str) -> FileResult:
    return scan_source(
        "nb.ipynb", notebook(*sources), "notebook", catalogue, precision_rules(catalogue)
    )


def rewrite(catalogue: Catalogue, *sources: str, mode: str = "full-bf16") -> RewriteOutcome:
    data = notebook(*sources)
    return rewrite_source("nb.ipynb", data, "notebook", catalogue, precision_rules(catalogue), mode)


def precision_rules(catalogue: Catalogue) -> frozenset[str]:
    """The precision migration's rules: the notebooks here (and their fixtures) specify it."""
    return catalogue.select((), PRECISION_IGNORE)


def where(result: FileResult | RewriteOutcome) -> list[str]:
    """`cell:line:col CODE` of each finding (of a scan, or left by a rewrite)."""
    found = result.findings if isinstance(result, FileResult) else result.remaining
    return [f"{f.cell}:{f.span.line}:{f.span.column} {f.code}" for f in found]


def cells_after(outcome: RewriteOutcome) -> list[str]:
    assert outcome.rewritten is not None
    return ["".join(cell["source"]) for cell in json.loads(outcome.rewritten)["cells"]]


FLAG_WRITE = 'import os\nos.environ["XLA_USE_BF16"] = "1"\n'


# -- a cell that cannot be read ------------------------------------------------------------------

ERRORS = FIXTURES / "notebook_errors"
ERROR_CASES = snapshots.cases(snapshots.SCAN, folder=ERRORS)


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda case: case.name)
def test_a_cell_that_cannot_be_read_is_an_error_naming_it_and_the_others_are_scanned(
    case: Path, catalogue: Catalogue, update_snapshots: bool
) -> None:
    result = scan_source(
        case.name, case.read_bytes(), "notebook", catalogue, precision_rules(catalogue)
    )
    assert result.errors and all(e.message.startswith("cell ") for e in result.errors)
    produced = snapshots.scan_snapshot(result.findings, catalogue, result.errors)
    path = snapshots.snapshot_path(case.stem, snapshots.SCAN, ERRORS)
    snapshots.assert_matches(path, produced, update_snapshots)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda case: case.name)
def test_a_cell_that_cannot_be_read_is_kept_byte_for_byte_and_the_others_are_rewritten(
    case: Path, mode: str, catalogue: Catalogue, update_snapshots: bool
) -> None:
    source = case.read_bytes()
    enabled = precision_rules(catalogue)
    outcome = rewrite_source(case.name, source, "notebook", catalogue, enabled, mode)
    assert outcome.rewritten is not None
    produced = snapshots.rewrite_snapshot(
        mode, outcome.fixed, outcome.remaining, [("", outcome.rewritten)], catalogue,
        errors=outcome.errors,
    )  # fmt: skip
    snapshots.assert_matches(
        snapshots.snapshot_path(case.stem, mode, ERRORS), produced, update_snapshots
    )
    unreadable = {int(re.search(r"\] cell (\d+): ", line)[1]) for line in produced.errors}
    assert unreadable
    before = json.loads(source)["cells"]
    after = json.loads(outcome.rewritten)["cells"]
    assert all(before[index] == after[index] for index in unreadable)
    again = rewrite_source(case.name, outcome.rewritten, "notebook", catalogue, enabled, mode)
    assert not again.changed


def test_the_unreadable_cell_fixture_breaks_cell_3_and_sets_the_flag_in_cell_4() -> None:
    cells = json.loads((ERRORS / "unreadable_cell.ipynb").read_bytes())["cells"]
    assert "".join(cells[4]["source"]) == 'os.environ["XLA_USE_BF16"] = "1"'
    (error,) = snapshots.read("unreadable_cell", snapshots.SCAN, ERRORS).errors
    assert "] cell 3: " in error


def test_the_first_unreadable_line_of_a_cell_is_named(catalogue: Catalogue) -> None:
    result = scan(catalogue, FLAG_WRITE, "x = 1\nprint 'python 2'\n", "y = (\n")
    assert where(result) == ["0:2:1 XM101", "0:2:1 XM401"]  # (why the write is kept)
    assert [(error.line, error.message) for error in result.errors] == [
        (2, "cell 1: could not parse: Missing parentheses in call to 'print'. Did you mean "
         "print(...)?"),
        (1, "cell 2: could not parse: '(' was never closed"),
    ]  # fmt: skip


def test_ipython_syntax_is_not_an_unreadable_cell(catalogue: Catalogue) -> None:
    result = scan(
        catalogue,
        FLAG_WRITE,
        "import asyncio\nawait asyncio.sleep(0)\n",  # IPython runs top-level await
        "for n in (1, 2):\n    !echo {n}\n",  # a block holding only a shell line
        "files = !ls\n%time x = 1\nos.environ?\n",
    )
    assert result.errors == ()
    assert where(result) == ["0:2:1 XM101", "0:2:1 XM401"]  # (why the write is kept)


# -- cell magics --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "role"),
    [
        ("x = 1", CellRole("python")),
        ("%%capture\n%%time\nx = 1", CellRole("python")),
        ("%%timeit -n 1 -r 1\nx = 1", CellRole("python")),
        ("%%bash\nls", CellRole("text", 7, 2, "%%bash", "shell")),
        ("%%sh\nls", CellRole("text", 5, 2, "%%sh", "shell")),
        ("%%script --bg bash\nls", CellRole("text", 19, 2, "%%script --bg bash", "shell")),
        ("%%script /bin/sh\nls", CellRole("text", 17, 2, "%%script /bin/sh", "shell")),
        ("%%capture\n%%bash --out log\nls", CellRole("text", 27, 3, "%%bash --out log", "shell")),
        ("%%python3\nx = 1", CellRole("text", 10, 2, "%%python3", "python")),
        ("%%writefile train.py\nx", CellRole("text", 21, 2, "%%writefile train.py", "python")),
        ("%%writefile -a a/b.py\nx", CellRole("text", 22, 2, "%%writefile -a a/b.py", "python")),
        ("%%writefile run.sh\nls", CellRole("text", 19, 2, "%%writefile run.sh", "shell")),
        ("%%writefile job.yaml\na: 1", CellRole("text", 21, 2, "%%writefile job.yaml", "yaml")),
        ("%%writefile notes.txt\nx", CellRole("skipped", 22, 2, "%%writefile notes.txt")),
        ("%%script perl\nprint 1", CellRole("skipped", 14, 2, "%%script perl")),
        ("%%html\n<p>x</p>", CellRole("skipped", 7, 2, "%%html")),
        ("%%javascript\nx()", CellRole("skipped", 13, 2, "%%javascript")),
    ],
)
def test_a_cell_magic_says_what_its_cell_is(source: str, role: CellRole) -> None:
    assert cell_role(source) == role


def test_writefile_py_is_a_module_of_its_own_checked_and_rewritten(catalogue: Catalogue) -> None:
    helper = (
        "%%writefile train_helper.py\n"
        "import os\n"
        'os.environ["XLA_USE_BF16"] = "1"\n'
        "model = build()\n"
        "model.to(device)\n"
    )
    kernel = "model = torch.nn.Linear(4, 1)\n"
    assert where(scan(catalogue, helper, kernel)) == ["0:3:1 XM101"]
    cells = cells_after(rewrite(catalogue, helper, kernel))
    assert cells[0].startswith("%%writefile train_helper.py\nimport os\n")
    assert "NEURON_RT_STOCHASTIC_ROUNDING_EN" in cells[0] and "XLA_USE_BF16" not in cells[0]
    assert cells[1] == kernel  # the file's flag does not drive the kernel's model


def test_a_python_process_cell_is_a_module_of_its_own(catalogue: Catalogue) -> None:
    outcome = rewrite(catalogue, "%%python3\n" + FLAG_WRITE + "model.to(device)\n")
    assert [f.cell for f in outcome.fixed] == [0]
    assert cells_after(outcome)[0].startswith("%%python3\nimport os\n")


def test_writefile_of_other_kinds_is_read_as_that_kind(catalogue: Catalogue) -> None:
    result = scan(
        catalogue,
        "%%writefile run.sh\nset -e\nexport XLA_DOWNCAST_BF16=1\npython train.py\n",
        '%%writefile job.env\nXLA_USE_BF16="1"\n',
        "%%writefile notes.txt\nXLA_USE_BF16=1 was on\n",
    )
    assert where(result) == ["0:3:8 XM102", "1:2:1 XM101", "2:2:1 XM301"]


def test_shell_cells_go_through_the_shell_engine_at_their_cell_positions(
    catalogue: Catalogue,
) -> None:
    result = scan(
        catalogue,
        "%%bash\nset -e\nexport XLA_DOWNCAST_BF16=1\n",
        "%%script bash\nif [[ -n $FAST ]]; then\n  XLA_USE_BF16=1 python train.py\nfi\n",
        "%%capture\n%%sh\nexport XLA_USE_BF16=1\n",
        '%%bash\n[ -n "$XLA_USE_BF16" ] && echo on\n',
    )
    assert where(result) == ["0:3:8 XM102", "1:3:3 XM101", "2:3:8 XM101", "3:2:7 XM201"]


def test_shell_lines_are_found_at_their_exact_column(catalogue: Catalogue) -> None:
    cell = (
        "!time XLA_USE_BF16=1 torchrun --nproc_per_node=1 train.py\n"
        "log = !XLA_DOWNCAST_BF16=1 python eval.py\n"
        "%sx XLA_USE_BF16=1 python eval.py\n"
        "if True:\n"
        "    !!XLA_USE_BF16=1 python train.py\n"
    )
    result = scan(catalogue, cell)
    assert where(result) == ["0:1:7 XM101", "0:2:8 XM102", "0:3:5 XM101", "0:5:7 XM101"]
    file_lines = notebook(cell).decode().splitlines()
    assert [f.file_line for f in result.findings] == [
        next(number for number, line in enumerate(file_lines, start=1) if text in line)
        for text in ("!time", "log = !", "%sx", "!!")
    ]


def test_shell_findings_are_reported_not_rewritten(catalogue: Catalogue) -> None:
    cell = "!XLA_USE_BF16=1 torchrun --nproc_per_node=2 train.py\n"
    outcome = rewrite(catalogue, cell)
    assert outcome.rewritten is None and outcome.fixed == ()
    assert where(outcome) == ["0:1:2 XM101"]


def test_a_shell_text_bash_rejects_is_an_error_naming_its_cell(catalogue: Catalogue) -> None:
    result = scan(catalogue, "%%bash\necho ok\nexport XLA_USE_BF16=1\nif then fi (\n")
    assert [(e.line, e.message.split(": ")[0]) for e in result.errors] == [(4, "cell 0")]
    assert where(result) == ["0:3:8 XM101"]


def test_an_unknown_cell_magic_naming_a_flag_is_a_mention(catalogue: Catalogue) -> None:
    result = scan(catalogue, "%%html\n<b>XLA_USE_BF16=1</b>\n", "%%latex\n$x$\n")
    assert where(result) == ["0:2:4 XM301"]
    assert "in a `%%html` cell, which xlamigrate does not read" in result.findings[0].message


def test_a_line_magic_naming_a_flag_is_a_mention(catalogue: Catalogue) -> None:
    result = scan(catalogue, 'import os\n%time os.environ["XLA_USE_BF16"] = "1"\n')
    assert where(result) == ["0:2:19 XM301"]
    assert "line magic `%time`" in result.findings[0].message


def test_env_magics_are_the_writes_and_reads_they_are(catalogue: Catalogue) -> None:
    cell = "%env XLA_USE_BF16=1\n%set_env XLA_DOWNCAST_BF16 1\n%env XLA_USE_BF16\n"
    result = scan(catalogue, cell)
    assert where(result) == ["0:1:1 XM101", "0:1:1 XM401", "0:2:1 XM102", "0:3:1 XM201"]


# -- rewrites keep IPython's lines ---------------------------------------------------------------


def test_new_imports_go_below_the_cell_magics_of_the_first_cell(catalogue: Catalogue) -> None:
    cells = cells_after(
        rewrite(
            catalogue,
            '%%time\nos.environ["XLA_USE_BF16"] = "1"\n',
            "import torch\nimport torch_xla.core.xla_model as xm\n\n"
            "model = torch.nn.Linear(4, 1).to(xm.xla_device())\n",
        )
    )
    assert cells[0].startswith("%%time\nimport os\nfrom xlamigrate_runtime import ")


def test_masked_lines_come_back_as_they_were(catalogue: Catalogue) -> None:
    cell = (
        "%%capture log\n"
        "%pip install -q transformers\n"
        "import os\n"
        'os.environ["XLA_USE_BF16"] = "1"\n'
        "for n in (1, 2):\n"
        "    !echo {n}\n"
        "files = !ls\n"
        "model = torch.nn.Linear(4, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters())\n"
    )
    after = cells_after(rewrite(catalogue, cell, mode="fp32-copy"))[0]
    assert after == (
        "%%capture log\n"
        "%pip install -q transformers\n"
        "import torch\n"  # (os, which only wrote the flag, is gone)
        "from xlamigrate_runtime import FP32ParamsCopy, cast_inputs_to_module_dtype\n"
        "\n"
        "for n in (1, 2):\n"
        "    !echo {n}\n"
        "files = !ls\n"
        "model = torch.nn.Linear(4, 1)\n"
        "model.to(torch.bfloat16)\n"
        "cast_inputs_to_module_dtype(model, output_dtype=torch.float32)\n"
        "optimizer = FP32ParamsCopy(torch.optim.SGD(model.parameters()))\n"
    )


def test_a_rewrite_that_would_lose_a_magic_line_is_refused() -> None:
    from xlamigrate.kinds.notebook.kernel import join, split

    module = join([(0, "%pip install torch\nx = 1\n")])
    assert split(module.code, module, {0: "%pip install torch\nx = 1\n"}) == {
        0: "%pip install torch\nx = 1\n"
    }
    without = "".join(line for line in module.code.splitlines(True) if "magic" not in line)
    assert split(without, module, {0: "%pip install torch\nx = 1\n"}) is None


def _notebook_rewrites() -> list[Any]:
    """(before, after) of each notebook fixture's rewrite in each mode."""
    pairs = [
        pytest.param(case.read_bytes(), snapshots.rewritten(snapshots.case_name(case), mode),
                     id=f"{mode}/{case.name}")
        for mode, case in snapshots.rewrites(".ipynb")
    ]  # fmt: skip
    for mode in MODES:
        for case in snapshots.cases(mode, folder=ERRORS):
            after = snapshots.rewritten(case.stem, mode, ERRORS)
            pairs.append(pytest.param(case.read_bytes(), after, id=f"errors/{mode}/{case.name}"))
    return pairs


@pytest.mark.parametrize(("source", "rewritten"), _notebook_rewrites())
def test_rewritten_fixtures_keep_every_magic_and_shell_line_where_it_was(
    source: bytes, rewritten: bytes
) -> None:
    from xlamigrate.kinds.notebook.escapes import line_escape

    before = nbformat.reads(source.decode("utf-8"), as_version=4)
    after = nbformat.reads(rewritten.decode("utf-8"), as_version=4)
    nbformat.validate(after)
    for old, new in cells_by_id(before.cells, after.cells):
        kept = [
            line
            for line in old.source.splitlines()
            if (escape := line_escape(line)) is not None and escape.role != "env"
        ]
        if new is None:  # a cell the rewrite emptied: no magic or shell line was in it
            assert old.cell_type == "code" and kept == []
            continue
        assert old.cell_type == new.cell_type
        if old.cell_type != "code" or old.source == new.source:
            continue
        assert [line for line in new.source.splitlines() if line in kept] == kept
        if old.source.startswith("%%"):
            assert new.source.splitlines()[0] == old.source.splitlines()[0]


def cells_by_id(before: list[Any], after: list[Any]) -> list[tuple[Any, Any]]:
    """Each cell with what the rewrite made of it (None: it went), paired by its id where the
    notebook gives ids, else by position (then none went)."""
    if all("id" in cell for cell in before):
        found = {cell["id"]: cell for cell in after}
        assert set(found) <= {cell["id"] for cell in before}
        return [(cell, found.get(cell["id"])) for cell in before]
    return list(zip(before, after, strict=True))


def test_a_cell_the_rewrite_empties_goes_and_one_empty_before_stays(
    catalogue: Catalogue,
) -> None:
    training = (
        "import torch\nimport torch_xla.core.xla_model as xm\n\n"
        "model = torch.nn.Linear(4, 1).to(xm.xla_device())\n"
        "optimizer = torch.optim.SGD(model.parameters())\n"
    )
    turned_off = 'import os\n\nos.environ["XLA_DOWNCAST_BF16"] = "0"\n'
    outcome = rewrite(catalogue, "%env XLA_USE_BF16=1", "", turned_off, training, mode="fp32-copy")
    cells = cells_after(outcome)
    assert len(cells) == 2
    assert cells[0] == ""  # empty before: the author's
    assert "FP32ParamsCopy(torch.optim.SGD(" in cells[1]


def test_a_shell_line_continued_by_a_backslash_is_one_command(catalogue: Catalogue) -> None:
    cell = (
        "import os\n"
        "if not os.path.isdir('repo'):\n"
        "    !git clone https://example.com/repo.git repo && \\\n"
        "        cd repo && XLA_USE_BF16=1 python setup.py\n"
        "total = 7 \\\n"
        "% 3\n"  # Python continued by a backslash: a modulo, not a line magic
    )
    result = scan(catalogue, cell)
    assert result.errors == ()
    assert where(result) == ["0:4:20 XM101"]


def test_masked_lines_move_with_their_mask_keeping_their_own_indentation() -> None:
    from xlamigrate.kinds.notebook.kernel import join, split

    cell = "x = 1\n!git clone URL && \\\n    cd repo\n"
    module = join([(0, cell)])
    moved = module.code.replace("# xlamigrate-magic", "    pass  # xlamigrate-magic")
    moved = moved.replace("x = 1\n", "with ctx():\n    x = 1\n")
    assert split(moved, module, {0: cell}) == {
        0: "with ctx():\n    x = 1\n    !git clone URL && \\\n        cd repo\n"
    }


def test_a_one_line_cell_may_write_its_magic_without_the_percent(catalogue: Catalogue) -> None:
    result = scan(
        catalogue,
        "pip install -q transformers",
        "cd repo",
        "env XLA_USE_BF16=1",  # %env: a write
        "time = 3",  # Python: IPython runs an assignment as one
    )
    assert result.errors == ()
    assert where(result) == ["2:1:1 XM101", "2:1:1 XM401"]  # (why the write is kept)


def test_new_imports_never_join_a_one_line_magic_cell(catalogue: Catalogue) -> None:
    cells = cells_after(
        rewrite(
            catalogue,
            "pip install -q transformers",
            "import torch\nimport torch_xla.core.xla_model as xm\n\n"
            'os.environ["XLA_USE_BF16"] = "1"\n'
            "model = torch.nn.Linear(4, 1).to(xm.xla_device())\n",
        )
    )
    assert cells[0] == "pip install -q transformers"
    assert cells[1].startswith("import os\n")


@pytest.mark.parametrize(
    "cell",
    [
        "!time XLA_USE_BF16=1 torchrun --nproc_per_node=1 train.py\n",
        "%%bash\nexport XLA_DOWNCAST_BF16=1\ntorchrun train.py\n",
        '%%writefile job.env\nXLA_USE_BF16="1"\n',
    ],
    ids=["bang-line", "bash-cell", "written-env-file"],
)
def test_a_cell_the_rewrite_leaves_has_only_manual_findings(
    catalogue: Catalogue, cell: str
) -> None:
    """`!XLA_USE_BF16=1 torchrun ...` (the Neuron BERT-JP tutorial) was `[fix: safe]` in scan
    and rewrite, which left it as it was."""
    for result in (scan(catalogue, cell), rewrite(catalogue, cell)):
        found = result.findings if isinstance(result, FileResult) else result.remaining
        assert found
        assert all(f.fix is not None and f.fix.applicability == "manual" for f in found)
        assert all("reported, not rewritten" in f.message for f in found)
    assert rewrite(catalogue, cell).rewritten is None
