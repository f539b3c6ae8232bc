"""Decides, for every enabling write of the project's launchers, where it takes effect and what
replaces it; and for every launched script, whether its recipe is gated on the signal.

A write is migrated only when every script it reaches is a Python file of the project whose
recipe can be applied. A script's recipe is unconditional only when every launch of it that
xlamigrate can see is reached by such a write on every path, and no other file names it (a
second launcher, a README-driven `python train.py`): otherwise the recipe runs under the signal,
which the launchers set exactly where they set the flag.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from xlamigrate.kinds.launch import as_written, described, split_function
from xlamigrate.kinds.textaccess import LaunchSite, exclusive, runs_with
from xlamigrate.project.model import (
    Configuration,
    EnablingWrite,
    Launcher,
    Project,
    ScriptRecipe,
    WriteDecision,
)

# Why a write that starts no script of the project is kept, per launcher kind.
_NOTHING_LAUNCHED = {
    "shell": "no Python script of this project is launched after it",
    "dockerfile": "it reaches every process of this image, and no CMD or ENTRYPOINT here runs a"
    " Python script of this project",
    "yaml": "it reaches the process this file starts, which runs no Python script of this project",
    "dotenv": "it reaches whatever process loads this file",
    "notebook": "no Python script of this project is launched after it",
}

# The kinds whose enabling writes only ever become the signal (a Python launch API's environment
# dict: its key is renamed; the launched script sets the recipe's environment under it).
_SIGNAL_ONLY_KINDS = frozenset({"python"})

Resolve = Callable[[str, str], "str | None"]  # (launcher, script as written) -> script path


@dataclass(frozen=True)
class Inputs:
    """What deciding needs besides the launchers: how a launch line names a file of the project,
    which scripts other files name too, and the signal's name."""

    resolve: Resolve
    named_elsewhere: Callable[[str, Sequence[str]], bool]  # (script, its launchers) -> bool
    signal: str
    rounding_writes: Mapping[str, bool]  # launcher -> it sets stochastic rounding on
    default_platform: str = "neuron"
    # (launcher, script as written) -> why it names no file of the project ("": nothing known)
    unresolved: Callable[[str, str], str] = lambda launcher, written: ""


def decide(
    launchers: Sequence[Launcher], inputs: Inputs, failed: Mapping[str, str] | None = None
) -> Project:
    failed = failed or {}
    decisions: dict[str, dict[int, WriteDecision]] = {}
    reaching: dict[str, list[tuple[Launcher, EnablingWrite]]] = {}
    for launcher in launchers:
        for write in launcher.writes:
            decision, scripts = _reach(launcher, write, inputs, failed)
            decisions.setdefault(launcher.path, {})[write.start] = decision
            for script in scripts:
                reaching.setdefault(script, []).append((launcher, write))
    recipes = {
        script: _recipe(script, reached, launchers, inputs)
        for script, reached in sorted(reaching.items())
    }
    for by_start in decisions.values():
        for start, decision in by_start.items():
            if decision.migrated:
                gated = any(recipes[s].signal is not None for s in decision.scripts)
                by_start[start] = WriteDecision(
                    True, decision.scripts, inputs.signal if gated else None
                )
    return Project(decisions, recipes)


def _reach(
    launcher: Launcher, write: EnablingWrite, inputs: Inputs, failed: Mapping[str, str]
) -> tuple[WriteDecision, tuple[str, ...]]:
    if not write.launched:
        return WriteDecision(False, reason=_NOTHING_LAUNCHED.get(launcher.kind, "")), ()
    resolved = []
    for written in write.launched:
        script = inputs.resolve(launcher.path, written)
        if script is None:
            reason = f"it reaches {as_written(written)}, which is not a Python file of this project"
            why = inputs.unresolved(launcher.path, written)
            return WriteDecision(False, reason=f"{reason} ({why})" if why else reason), ()
        if script in failed:
            where = described(written, script)
            reason = f"it reaches {where}, where the recipe could not be applied ({failed[script]})"
            return WriteDecision(False, reason=reason), ()
        resolved.append(script)
    scripts = tuple(dict.fromkeys(resolved))
    return WriteDecision(True, scripts), scripts


def _recipe(
    script: str,
    reached: list[tuple[Launcher, EnablingWrite]],
    launchers: Sequence[Launcher],
    inputs: Inputs,
) -> ScriptRecipe:
    paths = tuple(dict.fromkeys(launcher.path for launcher, _ in reached))
    unconditional = (
        not inputs.named_elsewhere(script, paths)
        and not any(launcher.kind in _SIGNAL_ONLY_KINDS for launcher, _ in reached)
        and all(write.constant for _, write in reached)
        and all(
            _covered(site, launcher, reached)
            for launcher in launchers
            for site in _sites_of(script, launcher, inputs)
        )
    )
    signal = None if unconditional else inputs.signal
    platforms = {launcher.platform for launcher, _ in reached} - {None}
    platform = platforms.pop() if len(platforms) == 1 else None
    platform = platform or inputs.default_platform
    return ScriptRecipe(
        path=script,
        signal=signal,
        flags=tuple(sorted({write.variable for _, write in reached})),
        launchers=paths,
        platform=platform,
        rounding_elsewhere=any(inputs.rounding_writes.get(path, False) for path in paths),
        configurations=_configurations(reached, gated=signal is not None),
        functions=tuple(
            dict.fromkeys(
                function
                for _, write in reached
                for written in write.launched
                if (function := split_function(written)[1]) is not None
                and inputs.resolve(write.path, written) == script
            )
        ),
    )


def _configurations(
    reached: list[tuple[Launcher, EnablingWrite]], gated: bool
) -> tuple[Configuration, ...]:
    """The flag settings the script is launched with: per enabling write, the flags of the
    writes of its launcher that may run with it (not in another arm of a construct); and, where
    the recipe is gated, the launches that set none."""
    found: dict[frozenset[str], list[str]] = {}
    for launcher, write in reached:
        flags = frozenset(
            other.variable
            for owner, other in reached
            if owner.path == launcher.path and not exclusive(other.branch, write.branch)
        )
        found.setdefault(flags, []).append(f"{launcher.path}:{write.line}")
    configurations = [Configuration(flags, tuple(where)) for flags, where in found.items()]
    if gated:
        configurations.append(Configuration(frozenset()))
    return tuple(configurations)


def _sites_of(script: str, launcher: Launcher, inputs: Inputs) -> list[LaunchSite]:
    return [site for site in launcher.sites if inputs.resolve(launcher.path, site.script) == script]


def _covered(
    site: LaunchSite, launcher: Launcher, reached: list[tuple[Launcher, EnablingWrite]]
) -> bool:
    """Whether an enabling write of the same launcher ran on every path to this launch."""
    return any(
        owner.path == launcher.path
        and write.start < site.start
        and runs_with(write.branch, site.branch)
        for owner, write in reached
    )
