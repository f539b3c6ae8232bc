"""The imports a rewrite leaves unused go, and only those (kinds/python/unusedimports.py)."""

from __future__ import annotations

import ast
import textwrap

import libcst as cst
import pytest

from xlamigrate.kinds.python.unusedimports import without_unused_imports


def cleaned(before: str, after: str) -> str:
    """`after` (the rewrite of `before`) without what the rewrite left unused."""
    before, after = textwrap.dedent(before), textwrap.dedent(after)
    return without_unused_imports(ast.parse(before), cst.parse_module(after)).code


def test_an_import_whose_only_use_the_rewrite_removed_goes() -> None:
    before = """\
        import json
        import os

        import torch

        os.environ["XLA_USE_BF16"] = "1"
        print(json.dumps({}), torch.ones(1))
    """
    after = """\
        import json
        import os

        import torch

        print(json.dumps({}), torch.ones(1))
    """
    assert cleaned(before, after) == textwrap.dedent("""\
        import json

        import torch

        print(json.dumps({}), torch.ones(1))
    """)


def test_the_blank_lines_of_a_removed_group_do_not_pile_up() -> None:
    before = '"""Doc."""\n\nimport os\n\nimport torch\n\nos.environ["A"] = "1"\ntorch.ones(1)\n'
    after = '"""Doc."""\n\nimport os\n\nimport torch\n\ntorch.ones(1)\n'
    assert cleaned(before, after) == '"""Doc."""\n\nimport torch\n\ntorch.ones(1)\n'


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        # one name of several
        ("import json, os\nos.getpid()\njson.dumps(1)\n", "import json, os\njson.dumps(1)\n",
         "import json\njson.dumps(1)\n"),
        ("from os import environ, getpid\nenviron['A'] = '1'\ngetpid()\n",
         "from os import environ, getpid\ngetpid()\n", "from os import getpid\ngetpid()\n"),
        # an alias, a dotted module binding its first name
        ("import torch_xla.core.xla_model as xm\nimport torch_xla\nxm.mark_step()\n",
         "import torch_xla.core.xla_model as xm\nimport torch_xla\ntorch_xla.sync()\n",
         "import torch_xla\ntorch_xla.sync()\n"),
        ("import os.path\nos.environ['A'] = '1'\nx = 1\n", "import os.path\nx = 1\n", "x = 1\n"),
        # a comment above a removed import stays
        ("# the environment\nimport os\nos.environ['A'] = '1'\nx = 1\n",
         "# the environment\nimport os\nx = 1\n", "# the environment\nx = 1\n"),
        # inside a function
        ("def f():\n    import os\n    os.environ['A'] = '1'\n    return 1\n",
         "def f():\n    import os\n    return 1\n", "def f():\n    return 1\n"),
        # a function left with nothing keeps a body
        ("def f():\n    import os\n    os.getpid()\n", "def f():\n    import os\n",
         "def f():\n    pass\n"),
        # in a class body
        ("class C:\n    import os\n    pid = os.getpid()\n    x = 1\n",
         "class C:\n    import os\n    x = 1\n", "class C:\n    x = 1\n"),
        # a scope of its own: the function's `os` is its parameter, not the module's import
        ("import os\nos.getpid()\ndef f(os):\n    return os\n",
         "import os\ndef f(os):\n    return os\n", "def f(os):\n    return os\n"),
        # the module's import, unused once a function's own import shadows it (ruff F811)
        ("import os\nos.getpid()\ndef f():\n    import os\n    return os.sep\n",
         "import os\ndef f():\n    import os\n    return os.sep\n",
         "def f():\n    import os\n    return os.sep\n"),
        # in an `if`, which goes with it (its test does nothing else) ...
        ("import sys\nif sys.platform == 'linux':\n    import os\n    os.getpid()\nx = 1\n",
         "import sys\nif sys.platform == 'linux':\n    import os\nx = 1\n", "x = 1\n"),
        # ... or keeps it under `pass` (its test may act), or keeps the rest of it
        ("if check():\n    import os\n    os.getpid()\n", "if check():\n    import os\n",
         "if check():\n    pass\n"),
        ("def f(a):\n    ready = a.ready\n    if ready:\n        import os\n        os.getpid()\n",
         "def f(a):\n    ready = a.ready\n    if ready:\n        import os\n",
         "def f(a):\n    ready = a.ready\n    if ready:\n        pass\n"),  # (`ready`: F841)
        ("if ready:\n    import os\n    x = 1\n    os.getpid()\n",
         "if ready:\n    import os\n    x = 1\n", "if ready:\n    x = 1\n"),
        # in a `try`, where another import of its package stays: the probe stays whole
        ("try:\n    import torch_xla\n    import torch_xla.core.xla_model as xm\n"
         "except ImportError:\n    pass\nxm.mark_step()\ntorch_xla.sync()\n",
         "try:\n    import torch_xla\n    import torch_xla.core.xla_model as xm\n"
         "except ImportError:\n    pass\ntorch_xla.sync()\n",
         "try:\n    import torch_xla\nexcept ImportError:\n    pass\ntorch_xla.sync()\n"),
        # ... and where none would, the first one stays
        ("try:\n    import torch_xla\n    import torch_xla.runtime as xr\n"
         "except ImportError:\n    pass\nxr.world_size()\ntorch_xla.sync()\n",
         "try:\n    import torch_xla\n    import torch_xla.runtime as xr\n"
         "except ImportError:\n    pass\n",
         "try:\n    import torch_xla\nexcept ImportError:\n    pass\n"),
        # a removed first line of a block: the next takes its place, blank lines and all
        ("def main():\n    import os\n\n    os.getpid()\n    model = 1\n",
         "def main():\n    import os\n\n    model = 1\n", "def main():\n    model = 1\n"),
        ('"""Doc."""\nimport os\nimport json\n\nos.getpid()\njson.dumps(1)\n',
         '"""Doc."""\nimport os\nimport json\n\njson.dumps(1)\n',
         '"""Doc."""\nimport json\n\njson.dumps(1)\n'),
        # the last line of a block: no blank line piles up below it
        ("def f():\n    x = 1\n\n    import os\n    os.getpid()\n\n\ny = 2\n",
         "def f():\n    x = 1\n\n    import os\n\n\ny = 2\n",
         "def f():\n    x = 1\n\n\ny = 2\n"),
        # names of a parenthesized import, one a line
        ("from os import (\n    getpid,\n    sep,\n)\ngetpid()\nsep\n",
         "from os import (\n    getpid,\n    sep,\n)\nsep\n",
         "from os import (\n    sep,\n)\nsep\n"),
        # imports of a loop, a `with`, a handler: the block keeps a `pass`
        ("for i in range(2):\n    import os\n    os.getpid()\n",
         "for i in range(2):\n    import os\n",
         "for i in range(2):\n    pass\n"),
        ("with open(__file__) as handle:\n    from os import environ\n    environ['A'] = '1'\n"
         "    x = 1\n",
         "with open(__file__) as handle:\n    from os import environ\n    x = 1\n",
         "with open(__file__) as handle:\n    x = 1\n"),
        ("try:\n    x = 1\nexcept ImportError:\n    import os\n    os.getpid()\n",
         "try:\n    x = 1\nexcept ImportError:\n    import os\n",
         "try:\n    x = 1\nexcept ImportError:\n    pass\n"),
    ],
)  # fmt: skip
def test_what_the_rewrite_left_unused(before: str, after: str, expected: str) -> None:
    assert cleaned(before, after) == expected


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # unused before the rewrite: not the rewrite's business
        ("import os\nimport sys\nsys.exit(0)\n", "import os\nimport sys\nsys.exit(0)\n"),
        # an availability probe decides what runs
        ("try:\n    import torch_xla.core.xla_model as xm\n    ON = True\nexcept ImportError:\n"
         "    ON = False\nxm.mark_step()\n",
         "try:\n    import torch_xla.core.xla_model as xm\n    ON = True\nexcept ImportError:\n"
         "    ON = False\n"),
        # ... and so does the only import a `try` body holds of its package
        ("try:\n    import os\nexcept ImportError:\n    pass\nos.getpid()\n",
         "try:\n    import os\nexcept ImportError:\n    pass\n"),
        # a re-export
        ("import os\n__all__ = ['os']\nos.getpid()\n", "import os\n__all__ = ['os']\n"),
        # still used: a function reads the module's name
        ("import os\nos.getpid()\ndef f():\n    return os.sep\n",
         "import os\ndef f():\n    return os.sep\n"),
        # `del name` is a use (without the import it would fail)
        ("import os\nos.getpid()\ndel os\n", "import os\ndel os\n"),
        # from __future__
        ("from __future__ import annotations\nx: int = 1\n",
         "from __future__ import annotations\nx = 1\n"),
    ],
)  # fmt: skip
def test_what_stays(before: str, after: str) -> None:
    assert cleaned(before, after) == after


# -- the check that spares a large file the pass ------------------------------------------------

SPARED_SOURCES = [
    'import os\n\nos.environ["XLA_USE_BF16"] = "1"\nimport torch\n\n\ndef main():\n'
    '    return os.environ.get("RANK")\n',
    "import os\nimport torch_xla.core.xla_model as xm\n\nxm.mark_step()\n\n\ndef f():\n"
    "    import numpy as np\n    return np.zeros(1), xm.xla_device()\n\n\nclass C:\n"
    "    import json\n    data = json.dumps({})\n",
    "try:\n    import torch_xla\nexcept ImportError:\n    torch_xla = None\n"
    "if torch_xla:\n    import os\n    os.environ['A'] = '1'\nprint(torch_xla)\n",
    "from a import (b,\n    c)  # c\nx = b; y = c\n\n# comment\n\n\ndef g(b=b):\n    global c\n"
    "    c = 2\n    return b\n",
]
REPLACEMENTS = ["pass\n", "os = 1\n", "def xm():\n    pass\n", "print(os, xm, np, c)\n", None]


def _edited(source: str, index: int, replacement: str | None) -> tuple[cst.Module, cst.Module]:
    before = cst.parse_module(source)
    body = list(before.body)
    if replacement is None:
        del body[index]
    else:
        body[index] = cst.parse_statement(replacement)
    return before, before.with_changes(body=body)


@pytest.mark.parametrize("source", SPARED_SOURCES)
def test_the_pass_is_skipped_only_where_it_would_drop_nothing(source: str) -> None:
    """Each top-level statement replaced by another (or dropped), one at a time: where the
    check says no import may be left unused, the pass drops none."""
    from xlamigrate.kinds.python.astscopes import Scopes
    from xlamigrate.kinds.python.cstcode import ModuleCode
    from xlamigrate.kinds.python.unusedimports import may_leave_unused, unused_imports_dropped

    tree = ast.parse(source)
    spared = checked = 0
    for index in range(len(cst.parse_module(source).body)):
        for replacement in REPLACEMENTS:
            before, after = _edited(source, index, replacement)
            old = Scopes(tree)
            lines = ModuleCode().lines(before)
            maybe = may_leave_unused(old, before, after, lines, after.code_for_node)
            dropped, _ = unused_imports_dropped(Scopes(tree), after)
            if not maybe:
                assert dropped is after, (index, replacement)
                spared += 1
            checked += 1
    assert spared and spared < checked  # (both answers are given)


def test_an_import_whose_only_use_went_is_checked_for() -> None:
    from xlamigrate.kinds.python.astscopes import Scopes
    from xlamigrate.kinds.python.cstcode import ModuleCode
    from xlamigrate.kinds.python.unusedimports import may_leave_unused

    source = 'import os\n\nos.environ["XLA_USE_BF16"] = "1"\nprint(1)\n'
    before, after = _edited(source, 1, "print(2)\n")
    lines = ModuleCode().lines(before)
    assert may_leave_unused(Scopes(ast.parse(source)), before, after, lines, after.code_for_node)
    kept = source + "print(os.sep)\n"  # (another use, in a statement the rewrite keeps)
    before, after = _edited(kept, 1, "print(2)\n")
    lines = ModuleCode().lines(before)
    assert not may_leave_unused(Scopes(ast.parse(kept)), before, after, lines, after.code_for_node)
    before, after = _edited(kept, 1, "os = None\n")  # (a statement it makes binds the name)
    lines = ModuleCode().lines(before)
    assert may_leave_unused(Scopes(ast.parse(kept)), before, after, lines, after.code_for_node)
