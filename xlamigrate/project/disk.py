"""The resolver's one seam to the filesystem (project/resolve.py), apart so that a run reusing
the project's decision can ask the disk the same questions without the resolver."""

from __future__ import annotations

import os
from pathlib import Path


class Disk:
    """What the resolver asks of the filesystem beyond the discovered files (a Dockerfile's
    text, whether a path COPY names is a file or a folder): one seam, so that a run can note
    what it asked (decidedcache.py)."""

    def read_text(self, path: str) -> str | None:
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def is_file(self, path: str) -> bool:
        return os.path.isfile(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)
