"""The Python kind's entry points: scan and rewrite one file (`preload` names the modules a task
needs, imported before a pool forks its workers)."""

from __future__ import annotations

import importlib

from xlamigrate.catalogue import Catalogue
from xlamigrate.kinds.textaccess import TextAnalysis
from xlamigrate.request import FileTask, RewriteRequest
from xlamigrate.results import FileResult, RewriteOutcome

_TASK_MODULES = {
    "scan": "xlamigrate.kinds.python.scan",
    "rewrite": "xlamigrate.kinds.python.rewrite",
}


def preload(task: str) -> None:
    """Imports what `task` ("scan" or "rewrite") needs, before a pool forks its workers."""
    importlib.import_module(_TASK_MODULES[task])


def analyse_file(path: str, data: bytes, catalogue: Catalogue) -> TextAnalysis | None:
    """The file as one of the project's launchers: the legacy flags it writes into a launch
    API's environment (a SageMaker estimator, Ray's runtime_env...), see launchapis.py; the
    analysis is imported only for a file that may hold one."""
    from xlamigrate.launchtable import launch_table

    if not launch_table().may_launch(data):
        return TextAnalysis()
    from xlamigrate.kinds.python.launchapis import analyse_source

    return analyse_source(path, data)


def scan(
    task: FileTask,
    analysis: TextAnalysis | None = None,  # (its launches: read again with the file)
) -> FileResult:
    from xlamigrate.kinds.python.scan import scan_python

    return scan_python(task)


def rewrite(task: FileTask, request: RewriteRequest) -> RewriteOutcome:
    from xlamigrate.kinds.python.rewrite import rewrite_python

    return rewrite_python(task, request)
