"""How a shell assignment is spelled for a replacement: `NAME=VALUE` in the construct the
access was found in (an export, a command prefix, a statement of its own), escaped for every
host context the shell text sits in (a `bash -c '...'` string, a YAML scalar...)."""

from __future__ import annotations

import re

from xlamigrate.kinds.embedded import SHELL_SYNTAX, CannotRender, encode, escape_double

_BARE = re.compile(r"[A-Za-z0-9_./:=,+@%-]+")


def render(syntax: str, name: str, value: str, append: bool = False) -> str:
    """`NAME=VALUE` for an access's assignment range; a whole statement ("statement") also
    exports it, and `append` keeps what the environment already holds."""
    form, *encodings = syntax.removeprefix(SHELL_SYNTAX).split("|")
    if append:
        text = f'{name}="${{{name}:-}} {escape_double(value)}"'
    elif _BARE.fullmatch(value):
        text = f"{name}={value}"
    else:
        text = f'{name}="{escape_double(value)}"'
    if form == "statement":
        text = f"export {text}"
    encoded = encode(text, encodings)
    if encoded is None:
        raise CannotRender(f"{text!r} cannot be written here")
    return encoded
