"""Files xlamigrate does not read (Jenkinsfile, jsonnet, Terraform, JSON, TOML, batch,
PowerShell): a flag used there is XM301, manual; comments, prose in strings and documentation
folders are not reported. Each tests/fixtures/unread/<file> has <stem>.findings.txt."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from xlamigrate.catalogue import Catalogue
from xlamigrate.engine import rewrite_source, scan_source
from xlamigrate.kinds import KINDS, kind_by_name
from xlamigrate.kinds.unreadtable import UNREAD_KINDS
from xlamigrate.request import RewriteRequest

UNREAD = FIXTURES / "unread"
CASES = sorted(
    path for path in UNREAD.rglob("*") if path.is_file() and not path.name.endswith(".findings.txt")
)


def findings_file(case: Path) -> Path:
    stem = case.name if case.suffix in (".bat", ".ps1") else case.stem
    return case.with_name(stem + ".findings.txt")


def expected(case: Path) -> list[str]:
    lines = findings_file(case).read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("case", CASES, ids=lambda case: str(case.relative_to(UNREAD)))
def test_unread_file_fixture(case: Path, catalogue: Catalogue) -> None:
    kind = kind_by_name(case.name)
    assert kind in {k.name for k in UNREAD_KINDS}
    display = str(case.relative_to(UNREAD))
    result = scan_source(display, case.read_bytes(), kind, catalogue, catalogue.select((), ()))
    assert result.errors == ()
    assert [f"{f.span.line}:{f.span.column} {f.code}" for f in result.findings] == expected(case)
    for finding in result.findings:
        assert finding.fix is not None and finding.fix.applicability == "manual"
        assert "a file xlamigrate does not read" in finding.message


def test_the_rewrite_leaves_an_unread_file_as_it_is(catalogue: Catalogue) -> None:
    case = UNREAD / "Jenkinsfile"
    enabled = catalogue.select((), ())
    request = RewriteRequest("full-bf16")
    outcome = rewrite_source(
        "Jenkinsfile", case.read_bytes(), "groovy", catalogue, enabled, request
    )
    assert outcome.rewritten is None
    assert [f.code for f in outcome.remaining] == ["XM301"] * 3


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("Jenkinsfile", "groovy"),
        ("Jenkinsfile.tpu", "groovy"),
        ("build.gradle", "groovy"),
        ("tpu.libsonnet", "jsonnet"),
        ("main.tf", "terraform"),
        ("launch.json", "json"),
        ("config.toml", "toml"),
        ("pyproject.toml", None),  # the project's configuration
        ("run.cmd", "batch"),
        ("run.ps1", "powershell"),
        ("README.md", None),
        ("notes.txt", None),
        ("index.rst", None),
    ],
)
def test_unread_kinds_by_name(name: str, kind: str | None) -> None:
    assert kind_by_name(name) == kind


def test_every_unread_kind_is_in_the_registry_with_its_precommit_type() -> None:
    registered = {spec.name: spec for spec in KINDS}
    for kind in UNREAD_KINDS:
        assert registered[kind.name].patterns == kind.patterns
        assert registered[kind.name].identify == kind.identify
        assert registered[kind.name].not_patterns == kind.not_patterns


def test_a_runtime_variable_alone_does_not_make_an_unread_file_worth_parsing(
    catalogue: Catalogue,
) -> None:
    from xlamigrate.prefilter import Prefilter

    prefilter = Prefilter(catalogue, catalogue.select((), ()))
    data = b'{"env": {"XRT_TPU_CONFIG": "localservice;0;localhost:51011"}}\n'
    assert not prefilter.may_have_findings("json", data)
    assert prefilter.may_have_findings("shell", b"export XRT_TPU_CONFIG=x\n")
    assert prefilter.may_have_findings("json", b'{"XLA_USE_BF16": "1"}\n')
