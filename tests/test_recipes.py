"""The recipes as objects: one per mode of rules/modes.toml, each saying what it does (the model's
cast, the master weights, autocast, the environment edits per platform), which the kinds ask
instead of comparing a mode's name."""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.test_packaging import imported_modules
from xlamigrate.catalogue import CatalogueError, load_catalogue
from xlamigrate.project.platform import PLATFORMS
from xlamigrate.recipes import (
    DEFAULT_MODE,
    MODES,
    RECIPES,
    Recipe,
    UnknownModeError,
    recipe_of,
)
from xlamigrate.recipes.recipe import recipe_from_table
from xlamigrate.request import RewriteRequest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MODES_TOML = tomllib.loads((ROOT / "rules" / "modes.toml").read_text("utf-8"))
PACKAGE = ROOT / "xlamigrate"


def test_the_registry_lists_the_modes_of_modes_toml_in_its_order() -> None:
    assert tuple(item["name"] for item in MODES_TOML["mode"]) == MODES
    assert list(RECIPES) == list(MODES) == ["full-bf16", "fp32-copy", "autocast"]
    assert all(RECIPES[name].name == name for name in MODES)


def test_the_default_mode_is_full_bf16_and_comes_from_modes_toml() -> None:
    assert DEFAULT_MODE == MODES_TOML["default"] == "full-bf16"


def test_the_catalogue_holds_the_same_recipes() -> None:
    assert dict(load_catalogue().modes) == dict(RECIPES)


@pytest.mark.parametrize(
    ("mode", "casts_model", "fp32_masters", "autocast_forward"),
    [
        ("full-bf16", True, False, False),
        ("fp32-copy", True, True, False),
        ("autocast", False, False, True),
    ],
)
def test_each_recipe_says_what_it_does_to_the_model_optimizer_and_forward_pass(
    mode: str, casts_model: bool, fp32_masters: bool, autocast_forward: bool
) -> None:
    recipe = recipe_of(mode)
    assert recipe.casts_model is casts_model
    assert recipe.fp32_masters is fp32_masters  # the optimizer wrapped in FP32ParamsCopy
    assert recipe.autocast_forward is autocast_forward


def test_full_bf16_on_neuron_sets_stochastic_rounding() -> None:
    neuron = recipe_of("full-bf16").environment_on("neuron")
    assert (neuron.rounding_on, neuron.rounding_off, neuron.auto_cast_none) == (True, False, False)


def test_fp32_copy_on_neuron_removes_an_explicit_rounding_one() -> None:
    neuron = recipe_of("fp32-copy").environment_on("neuron")
    assert (neuron.rounding_on, neuron.rounding_off, neuron.auto_cast_none) == (False, True, False)


def test_autocast_on_neuron_merges_auto_cast_none_into_neuron_cc_flags() -> None:
    recipe = recipe_of("autocast")
    neuron = recipe.environment_on("neuron")
    assert (neuron.rounding_on, neuron.rounding_off, neuron.auto_cast_none) == (False, False, True)
    assert recipe.adds_auto_cast_none
    assert not recipe_of("full-bf16").adds_auto_cast_none


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("platform", ["tpu", "a-platform-the-toml-omits"])
def test_no_recipe_edits_the_environment_off_neuron(mode: str, platform: str) -> None:
    edits = recipe_of(mode).environment_on(platform)
    assert edits.platform == platform
    assert not (edits.rounding_on or edits.rounding_off or edits.auto_cast_none)


def test_modes_toml_names_only_known_platforms() -> None:
    for item in MODES_TOML["mode"]:
        assert set(item.get("environment", {})) <= set(PLATFORMS), item["name"]


@pytest.mark.parametrize("recipe", RECIPES.values(), ids=MODES)
def test_a_recipe_that_casts_the_model_promises_bf16_parameters(recipe: Recipe) -> None:
    expected = "torch.bfloat16" if recipe.casts_model else "torch.float32"
    assert recipe.param_dtype == expected
    assert not (recipe.fp32_masters and not recipe.casts_model)  # masters of a bf16 model


def test_each_recipe_has_its_own_letter_in_verifys_plot() -> None:
    markers = [recipe.marker for recipe in RECIPES.values()]
    assert markers == ["F", "C", "A"]
    assert "O" not in markers  # the original run's


def test_an_unknown_mode_is_a_clear_error() -> None:
    with pytest.raises(UnknownModeError, match=r"unknown mode 'bf16': not one of full-bf16, fp32"):
        recipe_of("bf16")
    assert issubclass(UnknownModeError, ValueError)


def test_a_rewrite_request_names_a_known_recipe() -> None:
    assert RewriteRequest("fp32-copy").recipe is RECIPES["fp32-copy"]
    with pytest.raises(UnknownModeError):
        RewriteRequest("full_bf16")


def _table(**changes: Any) -> dict[str, Any]:
    table: dict[str, Any] = {
        "name": "m",
        "summary": "s",
        "param_dtype": "torch.bfloat16",
        "fp32_masters": False,
        "casts_model": True,
        "autocast_forward": False,
        "marker": "M",
        "environment": {"neuron": {"stochastic_rounding": "on"}},
    }
    table.update(changes)
    return {key: value for key, value in table.items() if value is not None}


def test_a_well_formed_mode_table_is_a_recipe() -> None:
    recipe = recipe_from_table(_table())
    assert recipe.name == "m"
    assert recipe.environment_on("neuron").rounding_on


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"casts_model": None}, "casts_model must be a bool"),
        ({"fp32_masters": "yes"}, "fp32_masters must be a bool"),
        ({"colour": "red"}, "unknown key colour"),
        (
            {"environment": {"neuron": {"rounding": "on"}}},
            "unknown key environment.neuron.rounding",
        ),
        ({"environment": {"neuron": {"stochastic_rounding": "1"}}}, "stochastic_rounding '1'"),
        ({"environment": {"neuron": {"auto_cast": "all"}}}, "only 'none' is merged"),
        ({"environment": {"neuron": "on"}}, "environment.neuron is not a table"),
        ({"name": None}, "without a name"),
    ],
)
def test_a_malformed_mode_table_is_a_catalogue_error(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(CatalogueError, match=re.escape(message)):
        recipe_from_table(_table(**changes))


_COMPARISON = re.compile(
    r"""[=!]=\s*["'](?:full-bf16|fp32-copy|autocast)["']"""
    r"""|["'](?:full-bf16|fp32-copy|autocast)["']\s*[=!]="""
    r"""|\bmode\s+(?:not\s+)?in\s*[(\[{]"""
)


def test_no_code_compares_a_mode_name() -> None:
    offending = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if _COMPARISON.search(line)
    ]
    assert offending == []


def test_only_its_own_module_names_a_bf16_mode() -> None:
    """The names are data (rules/modes.toml); each recipe module names its own, nothing else."""
    named = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if re.search(r"""["'](?:full-bf16|fp32-copy)["']""", path.read_text("utf-8"))
    }
    assert named == {"recipes/full_bf16.py", "recipes/fp32_copy.py"}


def test_the_cli_lists_the_registrys_modes() -> None:
    from xlamigrate.cli import command_parser

    def mode_choices(command: str) -> object:
        (mode,) = [a for a in command_parser(command)._actions if "--mode" in a.option_strings]
        return mode.choices

    assert mode_choices("rewrite") == MODES
    assert mode_choices("verify") == (*MODES, "all")


def test_the_recipes_import_no_parser_and_no_torch() -> None:
    modules = imported_modules("import xlamigrate.recipes")
    assert "xlamigrate" in modules  # the probe itself works
    assert not modules & {"libcst", "torch", "torch_xla", "rich", "tree_sitter"}
