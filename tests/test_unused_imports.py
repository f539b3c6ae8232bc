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
        ("if True:\n    import os\nos.getpid()\n", "if True:\n    import os\n"),
        # a re-export
        ("import os\n__all__ = ['os']\nos.getpid()\n", "import os\n__all__ = ['os']\n"),
        # still used somewhere (another scope's name counts: kept rather than guessed)
        ("import os\nos.getpid()\ndef f(os):\n    return os\n",
         "import os\ndef f(os):\n    return os\n"),
        # a function that would be left empty
        ("def f():\n    import os\n    os.getpid()\n", "def f():\n    import os\n"),
    ],
)  # fmt: skip
def test_what_stays(before: str, after: str) -> None:
    assert cleaned(before, after) == after
