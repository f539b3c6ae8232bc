"""Training frameworks' optimizer factories (rules/optimizer_factories.toml): where their
parameters argument is, and the framework's own knob for float32 master weights."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from xlamigrate.rulesdata import OPTIMIZER_FACTORIES_FILE, read_toml, rules_directory


@dataclass(frozen=True)
class Zero1Switch:
    """Where a factory builds ZeRO-1: `<config call>(<keyword>={<key>: True, ...})`."""

    config: frozenset[str]
    keyword: str
    key: str
    dtype_option: str  # passed on to the ZeRO-1 optimizer: its master shards' dtype


@dataclass(frozen=True)
class OptimizerFactory:
    name: str
    framework: str
    qualified: frozenset[str]
    position: int  # of the parameters argument
    keyword: str
    fp32_masters: str  # what fp32-copy asks of the framework instead of FP32ParamsCopy
    zero1: Zero1Switch | None
    models: frozenset[str]  # the framework's model builders, by qualified name
    train_steps: frozenset[str]  # their models' methods that run forward and backward


@cache
def optimizer_factories() -> tuple[OptimizerFactory, ...]:
    data = read_toml(rules_directory().joinpath(OPTIMIZER_FACTORIES_FILE))
    return tuple(
        OptimizerFactory(
            name=row["name"],
            framework=row["framework"],
            qualified=frozenset(row["qualified"]),
            position=int(row["parameters"]["position"]),
            keyword=row["parameters"]["keyword"],
            fp32_masters=row["fp32_masters"],
            zero1=_zero1(row.get("zero1")),
            models=frozenset(row.get("models", ())),
            train_steps=frozenset(row.get("train_steps", ())),
        )
        for row in data.get("factory", [])
    )


def _zero1(row: dict[str, Any] | None) -> Zero1Switch | None:
    if row is None:
        return None
    return Zero1Switch(frozenset(row["config"]), row["keyword"], row["key"], row["dtype_option"])


def model_builders() -> frozenset[str]:
    """Every framework model builder of the table, by qualified name."""
    return frozenset(name for factory in optimizer_factories() for name in factory.models)


def train_steps(builder: set[str]) -> frozenset[str]:
    """The forward-and-backward methods of a model built by one of these qualified names."""
    return frozenset(
        step
        for factory in optimizer_factories()
        if factory.models & builder
        for step in factory.train_steps
    )


def optimizer_factory(qualified_names: set[str]) -> OptimizerFactory | None:
    """The factory a call names by any of these qualified names, if one."""
    for factory in optimizer_factories():
        if factory.qualified & qualified_names:
            return factory
    return None
