"""`xlamigrate rewrite` end to end: writing in place, --diff, --check, modes, the JSON report,
exit codes, unsafe fixes, suppression and selection, and what a rewrite must keep of a file
(bytes it does not change, newlines, BOM, encoding, mode bits, links), each in a subprocess."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import xlamigrate
from tests import snapshots
from tests.conftest import FIXTURES, PRECISION_IGNORE
from tests.test_cli import FINDING_LINE, run_cli, write_files
from xlamigrate.catalogue import Catalogue
from xlamigrate.kinds.python.scan import scan_python
from xlamigrate.report.json_format import finding_json
from xlamigrate.request import FileTask
from xlamigrate.workers import POOL_MIN_BYTES

MODES = ("full-bf16", "fp32-copy", "autocast")
MLP = "flag_at_top_float_mlp"  # one safe fix; the recipe inserts an import and two lines
READS = "value_read_left_by_hand"  # one safe fix, one read left for manual work
LAUNCHER = "launcher_child_env_is_manual"  # a child-process env write: nothing to fix here
LONG_AGO_NS = 1_000_000_000 * 10**9  # an mtime no rewrite can produce
WRITE_FP16 = 'import os\nos.environ["XLA_USE_FP16"] = "1"\n'

# Both legacy-flag edits here are `unsafe`: a value xlamigrate cannot know, and a deletion.
UNSAFE = (
    "import os\n"
    "import sys\n"
    "\n"
    "import torch\n"
    "\n"
    "value = sys.argv[1]\n"
    'os.environ["XLA_USE_BF16"] = value\n'
    'os.environ.pop("XLA_DOWNCAST_BF16", None)\n'
    "\n"
    "model = torch.nn.Linear(4, 1)\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
)
UNSAFE_FIXED = (
    "import os\n"
    "import sys\n"
    "\n"
    "import torch\n"
    "from xlamigrate_runtime import cast_inputs_to_module_dtype\n"
    "\n"
    "value = sys.argv[1]\n"
    'os.environ["NEURON_RT_STOCHASTIC_ROUNDING_EN"] = "1"\n'
    "\n"
    "model = torch.nn.Linear(4, 1)\n"
    "model.to(torch.bfloat16)\n"
    "cast_inputs_to_module_dtype(model, output_dtype=torch.float32)\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
)
BF16_AND_FP16 = (
    "import os\n"
    "\n"
    "import torch\n"
    "\n"
    'os.environ["XLA_USE_BF16"] = "1"\n'
    'os.environ["XLA_USE_FP16"] = "1"\n'
    "\n"
    "model = torch.nn.Linear(4, 1)\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
)
FP16_LINE = 'os.environ["XLA_USE_FP16"] = "1"\n'


def fixture(mode: str, case: str, kind: str) -> bytes:
    """A fixture case's input (kind "in") or what the rewrite in `mode` writes (kind "out")."""
    if kind == "in":
        return snapshots.case_input(case).read_bytes()
    return snapshots.rewritten(case, mode)


def python_cases(mode: str) -> list[str]:
    return [snapshots.case_name(case) for case in snapshots.cases(mode, ".py")]


def rewrite(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`xlamigrate rewrite`, the precision migration alone: the fixtures here specify it (the
    torch-xla API rules' CLI tests are in tests/test_xla_apis_cli.py)."""
    return run_cli("rewrite", *args, "--ignore", ",".join(PRECISION_IGNORE), cwd=cwd)


def rewrite_json(*args: str, cwd: Path, expect_exit: int) -> dict[str, Any]:
    result = rewrite("--format", "json", *args, cwd=cwd)
    assert result.returncode == expect_exit, result.stderr
    assert "Traceback" not in result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def files_by_path(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["path"]: entry for entry in document["files"]}


def codes(findings: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """(code, fix applicability) of each finding, in report order."""
    return [(f["code"], f["fix"]["applicability"] if f["fix"] else None) for f in findings]


def make_old(*paths: Path) -> None:
    for path in paths:
        os.utime(path, ns=(LONG_AGO_NS, LONG_AGO_NS))


def snapshot(root: Path) -> dict[str, tuple[bytes, int, int]]:
    """Bytes, mtime and inode of every file below root: what an untouched tree keeps."""
    return {
        path.relative_to(root).as_posix(): (
            path.read_bytes(),
            path.stat().st_mtime_ns,
            path.stat().st_ino,
        )
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink() and ".git" not in path.parts
    }


# --- writing in place --------------------------------------------------------------------------


def test_rewrite_writes_the_recipe_in_place_and_exits_0(tmp_path: Path) -> None:
    write_files(tmp_path, {"train.py": fixture("full-bf16", MLP, "in")})
    result = rewrite(cwd=tmp_path)  # no PATHS: `.`; no config: full-bf16
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "train.py").read_bytes() == fixture("full-bf16", MLP, "out")
    assert result.stdout == "train.py: rewrote (1 fix)\n"
    assert "1 file rewritten" in result.stderr
    assert "(1 file scanned)" in result.stderr


def test_rewrite_twice_changes_nothing_the_second_time(tmp_path: Path) -> None:
    write_files(tmp_path, {"train.py": fixture("full-bf16", MLP, "in")})
    assert rewrite("train.py", cwd=tmp_path).returncode == 0
    make_old(tmp_path / "train.py")
    before = snapshot(tmp_path)
    again = rewrite("train.py", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout == ""
    assert "0 files rewritten" in again.stderr
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("mode", MODES)
def test_rewrite_turns_every_fixture_into_its_out_file_and_is_idempotent(
    tmp_path: Path, mode: str
) -> None:
    cases = python_cases(mode)
    write_files(tmp_path, {f"{case}.py": fixture(mode, case, "in") for case in cases})
    first = files_by_path(rewrite_json("--mode", mode, cwd=tmp_path, expect_exit=1))
    for case in cases:
        expected = fixture(mode, case, "out")
        assert (tmp_path / f"{case}.py").read_bytes() == expected, case
        changed = expected != fixture(mode, case, "in")
        assert first[f"{case}.py"]["changed"] is changed, case
        codes = [f["code"] for f in first[f"{case}.py"]["remaining"]]
        assert codes == [key.split()[-1] for key in snapshots.read(case, mode).left], case

    make_old(*(tmp_path / f"{case}.py" for case in cases))
    before = snapshot(tmp_path)
    second = rewrite_json("--mode", mode, cwd=tmp_path, expect_exit=1)  # manual work remains
    assert not any(entry["changed"] for entry in second["files"])
    assert all(entry["fixes"] == [] for entry in second["files"])
    assert snapshot(tmp_path) == before
    # what the first run left is reported where it is in the file it wrote
    again = files_by_path(second)

    def places(entry: dict[str, Any]) -> list[tuple[Any, ...]]:
        keys = ("code", "line", "column", "end_line", "end_column")
        return [tuple(f[key] for key in keys) for f in entry["remaining"]]

    for case in cases:  # (a finding of the first plan alone, XM405, is not found again)
        if first[f"{case}.py"]["remaining"] and f"{case}.py" in again:
            assert places(first[f"{case}.py"]) == places(again[f"{case}.py"]), case


# --- --diff and --check ------------------------------------------------------------------------


def test_diff_prints_a_unified_diff_and_writes_nothing(tmp_path: Path) -> None:
    original = fixture("full-bf16", MLP, "in")
    write_files(tmp_path, {"pkg/train.py": original})
    make_old(tmp_path / "pkg" / "train.py")
    before = snapshot(tmp_path)
    result = rewrite("--diff", "pkg", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert snapshot(tmp_path) == before
    assert result.stdout.startswith("--- a/pkg/train.py\n+++ b/pkg/train.py\n@@ -")
    assert '-os.environ["XLA_USE_BF16"] = "1"\n' in result.stdout
    assert '+os.environ["NEURON_RT_STOCHASTIC_ROUNDING_EN"] = "1"\n' in result.stdout
    assert "+model.to(torch.bfloat16)\n" in result.stdout
    assert "would be rewritten" in result.stderr

    git = shutil.which("git")
    if git is not None:  # the diff is a patch git applies as it is
        subprocess.run([git, "apply", "-"], input=result.stdout.encode(), cwd=tmp_path, check=True)
        assert (tmp_path / "pkg" / "train.py").read_bytes() == fixture("full-bf16", MLP, "out")


def test_diff_names_each_file_it_could_not_rewrite_with_the_reason(tmp_path: Path) -> None:
    """The diff says what changes; stderr, what could not, file and line (issue 21: the summary
    said "1 file could not be rewritten" and named neither)."""
    write_files(
        tmp_path,
        {
            "train.py": fixture("full-bf16", MLP, "in"),
            "bad.py": 'import os\nos.environ["XLA_USE_BF16"] = "1"\ndef (:\n',
        },
    )
    result = rewrite("--diff", ".", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("--- a/train.py\n")
    assert result.stderr.splitlines() == [
        "bad.py:3:5: XM901 could not parse: invalid syntax",
        "1 file would be rewritten (1 fix); 1 file could not be rewritten (2 files scanned).",
    ]


def test_diff_is_empty_and_exits_0_on_a_migrated_file(tmp_path: Path) -> None:
    write_files(tmp_path, {"train.py": fixture("full-bf16", MLP, "out")})
    result = rewrite("--diff", "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""


def test_check_writes_nothing_and_exits_1_only_when_something_would_change(
    tmp_path: Path,
) -> None:
    write_files(
        tmp_path,
        {"train.py": fixture("full-bf16", MLP, "in"), "done.py": fixture("full-bf16", MLP, "out")},
    )
    make_old(tmp_path / "train.py", tmp_path / "done.py")
    before = snapshot(tmp_path)

    pending = rewrite("--check", "train.py", "done.py", cwd=tmp_path)
    assert pending.returncode == 1, pending.stderr
    assert pending.stdout == "train.py: would rewrite (1 fix)\n"
    assert "1 file would be rewritten" in pending.stderr
    assert snapshot(tmp_path) == before

    migrated = rewrite_json("--check", "done.py", cwd=tmp_path, expect_exit=0)
    assert migrated["applied"] is False
    assert migrated["files"] == []
    assert snapshot(tmp_path) == before


# --- modes -------------------------------------------------------------------------------------


def test_mode_defaults_to_the_configured_mode_and_the_option_overrides_it(
    tmp_path: Path,
) -> None:
    write_files(
        tmp_path,
        {
            "pyproject.toml": '[tool.xlamigrate]\nmode = "autocast"\n',
            "configured.py": fixture("autocast", MLP, "in"),
            "overridden.py": fixture("fp32-copy", MLP, "in"),
        },
    )
    document = rewrite_json("configured.py", cwd=tmp_path, expect_exit=0)
    assert document["mode"] == "autocast"
    assert (tmp_path / "configured.py").read_bytes() == fixture("autocast", MLP, "out")

    document = rewrite_json("--mode", "fp32-copy", "overridden.py", cwd=tmp_path, expect_exit=0)
    assert document["mode"] == "fp32-copy"
    assert (tmp_path / "overridden.py").read_bytes() == fixture("fp32-copy", MLP, "out")


# --- usage errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--mode", "bf16-turbo", "train.py"], "bf16-turbo"),
        (["train.py", "no_such_dir"], "no_such_dir"),
        (["--select", "XM101,XM999", "train.py"], "XM999"),
        (["--format", "sarif", "train.py"], "sarif"),
    ],
    ids=["invalid-mode", "missing-path", "unknown-code", "unknown-format"],
)
def test_usage_errors_exit_2_and_write_nothing(tmp_path: Path, args: list[str], named: str) -> None:
    write_files(tmp_path, {"train.py": fixture("full-bf16", MLP, "in")})
    make_old(tmp_path / "train.py")
    before = snapshot(tmp_path)
    result = rewrite(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert named in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert snapshot(tmp_path) == before


# --- the JSON report ---------------------------------------------------------------------------


def test_json_report_lists_changes_fixes_remaining_findings_and_errors(
    tmp_path: Path, catalogue: Catalogue
) -> None:
    write_files(
        tmp_path,
        {
            "train.py": fixture("full-bf16", MLP, "in"),
            "reads.py": fixture("full-bf16", READS, "in"),
            "clean.py": "import torch\nprint(torch.bfloat16)\n",
            "broken.py": 'import os\nprint "XLA_USE_BF16"\n',
        },
    )
    scanned = scan_python(
        FileTask(
            "t.py",
            b'import os\nos.environ["XLA_USE_BF16"] = "1"\n',
            catalogue,
            frozenset(catalogue.rules),
        )
    )
    finding_keys = set(finding_json(scanned.findings[0]))  # what `scan --format json` prints

    document = rewrite_json(cwd=tmp_path, expect_exit=1)
    assert set(document) == {
        "version", "mode", "applied", "files_scanned", "files", "errors", "launches",
    }  # fmt: skip
    assert document["launches"] == []  # no launcher here
    assert document["version"] == xlamigrate.__version__
    assert (document["mode"], document["applied"], document["files_scanned"]) == (
        "full-bf16",
        True,
        4,
    )
    assert [entry["path"] for entry in document["files"]] == ["reads.py", "train.py"]
    for entry in document["files"]:
        assert set(entry) == {"path", "changed", "created", "why", "fixes", "remaining"}
        for finding in entry["fixes"] + entry["remaining"]:
            assert set(finding) == finding_keys
            assert finding["path"] == entry["path"]
    files = files_by_path(document)
    assert files["train.py"]["changed"] is True
    assert codes(files["train.py"]["fixes"]) == [("XM101", "safe")]
    assert files["train.py"]["remaining"] == []
    assert codes(files["reads.py"]["fixes"]) == [("XM101", "safe")]
    assert codes(files["reads.py"]["remaining"]) == [("XM201", "manual")]
    assert [(e["path"], e["line"]) for e in document["errors"]] == [("broken.py", 2)]
    assert (tmp_path / "broken.py").read_bytes() == b'import os\nprint "XLA_USE_BF16"\n'


# --- exit 1: manual work left ------------------------------------------------------------------


def test_manual_findings_exit_1_while_the_safe_fixes_are_applied(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {
            "reads.py": fixture("full-bf16", READS, "in"),
            "launcher.py": fixture("full-bf16", LAUNCHER, "in"),
        },
    )
    make_old(tmp_path / "launcher.py")
    launcher_before = snapshot(tmp_path)["launcher.py"]
    result = rewrite(cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert (tmp_path / "reads.py").read_bytes() == fixture("full-bf16", READS, "out")
    assert snapshot(tmp_path)["launcher.py"] == launcher_before
    launcher, changed, read = result.stdout.split("\n\n")  # as scan prints: blank-line apart
    assert launcher.splitlines() == [
        'launcher.py:7:24: XM101 XLA_USE_BF16 set to "1" (on) in a child process\'s environment',
        "  note: XLA_USE_BF16 is deprecated since torch-xla 2.5; move to an explicit BF16 recipe",
    ]
    assert changed == "reads.py: rewrote (1 fix)"
    # where the read is in the file as written (it was on line 12 before the rewrite)
    first, *rest = read.splitlines()
    assert first == "reads.py:15:25: XM201 XLA_USE_BF16 read"
    assert [line.split(":")[0] for line in rest] == ["  help", "  note"]
    written = (tmp_path / "reads.py").read_text().splitlines()
    assert written[15 - 1][24:].startswith('os.environ.get("XLA_USE_BF16")')
    assert "2 findings left for manual work" in result.stderr


# A file that sets the flag itself and builds its model elsewhere: no recipe can go in here.
OWN_WRITE_NO_MODEL = (
    "import os\n"
    'os.environ["XLA_USE_BF16"] = "1"\n'
    "from helpers import build\n"
    "\n"
    "model, optimizer = build()\n"
)


@pytest.mark.parametrize("mode", ["full-bf16", "fp32-copy"])
def test_a_files_own_write_stays_where_its_recipe_cannot_go_in_and_scan_says_so(
    tmp_path: Path, mode: str
) -> None:
    write_files(
        tmp_path,
        {"train.py": OWN_WRITE_NO_MODEL, "pyproject.toml": f'[tool.xlamigrate]\nmode = "{mode}"\n'},
    )
    scanned = run_cli("scan", "--format", "json", cwd=tmp_path)
    write, problem = json.loads(scanned.stdout)["findings"]  # XM401: listed, as it is referred to
    assert (write["code"], write["fix"]["applicability"]) == ("XM101", "manual")
    assert "kept: the recipe could not be applied here (see XM401)" in write["message"]
    result = rewrite_json(cwd=tmp_path, expect_exit=1)
    [entry] = result["files"]
    assert codes(entry["remaining"]) == [("XM101", "manual"), ("XM401", "manual")]
    assert entry["remaining"][0]["message"] == write["message"]
    assert entry["remaining"][1]["message"] == problem["message"]  # one answer: scan, rewrite
    assert (tmp_path / "train.py").read_text() == OWN_WRITE_NO_MODEL


SEE = re.compile(r"\(see (XM\d{3}(?:, XM\d{3})*)\)")


@pytest.mark.parametrize("mode", MODES)
def test_rewrite_text_prints_what_it_leaves_as_scan_prints_it_with_what_a_see_names(
    tmp_path: Path, mode: str
) -> None:
    """Each finding left, the unsafe ones not asked for too, as its short first line, then its
    `help:` and `note:`: the blocks scan prints. The XM4xx a kept write's "see" names (what kept
    its recipe out) is among them."""
    write_files(
        tmp_path,
        {
            "train.py": OWN_WRITE_NO_MODEL,
            "unsafe.py": UNSAFE,
            "pyproject.toml": f'[tool.xlamigrate]\nmode = "{mode}"\n',
        },
    )
    scanned = run_cli("scan", "--ignore", ",".join(PRECISION_IGNORE), cwd=tmp_path)
    result = rewrite("--check", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stdout == scanned.stdout  # nothing changes: what is left is what scan found
    blocks = [block.splitlines() for block in result.stdout.split("\n\n")]
    firsts = [FINDING_LINE.match(block[0]) for block in blocks]
    assert [(m["path"], m["code"]) for m in firsts if m] == [
        ("train.py", "XM101"),
        ("train.py", "XM401" if mode != "autocast" else "XM402"),
        ("unsafe.py", "XM101"),
        ("unsafe.py", "XM202"),
    ]
    assert all(len(block[0]) < 100 for block in blocks)  # the long sentence is in its parts
    assert all(line.startswith(("  help: ", "  note: ")) for block in blocks for line in block[1:])
    referred = {code for found in SEE.finditer(result.stdout) for code in found[1].split(", ")}
    assert referred and referred <= {m["code"] for m in firsts if m}
    assert "4 findings left for manual work" in result.stderr


@pytest.mark.parametrize(
    "script",
    [
        'print "python 2"\n',  # does not parse
        "import torch\nmodel = torch.nn.Linear(2, 2)\nopt = optimizers[0](model.parameters())\n",
    ],
    ids=["unparsable", "optimizer-from-a-subscript"],
)
def test_a_launchers_write_stays_when_its_script_cannot_be_planned(
    tmp_path: Path, script: str
) -> None:
    """A script whose plan failed (a parse error; an internal error, once a TypeError on
    `optimizers[0](...)`) got no recipe, yet its launcher's export became the signal."""
    launcher = "export XLA_USE_BF16=1\ntorchrun train.py\n"
    write_files(tmp_path, {"run.sh": launcher, "train.py": script})
    result = rewrite_json(cwd=tmp_path, expect_exit=1)
    files = files_by_path(result)
    [write] = files["run.sh"]["remaining"]
    assert (write["code"], write["fix"]["applicability"]) == ("XM101", "manual")
    assert "train.py" in write["message"]
    assert (tmp_path / "run.sh").read_text() == launcher
    assert "internal error" not in json.dumps(result)


# --- --unsafe-fixes ----------------------------------------------------------------------------


def test_unsafe_fixes_are_reported_but_applied_only_with_the_option(tmp_path: Path) -> None:
    write_files(tmp_path, {"train.py": UNSAFE})
    make_old(tmp_path / "train.py")
    before = snapshot(tmp_path)
    without = rewrite_json("train.py", cwd=tmp_path, expect_exit=1)
    assert snapshot(tmp_path) == before
    (entry,) = without["files"]
    assert entry["changed"] is False
    assert entry["fixes"] == []
    assert codes(entry["remaining"]) == [("XM101", "unsafe"), ("XM202", "unsafe")]

    with_option = rewrite_json("--unsafe-fixes", "train.py", cwd=tmp_path, expect_exit=0)
    (entry,) = with_option["files"]
    assert entry["changed"] is True
    assert codes(entry["fixes"]) == [("XM101", "unsafe"), ("XM202", "unsafe")]
    assert entry["remaining"] == []
    assert (tmp_path / "train.py").read_text() == UNSAFE_FIXED


# --- suppression and selection -----------------------------------------------------------------


def test_noqa_and_ignore_comment_lines_are_left_untouched(tmp_path: Path) -> None:
    kept = (
        "import os\n"
        "\n"
        'os.environ["XLA_USE_BF16"] = "1"  # noqa: XM101\n'
        'os.environ["XLA_USE_BF16"] = "1"  # xlamigrate: ignore[XM101]\n'
        'os.environ["XLA_DOWNCAST_BF16"] = "1"  # noqa: XM1\n'
        'flag = os.getenv("XLA_USE_BF16")  # noqa\n'
    )
    write_files(tmp_path, {"train.py": kept + FP16_LINE})
    result = rewrite("train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr  # everything not suppressed was fixed
    assert (tmp_path / "train.py").read_text() == kept


def test_ignore_keeps_the_fp16_write_and_select_fixes_only_what_it_names(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {
            "ignored.py": BF16_AND_FP16,
            "selected.py": BF16_AND_FP16,
            "reads.py": fixture("full-bf16", READS, "in"),
        },
    )
    # An ignored read is not left for manual work either: the run is clean.
    ignored = rewrite(
        "--ignore", "XM103", "--ignore", "XM201", "ignored.py", "reads.py", cwd=tmp_path
    )
    assert ignored.returncode == 0, ignored.stderr
    text = (tmp_path / "ignored.py").read_text()
    assert FP16_LINE in text
    assert "XLA_USE_BF16" not in text
    assert 'os.environ["NEURON_RT_STOCHASTIC_ROUNDING_EN"] = "1"\n' in text
    assert (tmp_path / "reads.py").read_bytes() == fixture("full-bf16", READS, "out")

    selected = rewrite("--select", "XM103", "selected.py", cwd=tmp_path)
    assert selected.returncode == 0, selected.stderr
    assert (tmp_path / "selected.py").read_text() == BF16_AND_FP16.replace(FP16_LINE, "")


def test_excludes_and_gitignore_are_honoured(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()  # the repository root: .gitignore files above it do not count
    write_files(
        tmp_path,
        {
            "pyproject.toml": '[tool.xlamigrate]\nexclude = ["generated/"]\n',
            ".gitignore": "ignored.py\n",
            "train.py": WRITE_FP16,
            "generated/train.py": WRITE_FP16,
            "scratch/train.py": WRITE_FP16,
            "ignored.py": WRITE_FP16,
        },
    )
    others = [tmp_path / name for name in ("generated/train.py", "scratch/train.py", "ignored.py")]
    make_old(*others)
    before = snapshot(tmp_path)
    document = rewrite_json("--exclude", "scratch/", cwd=tmp_path, expect_exit=0)
    assert [(e["path"], e["changed"]) for e in document["files"]] == [("train.py", True)]
    assert document["files_scanned"] == 1
    after = snapshot(tmp_path)
    for name in ("generated/train.py", "scratch/train.py", "ignored.py"):
        assert after[name] == before[name], name
    assert (tmp_path / "train.py").read_text() == ""  # the write and the import it used


# --- files that must not be touched ------------------------------------------------------------


def test_files_without_findings_keep_their_bytes_and_mtime(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {
            "clean.py": "import torch\nmodel = torch.nn.Linear(2, 2).to(torch.bfloat16)\n",
            "mentions.py": (
                '"""We used to set XLA_USE_BF16 here."""\n'
                "# XLA_DOWNCAST_BF16 is gone too.\n"
                "import os\n"
            ),
            "suppressed.py": 'import os\nos.environ["XLA_USE_BF16"] = "1"  # noqa: XM101\n',
            "crlf.py": "import os\r\nos.environ['NEURON_CC_FLAGS'] = ''\r\n",
        },
    )
    make_old(*tmp_path.iterdir())
    before = snapshot(tmp_path)
    result = rewrite(cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert snapshot(tmp_path) == before
    assert "0 files rewritten" in result.stderr


# --- what a rewrite keeps: newlines, BOM, encoding, mode bits ----------------------------------

LATIN1_HEADER = b"# -*- coding: latin-1 -*-\n# Entra\xeenement sur un caf\xe9 \xe0 la main.\n"


@pytest.fixture(scope="module")
def kept_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One rewrite run over files whose form must survive it."""
    root = tmp_path_factory.mktemp("kept")
    original = fixture("full-bf16", MLP, "in")
    write_files(
        root,
        {
            "crlf.py": original.replace(b"\n", b"\r\n"),
            "bom.py": b"\xef\xbb\xbf" + original,
            "latin1.py": LATIN1_HEADER + original,
            "train": b"#!/usr/bin/env python3\n" + original,  # a script named without .py
        },
    )
    (root / "train").chmod(0o755)
    result = rewrite("crlf.py", "bom.py", "latin1.py", "train", cwd=root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": rewrote (1 fix)\n") == 4
    return root


def test_crlf_newlines_are_kept_on_every_line_including_inserted_ones(kept_files: Path) -> None:
    data = (kept_files / "crlf.py").read_bytes()
    assert data == fixture("full-bf16", MLP, "out").replace(b"\n", b"\r\n")
    assert all(line.endswith(b"\r\n") for line in data.splitlines(keepends=True))
    assert data.count(b"\n") == data.count(b"\r\n")


def test_utf8_bom_is_kept(kept_files: Path) -> None:
    data = (kept_files / "bom.py").read_bytes()
    assert data == b"\xef\xbb\xbf" + fixture("full-bf16", MLP, "out")


def test_latin1_file_with_a_coding_cookie_stays_latin1(kept_files: Path) -> None:
    data = (kept_files / "latin1.py").read_bytes()
    assert data == LATIN1_HEADER + fixture("full-bf16", MLP, "out")
    assert "café" in data.decode("latin-1")
    assert b"\xc3" not in data  # not re-encoded as UTF-8


def test_executable_bits_are_kept(kept_files: Path) -> None:
    script = kept_files / "train"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert script.read_bytes() == b"#!/usr/bin/env python3\n" + fixture("full-bf16", MLP, "out")


def test_no_temporary_files_are_left_behind(kept_files: Path) -> None:
    assert sorted(path.name for path in kept_files.iterdir()) == [
        "bom.py",
        "crlf.py",
        "latin1.py",
        "train",
    ]


def test_rewritten_crlf_bom_and_latin1_files_are_fixed_points(kept_files: Path) -> None:
    before = snapshot(kept_files)
    result = rewrite("--check", "crlf.py", "bom.py", "latin1.py", "train", cwd=kept_files)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert snapshot(kept_files) == before


# --- links, permissions, failed writes ---------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt", reason="needs symlinks")
def test_symlink_target_is_rewritten_and_the_link_stays_a_link(tmp_path: Path) -> None:
    write_files(tmp_path, {"shared/train.py": fixture("full-bf16", MLP, "in")})
    (tmp_path / "scripts").mkdir()
    link = tmp_path / "scripts" / "train.py"
    link.symlink_to(Path("..") / "shared" / "train.py")
    result = rewrite("scripts", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "scripts/train.py: rewrote (1 fix)\n"
    assert link.is_symlink()
    assert os.readlink(link) == os.path.join("..", "shared", "train.py")
    assert (tmp_path / "shared" / "train.py").read_bytes() == fixture("full-bf16", MLP, "out")
    assert sorted(p.name for p in (tmp_path / "shared").iterdir()) == ["train.py"]


@pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt", reason="needs symlinks")
def test_a_link_and_its_target_in_the_same_folder_are_rewritten_once(tmp_path: Path) -> None:
    write_files(tmp_path, {"train.py": fixture("full-bf16", MLP, "in")})
    (tmp_path / "latest.py").symlink_to("train.py")
    result = rewrite(cwd=tmp_path)
    assert (tmp_path / "latest.py").is_symlink()
    assert (tmp_path / "train.py").read_bytes() == fixture("full-bf16", MLP, "out")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "could not" not in result.stdout + result.stderr


def test_read_only_file_is_rewritten_keeping_its_mode_or_reported_by_path(
    tmp_path: Path,
) -> None:
    write_files(tmp_path, {"train.py": fixture("full-bf16", MLP, "in")})
    target = tmp_path / "train.py"
    target.chmod(0o444)
    try:
        result = rewrite("train.py", cwd=tmp_path)
        assert "Traceback" not in result.stderr
        if target.read_bytes() == fixture("full-bf16", MLP, "out"):
            assert result.returncode == 0, result.stderr
            assert stat.S_IMODE(target.stat().st_mode) == 0o444
        else:
            assert target.read_bytes() == fixture("full-bf16", MLP, "in")
            assert result.returncode != 0
            assert "train.py" in result.stdout + result.stderr
    finally:
        target.chmod(0o644)


def _limit_file_size(limit: int) -> Any:
    """A preexec_fn under which writing a file past `limit` bytes fails with EFBIG (any user)."""
    import resource
    import signal

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


# The write-failure tests cap the file size with RLIMIT_FSIZE, which only Linux honours here.
LINUX_ONLY = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses RLIMIT_FSIZE")


@pytest.fixture(scope="module")
def failed_write(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A rewrite of train.py whose write fails (the new bytes exceed the file-size limit)."""
    root = tmp_path_factory.mktemp("failed_write")
    original, rewritten = fixture("full-bf16", MLP, "in"), fixture("full-bf16", MLP, "out")
    assert len(original) < len(rewritten)
    write_files(root, {"train.py": original})
    result = subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", "rewrite", "train.py"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_limit_file_size((len(original) + len(rewritten)) // 2),
    )
    return root, result


@LINUX_ONLY
def test_a_failed_write_leaves_the_file_whole_and_is_reported_with_its_path(
    failed_write: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    root, result = failed_write
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert (root / "train.py").read_bytes() == fixture("full-bf16", MLP, "in")
    assert [p.name for p in root.iterdir()] == ["train.py"]  # no temporary file left
    assert "train.py: XM902 could not write: File too large" in result.stdout.splitlines()
    assert "could not be rewritten" in result.stderr


@LINUX_ONLY
def test_a_failed_write_is_not_reported_as_rewritten(
    failed_write: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    root, result = failed_write
    assert (root / "train.py").read_bytes() == fixture("full-bf16", MLP, "in")
    assert "train.py: rewrote" not in result.stdout
    assert "1 file rewritten" not in result.stderr


# --- several files, several workers ------------------------------------------------------------


COPIES = ("pkg", "copy", "again", "more")  # the fixtures, four times over


def test_a_mixed_folder_gives_the_same_result_with_jobs_1_and_jobs_2(tmp_path: Path) -> None:
    mode = "fp32-copy"
    cases = python_cases(mode)
    untouched = {
        "pkg0/clean.py": "import torch\n",
        "pkg1/notes.py": "# XLA_USE_BF16 was set by the old launcher\n",
        "pkg2/broken.py": 'print "XLA_USE_BF16"\n',
    }
    files: dict[str, str | bytes] = {
        f"{folder}{n % 3}/{case}.py": fixture(mode, case, "in")
        for n, case in enumerate(cases)
        for folder in COPIES
    }
    # enough to parse for the engine to start a pool
    assert sum(len(data) for data in files.values()) >= POOL_MIN_BYTES
    files.update(untouched)
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    write_files(serial, files)
    write_files(parallel, files)

    one = rewrite("--mode", mode, "--format", "json", "-j", "1", cwd=serial)
    two = rewrite("--mode", mode, "--format", "json", "--jobs", "2", cwd=parallel)
    assert one.returncode == two.returncode == 1  # manual work and an unparsable file
    assert one.stdout == two.stdout
    assert {k: v[0] for k, v in snapshot(serial).items()} == {
        k: v[0] for k, v in snapshot(parallel).items()
    }
    for n, case in enumerate(cases):
        for folder in COPIES:
            assert (parallel / f"{folder}{n % 3}" / f"{case}.py").read_bytes() == fixture(
                mode, case, "out"
            ), case
    for name, content in untouched.items():
        assert (parallel / name).read_text() == content, name
    document = json.loads(two.stdout)
    assert document["files_scanned"] == len(COPIES) * len(cases) + 3
    assert [e["path"] for e in document["errors"]] == ["pkg2/broken.py"]


def test_diff_with_json_format_is_one_json_document_with_the_diff_per_file(tmp_path: Path) -> None:
    write_files(tmp_path, {"train.py": fixture("full-bf16", MLP, "in")})
    document = rewrite_json("--diff", "train.py", cwd=tmp_path, expect_exit=1)
    (entry,) = document["files"]
    assert document["applied"] is False and entry["changed"] is True
    assert entry["diff"].startswith("--- a/train.py\n+++ b/train.py\n")
    assert (tmp_path / "train.py").read_bytes() == fixture("full-bf16", MLP, "in")


def test_a_named_file_of_another_kind_is_reported_as_skipped(tmp_path: Path) -> None:
    write_files(tmp_path, {"notes.txt": 'os.environ["XLA_USE_BF16"] = "1"\n'})
    result = rewrite("notes.txt", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "skipped notes.txt" in result.stderr
    assert (tmp_path / "notes.txt").read_text() == 'os.environ["XLA_USE_BF16"] = "1"\n'


# --- the project: launch graph and grouped diffs ------------------------------------------------

SWITCH = FIXTURES / "projects" / "optimizer_switch"


def test_scan_and_rewrite_json_carry_the_launch_edges(tmp_path: Path) -> None:
    shutil.copytree(SWITCH / "before", tmp_path, dirs_exist_ok=True)
    scanned = json.loads(run_cli("scan", "--format", "json", cwd=tmp_path).stdout)
    rewritten = rewrite_json("--diff", cwd=tmp_path, expect_exit=1)
    edge = {
        "launcher": "run_pretrain.sh",
        "variable": "XLA_DOWNCAST_BF16",
        "reaches": ["pretrain.py"],
        "scripts": ["pretrain.py"],
        "migrated": True,
        "signal": "BF16_RECIPE",
        "reason": None,
    }
    expected = [{**edge, "line": 13}, {**edge, "line": 17}]
    assert scanned["launches"] == expected
    assert rewritten["launches"] == expected


def test_a_kept_write_says_why_in_its_launch_edge(tmp_path: Path) -> None:
    write_files(tmp_path, {"run.sh": "export XLA_USE_BF16=1\npython /opt/ml/code/train.py\n"})
    [edge] = json.loads(run_cli("scan", "--format", "json", cwd=tmp_path).stdout)["launches"]
    assert (edge["reaches"], edge["scripts"], edge["migrated"]) == (
        ["/opt/ml/code/train.py"],
        [],
        False,
    )
    assert "not a Python file of this project" in edge["reason"]


def test_diff_shows_each_launcher_with_its_scripts_and_git_applies_it(tmp_path: Path) -> None:
    shutil.copytree(SWITCH / "before", tmp_path, dirs_exist_ok=True)
    (tmp_path / "aaa_alone.py").write_bytes(fixture("full-bf16", MLP, "in"))
    result = rewrite("--diff", "--mode", "fp32-copy", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    headers = [line for line in result.stdout.splitlines() if line.startswith(("#", "--- "))]
    assert headers == [
        "# run_pretrain.sh starts pretrain.py: the recipe under BF16_RECIPE",
        "--- a/run_pretrain.sh",
        "--- a/pretrain.py",
        "--- a/aaa_alone.py",  # a file of no launcher: after the groups
        "--- a/requirements.txt",  # the runtime both scripts now import, declared once
    ]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    patch = tmp_path / "change.diff"
    patch.write_text(result.stdout)
    subprocess.run(["git", "apply", "change.diff"], cwd=tmp_path, check=True)
    patch.unlink()
    for path in ("run_pretrain.sh", "pretrain.py", "requirements.txt"):
        assert (tmp_path / path).read_bytes() == snapshots.project_tree(SWITCH, "fp32-copy")[path]


@pytest.mark.parametrize("mode", MODES)
def test_a_file_that_sets_the_flag_itself_gets_no_neuron_variable_on_tpu(
    tmp_path: Path, mode: str
) -> None:
    """With --target tpu, full-bf16 wrote NEURON_RT_STOCHASTIC_ROUNDING_EN=1 and autocast
    --auto-cast=none into a script that set the flag for itself."""
    write_files(tmp_path, {"train.py": fixture(mode, MLP, "in")})
    result = rewrite("--mode", mode, "--target", "tpu", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    text = (tmp_path / "train.py").read_text()
    assert "NEURON_" not in text and "XLA_USE_BF16" not in text
    assert ("torch.autocast(" in text) == (mode == "autocast")
    assert ("model.to(torch.bfloat16)" in text) == (mode != "autocast")


def test_diff_and_check_report_positions_in_the_file_as_it_is(tmp_path: Path) -> None:
    """Nothing is written with --diff: a finding's line is the line in the unchanged file."""
    write_files(tmp_path, {"reads.py": fixture("full-bf16", READS, "in")})
    document = rewrite_json("--diff", cwd=tmp_path, expect_exit=1)
    [entry] = document["files"]
    [read] = entry["remaining"]
    assert (read["line"], read["column"]) == (12, 25)


@pytest.mark.parametrize(
    ("mode", "kept"),
    [
        ("full-bf16", 'os.environ["NEURON_RT_STOCHASTIC_ROUNDING_EN"] = "1"  # café — keep\n'),
        ("fp32-copy", "# café — keep\n"),  # the line goes; its comment stays where it was
    ],
)
def test_a_replaced_or_removed_lines_own_comment_is_kept(
    tmp_path: Path, mode: str, kept: str
) -> None:
    source = (
        "import os\nimport torch\n"
        'os.environ["XLA_USE_BF16"] = "1"  # café — keep\n'
        "model = torch.nn.Linear(2, 2)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    )
    write_files(tmp_path, {"train.py": source})
    result = rewrite("--mode", mode, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "train.py").read_text()
    assert kept in text and "XLA_USE_BF16" not in text


@pytest.mark.parametrize(
    "optimizer",
    [
        "torch.optim.LBFGS(model.parameters(), lr=0.1)",
        "ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=0.1)",
    ],
)
def test_fp32_copy_leaves_an_optimizer_it_cannot_wrap_and_keeps_the_flag(
    tmp_path: Path, optimizer: str
) -> None:
    """`FP32ParamsCopy(ZeroRedundancyOptimizer(...))` silently stopped training; LBFGS's
    wrapper crashed at the first step."""
    source = (
        "import os\nimport torch\n"
        "from torch.distributed.optim import ZeroRedundancyOptimizer\n"
        'os.environ["XLA_USE_BF16"] = "1"\n'
        "model = torch.nn.Linear(2, 2)\n"
        f"optimizer = {optimizer}\n"
    )
    write_files(tmp_path, {"train.py": source})
    document = rewrite_json("--mode", "fp32-copy", cwd=tmp_path, expect_exit=1)
    [entry] = document["files"]
    assert codes(entry["remaining"]) == [("XM101", "manual"), ("XM408", "manual")]
    assert "FP32ParamsCopy cannot wrap it" in entry["remaining"][1]["message"]
    assert (tmp_path / "train.py").read_text() == source
    full = rewrite_json("--mode", "full-bf16", cwd=tmp_path, expect_exit=0)
    assert codes(full["files"][0]["fixes"]) == [("XM101", "safe")]


TEST_MODULE = """\
import os

import torch


def test_reference_layer(device):
    layer = torch.nn.Linear(8, 8).to(device)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    loss = layer(torch.randn(2, 8, device=device)).sum()
    loss.backward()
    optimizer.step()


def test_layer_hlo(device):
    os.environ["XLA_DOWNCAST_BF16"] = "1"
    layer = torch.nn.Linear(8, 8).to(device)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    loss = layer(torch.randn(2, 8, device=device)).sum()
    loss.backward()
    optimizer.step()
"""


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["test_layers.py", "layers_test.py"])
def test_a_test_that_sets_the_flag_gets_the_recipe_and_its_sibling_tests_do_not(
    tmp_path: Path, mode: str, name: str
) -> None:
    """neuronx-distributed's layer tests set the flag inside one test function; the recipe went
    into every test of the module, changing tests that never set it (each is a configuration
    of its own: `pytest -k`)."""
    write_files(tmp_path, {name: TEST_MODULE})
    result = rewrite("--mode", mode, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    text = (tmp_path / name).read_text()
    sibling, hlo = "def test_reference_layer", "def test_layer_hlo"
    assert (
        text[text.index(sibling) : text.index(hlo)]
        == TEST_MODULE[TEST_MODULE.index(sibling) : TEST_MODULE.index(hlo)]
    )
    rewritten = text[text.index(hlo) :]
    added = {
        "full-bf16": "layer.to(torch.bfloat16)",
        "fp32-copy": "FP32ParamsCopy(",
        "autocast": "with torch.autocast(",
    }[mode]
    assert added in rewritten and "XLA_DOWNCAST_BF16" not in rewritten


def test_outside_a_test_module_the_recipe_covers_the_whole_file(tmp_path: Path) -> None:
    """A script whose flag is set in one function and whose model is built in another (a
    `setup_environment()` called from `main()`) keeps the whole-file scope."""
    write_files(tmp_path, {"train.py": TEST_MODULE})
    result = rewrite("--mode", "full-bf16", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "train.py").read_text().count("layer.to(torch.bfloat16)") == 2
