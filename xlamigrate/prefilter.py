"""Which files are worth parsing, from their bytes alone: a file that names no flag, no kind
trigger, no torch-xla runtime variable and (in Python) no torch-xla API of the table and no
framework option that sets a flag (a package and an option's name) cannot have a finding, so
it is never parsed."""

from __future__ import annotations

import re
from collections.abc import Iterable

from xlamigrate import kinds
from xlamigrate.apitable import api_table
from xlamigrate.catalogue import Catalogue
from xlamigrate.frameworktable import (
    FRAMEWORK_OPTION_SETS_LEGACY_FLAG,
    FrameworkTable,
    framework_table,
)
from xlamigrate.kinds.unreadtable import UNREAD_KINDS
from xlamigrate.xlavariables import variable_names

_API_KINDS = frozenset({"python", "notebook"})  # where torch-xla APIs are called
_UNREAD = frozenset(kind.name for kind in UNREAD_KINDS)


class Prefilter:
    def __init__(self, catalogue: Catalogue, enabled: frozenset[str]) -> None:
        self.flags = _any_of(catalogue.flags)
        self.triggers = kinds.triggers()
        table = api_table()
        uses_apis = {api.rule for api in table.apis.values()} & enabled
        # Each API's dotted name in parts: a file reaches one only through imports that name
        # every part (`import torch_xla.core.xla_model as xm` ... `xm.mark_step`; `import
        # torch_xla` ... `torch_xla.core.xla_model.mark_step`), so it holds them all.
        self.apis: tuple[tuple[bytes, ...], ...] | None = (
            tuple(
                tuple(p.encode("ascii") for p in api.name.split(".")) for api in table.apis.values()
            )
            if uses_apis
            else None
        )
        variables = variable_names(enabled)
        self.variables = _any_of(variables) if variables else None
        # a framework's precision option (XM104): the file names its package and the option
        self.frameworks: FrameworkTable | None = (
            framework_table() if FRAMEWORK_OPTION_SETS_LEGACY_FLAG in enabled else None
        )

    def may_have_findings(self, kind: str, data: bytes) -> bool:
        if self.flags.search(data):
            return True
        if self.variables is not None and kind not in _UNREAD and self.variables.search(data):
            return True  # (a file xlamigrate does not read reports legacy flags alone)
        trigger = self.triggers.get(kind)
        if trigger is not None and trigger.search(data) is not None:
            return True
        if self.frameworks is not None and kind in _API_KINDS and self.frameworks.may_be_used(data):
            return True
        return (
            self.apis is not None
            and kind in _API_KINDS
            and b"torch_xla" in data
            and any(all(part in data for part in parts) for parts in self.apis)
        )


def _any_of(names: Iterable[str]) -> re.Pattern[bytes]:
    """Matches any of the names (the longest first)."""
    ordered = sorted(names, key=len, reverse=True)
    return re.compile(b"|".join(re.escape(name.encode("ascii")) for name in ordered))
