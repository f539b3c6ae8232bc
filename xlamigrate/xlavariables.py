"""The torch-xla runtime variables that torch-xla 2.9 no longer reads or warns about
(`[[variable]]` in rules/xla_apis.toml, XM503): reported wherever a file of any kind sets one,
and never rewritten (what replaces each is code in the script, or a variable whose value
depends on the machine)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

from xlamigrate.apitable import api_table
from xlamigrate.catalogue import Catalogue
from xlamigrate.findings import manual_finding
from xlamigrate.flagvalue import FlagValue
from xlamigrate.results import Access, Finding, Span


class WriteLike(Protocol):
    @property
    def variable(self) -> str: ...
    @property
    def kind(self) -> Access: ...
    @property
    def value(self) -> FlagValue | None: ...


W = TypeVar("W", bound=WriteLike)


def variable_names(enabled: frozenset[str]) -> frozenset[str]:
    """The variables whose rule is enabled (none: nothing to look for)."""
    table = api_table()
    return frozenset(name for name, v in table.variables.items() if v.rule in enabled)


def variable_findings(
    path: str,
    accesses: Iterable[W],
    span: Callable[[W], Span],
    catalogue: Catalogue,
    enabled: frozenset[str],
) -> list[Finding]:
    """A manual finding for each write of one of the variables (reads and deletions are the
    code's own business)."""
    table = api_table()
    found = []
    for access in accesses:
        entry = table.variables.get(access.variable)
        if entry is None or access.kind != "write" or entry.rule not in enabled:
            continue
        subject = (
            f"{access.variable} set to {_shown(access.value)}: {entry.status}; {entry.instead}"
        )
        found.append(
            manual_finding(catalogue, entry.rule, path, span(access), subject, access.variable)
        )
    return found


def _shown(value: FlagValue | None) -> str:
    if value is None or value.candidates is None:
        return "a value not known statically"
    return " or ".join(json.dumps(candidate) for candidate in dict.fromkeys(value.candidates))
