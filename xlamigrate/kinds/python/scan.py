"""Scans one Python file's bytes: parse once, analyse once, filter by selection and noqa."""

from __future__ import annotations

import io
import tokenize
from collections.abc import Iterator
from dataclasses import replace

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from xlamigrate.catalogue import Catalogue
from xlamigrate.findings import with_note
from xlamigrate.flagvalue import RECIPE_FLAGS
from xlamigrate.kinds.python.commands import command_findings
from xlamigrate.kinds.python.detect import classified
from xlamigrate.kinds.python.envaccess import (
    EnvAccess,
    EnvAccessAnalysis,
    FlagMention,
    analyse_env_accesses,
)
from xlamigrate.kinds.python.parse import parse_python
from xlamigrate.model import FileError, FileResult, Finding, Fix
from xlamigrate.request import STANDALONE, FileContext
from xlamigrate.suppression import is_suppressed, parse_suppressions


def scan_python(
    path: str,
    data: bytes,
    catalogue: Catalogue,
    enabled: frozenset[str],
    context: FileContext = STANDALONE,
) -> FileResult:
    parsed = parse_python(path, data)
    if isinstance(parsed, FileError):
        return FileResult(path, errors=(parsed,))
    wrapper = MetadataWrapper(parsed, unsafe_skip_copy=True)
    analysis = analyse_env_accesses(wrapper, catalogue.flags)
    pairs = reported(path, wrapper, analysis, catalogue, enabled)
    recipe = context.reads_against
    reads = {a.node: f for a, f in pairs if isinstance(a, EnvAccess) and a.kind == "read"}
    if recipe is not None and reads:  # what the rewrite makes of them, as it would say it
        from xlamigrate.kinds.python.reads import read_outcomes
        from xlamigrate.kinds.python.training import TrainingScript

        script = TrainingScript(wrapper)
        outcomes = read_outcomes(script, analysis.accesses, reads, recipe, context.signal)
        worded = {(f.span, f.code): f for o in outcomes for f in o.findings}
        pairs = [(item, worded.get((f.span, f.code), f)) for item, f in pairs]
    pairs = kept_for_children(pairs, context, analysis.children)
    if context.recipe is None and any(_removable_enabling(item, f) for item, f in pairs):
        from xlamigrate.kinds.python.rewrite import kept_for_recipe

        pairs = kept_for_recipe(path, wrapper, pairs, catalogue, context)
    found = [finding for _, finding in pairs]
    found += command_findings(path, wrapper, analysis.commands, catalogue, enabled)
    return FileResult(path, findings=tuple(sorted(found, key=lambda f: f.sort_key)))


def reported(
    path: str,
    wrapper: MetadataWrapper,
    analysis: EnvAccessAnalysis,
    catalogue: Catalogue,
    enabled: frozenset[str],
) -> list[tuple[EnvAccess | FlagMention, Finding]]:
    """The findings the user asked for: selected codes, not suppressed by a comment."""
    positions = wrapper.resolve(PositionProvider)
    pairs = [
        (item, finding)
        for item, finding in classified(path, analysis, positions, catalogue)
        if finding.code in enabled
    ]
    if not pairs:
        return pairs
    table = parse_suppressions(_comments(wrapper.module))
    return [
        (item, finding)
        for item, finding in pairs
        if not is_suppressed(finding.code, {finding.span.line, finding.span.end_line}, table)
    ]


def kept_for_children(
    pairs: list[tuple[EnvAccess | FlagMention, Finding]],
    context: FileContext,
    started: tuple[str, ...] = (),
) -> list[tuple[EnvAccess | FlagMention, Finding]]:
    """Where the file's process starts Python scripts (`context.children`, `started`), a write
    that turns a legacy flag on in that process reaches them too: it stays (manual) until they
    have the recipe, whatever the file itself gets."""
    children = tuple(dict.fromkeys((*context.children, *started)))
    if not children:
        return pairs
    scripts = ", ".join(children)
    note = (
        f"it also reaches {scripts}, which this file starts: these launches are not followed"
        " yet, so put the recipe in that script by hand, then remove this write"
    )
    kept = []
    for item, finding in pairs:
        if _enabling_process_write(item):
            finding = replace(finding, message=with_note(finding.message, note), fix=Fix("manual"))
        kept.append((item, finding))
    return kept


def _removable_enabling(item: EnvAccess | FlagMention, finding: Finding) -> bool:
    """A write of the process's own legacy flag that may turn it on, which the rewrite may
    remove (it does so only where the recipe goes in whole)."""
    return (
        _enabling_process_write(item)
        and finding.fix is not None
        and finding.fix.applicability != "manual"
    )


def _enabling_process_write(item: EnvAccess | FlagMention) -> bool:
    return (
        isinstance(item, EnvAccess)
        and item.kind == "write"
        and item.target == "process"
        and item.variable in RECIPE_FLAGS
        and item.value is not None
        and item.value.enabled is not False
    )


def _comments(module: cst.Module) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment: tokenize knows a `#` inside a string is not one."""
    readline = io.StringIO(module.code).readline
    try:
        for token in tokenize.generate_tokens(readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.string
    except (tokenize.TokenError, SyntaxError):
        return
