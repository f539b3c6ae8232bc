"""`xlamigrate scan --statistics`: how many findings of each rule, as ruff prints them."""

from __future__ import annotations

import json
from collections import Counter

from xlamigrate.catalogue import Catalogue
from xlamigrate.model import ScanReport


def render_statistics(report: ScanReport, catalogue: Catalogue, as_json: bool) -> str:
    counts = Counter(f.code for f in report.findings) + Counter(e.code for e in report.errors)
    rows = []
    for code, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        rule = catalogue.rules.get(code)
        rows.append(
            {
                "code": code,
                "name": rule.name if rule else "",
                "count": count,
                "fixable": bool(rule and rule.fix in ("safe", "unsafe")),
            }
        )
    if as_json:
        return json.dumps(rows, indent=2) + "\n"
    width = max((len(str(row["count"])) for row in rows), default=1)
    lines = []
    for row in rows:
        fixable = "*" if row["fixable"] else " "
        lines.append(f"{row['count']:>{width}}\t{row['code']}\t[{fixable}] {row['name']}\n")
    return "".join(lines)
