"""The launch APIs table (`rules/launch_apis.toml`): Python calls that start a training script or
a worker elsewhere (a SageMaker estimator, Metaflow's `@environment`, Ray's `runtime_env`) with
an environment the caller writes as a dict. Data only: kinds/python/launchcalls.py finds the
flags written into such a dict and says where they go."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from xlamigrate.rulesdata import LAUNCH_APIS_FILE, CatalogueError, read_toml, rules_directory

# what a launch names: a script, the function it decorates, the function it runs, none
_KINDS = ("entry", "decorates", "runs", "other")


@dataclass(frozen=True)
class LaunchApi:
    """One call that hands an environment dict to another process (the table says each field)."""

    framework: str
    calls: frozenset[str]
    env: tuple[str, ...]  # "runtime_env.env_vars" -> ("runtime_env", "env_vars")
    entry: tuple[tuple[str, ...], ...]
    folder: tuple[tuple[str, ...], ...]
    process: str
    decorates: bool
    evidence: str
    runs: frozenset[str] = frozenset()  # calls handed the function the process runs
    runs_argument: str = ""  # that function's keyword
    runs_position: int | None = None  # or position


@dataclass(frozen=True)
class LaunchTable:
    apis: tuple[LaunchApi, ...]
    on: str  # the finding's text where the flag may be on
    off: str  # where it is off
    target: tuple[tuple[str, str], ...]  # (one of _KINDS, its phrase)
    where: tuple[tuple[str, str], ...]

    @functools.cached_property
    def env_keys(self) -> frozenset[bytes]:
        """The keywords the environments are passed as (`environment`, `runtime_env`): what a
        file writing a flag into one holds."""
        return frozenset(api.env[0].encode() for api in self.apis)

    @functools.cached_property
    def last_names(self) -> frozenset[str]:
        """The calls' last names (`PyTorch`, `init`, `TorchTrainer`): what a file making one of
        them holds."""
        names = {name for api in self.apis for name in (*api.calls, *api.runs)}
        return frozenset(name.rsplit(".", 1)[-1] for name in names)

    def may_launch(self, data: bytes) -> bool:
        """Whether a Python file's bytes may hold a launch API's enabling write: a recipe
        flag's name, an environment's keyword and a call's last name (before any parse)."""
        from xlamigrate.flagvalue import RECIPE_FLAGS

        return (
            any(flag.encode() in data for flag in RECIPE_FLAGS)
            and any(name in data for name in self.env_keys)
            and any(name.encode() in data for name in self.last_names)
        )


@functools.cache
def launch_table() -> LaunchTable:
    data = read_toml(rules_directory().joinpath(LAUNCH_APIS_FILE))
    try:
        apis = tuple(_api(item) for item in data.get("launch", []))
        message = data["message"]
        target = tuple((kind, message["target"][kind]) for kind in _KINDS)
        where = tuple((kind, message["where"][kind]) for kind in _KINDS)
        return LaunchTable(apis, message["on"], message["off"], target, where)
    except (KeyError, TypeError, ValueError) as error:
        raise CatalogueError(f"{LAUNCH_APIS_FILE}: {type(error).__name__}: {error}") from error


def _api(item: dict[str, Any]) -> LaunchApi:
    return LaunchApi(
        framework=item["framework"],
        calls=frozenset(item["calls"]),
        env=tuple(item["env"].split(".")),
        entry=tuple(tuple(path.split(".")) for path in item["entry"]),
        folder=tuple(tuple(path.split(".")) for path in item["folder"]),
        process=item["process"],
        decorates=bool(item.get("decorates", False)),
        evidence=item["evidence"],
        runs=frozenset(item.get("runs", {}).get("calls", ())),
        runs_argument=item.get("runs", {}).get("argument", ""),
        runs_position=item.get("runs", {}).get("position"),
    )
