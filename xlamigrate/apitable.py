"""The torch-xla API table (`rules/xla_apis.toml`): the functions, modules and environment
variables that torch-xla deprecated or removed on the way to 2.9, what replaces each, and the
oldest release that has the replacement. Data only: the Python kind finds and fixes the uses."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from xlamigrate.rulesdata import APIS_FILE, CatalogueError, read_toml, rules_directory
from xlamigrate.textwords import has_word

REMOVED_XLA_API = "XM501"  # an API torch-xla 2.9 no longer has (its rule, in the table)
_CALLS = ("same", "parameters")


@dataclass(frozen=True, order=True)
class Version:
    """A torch-xla release, compared by its numbers ("2.5" < "2.10")."""

    numbers: tuple[int, ...]

    @classmethod
    def parse(cls, text: str) -> Version:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)*)\s*", text)
        if match is None:
            raise ValueError(f"not a torch-xla version: {text!r}")
        numbers = [int(part) for part in match[1].split(".")]
        while len(numbers) > 2 and numbers[-1] == 0:
            numbers.pop()
        return cls(tuple(numbers))

    def __str__(self) -> str:
        return ".".join(str(number) for number in self.numbers)


@dataclass(frozen=True)
class Parameter:
    """A parameter of a replaced function and what becomes of an argument for it."""

    name: str
    to: str | None  # the replacement's parameter; "-": the argument goes; None: reported
    since: Version | None = None  # the oldest release whose replacement takes it
    only: str | None = None  # the one value (code) the fix accepts
    # The values (code) torch-xla still takes for it, where it rejects others: a call passing
    # another value is the entry's finding, and only such a call (`nprocs`: "1", "None").
    accepted: tuple[str, ...] = ()


@dataclass(frozen=True)
class XlaApi:
    name: str  # qualified: "torch_xla.core.xla_model.xrt_world_size"
    rule: str
    deprecated: Version | None
    removed: Version | None
    replacement: str | None
    since: Version | None
    call: str  # "same" or "parameters"
    parameters: tuple[Parameter, ...] = ()
    prefix: tuple[str, ...] = ()
    defaults: tuple[tuple[str, str], ...] = ()
    keywords: bool = False  # every argument passed by keyword
    members: tuple[str, ...] = ()  # a module's names that `replacement` still has
    with_arguments_only: bool = False  # only a call passing arguments is a finding
    said: str = ""  # what became of it, where `deprecated` and `removed` do not say
    note: str = ""
    evidence: str = ""

    @property
    def is_module(self) -> bool:
        return bool(self.members)

    @property
    def keeps_name(self) -> bool:
        """Whether the function stays and only what a call passes changes (its replacement is
        itself: the fix edits the arguments, not the name nor the imports)."""
        return self.replacement == self.name

    @property
    def limited(self) -> tuple[Parameter, ...]:
        """The parameters whose values torch-xla limits (a call passing another is a use)."""
        return tuple(p for p in self.parameters if p.accepted)

    @property
    def member(self) -> str:
        """The last part of the name (`xrt_world_size`), what a prefilter looks for."""
        return self.name.rsplit(".", 1)[-1]

    @property
    def status(self) -> str:
        """`removed in torch-xla 2.7`, `deprecated since torch-xla 2.8`..."""
        if self.removed is not None:
            return f"removed in torch-xla {self.removed}"
        if self.deprecated is not None:
            return f"deprecated since torch-xla {self.deprecated}"
        return self.said or "superseded"


@dataclass(frozen=True)
class XlaVariable:
    name: str
    rule: str
    deprecated: Version | None
    removed: Version | None
    instead: str
    evidence: str = ""

    @property
    def status(self) -> str:
        if self.removed is not None:
            return f"not read since torch-xla {self.removed}"
        if self.deprecated is not None:
            return f"deprecated since torch-xla {self.deprecated}"
        return "superseded"


@dataclass(frozen=True)
class ApiTable:
    apis: Mapping[str, XlaApi]  # by qualified name
    variables: Mapping[str, XlaVariable]  # by name
    aliases: Mapping[str, str]  # a module -> the name a file imports it as, where it has none
    value_only: frozenset[str] = frozenset()  # calls that only give a value (a device)

    @property
    def last_names(self) -> frozenset[str]:
        """What a file that uses an entry holds: the entry's last name (a prefilter's words)."""
        return frozenset(api.member for api in self.apis.values())

    def may_be_used(self, data: bytes, escaped: bool = False) -> bool:
        """Whether a file's bytes may use an entry: they hold every part of its dotted name,
        each a whole word (a use resolves through imports, which spell every part: `import
        torch_xla.core.xla_model as xm` ... `xm.mark_step`). `escaped`: the bytes are a JSON
        document's (a notebook's), where a name may follow an escape (`\\nxm`), so the parts
        are only looked for."""
        return any(
            all(part in data for part in parts)
            and (escaped or all(has_word(data, part) for part in parts))
            for parts in self._parts
        )

    @functools.cached_property
    def _parts(self) -> tuple[tuple[bytes, ...], ...]:
        """Each entry's dotted name in parts, the last first (the rarest)."""
        return tuple(
            tuple(part.encode("ascii") for part in reversed(api.name.split(".")))
            for api in self.apis.values()
        )

    def rules(self) -> frozenset[str]:
        codes = {api.rule for api in self.apis.values()}
        return frozenset(codes | {variable.rule for variable in self.variables.values()})


@functools.cache
def api_table() -> ApiTable:
    data = read_toml(rules_directory().joinpath(APIS_FILE))
    try:
        apis = [_api(item) for item in data.get("api", [])]
        variables = [_variable(item) for item in data.get("variable", [])]
    except (KeyError, TypeError, ValueError) as error:
        raise CatalogueError(f"{APIS_FILE}: {type(error).__name__}: {error}") from error
    return ApiTable(
        MappingProxyType({api.name: api for api in apis}),
        MappingProxyType({variable.name: variable for variable in variables}),
        MappingProxyType(dict(data.get("aliases", {}))),
        frozenset(data.get("calls", {}).get("value_only", ())),
    )


def _version(text: str) -> Version | None:
    return Version.parse(text) if text else None


def _api(item: dict[str, Any]) -> XlaApi:
    call = item["call"]
    if call not in _CALLS:
        raise ValueError(f"{item['name']}: call {call!r} not in {_CALLS}")
    parameters = tuple(
        Parameter(
            name=p["name"],
            to=p.get("to"),
            since=_version(p.get("since", "")),
            only=p.get("only"),
            accepted=tuple(p.get("accepted", ())),
        )
        for p in item.get("parameters", [])
    )
    return XlaApi(
        name=item["name"],
        rule=item["rule"],
        deprecated=_version(item["deprecated"]),
        removed=_version(item["removed"]),
        replacement=item["replacement"] or None,
        since=_version(item["since"]),
        call=call,
        parameters=parameters,
        prefix=tuple(item.get("prefix", ())),
        defaults=tuple(sorted(item.get("defaults", {}).items())),
        keywords=bool(item.get("keywords", False)),
        members=tuple(item.get("members", ())),
        with_arguments_only=bool(item.get("with_arguments_only", False)),
        said=item.get("status", ""),
        note=item.get("note", ""),
        evidence=item.get("evidence", ""),
    )


def _variable(item: dict[str, Any]) -> XlaVariable:
    return XlaVariable(
        name=item["name"],
        rule=item["rule"],
        deprecated=_version(item["deprecated"]),
        removed=_version(item["removed"]),
        instead=item["instead"],
        evidence=item.get("evidence", ""),
    )
