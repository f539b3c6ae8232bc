"""Python: libcst parsing, the env-access model, detection and the recipe rewrites."""

from __future__ import annotations

from xlamigrate.catalogue import Catalogue
from xlamigrate.kinds.python.rewrite import rewrite_python
from xlamigrate.kinds.python.scan import scan_python
from xlamigrate.model import FileResult, RewriteOutcome
from xlamigrate.nesting import nesting_error


def scan(path: str, data: bytes, catalogue: Catalogue, enabled: frozenset[str]) -> FileResult:
    too_deep = nesting_error(path, data)
    if too_deep is not None:
        return FileResult(path, errors=(too_deep,))
    return scan_python(path, data, catalogue, enabled)


def rewrite(
    path: str,
    data: bytes,
    catalogue: Catalogue,
    enabled: frozenset[str],
    mode: str,
    unsafe_fixes: bool = False,
) -> RewriteOutcome:
    too_deep = nesting_error(path, data)
    if too_deep is not None:
        return RewriteOutcome(path, data, None, errors=(too_deep,))
    return rewrite_python(path, data, catalogue, enabled, mode, unsafe_fixes)
