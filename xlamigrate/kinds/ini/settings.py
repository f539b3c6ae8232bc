"""Where an INI file sets environment variables for what it runs, as data: tox's `setenv` of a
test environment and pytest-env's `env` of pytest's section, and how one line of each spells a
variable (`NAME = value`; pytest-env's `D:` and `R:` flags before the name)."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class EnvironmentSetting:
    """A key whose lines set variables: in which files and sections, and for whom."""

    files: tuple[str, ...]  # file names (fnmatch)
    sections: tuple[str, ...]  # section names (fnmatch)
    keys: tuple[str, ...]
    tool: str  # "tox", "pytest-env": how a line is spelled
    what: str  # said in the finding


SETTINGS: tuple[EnvironmentSetting, ...] = (
    EnvironmentSetting(
        ("tox.ini", "setup.cfg"), ("testenv", "testenv:*"), ("setenv", "set_env"), "tox",
        "tox's setenv",
    ),
    EnvironmentSetting(
        ("pytest.ini", ".pytest.ini", "tox.ini"), ("pytest",), ("env",), "pytest-env",
        "pytest-env's env",
    ),
    EnvironmentSetting(
        ("setup.cfg",), ("tool:pytest",), ("env",), "pytest-env", "pytest-env's env",
    ),
)  # fmt: skip


def read_by_its_tool(file: str) -> bool:
    """Whether a tool reads a file of this name as INI (tox, pytest), so that one iniconfig
    cannot read is a file that tool cannot read either (any other `*.cfg` may be no INI)."""
    return any(fnmatch.fnmatchcase(file, pattern) for s in SETTINGS for pattern in s.files)


def setting_for(file: str, section: str, key: str) -> EnvironmentSetting | None:
    for setting in SETTINGS:
        if (
            key in setting.keys
            and any(fnmatch.fnmatchcase(file, pattern) for pattern in setting.files)
            and any(fnmatch.fnmatchcase(section, pattern) for pattern in setting.sections)
        ):
            return setting
    return None


@dataclass(frozen=True)
class Entry:
    """One line's variable: its name and value, where each starts in the line, and whether the
    value is known (tox's `{env:X}` and pytest-env's `{X}` substitute other values)."""

    name: str
    value: str
    name_at: int
    value_at: int
    known: bool
    default_only: bool  # pytest-env `D:`: set only where the environment has no value yet


_TOX_LINE = re.compile(r"^(?P<name>[^=\s]+)\s*=\s*(?P<value>.*?)(?:\s+#.*)?$")
_PYTEST_ENV_LINE = re.compile(r"^(?P<flags>(?:[DR]:)*)(?P<name>[^=\s]+)\s*=\s*(?P<value>.*?)\s*$")


def entry(tool: str, line: str) -> Entry | None:
    """The variable a (stripped) line of the setting sets; None for other lines (tox's
    `file|.env`, a line of no assignment)."""
    if tool == "tox":
        match = _TOX_LINE.match(line)
        if match is None:
            return None
        value = match.group("value")
        return Entry(
            match.group("name"), value, match.start("name"), match.start("value"),
            "{" not in value, default_only=False,
        )  # fmt: skip
    match = _PYTEST_ENV_LINE.match(line)
    if match is None:
        return None
    flags = match.group("flags")
    value = match.group("value")
    known = "R:" in flags or "{" not in value
    return Entry(
        match.group("name"), value, match.start("name"), match.start("value"), known,
        default_only="D:" in flags,
    )  # fmt: skip
