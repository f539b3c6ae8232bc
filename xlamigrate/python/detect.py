"""Turns resolved env accesses and flag mentions of one Python file into findings."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import libcst as cst
from libcst.metadata import CodeRange

from xlamigrate.catalogue import Catalogue
from xlamigrate.model import APPLICABILITIES, Applicability, Finding, Fix, Span
from xlamigrate.python.envaccess import EnvAccess, EnvAccessAnalysis, FlagMention

READ_RULE = "XM201"
DELETE_RULE = "XM202"
MENTION_RULE = "XM301"

_TARGET_PHRASE = {
    "process": "",
    "child": " in a child process's environment",
    "test": " in a test's patched environment",
}
_MENTION_PHRASE = {
    "string": "{variable} named in a string",
    "keyword": "{variable} passed as a keyword argument",
    "shell-assignment": "{variable}={value} in a shell command string",
}


def classified(
    path: str,
    analysis: EnvAccessAnalysis,
    positions: Mapping[cst.CSTNode, CodeRange],
    catalogue: Catalogue,
) -> Iterator[tuple[EnvAccess | FlagMention, Finding]]:
    """Each access or mention of a legacy flag with its finding (the rewriter needs both)."""
    first_writes = _first_process_writes(analysis.accesses, positions)
    read_variables = {a.variable for a in analysis.accesses if a.kind == "read"}
    for access in analysis.accesses:
        if access.variable not in catalogue.flags:
            continue  # a recipe variable tracked for the rewriter, not a finding
        finding = _access_finding(path, access, positions, catalogue, first_writes, read_variables)
        yield access, finding
    for mention in analysis.mentions:
        yield mention, _mention_finding(path, mention, positions, catalogue)


def span_of(node: cst.CSTNode, positions: Mapping[cst.CSTNode, CodeRange]) -> Span:
    """A node's 1-based region, end column exclusive (SARIF's convention)."""
    code_range = positions[node]
    return Span(
        line=code_range.start.line,
        column=code_range.start.column + 1,
        end_line=code_range.end.line,
        end_column=code_range.end.column + 1,
    )


def _first_process_writes(
    accesses: tuple[EnvAccess, ...], positions: Mapping[cst.CSTNode, CodeRange]
) -> dict[str, tuple[int, EnvAccess]]:
    firsts: dict[str, tuple[int, EnvAccess]] = {}
    for access in accesses:
        if access.kind == "write" and access.target == "process":
            line = positions[access.node].start.line
            if access.variable not in firsts or line < firsts[access.variable][0]:
                firsts[access.variable] = (line, access)
    return firsts


def _access_finding(
    path: str,
    access: EnvAccess,
    positions: Mapping[cst.CSTNode, CodeRange],
    catalogue: Catalogue,
    first_writes: dict[str, tuple[int, EnvAccess]],
    read_variables: set[str],
) -> Finding:
    if access.kind == "write":
        code = catalogue.flags[access.variable].write_rule
    else:
        code = READ_RULE if access.kind == "read" else DELETE_RULE
    rule = catalogue.rule(code)
    subject = _subject(access, first_writes)
    value = access.value
    applicability = _worst(rule.fix, _context_applicability(access, read_variables))
    return Finding(
        code=code,
        path=path,
        span=span_of(access.node, positions),
        severity=rule.severity,
        message=rule.message.format(subject=subject),
        variable=access.variable,
        access=access.kind,
        value=value.literal if value else None,
        enabled=value.enabled if value else None,
        fix=Fix(applicability) if applicability else None,
    )


def _subject(access: EnvAccess, first_writes: dict[str, tuple[int, EnvAccess]]) -> str:
    via = f" through {access.via}()" if access.via else ""
    where = _TARGET_PHRASE[access.target]
    if access.kind == "write":
        assert access.value is not None
        default = ""
        if access.form == "setdefault":
            default = " only if unset (a launcher that sets it wins)"
        return f"{access.variable} set to {access.value.describe()}{default}{where}{via}"
    if access.kind == "delete":
        return f"{access.variable} deleted{where}{via}"
    subject = f"{access.variable} read{via}"
    if access.form == "in":
        subject += ' (a presence check: "0" counts as set)'
    if access.variable in first_writes:
        line, write = first_writes[access.variable]
        assert write.value is not None
        subject += (
            f"; line {line} sets it to {write.value.describe()}, and once that write is migrated"
            " this read sees it unset"
        )
    return subject


def _context_applicability(access: EnvAccess, read_variables: set[str]) -> Applicability | None:
    """How the place of a write limits its fix, on top of the rule's default."""
    if access.kind != "write":
        return None
    if access.target != "process":
        return "manual"  # the recipe belongs to the launched script, not this one
    if access.value is not None and access.value.may_be_off and access.variable in read_variables:
        return "manual"  # a "0" is a live signal for the reads of this file (presence checks)
    if access.via is not None or access.value is None or access.value.candidates is None:
        return "unsafe"
    return None


def _worst(*levels: Applicability | None) -> Applicability | None:
    known = [level for level in levels if level is not None]
    if not known:
        return None
    return max(known, key=APPLICABILITIES.index)


def _mention_finding(
    path: str,
    mention: FlagMention,
    positions: Mapping[cst.CSTNode, CodeRange],
    catalogue: Catalogue,
) -> Finding:
    rule = catalogue.rule(MENTION_RULE)
    value = mention.value
    literal = value.literal if value else None
    subject = _MENTION_PHRASE[mention.context].format(
        variable=mention.variable, value=literal or "..."
    )
    return Finding(
        code=rule.code,
        path=path,
        span=span_of(mention.node, positions),
        severity=rule.severity,
        message=rule.message.format(subject=subject),
        variable=mention.variable,
        access=None,
        value=literal,
        enabled=value.enabled if value else None,
        fix=Fix(rule.fix) if rule.fix else None,
    )
