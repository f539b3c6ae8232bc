"""Findings from environment accesses of any file kind: the rule, the message, how it can be
fixed. Python, shell, Dockerfile, YAML and notebooks all describe their accesses this way."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Protocol, TypeVar

from xlamigrate.catalogue import Catalogue, Rule
from xlamigrate.flagvalue import FlagValue
from xlamigrate.results import (
    APPLICABILITIES,
    Access,
    Applicability,
    Finding,
    RewriteOutcome,
    ScanReport,
    Span,
    Target,
)

LEGACY_FLAG_READ = "XM201"
LEGACY_FLAG_DELETE = "XM202"
LEGACY_FLAG_NAMED = "XM301"
# The manual findings of a recipe step a Python script and a launcher both leave.
WRITE_NOT_REMOVABLE = "XM404"
LEGACY_FLAG_STAYS_WITH_AUTOCAST = "XM405"

_TARGET_PHRASE = {
    "process": "",
    "child": " in a child process's environment",
    "test": " in a test's patched environment",
}


class AccessLike(Protocol):
    """What a finding needs to know of an access, whatever file it is in."""

    @property
    def variable(self) -> str: ...
    @property
    def kind(self) -> Access: ...
    @property
    def target(self) -> Target: ...
    @property
    def form(self) -> str: ...
    @property
    def value(self) -> FlagValue | None: ...
    @property
    def via(self) -> str | None: ...


A = TypeVar("A", bound=AccessLike)


def access_findings(
    path: str, accesses: Sequence[A], span: Callable[[A], Span], catalogue: Catalogue
) -> Iterator[tuple[A, Finding]]:
    """Each access of a legacy flag with its finding (accesses of other variables are skipped)."""
    first_writes = _first_process_writes(accesses, span)
    read_variables = {a.variable for a in accesses if a.kind == "read"}
    for access in accesses:
        if access.variable not in catalogue.flags:
            continue  # a recipe variable tracked for the rewriter, not a finding
        yield (
            access,
            _access_finding(path, access, span(access), catalogue, first_writes, read_variables),
        )


def mention_finding(
    catalogue: Catalogue, path: str, span: Span, variable: str, where: str
) -> Finding:
    """A flag's name xlamigrate cannot follow (XM301): `where` says what holds it."""
    return manual_finding(
        catalogue, LEGACY_FLAG_NAMED, path, span, f"{variable} named {where}", variable=variable
    )


def manual_finding(
    catalogue: Catalogue,
    code: str,
    path: str,
    span: Span,
    subject: str,
    variable: str | None = None,
) -> Finding:
    """A step left to the user (XM4xx, XM301), worded by its rule."""
    return catalogue.rule(code).finding(path, span, subject, "manual", variable=variable)


def worst(*levels: Applicability | None) -> Applicability | None:
    known = [level for level in levels if level is not None]
    if not known:
        return None
    return max(known, key=APPLICABILITIES.index)


def _first_process_writes(
    accesses: Sequence[A], span: Callable[[A], Span]
) -> dict[str, tuple[int, AccessLike]]:
    firsts: dict[str, tuple[int, AccessLike]] = {}
    for access in accesses:
        if access.kind == "write" and access.target == "process":
            line = span(access).line
            if access.variable not in firsts or line < firsts[access.variable][0]:
                firsts[access.variable] = (line, access)
    return firsts


def _access_finding(
    path: str,
    access: AccessLike,
    span: Span,
    catalogue: Catalogue,
    first_writes: dict[str, tuple[int, AccessLike]],
    read_variables: set[str],
) -> Finding:
    if access.kind == "write":
        code = getattr(access, "rule", None) or catalogue.flags[access.variable].write_rule
    else:
        code = LEGACY_FLAG_READ if access.kind == "read" else LEGACY_FLAG_DELETE
    rule = catalogue.rule(code)
    subject = _subject(access, first_writes) + getattr(access, "note", "")
    launched = getattr(access, "launched", ())
    if launched and access.target != "process":  # a child's env: the project does not follow it
        subject += (
            f"; it starts {', '.join(launched)}: this launch is not followed yet, so put the"
            " recipe in that script by hand, then remove this write"
        )
    value = access.value
    applicability = worst(
        rule.fix,
        _context_applicability(access, read_variables),
        getattr(access, "applicability", None),
    )
    return rule.finding(
        path,
        span,
        subject,
        applicability,
        variable=access.variable,
        access=access.kind,
        value=value.literal if value else None,
        enabled=value.enabled if value else None,
    )


# What a read of a flag the file sets itself is told, until the rewrite resolves it.
UNSET_ONCE_MIGRATED = ", and once that write is migrated this read sees it unset"


def _subject(access: AccessLike, first_writes: dict[str, tuple[int, AccessLike]]) -> str:
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
        subject += f"; line {line} sets it to {write.value.describe()}{UNSET_ONCE_MIGRATED}"
    return subject


def _context_applicability(access: AccessLike, read_variables: set[str]) -> Applicability | None:
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


def with_note(message: str, note: str, instead: bool = False) -> str:
    """A rule's message with a note after its subject (the part before the first ': ' outside
    parentheses and quotes: `read (a presence check: "0" counts as set): ...`), or `instead`
    of what the rule says after it."""
    end = _subject_end(message)
    subject, rest = message[:end], message[end:]
    if instead or not rest:
        return f"{subject}; {note}"
    return f"{subject}; {note}{rest}"


def _subject_end(message: str) -> int:
    """Where the first ': ' outside brackets, quotes and backticks stands (the end if none)."""
    depth, quote = 0, ""
    for index, char in enumerate(message):
        if quote:
            quote = "" if char == quote else quote
        elif char in '"`':
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(depth - 1, 0)
        elif depth == 0 and message.startswith(": ", index):
            return index
    return len(message)


def worded(finding: Finding, rule: Rule | None) -> Finding:
    """`finding` with its message in the parts the text output shows. A message is composed
    as the rule's template says, `prefix{subject}: rule text`, and a subject as
    `head[; detail]` (with_note adds to the detail): the head is the short first line, the
    detail what this place needs (the help), the rule's text why (the note). A note that
    took the place of the rule's text (`with_note(instead=True)`) is help, not a note."""
    message = finding.message
    prefix, _, suffix = rule.message.partition("{subject}") if rule else ("", "", "")
    composed = message.startswith(prefix) and message.endswith(suffix)
    if composed and len(message) >= len(prefix) + len(suffix):
        subject = message[len(prefix) : len(message) - len(suffix)]
        note = suffix.removeprefix(":").strip() or None
    else:
        subject, note = message, None
    head, _, detail = subject.partition("; ")
    title = prefix + head if composed else head
    return replace(finding, title=title, help=detail or None, note=note)


def worded_all(findings: Iterable[Finding], catalogue: Catalogue) -> tuple[Finding, ...]:
    """Each finding in parts (see `worded`), its rule's template taken from `catalogue`."""
    return tuple(worded(finding, catalogue.rules.get(finding.code)) for finding in findings)


def worded_report(report: ScanReport, catalogue: Catalogue) -> ScanReport:
    return replace(report, findings=worded_all(report.findings, catalogue))


def worded_outcome(outcome: RewriteOutcome, catalogue: Catalogue) -> RewriteOutcome:
    return replace(
        outcome,
        fixed=worded_all(outcome.fixed, catalogue),
        remaining=worded_all(outcome.remaining, catalogue),
    )
