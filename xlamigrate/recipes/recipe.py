"""A migration recipe (a mode of `xlamigrate rewrite`) as the facts the kinds and `verify` ask of
it, read from one `[[mode]]` of rules/modes.toml. Code asks a recipe what it does; it never
compares a mode's name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from xlamigrate.rulesdata import MODES_FILE, CatalogueError

_Value = TypeVar("_Value")
_ROUNDING = ("on", "off")
_AUTO_CAST = "none"  # the one --auto-cast value the kinds merge into NEURON_CC_FLAGS


@dataclass(frozen=True)
class EnvironmentEdits:
    """What a recipe sets in the environment on one platform: Neuron's runtime and compiler read
    these variables, TPU has none of them (its recipe is the cast, the master weights or autocast
    alone)."""

    platform: str
    # NEURON_RT_STOCHASTIC_ROUNDING_EN=1 where the flag was set (unless the file writes it)
    rounding_on: bool = False
    # An explicit rounding "1" goes, the master weights replacing it; a launched script sets
    # "0" where its launchers keep it on.
    rounding_off: bool = False
    # --auto-cast=none merged into NEURON_CC_FLAGS: autocast, not neuronx-cc, picks what is bf16
    auto_cast_none: bool = False


@dataclass(frozen=True)
class Recipe:
    """One mode: what it does to the model, the optimizer and the forward pass, and what it sets
    in the environment on each platform."""

    name: str
    summary: str
    param_dtype: str  # the parameters' dtype in a run of the rewritten script (verify checks it)
    fp32_masters: bool  # the optimizer is wrapped in FP32ParamsCopy: float32 master weights
    casts_model: bool  # the model is cast to bf16 (with its inputs) before its optimizer is built
    autocast_forward: bool  # the forward pass runs under torch.autocast(dtype=torch.bfloat16)
    marker: str  # the recipe's letter in verify's loss plot
    environment: tuple[EnvironmentEdits, ...] = ()

    def environment_on(self, platform: str) -> EnvironmentEdits:
        """The recipe's environment edits on `platform` (none on a platform the TOML omits)."""
        for edits in self.environment:
            if edits.platform == platform:
                return edits
        return EnvironmentEdits(platform)

    @property
    def adds_auto_cast_none(self) -> bool:
        """Whether some platform's edits put --auto-cast=none into NEURON_CC_FLAGS (which a legacy
        flag left set must not meet: neuronx-cc rejects the pair)."""
        return any(edits.auto_cast_none for edits in self.environment)


def recipe_from_table(table: Mapping[str, Any]) -> Recipe:
    """One `[[mode]]` table as a Recipe; a missing, mistyped or unknown key is a CatalogueError."""
    name = table.get("name")
    if not isinstance(name, str):
        raise CatalogueError(f"{MODES_FILE}: a [[mode]] without a name")
    known = {"name", "summary", "param_dtype", "fp32_masters", "casts_model",
             "autocast_forward", "marker", "environment"}  # fmt: skip
    _no_unknown_keys(name, "", table, known)
    environment = table.get("environment", {})
    if not isinstance(environment, dict):
        raise CatalogueError(f"{MODES_FILE}: mode {name}: environment is not a table")
    return Recipe(
        name=name,
        summary=_typed(name, table, "summary", str),
        param_dtype=_typed(name, table, "param_dtype", str),
        fp32_masters=_typed(name, table, "fp32_masters", bool),
        casts_model=_typed(name, table, "casts_model", bool),
        autocast_forward=_typed(name, table, "autocast_forward", bool),
        marker=_typed(name, table, "marker", str),
        environment=tuple(
            _environment_edits(name, platform, edits) for platform, edits in environment.items()
        ),
    )


def _environment_edits(name: str, platform: str, table: Any) -> EnvironmentEdits:
    if not isinstance(table, dict):
        raise CatalogueError(f"{MODES_FILE}: mode {name}: environment.{platform} is not a table")
    _no_unknown_keys(name, f"environment.{platform}.", table, {"stochastic_rounding", "auto_cast"})
    rounding = table.get("stochastic_rounding")
    if rounding is not None and rounding not in _ROUNDING:
        raise CatalogueError(
            f"{MODES_FILE}: mode {name}: stochastic_rounding {rounding!r} is not one of"
            f" {', '.join(map(repr, _ROUNDING))}"
        )
    auto_cast = table.get("auto_cast")
    if auto_cast is not None and auto_cast != _AUTO_CAST:
        raise CatalogueError(
            f"{MODES_FILE}: mode {name}: auto_cast {auto_cast!r}: only {_AUTO_CAST!r} is merged"
        )
    return EnvironmentEdits(
        platform,
        rounding_on=rounding == "on",
        rounding_off=rounding == "off",
        auto_cast_none=auto_cast is not None,
    )


def _typed(name: str, table: Mapping[str, Any], key: str, kind: type[_Value]) -> _Value:
    value = table.get(key)
    if not isinstance(value, kind):
        raise CatalogueError(f"{MODES_FILE}: mode {name}: {key} must be a {kind.__name__}")
    return value


def _no_unknown_keys(name: str, prefix: str, table: Mapping[str, Any], known: set[str]) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise CatalogueError(f"{MODES_FILE}: mode {name}: unknown key {prefix}{unknown[0]}")
