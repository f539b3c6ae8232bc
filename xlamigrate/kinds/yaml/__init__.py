"""Yaml files: see `analysis.py`; findings and rewrites come from the shared text model. An NxDT
config's findings and fix depend on the mode (its type is the recipe), so scan and rewrite
analyse the file for theirs (`nxdt.py`)."""

from __future__ import annotations

from functools import partial

from xlamigrate.kinds import textkind
from xlamigrate.kinds.textaccess import TextAnalysis
from xlamigrate.kinds.yaml.analysis import analyse, render
from xlamigrate.nxdttable import nxdt_table
from xlamigrate.recipes import DEFAULT_MODE
from xlamigrate.request import FileContext, FileTask, RewriteRequest
from xlamigrate.results import FileResult, RewriteOutcome

KIND = textkind.TextKind(analyse, render)
analyse_file = KIND.analyse_file


def _kind(mode: str, context: FileContext | None) -> textkind.TextKind:
    """The kind worded for `mode`, and for the NxDT release the project pins."""
    floor = nxdt_table().floor(context.frameworks) if context is not None else None
    return textkind.TextKind(partial(analyse, mode=mode, nxdt_floor=floor), render)


def scan(task: FileTask, analysis: TextAnalysis | None = None) -> FileResult:
    context = task.context
    mode = context.mode if context is not None else DEFAULT_MODE
    if analysis is not None and any(a.form.startswith("nxdt-") for a in analysis.accesses):
        analysis = None  # (the project's analysis words an NxDT config for no mode in particular)
    return _kind(mode, context).scan(task, analysis)


def rewrite(task: FileTask, request: RewriteRequest) -> RewriteOutcome:
    return _kind(request.mode, task.decided).rewrite(task, request)
