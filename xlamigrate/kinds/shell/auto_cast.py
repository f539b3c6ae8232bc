"""`--auto-cast=none` written into a shell value as it stands: quotes and expansions kept."""

from __future__ import annotations

import re

from xlamigrate.neuronflags import AUTO_CAST

# One `--auto-cast` option in the text of a shell value (not `--auto-cast-type`), with the blanks
# before it: `--auto-cast=all`, `--auto-cast none`.
_AUTO_CAST_OPTION = re.compile(
    r"[ \t]*(?<![\w-])--auto-cast(?:=[^\s\"']*|[ \t]+[A-Za-z]+)(?=[\s\"']|$)"
)
_NONE_LAST = re.compile(r"--auto-cast=none[\"']?$")


def auto_cast_none_edits(raw: str) -> tuple[tuple[int, int, str], ...]:
    """(start, end, replacement) edits of a shell value as written (quotes and expansions kept)
    that drop its literal `--auto-cast` options and put `--auto-cast=none` last: inside its
    closing quote, or as a quoted word of its own after an unquoted one. A blank always comes
    before it, so a `+=` append stays a word of its own. No edits: it is already so."""
    options = list(_AUTO_CAST_OPTION.finditer(raw))
    if options and _NONE_LAST.match(raw, options[-1].end() - len("--auto-cast=none")):
        return tuple((m.start(), m.end(), "") for m in options[:-1])
    edits = [(m.start(), m.end(), "") for m in options]
    option = f"{AUTO_CAST}=none"
    closed = raw.endswith("'") or (raw.endswith('"') and not raw.endswith('\\"'))
    if closed and len(raw) >= 2:
        edits.append((len(raw) - 1, len(raw) - 1, f" {option}"))
    else:
        edits.append((len(raw), len(raw), f'" {option}"'))
    return tuple(edits)
