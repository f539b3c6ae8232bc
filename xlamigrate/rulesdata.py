"""Where the shipped data (`rules/*.toml`) lives and how one of its files is read: shared by the
catalogue and the recipes, so that neither has to import the other."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.abc import Traversable

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

MODES_FILE = "modes.toml"  # read by xlamigrate.recipes (and the catalogue's `modes`)
APIS_FILE = "xla_apis.toml"  # the torch-xla API migrations (read by xlamigrate.apitable)


class CatalogueError(Exception):
    """The shipped rule files are malformed: a packaging bug, reported as an internal error."""


def rules_directory() -> Traversable:
    """The `rules/` data: inside the installed package, or at the top of a source checkout
    (importlib.resources, costly to import, only for a package not on the file system)."""
    package = Path(__file__).resolve().parent
    for folder in (package / "rules", package.parent / "rules"):
        if folder.is_dir():
            return folder
    from importlib import resources  # (a zipped package)

    return resources.files("xlamigrate").joinpath("rules")


def read_toml(entry: Traversable) -> dict[str, Any]:
    try:
        return tomllib.loads(entry.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise CatalogueError(f"cannot read rule file {entry.name}: {error}") from error
