"""The neuronx-distributed-training table (`rules/nxdt.toml`): which legacy flags NxDT's
training_orchestrator.py sets from each `precision.type`, in which releases, and which type each
of xlamigrate's modes is. Data only: the YAML kind recognises the configs (kinds/yaml/nxdt.py)."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from xlamigrate.apitable import Version
from xlamigrate.flagvalue import RECIPE_FLAGS, torch_xla_enabled
from xlamigrate.frameworktable import Releases
from xlamigrate.rulesdata import NXDT_FILE, CatalogueError, read_toml, rules_directory


@dataclass(frozen=True)
class NxdtType:
    """One `precision.type` the orchestrator tests, and the variables it sets from it."""

    name: str
    sets: Mapping[str, str]
    since: Version
    until: Version

    @property
    def flags_on(self) -> tuple[str, ...]:
        """The legacy flags this type turns on."""
        return tuple(f for f in RECIPE_FLAGS if torch_xla_enabled(self.sets.get(f, "0")))


@dataclass(frozen=True)
class Release:
    name: str  # as NxDT numbers it ("1.6.0")
    version: Version
    sdk: str
    commit: str


@dataclass(frozen=True)
class NxdtTable:
    framework: str
    orchestrator: str
    orchestrator_functions: frozenset[str]
    newest_read: Version
    packages: frozenset[str]  # canonical distribution names (project/frameworkpins.py reads them)
    top_level_keys: frozenset[str]
    manual_keys: Mapping[str, str]  # config key -> the flag it is passed on as
    mode_types: Mapping[str, str]  # xlamigrate's mode -> its NxDT type
    releases: tuple[Release, ...]
    types: Mapping[str, NxdtType]

    def floor(self, pinned: Sequence[tuple[str, Releases]]) -> Version | None:
        """The oldest NxDT release the project's pins allow (None: no lower bound known)."""
        lows = [r.low for package, r in pinned if package in self.packages and r.low is not None]
        return min(lows) if lows else None

    def release(self, version: Version) -> Release | None:
        return next((r for r in self.releases if r.version == version), None)

    def span(self, since: Version, until: Version) -> str:
        """'NxDT 1.0.0-1.6.0 (Neuron SDK 2.20.0-2.26.0)', for messages."""
        first, last = self.release(since), self.release(until)
        if first is None or last is None:
            return f"NxDT {since}-{until}"
        return f"NxDT {first.name}-{last.name} (Neuron SDK {first.sdk}-{last.sdk})"

    def named(self, version: Version) -> str:
        """A release as NxDT numbers it, with its Neuron SDK: 'NxDT 1.1.0 (Neuron SDK 2.21.0)'."""
        found = self.release(version)
        return f"NxDT {found.name} (Neuron SDK {found.sdk})" if found else f"NxDT {version}"


@functools.cache
def nxdt_table() -> NxdtTable:
    data = read_toml(rules_directory().joinpath(NXDT_FILE))
    try:
        return _table(data)
    except (KeyError, TypeError, ValueError) as error:
        raise CatalogueError(f"{NXDT_FILE}: {error!r}") from error


def _table(data: dict[str, Any]) -> NxdtTable:
    manual = dict(data["manual_keys"])
    if not set(manual.values()) <= set(RECIPE_FLAGS):
        raise ValueError(f"manual_keys name a variable that is no legacy flag: {manual}")
    types = {
        item["name"]: NxdtType(
            item["name"],
            MappingProxyType(dict(item["sets"])),
            Version.parse(item["since"]),
            Version.parse(item["until"]),
        )
        for item in data["type"]
    }
    mode_types = {mode: str(name) for mode, name in data["mode_types"].items()}
    for name in mode_types.values():
        if name not in types:
            raise ValueError(f"mode_types names an unknown type {name!r}")
    return NxdtTable(
        framework=data["framework"],
        orchestrator=data["orchestrator"],
        orchestrator_functions=frozenset(data["orchestrator_functions"]),
        newest_read=Version.parse(data["newest_read"]),
        packages=frozenset(data["packages"]),
        top_level_keys=frozenset(data["top_level_keys"]),
        manual_keys=MappingProxyType(manual),
        mode_types=MappingProxyType(mode_types),
        releases=tuple(
            Release(r["version"], Version.parse(r["version"]), r["sdk"], r["commit"])
            for r in data["release"]
        ),
        types=MappingProxyType(types),
    )
