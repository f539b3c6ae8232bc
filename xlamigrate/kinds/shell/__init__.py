"""Shell files (launchers, SLURM jobs) through the one shell engine (`analysis.py`); findings
and rewrites come from the shared text model."""

from __future__ import annotations

from xlamigrate.kinds import textkind
from xlamigrate.kinds.shell.analysis import analyse
from xlamigrate.kinds.shell.render import render

KIND = textkind.TextKind(analyse, render)
scan, rewrite, analyse_file = KIND.scan, KIND.rewrite, KIND.analyse_file
