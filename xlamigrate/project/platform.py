"""The accelerator a launcher configures, from its own text (data: rules/platforms.toml)."""

from __future__ import annotations

import re
from functools import cache

from xlamigrate.rulesdata import PLATFORMS_FILE, read_toml, rules_directory

PLATFORMS = ("neuron", "tpu")


@cache
def _patterns() -> dict[str, re.Pattern[str]]:
    data = read_toml(rules_directory().joinpath(PLATFORMS_FILE))
    return {
        item["name"]: re.compile("|".join(f"(?:{p})" for p in item["patterns"]))
        for item in data["platform"]
    }


def platform_of(text: str) -> str | None:
    """ "neuron" or "tpu" when the text names one platform's markers only; else None."""
    found = [name for name, pattern in _patterns().items() if pattern.search(text)]
    return found[0] if len(found) == 1 else None
