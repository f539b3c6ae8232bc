"""Bad input through the real CLI: broken, odd and hostile files, generated here (never stored),
each in its own folder beside a good flagged `good.py`, scanned and rewritten in every mode in
subprocesses. For every case: an exit code the README documents and never a traceback or an
internal error, an error that names the path (and the line where one is known), the good file
still found and rewritten, and the bad file's bytes kept unless it was legitimately rewritten.

The matrix runs once per command (the cases share the runs, so the whole file stays fast); the
cases that need a run of their own (a 5 MB file, links named on the command line, a file changed
between planning and writing, permissions) have their own tests below it.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PRECISION_IGNORE
from tests.test_cli import found, write_files
from tests.test_cli import run_cli as cli
from tests.test_rewrite_cli import LATIN1_HEADER, fixture, snapshot
from xlamigrate.catalogue import Catalogue
from xlamigrate.config import load_settings
from xlamigrate.engine import rewrite_paths, scan_paths
from xlamigrate.request import RewriteRequest
from xlamigrate.writer import WriteError, write_atomically

MODES = ("full-bf16", "fp32-copy", "autocast")
MLP = "flag_at_top_float_mlp"  # the flag on line 5; one safe fix in every mode
GOOD = "good.py"
FLAG_WRITE = 'import os\nos.environ["XLA_USE_BF16"] = "1"\n'
CRASH_SIGNS = ("Traceback", "internal error", "Segmentation fault")
NEEDS_SYMLINKS = pytest.mark.skipif(os.name == "nt", reason="needs POSIX symlinks")
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
NOT_AS_ROOT = pytest.mark.skipif(
    IS_ROOT, reason="root reads and writes whatever the permission bits say; nothing to refuse"
)


def run_cli(command: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI on the precision fixtures, with the precision rules alone (their .out files say
    what the files become; tests/test_xla_apis.py covers the torch-xla API rules)."""
    return cli(command, *args, "--ignore", ",".join(PRECISION_IGNORE), cwd=cwd)


def mlp(mode: str = "full-bf16", kind: str = "in") -> bytes:
    return fixture(mode, MLP, kind)


def notebook(*cells: Any) -> bytes:
    """A notebook in Jupyter's own layout (so that a rewrite may write it), cells as given."""
    document = {"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    return (json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def code_cell(source: Any) -> dict[str, Any]:
    return {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {},
        "outputs": [],
        "source": source,
    }


FLAG_CELL_HEAD = ["import os\n", "import torch\n"]
FLAG_CELL_TAIL = [
    "loss = model(torch.ones(4)).sum()\n",
    "loss.backward()\n",
]
MODEL = "model = torch.nn.Linear(4, 1)\n"
OPTIMIZER = "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
FLAG_CELL = code_cell(
    [*FLAG_CELL_HEAD, 'os.environ["XLA_USE_BF16"] = "1"\n', MODEL, OPTIMIZER, *FLAG_CELL_TAIL]
)
# FLAG_CELL rewritten alone, in each mode: its notebook's other cell cannot be read.
CASTS = [
    "model.to(torch.bfloat16)\n",
    "cast_inputs_to_module_dtype(model, output_dtype=torch.float32)\n",
]
FLAG_CELL_REWRITTEN = {
    "full-bf16": [
        *FLAG_CELL_HEAD,
        "from xlamigrate_runtime import cast_inputs_to_module_dtype\n",
        "\n",
        'os.environ["NEURON_RT_STOCHASTIC_ROUNDING_EN"] = "1"\n',
        MODEL,
        *CASTS,
        OPTIMIZER,
        *FLAG_CELL_TAIL,
    ],
    "fp32-copy": [
        *FLAG_CELL_HEAD,
        "from xlamigrate_runtime import FP32ParamsCopy, cast_inputs_to_module_dtype\n",
        "\n",
        MODEL,
        *CASTS,
        "optimizer = FP32ParamsCopy(torch.optim.SGD(model.parameters(), lr=0.1))\n",
        *FLAG_CELL_TAIL,
    ],
    "autocast": [
        *FLAG_CELL_HEAD,
        'os.environ["NEURON_CC_FLAGS"] = os.environ.get("NEURON_CC_FLAGS", "")'
        ' + " --auto-cast=none"\n',
        MODEL,
        OPTIMIZER,
        'with torch.autocast(dtype=torch.bfloat16, device_type="xla"):\n',
        "    " + FLAG_CELL_TAIL[0],
        FLAG_CELL_TAIL[1],
    ],
}
BAD_CELL = code_cell(["x = 1\n", "def f(:\n", "  pass\n"])
DEEP_CELL = code_cell("x = " + "-" * 20_000 + "1\n")


def with_tabs(data: bytes) -> bytes:
    """Each level of four-space indentation as a tab."""
    return re.sub(rb"(?m)^((?:    )+)", lambda match: b"\t" * (len(match.group(1)) // 4), data)


def mixed_newlines(data: bytes) -> bytes:
    """The first three lines end in CRLF, the rest in LF (an editor that saved half a file)."""
    return data.replace(b"\n", b"\r\n", 3)


# --- the cases ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One bad input, in a folder of its own beside good.py."""

    files: dict[str, bytes] = field(default_factory=dict)
    # file -> (line or None, a fragment of the message): what scan and rewrite must report
    errors: dict[str, tuple[int | None, str]] = field(default_factory=dict)
    # file -> (line, fragment): what only rewrite reports (scan reads the file well)
    rewrite_errors: dict[str, tuple[int | None, str]] = field(default_factory=dict)
    # file -> the line of its XM101 finding: the flag writes that must still be found
    findings: dict[str, int] = field(default_factory=dict)
    # file -> its bytes after a rewrite in a mode; every other file keeps its bytes
    rewrites: dict[str, Callable[[str], bytes]] = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None  # what a file's bytes cannot say: links, modes
    bytes_checked_apart: bool = False  # a test of its own checks what a rewrite made of them


def _symlink_loops(folder: Path) -> None:
    (folder / "a.py").symlink_to("b.py")
    (folder / "b.py").symlink_to("a.py")
    (folder / "sub").mkdir()
    (folder / "sub" / "up").symlink_to("..", target_is_directory=True)  # its own parent


def _directories_named_like_files(folder: Path) -> None:
    for name in ("train.py", "Dockerfile", "x.ipynb", "conf.yaml", "run.sh", ".env"):
        (folder / name).mkdir()
    (folder / "train.py" / "model.py").write_bytes(mlp())
    (folder / "Dockerfile" / "entry.py").write_bytes(mlp())


def _read_only(folder: Path) -> None:
    (folder / "train.py").chmod(0o444)


FORM_FEED = mlp().replace(b"import json\n", b"\x0cimport json\n", 1)  # PEP 8 allows them
CR_ONLY = mlp().replace(b"\n", b"\r")  # classic Mac OS newlines
PY2_EXCEPT = (
    b"import os\n"
    b'os.environ["XLA_USE_BF16"] = "1"\n'
    b"try:\n"
    b"    import torch_xla\n"
    b"except ImportError, error:\n"
    b'    print "no torch-xla:", error\n'
)

CASES: dict[str, Case] = {
    # Python that does not parse: reported on its line, nothing written.
    "syntax_error": Case(
        files={"bad.py": b'import os\n\ndef configure(:\n    os.environ["XLA_USE_BF16"] = "1"\n'},
        errors={"bad.py": (3, "could not parse: invalid syntax")},
    ),
    "python2_print_statement": Case(
        files={"bad.py": FLAG_WRITE.encode() + b'print "bf16 is on"\n'},
        errors={"bad.py": (3, "Missing parentheses in call to 'print'")},
    ),
    "python2_except_comma": Case(
        files={"bad.py": PY2_EXCEPT},
        errors={"bad.py": (5, "could not parse")},
    ),
    "inconsistent_tabs_and_spaces": Case(
        files={
            "bad.py": b'import os\nif True:\n\tx = 1\n        os.environ["XLA_USE_BF16"] = "1"\n'
        },
        errors={"bad.py": (4, "inconsistent use of tabs and spaces")},
    ),
    # Binary files named .py (and other kinds) that mention a flag.
    "nul_bytes_in_a_py_file": Case(
        files={"bad.py": FLAG_WRITE.encode() + b"\x00\x01\x02\xff\xfe garbage \x00 XLA_USE_BF16"},
        errors={"bad.py": (3, "NUL bytes")},
    ),
    "binary_garbage_py_without_nul": Case(
        files={"bad.py": b"\x89PNG\r\n\x1a\n\xff\xfe\xfd XLA_USE_BF16 \x80\x81\x82\n"},
        errors={"bad.py": (1, "could not parse")},
    ),
    "binary_garbage_sh": Case(
        files={"bad.sh": b"export XLA_USE_BF16=1\n\xff\xfe\x80 garbage\n"},
        errors={"bad.sh": (2, "could not decode as UTF-8")},
    ),
    "nul_byte_in_yaml": Case(
        files={"bad.yaml": b'env:\n  - name: XLA_USE_BF16\n    value: "1\x00"\n'},
        errors={"bad.yaml": (3, "could not parse")},
    ),
    # Files that are fine, only unusual: found and rewritten, keeping their form.
    "latin1_coding_cookie": Case(
        files={"train.py": LATIN1_HEADER + mlp()},
        findings={"train.py": 7},
        rewrites={"train.py": lambda mode: LATIN1_HEADER + mlp(mode, "out")},
    ),
    "utf8_bom": Case(
        files={"train.py": b"\xef\xbb\xbf" + mlp()},
        findings={"train.py": 5},
        rewrites={"train.py": lambda mode: b"\xef\xbb\xbf" + mlp(mode, "out")},
    ),
    "crlf_newlines": Case(
        files={"train.py": mlp().replace(b"\n", b"\r\n")},
        findings={"train.py": 5},
        rewrites={"train.py": lambda mode: mlp(mode, "out").replace(b"\n", b"\r\n")},
    ),
    "mixed_crlf_and_lf_newlines": Case(
        files={"train.py": mixed_newlines(mlp())},
        findings={"train.py": 5},
        bytes_checked_apart=True,
    ),
    # libcst drops a form feed before code and the last CR of a CR-only file: scanned, but a
    # rewrite would lose those bytes, so the file is refused on that line and left untouched.
    "form_feed_and_cr_only_newlines": Case(
        files={"ff.py": FORM_FEED, "cr.py": CR_ONLY},
        findings={"ff.py": 5, "cr.py": 5},
        rewrite_errors={
            "ff.py": (FORM_FEED.split(b"\n").index(b"\x0cimport json") + 1, "form feed"),
            "cr.py": (CR_ONLY.count(b"\r"), "byte for byte"),
        },
    ),
    "tab_indentation": Case(
        files={"train.py": with_tabs(mlp())},
        findings={"train.py": 5},
        rewrites={"train.py": lambda mode: with_tabs(mlp(mode, "out"))},
    ),
    "read_only_file": Case(
        files={"train.py": mlp()},
        findings={"train.py": 5},
        rewrites={"train.py": lambda mode: mlp(mode, "out")},
        setup=_read_only,
    ),
    # Empty files of every kind: nothing to say about them, nothing written.
    "empty_files": Case(
        files={"empty.py": b"", "empty.sh": b"", "empty.ipynb": b"", "empty.yaml": b"", ".env": b""}
    ),
    # Code nested so deep that libcst's native parser overflowed the C stack: a segfault
    # that ended the whole run. Reported now, the other files processed.
    "deeply_nested_unary_operators": Case(
        files={"bad.py": FLAG_WRITE.encode() + b"x = " + b"-" * 20_000 + b"1\n"},
        errors={"bad.py": (None, "could not parse: nesting too deep")},
    ),
    "a_boolean_chain_of_10000_operands": Case(
        files={"bad.py": FLAG_WRITE.encode() + b"x = " + b" and ".join([b"a"] * 10_000) + b"\n"},
        errors={"bad.py": (3, "could not parse: nesting too deep")},
    ),
    "parentheses_nested_3000_deep": Case(
        files={"bad.py": FLAG_WRITE.encode() + b"x = " + b"(" * 3000 + b"1" + b")" * 3000 + b"\n"},
        errors={"bad.py": (3, "too many nested parentheses")},
    ),
    # Links that lead nowhere, and a folder link back to its parent (not walked twice).
    "symlink_loops": Case(
        errors={"a.py": (None, "could not read"), "b.py": (None, "could not read")},
        setup=_symlink_loops,
    ),
    # Folders named like files are walked, never read as files.
    "directories_named_like_files": Case(
        findings={"train.py/model.py": 5, "Dockerfile/entry.py": 5},
        rewrites={
            "train.py/model.py": lambda mode: mlp(mode, "out"),
            "Dockerfile/entry.py": lambda mode: mlp(mode, "out"),
        },
        setup=_directories_named_like_files,
    ),
    # Notebooks that are not notebooks.
    "notebook_invalid_json": Case(
        files={"bad.ipynb": b'{\n "cells": [\n  XLA_USE_BF16\n'},
        errors={"bad.ipynb": (3, "could not read the notebook")},
    ),
    "notebook_that_is_a_json_list": Case(
        files={"bad.ipynb": b'["XLA_USE_BF16"]\n'},
        errors={"bad.ipynb": (None, "could not read the notebook: no list of cells")},
    ),
    "notebook_cells_not_a_list": Case(
        files={"bad.ipynb": json.dumps({"cells": {"0": FLAG_CELL}}).encode()},
        errors={"bad.ipynb": (None, "could not read the notebook: no list of cells")},
    ),
    "notebook_cell_not_an_object": Case(  # crashed: AttributeError ('str' has no .get)
        files={"bad.ipynb": notebook(FLAG_CELL, "XLA_USE_BF16", 3)},
        errors={"bad.ipynb": (None, "could not read the notebook: cell 1 is not an object")},
    ),
    "notebook_cell_source_is_a_number": Case(
        files={"bad.ipynb": notebook(FLAG_CELL, code_cell(42))},
        errors={"bad.ipynb": (None, "the source of cell 1 is not text")},
    ),
    "notebook_cell_source_lists_numbers": Case(  # crashed: TypeError in str.join
        files={"bad.ipynb": notebook(FLAG_CELL, code_cell([1, 2]))},
        errors={"bad.ipynb": (None, "the source of cell 1 is not text")},
    ),
    "notebook_not_utf8": Case(
        files={"bad.ipynb": b'{"cells": ["XLA_USE_BF16 \xff\xfe"]}'},
        errors={"bad.ipynb": (None, "could not read the notebook")},
    ),
    "notebook_cell_with_a_syntax_error": Case(  # rewrite named the joined module's line 7
        files={"bad.ipynb": notebook(FLAG_CELL, BAD_CELL)},
        errors={"bad.ipynb": (2, "cell 1: could not parse")},
        findings={"bad.ipynb": 3},  # the other cells are still checked, and rewritten
        rewrites={
            "bad.ipynb": lambda mode: notebook(code_cell(FLAG_CELL_REWRITTEN[mode]), BAD_CELL)
        },
    ),
    "notebook_cell_nested_too_deep": Case(
        files={"bad.ipynb": notebook(FLAG_CELL, DEEP_CELL)},
        errors={"bad.ipynb": (None, "cell 1: could not parse: nesting too deep")},
        findings={"bad.ipynb": 3},
        rewrites={
            "bad.ipynb": lambda mode: notebook(code_cell(FLAG_CELL_REWRITTEN[mode]), DEEP_CELL)
        },
    ),
    # YAML that is not YAML, or not unambiguous.
    "yaml_tab_indentation": Case(
        files={"bad.yaml": b"env:\n\t- name: XLA_USE_BF16\n\t  value: '1'\n"},
        errors={"bad.yaml": (2, "could not parse")},
    ),
    "yaml_unclosed_quote": Case(
        files={"bad.yaml": b'env:\n  - name: XLA_USE_BF16\n    value: "1\n'},
        errors={"bad.yaml": (4, "could not parse")},
    ),
    "yaml_duplicate_keys": Case(  # the last `value` was taken, and the `value: '1'` line dropped
        files={"bad.yaml": b"env:\n  - name: XLA_USE_BF16\n    value: '1'\n    value: '0'\n"},
        errors={"bad.yaml": (4, "duplicate key 'value' (first on line 3)")},
    ),
    "yaml_nested_deeper_than_any_config": Case(
        files={"bad.yaml": b"x: " + b"[" * 300 + b"]" * 300 + b"\nXLA_USE_BF16: '1'\n"},
        errors={"bad.yaml": (1, "could not parse: maximum depth")},
    ),
    "yaml_alias_bomb": Case(  # nine levels of nine aliases: walked once per node, not expanded
        files={
            "bad.yaml": (
                "a0: &a0 [XLA_USE_BF16, XLA_USE_BF16]\n"
                + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9))
                + "env:\n  - name: XLA_USE_BF16\n    value: '0'\n"
            ).encode()
        },
        findings={"bad.yaml": 11},
        rewrites={
            "bad.yaml": lambda mode: (
                "a0: &a0 [XLA_USE_BF16, XLA_USE_BF16]\n"
                + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9))
                + "env: []\n"
            ).encode()
        },
    ),
}


# --- the matrix runs ---------------------------------------------------------------------------


@dataclass
class Matrix:
    scan_root: Path
    scan_json: subprocess.CompletedProcess[str]
    roots: dict[str, Path]  # mode -> its tree, rewritten
    rewrites: dict[str, subprocess.CompletedProcess[str]]  # mode -> the run (JSON for full-bf16)
    recheck: subprocess.CompletedProcess[str]  # `rewrite --check` of the rewritten full-bf16 tree

    def runs(self) -> Iterator[subprocess.CompletedProcess[str]]:
        yield from (self.scan_json, *self.rewrites.values(), self.recheck)


def build(root: Path) -> Path:
    root.mkdir()
    for name, case in CASES.items():
        folder = root / name
        write_files(folder, {GOOD: mlp(), **case.files})
        if case.setup is not None:
            case.setup(folder)
    return root


def start_cli(*args: str, cwd: Path) -> subprocess.Popen[str]:
    """(As `run_cli`: the precision rules alone.)"""
    return subprocess.Popen(
        [sys.executable, "-m", "xlamigrate.cli", *args, "--ignore", ",".join(PRECISION_IGNORE)],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    try:
        stdout, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    """The runs over the whole matrix, side by side (each tree is its own)."""
    base = tmp_path_factory.mktemp("bad_input")
    scan_root = build(base / "scan")
    roots = {mode: build(base / mode) for mode in MODES}
    scan = start_cli("scan", "--format", "json", cwd=scan_root)
    rewrites = {
        mode: start_cli(
            "rewrite", "--mode", mode, *(["--format", "json"] if mode == "full-bf16" else []),
            cwd=roots[mode],
        )
        for mode in MODES
    }  # fmt: skip
    scan_json = finish(scan)
    done = {mode: finish(process) for mode, process in rewrites.items()}
    yield Matrix(
        scan_root=scan_root,
        scan_json=scan_json,
        roots=roots,
        rewrites=done,
        recheck=run_cli("rewrite", "--check", "--format", "json", cwd=roots["full-bf16"]),
    )
    for tree in (scan_root, *roots.values()):  # let pytest clean up what was made read-only
        for path in tree.rglob("*"):
            if not path.is_symlink():
                path.chmod(0o755 if path.is_dir() else 0o644)


def error_lines(output: str) -> dict[str, str]:
    """`path[:line]: XM90x message` lines of text output, by their `path[:line]` part."""
    lines = {}
    for line in output.splitlines():
        where, separator, rest = line.partition(": XM90")
        if separator:
            lines[where] = "XM90" + rest
    return lines


def split_location(item: tuple[str, str]) -> tuple[tuple[str, int | None], str]:
    """(`path[:line[:column]]`, message) -> ((path, line or None), message)."""
    where, message = item
    found = re.fullmatch(r"(?P<path>.*?)(?::(?P<line>\d+))?(?::\d+)?", where)
    assert found is not None
    line = found["line"]
    return (found["path"], int(line) if line else None), message


def test_no_run_crashes_and_each_exits_1_for_the_files_it_could_not_check(matrix: Matrix) -> None:
    for result in matrix.runs():
        output = result.stdout + result.stderr
        assert not any(sign in output for sign in CRASH_SIGNS), output[-3000:]
        assert result.returncode == 1, result.stderr[-3000:]
    assert "files could not be checked" in matrix.scan_json.stderr
    assert "files could not be rewritten" in matrix.rewrites["fp32-copy"].stderr


@pytest.mark.parametrize("name", CASES)
def test_scan_names_the_bad_file_and_its_line_and_still_finds_good_py(
    matrix: Matrix, name: str
) -> None:
    case = CASES[name]
    document = json.loads(matrix.scan_json.stdout)
    findings = found(document)
    assert (f"{name}/{GOOD}", 5, "XM101") in findings
    for path, finding_line in case.findings.items():
        assert (f"{name}/{path}", finding_line, "XM101") in findings
    reported = {
        error["path"]: (error["line"], error["message"])
        for error in document["errors"]
        if error["path"].startswith(f"{name}/")
    }
    assert set(reported) == {f"{name}/{path}" for path in case.errors}, reported
    for path, (line, fragment) in case.errors.items():
        got_line, message = reported[f"{name}/{path}"]
        assert got_line == line and fragment in message, (got_line, message)
    for path, data in case.files.items():
        assert (matrix.scan_root / name / path).read_bytes() == data, path


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", CASES)
def test_rewrite_reports_the_bad_file_rewrites_good_py_and_keeps_the_bad_bytes(
    matrix: Matrix, name: str, mode: str
) -> None:
    case = CASES[name]
    folder = matrix.roots[mode] / name
    result = matrix.rewrites[mode]
    assert (folder / GOOD).read_bytes() == mlp(mode, "out")
    for path, expected in case.rewrites.items():
        assert (folder / path).read_bytes() == expected(mode), path
    for path, data in case.files.items():
        if path not in case.rewrites and not case.bytes_checked_apart:
            assert (folder / path).read_bytes() == data, path
    if mode == "full-bf16":  # the JSON report
        document = json.loads(result.stdout)
        changed = {entry["path"] for entry in document["files"] if entry["changed"]}
        assert f"{name}/{GOOD}" in changed
        assert {f"{name}/{path}" for path in case.rewrites} <= changed
        reported = {
            error["path"]: (error["line"], error["message"])
            for error in document["errors"]
            if error["path"].startswith(f"{name}/")
        }
    else:  # the text report
        assert f"{name}/{GOOD}: rewrote (1 fix)" in result.stdout.splitlines()
        reported = {
            path: (line, message)
            for (path, line), message in map(split_location, error_lines(result.stdout).items())
            if path.startswith(f"{name}/")
        }
    expected = {**case.errors, **case.rewrite_errors}
    assert set(reported) == {f"{name}/{path}" for path in expected}, reported
    for path, (line, fragment) in expected.items():
        got_line, message = reported[f"{name}/{path}"]
        assert got_line == line and fragment in message, (got_line, message)


def test_every_legitimate_rewrite_is_a_fixed_point(matrix: Matrix) -> None:
    document = json.loads(matrix.recheck.stdout)
    assert [entry["path"] for entry in document["files"] if entry["changed"]] == []


def test_mixed_newlines_keep_each_untouched_line_ending(matrix: Matrix) -> None:
    """Half CRLF, half LF: the recipe is the same, and every line the rewrite did not touch
    keeps its own ending."""
    before = mixed_newlines(mlp()).splitlines(keepends=True)
    for mode in MODES:
        data = (matrix.roots[mode] / "mixed_crlf_and_lf_newlines" / "train.py").read_bytes()
        assert data.replace(b"\r\n", b"\n") == mlp(mode, "out"), mode
        after = data.splitlines(keepends=True)
        matcher = difflib.SequenceMatcher(
            a=[line.rstrip(b"\r\n") for line in before],
            b=[line.rstrip(b"\r\n") for line in after],
            autojunk=False,
        )
        kept = [
            (before[block.a + i], after[block.b + i])
            for block in matcher.get_matching_blocks()
            for i in range(block.size)
        ]
        # at most the flag line, the import only it used (fp32-copy sets no variable in its
        # place) and their blank lines
        assert len(kept) >= len(before) - 5, mode
        assert [old for old, _ in kept] == [new for _, new in kept], mode
        crlf = 1 if mode == "fp32-copy" else 3  # (`import os\r\n` and a blank were CRLF)
        assert sum(old.endswith(b"\r\n") for old, _ in kept) == crlf, mode


def test_a_read_only_file_is_rewritten_in_place_keeping_its_mode(matrix: Matrix) -> None:
    for mode in MODES:
        folder = matrix.roots[mode] / "read_only_file"
        assert (folder / "train.py").read_bytes() == mlp(mode, "out")
        assert stat.S_IMODE((folder / "train.py").stat().st_mode) == 0o444, mode
        assert sorted(path.name for path in folder.iterdir()) == [GOOD, "train.py"]  # no temp


@NEEDS_SYMLINKS
def test_symlink_loops_stay_links_and_the_folder_link_to_its_parent_is_not_walked(
    matrix: Matrix,
) -> None:
    document = json.loads(matrix.scan_json.stdout)
    assert not any("/sub/up/" in path for path, _, _ in found(document))
    for root in (matrix.scan_root, *matrix.roots.values()):
        folder = root / "symlink_loops"
        assert os.readlink(folder / "a.py") == "b.py"
        assert os.readlink(folder / "b.py") == "a.py"
        assert os.readlink(folder / "sub" / "up") == ".."


# --- cases with runs of their own --------------------------------------------------------------


def assert_no_crash(result: subprocess.CompletedProcess[str], exit_code: int) -> None:
    output = result.stdout + result.stderr
    assert not any(sign in output for sign in CRASH_SIGNS), output[-3000:]
    assert result.returncode == exit_code, output[-3000:]


# A generated lookup table, as code generators write them: 2,000 rows of 2,496 characters.
TABLE = (
    "\n\n# Generated lookup table: do not edit.\n_TABLE = [\n"
    + "".join(f'    "{(str(row) * 2496)[:2496]}",\n' for row in range(2000))
    + "]\n"
).encode()


def test_a_5_mb_python_file_is_scanned_and_rewritten_in_every_byte(tmp_path: Path) -> None:
    write_files(tmp_path, {"big.py": mlp() + TABLE, GOOD: mlp()})
    assert (tmp_path / "big.py").stat().st_size > 5_000_000
    scan = run_cli("scan", "--format", "json", cwd=tmp_path)
    assert_no_crash(scan, 1)
    assert found(json.loads(scan.stdout)) == [("big.py", 5, "XM101"), (GOOD, 5, "XM101")]
    rewrite = run_cli("rewrite", cwd=tmp_path)
    assert_no_crash(rewrite, 0)
    assert (tmp_path / "big.py").read_bytes() == mlp("full-bf16", "out") + TABLE
    assert (tmp_path / GOOD).read_bytes() == mlp("full-bf16", "out")


@pytest.mark.skipif(
    not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"),
    reason="POSIX only: this platform has no FIFOs or /dev/zero to point a script name at",
)
def test_fifos_and_devices_named_like_scripts_are_reported_not_read_forever(
    tmp_path: Path,
) -> None:
    """A FIFO blocked the read (and, without a suffix, the shebang sniff) for ever; a link to
    /dev/zero filled the memory. Runs on Linux (CI) and macOS."""
    write_files(tmp_path, {GOOD: mlp("full-bf16", "in")})
    os.mkfifo(tmp_path / "pipe.py")
    os.mkfifo(tmp_path / "pipe_without_suffix")
    (tmp_path / "zero.py").symlink_to("/dev/zero")
    for command in ("scan", "rewrite"):
        result = run_cli(command, cwd=tmp_path)
        assert_no_crash(result, 1)
        errors = error_lines(result.stdout)
        assert errors["pipe.py"] == "XM901 could not read: not a regular file"
        assert errors["zero.py"] == "XM901 could not read: not a regular file"
        assert "pipe_without_suffix" not in result.stdout + result.stderr
    assert (tmp_path / GOOD).read_bytes() == mlp("full-bf16", "out")


@NEEDS_SYMLINKS
def test_a_file_reached_again_through_a_folder_link_to_its_parent_is_one_file(
    tmp_path: Path,
) -> None:
    """Named twice, `.` and `sub/up` (a link to `.`) reached good.py twice: scan reported it
    twice, and rewrite wrote it once and then refused the second copy (XM902, exit 1)."""
    write_files(tmp_path, {GOOD: mlp()})
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "up").symlink_to("..", target_is_directory=True)
    scan = run_cli("scan", "--format", "json", ".", "sub/up", cwd=tmp_path)
    assert_no_crash(scan, 1)
    assert found(json.loads(scan.stdout)) == [(GOOD, 5, "XM101")]
    rewrite = run_cli("rewrite", ".", "sub/up", cwd=tmp_path)
    assert_no_crash(rewrite, 0)
    assert rewrite.stdout == f"{GOOD}: rewrote (1 fix)\n"
    assert (tmp_path / GOOD).read_bytes() == mlp("full-bf16", "out")


@NEEDS_SYMLINKS
def test_a_symlink_loop_named_on_the_command_line_is_a_usage_error_naming_it(
    tmp_path: Path,
) -> None:
    write_files(tmp_path, {GOOD: mlp()})
    (tmp_path / "a.py").symlink_to("b.py")
    (tmp_path / "b.py").symlink_to("a.py")
    for command in ("scan", "rewrite"):
        result = run_cli(command, "a.py", GOOD, cwd=tmp_path)
        assert_no_crash(result, 2)
        assert "no such file or directory: a.py" in result.stderr
    assert (tmp_path / GOOD).read_bytes() == mlp()  # a usage error writes nothing
    assert os.readlink(tmp_path / "a.py") == "b.py"


def test_directories_named_like_files_on_the_command_line_are_walked(tmp_path: Path) -> None:
    _directories_named_like_files(tmp_path)
    write_files(tmp_path, {GOOD: mlp()})
    named = ("train.py", "Dockerfile", "x.ipynb", "conf.yaml", GOOD)
    scan = run_cli("scan", "--format", "json", *named, cwd=tmp_path)
    assert_no_crash(scan, 1)
    document = json.loads(scan.stdout)
    assert found(document) == [
        ("Dockerfile/entry.py", 5, "XM101"),
        (GOOD, 5, "XM101"),
        ("train.py/model.py", 5, "XM101"),
    ]
    assert document["errors"] == []
    rewrite = run_cli("rewrite", *named, cwd=tmp_path)
    assert_no_crash(rewrite, 0)
    assert (tmp_path / "train.py" / "model.py").read_bytes() == mlp("full-bf16", "out")
    empty = run_cli("rewrite", "x.ipynb", cwd=tmp_path)
    assert_no_crash(empty, 0)
    assert "0 files scanned" in empty.stderr


COOKIES = {
    "unknown.py": b"# -*- coding: klingon -*-\n",
    "contradicted.py": b"\xef\xbb\xbf# -*- coding: latin-1 -*-\n",  # a UTF-8 BOM says otherwise
}


def test_an_unknown_or_contradicted_coding_cookie_is_reported_by_path(tmp_path: Path) -> None:
    write_files(tmp_path, {name: cookie + FLAG_WRITE.encode() for name, cookie in COOKIES.items()})
    write_files(tmp_path, {GOOD: mlp()})
    for command in ("scan", "rewrite"):
        result = run_cli(command, cwd=tmp_path)
        assert_no_crash(result, 1)
        errors = {where.split(":")[0]: error for where, error in error_lines(result.stdout).items()}
        assert set(errors) == set(COOKIES)
        assert all(error.startswith("XM901 could not parse: ") for error in errors.values())
        assert "encoding" in errors["unknown.py"] and "BOM" in errors["contradicted.py"]
    for name, cookie in COOKIES.items():
        assert (tmp_path / name).read_bytes() == cookie + FLAG_WRITE.encode()
    assert (tmp_path / GOOD).read_bytes() == mlp("full-bf16", "out")


def test_an_encoding_error_is_not_reported_on_line_0(tmp_path: Path) -> None:
    write_files(tmp_path, {"bad.py": b"# -*- coding: klingon -*-\n" + FLAG_WRITE.encode()})
    document = json.loads(run_cli("scan", "--format", "json", cwd=tmp_path).stdout)
    assert [error["line"] for error in document["errors"]] in ([None], [1])


# --- permissions -------------------------------------------------------------------------------


@NOT_AS_ROOT
def test_an_unreadable_file_is_reported_by_path_and_the_others_are_processed(
    tmp_path: Path,
) -> None:
    write_files(tmp_path, {"secret.py": FLAG_WRITE, GOOD: mlp()})
    (tmp_path / "secret.py").chmod(0o000)
    try:
        scan = run_cli("scan", cwd=tmp_path)
        assert_no_crash(scan, 1)
        assert error_lines(scan.stdout)["secret.py"].startswith("XM901 could not read: ")
        assert f"{GOOD}:5:1: XM101 " in scan.stdout
        rewrite = run_cli("rewrite", cwd=tmp_path)
        assert_no_crash(rewrite, 1)
        assert error_lines(rewrite.stdout)["secret.py"].startswith("XM901 could not read: ")
        assert (tmp_path / GOOD).read_bytes() == mlp("full-bf16", "out")
    finally:
        (tmp_path / "secret.py").chmod(0o644)
    assert (tmp_path / "secret.py").read_text() == FLAG_WRITE


def test_a_read_only_folder_fails_the_write_clearly_or_is_written_by_root(tmp_path: Path) -> None:
    """The writer replaces a file through a temporary file beside it: a folder that refuses
    new files refuses the rewrite, which is then reported (XM902) and leaves the file whole."""
    write_files(tmp_path, {"locked/train.py": mlp(), GOOD: mlp()})
    locked = tmp_path / "locked"
    locked.chmod(0o555)
    try:
        result = run_cli("rewrite", cwd=tmp_path)
        names = sorted(path.name for path in locked.iterdir())
    finally:
        locked.chmod(0o755)
    assert (tmp_path / GOOD).read_bytes() == mlp("full-bf16", "out")
    assert names == ["train.py"]  # no temporary file left either way
    if IS_ROOT:
        assert_no_crash(result, 0)
        assert (locked / "train.py").read_bytes() == mlp("full-bf16", "out")
    else:
        assert_no_crash(result, 1)
        assert error_lines(result.stdout)["locked/train.py"].startswith("XM902 could not write: ")
        assert (locked / "train.py").read_bytes() == mlp()


def _refuse_listing(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Makes the folder `name` unlistable for os.walk, as `chmod 000` does for a non-root user."""
    real_scandir = os.scandir

    def scandir(path: Any = ".") -> Any:
        if os.path.basename(os.fspath(path)) == name:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)


def test_a_folder_that_cannot_be_listed_is_reported_and_the_others_are_processed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    """os.walk skips a folder it cannot list without a word: its files would go unchecked."""
    write_files(tmp_path, {"locked/train.py": mlp(), GOOD: mlp()})
    monkeypatch.chdir(tmp_path)
    _refuse_listing(monkeypatch, "locked")
    settings = load_settings([Path(".")], catalogue).with_overrides(ignore=PRECISION_IGNORE)
    scan = scan_paths([Path(".")], settings, catalogue)
    assert [(e.path, e.line, e.message) for e in scan.errors] == [
        ("locked", None, "could not read the folder: Permission denied")
    ]
    assert [(f.path, f.span.line) for f in scan.findings] == [(GOOD, 5)]
    rewrite = rewrite_paths([Path(".")], settings, catalogue, RewriteRequest("full-bf16"))
    assert [e.path for e in rewrite.errors] == ["locked"]
    assert [outcome.path for outcome in rewrite.outcomes] == [GOOD]


@NOT_AS_ROOT
def test_an_unlistable_folder_fails_the_run_with_its_path(tmp_path: Path) -> None:
    write_files(tmp_path, {"locked/train.py": FLAG_WRITE, GOOD: mlp()})
    (tmp_path / "locked").chmod(0o000)
    try:
        for command in ("scan", "rewrite"):
            result = run_cli(command, cwd=tmp_path)
            assert_no_crash(result, 1)
            error = error_lines(result.stdout)["locked"]
            assert error.startswith("XM901 could not read the folder")
    finally:
        (tmp_path / "locked").chmod(0o755)
    assert (tmp_path / GOOD).read_bytes() == mlp("full-bf16", "out")


# --- a file that changes between planning and writing -----------------------------------------

EDITED = mlp().replace(b"lr=0.05", b"lr=0.01")  # what an editor saved meanwhile


def test_the_writer_refuses_a_file_changed_since_it_was_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalogue: Catalogue
) -> None:
    write_files(tmp_path, {"train.py": mlp(), GOOD: mlp()})
    monkeypatch.chdir(tmp_path)
    settings = load_settings([Path(".")], catalogue).with_overrides(ignore=PRECISION_IGNORE)
    report = rewrite_paths([Path(".")], settings, catalogue, RewriteRequest("autocast"))
    outcomes = {outcome.path: outcome for outcome in report.outcomes}
    assert set(outcomes) == {"train.py", GOOD} and all(o.changed for o in outcomes.values())
    (tmp_path / "train.py").write_bytes(EDITED)
    new = outcomes["train.py"].rewritten
    assert new is not None
    with pytest.raises(WriteError, match="changed since it was read; not overwritten"):
        write_atomically(tmp_path / "train.py", new, outcomes["train.py"].original)
    assert (tmp_path / "train.py").read_bytes() == EDITED
    good = outcomes[GOOD].rewritten
    assert good is not None
    write_atomically(tmp_path / GOOD, good, outcomes[GOOD].original)
    assert (tmp_path / GOOD).read_bytes() == mlp("autocast", "out")
    assert sorted(path.name for path in tmp_path.iterdir()) == [GOOD, "train.py"]


# The real CLI, with the engine's planning wrapped so that train.py changes once it is planned.
EDIT_AFTER_PLANNING = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import xlamigrate.engine
    from xlamigrate.cli import main

    plan = xlamigrate.engine.rewrite_paths

    def plan_then_edit(*args, **kwargs):
        report = plan(*args, **kwargs)
        Path("train.py").write_bytes(Path("edited").read_bytes())
        return report

    xlamigrate.engine.rewrite_paths = plan_then_edit
    sys.argv = ["xlamigrate", *sys.argv[1:], "--ignore", "XM5,XM409"]
    main()
    """
)


def test_the_cli_refuses_to_overwrite_a_file_changed_after_planning(tmp_path: Path) -> None:
    mode = "fp32-copy"
    write_files(tmp_path, {"train.py": mlp(), GOOD: mlp(), "edited": EDITED})
    result = subprocess.run(
        [sys.executable, "-c", EDIT_AFTER_PLANNING, "rewrite", "--mode", mode, "train.py", GOOD],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert_no_crash(result, 1)
    assert "train.py: XM902 the file changed since it was read; not overwritten" in (
        result.stdout.splitlines()
    )
    assert "train.py: rewrote" not in result.stdout
    assert f"{GOOD}: rewrote (1 fix)" in result.stdout.splitlines()
    assert "1 file could not be rewritten" in result.stderr
    assert (tmp_path / "train.py").read_bytes() == EDITED
    assert (tmp_path / GOOD).read_bytes() == mlp(mode, "out")
    assert sorted(snapshot(tmp_path)) == ["edited", GOOD, "train.py"]  # no temporary file
