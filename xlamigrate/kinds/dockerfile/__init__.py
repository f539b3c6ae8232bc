"""Dockerfile files: see `analysis.py`; findings and rewrites come from the shared text model."""

from __future__ import annotations

from xlamigrate.kinds import textkind
from xlamigrate.kinds.dockerfile.analysis import analyse, render

KIND = textkind.TextKind(analyse, render)
scan, rewrite, analyse_file = KIND.scan, KIND.rewrite, KIND.analyse_file
