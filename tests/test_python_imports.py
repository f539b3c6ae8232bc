"""The rewrite's import insertion (xlamigrate/kinds/python/imports.py) places imports exactly where
libcst's AddImportsVisitor does, at a fraction of its cost: checked against the visitor itself
on hand-written module heads and on generated ones."""

from __future__ import annotations

import libcst as cst
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from xlamigrate.kinds.python.imports import Needed, add_imports, is_imported

RUNTIME = "xlamigrate_runtime"
NEEDS: tuple[Needed, ...] = (
    ("os", None),
    ("torch", None),
    (RUNTIME, "cast_inputs_to_module_dtype"),
    (RUNTIME, "FP32ParamsCopy"),
)


def with_libcst(module: cst.Module, needed: list[Needed]) -> cst.Module:
    """What the rewrite did before: the visitor, for the entries not imported already."""
    missing = [entry for entry in needed if not is_imported(module, *entry)]
    if not missing:
        return module
    context = CodemodContext()
    for name, obj in sorted(missing, key=lambda entry: (entry[0], entry[1] or "")):
        AddImportsVisitor.add_needed_import(context, name, obj)
    return AddImportsVisitor(context).transform_module(module)


HEADS = {
    "empty": "",
    "code only": "x = 1\n",
    "docstring": '"""Doc."""\nx = 1\n',
    "docstring then imports": '"""Doc."""\nimport sys\n\nx = 1\n',
    "future import": "from __future__ import annotations\n\nimport sys\nx = 1\n",
    "comment before code": "import sys\n# a comment\nx = 1\n",
    "blank then comment": "import sys\n\n# a comment\nx = 1\n",
    "runtime imported from": "from xlamigrate_runtime import FP32ParamsCopy\nx = 1\n",
    "runtime parenthesised": "from xlamigrate_runtime import (\n    FP32ParamsCopy,\n)\nx = 1\n",
    "runtime star": "from xlamigrate_runtime import *\nx = 1\n",
    "runtime below code": "import sys\nx = 1\nfrom xlamigrate_runtime import FP32ParamsCopy\n",
    "relative import": "from . import runtime\nfrom .xlamigrate_runtime import helper\nx = 1\n",
    "aliased imports": "import torch as T\nimport os.path\nfrom os import environ as env\nx = 1\n",
    "two on a line": "import sys; import os\nx = 1\n",
    "strict flag": "__strict__ = True\nimport sys\nx = 1\n",
    "f-string first": 'f"not a docstring"\nimport sys\n',
    "import in a block": "if True:\n    import torch\nx = 1\n",
    "crlf": "import sys\r\n\r\nx = 1\r\n",
    "only imports": "import sys\nimport torch\n",
    "compound first": "try:\n    import torch\nexcept ImportError:\n    pass\n",
}


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize(
    "needed",
    [[NEEDS[0]], [NEEDS[2]], list(NEEDS), [NEEDS[1], NEEDS[3]]],
    ids=["os", "one name", "all", "torch and a name"],
)
def test_imports_go_where_libcst_puts_them(head: str, needed: list[Needed]) -> None:
    module = cst.parse_module(HEADS[head])
    assert add_imports(module, needed).code == with_libcst(module, needed).code


LINES = (
    '"""Doc."""',
    "import sys",
    "import torch",
    "import os.path",
    "from os import environ",
    "from xlamigrate_runtime import FP32ParamsCopy",
    "from xlamigrate_runtime import helper as h",
    "from __future__ import annotations",
    "# a comment",
    "",
    "x = 1",
    "if x:\n    import os",
    "import sys; x = 2",
)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(
    lines=st.lists(st.sampled_from(LINES), max_size=8),
    needed=st.lists(st.sampled_from(NEEDS), unique=True),
)
def test_generated_heads_get_the_same_imports_as_with_libcst(
    lines: list[str], needed: list[Needed]
) -> None:
    source = "".join(line + "\n" for line in lines)
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:  # `from __future__` below code is still valid for libcst
        return
    assert add_imports(module, needed).code == with_libcst(module, needed).code


def test_a_module_that_imports_everything_is_returned_as_it_is() -> None:
    module = cst.parse_module("import os\nimport torch\nfrom xlamigrate_runtime import *\n")
    assert add_imports(module, NEEDS) is module
