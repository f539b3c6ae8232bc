"""The Python kind's entry points: scan and rewrite one file (`preload` names the modules a task
needs, imported before a pool forks its workers)."""

from __future__ import annotations

import importlib

from xlamigrate.catalogue import Catalogue
from xlamigrate.model import FileResult, RewriteOutcome
from xlamigrate.request import STANDALONE, FileContext, RewriteRequest

_TASK_MODULES = {
    "scan": "xlamigrate.kinds.python.scan",
    "rewrite": "xlamigrate.kinds.python.rewrite",
}


def preload(task: str) -> None:
    """Imports what `task` ("scan" or "rewrite") needs, before a pool forks its workers."""
    importlib.import_module(_TASK_MODULES[task])


def scan(
    path: str,
    data: bytes,
    catalogue: Catalogue,
    enabled: frozenset[str],
    context: FileContext | None = None,
) -> FileResult:
    from xlamigrate.kinds.python.scan import scan_python

    return scan_python(path, data, catalogue, enabled, context or STANDALONE)


def rewrite(
    path: str,
    data: bytes,
    catalogue: Catalogue,
    enabled: frozenset[str],
    request: RewriteRequest,
    context: FileContext = STANDALONE,
) -> RewriteOutcome:
    from xlamigrate.kinds.python.rewrite import rewrite_python

    return rewrite_python(path, data, catalogue, enabled, request, context)
