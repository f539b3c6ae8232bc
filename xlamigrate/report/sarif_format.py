"""SARIF 2.1.0, as GitHub code scanning and other SARIF viewers read it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

from xlamigrate import __version__
from xlamigrate.catalogue import Catalogue, Rule
from xlamigrate.results import FileError, Finding, ScanReport, Severity

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/xlamigrate/xlamigrate"
_LEVELS: dict[Severity, str] = {"error": "error", "warning": "warning", "info": "note"}
_ROOT = "%SRCROOT%"


def render(report: ScanReport, catalogue: Catalogue) -> str:
    rules = sorted(catalogue.rules.values(), key=lambda rule: rule.code)
    index = {rule.code: position for position, rule in enumerate(rules)}
    results = [_finding_result(finding, index) for finding in report.findings]
    results += [_error_result(error, catalogue.rule(error.code), index) for error in report.errors]
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "xlamigrate",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": INFORMATION_URI,
                "rules": [_rule(rule) for rule in rules],
            }
        },
        "originalUriBaseIds": {_ROOT: {"uri": Path.cwd().as_uri() + "/"}},
        "columnKind": "unicodeCodePoints",
        "results": results,
    }
    log = {"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}
    return json.dumps(log, indent=2) + "\n"


def _rule(rule: Rule) -> dict[str, Any]:
    described: dict[str, Any] = {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.explanation},
        "help": {"text": rule.explanation, "markdown": rule.explanation},
        "defaultConfiguration": {"level": _LEVELS[rule.severity]},
        "properties": {"fix": rule.fix or "none"},
    }
    if rule.references:
        described["helpUri"] = rule.references[0]
    return described


def _location(path: str, region: dict[str, int]) -> dict[str, Any]:
    artifact: dict[str, str]
    if Path(path).is_absolute():
        artifact = {"uri": Path(path).as_uri()}
    else:
        artifact = {"uri": quote(path), "uriBaseId": _ROOT}
    return {"physicalLocation": {"artifactLocation": artifact, "region": region}}


def _finding_result(finding: Finding, index: dict[str, int]) -> dict[str, Any]:
    span = finding.span
    region = {
        "startLine": span.line,
        "startColumn": span.column,
        "endLine": span.end_line,
        "endColumn": span.end_column,
    }
    properties: dict[str, Any] = {"variable": finding.variable, "access": finding.access}
    if finding.cell is not None:
        # The region is the line of the .ipynb file; the position in the cell is a property.
        region = {"startLine": finding.file_line or 1}
        properties.update(cell=finding.cell, cellLine=span.line, cellColumn=span.column)
    if finding.value is not None:
        properties["value"] = finding.value
    if finding.enabled is not None:
        properties["enabled"] = finding.enabled
    if finding.fix is not None:
        properties["fix"] = finding.fix.applicability
    return {
        "ruleId": finding.code,
        "ruleIndex": index[finding.code],
        "level": _LEVELS[finding.severity],
        "message": {"text": finding.message},
        "locations": [_location(finding.path, region)],
        "properties": properties,
    }


def _error_result(error: FileError, rule: Rule, index: dict[str, int]) -> dict[str, Any]:
    region = {"startLine": error.line or 1}
    if error.line and error.column:
        region["startColumn"] = error.column
    return {
        "ruleId": error.code,
        "ruleIndex": index[error.code],
        "level": _LEVELS[rule.severity],
        "message": {"text": error.message},
        "locations": [_location(error.path, region)],
    }
