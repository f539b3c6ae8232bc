"""Turns resolved env accesses and flag mentions of one Python file into findings."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from xlamigrate.catalogue import Catalogue
from xlamigrate.findings import LEGACY_FLAG_NAMED, access_findings
from xlamigrate.kinds.python.envaccess import EnvAccess, EnvAccessAnalysis, FlagMention
from xlamigrate.results import Finding, Span

_MENTION_PHRASE = {
    "string": "{variable} named in a string",
    "keyword": "{variable} passed as a keyword argument",
    "shell-assignment": "{variable}={value} in a shell command string",
}


def classified(
    path: str,
    analysis: EnvAccessAnalysis,
    span: Callable[[Any], Span],
    catalogue: Catalogue,
) -> Iterator[tuple[EnvAccess | FlagMention, Finding]]:
    """Each access or mention of a legacy flag with its finding (the rewriter needs both);
    `span` says where a node of the analysis is."""
    yield from access_findings(path, analysis.accesses, lambda access: span(access.node), catalogue)
    for mention in analysis.mentions:
        yield mention, _mention_finding(path, mention, span(mention.node), catalogue)


def _mention_finding(path: str, mention: FlagMention, span: Span, catalogue: Catalogue) -> Finding:
    rule = catalogue.rule(LEGACY_FLAG_NAMED)
    value = mention.value
    literal = value.literal if value else None
    subject = _MENTION_PHRASE[mention.context].format(
        variable=mention.variable, value=literal or "..."
    )
    return rule.finding(
        path,
        span,
        subject,
        rule.fix,
        variable=mention.variable,
        access=None,
        value=literal,
        enabled=value.enabled if value else None,
    )
