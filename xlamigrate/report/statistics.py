"""`xlamigrate scan --statistics`: how many findings of each rule, as ruff prints them."""

from __future__ import annotations

import json
from collections import Counter

from xlamigrate.catalogue import Catalogue
from xlamigrate.results import ScanReport


def render_statistics(report: ScanReport, catalogue: Catalogue, as_json: bool) -> str:
    """One row per rule: its count and, as ruff says it, whether `rewrite` would fix some of
    its findings (`[*]`: a safe fix; an unsafe one needs --unsafe-fixes, a manual one none)."""
    counts = Counter(f.code for f in report.findings) + Counter(e.code for e in report.errors)
    fixable = Counter(
        f.code for f in report.findings if f.fix is not None and f.fix.applicability == "safe"
    )
    rows = []
    for code, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        rule = catalogue.rules.get(code)
        rows.append(
            {
                "code": code,
                "name": rule.name if rule else "",
                "count": count,
                "fixable": fixable[code] > 0,
                "fixable_count": fixable[code],
            }
        )
    if as_json:
        return json.dumps(rows, indent=2) + "\n"
    width = max((len(str(row["count"])) for row in rows), default=1)
    lines = []
    for row in rows:
        mark = "*" if row["fixable"] else " "
        lines.append(f"{row['count']:>{width}}\t{row['code']}\t[{mark}] {row['name']}\n")
    return "".join(lines)
