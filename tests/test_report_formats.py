"""`xlamigrate scan --format text|concise|json|sarif|github` through the console script: the
JSON shape other tools parse, SARIF 2.1.0 valid against its schema, GitHub annotations escaped
as GitHub reads them, text as ruff's (a short first line, `help:` and `note:` lines, a closing
count of what `rewrite` fixes) and the one-line `path:line:col: CODE message` form."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jsonschema
import pytest

import xlamigrate
from tests.conftest import ROOT

SARIF_SCHEMA = ROOT / "tests" / "schemas" / "sarif-schema-2.1.0.json"
ALL_CODES = sorted(path.stem for path in (ROOT / "rules").glob("XM*.toml"))

# (line, column, code) of each finding in TRAIN, in order.
TRAIN = (
    "import os\n"
    'os.environ["XLA_USE_BF16"] = "1"\n'
    'os.environ["XLA_USE_BF16"] = "0"\n'
    'os.environ["XLA_USE_BF16"] = "1" if a else "0"\n'
    'os.environ["XLA_USE_FP16"] = "1"\n'
    'dtype = os.environ.get("XLA_DOWNCAST_BF16")\n'
    'del os.environ["XLA_DOWNCAST_BF16"]\n'
    'FLAGS = ["XLA_USE_F16"]\n'
    "model = torch.nn.Linear(4, 4)\n"  # the model the recipe casts: the fix of line 2 is safe
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
)
TRAIN_FINDINGS = [
    (2, 1, "XM101"),
    (3, 1, "XM101"),
    (4, 1, "XM101"),
    (5, 1, "XM103"),
    (6, 9, "XM201"),
    (7, 5, "XM202"),
    (8, 10, "XM301"),
]
HELPERS_PATH = "pkg/my helpers.py"  # a space: SARIF must percent-encode it in the uri
HELPERS = 'import os\n\n\ndef bf16_enabled():\n    return os.environ.get("XLA_USE_BF16") == "1"\n'
BROKEN = 'import os\nprint "XLA_USE_BF16 =", os.environ["XLA_USE_BF16"]\n'  # Python 2: line 2

# A path with `,` and `:`, and a value whose message carries `%` and a newline.
WEIRD_PATH = "data/we,ird:name.py"
WEIRD = 'import os\nos.environ["XLA_DOWNCAST_BF16"] = "50%\\nmore"\n'

FINDING_KEYS = {
    "code", "path", "line", "column", "end_line", "end_column", "severity", "message",
    "title", "help", "note", "variable", "access", "value", "enabled", "fix",
}  # fmt: skip
ACCESS_BY_CODE = {
    "XM101": "write", "XM102": "write", "XM103": "write", "XM201": "read", "XM202": "delete",
    "XM301": None,
}  # fmt: skip
GITHUB_LINE = re.compile(
    r"^::(?P<command>error|warning|notice) file=(?P<file>[^,]*),line=(?P<line>\d+)"
    r"(?:,col=(?P<col>\d+),endLine=(?P<end_line>\d+),endColumn=(?P<end_column>\d+))?"
    r",title=(?P<title>[^,]*)::(?P<message>.*)$"
)


def scan(project: Path, output_format: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xlamigrate.cli", "scan", "--format", output_format, *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
    )


def make_project(root: Path, files: dict[str, str]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    return root


def github_data_escape(text: str) -> str:
    """GitHub's workflow-command escaping of a message (actions/toolkit escapeData)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_project(
        tmp_path_factory.mktemp("project"),
        {"train.py": TRAIN, HELPERS_PATH: HELPERS, "broken.py": BROKEN, "clean.py": "import os\n"},
    )


@pytest.fixture(scope="module")
def weird_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_project(tmp_path_factory.mktemp("weird"), {WEIRD_PATH: WEIRD})


@pytest.fixture(scope="module")
def outputs(project: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    return {name: scan(project, name) for name in ("text", "concise", "json", "sarif", "github")}


@pytest.fixture(scope="module")
def report(outputs: dict[str, subprocess.CompletedProcess[str]]) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(outputs["json"].stdout)
    return document


@pytest.fixture(scope="module")
def sarif_validator() -> Any:
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return validator_class(schema)


@pytest.mark.parametrize("output_format", ["text", "concise", "json", "sarif", "github"])
def test_every_format_exits_1_with_findings_and_summarises_on_stderr(
    outputs: dict[str, subprocess.CompletedProcess[str]], output_format: str, report: dict[str, Any]
) -> None:
    """As ruff closes: what was found, then how many `rewrite` fixes (in the mode the fixes
    were judged for) and how many more it fixes with --unsafe-fixes."""
    result = outputs[output_format]
    assert result.returncode == 1, result.stderr
    fixes = [f["fix"]["applicability"] for f in report["findings"] if f["fix"]]
    assert (fixes.count("safe"), fixes.count("unsafe")) == (4, 1)
    assert result.stderr.splitlines() == [
        "Found 8 findings in 2 files; 1 file could not be checked (4 files scanned).",
        "[*] 4 fixable with `xlamigrate rewrite --mode full-bf16`"
        " (1 hidden fix can be enabled with `--unsafe-fixes`).",
    ]
    assert "Found" not in result.stdout


# --- json --------------------------------------------------------------------------------------


def test_json_has_exactly_the_documented_top_level_keys(report: dict[str, Any]) -> None:
    assert set(report) == {"version", "files_scanned", "findings", "errors", "launches"}
    assert report["launches"] == []  # no launcher here
    assert report["version"] == xlamigrate.__version__
    assert type(report["files_scanned"]) is int
    assert report["files_scanned"] == 4
    assert isinstance(report["findings"], list)
    assert isinstance(report["errors"], list)


def test_json_findings_have_exactly_the_documented_keys_and_types(report: dict[str, Any]) -> None:
    assert len(report["findings"]) == 8
    for finding in report["findings"]:
        assert set(finding) == FINDING_KEYS, finding
        for key in ("code", "path", "severity", "message", "title"):
            assert type(finding[key]) is str, (key, finding)
        for key in ("help", "note"):
            assert finding[key] is None or type(finding[key]) is str, (key, finding)
        for key in ("line", "column", "end_line", "end_column"):
            assert type(finding[key]) is int and finding[key] >= 1, (key, finding)
        assert (finding["end_line"], finding["end_column"]) > (finding["line"], finding["column"])
        assert finding["severity"] in {"error", "warning", "info"}
        assert finding["variable"] is None or type(finding["variable"]) is str
        assert finding["access"] == ACCESS_BY_CODE[finding["code"]], finding
        assert finding["value"] is None or type(finding["value"]) is str
        assert finding["enabled"] is None or type(finding["enabled"]) is bool
        fix = finding["fix"]
        assert fix is None or (
            set(fix) == {"applicability"} and fix["applicability"] in {"safe", "unsafe", "manual"}
        )


def test_json_findings_are_the_expected_ones_in_order(report: dict[str, Any]) -> None:
    assert [(f["path"], f["line"], f["column"], f["code"]) for f in report["findings"]] == [
        (HELPERS_PATH, 5, 12, "XM201"),
        *[("train.py", line, column, code) for line, column, code in TRAIN_FINDINGS],
    ]


def test_json_write_of_1_is_enabled_with_a_safe_fix(report: dict[str, Any]) -> None:
    first = dict(next(f for f in report["findings"] if f["path"] == "train.py"))
    message = first.pop("message")
    assert (first.pop("title"), first.pop("help"), first.pop("note")) == (
        'XLA_USE_BF16 set to "1" (on)',
        None,
        "XLA_USE_BF16 is deprecated since torch-xla 2.5; move to an explicit BF16 recipe",
    )
    assert first == {
        "code": "XM101",
        "path": "train.py",
        "line": 2,
        "column": 1,
        "end_line": 2,
        "end_column": 27,
        "severity": "error",
        "variable": "XLA_USE_BF16",
        "access": "write",
        "value": "1",
        "enabled": True,
        "fix": {"applicability": "safe"},
    }
    assert "XLA_USE_BF16" in message


def test_json_write_values_and_enabled_states(report: dict[str, Any]) -> None:
    by_line = {f["line"]: f for f in report["findings"] if f["path"] == "train.py"}
    assert (by_line[3]["value"], by_line[3]["enabled"]) == ("0", False)
    assert (by_line[4]["value"], by_line[4]["enabled"]) == (None, None)  # "1" if a else "0"
    assert (by_line[5]["code"], by_line[5]["variable"], by_line[5]["severity"]) == (
        "XM103",
        "XLA_USE_FP16",
        "warning",
    )
    read, delete, named = by_line[6], by_line[7], by_line[8]
    assert (read["access"], read["variable"], read["fix"]) == (
        "read",
        "XLA_DOWNCAST_BF16",
        {"applicability": "manual"},
    )
    assert (delete["access"], delete["fix"]) == ("delete", {"applicability": "unsafe"})
    assert (named["code"], named["access"], named["variable"]) == ("XM301", None, "XLA_USE_F16")
    assert all(f["value"] is None and f["enabled"] is None for f in (read, delete, named))


def test_json_errors_have_path_line_and_message(report: dict[str, Any]) -> None:
    assert len(report["errors"]) == 1
    error = report["errors"][0]
    assert set(error) == {"path", "line", "column", "code", "message"}
    assert (error["path"], error["line"], error["column"], error["code"]) == (
        "broken.py",
        2,
        1,
        "XM901",
    )
    assert error["message"] == (
        "could not parse: Missing parentheses in call to 'print'. Did you mean print(...)?"
    )
    assert type(error["message"]) is str and error["message"]


# --- sarif -------------------------------------------------------------------------------------


def test_sarif_with_a_parse_error_is_valid_against_the_schema(
    outputs: dict[str, subprocess.CompletedProcess[str]], sarif_validator: Any
) -> None:
    log = json.loads(outputs["sarif"].stdout)
    sarif_validator.validate(log)
    assert log["version"] == "2.1.0"
    assert len(log["runs"]) == 1


def test_sarif_of_a_clean_scan_is_valid_with_no_results(
    tmp_path: Path, sarif_validator: Any
) -> None:
    make_project(tmp_path, {"clean.py": "import os\n"})
    result = scan(tmp_path, "sarif")
    assert result.returncode == 0, result.stderr
    log = json.loads(result.stdout)
    sarif_validator.validate(log)
    assert log["runs"][0]["results"] == []


def test_sarif_results_match_the_findings(
    outputs: dict[str, subprocess.CompletedProcess[str]], report: dict[str, Any], project: Path
) -> None:
    run = json.loads(outputs["sarif"].stdout)["runs"][0]
    assert run["tool"]["driver"]["name"] == "xlamigrate"
    assert run["tool"]["driver"]["version"] == xlamigrate.__version__
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == project.resolve().as_uri() + "/"
    findings = report["findings"]
    results = run["results"]
    assert len(run["results"]) == len(findings) + 1
    levels = {"error": "error", "warning": "warning", "info": "note"}
    for finding, result in zip(findings, results[: len(findings)], strict=True):
        location = result["locations"][0]["physicalLocation"]
        assert result["ruleId"] == finding["code"]
        assert result["level"] == levels[finding["severity"]]
        assert result["message"]["text"] == finding["message"]
        assert location["artifactLocation"] == {
            "uri": quote(finding["path"]),
            "uriBaseId": "%SRCROOT%",
        }
        assert location["region"] == {
            "startLine": finding["line"],
            "startColumn": finding["column"],
            "endLine": finding["end_line"],
            "endColumn": finding["end_column"],
        }
    helpers = results[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert helpers == "pkg/my%20helpers.py"


def test_sarif_reports_a_parse_error_as_an_xm901_result(
    outputs: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    results = json.loads(outputs["sarif"].stdout)["runs"][0]["results"]
    errors = [result for result in results if result["ruleId"] == "XM901"]
    assert len(errors) == 1
    location = errors[0]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "broken.py"
    assert location["region"] == {"startLine": 2, "startColumn": 1}
    assert errors[0]["level"] == "error"
    assert errors[0]["message"]["text"]


def test_sarif_rule_ids_and_indexes_point_at_the_driver_rules(
    outputs: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    run = json.loads(outputs["sarif"].stdout)["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [rule["id"] for rule in rules] == ALL_CODES
    for rule in rules:
        assert rule["shortDescription"]["text"]
        assert rule["fullDescription"]["text"]
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
    assert {result["ruleId"] for result in run["results"]} == {
        "XM101", "XM103", "XM201", "XM202", "XM301", "XM901",
    }  # fmt: skip


def test_sarif_uri_percent_encodes_commas_and_colons(
    weird_project: Path, sarif_validator: Any
) -> None:
    result = scan(weird_project, "sarif")
    assert result.returncode == 1, result.stderr
    log = json.loads(result.stdout)
    sarif_validator.validate(log)
    # the write, and the XM401 its message refers to (the file builds no model to cast)
    [only, cause] = log["runs"][0]["results"]
    assert (only["ruleId"], cause["ruleId"]) == ("XM102", "XM401")
    for each in (only, cause):
        location = each["locations"][0]["physicalLocation"]
        assert location["artifactLocation"]["uri"] == "data/we%2Cird%3Aname.py"
    assert only["message"]["text"].startswith('XLA_DOWNCAST_BF16 set to "50%')


# --- github ------------------------------------------------------------------------------------


def test_github_prints_one_annotation_per_finding_and_error(
    outputs: dict[str, subprocess.CompletedProcess[str]], report: dict[str, Any]
) -> None:
    lines = outputs["github"].stdout.splitlines()
    findings, errors = report["findings"], report["errors"]
    assert len(lines) == len(findings) + len(errors)
    commands = {"error": "error", "warning": "warning", "info": "notice"}
    for finding, line in zip(findings, lines[: len(findings)], strict=True):
        match = GITHUB_LINE.match(line)
        assert match, line
        assert match["command"] == commands[finding["severity"]]
        assert match["file"] == finding["path"]
        assert (match["line"], match["col"]) == (str(finding["line"]), str(finding["column"]))
        assert (match["end_line"], match["end_column"]) == (
            str(finding["end_line"]),
            str(finding["end_column"]),
        )
        assert finding["code"] in match["title"]
        assert match["message"] == f"{finding['code']} {github_data_escape(finding['message'])}"
    error_match = GITHUB_LINE.match(lines[-1])
    assert error_match, lines[-1]
    assert (error_match["command"], error_match["file"], error_match["line"]) == (
        "error",
        "broken.py",
        "2",
    )
    assert error_match["message"] == f"XM901 {github_data_escape(errors[0]['message'])}"


def test_github_first_annotation_for_a_known_write(
    outputs: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    train = [line for line in outputs["github"].stdout.splitlines() if "file=train.py" in line]
    assert train[0].startswith("::error file=train.py,line=2,col=1,endLine=2,endColumn=27,title=")
    assert "::XM101 XLA_USE_BF16" in train[0]
    assert train[4].startswith("::warning file=train.py,line=6,col=9,")  # the XM201 read


def test_github_escapes_commas_and_colons_in_the_file_and_newlines_and_percent_in_the_message(
    weird_project: Path,
) -> None:
    result = scan(weird_project, "github")
    assert result.returncode == 1, result.stderr
    # the write and the XM401 its message refers to: the message's newline is escaped, not printed
    assert result.stdout.count("\n") == 2
    line, cause = result.stdout.rstrip("\n").split("\n")
    assert cause.startswith(
        "::warning file=data/we%2Cird%3Aname.py,line=2,col=1,endLine=2,endColumn=32,"
        "title=xlamigrate (XM401)::XM401 "
    )
    assert line.startswith(
        "::error file=data/we%2Cird%3Aname.py,line=2,col=1,endLine=2,endColumn=32,title="
    )
    match = GITHUB_LINE.match(line)
    assert match, line
    # The value is shown JSON-escaped in the message, so only its percent needs GitHub escaping.
    assert match["message"].startswith('XM102 XLA_DOWNCAST_BF16 set to "50%25\\nmore"')
    assert "%" not in match["message"].replace("%25", "")


def test_github_escapes_newlines_carriage_returns_and_percent_in_messages() -> None:
    from xlamigrate.catalogue import load_catalogue
    from xlamigrate.report.github_format import render
    from xlamigrate.results import FileError, ScanReport

    error = FileError("a,b:c.py", 3, "could not parse: 100% wrong\r\nsecond line")
    output = render(ScanReport(files_scanned=1, errors=(error,)), load_catalogue())
    assert output == (
        "::error file=a%2Cb%3Ac.py,line=3,title=xlamigrate (XM901)"
        "::XM901 could not parse: 100%25 wrong%0D%0Asecond line\n"
    )


# --- text --------------------------------------------------------------------------------------


def test_text_prints_a_short_first_line_then_help_and_note_as_ruff(
    outputs: dict[str, subprocess.CompletedProcess[str]], report: dict[str, Any]
) -> None:
    text = outputs["text"].stdout
    assert "\x1b[" not in text  # plain when stdout is not a terminal
    blocks = text.rstrip("\n").split("\n\n")
    findings, errors = report["findings"], report["errors"]
    assert len(blocks) == len(findings) + len(errors)
    for finding, block in zip(findings, blocks, strict=False):
        mark = " [*]" if finding["fix"] == {"applicability": "safe"} else ""
        where = f"{finding['path']}:{finding['line']}:{finding['column']}"
        lines = block.splitlines()
        assert lines[0] == f"{where}: {finding['code']}{mark} {finding['title']}"
        explained = [f"  {key}: {finding[key]}" for key in ("help", "note") if finding[key]]
        assert lines[1:] == explained
    assert blocks[1].splitlines() == [
        'train.py:2:1: XM101 [*] XLA_USE_BF16 set to "1" (on)',
        "  note: XLA_USE_BF16 is deprecated since torch-xla 2.5; move to an explicit BF16 recipe",
    ]
    assert blocks[-1] == f"broken.py:2:1: XM901 {errors[0]['message']}"


def test_text_help_is_what_this_place_needs_and_note_the_rules_why(report: dict[str, Any]) -> None:
    """The message's parts, as its rule composes it: `subject[; detail]: rule text`."""
    read = next(f for f in report["findings"] if f["code"] == "XM201")
    assert read["message"] == f"{read['title']}: {read['note']}"
    assert read["help"] is None and "review by hand" in read["note"]
    for finding in report["findings"]:
        parts = [finding["title"], finding["help"]]
        subject = "; ".join(part for part in parts if part)
        assert finding["message"] in (subject, f"{subject}: {finding['note']}"), finding


def test_concise_prints_each_finding_on_one_line_with_its_fix(
    outputs: dict[str, subprocess.CompletedProcess[str]], report: dict[str, Any]
) -> None:
    lines = outputs["concise"].stdout.splitlines()
    findings, errors = report["findings"], report["errors"]
    assert len(lines) == len(findings) + len(errors)
    for finding, line in zip(findings, lines[: len(findings)], strict=True):
        prefix = f"{finding['path']}:{finding['line']}:{finding['column']}: {finding['code']} "
        fix = f" [fix: {finding['fix']['applicability']}]" if finding["fix"] else ""
        assert line == prefix + finding["message"] + fix, line
    assert lines[1].startswith('train.py:2:1: XM101 XLA_USE_BF16 set to "1" (on): ')
    assert lines[-1] == f"broken.py:2:1: XM901 {errors[0]['message']}"


def test_text_prints_each_line_whole_even_when_the_value_has_a_newline(
    weird_project: Path,
) -> None:
    for output_format in ("text", "concise"):
        result = scan(weird_project, output_format)
        assert result.returncode == 1, result.stderr
        first = result.stdout.split("\ndata/", 1)[0].split("\n\n", 1)[0]
        assert first.startswith("data/we,ird:name.py:2:1: XM102 ")
        lines = first.splitlines()
        assert lines[0].endswith('"50%\\nmore" (on)' if output_format == "text" else "]")
        assert all(line.startswith(("  help: ", "  note: ")) for line in lines[1:])


def test_summary_counts_safe_fixes_for_the_configured_mode_and_hidden_unsafe_ones(
    tmp_path: Path,
) -> None:
    project = make_project(
        tmp_path,
        {
            "pyproject.toml": '[tool.xlamigrate]\nmode = "autocast"\n',
            "train.py": 'import os\ndel os.environ["XLA_USE_BF16"]\n',
        },
    )
    result = scan(project, "text")
    assert result.stderr.splitlines() == [
        "Found 1 finding in 1 file (1 file scanned).",  # (pyproject.toml is no file to scan)
        "No fixes available (1 hidden fix can be enabled with"
        " `xlamigrate rewrite --mode autocast --unsafe-fixes`).",
    ]
    (project / "train.py").write_text('import os\nflag = os.environ.get("XLA_USE_BF16")\n')
    manual = scan(project, "text")
    assert manual.stderr.splitlines() == ["Found 1 finding in 1 file (1 file scanned)."]


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
def test_text_on_a_terminal_is_coloured_by_rich(project: Path, report: dict[str, Any]) -> None:
    import pty

    env = {
        key: value for key, value in os.environ.items() if key not in {"NO_COLOR", "FORCE_COLOR"}
    }
    env.update(TERM="xterm-256color", COLUMNS="400")
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "xlamigrate.cli", "scan"],
        cwd=project,
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    stderr = process.communicate(timeout=60)[1]
    assert process.returncode == 1
    output = b"".join(chunks).decode("utf-8")
    assert "\x1b[" in output
    plain = re.sub(r"\x1b\[[0-9;]*m", "", output).replace("\r\n", "\n")
    first = next(f for f in report["findings"] if f["path"] == "train.py")
    assert f"train.py:2:1: XM101 [*] {first['title']}\n  note: {first['note']}\n" in plain
    assert "broken.py:2:1: XM901 " in plain
    assert b"(4 files scanned)." in stderr


def test_text_on_a_narrow_terminal_keeps_each_line_of_a_finding_whole() -> None:
    """As ruff's output: rich does not hard-wrap a long message into several lines (the
    terminal wraps it for the eye; a copy of it is still one line)."""
    from rich.console import Console

    from xlamigrate.catalogue import load_catalogue
    from xlamigrate.findings import worded
    from xlamigrate.report.rich_text import print_report
    from xlamigrate.results import FileError, Finding, Fix, ScanReport, Span

    long = (
        'XLA_USE_BF16 set to "1" (on); '
        + ", ".join(["a long explanation"] * 12)
        + ": XLA_USE_BF16 is"
        " deprecated since torch-xla 2.5; move to an explicit BF16 recipe"
    )
    finding = Finding("XM101", "train.py", Span(3, 1, 3, 30), "error", long, fix=Fix("safe"))
    finding = worded(finding, load_catalogue().rule("XM101"))
    error = FileError(
        "broken.py", 2, "could not parse: " + ", ".join(["invalid syntax"] * 10), column=7
    )
    console = Console(width=40, record=True, force_terminal=True, highlight=False)
    print_report(ScanReport(files_scanned=2, findings=(finding,), errors=(error,)), console)
    lines = console.export_text().splitlines()
    assert lines == [
        'train.py:3:1: XM101 [*] XLA_USE_BF16 set to "1" (on)',
        "  help: " + ", ".join(["a long explanation"] * 12),
        "  note: XLA_USE_BF16 is deprecated since torch-xla 2.5; move to an explicit BF16 recipe",
        "",
        "broken.py:2:7: XM901 could not parse: " + ", ".join(["invalid syntax"] * 10),
    ]


def test_a_notebook_that_is_not_json_is_xm901_at_the_parsers_line_and_column() -> None:
    from xlamigrate.catalogue import load_catalogue
    from xlamigrate.engine import scan_source

    catalogue = load_catalogue()
    data = b'{"cells": [\n  {"source": XLA_USE_BF16}\n]}\n'
    result = scan_source("bad.ipynb", data, "notebook", catalogue, frozenset(catalogue.rules))
    [error] = result.errors
    assert (error.line, error.column, error.code) == (2, 14, "XM901")
    assert error.message == "could not read the notebook: Expecting value"


def test_a_note_in_place_of_the_rules_text_is_help() -> None:
    """`with_note(instead=True)` (a read the rewrite redirects): the note says what the rewrite
    does, so it is the help, and there is no rule text left to be the note."""
    from xlamigrate.catalogue import load_catalogue
    from xlamigrate.findings import with_note, worded
    from xlamigrate.results import Finding, Span

    rule = load_catalogue().rule("XM201")
    message = with_note(rule.message.format(subject="XLA_USE_BF16 read"), "it reads X", True)
    finding = Finding("XM201", "t.py", Span(1, 1, 1, 2), "warning", message)
    parts = worded(finding, rule)
    assert (parts.title, parts.help, parts.note) == ("XLA_USE_BF16 read", "it reads X", None)
    assert parts == finding  # the parts are the message's: equality ignores them
