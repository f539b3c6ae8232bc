"""Where the shipped data (`rules/*.toml`) lives and how one of its files is read: shared by the
catalogue and the recipes, so that neither has to import the other."""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

MODES_FILE = "modes.toml"  # read by xlamigrate.recipes (and the catalogue's `modes`)
OPTIMIZERS_FILE = "optimizers.toml"  # what the master-weights wrappers know of some optimizers
APIS_FILE = "xla_apis.toml"  # the torch-xla API migrations (read by xlamigrate.apitable)


class CatalogueError(Exception):
    """The shipped rule files are malformed: a packaging bug, reported as an internal error."""


def rules_directory() -> Traversable:
    """The `rules/` data: inside the installed package, or at the top of a source checkout."""
    packaged = resources.files("xlamigrate").joinpath("rules")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "rules"


def read_toml(entry: Traversable) -> dict[str, Any]:
    try:
        return tomllib.loads(entry.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise CatalogueError(f"cannot read rule file {entry.name}: {error}") from error


@functools.cache
def _optimizers_table(name: str) -> dict[str, Any]:
    table = read_toml(rules_directory().joinpath(OPTIMIZERS_FILE)).get(name, {})
    if not isinstance(table, dict):
        raise CatalogueError(f"{OPTIMIZERS_FILE}: [{name}] is not a table")
    return table


@functools.cache
def unwrappable_optimizers() -> Mapping[str, str]:
    """Optimizer class name -> why FP32ParamsCopy cannot wrap it (rules/optimizers.toml)."""
    table = _optimizers_table("unwrappable")
    if not all(isinstance(v, str) for v in table.values()):
        raise CatalogueError(f"{OPTIMIZERS_FILE}: [unwrappable] maps class names to reasons")
    return MappingProxyType(dict(table))


@functools.cache
def states_built_at_construction() -> Mapping[str, Mapping[str, str]]:
    """Optimizer class name -> {state key: the optimizer default that fills it} for optimizers
    that make per-parameter state when they are built (rules/optimizers.toml)."""
    table = _optimizers_table("state_built_at_construction")
    if not all(
        isinstance(states, dict) and all(isinstance(v, str) for v in states.values())
        for states in table.values()
    ):
        raise CatalogueError(
            f"{OPTIMIZERS_FILE}: [state_built_at_construction] maps class names to"
            " {state key = default name} tables"
        )
    return MappingProxyType({name: MappingProxyType(dict(s)) for name, s in table.items()})
