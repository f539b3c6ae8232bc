"""XM901 for every kind of file, as ruff reports a syntax error: where the parser stopped (1-based
line and column, in the file as written) and the parser's own words (ruamel.yaml's, bash's,
iniconfig's, Python's; the Dockerfile, Makefile and .env readers' own where they are the
parser). Once in JSON (`line`, `column`, `message`) and once as the text output's
`path:line:col: XM901 ...` line, by scan and by rewrite alike."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.test_cli import run_cli, write_files
from xlamigrate.catalogue import Catalogue
from xlamigrate.engine import scan_source
from xlamigrate.kinds.dotenv import analyse as analyse_dotenv

NAMES = frozenset({"XLA_USE_BF16"})
HAS_BASH = shutil.which("bash") is not None  # bash's own verdict, where a shell text is broken


# path -> (its bytes, line, column, message after "could not parse: ", whether bash judges it)
BROKEN: dict[str, tuple[str, int, int, str, bool]] = {
    "broken.py": (
        'import os\nos.environ["XLA_USE_BF16"] = str(1\n',
        *(2, 33, "'(' was never closed", False),
    ),
    "job.yaml": (  # ruamel.yaml's mark: the `:` a flow sequence cannot hold
        "env:\n  XLA_USE_BF16: [1\n  other: 2\n",
        *(3, 8, "expected ',' or ']', but got ':' while parsing a flow sequence", False),
    ),
    ".github/workflows/ci.yml": (  # a `run:` script: bash's words, at the `)` in the YAML file
        "jobs:\n  a:\n    steps:\n      - run: |\n          export XLA_USE_BF16=1\n"
        "          python other.py )\n",
        *(6, 27, "bash: syntax error near unexpected token `)'", True),
    ),
    "run.sh": (
        "export XLA_USE_BF16=1\nfor x in 1 2; echo $x; done\n",
        *(2, 15, "bash: syntax error near unexpected token `echo'", True),
    ),
    "Dockerfile": (  # the quote that is never closed
        'FROM python:3.11\nENV XLA_USE_BF16="1\n',
        *(2, 18, 'ENV: unterminated " quote', False),
    ),
    "tox.ini": (  # iniconfig names the line; the column is where its text starts
        "[testenv]\nsetenv =\n    XLA_USE_BF16 = 1\nnot a setting\n",
        *(4, 1, "unexpected line: 'not a setting'", False),
    ),
    "Makefile": (  # a recipe line through the shell engine: the quote bash found open
        'train:\n\tXLA_USE_BF16=1 python "other.py\n',
        *(2, 24, "recipe: bash: unexpected EOF while looking for matching `\"'", True),
    ),
    ".env": ('SEED=1\nXLA_USE_BF16="1\n', *(2, 14, 'unterminated " quote', False)),
}
CASES = [
    pytest.param(path, marks=pytest.mark.skipif(bash and not HAS_BASH, reason="bash judges it"))
    for path, (*_, bash) in BROKEN.items()
]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("broken")
    write_files(root, {"pyproject.toml": "", **{path: case[0] for path, case in BROKEN.items()}})
    return root


@pytest.fixture(scope="module")
def outputs(project: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    """One run of each: scan's JSON and text, rewrite's JSON and text (--check: nothing written)."""
    runs = {
        "scan-json": ("scan", "--format", "json"),
        "scan-text": ("scan",),
        "rewrite-json": ("rewrite", "--check", "--format", "json"),
        "rewrite-text": ("rewrite", "--check"),
    }
    return {name: run_cli(*args, "--no-cache", ".", cwd=project) for name, args in runs.items()}


@pytest.mark.parametrize("path", CASES)
def test_xm901_has_the_line_column_and_words_of_the_parser_in_json(
    path: str, outputs: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    _, line, column, message, _ = BROKEN[path]
    for name in ("scan-json", "rewrite-json"):
        result = outputs[name]
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        errors = {e["path"]: e for e in json.loads(result.stdout)["errors"]}
        assert errors[path] == {
            "path": path,
            "line": line,
            "column": column,
            "code": "XM901",
            "message": f"could not parse: {message}",
        }, name


@pytest.mark.parametrize("path", CASES)
def test_xm901_text_line_is_path_line_column_code_and_message(
    path: str, outputs: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    _, line, column, message, _ = BROKEN[path]
    for name in ("scan-text", "rewrite-text"):
        lines = outputs[name].stdout.splitlines()
        assert f"{path}:{line}:{column}: XM901 could not parse: {message}" in lines, name


def test_a_file_that_does_not_decode_says_where(catalogue: Catalogue) -> None:
    data = "export A=é\nexport XLA_USE_BF16=1 \\\n  é".encode() + b"\xff\n"
    (error,) = scan_source("run.sh", data, "shell", catalogue, frozenset(catalogue.rules)).errors
    assert (error.line, error.column) == (3, 4)  # in characters: `  é` before the bad byte
    assert error.message == "could not decode as UTF-8: invalid start byte"


def test_a_tox_ini_that_tox_cannot_read_is_xm901_and_any_other_cfg_only_names_the_flag(
    catalogue: Catalogue,
) -> None:
    """tox and pytest refuse an INI file iniconfig cannot read; another `*.cfg` may be no INI at
    all (a flag in it is named for review, XM301)."""
    data = b"[testenv]\nsetenv =\n    XLA_USE_BF16 = 1\ncommands = a\ncommands = b\n"
    enabled = frozenset(catalogue.rules)
    (error,) = scan_source("tox.ini", data, "ini", catalogue, enabled).errors
    assert (error.code, error.line, error.column) == ("XM901", 5, 1)
    assert error.message == "could not parse: duplicate name 'commands'"
    (continued,) = scan_source(
        "tox.ini", b"\n  XLA_USE_BF16 = 1\n", "ini", catalogue, enabled
    ).errors
    assert (continued.line, continued.column) == (2, 3)  # where the line's text starts
    other = scan_source("job.cfg", data, "ini", catalogue, enabled)
    assert other.errors == () and [f.code for f in other.findings] == ["XM301"]


@pytest.mark.parametrize(
    ("line", "column", "message"),
    [
        ('XLA_USE_BF16="1', 14, 'unterminated " quote'),
        ("XLA_USE_BF16='1", 14, "unterminated ' quote"),
        ('XLA_USE_BF16="1\\"', 14, 'unterminated " quote'),  # the quote it escapes is no end
        ("XLA_USE_BF16 1", 14, "expected = after XLA_USE_BF16, found '1'"),
        ("export XLA_USE_BF16: 1", 20, "expected = after XLA_USE_BF16, found ': 1'"),
        ('  XLA_USE_BF16 = "1" on', 22, "unexpected text after the quoted value: 'on'"),
    ],
)
def test_a_dotenv_line_that_sets_a_flag_and_does_not_read_is_a_problem_not_a_value(
    line: str, column: int, message: str
) -> None:
    """As python-dotenv reads them (it refuses these lines); before, the regex took `"1` or
    `"1" on` for the value."""
    analysis = analyse_dotenv(f"SEED=1\n{line}\n", NAMES)
    assert analysis.accesses == ()
    (problem,) = analysis.problems
    assert (problem.line, problem.column, problem.message) == (2, column, message)


@pytest.mark.parametrize(
    "line",
    [
        'XLA_USE_BF16="1"',
        'XLA_USE_BF16="1" # a comment',
        'XLA_USE_BF16="1"#a comment',
        "XLA_USE_BF16=  '1'",
        "XLA_USE_BF16=1 on",  # unquoted: the rest of the line
        "XLA_USE_BF16",  # a bare name: compose passes the environment's value on
        'OTHER="$XLA_USE_BF16',  # not a flag's line
        '# XLA_USE_BF16="1',
    ],
)
def test_what_dotenv_reads_is_no_problem(line: str) -> None:
    assert analyse_dotenv(f"{line}\n", NAMES).problems == ()
