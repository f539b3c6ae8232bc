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


@cache
def model_owners() -> tuple[ModelOwner, ...]:
    data = read_toml(rules_directory().joinpath(MODEL_OWNERS_FILE))
    return tuple(
        ModelOwner(row["name"], frozenset(row["calls"]), row["where"])
        for row in data.get("owner", [])
    )


def model_owner(qualified_names: set[str]) -> ModelOwner | None:
    for owner in model_owners():
        if owner.calls & qualified_names:
            return owner
    return None
