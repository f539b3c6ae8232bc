"""Jupyter notebooks, cell by cell: the kernel's cells through the Python engine as one module,
cell magics read as data (a `%%writefile`'s Python file, `%%bash`), shell lines and cells
through the shell engine; findings by cell and line."""

from xlamigrate.kinds.notebook.cells import rewrite_notebook as rewrite
from xlamigrate.kinds.notebook.cells import scan_notebook as scan

__all__ = ["rewrite", "scan"]
