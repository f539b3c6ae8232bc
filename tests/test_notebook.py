"""Notebooks: code cells are one script, magics are understood, only changed cells change."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tests.conftest import FIXTURES
from xlamigrate.catalogue import Catalogue
from xlamigrate.engine import rewrite_source, scan_source
from xlamigrate.kinds.python.rewrite import MODES

NOTEBOOK = "env_magic_notebook"


@pytest.mark.parametrize("mode", MODES)
def test_rewritten_notebooks_are_valid_and_change_only_the_cells_that_need_it(mode: str) -> None:
    before = nbformat.read(FIXTURES / mode / f"{NOTEBOOK}.in.ipynb", as_version=4)
    after = nbformat.read(FIXTURES / mode / f"{NOTEBOOK}.out.ipynb", as_version=4)
    nbformat.validate(after)
    assert len(before.cells) == len(after.cells)
    changed = [i for i, (a, b) in enumerate(zip(before.cells, after.cells, strict=True)) if a != b]
    assert changed and all(before.cells[i].cell_type == "code" for i in changed)
    assert before.cells[0] == after.cells[0]  # markdown untouched
    assert before.cells[4].outputs == after.cells[4].outputs  # outputs kept
    assert before.metadata == after.metadata
    assert all("XLA_USE_BF16" not in "".join(cell.source) for cell in after.cells[1:])


def test_the_flag_set_in_one_cell_drives_the_recipe_in_later_cells() -> None:
    after = nbformat.read(FIXTURES / "full-bf16" / f"{NOTEBOOK}.out.ipynb", as_version=4)
    assert "model.to(torch.bfloat16)" in after.cells[3].source
    wrapped = nbformat.read(FIXTURES / "autocast" / f"{NOTEBOOK}.out.ipynb", as_version=4)
    assert "with torch.autocast(" in wrapped.cells[4].source


def test_a_notebook_outside_jupyters_layout_is_reported_not_rewritten(
    catalogue: Catalogue,
) -> None:
    source = (FIXTURES / "full-bf16" / f"{NOTEBOOK}.in.ipynb").read_bytes()
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
    notebook = FIXTURES / "scan" / "notebook_cells.ipynb"
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
        (1, 3, "XM102"), (2, 1, "XM101"), (2, 2, "XM201"),
    ]  # fmt: skip
    results = json.loads(outputs["sarif"].stdout)["runs"][0]["results"]
    assert [r["properties"]["cell"] for r in results] == [1, 2, 2]
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
    path = FIXTURES / "scan" / "notebook_cells.ipynb"
    enabled = catalogue.select((), ())
    result = scan_source("nb.ipynb", path.read_bytes(), "notebook", catalogue, enabled)
    (read,) = [f for f in result.findings if f.code == "XM201"]
    assert "; cell 2 line 1 sets it to " in read.message  # not the joined module's line 7
