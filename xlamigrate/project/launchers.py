"""What the project needs of one analysed file: its enabling writes (the ones a rewrite can turn
into the signal) and where it launches Python scripts."""

from __future__ import annotations

from xlamigrate.flagvalue import RECIPE_FLAGS
from xlamigrate.kinds.textaccess import LaunchSite, TextAccess, TextAnalysis
from xlamigrate.neuronflags import STOCHASTIC_ROUNDING
from xlamigrate.project.model import EnablingWrite, Launcher
from xlamigrate.project.platform import platform_of

# The kinds whose analysis lists the launches themselves (a shell command, a launch API call).
_WITH_LAUNCH_LISTS = ("shell", "python")


def is_enabling(access: TextAccess) -> bool:
    """A write that turns a recipe flag on, with a value known statically (or a copy of a shell
    switch the text sets to "0" or "1" only), in a construct the rewrite can edit (a string
    another program reads, a SLURM list, stays manual)."""
    return (
        access.kind == "write"
        and access.variable in RECIPE_FLAGS
        and access.value is not None
        and (access.value.enabled is True or copies_a_switch(access))
        and access.assignment is not None
        and access.applicability != "manual"
        and access.target == "process"
    )


def copies_a_switch(access: TextAccess) -> bool:
    """`XLA_USE_BF16=$USE_BF16` where the text sets USE_BF16 to "0" or "1" only (a default and
    a getopts/case arm): the signal can copy the same variable (`BF16_RECIPE=$USE_BF16`)."""
    candidates = access.value.candidates if access.value is not None else None
    return (
        access.value_from is not None
        and candidates is not None
        and set(candidates) <= {"0", "1"}
        and "1" in candidates
    )


def launcher_of(path: str, kind: str, text: str, analysis: TextAnalysis) -> Launcher:
    writes = tuple(
        EnablingWrite(
            path,
            a.start,
            a.variable,
            a.branch,
            a.launched,
            text.count("\n", 0, a.start) + 1,
            constant=not copies_a_switch(a),
        )
        for a in analysis.accesses
        if is_enabling(a)
    )
    sites = analysis.launches
    if kind not in _WITH_LAUNCH_LISTS:  # the others: a write reaches its own command
        sites = tuple(
            LaunchSite(script, write.start + 1, write.branch)
            for write in writes
            for script in write.launched
        )
    platform = platform_of(text) if writes else None  # (a file without one is no launcher)
    return Launcher(path, writes, sites, kind, platform)


def launches_with_flag(analysis: TextAnalysis) -> bool:
    """Whether the file has an enabling write at all (most trees have none: no project)."""
    return any(is_enabling(a) for a in analysis.accesses)


def sets_rounding(analysis: TextAnalysis) -> bool:
    """Whether the file turns stochastic rounding on outside the flag's own writes."""
    return any(
        a.kind == "write"
        and a.variable == STOCHASTIC_ROUNDING
        and a.value is not None
        and a.value.enabled is True
        for a in analysis.accesses
    )
