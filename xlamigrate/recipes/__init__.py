"""The migration recipes `xlamigrate rewrite --mode` applies, one module each, listed in
rules/modes.toml's order. Adding a mode is one `[[mode]]` in that file and one module here.

Nothing here imports a parser or torch: the CLI lists the modes from it before any file is read.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from xlamigrate.recipes import autocast, fp32_copy, full_bf16
from xlamigrate.recipes.recipe import EnvironmentEdits, Recipe
from xlamigrate.recipes.table import default_mode, mode_names
from xlamigrate.rulesdata import MODES_FILE, CatalogueError

__all__ = [
    "DEFAULT_MODE",
    "MODES",
    "RECIPES",
    "EnvironmentEdits",
    "Recipe",
    "UnknownModeError",
    "recipe_of",
]


class UnknownModeError(ValueError):
    """A mode name that no recipe has (the CLI and the configuration check names first)."""


def _in_file_order(recipes: tuple[Recipe, ...]) -> Mapping[str, Recipe]:
    """The recipes by name in modes.toml's order; a mode without a module (or the reverse) is a
    packaging bug."""
    by_name = {recipe.name: recipe for recipe in recipes}
    names = mode_names()
    if set(names) != set(by_name) or len(names) != len(by_name):
        raise CatalogueError(
            f"{MODES_FILE} names the modes {', '.join(names)}; xlamigrate/recipes/ has"
            f" {', '.join(by_name)}"
        )
    return MappingProxyType({name: by_name[name] for name in names})


RECIPES: Mapping[str, Recipe] = _in_file_order(
    (full_bf16.RECIPE, fp32_copy.RECIPE, autocast.RECIPE)
)
MODES: tuple[str, ...] = tuple(RECIPES)
DEFAULT_MODE: str = default_mode()


def recipe_of(name: str) -> Recipe:
    """The recipe of a mode's name; an unknown name is an UnknownModeError listing the modes."""
    try:
        return RECIPES[name]
    except KeyError:
        raise UnknownModeError(f"unknown mode {name!r}: not one of {', '.join(RECIPES)}") from None
