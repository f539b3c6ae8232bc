"""The shell scripts of a YAML file (see `sites.py`) through the one shell engine: each scalar's
string, mapped back to the file, so findings land on the flag's own line and column and edits
go through the scalar's quoting. Every edit the engine makes inside a scalar is checked by
reading the edited scalar again with ruamel.yaml: one that would not leave the script it meant
(a plain scalar that now starts with a quote, a block whose indentation moved) is dropped for a
hand edit."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds.embedded import Embedded
from xlamigrate.kinds.launch import Launch
from xlamigrate.kinds.textaccess import Problem, TextAccess, TextEdit, TextMention
from xlamigrate.kinds.yaml.nodetext import Positions
from xlamigrate.kinds.yaml.scalar import read_alone, scalar_source
from xlamigrate.kinds.yaml.sites import Script, Site

if TYPE_CHECKING:
    from xlamigrate.kinds.shell.workdir import WorkingDirectory

# Expressions the CI or workflow system substitutes before the shell reads the text: GitHub
# Actions `${{ ... }}` everywhere (never valid shell), Argo `{{ ... }}` in Argo documents.
_ACTIONS_EXPRESSION = re.compile(r"\$\{\{[^\n]*?\}\}")
_TEMPLATE = re.compile(r"\$?\{\{[^\n]*?\}\}")


@dataclass(frozen=True)
class ScriptText:
    """A script's text as the shell reads it, and what was done to get it."""

    scalar: Embedded  # the scalar's string, mapped to the file
    shell: Embedded  # the text the engine reads (dollars unescaped, expressions made opaque)
    expressions: tuple[tuple[int, int], ...]  # host spans of substituted expressions


@dataclass
class ScriptAnalysis:
    """Accesses, mentions and problems of every script of a file."""

    accesses: list[TextAccess] = field(default_factory=list)
    mentions: list[TextMention] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


class Scripts:
    """Reads the scripts of one file's sites (each scalar once, however often it is aliased)."""

    def __init__(self, host: str, names: frozenset[str]) -> None:
        self.host = host
        self.names = names
        self.positions = Positions(host)
        self.result = ScriptAnalysis()
        self._sources: dict[int, ScriptText] = {}
        # per site (kept with it: its id is the key): each script's launches, and the folder
        # it starts in (a GitLab job's items run in one shell: an item's `cd` moves the next)
        self._runs: dict[int, tuple[Site, list[tuple[tuple[Launch, ...], WorkingDirectory]]]] = {}
        self._done: set[int] = set()

    # What a site runs --------------------------------------------------------------------------

    def launched(self, site: Site) -> tuple[str, ...]:
        """The Python scripts the site runs: its exec form's, and its shell scripts'."""
        found: list[str | None] = []
        made = site.launch()
        if made is not None:
            found.append(made.python_script)
        for runs, _ in self._run_through(site):
            found.extend(launch.python_script for launch in runs)
        return tuple(dict.fromkeys(site.placed(s) for s in found if s is not None))

    def _run_through(self, site: Site) -> list[tuple[tuple[Launch, ...], WorkingDirectory]]:
        """Each script's launches and the folder it starts in: the folder the shell is in
        after the scripts before it in the same session."""
        from xlamigrate.kinds.shell.analysis import run_through
        from xlamigrate.kinds.shell.workdir import START_DIRECTORY

        kept = self._runs.get(id(site))
        if kept is None:
            folders: dict[int, WorkingDirectory] = {}
            runs = []
            for script in site.scripts:
                where = folders.get(script.session, START_DIRECTORY)
                made, folders[script.session] = run_through(self.source(script).shell, where)
                runs.append((made, where))
            kept = self._runs[id(site)] = (site, runs)
        return kept[1]

    # The scripts' accesses ---------------------------------------------------------------------

    def analyse(self, site: Site) -> None:
        for index, script in enumerate(site.scripts):
            if id(script.node) in self._done:
                continue
            self._done.add(id(script.node))
            source = self.source(script)
            expressions = [self.host[s:e] for s, e in source.expressions]
            if not any(name in t for name in self.names for t in (source.shell.text, *expressions)):
                continue
            runs = self._run_through(site)
            later = tuple(
                launch.python_script
                for position, (other, (made, _)) in enumerate(zip(site.scripts, runs, strict=True))
                if position > index and other.session == script.session
                for launch in made
                if launch.python_script is not None
            )
            self._analyse(site, script, source, later, runs[index][1])

    def _analyse(
        self,
        site: Site,
        script: Script,
        source: ScriptText,
        later: tuple[str, ...],
        where: WorkingDirectory,
    ) -> None:
        from xlamigrate.kinds.shell.analysis import analyse_source

        found = analyse_source(
            source.shell,
            self.names,
            may_be_empty=script.may_be_empty,
            whole=script.whole,
            later=tuple(dict.fromkeys(later)),
            where=where,
        )
        for access in found.accesses:
            placed = tuple(site.placed(s) for s in access.launched)
            access = replace(access, launched=placed) if placed else access
            self.result.accesses.append(self._checked(script, source, access))
        self.result.mentions.extend(found.mentions)
        self.result.mentions.extend(self._expression_mentions(source))
        self.result.problems.extend(found.problems)

    def _expression_mentions(self, source: ScriptText) -> list[TextMention]:
        """A flag named in a substituted expression (`${{ env.XLA_USE_BF16 }}`): for review."""
        mentions = []
        for start, end in source.expressions:
            for name in sorted(self.names):
                for match in re.finditer(rf"\b{re.escape(name)}\b", self.host[start:end]):
                    mentions.append(TextMention(name, start + match.start(), start + match.end()))
        return mentions

    def _checked(self, script: Script, source: ScriptText, access: TextAccess) -> TextAccess:
        """The access with a value that an expression fills in made unknown, and without the
        edits that would not leave the scalar reading as the engine meant."""
        if access.value_range is not None and any(
            s < access.value_range[1] and access.value_range[0] < e for s, e in source.expressions
        ):
            access = replace(access, value=FlagValue.unknown())
        if not self._keeps_the_scalar(script, source.scalar, access.removal):
            access = replace(access, removal=None)
        if not self._keeps_the_scalar(script, source.scalar, access.container):
            access = replace(access, container=None)
        return access

    def _keeps_the_scalar(self, script: Script, scalar: Embedded, edit: TextEdit | None) -> bool:
        """Whether the scalar, edited, still reads as its string with the characters the edit
        removes (or turns into `:`) gone and the rest as they were."""
        start: int = script.node.start_mark.index
        end: int = script.node.end_mark.index
        if edit is None or edit.start < start or edit.end > end:
            return True  # none, or one of the host's own (the list item, the scalar as `':'`)
        if edit.replacement not in ("", ":"):
            return True  # what the encodings let through reads back as written
        kept = [
            (char, index)
            for index, char in enumerate(scalar.text)
            if not edit.start <= scalar.start_of(index) < edit.end
        ]
        cut = next(
            (i for i, (_, index) in enumerate(kept) if scalar.start_of(index) >= edit.end),
            len(kept),
        )
        chars = [char for char, _ in kept]
        expected = "".join(chars[:cut]) + edit.replacement + "".join(chars[cut:])
        written = self.host[start : edit.start] + edit.replacement + self.host[edit.end : end]
        read = read_alone(written, scalar, flow=script.flow)
        # a script's last line break is the block's chomping to decide: no shell minds it
        return read is not None and read.rstrip("\n") == expected.rstrip("\n")

    # Texts -------------------------------------------------------------------------------------

    def source(self, script: Script) -> ScriptText:
        key = id(script.node)
        if key not in self._sources:
            self._sources[key] = self._read(script)
        return self._sources[key]

    def _read(self, script: Script) -> ScriptText:
        scalar = scalar_source(self.host, script.node, flow=script.flow)
        shell = scalar
        if script.dialect != "shell":  # the dialect names its encoding
            shell = _unescape_dollars(shell, script.dialect)
        pattern = _TEMPLATE if script.templated else _ACTIONS_EXPRESSION
        shell, expressions = _opaque_expressions(shell, pattern)
        return ScriptText(scalar, shell, expressions)


def _unescape_dollars(source: Embedded, encoding: str) -> Embedded:
    """`$$` is how compose and Kubernetes write the `$` the shell sees."""
    pieces = []
    index = 0
    text = source.text
    while index < len(text):
        width = 2 if text.startswith("$$", index) else 1
        pieces.append((text[index], source.start_of(index), source.end_of(index + width)))
        index += width
    return Embedded.mapped(
        source.host, pieces, (encoding, *source.encodings), editable=source.editable
    )


def _opaque_expressions(
    source: Embedded, pattern: re.Pattern[str]
) -> tuple[Embedded, tuple[tuple[int, int], ...]]:
    """Each expression as a variable expansion of the same length (`$___...`): the shell reads
    an unknown word where the system puts its value, and the map stays one to one."""
    matches = list(pattern.finditer(source.text))
    if not matches:
        return source, ()
    text = list(source.text)
    for match in matches:
        width = match.end() - match.start()
        text[match.start() : match.end()] = "$" + "_" * (width - 1)
    spans = tuple(source.span(match.start(), match.end()) for match in matches)
    return replace(source, text="".join(text)), spans
