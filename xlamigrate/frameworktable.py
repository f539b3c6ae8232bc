"""The frameworks table (`rules/frameworks.toml`): the options of Lightning, accelerate and
optimum-neuron that make the framework set a legacy flag itself, on which platforms, and in
which of its releases. Data only: the Python kind finds the options (XM104); the project's pins
say which release runs."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from xlamigrate.apitable import Version
from xlamigrate.rulesdata import FRAMEWORKS_FILE, CatalogueError, read_toml, rules_directory
from xlamigrate.textwords import has_keyword_argument, has_word

FRAMEWORK_OPTION_SETS_LEGACY_FLAG = "XM104"  # the rule the table's options are reported under
_XLA = ("call", "keywords", "file")
Literal = str | int | float | bool


@dataclass(frozen=True)
class Releases:
    """The releases a pin allows (None: unbounded on that side)."""

    low: Version | None = None
    high: Version | None = None
    high_included: bool = False
    spelled: str = ""  # as the project wrote it: "lightning==2.4.0"

    @property
    def bounded(self) -> bool:
        """Whether it says anything of the release (a bare name, setup.py's own `name=`, does
        not)."""
        return self.low is not None or self.high is not None

    def overlaps(self, first: Version, stops: Version | None) -> bool:
        """Whether one allowed release is in [first, stops)."""
        below_high = (
            self.high is None or first < self.high or (self.high_included and first == self.high)
        )
        return below_high and (stops is None or self.low is None or self.low < stops)

    def within(self, first: Version, stops: Version | None) -> bool:
        """Whether every allowed release is in [first, stops)."""
        if self.low is None or self.low < first:
            return False
        if stops is None:
            return True
        return self.high is not None and (
            self.high < stops or (self.high == stops and not self.high_included)
        )


@dataclass(frozen=True)
class Framework:
    name: str
    packages: tuple[str, ...]  # canonical distribution names
    newest_read: str  # as released: "2.6.5"


@dataclass(frozen=True)
class Knob:
    """One option of one framework that makes it set a legacy flag (rules/frameworks.toml says
    what each field means)."""

    framework: str
    calls: frozenset[str]
    option: str
    position: int | None
    values: tuple[Literal, ...]
    sets: str
    xla: str
    device: tuple[tuple[str, tuple[str, ...]], ...]
    unless: tuple[tuple[str, tuple[Literal, ...]], ...]
    requires: tuple[str, ...]
    platforms: frozenset[str]
    first: Version
    last: Version | None
    stops: Version | None
    also: str
    instead: str
    evidence: str
    written: str  # its releases as released: "0.11.0-0.27.2", "2.1.0+"


@dataclass(frozen=True)
class Platform:
    pins: tuple[str, ...]
    imports: tuple[str, ...]


@dataclass(frozen=True)
class FrameworkTable:
    frameworks: Mapping[str, Framework]
    knobs: tuple[Knob, ...]
    platforms: Mapping[str, Platform]  # "xla": any XLA device; "neuron", "tpu"

    @functools.cached_property
    def last_names(self) -> frozenset[str]:
        """The calls' last names: what a file that makes one of the calls holds."""
        return frozenset(name.rsplit(".", 1)[-1] for knob in self.knobs for name in knob.calls)

    @functools.cached_property
    def packages(self) -> frozenset[str]:
        """Every distribution whose pins the knobs or the platforms ask about."""
        found = {p for framework in self.frameworks.values() for p in framework.packages}
        return frozenset(found | {p for platform in self.platforms.values() for p in platform.pins})

    def may_be_used(self, data: bytes, escaped: bool = False) -> bool:
        """Whether a file's bytes may hold a knob (the prefilter's question; most files hold
        none): one of its calls' names and the root of a module it is imported from (or
        needs), each a whole word, and its option as a keyword argument where it cannot be
        passed by position. A few substring tests first: most files hold no root at all.
        `escaped`: the bytes are a JSON document's (a notebook's), where a name may follow an
        escape (`\\nTrainer`): the names are only looked for, as substrings."""
        return self._may(data, escaped, None)

    def may_act(self, data: bytes, pinned: Mapping[str, Releases], escaped: bool = False) -> bool:
        """`may_be_used`, knowing what the project pins for the file (FileContext.frameworks):
        a knob may act only where a release it acts in is allowed, and on XLA, as the analysis
        asks it (kinds/python/frameworks.py `_acts`): a platform package pinned or a platform
        module's root a word of the file (`xla = "file"`), one of the call's device keywords
        passed (`"keywords"`). Each test passes more than the analysis, never less."""
        return self._may(data, escaped, pinned)

    def _may(self, data: bytes, escaped: bool, pinned: Mapping[str, Releases] | None) -> bool:
        if not any(root in data for root in self._roots):
            return False
        if escaped and pinned is None:
            return any(name in data for name in self._call_names)
        seen: dict[bytes, bool] = {}  # (the knobs share their calls and roots)

        def word(name: bytes) -> bool:
            if name not in seen:
                seen[name] = name in data if escaped else has_word(data, name)
            return seen[name]

        def keyword(name: bytes) -> bool:
            return name in data if escaped else has_keyword_argument(data, name)

        return any(
            (gate.option is None or escaped or keyword(gate.option))
            and any(word(root) for root in gate.roots)
            and any(word(name) for name in gate.calls)
            and (pinned is None or self._may_act_here(gate.knob, pinned, word, keyword))
            for gate in self._gates
        )

    def _may_act_here(
        self,
        knob: Knob,
        pinned: Mapping[str, Releases],
        word: Callable[[bytes], bool],
        keyword: Callable[[bytes], bool],
    ) -> bool:
        allowed = [pinned[p] for p in self.frameworks[knob.framework].packages if p in pinned]
        if allowed and not any(r.overlaps(knob.first, knob.stops) for r in allowed):
            return False
        if knob.xla == "file":
            return any(p in pinned for p in self._platform_pins) or any(
                word(root) for root in self._platform_roots
            )
        if knob.xla == "keywords":
            return any(keyword(name.encode("ascii")) for name, _ in knob.device)
        return True

    @functools.cached_property
    def _platform_pins(self) -> frozenset[str]:
        return frozenset(p for platform in self.platforms.values() for p in platform.pins)

    @functools.cached_property
    def _platform_roots(self) -> tuple[bytes, ...]:
        """The first names of the platforms' modules (a file importing one spells it)."""
        return tuple(
            sorted({_root(m) for platform in self.platforms.values() for m in platform.imports})
        )

    @functools.cached_property
    def _roots(self) -> tuple[bytes, ...]:
        """The knobs' roots, less those holding another (`pytorch_lightning`: `lightning`)."""
        roots = {_root(n) for knob in self.knobs for n in _imported_from(knob)}
        return tuple(sorted(r for r in roots if not any(o != r and o in r for o in roots)))

    @functools.cached_property
    def _call_names(self) -> tuple[bytes, ...]:
        return tuple(sorted(n.encode("ascii") for n in self.last_names))

    @functools.cached_property
    def _gates(self) -> tuple[_KnobGate, ...]:
        return tuple(
            _KnobGate(
                tuple(sorted({_last(name) for name in knob.calls})),
                tuple(sorted({_root(name) for name in _imported_from(knob)})),
                knob.option.encode("ascii") if knob.option and knob.position is None else None,
                knob,
            )
            for knob in self.knobs
        )


@dataclass(frozen=True)
class _KnobGate:
    """What a file's bytes hold where it may turn a knob, each a whole word."""

    calls: tuple[bytes, ...]  # one of its calls' last names
    roots: tuple[bytes, ...]  # the package a call (or what it requires) is imported from
    option: bytes | None  # its option as a keyword argument, where only a keyword passes it
    knob: Knob


def _imported_from(knob: Knob) -> Iterable[str]:
    """The modules a file turning the knob imports: what it requires, else its calls'."""
    return knob.requires or knob.calls


@functools.cache
def framework_table() -> FrameworkTable:
    data = read_toml(rules_directory().joinpath(FRAMEWORKS_FILE))
    try:
        frameworks = [_framework(item) for item in data.get("framework", [])]
        knobs = tuple(_knob(item) for item in data.get("knob", []))
        platforms = {
            name: Platform(tuple(_canonical(p) for p in item["pins"]), tuple(item["imports"]))
            for name, item in data.get("platform", {}).items()
        }
    except (KeyError, TypeError, ValueError) as error:
        raise CatalogueError(f"{FRAMEWORKS_FILE}: {type(error).__name__}: {error}") from error
    named = {framework.name: framework for framework in frameworks}
    for knob in knobs:
        if knob.framework not in named:
            raise CatalogueError(f"{FRAMEWORKS_FILE}: a knob of unknown {knob.framework!r}")
    return FrameworkTable(MappingProxyType(named), knobs, MappingProxyType(platforms))


def _framework(item: dict[str, Any]) -> Framework:
    return Framework(
        name=item["name"],
        packages=tuple(_canonical(name) for name in item["packages"]),
        newest_read=item["newest_read"],
    )


def _knob(item: dict[str, Any]) -> Knob:
    if item["xla"] not in _XLA:
        raise ValueError(f"xla {item['xla']!r} not in {_XLA}")
    return Knob(
        framework=item["framework"],
        calls=frozenset(item["calls"]),
        option=item["option"],
        position=item.get("position"),
        values=tuple(item["values"]),
        sets=item["sets"],
        xla=item["xla"],
        device=tuple((k, tuple(v)) for k, v in item.get("device", {}).items()),
        unless=tuple((k, tuple(v)) for k, v in item.get("unless", {}).items()),
        requires=tuple(item.get("requires", ())),
        platforms=frozenset(item["platforms"]),
        first=Version.parse(item["first"]),
        last=Version.parse(item["last"]) if item["last"] else None,
        stops=Version.parse(item["stops"]) if item["stops"] else None,
        also=item.get("also", ""),
        instead=" ".join(item["instead"].split()),
        evidence=item["evidence"],
        written=f"{item['first']}-{item['last']}" if item["last"] else f"{item['first']}+",
    )


def _canonical(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _root(qualified: str) -> bytes:
    return qualified.split(".", 1)[0].encode("ascii")


def _last(qualified: str) -> bytes:
    return qualified.rsplit(".", 1)[-1].encode("ascii")
