"""What CI and editors read: GitHub annotations, SARIF and GitLab code quality pointing at the
right file, line and rule for Python, shell and notebook findings; `--statistics`; and
`--stdin-filename` for editors piping a buffer."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import jsonschema
import nbformat
import pytest

from tests.conftest import ROOT

SARIF_SCHEMA = ROOT / "tests" / "schemas" / "sarif-schema-2.1.0.json"
TRAIN = 'import os\n\nos.environ["XLA_USE_BF16"] = "1"\n'  # XM101 at 3:1
FLAG_SCRIPT = (
    "import os\n"
    'os.environ["XLA_USE_BF16"] = "1"\n'
    "import torch\n"
    "model = torch.nn.Linear(2, 2)\n"
    "optimizer = torch.optim.AdamW(model.parameters())\n"
    "loss = model(torch.ones(1, 2)).sum()\n"
    "loss.backward()\n"
    "optimizer.step()\n"
)
LAUNCH = "#!/bin/bash\nset -e\nexport XLA_DOWNCAST_BF16=1\npython train.py\n"  # XM102 at 3:8
CELLS = ["import torch\n", "x = 1\n%env XLA_USE_BF16=1\nprint(x)\n"]  # XM101: cell 1, line 2
# (path, line in the file, rule) that every CI format must carry: train.py builds no model, so
# its write stays and the XM401 its message refers to is listed on the write's line.
EXPECTED = {("train.py", 3, "XM101"), ("train.py", 3, "XM401"), ("launch.sh", 3, "XM102")}
ANNOTATION = re.compile(r"^::(?P<level>\w+) (?P<props>[^:]*)::(?P<message>.*)$")


def run_cli(cwd: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", *args],
        cwd=cwd, input=stdin, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ci-tree")
    (root / "train.py").write_text(TRAIN)
    (root / "launch.sh").write_text(LAUNCH)
    cells = [nbformat.v4.new_markdown_cell("# XLA_USE_BF16 notes")]
    cells += [nbformat.v4.new_code_cell(source) for source in CELLS]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), str(root / "explore.ipynb"))
    return root


@pytest.fixture(scope="module")
def notebook_line(tree: Path) -> int:
    """The line of explore.ipynb that holds `%env XLA_USE_BF16=1`, found independently."""
    lines = (tree / "explore.ipynb").read_text().splitlines()
    (number,) = [i for i, line in enumerate(lines, start=1) if "%env XLA_USE_BF16=1" in line]
    return number


def notebook_findings(notebook_line: int) -> set[tuple[str, int, str]]:
    """The notebook's: its write, and the XM401 of the model it does not build, both on the
    cell's line that sets the flag."""
    return {("explore.ipynb", notebook_line, code) for code in ("XM101", "XM401")}


def test_github_annotations_point_at_file_line_and_rule(tree: Path, notebook_line: int) -> None:
    result = run_cli(tree, "scan", "--format", "github")
    assert result.returncode == 1, result.stderr
    found = set()
    for line in result.stdout.splitlines():
        match = ANNOTATION.match(line)
        assert match, line
        pairs = (item.split("=", 1) for item in match["props"].split(","))
        props = {key: unquote(value) for key, value in pairs}  # GitHub's %2C, %3A, %25
        code = match["message"].split()[0]
        assert props["title"].startswith(f"xlamigrate ({code})")
        found.add((props["file"], int(props["line"]), code))
        if props["file"] == "explore.ipynb":
            assert props["title"] == f"xlamigrate ({code}) in cell 2, line 2"
            assert "col" not in props  # a column inside the cell is not one of the JSON line
    assert found == EXPECTED | notebook_findings(notebook_line)


def test_sarif_regions_point_at_file_line_and_rule(tree: Path, notebook_line: int) -> None:
    result = run_cli(tree, "scan", "--format", "sarif")
    document = json.loads(result.stdout)
    jsonschema.validate(document, json.loads(SARIF_SCHEMA.read_text()))
    (run,) = document["runs"]
    found = set()
    for item in run["results"]:
        location = item["locations"][0]["physicalLocation"]
        found.add(
            (location["artifactLocation"]["uri"], location["region"]["startLine"], item["ruleId"])
        )
        if location["artifactLocation"]["uri"] == "explore.ipynb":
            assert item["properties"]["cell"] == 2
            assert (item["properties"]["cellLine"], item["properties"]["cellColumn"]) == (2, 1)
            assert "startColumn" not in location["region"]
    assert found == EXPECTED | notebook_findings(notebook_line)


def test_gitlab_code_quality_points_at_file_line_and_rule(tree: Path, notebook_line: int) -> None:
    result = run_cli(tree, "scan", "--format", "gitlab")
    assert result.returncode == 1
    issues: list[dict[str, Any]] = json.loads(result.stdout)
    found = {
        (issue["location"]["path"], issue["location"]["lines"]["begin"], issue["check_name"])
        for issue in issues
    }
    assert found == EXPECTED | notebook_findings(notebook_line)
    # the writes are errors (major), the XM401s warnings (minor)
    assert all(
        issue["severity"] == ("minor" if issue["check_name"] == "XM401" else "major")
        for issue in issues
    )
    fingerprints = [issue["fingerprint"] for issue in issues]
    assert len(set(fingerprints)) == len(fingerprints)


def test_gitlab_fingerprints_survive_lines_moving(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    before = json.loads(run_cli(tmp_path, "scan", "-f", "gitlab").stdout)
    (tmp_path / "train.py").write_text("# a new first line\n" + TRAIN)
    after = json.loads(run_cli(tmp_path, "scan", "-f", "gitlab").stdout)
    assert before[0]["location"]["lines"]["begin"] + 1 == after[0]["location"]["lines"]["begin"]
    assert before[0]["fingerprint"] == after[0]["fingerprint"]


def test_statistics_count_findings_per_rule_and_mark_only_what_rewrite_fixes(
    tree: Path, tmp_path: Path
) -> None:
    """As ruff's: `[*]` where some finding of the rule has a safe fix; here every write stays
    for a hand edit (no model in train.py: the recipe cannot go in, XM401), so none is marked.
    The most frequent rule first."""
    result = run_cli(tree, "scan", "--statistics")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "2\tXM101\t[ ] use-bf16-write",
        "2\tXM401\t[ ] model-not-identified",
        "1\tXM102\t[ ] downcast-bf16-write",
    ]
    as_json = json.loads(run_cli(tree, "scan", "--statistics", "-f", "json").stdout)
    assert as_json == [
        {"code": "XM101", "name": "use-bf16-write", "count": 2, "fixable": False,
         "fixable_count": 0},
        {"code": "XM401", "name": "model-not-identified", "count": 2, "fixable": False,
         "fixable_count": 0},
        {"code": "XM102", "name": "downcast-bf16-write", "count": 1, "fixable": False,
         "fixable_count": 0},
    ]  # fmt: skip
    (tmp_path / "train.py").write_text(FLAG_SCRIPT)  # the recipe goes in: a safe fix
    (tmp_path / "old.py").write_text(TRAIN)  # no model: manual
    fixable = run_cli(tmp_path, "scan", "--statistics").stdout.splitlines()
    assert fixable == ["2\tXM101\t[*] use-bf16-write", "1\tXM401\t[ ] model-not-identified"]
    counted = json.loads(run_cli(tmp_path, "scan", "--statistics", "-f", "json").stdout)
    assert counted[0]["fixable_count"] == 1


def test_statistics_with_sarif_is_a_usage_error(tree: Path) -> None:
    result = run_cli(tree, "scan", "--statistics", "-f", "sarif")
    assert result.returncode == 2
    assert "--statistics prints text or json" in result.stderr


def test_stdin_filename_scans_the_buffer_as_that_path(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "scan", "--stdin-filename", "src/train.py", stdin=TRAIN)
    assert result.returncode == 1
    assert result.stdout.startswith("src/train.py:3:1: XM101 ")
    clean = run_cli(tmp_path, "scan", "--stdin-filename", "train.py", stdin="import os\n")
    assert (clean.returncode, clean.stdout) == (0, "")


def test_stdin_filename_takes_the_kind_from_name_or_shebang(tmp_path: Path) -> None:
    by_shebang = run_cli(tmp_path, "scan", "--stdin-filename", "launch", stdin=LAUNCH)
    assert by_shebang.stdout.startswith("launch:3:8: XM102 ")
    unknown = run_cli(tmp_path, "scan", "--stdin-filename", "notes.md", stdin=TRAIN)
    assert unknown.returncode == 2
    assert "notes.md: not a file kind xlamigrate checks" in unknown.stderr


def test_stdin_filename_honours_excludes_and_noqa(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.xlamigrate]\nexclude = ["legacy/"]\n')
    excluded = run_cli(tmp_path, "scan", "--stdin-filename", "legacy/train.py", stdin=TRAIN)
    assert (excluded.returncode, excluded.stdout) == (0, "")
    noqa = TRAIN.replace('"1"\n', '"1"  # noqa: XM101\n')
    quiet = run_cli(tmp_path, "scan", "--stdin-filename", "train.py", stdin=noqa)
    assert (quiet.returncode, quiet.stdout) == (0, "")


def test_stdin_filename_with_paths_is_a_usage_error(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "scan", "--stdin-filename", "a.py", "b.py", stdin=TRAIN)
    assert result.returncode == 2
    assert "give no paths" in result.stderr


def test_rewrite_stdin_filename_prints_the_rewritten_buffer(tmp_path: Path) -> None:
    result = run_cli(
        tmp_path,
        "rewrite",
        "--mode",
        "fp32-copy",
        "--stdin-filename",
        "train.py",
        stdin=FLAG_SCRIPT,
    )
    assert result.returncode == 0, result.stderr
    assert "XLA_USE_BF16" not in result.stdout and "FP32ParamsCopy(" in result.stdout
    assert not (tmp_path / "train.py").exists()  # nothing written


def test_rewrite_stdin_keeps_a_launchers_write_it_cannot_follow(tmp_path: Path) -> None:
    """A launcher alone: the script it starts is out of sight, so the flag stays (manual)."""
    result = run_cli(
        tmp_path, "rewrite", "--mode", "fp32-copy", "--stdin-filename", "launch.sh", stdin=LAUNCH
    )
    assert result.returncode == 1
    assert result.stdout == LAUNCH
    assert "launch.sh:3:8: XM102 " in result.stderr and "[fix: manual]" in result.stderr


def test_rewrite_stdin_filename_diff_and_manual_findings(tmp_path: Path) -> None:
    diff = run_cli(tmp_path, "rewrite", "--diff", "--stdin-filename", "train.py", stdin=FLAG_SCRIPT)
    assert diff.returncode == 1  # a change is due
    assert '-os.environ["XLA_USE_BF16"] = "1"\n' in diff.stdout
    reads = 'import os\nif os.environ.get("XLA_USE_BF16"):\n    pass\n'
    manual = run_cli(tmp_path, "rewrite", "--stdin-filename", "t.py", stdin=reads)
    assert manual.returncode == 1
    assert manual.stdout == reads  # the buffer comes back as it was
    assert "t.py:2:4: XM201 " in manual.stderr
