"""Where the shipped data (`rules/*.toml`) lives and how one of its files is read: shared by the
catalogue and the recipes, so that neither has to import the other."""

from __future__ import annotations

import marshal
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.abc import Traversable


# The data files, each read by one module (named here, so the catalogue can tell them from
# the rule files without importing their readers).
FLAGS_FILE = "flags.toml"  # read by xlamigrate.catalogue
MODES_FILE = "modes.toml"  # read by xlamigrate.recipes (and the catalogue's `modes`)
APIS_FILE = "xla_apis.toml"  # the torch-xla API migrations (read by xlamigrate.apitable)
LAUNCHERS_FILE = "launchers.toml"  # read by xlamigrate.kinds.launch
PLATFORMS_FILE = "platforms.toml"  # read by xlamigrate.project.platform
NXDT_FILE = "nxdt.toml"  # read by xlamigrate.nxdttable
FRAMEWORKS_FILE = "frameworks.toml"  # read by xlamigrate.frameworktable
LAUNCH_APIS_FILE = "launch_apis.toml"  # read by xlamigrate.launchtable
MASTER_WEIGHTS_FILE = "master_weights.toml"  # read by xlamigrate.masterweights
MODEL_OWNERS_FILE = "model_owners.toml"  # read by xlamigrate.modelowners
OPTIMIZER_FACTORIES_FILE = "optimizer_factories.toml"  # read by xlamigrate.optimizerfactories
RELEASES_FILE = "releases.toml"  # read by xlamigrate.releasetable


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
    """A data file's tables; where it lies on the file system, from its parsed copy where that
    is as fresh as the file (tomllib is pure Python: parsing the data every run cost a warm
    pre-commit run some 15 ms)."""
    path = entry if isinstance(entry, Path) else None
    kept = _parsed_copy(path) if path is not None else None
    if kept is not None:
        return kept
    tomllib = toml_module()
    try:
        source = entry.read_bytes()
        data: dict[str, Any] = tomllib.loads(source.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise CatalogueError(f"cannot read rule file {entry.name}: {error}") from error
    if path is not None:
        _keep_parsed_copy(path, source, data)
    return data


def toml_module() -> Any:
    """tomllib (tomli before Python 3.11), imported where a file is parsed: its import
    compiles a dozen regular expressions a run reading parsed copies does not need."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python 3.10 only
        import tomli as tomllib
    return tomllib


# A parsed copy is kept as Python keeps a module's bytecode: in `__pycache__` beside the file,
# named for the interpreter, valid while the file's size and mtime are those it was made from
# (and not written where PYTHONDONTWRITEBYTECODE says not to).
_PARSED_FORMAT = 1
_RACY_NS = 2_000_000_000  # (as the cache's: a file changed within 2 s may change unseen)


def _parsed_copy_path(path: Path) -> Path:
    return path.parent / "__pycache__" / f"{path.name}.{sys.implementation.cache_tag}.marshal"


def _parsed_copy(path: Path) -> dict[str, Any] | None:
    try:
        status = path.stat()
        kept = marshal.loads(_parsed_copy_path(path).read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if (
        isinstance(kept, tuple)
        and len(kept) == 4
        and kept[:3] == (_PARSED_FORMAT, status.st_size, status.st_mtime_ns)
        and isinstance(kept[3], dict)
    ):
        return kept[3]
    return None


def _keep_parsed_copy(path: Path, source: bytes, data: dict[str, Any]) -> None:
    if sys.dont_write_bytecode or sys.implementation.cache_tag is None:
        return
    copy = _parsed_copy_path(path)
    try:
        status = path.stat()
        if status.st_size != len(source) or status.st_mtime_ns > time.time_ns() - _RACY_NS:
            return  # (changed since it was read, or so lately that its mtime may not tell)
        dumped = marshal.dumps((_PARSED_FORMAT, status.st_size, status.st_mtime_ns, data))
        copy.parent.mkdir(exist_ok=True)
        partial = copy.with_name(f"{copy.name}.{os.getpid()}.tmp")
        partial.write_bytes(dumped)
        os.replace(partial, copy)
    except (OSError, ValueError):  # (read-only, or a value marshal cannot keep)
        return
