"""Frameworks that own the training step (rules/model_owners.toml): where a script's model is
theirs, a finding says where their recipe goes."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from xlamigrate.rulesdata import MODEL_OWNERS_FILE, read_toml, rules_directory


@dataclass(frozen=True)
class ModelOwner:
    name: str
    calls: frozenset[str]
    where: str
    module_bases: frozenset[str] = frozenset()
    step_methods: frozenset[str] = frozenset()
    model: tuple[int, str] | None = None  # where its trainer call takes the model
    autocast: str = ""  # what the autocast recipe asks of it
    fp32_masters: str = ""  # what fp32-copy asks of it


@cache
def model_owners() -> tuple[ModelOwner, ...]:
    data = read_toml(rules_directory().joinpath(MODEL_OWNERS_FILE))
    return tuple(
        ModelOwner(
            name=row["name"],
            calls=frozenset(row["calls"]),
            where=row["where"],
            module_bases=frozenset(row.get("module_bases", ())),
            step_methods=frozenset(row.get("step_methods", ())),
            model=(row["model"]["position"], row["model"]["keyword"]) if "model" in row else None,
            fp32_masters=row.get("fp32_masters", ""),
            autocast=row.get("autocast", ""),
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
