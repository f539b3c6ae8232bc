"""The project's decisions, as values: per enabling write (kept or migrated, with the signal
that replaces it) and per launched script (its recipe, gated or not)."""

from __future__ import annotations

from dataclasses import dataclass, field

from xlamigrate.kinds.textaccess import Branch, LaunchSite, TextAnalysis


@dataclass(frozen=True)
class Analysed:
    """One flagged file of a launcher kind, as the project reads it."""

    path: str
    kind: str
    text: str
    analysis: TextAnalysis


@dataclass(frozen=True)
class EnablingWrite:
    """A launcher's write that turns a legacy flag on for the processes it starts."""

    path: str  # the launcher (display path)
    start: int  # the access's offset in the launcher (what identifies it)
    variable: str
    branch: Branch
    launched: tuple[str, ...]  # the scripts it reaches, as written
    line: int = 0  # 1-based, for messages
    constant: bool = True  # False: it copies a shell switch ("0" or "1"): the signal copies it


@dataclass(frozen=True)
class Launcher:
    """What the project needs of one file that starts processes."""

    path: str
    writes: tuple[EnablingWrite, ...] = ()
    sites: tuple[LaunchSite, ...] = ()
    kind: str = "shell"
    platform: str | None = None  # "neuron", "tpu", or None where the file does not say


@dataclass(frozen=True)
class WriteDecision:
    """What becomes of one enabling write: `migrated` (its recipe is applied to every script it
    reaches; the write turns into `signal`, or goes when the recipe is unconditional), or kept,
    with `reason` saying which process it reaches and what that needs."""

    migrated: bool
    scripts: tuple[str, ...] = ()  # the in-tree scripts it reaches (display paths)
    signal: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class Configuration:
    """One way the launchers start a script, as far as the legacy flags go: the flags it set
    to "1" (none: a launch that set neither) and the writes that set them ("run.sh:12")."""

    flags: frozenset[str]
    where: tuple[str, ...] = ()

    def describe(self) -> str:
        if not self.flags:
            return "launches that set no flag"
        return " + ".join(sorted(self.flags)) + f" ({', '.join(self.where)})"


@dataclass(frozen=True)
class ScriptRecipe:
    """The recipe a launched script gets: under `signal` (an environment variable its
    launchers now set where they set the flag) or, with no signal, unconditionally."""

    path: str
    signal: str | None
    flags: tuple[str, ...]  # the legacy flags its launchers set
    launchers: tuple[str, ...]  # "run.sh:12" for each enabling write that reaches it
    platform: str = "neuron"
    # Writes of NEURON_RT_STOCHASTIC_ROUNDING_EN=1 the launchers keep for every configuration
    # (fp32-copy turns rounding off under the signal instead of deleting them).
    rounding_elsewhere: bool = False
    # The configurations it is launched in (the flag-free one too, where the recipe is gated).
    configurations: tuple[Configuration, ...] = ()
    # The file's own writes set the flag (no launcher): its reads read the signal where and
    # when the flag was set, not a module constant.
    in_file: bool = False
    # The functions of the script its launched processes start in (a Ray Train worker loop, a
    # Metaflow step), not its top: the recipe reads the signal and sets its environment there
    # (a module constant would be read by the process that launches them).
    functions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Project:
    writes: dict[str, dict[int, WriteDecision]] = field(default_factory=dict)
    scripts: dict[str, ScriptRecipe] = field(default_factory=dict)

    def decisions_for(self, path: str) -> dict[int, WriteDecision]:
        return self.writes.get(path, {})
