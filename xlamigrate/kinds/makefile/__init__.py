"""Makefiles: each recipe line through the one shell engine (make runs every logical line in a
shell of its own), `$(NAME)` expansions of a flag as reads, and make's own exported variables as
writes. The rewrite does not edit Makefiles: every finding is manual and says what to do."""

from __future__ import annotations

from dataclasses import replace

from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds import textkind
from xlamigrate.kinds.embedded import CannotRender
from xlamigrate.kinds.makefile.syntax import Assignment, Expansion, read
from xlamigrate.kinds.textaccess import Problem, TextAccess, TextAnalysis, TextMention

_RECIPE_NOTE = " in a Makefile recipe"
_BY_HAND = (
    "; xlamigrate does not rewrite Makefiles: migrate {runs}, then replace"
    " this write by hand with the variable that script reads for its recipe (BF16_RECIPE=1"
    " unless [tool.xlamigrate] signal names another), or remove it where the recipe is always on"
)
_EXPORTED_NOTE = " as a variable make exports to every recipe"
_NOT_EXPORTED = (
    "in a make variable that is not exported (recipes see it only where they expand it, or where"
    " `make` was started with it in the environment)"
)
_MAKE_VARIABLE = "in a make expansion of the variable this Makefile assigns"
_EXPANDED = " in a make expansion (make's value: the environment's)"
_OTHER_EDITS = "; xlamigrate does not rewrite Makefiles: change it by hand"


def analyse(text: str, names: frozenset[str]) -> TextAnalysis:
    if not any(name in text for name in names):
        return TextAnalysis()
    from xlamigrate.kinds.shell.analysis import analyse_source

    makefile = read(text)
    accesses: list[TextAccess] = []
    mentions: list[TextMention] = []
    problems: list[Problem] = []
    assigned = {assignment.name for assignment in makefile.assignments}
    for recipe in makefile.recipes:
        for expansion in recipe.expansions:
            if expansion.name not in names:
                continue
            if expansion.name in assigned:  # make's own variable: what it holds is the file's
                mentions.append(
                    TextMention(expansion.name, expansion.start, expansion.end, _MAKE_VARIABLE)
                )
            else:  # the environment's value, as make read it
                accesses.append(_by_hand(_expansion_read(expansion)))
        if not any(name in recipe.shell.text for name in names):
            continue
        found = analyse_source(recipe.shell, names, note=_RECIPE_NOTE)
        accesses.extend(_by_hand(access) for access in found.accesses)
        mentions.extend(found.mentions)
        problems.extend(problem.within("recipe") for problem in found.problems)
    for assignment in makefile.assignments:
        if assignment.name not in names:
            continue
        if assignment.exported:
            accesses.append(_by_hand(_write(assignment)))
        else:
            mentions.append(
                TextMention(assignment.name, assignment.start, assignment.end, _NOT_EXPORTED)
            )
    return TextAnalysis(tuple(accesses), tuple(problems), tuple(mentions))


def _expansion_read(expansion: Expansion) -> TextAccess:
    start, end = expansion.start, expansion.end
    return TextAccess(expansion.name, "read", "make-expansion", None, start, end, note=_EXPANDED)


def _write(assignment: Assignment) -> TextAccess:
    """`export NAME = value`: make passes `value` as written (quotes included); an expansion,
    an append or a shell assignment gives a value not known here."""
    literal = assignment.op in ("=", ":=", "::=", ":::=", "?=") and "$" not in assignment.value
    value = FlagValue((assignment.value,)) if literal else FlagValue.unknown()
    return TextAccess(
        variable=assignment.name,
        kind="write",
        form="make-export",
        value=value,
        start=assignment.start,
        end=assignment.end,
        value_range=(assignment.value_start, assignment.end),
        note=_EXPORTED_NOTE,
    )


def _by_hand(access: TextAccess) -> TextAccess:
    if access.kind != "write":
        note = _OTHER_EDITS
    elif access.form == "make-export":
        note = _BY_HAND.format(runs="the scripts its recipes run")
    else:
        note = _BY_HAND.format(runs="the script this recipe runs")
    return replace(access, note=access.note + note, applicability="manual", removal=None)


def render(syntax: str, name: str, value: str, append: bool = False) -> str:
    raise CannotRender("xlamigrate does not rewrite Makefiles")


KIND = textkind.TextKind(analyse, render)
scan, rewrite = KIND.scan, KIND.rewrite
