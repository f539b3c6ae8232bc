"""Reads the shipped rules/modes.toml: the recipes' facts, their order, and the default mode."""

from __future__ import annotations

from functools import cache
from typing import Any

from xlamigrate.recipes.recipe import Recipe, recipe_from_table
from xlamigrate.rulesdata import MODES_FILE, CatalogueError, read_toml, rules_directory


@cache
def _modes_file() -> dict[str, Any]:
    return read_toml(rules_directory().joinpath(MODES_FILE))


def mode_names() -> tuple[str, ...]:
    """The modes, in the file's order (the order `--mode all` runs and the CLI lists them)."""
    return tuple(str(item.get("name")) for item in _modes_file().get("mode", []))


def default_mode() -> str:
    """The mode `rewrite` and `scan` use where neither --mode nor [tool.xlamigrate] says one."""
    default = _modes_file().get("default")
    if default not in mode_names():
        raise CatalogueError(f"{MODES_FILE}: default {default!r} names no [[mode]]")
    return str(default)


def shipped_recipe(name: str) -> Recipe:
    """The recipe of `[[mode]] name = ...` in the shipped file."""
    for item in _modes_file().get("mode", []):
        if item.get("name") == name:
            return recipe_from_table(item)
    raise CatalogueError(f"{MODES_FILE}: no [[mode]] named {name!r}")
