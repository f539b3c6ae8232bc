"""Jupyter notebooks: code cells through the Python engine, shell lines and cells through the
shell engine; findings by cell and line."""

from xlamigrate.kinds.notebook.cells import rewrite_notebook as rewrite
from xlamigrate.kinds.notebook.cells import scan_notebook as scan

__all__ = ["rewrite", "scan"]
