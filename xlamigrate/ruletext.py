"""What `xlamigrate rule` prints of a rule, generated from its data (rules/<code>.toml): its
fix lines come from the same `[fixes]` table the tests hold the engine's findings to, so the
text cannot promise a fix the engine does not give, nor deny one it does."""

from __future__ import annotations

import difflib
import textwrap
from collections.abc import Sequence

from xlamigrate.apitable import ApiTable
from xlamigrate.catalogue import Rule
from xlamigrate.ruleexamples import EVERY_MODE, Example, ExampleFinding

_WIDTH = 92


def fix_summary(rule: Rule) -> str:
    """Its applicabilities, safest first (`safe/unsafe/manual`), or `none`."""
    return "/".join(rule.applicabilities) or "none"


def rule_listing(rules: Sequence[Rule]) -> list[str]:
    """One line per rule, its columns lined up for the longest name and fix summary."""
    name_width = max(len(rule.name) for rule in rules)
    fix_width = max(len(fix_summary(rule)) for rule in rules)
    return [
        f"{rule.code}  {rule.name:<{name_width}}  {rule.severity:<8} "
        f"fix: {fix_summary(rule):<{fix_width}} {rule.summary}"
        for rule in rules
    ]


def rule_text(rule: Rule, examples: Sequence[Example] = (), table: ApiTable | None = None) -> str:
    """The whole explanation: summary, severity, where each fix applies, the rule's own text,
    the torch-xla table's entries it reports (`table`), its examples (what it finds in them,
    what each mode's rewrite makes of them), its references."""
    parts = [f"{rule.code} ({rule.name}): {rule.summary}", f"Severity: {rule.severity}."]
    parts.append("\n".join(_fix_lines(rule)))
    parts.append(rule.explanation)
    entries = _entry_lines(rule, table) if table is not None else []
    if entries:
        parts.append("\n".join(["What it reports (rules/xla_apis.toml):", *entries]))
    parts += ["\n".join(_example_lines(rule, example)) for example in examples]
    if rule.references:
        parts.append("\n".join(["References:", *(f"  {link}" for link in rule.references)]))
    return "\n\n".join(parts)


def _entry_lines(rule: Rule, table: ApiTable) -> list[str]:
    """One line per entry of the torch-xla table the rule reports: what became of it, and
    what the fix writes instead."""
    lines = []
    for api in table.apis.values():
        if api.rule != rule.code:
            continue
        if api.keeps_name:
            instead = ", ".join(f"`{p.name}` only {' or '.join(p.accepted)}" for p in api.limited)
        else:
            instead = f"use {api.replacement}" if api.replacement else "reported"
        since = f" (torch-xla {api.since}+)" if api.replacement and api.since else ""
        lines.append(f"  {api.name}: {api.status}; {instead}{since}")
    for variable in table.variables.values():
        if variable.rule == rule.code:
            lines.append(f"  {variable.name}: {variable.status}; {variable.instead}")
    return lines


def _example_lines(rule: Rule, example: Example) -> list[str]:
    lines = [f"Example: {example.about}"]
    for path, text in example.files:
        lines += [f"  {path}:", *(f"    {line}".rstrip() for line in text.splitlines())]
    modes = f" (--mode {', '.join(example.modes)})" if example.modes is not None else ""
    if example.valid:
        lines.append(f"  {rule.code} finds nothing here{modes}.")
        return lines
    lines.append(f"  {rule.code} finds{modes}:")
    lines += [f"    {_finding(finding)}" for finding in example.findings]
    for mode, changed in example.fixed:
        command = "xlamigrate rewrite" + ("" if mode == EVERY_MODE else f" --mode {mode}")
        lines.append(f"  `{command}` writes{' (every mode)' if mode == EVERY_MODE else ''}:")
        before = dict(example.files)
        for path, text in changed:
            diff = difflib.unified_diff(
                before[path].splitlines(), text.splitlines(), path, path, lineterm=""
            )
            lines += [f"    {line}".rstrip() for line in diff]
    if not example.fixed:
        lines.append("  The rewrite leaves the files as they are.")
    return lines


def _finding(finding: ExampleFinding) -> str:
    """`train.py:3:1 [fix: safe] XLA_USE_BF16 set to "1" (on)`, as the text output words it."""
    fix = f" [fix: {finding.fix}]" if finding.fix != "none" else ""
    return f"{finding.where}{fix} {finding.title}"


def _fix_lines(rule: Rule) -> list[str]:
    if not rule.fixes:
        return ["Fix: none (reported, never fixed)."]
    lines = [f"Fix: {fix_summary(rule)}."]
    width = max(len(level) for level, _ in rule.fixes) + 1
    for level, where in rule.fixes:
        lines += textwrap.wrap(
            where,
            _WIDTH,
            initial_indent=f"  {level + ':':<{width}} ",
            subsequent_indent=" " * (width + 3),
            break_on_hyphens=False,
        )
    return lines
