"""Scan and rewrite for every text kind (shell, Dockerfile, YAML, .env) on one model: the kind
module finds the accesses and knows its syntax; findings, suppressions and the recipes' edits
are the same for all."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace

from xlamigrate.catalogue import Catalogue
from xlamigrate.findings import MENTION_RULE, access_findings, manual_finding, mention_finding
from xlamigrate.kinds.embedded import SHELL_SYNTAX, CannotRender
from xlamigrate.kinds.textaccess import (
    LineIndex,
    TextAccess,
    TextAnalysis,
    TextEdit,
    TextMention,
    apply_edits,
    hash_comments,
)
from xlamigrate.model import FileError, FileResult, Finding, RewriteOutcome
from xlamigrate.neuronflags import NEURON_CC_FLAGS, STOCHASTIC_ROUNDING, merge_auto_cast_none
from xlamigrate.suppression import is_suppressed, parse_suppressions

_RECIPE_FLAGS = ("XLA_USE_BF16", "XLA_DOWNCAST_BF16")
_AUTO_CAST_NONE = "--auto-cast=none"


Analyse = Callable[[str, frozenset[str]], TextAnalysis]
Render = Callable[..., str]  # (syntax, name, value, append=False) -> the construct's text


@dataclass(frozen=True)
class TextKind:
    """A text kind's two parts: `analyse(text, names)` finds the accesses, `render(syntax, name,
    value, append=False)` spells an assignment in the construct an access was found in."""

    analyse: Analyse
    render: Render

    def scan(
        self, path: str, data: bytes, catalogue: Catalogue, enabled: frozenset[str]
    ) -> FileResult:
        return scan_text(path, data, self, catalogue, enabled)

    def rewrite(
        self,
        path: str,
        data: bytes,
        catalogue: Catalogue,
        enabled: frozenset[str],
        mode: str,
        unsafe_fixes: bool = False,
    ) -> RewriteOutcome:
        return rewrite_text(path, data, self, catalogue, enabled, mode, unsafe_fixes)


@dataclass(frozen=True)
class _Decoded:
    text: str
    bom: bool


def _decode(path: str, data: bytes) -> _Decoded | FileError:
    bom = data.startswith(b"\xef\xbb\xbf")
    try:
        return _Decoded(data[3:].decode("utf-8") if bom else data.decode("utf-8"), bom)
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        return FileError(path, line, f"could not decode as UTF-8: {error.reason}")


def _analyse(path: str, kind: TextKind, text: str, catalogue: Catalogue) -> TextAnalysis:
    names = frozenset(catalogue.flags) | {STOCHASTIC_ROUNDING, NEURON_CC_FLAGS}
    analysis = kind.analyse(text, names)
    accesses = tuple(
        replace(a, launched=_in_tree(path, a.launched)) if a.launched else a
        for a in analysis.accesses
    )
    return replace(analysis, accesses=accesses)


def _in_tree(path: str, scripts: tuple[str, ...]) -> tuple[str, ...]:
    """The launched scripts that exist next to the launcher or below the current folder."""
    here = os.path.dirname(path)
    return tuple(
        script
        for script in scripts
        if os.path.isfile(os.path.join(here, script)) or os.path.isfile(script)
    )


_MENTION_WHERE = (
    "in text xlamigrate cannot follow (a string another program reads, a file a here-document"
    " writes)"
)


def _reported(
    path: str, text: str, analysis: TextAnalysis, catalogue: Catalogue, enabled: frozenset[str]
) -> list[tuple[TextAccess | TextMention, Finding]]:
    index = LineIndex(text)
    pairs: list[tuple[TextAccess | TextMention, Finding]] = [
        (access, finding)
        for access, finding in access_findings(
            path, analysis.accesses, lambda a: index.span(a.start, a.end), catalogue
        )
        if finding.code in enabled
    ]
    if MENTION_RULE in enabled:
        pairs.extend(
            (
                mention,
                mention_finding(
                    catalogue,
                    path,
                    index.span(mention.start, mention.end),
                    mention.variable,
                    mention.note or _MENTION_WHERE,
                ),
            )
            for mention in analysis.mentions
        )
    table = parse_suppressions(hash_comments(text)) if pairs else {}
    return [
        (access, finding)
        for access, finding in pairs
        if not is_suppressed(finding.code, {finding.span.line, finding.span.end_line}, table)
    ]


def _problems(path: str, analysis: TextAnalysis) -> tuple[FileError, ...]:
    return tuple(
        FileError(path, line, f"could not parse: {message}") for line, message in analysis.problems
    )


def scan_text(
    path: str, data: bytes, kind: TextKind, catalogue: Catalogue, enabled: frozenset[str]
) -> FileResult:
    decoded = _decode(path, data)
    if isinstance(decoded, FileError):
        return FileResult(path, errors=(decoded,))
    analysis = _analyse(path, kind, decoded.text, catalogue)
    found = [f for _, f in _reported(path, decoded.text, analysis, catalogue, enabled)]
    findings = tuple(sorted(found, key=lambda f: f.sort_key))
    return FileResult(path, findings=findings, errors=_problems(path, analysis))


def rewrite_text(
    path: str,
    data: bytes,
    kind: TextKind,
    catalogue: Catalogue,
    enabled: frozenset[str],
    mode: str,
    unsafe_fixes: bool = False,
) -> RewriteOutcome:
    decoded = _decode(path, data)
    if isinstance(decoded, FileError):
        return RewriteOutcome(path, data, None, errors=(decoded,))
    text = decoded.text
    analysis = _analyse(path, kind, text, catalogue)
    pairs = _reported(path, text, analysis, catalogue, enabled)
    errors = _problems(path, analysis)
    if not pairs:
        return RewriteOutcome(path, data, None, errors=errors)
    writes = [a for a in analysis.accesses if a.kind == "write"]
    has_rounding = any(a.variable == STOCHASTIC_ROUNDING for a in writes)
    flag_writes = [a for a in writes if a.variable == NEURON_CC_FLAGS]
    edits: list[TextEdit] = []
    fixed: list[Finding] = []
    remaining: list[Finding] = []
    replaced_once = False
    fallbacks: dict[TextEdit, TextEdit | None] = {}  # a recipe replacement -> the plain removal
    for access, finding in pairs:
        applicability = finding.fix.applicability if finding.fix else None
        allowed = applicability == "safe" or (applicability == "unsafe" and unsafe_fixes)
        if isinstance(access, TextMention) or access.kind == "read" or not allowed:
            remaining.append(finding)
            continue
        enabling = (
            access.kind == "write"
            and access.variable in _RECIPE_FLAGS
            and access.value is not None
            and access.value.enabled is not False
        )
        edit = access.removal
        if enabling and not replaced_once and access.assignment is not None:
            try:
                replacement = _recipe_assignment(kind, access, mode, has_rounding, flag_writes)
            except CannotRender:  # the host cannot spell the recipe's variable here
                remaining.append(_manual(catalogue, finding))
                continue
            if replacement is not None:
                edit = TextEdit(*access.assignment, replacement)
                fallbacks[edit] = access.removal
                replaced_once = True
        if edit is None:
            remaining.append(_manual(catalogue, finding))
            continue
        edits.append(edit)
        fixed.append(finding)
    migrated = any(
        isinstance(a, TextAccess) and a.variable in _RECIPE_FLAGS and f in fixed for a, f in pairs
    )
    if mode == "autocast" and migrated and not replaced_once:
        merges, unmerged = _merge_auto_cast_none(kind, flag_writes)
        edits.extend(merges)
        index = LineIndex(text)
        remaining.extend(
            manual_finding(
                catalogue, "XM407", path, index.span(w.start, w.end), f"{NEURON_CC_FLAGS} set here"
            )
            for w in unmerged
        )
    if mode == "fp32-copy" and migrated:  # master weights replace rounding: drop an explicit "1"
        edits.extend(
            a.removal
            for a in writes
            if a.variable == STOCHASTIC_ROUNDING
            and a.removal is not None
            and a.value is not None
            and a.value.enabled is True
        )
    if mode == "autocast":
        edits = _no_auto_cast_beside_a_legacy_flag(
            catalogue, path, text, writes, edits, fallbacks, remaining
        )
    new_text = apply_edits(text, _whole_containers(analysis.accesses, edits))
    rewritten = (b"\xef\xbb\xbf" if decoded.bom else b"") + new_text.encode("utf-8")
    return RewriteOutcome(
        path,
        data,
        rewritten if rewritten != data else None,
        tuple(sorted(fixed, key=lambda f: f.sort_key)),
        tuple(sorted(remaining, key=lambda f: f.sort_key)),
        errors,
    )


def _no_auto_cast_beside_a_legacy_flag(
    catalogue: Catalogue,
    path: str,
    text: str,
    writes: list[TextAccess],
    edits: list[TextEdit],
    fallbacks: dict[TextEdit, TextEdit | None],
    remaining: list[Finding],
) -> list[TextEdit]:
    """A legacy flag left set (noqa'd, not removable) and --auto-cast=none crash neuronx-cc:
    then no NEURON_CC_FLAGS edit is made, and the flag is reported (XM405)."""
    if not any(_AUTO_CAST_NONE in edit.replacement for edit in edits):
        return edits  # nothing would add --auto-cast=none
    chosen = {(edit.start, edit.end) for edit in edits}
    for write in writes:
        if write.variable not in _RECIPE_FLAGS or (write.value and write.value.enabled is False):
            continue
        spans = {
            write.assignment,
            (write.removal.start, write.removal.end) if write.removal else None,
        }
        if not any(span in chosen for span in spans if span is not None):
            span = LineIndex(text).span(write.start, write.end)
            remaining.append(manual_finding(catalogue, "XM405", path, span, write.variable))
            kept = [fallbacks.get(edit, edit) for edit in edits]
            return [e for e in kept if e is not None and _AUTO_CAST_NONE not in e.replacement]
    return edits


def _whole_containers(accesses: tuple[TextAccess, ...], edits: list[TextEdit]) -> list[TextEdit]:
    """Where every access of a construct is removed, remove the construct instead."""
    chosen = set(edits)
    members: dict[TextEdit, list[TextAccess]] = {}
    for access in accesses:
        if access.container is not None:
            members.setdefault(access.container, []).append(access)
    for container, group in members.items():
        removals = [access.removal for access in group]
        if all(removal is not None and removal in chosen for removal in removals):
            chosen -= {removal for removal in removals if removal is not None}
            chosen.add(container)
    return list(chosen)


def _render(kind: TextKind, syntax: str, name: str, value: str, append: bool = False) -> str:
    """An assignment in the construct of `syntax`: shell text anywhere is the shell's to spell."""
    if syntax.startswith(SHELL_SYNTAX):
        from xlamigrate.kinds.shell.render import render as render_shell

        return render_shell(syntax, name, value, append=append)
    return kind.render(syntax, name, value, append=append)


def _recipe_assignment(
    kind: TextKind,
    access: TextAccess,
    mode: str,
    has_rounding: bool,
    flag_writes: list[TextAccess],
) -> str | None:
    """What the first enabling write becomes in the same construct, per mode (None: removed)."""
    if mode == "full-bf16" and not has_rounding:
        return _render(kind, access.syntax, STOCHASTIC_ROUNDING, "1")
    if mode == "autocast" and not flag_writes:
        return _render(kind, access.syntax, NEURON_CC_FLAGS, "--auto-cast=none", append=True)
    return None


def _merge_auto_cast_none(
    kind: TextKind, flag_writes: list[TextAccess]
) -> tuple[list[TextEdit], list[TextAccess]]:
    """Edits that end every NEURON_CC_FLAGS write with --auto-cast=none, and the writes that
    cannot take one (reported, never dropped silently)."""
    edits: list[TextEdit] = []
    unmerged: list[TextAccess] = []
    for write in flag_writes:
        literal = write.value.literal if write.value else None
        if literal is not None and write.assignment is not None:
            merged = merge_auto_cast_none(literal)
            if merged == literal:
                continue
            try:
                replacement = _render(kind, write.syntax, NEURON_CC_FLAGS, merged)
            except CannotRender:
                unmerged.append(write)
                continue
            edits.append(TextEdit(*write.assignment, replacement))
        elif write.auto_cast_none is not None:
            edits.extend(write.auto_cast_none)
        elif write.value_range is not None:  # (no value_range: `export X` passes a value on)
            unmerged.append(write)
    return edits, unmerged


def _manual(catalogue: Catalogue, finding: Finding) -> Finding:
    return manual_finding(catalogue, "XM404", finding.path, finding.span, finding.message)
