"""Which files are worth parsing, from their bytes alone: a file that names no flag, no kind
trigger, no torch-xla runtime variable and (in Python) no torch-xla API of the table (every
part of its dotted name) and no framework option that sets a flag (the framework's package, a
call taking the option, the option passed) cannot have a finding, so it is never parsed. Names
are whole words (textwords.py): `xla_device_hw` is no use of `xla_device`. A file the walk
passed for a framework option alone is asked again once the project's pins for it are known
(jobs.py, before its scan): an option that cannot act there (not on XLA, or in no release the
pins allow) does not get it parsed either."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from xlamigrate import kinds
from xlamigrate.apitable import ApiTable, api_table
from xlamigrate.catalogue import Catalogue
from xlamigrate.frameworktable import (
    FRAMEWORK_OPTION_SETS_LEGACY_FLAG,
    FrameworkTable,
    Releases,
    framework_table,
)
from xlamigrate.kinds.unreadtable import UNREAD_KINDS
from xlamigrate.textwords import Substrings
from xlamigrate.xlavariables import variable_names

_API_KINDS = frozenset({"python", "notebook"})  # where torch-xla APIs are called
_UNREAD = frozenset(kind.name for kind in UNREAD_KINDS)


class Prefilter:
    def __init__(self, catalogue: Catalogue, enabled: frozenset[str]) -> None:
        self.flags = _encoded(catalogue.flags)
        self.triggers = kinds.triggers()
        table = api_table()
        uses_apis = {api.rule for api in table.apis.values()} & enabled
        self.apis: ApiTable | None = table if uses_apis else None
        self.variables = _encoded(variable_names(enabled))
        # (in a kind xlamigrate reads, the variables are looked for with the flags)
        self.flag_names = Substrings(self.flags)
        self._named_or_variables = Substrings((*self.flags, *self.variables))
        # a framework's precision option (XM104): the file names its package and the option
        self.frameworks: FrameworkTable | None = (
            framework_table() if FRAMEWORK_OPTION_SETS_LEGACY_FLAG in enabled else None
        )

    def may_have_findings(
        self, kind: str, data: bytes, pinned: Mapping[str, Releases] | None = None
    ) -> bool:
        """`pinned`: the framework releases the project pins for the file, where known (its
        context's): a framework option may then pass the file only where it may act there."""
        # (a file xlamigrate does not read reports legacy flags alone)
        names = self.flag_names if kind in _UNREAD else self._named_or_variables
        if names.found_in(data):
            return True
        trigger = self.triggers.get(kind)
        if trigger is not None and trigger.search(data) is not None:
            return True
        if kind not in _API_KINDS:
            return False
        escaped = kind == "notebook"  # (JSON: a name may follow an escape's letter)
        frameworks = self.frameworks
        if frameworks is not None and (
            frameworks.may_be_used(data, escaped)
            if pinned is None
            else frameworks.may_act(data, pinned, escaped)
        ):
            return True
        return (
            self.apis is not None and b"torch_xla" in data and self.apis.may_be_used(data, escaped)
        )


def _encoded(names: Iterable[str]) -> tuple[bytes, ...]:
    """The names as bytes (tested as `Substrings`: a substring test per name, or per group of
    names with a common start, is some 5x quicker than one regex of them all, whose
    alternatives start with different letters)."""
    return tuple(sorted(name.encode("ascii") for name in names))
