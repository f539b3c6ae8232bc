"""Optimizers with master weights of their own (rules/master_weights.toml): the option that sets
their dtype, which a recipe that casts the model sets instead of wrapping them."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from xlamigrate.rulesdata import MASTER_WEIGHTS_FILE, read_toml, rules_directory


@dataclass(frozen=True)
class MasterWeightsOption:
    name: str  # the class, as a finding names it
    qualified: frozenset[str]
    option: str
    position: int | None  # among the positional arguments; None: by keyword only
    default: str
    since: str


@cache
def master_weight_options() -> tuple[MasterWeightsOption, ...]:
    data = read_toml(rules_directory().joinpath(MASTER_WEIGHTS_FILE))
    return tuple(
        MasterWeightsOption(
            name=row["name"],
            qualified=frozenset(row["qualified"]),
            option=row["option"],
            position=int(row["position"]),
            default=row["default"],
            since=row["since"],
        )
        for row in data.get("optimizer", [])
    )


def master_weights_option(qualified_names: set[str]) -> MasterWeightsOption | None:
    """The entry of the class a call names by any of these qualified names, if one."""
    for entry in master_weight_options():
        if entry.qualified & qualified_names:
            return entry
    return None
