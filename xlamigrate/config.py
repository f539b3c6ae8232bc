"""`[tool.xlamigrate]` in the nearest pyproject.toml, plus CLI overrides, as one frozen Settings;
and the project's root, found from the paths a run names (as ruff finds its pyproject.toml)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from xlamigrate.apitable import Version
from xlamigrate.catalogue import Catalogue, UnknownCodeError
from xlamigrate.rulesdata import toml_module
from xlamigrate.settingvalues import DEFAULT_RUNTIME as DEFAULT_RUNTIME
from xlamigrate.settingvalues import RUNTIMES as RUNTIMES
from xlamigrate.settingvalues import TARGETS as _TARGETS

SECTION = "xlamigrate"
# What marks a project's root folder (besides the folder of the configuration in force).
ROOT_MARKERS = (".git", "pyproject.toml")
_LIST_KEYS = ("select", "ignore", "exclude")


class ConfigError(Exception):
    """A configuration the user must fix: reported with the file, exit code 2."""


@dataclass(frozen=True)
class Settings:
    # The project: its launch graph is built over every file below it (find_root).
    root: Path
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    mode: str | None = None
    respect_gitignore: bool = True
    config_path: Path | None = None
    signal: str | None = None  # the variable launchers set in place of the flag
    target: str | None = None  # "neuron" or "tpu": the platform, where inference must not decide
    # The oldest torch-xla the project runs on, where its pins must not decide (API fixes
    # newer than it are reported instead).
    torch_xla_version: Version | None = None
    runtime: str | None = None  # "package" or "vendor": how rewritten scripts get the runtime
    # Where exclude patterns are relative to: the config file's folder, else the cwd (None: root).
    excludes_from: Path | None = None

    @property
    def exclude_base(self) -> Path:
        return self.excludes_from if self.excludes_from is not None else self.root

    def with_overrides(
        self,
        select: Sequence[str] | None = None,
        ignore: Sequence[str] = (),
        exclude: Sequence[str] = (),
    ) -> Settings:
        """CLI flags win: --select replaces the configured selection, --ignore/--exclude add."""
        return replace(
            self,
            select=tuple(select) if select is not None else self.select,
            ignore=self.ignore + tuple(ignore),
            exclude=self.exclude + tuple(exclude),
        )


def find_config(paths: Sequence[Path]) -> Path | None:
    """The nearest pyproject.toml with a [tool.xlamigrate] table, above the paths' common folder."""
    start = _common_directory(paths)
    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file() and SECTION in _tool_tables(candidate):
            return candidate
    return None


def find_root(paths: Sequence[Path], config: Path | None = None) -> Path:
    """The project's root: the nearest folder up from the paths' common folder that holds
    `.git` or a pyproject.toml, or the configuration file; with none, that common folder.
    (Absolute, not resolved: files below it are shown relative to the cwd as named.)"""
    start = _common_folder(paths)
    config_folder = Path(os.path.abspath(config)).parent if config is not None else None
    for directory in (start, *start.parents):
        if directory == config_folder or any((directory / m).exists() for m in ROOT_MARKERS):
            return directory
    return start


def load_settings(
    paths: Sequence[Path], catalogue: Catalogue, config: Path | None = None
) -> Settings:
    path = config if config is not None else find_config(paths)
    if path is None:
        return Settings(root=find_root(paths), excludes_from=Path.cwd())
    if not path.is_file():
        raise ConfigError(f"{path}: configuration file not found")
    table = _tool_tables(path).get(SECTION, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.{SECTION}] must be a table")
    settings = _settings_from_table(path, table, catalogue)
    return replace(settings, root=find_root(paths, path), excludes_from=path.parent.resolve())


def _settings_from_table(path: Path, table: dict[str, Any], catalogue: Catalogue) -> Settings:
    known = {
        *_LIST_KEYS,
        "mode",
        "respect-gitignore",
        "runtime",
        "signal",
        "target",
        "torch-xla-version",
    }
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(
            f"{path}: unknown key(s) in [tool.{SECTION}]: {', '.join(unknown)} "
            f"(known: {', '.join(sorted(known))})"
        )
    lists: dict[str, tuple[str, ...]] = {}
    for key in _LIST_KEYS:
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ConfigError(f"{path}: [tool.{SECTION}] {key} must be a list of strings")
        lists[key] = tuple(value)
    try:
        catalogue.select(lists["select"], lists["ignore"])
    except UnknownCodeError as error:
        raise ConfigError(f"{path}: {error}") from error
    mode = table.get("mode")
    if mode is not None and mode not in catalogue.modes:
        raise ConfigError(f"{path}: mode {mode!r} is not one of {', '.join(catalogue.modes)}")
    respect = table.get("respect-gitignore", True)
    if not isinstance(respect, bool):
        raise ConfigError(f"{path}: [tool.{SECTION}] respect-gitignore must be true or false")
    signal = table.get("signal")
    if signal is not None and (
        not isinstance(signal, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", signal)
    ):
        raise ConfigError(f"{path}: [tool.{SECTION}] signal must be an environment variable name")
    target = table.get("target")
    if target is not None and target not in _TARGETS:
        raise ConfigError(f"{path}: [tool.{SECTION}] target must be one of {', '.join(_TARGETS)}")
    runtime = table.get("runtime")
    if runtime is not None and runtime not in RUNTIMES:
        raise ConfigError(f"{path}: [tool.{SECTION}] runtime must be one of {', '.join(RUNTIMES)}")
    version = table.get("torch-xla-version")
    try:
        torch_xla = Version.parse(version) if version is not None else None
    except (ValueError, TypeError) as error:
        message = f'{path}: [tool.{SECTION}] torch-xla-version must be a release like "2.1"'
        raise ConfigError(message) from error
    return Settings(
        root=path.parent.resolve(),
        select=lists["select"],
        ignore=lists["ignore"],
        exclude=lists["exclude"],
        mode=mode,
        respect_gitignore=respect,
        config_path=path,
        signal=signal,
        target=target,
        torch_xla_version=torch_xla,
        runtime=runtime,
    )


def _tool_tables(path: Path) -> dict[str, Any]:
    tomllib = toml_module()  # (imported where a configuration file is read)
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from error
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror}") from error
    tool = data.get("tool", {})
    return tool if isinstance(tool, dict) else {}


def _common_folder(paths: Sequence[Path]) -> Path:
    """The folder holding every path (a file's own folder), absolute and not resolved."""
    absolute = [os.path.abspath(path) for path in paths] or [os.getcwd()]
    common = Path(os.path.commonpath(absolute))
    return common if common.is_dir() else common.parent


def _common_directory(paths: Sequence[Path]) -> Path:
    resolved = [path.resolve() for path in paths] or [Path.cwd()]
    common = Path(os.path.commonpath([str(path) for path in resolved]))
    return common if common.is_dir() else common.parent
