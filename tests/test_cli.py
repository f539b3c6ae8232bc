"""The `xlamigrate` console script end to end: exit codes, selection, configuration, discovery,
suppression comments, parallel scanning and the `rule` command, each run in a real subprocess."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import xlamigrate
from tests.clirunner import Result, invoke
from tests.conftest import ROOT
from xlamigrate.cli import command_parser, commands

WRITE_USE_BF16 = 'import os\nos.environ["XLA_USE_BF16"] = "1"\n'
# One finding of each access kind: XM101 write (line 2), XM201 read (line 3), XM202 delete (line 4).
WRITE_READ_DELETE = (
    "import os\n"
    'os.environ["XLA_USE_BF16"] = "1"\n'
    'downcast = os.getenv("XLA_DOWNCAST_BF16")\n'
    'del os.environ["XLA_DOWNCAST_BF16"]\n'
)
CLEAN = 'import os\nos.environ["NEURON_CC_FLAGS"] = "--auto-cast=none"\nprint("XLA_USE_BF")\n'
# A file that writes XLA_USE_BF16 on and builds no model keeps its write (manual): the XM101 says
# "see XM401", and the scan lists that XM401 (the model it could not find) on the write's line.
FINDING_LINE = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+):(?P<column>\d+): (?P<code>XM\d{3}) ")


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def scan_json(*args: str, cwd: Path, expect_exit: int | None = None) -> dict[str, Any]:
    result = run_cli("scan", "--format", "json", *args, cwd=cwd)
    if expect_exit is not None:
        assert result.returncode == expect_exit, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def write_files(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def found(document: dict[str, Any]) -> list[tuple[str, int, str]]:
    return [(f["path"], f["line"], f["code"]) for f in document["findings"]]


def finding_codes(document: dict[str, Any]) -> set[str]:
    return {f["code"] for f in document["findings"]}


# --- exit code 0 -------------------------------------------------------------------------------


def test_scan_exits_0_on_an_empty_folder(tmp_path: Path) -> None:
    result = run_cli("scan", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert "0 files scanned" in result.stderr


def test_scan_exits_0_on_files_that_never_mention_a_flag(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {
            "train.py": CLEAN,
            "pkg/model.py": "import torch\nmodel = torch.nn.Linear(2, 2).to(torch.bfloat16)\n",
            "pkg/__init__.py": "",
            # Never mentions a flag, so it is never parsed (see `xlamigrate rule XM901`).
            "legacy.py": 'print "hello"\n',
        },
    )
    result = run_cli("scan", "--format", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["files_scanned"] == 4
    assert document["findings"] == []
    assert document["errors"] == []
    assert result.stderr.strip() == (
        "No legacy precision flags or outdated torch-xla APIs found (4 files scanned)."
    )


# --- exit code 1 -------------------------------------------------------------------------------


def test_scan_exits_1_on_findings_in_the_current_folder_by_default(tmp_path: Path) -> None:
    write_files(tmp_path, {"train.py": WRITE_USE_BF16, "clean.py": CLEAN})
    document = scan_json(cwd=tmp_path, expect_exit=1)  # no PATHS: `.`
    assert found(document) == [("train.py", 2, "XM101"), ("train.py", 2, "XM401")]
    assert document["files_scanned"] == 2


def test_scan_exit_zero_reports_findings_but_exits_0(tmp_path: Path) -> None:
    write_files(tmp_path, {"train.py": WRITE_USE_BF16, "broken.py": 'print "XLA_USE_BF16"\n'})
    result = run_cli("scan", "--exit-zero", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "train.py:2:1: XM101 " in result.stdout
    assert "broken.py:1:1: XM901 " in result.stdout  # the column where Python's parser stopped


def test_scan_reports_unparsable_files_with_path_and_line_and_scans_the_others(
    tmp_path: Path,
) -> None:
    write_files(
        tmp_path,
        {
            "a_first.py": WRITE_USE_BF16,
            "b_python2.py": 'import os\nx = 1\nprint "XLA_USE_BF16"\n',
            "c_middle.py": 'import os\nflag = os.environ.get("XLA_USE_BF16")\n',
            "d_syntax.py": 'import os\ndef configure(:\n    os.environ["XLA_USE_BF16"] = "1"\n',
            "e_last.py": 'import os\ndel os.environ["XLA_DOWNCAST_BF16"]\n',
        },
    )
    document = scan_json(cwd=tmp_path, expect_exit=1)
    assert found(document) == [
        ("a_first.py", 2, "XM101"),
        ("a_first.py", 2, "XM401"),
        ("c_middle.py", 2, "XM201"),
        ("e_last.py", 2, "XM202"),
    ]
    errors = {error["path"]: error for error in document["errors"]}
    assert set(errors) == {"b_python2.py", "d_syntax.py"}
    assert errors["b_python2.py"]["line"] == 3
    assert isinstance(errors["d_syntax.py"]["line"], int)
    assert all(error["message"] for error in errors.values())
    assert document["files_scanned"] == 5


def test_scan_exits_1_when_the_only_problem_is_an_unparsable_file(tmp_path: Path) -> None:
    write_files(
        tmp_path, {"old.py": 'import os\nprint "XLA_USE_BF16 is", os.environ["XLA_USE_BF16"]\n'}
    )
    result = run_cli("scan", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == (
        "old.py:2:1: XM901 could not parse: Missing parentheses in call to 'print'."
        " Did you mean print(...)?\n"
    )
    assert "could not be checked" in result.stderr


def test_scan_reports_a_syntax_error_on_the_line_that_has_it(tmp_path: Path) -> None:
    write_files(tmp_path, {"syntax.py": 'import os\n\nos.environ["XLA_USE_BF16"] = = "1"\nx = 1\n'})
    document = scan_json(cwd=tmp_path, expect_exit=1)
    assert [(e["path"], e["line"]) for e in document["errors"]] == [("syntax.py", 3)]


def test_scan_reports_undecodable_bytes_with_path_and_line_and_scans_the_others(
    tmp_path: Path,
) -> None:
    write_files(
        tmp_path,
        {"bad.py": b'# XLA_USE_BF16\nx = "\xff"\n', "good.py": WRITE_USE_BF16},
    )
    document = scan_json(cwd=tmp_path, expect_exit=1)
    assert found(document) == [("good.py", 2, "XM101"), ("good.py", 2, "XM401")]
    assert [(e["path"], e["line"]) for e in document["errors"]] == [("bad.py", 2)]


def test_scan_reports_undecodable_bytes_under_a_coding_cookie_with_their_line(
    tmp_path: Path,
) -> None:
    write_files(
        tmp_path,
        {
            "bad.py": b'# XLA_USE_BF16\n# -*- coding: utf-8 -*-\nx = "\xff"\n',
            "good.py": WRITE_USE_BF16,
        },
    )
    document = scan_json(cwd=tmp_path, expect_exit=1)
    assert found(document) == [("good.py", 2, "XM101"), ("good.py", 2, "XM401")]
    assert [(e["path"], e["line"]) for e in document["errors"]] == [("bad.py", 3)]


# --- exit code 2 -------------------------------------------------------------------------------


def test_scan_exits_2_on_unknown_select_or_ignore_code(tmp_path: Path) -> None:
    write_files(tmp_path, {"train.py": WRITE_USE_BF16})
    for option in ("--select", "--ignore"):
        result = run_cli("scan", option, "XM1,XM999", cwd=tmp_path)
        assert result.returncode == 2, (option, result.stderr)
        assert "XM999" in result.stderr
        assert result.stdout == ""


def test_scan_exits_2_on_unknown_format(tmp_path: Path) -> None:
    write_files(tmp_path, {"train.py": WRITE_USE_BF16})
    result = run_cli("scan", "--format", "yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert "yaml" in result.stderr
    assert result.stdout == ""


def test_scan_exits_2_on_a_missing_path(tmp_path: Path) -> None:
    write_files(tmp_path, {"train.py": WRITE_USE_BF16})
    result = run_cli("scan", "train.py", "no_such_dir", cwd=tmp_path)
    assert result.returncode == 2
    assert "no_such_dir" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ('[tool.xlamigrate]\nselects = ["XM1"]\n', "selects"),
        ('[tool.xlamigrate]\nmode = "turbo-bf16"\n', "turbo-bf16"),
        ('[tool.xlamigrate]\nselect = ["XM999"]\n', "xm999"),
        ('[tool.xlamigrate]\nselect = "XM1"\n', "select"),
        ('[tool.xlamigrate\nselect = ["XM1"]\n', "toml"),
    ],
    ids=["unknown-key", "bad-mode", "unknown-code", "select-not-a-list", "bad-toml"],
)
def test_scan_exits_2_on_invalid_config(tmp_path: Path, table: str, expected: str) -> None:
    write_files(tmp_path, {"pyproject.toml": table, "train.py": WRITE_USE_BF16})
    result = run_cli("scan", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "pyproject.toml" in result.stderr
    assert expected in result.stderr.lower()
    assert result.stdout == ""


def test_scan_exits_2_when_config_option_names_a_missing_file(tmp_path: Path) -> None:
    write_files(tmp_path, {"train.py": WRITE_USE_BF16})
    result = run_cli("scan", "--config", "elsewhere/pyproject.toml", cwd=tmp_path)
    assert result.returncode == 2
    assert "elsewhere/pyproject.toml" in result.stderr


# --- selection ---------------------------------------------------------------------------------


def test_select_and_ignore_take_code_prefixes(tmp_path: Path) -> None:
    write_files(tmp_path, {"train.py": WRITE_READ_DELETE})
    assert scan_json("--select", "XM3", cwd=tmp_path, expect_exit=0)["findings"] == []
    assert finding_codes(scan_json("--select", "XM2", cwd=tmp_path)) == {"XM201", "XM202"}
    assert finding_codes(scan_json("--ignore", "XM1", cwd=tmp_path)) == {"XM201", "XM202"}
    only_reads = scan_json("--select", "xm2", "--ignore", "XM202", cwd=tmp_path, expect_exit=1)
    assert finding_codes(only_reads) == {"XM201"}


def test_select_and_ignore_accept_comma_separated_and_repeated_forms(tmp_path: Path) -> None:
    write_files(tmp_path, {"train.py": WRITE_READ_DELETE})
    comma = scan_json("--select", "XM101,XM202", cwd=tmp_path)
    repeated = scan_json("--select", "XM101", "--select", "XM202", cwd=tmp_path)
    # (the XM401 the kept XM101 refers to is listed with it, as `rewrite` lists it)
    assert finding_codes(comma) == finding_codes(repeated) == {"XM101", "XM401", "XM202"}
    ignored = scan_json("--ignore", "XM101, XM201", "--ignore", "XM3", cwd=tmp_path)
    assert finding_codes(ignored) == {"XM202"}


# --- [tool.xlamigrate] -------------------------------------------------------------------------


def test_config_select_ignore_and_exclude_from_pyproject(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {
            "pyproject.toml": (
                '[project]\nname = "demo"\n\n'
                '[tool.xlamigrate]\nselect = ["XM1", "XM2"]\nignore = ["XM202"]\n'
                'exclude = ["generated/", "legacy_*.py"]\nmode = "full-bf16"\n'
            ),
            "train.py": WRITE_READ_DELETE,
            "generated/train.py": WRITE_READ_DELETE,
            "legacy_launch.py": WRITE_READ_DELETE,
            "pkg/legacy_helpers.py": WRITE_READ_DELETE,
        },
    )
    document = scan_json(cwd=tmp_path, expect_exit=1)
    assert found(document) == [
        ("train.py", 2, "XM101"), ("train.py", 2, "XM401"), ("train.py", 3, "XM201"),
    ]  # fmt: skip
    assert document["files_scanned"] == 1


def test_config_exclude_is_relative_to_the_pyproject_folder(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {
            "pyproject.toml": '[tool.xlamigrate]\nexclude = ["/pkg/generated"]\n',
            "pkg/generated/out.py": WRITE_USE_BF16,
            "pkg/train.py": WRITE_USE_BF16,
        },
    )
    document = scan_json(cwd=tmp_path / "pkg", expect_exit=1)
    assert found(document) == [("train.py", 2, "XM101"), ("train.py", 2, "XM401")]


def test_config_skips_a_nearer_pyproject_without_the_table(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {
            "pyproject.toml": '[tool.xlamigrate]\nselect = ["XM2"]\n',
            "service/pyproject.toml": '[project]\nname = "service"\n\n[tool.ruff]\nfix = true\n',
            "service/train.py": WRITE_READ_DELETE,
        },
    )
    inside = scan_json(cwd=tmp_path / "service", expect_exit=1)
    assert found(inside) == [("train.py", 3, "XM201"), ("train.py", 4, "XM202")]
    from_above = scan_json("service", cwd=tmp_path, expect_exit=1)
    assert found(from_above) == [("service/train.py", 3, "XM201"), ("service/train.py", 4, "XM202")]


def test_config_nearest_pyproject_with_the_table_wins(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {
            "pyproject.toml": '[tool.xlamigrate]\nselect = ["XM2"]\n',
            "service/pyproject.toml": '[tool.xlamigrate]\nselect = ["XM1"]\n',
            "service/train.py": WRITE_READ_DELETE,
        },
    )
    document = scan_json(cwd=tmp_path / "service", expect_exit=1)
    assert found(document) == [("train.py", 2, "XM101"), ("train.py", 2, "XM401")]


def test_config_option_reads_the_named_pyproject(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {
            "pyproject.toml": '[tool.xlamigrate]\nselect = ["XM2"]\n',
            "ci/pyproject.toml": '[tool.xlamigrate]\nselect = ["XM1"]\n',
            "train.py": WRITE_READ_DELETE,
        },
    )
    document = scan_json("--config", "ci/pyproject.toml", cwd=tmp_path, expect_exit=1)
    assert found(document) == [("train.py", 2, "XM101"), ("train.py", 2, "XM401")]


def test_cli_select_replaces_the_configured_selection(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {"pyproject.toml": '[tool.xlamigrate]\nselect = ["XM2"]\n', "train.py": WRITE_READ_DELETE},
    )
    document = scan_json("--select", "XM101", cwd=tmp_path, expect_exit=1)
    assert found(document) == [("train.py", 2, "XM101"), ("train.py", 2, "XM401")]


def test_exclude_option_adds_gitignore_style_patterns(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {
            "pyproject.toml": '[tool.xlamigrate]\nexclude = ["generated/"]\n',
            "generated/out.py": WRITE_USE_BF16,
            "scratch/try_bf16.py": WRITE_USE_BF16,
            "train.py": WRITE_USE_BF16,
        },
    )
    document = scan_json("--exclude", "scratch/", cwd=tmp_path, expect_exit=1)
    assert found(document) == [("train.py", 2, "XM101"), ("train.py", 2, "XM401")]


# --- suppression comments ----------------------------------------------------------------------


def test_noqa_and_pragma_comments_suppress_findings_through_the_cli(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {
            "train.py": (
                "import os\n"
                'os.environ["XLA_USE_BF16"] = "1"  # noqa: XM101\n'
                'os.environ["XLA_USE_BF16"] = "1"  # xlamigrate: ignore[XM101]\n'
                'os.environ["XLA_USE_BF16"] = "1"  # noqa: E501\n'
                'os.environ["XLA_DOWNCAST_BF16"] = "1"  # noqa: XM101\n'
                'os.environ["XLA_DOWNCAST_BF16"] = "1"  # noqa: XM1\n'
                'flag = os.getenv("XLA_USE_BF16")  # noqa\n'
            ),
        },
    )
    document = scan_json(cwd=tmp_path, expect_exit=1)
    assert found(document) == [
        ("train.py", 4, "XM101"), ("train.py", 4, "XM401"), ("train.py", 5, "XM102"),
    ]  # fmt: skip


def test_scan_exits_0_when_every_finding_is_suppressed(tmp_path: Path) -> None:
    write_files(
        tmp_path, {"train.py": 'import os\nos.environ["XLA_USE_BF16"] = "1"  # noqa: XM101\n'}
    )
    result = run_cli("scan", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""


# --- output streams and order ------------------------------------------------------------------


def test_summary_goes_to_stderr_and_findings_to_stdout(tmp_path: Path) -> None:
    write_files(tmp_path, {"train.py": WRITE_READ_DELETE, "clean.py": CLEAN})
    result = run_cli("scan", cwd=tmp_path)
    assert result.returncode == 1
    stdout_lines = result.stdout.splitlines()
    firsts = [line for line in stdout_lines if line and not line.startswith("  ")]
    assert len(firsts) == 4  # XM101, the XM401 it refers to, XM201, XM202
    assert all(FINDING_LINE.match(line) for line in firsts), stdout_lines
    assert "\x1b[" not in result.stdout  # plain text when stdout is not a terminal
    summary = result.stderr.splitlines()
    assert summary[0] == "Found 4 findings in 1 file (2 files scanned)."

    as_json = run_cli("scan", "--format", "json", cwd=tmp_path)
    assert len(json.loads(as_json.stdout)["findings"]) == 4  # stdout is pure JSON
    assert as_json.stderr.splitlines() == summary


def test_findings_are_sorted_by_path_then_line(tmp_path: Path) -> None:
    many_lines = "import os\n" + "".join(
        f'os.environ["XLA_USE_BF16"] = "{n}"\n' for n in range(1, 12)
    )
    write_files(
        tmp_path,
        {
            "zeta.py": WRITE_READ_DELETE,
            "alpha.py": many_lines,
            "pkg/beta.py": (
                'import os\nx = 1\nv = os.getenv("XLA_USE_BF16")\n'
                'os.environ["XLA_USE_BF16"] = "1"\n'
            ),
            "pkg/alpha.py": WRITE_USE_BF16,
            "mid.py": WRITE_USE_BF16,
        },
    )
    document = scan_json(cwd=tmp_path, expect_exit=1)
    keys = [(f["path"], f["line"], f["column"]) for f in document["findings"]]
    assert keys == sorted(keys)
    alpha = [(f["line"], f["code"]) for f in document["findings"] if f["path"] == "alpha.py"]
    assert alpha == [(2, "XM101"), (2, "XM401"), *((line, "XM101") for line in range(3, 13))]
    assert [f["path"] for f in document["findings"]][-1] == "zeta.py"

    text = run_cli("scan", cwd=tmp_path)
    text_keys = []
    for line in text.stdout.splitlines():
        if not line or line.startswith("  "):  # a blank line, a finding's help: or note:
            continue
        match = FINDING_LINE.match(line)
        assert match, line
        text_keys.append((match["path"], int(match["line"]), int(match["column"])))
    assert text_keys == keys


def test_jobs_1_and_jobs_2_give_identical_json(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {}
    for n in range(20):
        files[f"pkg{n % 3}/module_{n:02d}.py"] = (
            "import os\n"
            + "\n" * (n % 4)
            + f'os.environ["XLA_USE_BF16"] = "{n % 2}"\n'
            + 'dtype = os.getenv("XLA_DOWNCAST_BF16")\n'
        )
    files["pkg0/broken.py"] = 'print "XLA_USE_BF16"\n'
    write_files(tmp_path, files)
    serial = run_cli("scan", "--format", "json", "-j", "1", cwd=tmp_path)
    parallel = run_cli("scan", "--format", "json", "--jobs", "2", cwd=tmp_path)
    assert serial.returncode == parallel.returncode == 1
    assert serial.stdout == parallel.stdout
    document = json.loads(serial.stdout)
    assert document["files_scanned"] == 21
    # 20 writes, 20 reads, and the XM401 of each of the 10 writes that turn the flag on
    assert len(document["findings"]) == 50
    assert [e["path"] for e in document["errors"]] == ["pkg0/broken.py"]


# --- discovery ---------------------------------------------------------------------------------

SKIPPED_FOLDERS = [
    ".git/hooks/pre_commit.py",
    ".venv/lib/python3.11/torch_xla/env.py",
    "venv/setup_env.py",
    "my-env/lib/helpers.py",  # a virtualenv by its pyvenv.cfg, whatever its name
    "node_modules/some-package/gen.py",
    "third_party/site-packages/transformers/modeling_utils.py",
    "build/lib/pkg/train.py",
]


def test_discovery_skips_vcs_virtualenv_vendored_and_build_folders(tmp_path: Path) -> None:
    write_files(tmp_path, {path: WRITE_USE_BF16 for path in SKIPPED_FOLDERS})
    write_files(
        tmp_path, {"my-env/pyvenv.cfg": "home = /usr/bin\n", "src/train.py": WRITE_USE_BF16}
    )
    document = scan_json(cwd=tmp_path, expect_exit=1)
    assert found(document) == [("src/train.py", 2, "XM101"), ("src/train.py", 2, "XM401")]
    assert document["files_scanned"] == 1


def test_explicitly_named_files_are_scanned_even_in_skipped_folders(tmp_path: Path) -> None:
    write_files(tmp_path, {path: WRITE_USE_BF16 for path in SKIPPED_FOLDERS})
    write_files(tmp_path, {"my-env/pyvenv.cfg": "home = /usr/bin\n"})
    document = scan_json(*SKIPPED_FOLDERS, cwd=tmp_path, expect_exit=1)
    assert sorted((f["path"], f["code"]) for f in document["findings"]) == sorted(
        (path, code) for path in SKIPPED_FOLDERS for code in ("XM101", "XM401")
    )


def test_a_file_named_twice_is_scanned_once(tmp_path: Path) -> None:
    write_files(tmp_path, {"train.py": WRITE_USE_BF16})
    document = scan_json("train.py", ".", "./train.py", cwd=tmp_path, expect_exit=1)
    assert found(document) == [("train.py", 2, "XM101"), ("train.py", 2, "XM401")]
    assert document["files_scanned"] == 1


@pytest.fixture
def git_repository(tmp_path: Path) -> Path:
    git = shutil.which("git")
    assert git is not None, "these tests compare with git itself: install git"
    subprocess.run([git, "init", "-q", str(tmp_path)], check=True, capture_output=True)
    write_files(
        tmp_path,
        {
            ".gitignore": "ignored.py\ngenerated/\n*_gen.py\n!important_gen.py\n",
            "sub/.gitignore": "*.py\n!keep.py\n",
            "train.py": WRITE_USE_BF16,
            "ignored.py": WRITE_USE_BF16,
            "generated/model.py": WRITE_USE_BF16,
            "schema_gen.py": WRITE_USE_BF16,
            "important_gen.py": WRITE_USE_BF16,
            "sub/keep.py": WRITE_USE_BF16,
            "sub/scratch.py": WRITE_USE_BF16,
            "sub/deeper/notes.py": WRITE_USE_BF16,
        },
    )
    return tmp_path


def git_ignored(repository: Path, paths: list[str]) -> set[str]:
    """What git itself ignores: the oracle for the .gitignore tests."""
    result = subprocess.run(
        ["git", "check-ignore", "--no-index", *paths],
        cwd=repository,
        capture_output=True,
        text=True,
    )
    return set(result.stdout.split())


def test_discovery_skips_what_gitignore_ignores_like_git_does(git_repository: Path) -> None:
    document = scan_json(cwd=git_repository, expect_exit=1)
    assert {f["code"] for f in document["findings"]} == {"XM101", "XM401"}
    paths = sorted({f["path"] for f in document["findings"]})
    assert paths == ["important_gen.py", "sub/keep.py", "train.py"]
    assert len(document["findings"]) == 2 * len(paths)
    every_file = [
        "train.py", "ignored.py", "generated/model.py", "schema_gen.py", "important_gen.py",
        "sub/keep.py", "sub/scratch.py", "sub/deeper/notes.py",
    ]  # fmt: skip
    assert set(every_file) - git_ignored(git_repository, every_file) == set(paths)


def test_nested_gitignore_applies_when_scanning_a_subfolder(git_repository: Path) -> None:
    from_root = scan_json("sub", cwd=git_repository, expect_exit=1)
    assert found(from_root) == [("sub/keep.py", 2, "XM101"), ("sub/keep.py", 2, "XM401")]
    from_inside = scan_json(cwd=git_repository / "sub", expect_exit=1)
    assert found(from_inside) == [("keep.py", 2, "XM101"), ("keep.py", 2, "XM401")]


def test_no_respect_gitignore_scans_ignored_files(git_repository: Path) -> None:
    document = scan_json("--no-respect-gitignore", cwd=git_repository, expect_exit=1)
    assert sorted(f["path"] for f in document["findings"] if f["code"] == "XM101") == [
        "generated/model.py",
        "ignored.py",
        "important_gen.py",
        "schema_gen.py",
        "sub/deeper/notes.py",
        "sub/keep.py",
        "sub/scratch.py",
        "train.py",
    ]
    assert sorted((f["path"], f["line"], f["code"]) for f in document["findings"]) == sorted(
        (f["path"], 2, code)
        for f in document["findings"]
        if f["code"] == "XM101"
        for code in ("XM101", "XM401")
    )  # each with its XM401


def test_explicitly_named_gitignored_file_is_scanned(git_repository: Path) -> None:
    document = scan_json("ignored.py", "sub/scratch.py", cwd=git_repository, expect_exit=1)
    assert found(document) == [
        ("ignored.py", 2, "XM101"), ("ignored.py", 2, "XM401"),
        ("sub/scratch.py", 2, "XM101"), ("sub/scratch.py", 2, "XM401"),
    ]  # fmt: skip


# --- the rule command and --version ------------------------------------------------------------

SCAN_CODES = ["XM101", "XM102", "XM103", "XM201", "XM202", "XM301", "XM901"]
ALL_CODES = sorted(path.stem for path in (ROOT / "rules").glob("XM*.toml"))


def test_rule_prints_the_explanation(tmp_path: Path) -> None:
    result = run_cli("rule", "XM101", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("XM101 (use-bf16-write): ")
    assert "XLA_USE_BF16" in result.stdout
    assert "bfloat16" in result.stdout  # the explanation body, not only the summary
    assert "Severity: error" in result.stdout
    lower = run_cli("rule", "xm202", cwd=tmp_path)
    assert lower.returncode == 0
    assert lower.stdout.startswith("XM202 ")


def test_rule_all_lists_every_code(tmp_path: Path) -> None:
    result = run_cli("rule", "--all", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    codes = [line.split()[0] for line in result.stdout.splitlines() if line.strip()]
    assert codes == ALL_CODES
    assert set(SCAN_CODES) <= set(codes)


def test_rule_all_lines_up_its_columns_for_the_longest_name(tmp_path: Path) -> None:
    lines = run_cli("rule", "--all", cwd=tmp_path).stdout.splitlines()
    assert len({line.index(" fix: ") for line in lines}) == 1  # one column, long names too
    assert "legacy-flag-stays-with-autocast  " in "".join(lines)


def test_rule_all_with_a_code_is_a_usage_error_not_ignored(tmp_path: Path) -> None:
    result = run_cli("rule", "--all", "XM101", cwd=tmp_path)
    assert result.returncode == 2
    assert "give a rule code or --all, not both" in result.stderr
    assert result.stdout == ""


def test_rule_exits_2_on_an_unknown_code(tmp_path: Path) -> None:
    result = run_cli("rule", "NOPE", cwd=tmp_path)
    assert result.returncode == 2
    assert "NOPE" in result.stderr
    assert result.stdout == ""


def test_version_prints_the_package_version(tmp_path: Path) -> None:
    result = run_cli("--version", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.strip() == f"xlamigrate {xlamigrate.__version__}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the children")
def test_workers_exit_when_the_parent_is_killed(tmp_path: Path) -> None:
    """A scan killed by a CI timeout (SIGKILL) left its pool's workers scanning for minutes."""
    body = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(1500))
    for index in range(40):
        (tmp_path / f"train_{index}.py").write_text(
            f'import os\nos.environ["XLA_USE_BF16"] = "{index % 2}"\n{body}'
        )
    scan = subprocess.Popen(
        [sys.executable, "-m", "xlamigrate.cli", "scan", "--jobs", "2", "."],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip

    def children() -> list[int]:
        found = []
        for status in Path("/proc").glob("[0-9]*/status"):
            try:
                fields = dict(
                    line.split(":\t", 1)
                    for line in status.read_text().splitlines()
                    if ":\t" in line
                )
            except OSError:
                continue
            if fields.get("PPid", "").strip() == str(scan.pid):
                found.append(int(status.parent.name))
        return found

    deadline = time.monotonic() + 30
    workers: list[int] = []
    while time.monotonic() < deadline and len(workers) < 2 and scan.poll() is None:
        workers = children()
        time.sleep(0.05)
    assert len(workers) == 2, "the pool did not start"
    scan.kill()
    scan.wait()
    deadline = time.monotonic() + 5
    alive = workers
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if Path(f"/proc/{pid}").exists() and not _zombie(pid)]
        time.sleep(0.05)
    assert alive == [], "workers outlived their parent"


def _zombie(pid: int) -> bool:
    try:
        return "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


@pytest.mark.parametrize("command", ["scan", "rewrite"])
def test_help_names_values_plainly_describes_every_option_and_says_the_exit_codes(
    tmp_path: Path, command: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", command, "--help"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**os.environ, "COLUMNS": "100"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "<list[str]>" not in text and "<int range>" not in text and "<str>" not in text
    for option in ("--select CODES", "--exclude PATTERN", "-j, --jobs N", "--config FILE"):
        assert option in text, option
    assert "Skip files .gitignore ignores." in text
    assert "Exit codes: 0 nothing" in " ".join(text.split())


# Every registered command, by name, as the console script builds them.
COMMANDS = commands()
# A narrow terminal, the default and a wide one.
HELP_WIDTHS = ["40", "80", "200"]
PYTHON_TYPES = ("list[", "<list", "Path]", "<path", "<int", "<str", "<float", "<bool", "range>")


def help_output(*args: str, columns: str, cwd: Path) -> str:
    """`xlamigrate ARGS --help` laid out for a terminal COLUMNS wide, whatever this one is."""
    result = subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", *args, "--help"],
        cwd=cwd, capture_output=True, text=True, timeout=60,
        env={**os.environ, "COLUMNS": columns},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def listed_commands(text: str) -> dict[str, str]:
    """The Commands section of a help: each command's summary, its wrapped lines joined."""
    assert "\nCommands:\n" in text, text
    summaries: dict[str, str] = {}
    name = ""
    for line in text.split("\nCommands:\n", 1)[1].splitlines():
        if not line.strip():
            break
        entry = re.match(r"^  (\S+)(?:\s{2,}(\S.*))?$", line)
        if entry:
            name = entry[1]
            summaries[name] = entry[2] or ""
        else:  # a continuation line (wrapped at spaces and after hyphens)
            joiner = "" if summaries[name].endswith("-") else " "
            summaries[name] = (summaries[name] + joiner + line.strip()).strip()
    return summaries


def test_the_help_knows_every_command() -> None:
    assert list(COMMANDS) == ["scan", "rewrite", "verify", "rule"]


@pytest.mark.parametrize("columns", HELP_WIDTHS)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_no_help_shows_a_python_type(tmp_path: Path, command: str, columns: str) -> None:
    text = help_output(command, columns=columns, cwd=tmp_path)
    for python_type in PYTHON_TYPES:
        assert python_type not in text, (python_type, text)
    for placeholder in re.findall(r"<([^<>\s]*)>", text):
        assert "|" in placeholder, placeholder  # only an option's choices, as <text|json>
    section = text.split("\nArguments:\n", 1)[1].split("\n\n", 1)[0]
    arguments = [a for a in command_parser(command)._actions if not a.option_strings]
    assert arguments, command  # every command takes one: the section is checked, not skipped
    for argument in arguments:
        name = str(argument.metavar) + ("..." if argument.nargs in ("*", "+") else "")
        assert re.search(rf"^  {re.escape(name)}(  |$)", section, re.MULTILINE), (name, text)


@pytest.mark.parametrize("columns", HELP_WIDTHS)
def test_an_argument_reads_as_its_usage_names_it_with_its_description(
    tmp_path: Path, columns: str
) -> None:
    scan_help = " ".join(help_output("scan", columns=columns, cwd=tmp_path).split())
    assert "scan [OPTIONS] [PATHS]..." in scan_help
    assert "Arguments: PATHS... Files or folders to scan (default: the current folder)." in (
        scan_help
    )
    verify_help = " ".join(help_output("verify", columns=columns, cwd=tmp_path).split())
    assert "verify [OPTIONS] SCRIPT [ARGS]..." in verify_help
    assert "Arguments: SCRIPT The training script," in verify_help
    assert " ARGS... After `--`: " in verify_help
    for option in ("--steps N ", "--rtol FRACTION ", "--legacy-env NAME=VALUE ", "--plot FILE "):
        assert option in verify_help, option
    assert "-m, --mode <full-bf16|fp32-copy|autocast|all> " in verify_help


@pytest.mark.parametrize("columns", HELP_WIDTHS)
def test_top_level_help_lists_every_command_with_its_whole_summary(
    tmp_path: Path, columns: str
) -> None:
    summaries = listed_commands(help_output(columns=columns, cwd=tmp_path))
    assert list(summaries) == list(COMMANDS)
    for name, command in COMMANDS.items():
        summary = summaries[name]
        assert not summary.endswith(("...", "\u2026")), (name, summary)
        assert summary[:1].isupper() and summary.endswith("."), (name, summary)
        # (its own sentence, given whole, not the description's first line cut short)
        assert summary == command.summary, (name, summary)
    assert summaries["verify"] == (
        "Compare how a script and its rewrites train on torch-xla's CPU."
    )  # (not the description's first line, cut at "... on torch-xla's CPU device...")
    assert summaries["rule"] == "Explain a rule, or list them all."


def test_python_m_help_lists_the_commands_as_the_console_script_does(tmp_path: Path) -> None:
    from_module = help_output(columns="80", cwd=tmp_path)
    in_process = subprocess.run(
        [sys.executable, "-c", "from xlamigrate.cli import main; main()", "--help"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**os.environ, "COLUMNS": "80"},
    )  # fmt: skip
    assert in_process.returncode == 0, in_process.stderr
    assert listed_commands(in_process.stdout) == listed_commands(from_module)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ("scan", "--format", "jsn", "."),
            "'jsn' is not one of 'text', 'concise', 'json', 'sarif', ",
        ),
        (("rewrite", "--mode", "ful", "."), "'ful' is not one of 'full-bf16', "),
    ],
)
def test_a_value_an_option_does_not_take_is_named_with_the_nearest_it_does(
    tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert said in result.stderr
    assert "Value error" not in result.stderr
    nearest = "json" if args[0] == "scan" else "full-bf16"
    assert f"; did you mean '{nearest}'?" in result.stderr
    assert "Traceback" not in result.stderr


def test_no_suggestion_where_nothing_is_near_and_other_usage_errors_exit_2(
    tmp_path: Path,
) -> None:
    far = run_cli("scan", "--format", "xyzzy", ".", cwd=tmp_path)
    assert far.returncode == 2 and "did you mean" not in far.stderr
    unknown = run_cli("scan", "--no-such-option", cwd=tmp_path)
    assert unknown.returncode == 2 and "No such option: --no-such-option" in unknown.stderr


def test_an_unknown_command_is_named_with_the_nearest_one() -> None:
    result = invoke("scna", ".")
    assert result.exit_code == 2
    assert "No such command 'scna'. Did you mean 'scan'?" in result.stderr
    assert result.stderr.startswith("usage: xlamigrate [OPTIONS] COMMAND [ARGS]...\n")
    assert "Try 'xlamigrate -h' for help." in result.stderr


def test_no_arguments_print_the_help_on_stderr_and_exit_2() -> None:
    result = invoke()
    assert result.exit_code == 2
    assert result.stdout == ""
    assert listed_commands(result.stderr).keys() == COMMANDS.keys()


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_both_version_flags_print_the_version_alone(flag: str) -> None:
    assert invoke(flag) == Result(0, f"xlamigrate {xlamigrate.__version__}\n", "")
    assert invoke(flag, "scan").stdout == f"xlamigrate {xlamigrate.__version__}\n"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("scan", "--jobs", "-1"), "argument -j/--jobs: -1 is less than the minimum, 0"),
        (("scan", "-j", "two"), "argument -j/--jobs: 'two' is not a whole number"),
        (("verify", "t.py", "--steps", "0"), "argument --steps: 0 is less than the minimum, 1"),
        (("verify", "t.py", "--rtol", "-0.5"), "argument --rtol: -0.5 is less than the minimum"),
        (("verify", "t.py", "--timeout", "0.5"), "argument --timeout: 0.5 is less than the min"),
        (("verify", "t.py", "-j", "0"), "argument -j/--jobs: 0 is less than the minimum, 1"),
        (("verify",), "the following arguments are required: SCRIPT"),
        (("rule", "XM101", "XM201"), "Got unexpected extra argument(s) (XM201)"),
        (("scan", "--jbos", "2"), "No such option: --jbos; did you mean --jobs?"),
        (("--bogus", "scan"), "No such option: --bogus"),
        (("scan", "--form", "json"), "No such option: --form; did you mean --format?"),
    ],
)
def test_a_usage_error_exits_2_with_the_commands_usage_before_anything_runs(
    args: tuple[str, ...], said: str
) -> None:
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert said in result.stderr, result.stderr
    command = args[0] if not args[0].startswith("-") else ""
    usage = f"usage: xlamigrate {command} [OPTIONS]".replace("  ", " ")
    assert result.stderr.startswith(usage), result.stderr
    assert f"Try 'xlamigrate {command} -h' for help.".replace("  ", " ") in result.stderr
    assert result.stdout == ""


def test_options_go_anywhere_and_every_word_after_double_dash_is_an_argument() -> None:
    verify = command_parser("verify")
    parsed = verify.parse_command(["-m", "autocast", "t.py", "a", "--steps", "3", "b"])
    assert (parsed.script, parsed.script_args, parsed.mode, parsed.steps) == (
        "t.py",
        ["a", "b"],
        ["autocast"],
        3,
    )
    parsed = verify.parse_command(["t.py", "--mode", "all", "--", "--lr", "3", "-m", "x"])
    assert (parsed.script, parsed.script_args, parsed.mode) == (
        "t.py",
        ["--lr", "3", "-m", "x"],
        ["all"],
    )
    scan = command_parser("scan")
    parsed = scan.parse_command(["a.py", "-f", "json", "b.py", "--", "-odd.py"])
    assert (parsed.paths, parsed.output_format) == (["a.py", "b.py", "-odd.py"], "json")


def test_each_option_keeps_its_names_default_and_choices() -> None:
    from xlamigrate.recipes import DEFAULT_MODE, MODES
    from xlamigrate.settingvalues import RUNTIMES, TARGETS

    def option(command: str, flag: str) -> argparse.Action:
        (found,) = [a for a in command_parser(command)._actions if flag in a.option_strings]
        return found

    for command, formats in [
        ("scan", ("text", "concise", "json", "sarif", "github", "gitlab")),
        ("rewrite", ("text", "json")),
        ("verify", ("text", "json")),
    ]:
        output_format = option(command, "--format")
        assert output_format.option_strings == ["-f", "--format", "--output-format"]
        assert (output_format.choices, output_format.default) == (formats, "text")
        assert option(command, "-h").option_strings == ["-h", "--help"]
    assert option("rewrite", "--mode").choices == MODES
    assert option("verify", "--mode").choices == (*MODES, "all")
    assert option("verify", "--mode").option_strings == ["-m", "--mode"]
    assert option("rewrite", "--runtime").choices == RUNTIMES
    assert option("rewrite", "--target").choices == option("verify", "--target").choices == TARGETS
    assert f"else {DEFAULT_MODE})" in str(option("rewrite", "--mode").help)
    defaults = {
        ("scan", "--jobs"): 0,
        ("rewrite", "--jobs"): 0,
        ("verify", "--jobs"): 2,
        ("verify", "--steps"): 20,
        ("verify", "--rtol"): 0.05,
        ("verify", "--window"): 5,
        ("verify", "--timeout"): 600.0,
        ("scan", "--respect-gitignore"): True,
        ("rewrite", "--no-respect-gitignore"): True,
        ("scan", "--no-cache"): False,
        ("rewrite", "--project"): False,
    }
    for (command, flag), default in defaults.items():
        assert option(command, flag).default == default, (command, flag)
    assert option("scan", "-j").option_strings == ["-j", "--jobs"]
