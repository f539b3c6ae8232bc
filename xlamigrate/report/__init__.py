"""Reporters: each turns a ScanReport into text for one output format."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module

from xlamigrate.catalogue import Catalogue
from xlamigrate.results import ScanReport

FORMATS = ("text", "concise", "json", "sarif", "github", "gitlab")

Renderer = Callable[[ScanReport, Catalogue], str]


def renderer(name: str) -> Renderer:
    """The render function of a format; each reporter module is imported only when used."""
    if name not in FORMATS:
        raise ValueError(f"unknown output format {name!r}; choose from {', '.join(FORMATS)}")
    module = import_module(f"xlamigrate.report.{name}_format")
    render: Renderer = module.render
    return render
