"""neuronx-distributed-training (NxDT) configs: a YAML document whose `precision.type` NxDT's
training_orchestrator.py turns into the legacy flags. Its types are the recipes under other
names, so the migration is the config's type, never a Python edit: `type: manual` with a flag
key on becomes the mode's type where that type sets no flag itself (rules/nxdt.toml), and a
type that sets one is reported (XM105) where it is written."""

from __future__ import annotations

from dataclasses import dataclass

from xlamigrate.apitable import Version
from xlamigrate.flagvalue import FlagValue, torch_xla_enabled
from xlamigrate.kinds.textaccess import TextAccess, TextEdit
from xlamigrate.kinds.yaml.nodes import Node, fields, is_null, is_string, text
from xlamigrate.kinds.yaml.nodetext import Positions
from xlamigrate.nxdttable import NxdtTable, NxdtType, nxdt_table

FRAMEWORK_CONFIG_SETS_LEGACY_FLAG = "XM105"
_PRECISION = "precision"
_TYPE = "type"
_MANUAL = "manual"
_ROUNDING = "NEURON_RT_STOCHASTIC_ROUNDING_EN"


@dataclass(frozen=True)
class NxdtConfig:
    """A document recognised as an NxDT config: its `precision` mapping and `type` scalar."""

    precision: Node
    type_node: Node
    type: NxdtType


def config_of(root: Node) -> NxdtConfig | None:
    """The NxDT config `root` is: a mapping with `precision.type` one of NxDT's types and at
    least one other key the orchestrator reads (`trainer`, `exp_manager`...). A `precision:` of
    another tool (Lightning's is a string, NeMo's sits under `trainer`) is not one."""
    if root.id != "mapping":
        return None
    table = nxdt_table()
    top = fields(root)
    precision = top.get(_PRECISION)
    if precision is None or precision.id != "mapping" or not table.top_level_keys & set(top):
        return None
    type_node = fields(precision).get(_TYPE)
    if type_node is None or not is_string(type_node):
        return None
    found = table.types.get(text(type_node))
    return None if found is None else NxdtConfig(precision, type_node, found)


def accesses(
    config: NxdtConfig,
    positions: Positions,
    names: frozenset[str],
    mode: str,
    floor: Version | None = None,
) -> list[TextAccess]:
    """The legacy flags the config makes NxDT set, as writes worded and fixed for `mode`
    (`floor`: the oldest NxDT the project pins, where known)."""
    table = nxdt_table()
    if config.type.name == _MANUAL:
        return _manual_keys(config, positions, names, _Target.of(table, mode, floor))
    span = positions.span(config.type_node)
    return [
        TextAccess(
            variable=flag,
            kind="write",
            form="nxdt-type",
            value=FlagValue(("1",)),
            start=span[0],
            end=span[1],
            note=_sets_note(table, config.type, flag, floor),
            applicability="manual",
            rule=FRAMEWORK_CONFIG_SETS_LEGACY_FLAG,
        )
        for flag in config.type.flags_on
        if flag in names
    ]


@dataclass(frozen=True)
class _Target:
    """The NxDT type a `manual` config becomes in a mode, or why it cannot."""

    type: NxdtType | None
    why_not: str  # "" where `type` sets no flag and the project's NxDT has it

    @classmethod
    def of(cls, table: NxdtTable, mode: str, floor: Version | None) -> _Target:
        name = table.mode_types.get(mode)
        if name is None:
            return cls(None, f"the mode {mode} has no NxDT precision.type")
        target = table.types[name]
        if target.flags_on:
            flags = " and ".join(f"{flag}=1" for flag in target.flags_on)
            return cls(
                target,
                f"{mode}'s NxDT type, {name}, sets {flags} itself in"
                f" {table.span(target.since, target.until)}, so no config edit takes the flag out"
                f" in this mode; {_autocast_hint(table)}",
            )
        if floor is not None and floor < target.since:
            return cls(
                target,
                f"precision.type {name} came in {table.named(target.since)} and this project"
                f" pins NxDT {floor}: upgrade NxDT, then rewrite again",
            )
        return cls(target, "")


def _manual_keys(
    config: NxdtConfig, positions: Positions, names: frozenset[str], target: _Target
) -> list[TextAccess]:
    """`type: manual` passes each flag key's value on as the flag: each key is a write. Where
    one turns a flag on and the mode's type sets none, every key's fix is that type."""
    table = nxdt_table()
    keys = [
        (name, value, table.manual_keys[str(name.value)])
        for name, value in config.precision.value
        if name.id == "scalar" and str(name.value) in table.manual_keys and value.id == "scalar"
    ]
    keys = [(name, value, flag) for name, value, flag in keys if flag in names]
    values = [FlagValue.unknown() if is_null(v) else FlagValue((text(v),)) for _, v, _ in keys]
    if all(value.enabled is False for value in values):
        return []  # fp32 through manual: NxDT passes "0" on, which torch-xla reads as off
    turns_on = any(value.enabled is True for value in values)
    edit = None
    if turns_on and target.type is not None and not target.why_not:
        start, end = positions.span(config.type_node)
        quote = config.type_node.style if config.type_node.style in ("'", '"') else ""
        edit = TextEdit(start, end, f"{quote}{target.type.name}{quote}")
    found = []
    for (name, _, flag), value in zip(keys, values, strict=True):
        start, end = positions.span(name)
        note = f" by {table.framework} from this key under precision.type manual"
        if edit is not None:
            assert target.type is not None
            note += (
                f"; the rewrite sets precision.type to {target.type.name} (NxDT"
                f" {_release_name(table, target.type.since)} and later), which sets no legacy flag,"
                " and NxDT ignores this key then"
            )
        elif turns_on:
            note += f"; {target.why_not}"
        found.append(
            TextAccess(
                variable=flag,
                kind="write",
                form="nxdt-manual",
                value=value,
                start=start,
                end=end,
                removal=edit,
                note=note,
                applicability=None if edit is not None else "manual",
            )
        )
    return found


def _sets_note(table: NxdtTable, type_: NxdtType, flag: str, floor: Version | None) -> str:
    rounding = torch_xla_enabled(type_.sets.get(_ROUNDING, "0"))
    also = f"; it sets {_ROUNDING}=1 too" if rounding else ""
    newer = ""
    if floor is not None and floor > type_.until:
        newer = (
            f"; this project pins NxDT {floor}, newer than the releases read: check whether it"
            " still does"
        )
    return (
        f" by {table.framework}'s {table.orchestrator} from precision.type {type_.name} in"
        f" {table.span(type_.since, type_.until)}, every release read{also}{newer};"
        f" {_autocast_hint(table)}"
    )


def _autocast_hint(table: NxdtTable) -> str:
    """The one type that is a recipe without a flag: autocast."""
    clean = [t for t in table.types.values() if not t.flags_on and t.name in _recipe_types(table)]
    if not clean:
        return "no precision.type gives bf16 without a legacy flag"
    first = clean[0]
    since = _release_name(table, first.since)
    return f"precision.type {first.name} (NxDT {since} and later) sets neither flag"


def _release_name(table: NxdtTable, version: Version) -> str:
    found = table.release(version)
    return found.name if found else str(version)


def _recipe_types(table: NxdtTable) -> set[str]:
    return set(table.mode_types.values())
