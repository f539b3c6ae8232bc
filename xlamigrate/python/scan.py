"""Scans one Python file's bytes: parse once, analyse once, filter by selection and noqa."""

from __future__ import annotations

import io
import tokenize
from collections.abc import Iterator

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from xlamigrate.catalogue import Catalogue
from xlamigrate.model import FileError, FileResult
from xlamigrate.python.detect import findings_for
from xlamigrate.python.envaccess import analyse_env_accesses
from xlamigrate.python.parse import parse_python
from xlamigrate.suppression import is_suppressed, parse_suppressions


def scan_python(
    path: str, data: bytes, catalogue: Catalogue, enabled: frozenset[str]
) -> FileResult:
    parsed = parse_python(path, data)
    if isinstance(parsed, FileError):
        return FileResult(path, errors=(parsed,))
    wrapper = MetadataWrapper(parsed, unsafe_skip_copy=True)
    analysis = analyse_env_accesses(wrapper, catalogue.flags)
    positions = wrapper.resolve(PositionProvider)
    found = [f for f in findings_for(path, analysis, positions, catalogue) if f.code in enabled]
    if found:
        table = parse_suppressions(_comments(parsed))
        found = [
            f for f in found if not is_suppressed(f.code, {f.span.line, f.span.end_line}, table)
        ]
    return FileResult(path, findings=tuple(sorted(found, key=lambda f: f.sort_key)))


def _comments(module: cst.Module) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment: tokenize knows a `#` inside a string is not one."""
    readline = io.StringIO(module.code).readline
    try:
        for token in tokenize.generate_tokens(readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.string
    except (tokenize.TokenError, SyntaxError):
        return
