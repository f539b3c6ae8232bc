"""Frameworks that own the training step (rules/model_owners.toml): where a script's model is
theirs, a finding says where their recipe goes."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from xlamigrate.rulesdata import read_toml, rules_directory

MODEL_OWNERS_FILE = "model_owners.toml"


@dataclass(frozen=True)
class ModelOwner:
    name: str
    calls: frozenset[str]
    where: str
    module_bases: frozenset[str] = frozenset()
    step_methods: frozenset[str] = frozenset()


@cache
def model_owners() -> tuple[ModelOwner, ...]:
    data = read_toml(rules_directory().joinpath(MODEL_OWNERS_FILE))
    return tuple(
        ModelOwner(
            row["name"],
            frozenset(row["calls"]),
            row["where"],
            frozenset(row.get("module_bases", ())),
            frozenset(row.get("step_methods", ())),
        )
        for row in data.get("owner", [])
    )


def step_methods(base_names: set[str]) -> frozenset[str]:
    """The loss-returning methods of a class deriving from a module class of these names."""
    return frozenset(
        method
        for owner in model_owners()
        if owner.module_bases & base_names
        for method in owner.step_methods
    )


def model_owner(qualified_names: set[str]) -> ModelOwner | None:
    for owner in model_owners():
        if owner.calls & qualified_names:
            return owner
    return None
