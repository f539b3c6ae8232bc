"""Shell command lines in Python strings go through the shell engine: findings land on the
flag inside the string, whatever its escapes, and are never edited (a child process runs them)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from xlamigrate.catalogue import Catalogue
from xlamigrate.engine import rewrite_source, scan_source


def found(catalogue: Catalogue, code: str) -> list[tuple[int, int, str]]:
    result = scan_source("t.py", code.encode(), "python", catalogue, frozenset(catalogue.rules))
    assert result.errors == ()
    return [(f.span.line, f.span.column, f.code) for f in result.findings]


@pytest.mark.parametrize(
    ("literal", "column"),
    [
        ('"export XLA_USE_BF16=1 && python t.py"', 19),
        ("'export XLA_USE_BF16=1 && python t.py'", 19),
        (r'"echo \"a\tb\"; export XLA_USE_BF16=1; python t.py"', 34),
        (r'r"echo \n; export XLA_USE_BF16=1"', 29),
        ('"echo é; export XLA_USE_BF16=1"', 27),
        ('"echo \\u00e9; " "export XLA_USE_BF16=1"', 35),
        ('"""set -e\nexport XLA_USE_BF16=1\n"""', 8),
    ],
)
def test_the_write_is_found_where_it_is_written(
    catalogue: Catalogue, literal: str, column: int
) -> None:
    code = f"import os\nos.system({literal})\n"
    ((line, found_column, code_),) = found(catalogue, code)
    written = code.splitlines()[line - 1]
    assert written[found_column - 1 :].startswith("XLA_USE_BF16")
    assert (found_column, code_) == (column, "XM101")


def test_an_f_string_command_names_its_flags_for_review(catalogue: Catalogue) -> None:
    code = 'import os\nn = 2\nos.system(f"export XLA_USE_BF16=1; torchrun --nnodes {n} t.py")\n'
    assert found(catalogue, code) == [(3, 20, "XM301")]


def test_every_import_spelling_and_the_list_form(catalogue: Catalogue) -> None:
    code = (
        "import subprocess as sp\nfrom subprocess import check_output\n"
        'sp.call("XLA_USE_BF16=1 python t.py", shell=True)\n'
        'check_output(["sh", "-c", "XLA_DOWNCAST_BF16=1 python t.py"])\n'
        'sp.run("XLA_USE_BF16=1 python t.py", shell=False)\n'
    )
    assert found(catalogue, code) == [(3, 10, "XM101"), (4, 28, "XM102"), (5, 8, "XM301")]


def test_a_command_write_is_manual_and_never_edited(catalogue: Catalogue) -> None:
    code = 'import os\nos.system("XLA_USE_BF16=1 python t.py")  # launch\n'
    for mode in ("full-bf16", "fp32-copy", "autocast"):
        outcome = rewrite_source(
            "t.py", code.encode(), "python", catalogue, frozenset(catalogue.rules), mode
        )
        assert not outcome.changed
        (finding,) = outcome.remaining
        assert finding.fix is not None and finding.fix.applicability == "manual"
        assert "child process" in finding.message and "t.py" in finding.message


def test_noqa_on_the_line_suppresses_it(catalogue: Catalogue) -> None:
    code = 'import os\nos.system("XLA_USE_BF16=1 python t.py")  # noqa: XM101\n'
    assert found(catalogue, code) == []


def test_tree_sitter_is_loaded_only_for_a_command_line(tmp_path: object) -> None:
    probe = (
        "import sys\nfrom xlamigrate.catalogue import load_catalogue\n"
        "from xlamigrate.engine import scan_source\nc = load_catalogue()\n"
        "scan_source('t.py', b'import os\\nos.environ[\"XLA_USE_BF16\"] = \"1\"\\n', 'python',"
        " c, frozenset(c.rules))\nprint('tree_sitter' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
