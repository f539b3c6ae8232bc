"""Shell scripts (launchers, SLURM jobs): `export X=1`, `X=1 cmd` prefixes, `env X=1 cmd`,
`declare -x X=1`, plain `X=1`, `unset X` and `$X` reads, found with bashlex.

bashlex cannot parse `case`, `[[ ]]`, arithmetic or quoted here-document delimiters;
`shell_lex.prepare` rewrites those, length for length, into text it parses, and the bodies of
`case` clauses and here-documents are analysed as scripts of their own. What bashlex still
cannot parse is reported as a problem and read line by line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import bashlex  # type: ignore[import-untyped]

from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds.shell.lex import Token, lex, prepare
from xlamigrate.kinds.textaccess import TextAccess, TextAnalysis, TextEdit, line_removal
from xlamigrate.model import Access, Applicability
from xlamigrate.neuronflags import NEURON_CC_FLAGS, STOCHASTIC_ROUNDING


def _guard_parameter_expansion() -> None:
    """bashlex 0.18 loops forever on a word holding `${` with no `}` after it
    (`subst._paramexpand` searches for `}`, gets -1 and restarts the word): raise instead."""
    original = bashlex.subst._paramexpand
    if getattr(original, "xlamigrate_guard", False):
        return

    def guarded(parser: Any, string: str, index: int) -> Any:
        if string.startswith("${", index) and string.find("}", index + 2) == -1:
            raise bashlex.errors.ParsingError("bad substitution: no closing '}'", string, index)
        return original(parser, string, index)

    guarded.xlamigrate_guard = True  # type: ignore[attr-defined]
    bashlex.subst._paramexpand = guarded


_guard_parameter_expansion()

_RECIPE_VARIABLES = frozenset({NEURON_CC_FLAGS, STOCHASTIC_ROUNDING})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<append>\+?)=")
_PARAMETER = re.compile(r"\$(?P<brace>\{[#!]?)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)")
_BLANK = re.compile(r"(?:[ \t\r\n]|\\\n|#[^\n]*)*")
_SBATCH_EXPORT = re.compile(r"#SBATCH\b.*?--export[= ]\s*(?P<list>\S+)")
_EXPORT_ENTRY = re.compile(r"(?<=[=,\"'])(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>[^,\"'\s]*)")
_PYTHON = re.compile(r"python[0-9.]*")
_LAUNCHERS = frozenset({"torchrun", "deepspeed", "accelerate", "neuron_parallel_compile"})
# Commands that run the rest of their words as a command (`srun env X=1 python train.py`).
_WRAPPERS = frozenset(
    {"exec", "nohup", "command", "nice", "sudo", "srun", "mpirun", "mpiexec", "timeout"}
    | {"numactl", "taskset", "stdbuf", "xargs", "neuron_parallel_compile"}
)
_DECLARERS = frozenset({"declare", "typeset", "local", "readonly"})
_SLURM = frozenset({"srun", "sbatch", "salloc"})
_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh"})
_COMPOUNDS = frozenset({"compound", "if", "for", "while", "until", "function"})
_STATEMENTS = _COMPOUNDS | {"command", "list", "pipeline"}
_BLANKS = frozenset(" \t\n;&|(")  # what may come before a `#` that starts a comment
_SEGMENT_OPS = frozenset({";", "&", "&&", "||", "|", "|&", ";;", ";&", ";;&", "(", ")"})
_RESERVED = frozenset(
    {"then", "do", "else", "elif", "if", "while", "until", "!", "{", "}", "fi", "done", "esac"}
)
# Forms whose write lands in this shell's environment, for every command after it.
_SESSION_FORMS = frozenset({"export", "declare", "assignment"})

_HEREDOC_NOTE = " inside a here-document (in the script this one writes out)"
_DEGRADED_NOTE = " (read line by line: bashlex could not parse this part of the script)"
_SLURM_NOTE = " in a SLURM --export list (edit the list by hand)"
_STRING_NOTE = " in the command string of a `bash -c`"


def analyse(text: str, names: frozenset[str]) -> TextAnalysis:
    if not any(name in text for name in names):
        return TextAnalysis()
    analyser = _Analyser(text, names)
    analyser.region(0, len(text), _Scope(0))
    analyser.sbatch_directives()
    return TextAnalysis(analyser.result(), tuple(analyser.problems))


def render(syntax: str, name: str, value: str, append: bool = False) -> str:
    """`NAME=VALUE` for an access's assignment range; a whole statement ("statement") also
    exports it, and `append` keeps what the environment already holds. A syntax ending in
    "+single" or "+double" sits in a quoted `bash -c` string: the text is escaped for it."""
    base, _, quoting = syntax.partition("+")
    if append:
        text = f'{name}="${{{name}:-}} {_escape_double(value)}"'
    elif re.fullmatch(r"[A-Za-z0-9_./:=,+@%-]+", value):
        text = f"{name}={value}"
    else:
        text = f'{name}="{_escape_double(value)}"'
    if base == "statement":
        text = f"export {text}"
    if quoting == "double":
        return _escape_double(text)
    if quoting == "single":
        return text.replace("'", "'\\''")
    return text


def _escape_double(value: str) -> str:
    return re.sub(r'(["\\$`])', r"\\\1", value)


def literal(raw: str) -> str | None:
    """A shell word's value after quote removal; None when it expands anything."""
    out: list[str] = []
    i = 0
    while i < len(raw):
        char = raw[i]
        if char == "'":
            end = raw.find("'", i + 1)
            if end == -1:
                return None
            out.append(raw[i + 1 : end])
            i = end + 1
        elif char == '"':
            i += 1
            while i < len(raw) and raw[i] != '"':
                if raw[i] == "\\" and i + 1 < len(raw) and raw[i + 1] in '$`"\\\n':
                    out.append(raw[i + 1])
                    i += 2
                elif raw[i] in "$`":
                    return None
                else:
                    out.append(raw[i])
                    i += 1
            if i >= len(raw):
                return None
            i += 1
        elif char == "\\":
            out.append(raw[i + 1 : i + 2])
            i += 2
        elif char in "$`" or (char == "~" and i == 0):
            return None
        else:
            out.append(char)
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class _Word:
    start: int
    end: int
    raw: str
    assignment: bool  # bashlex's reading: a `NAME=VALUE` word in assignment position

    @property
    def value(self) -> str:
        """The word as the command sees it (quotes removed; the raw text if it expands)."""
        text = literal(self.raw)
        return self.raw if text is None else text


@dataclass(frozen=True)
class _Place:
    """Where a simple command sits: what removing it whole must keep intact."""

    may_be_empty: bool = True  # a top-level script, a `case` clause: no command needed
    sole: bool = True  # the only command of its list
    in_pipeline: bool = False
    prev_op: str = ""
    prev_end: int | None = None  # the end of the command before
    prev_op_end: int | None = None
    next_op: str = ""
    next_start: int | None = None  # the start of the command after


@dataclass(frozen=True)
class _Scope:
    """What every access found in one stretch of script shares."""

    script: int  # 0: the file; each here-document is a script of its own
    heredoc: bool = False
    degraded: bool = False  # after a part bashlex rejected: found without a parse
    quoting: str = ""  # "single", "double": inside the quoted string of `bash -c`

    @property
    def note(self) -> str:
        if self.heredoc:
            return _HEREDOC_NOTE
        if self.degraded:
            return _DEGRADED_NOTE
        return _STRING_NOTE if self.quoting else ""

    def syntax(self, syntax: str) -> str:
        return f"{syntax}+{self.quoting}" if self.quoting else syntax


@dataclass
class _Pending:
    """An access being built; `launched` and bare exports' values are known at the end."""

    access: TextAccess
    script: int
    bare_export: bool = False


@dataclass
class _Analyser:
    text: str
    names: frozenset[str]
    accesses: dict[tuple[str, int], _Pending] = field(default_factory=dict)
    launches: list[tuple[int, int, tuple[str, ...]]] = field(default_factory=list)
    problems: list[tuple[int | None, str]] = field(default_factory=list)
    last_script: int = 0

    # -- regions ------------------------------------------------------------------------------

    def region(self, start: int, end: int, scope: _Scope) -> None:
        """Analyses text[start:end] as a script (a file, a `case` clause, a here-document)."""
        prepared = prepare(self.text[start:end])
        for kind, a, b in prepared.opaque:
            self.scan_reads(start + a, start + b, scope, arithmetic=kind.startswith("arith"))
        current = scope
        for node, base, failure in _parts(prepared.text):
            if failure is None:
                self.visit(node, start + base, _Place(), current)
                continue
            line_start, line_end, message, where = failure
            if not current.degraded and not current.heredoc:  # a here-document may not be shell
                self.problems.append((self.line_of(start + where), message))
            current = replace(current, degraded=True)
            self.fallback(start + line_start, start + line_end, prepared.text, start, current)
        # case clauses and here-documents are parsed on their own: a failure above is not theirs
        for case in prepared.cases:
            for clause in case.clauses:
                self.region(start + clause.body[0], start + clause.body[1], scope)
        for document in prepared.heredocs:
            a, b = document.body
            self.last_script += 1
            inner = _Scope(self.last_script, heredoc=True)
            if not document.quoted:  # this shell expands the body: `$X` is its read
                self.scan_reads(start + a, start + b, inner, quotes=False)
            self.region(start + a, start + b, inner)

    def sbatch_directives(self) -> None:
        """`#SBATCH --export=ALL,X=1` lines before the first command (sbatch reads no later)."""
        offset = 0
        for line in self.text.splitlines(keepends=True):
            stripped = line.strip()
            if stripped and not stripped.startswith("#"):
                break
            match = _SBATCH_EXPORT.match(stripped)
            if match:
                column = line.index(stripped) + match.start("list")
                self.slurm_list(offset + column, match.group("list"), _Scope(0), command=None)
            offset += len(line)

    def result(self) -> tuple[TextAccess, ...]:
        values: dict[str, list[FlagValue | None]] = {}
        for pending in self.accesses.values():
            access = pending.access
            if access.kind == "write" and access.form in _SESSION_FORMS and not pending.bare_export:
                values.setdefault(access.variable, []).append(access.value)
        out = []
        for pending in sorted(self.accesses.values(), key=lambda p: (p.access.start, p.access.end)):
            access = pending.access
            if pending.bare_export:
                known = values.get(access.variable, [])
                candidates = [c for v in known if v and v.candidates for c in v.candidates]
                complete = known and all(v and v.candidates for v in known)
                access = replace(access, value=FlagValue(tuple(candidates) if complete else None))
            if access.kind == "write" and access.form in _SESSION_FORMS:
                access = replace(access, launched=self.launched_after(pending.script, access.start))
            out.append(access)
        return tuple(out)

    def launched_after(self, script: int, start: int) -> tuple[str, ...]:
        found = (
            s for sid, at, scripts in self.launches if sid == script and at > start for s in scripts
        )
        return tuple(dict.fromkeys(found))

    def line_of(self, offset: int) -> int:
        return self.text.count("\n", 0, offset) + 1

    # -- bashlex trees ------------------------------------------------------------------------

    def visit(self, node: Any, base: int, place: _Place, scope: _Scope) -> None:
        kind = node.kind
        if kind == "command":
            words = [
                _Word(
                    base + p.pos[0],
                    base + p.pos[1],
                    self.text[base + p.pos[0] : base + p.pos[1]],
                    p.kind == "assignment",
                )
                for p in node.parts
                if p.kind in ("word", "assignment")
            ]
            self.command(words, (base + node.pos[0], base + node.pos[1]), place, scope)
            for part in node.parts:
                self.inner(part, base, scope)
        elif kind == "list":
            self.sequence(node.parts, base, place, scope)
        elif kind == "pipeline":
            commands = [p for p in node.parts if p.kind != "pipe"]
            for child in commands:
                self.visit(child, base, _Place(in_pipeline=len(commands) > 1), scope)
        elif kind in _COMPOUNDS:
            for child in node.list if kind == "compound" else node.parts:
                if child.kind in _STATEMENTS:  # a body: it must keep a command
                    self.visit(child, base, _Place(may_be_empty=False), scope)
                else:
                    self.inner(child, base, scope)
            for redirect in getattr(node, "redirects", None) or []:
                self.inner(redirect, base, scope)
        else:
            self.inner(node, base, scope)

    def sequence(self, parts: Sequence[Any], base: int, place: _Place, scope: _Scope) -> None:
        """`a; b && c`: each command with the operators and commands around it."""
        items = [(index, p) for index, p in enumerate(parts) if p.kind != "operator"]

        def operator(index: int) -> Any:
            inside = 0 <= index < len(parts) and parts[index].kind == "operator"
            return parts[index] if inside else None

        for position, (index, item) in enumerate(items):
            before, after = operator(index - 1), operator(index + 1)
            previous = items[position - 1][1] if position > 0 else None
            following = items[position + 1][1] if position + 1 < len(items) else None
            item_place = _Place(
                may_be_empty=place.may_be_empty,
                sole=len(items) == 1,
                prev_op=before.op if before is not None and previous is not None else "",
                prev_end=base + previous.pos[1] if previous is not None else None,
                prev_op_end=base + before.pos[1] if before is not None else None,
                next_op=after.op if after is not None else "",
                next_start=base + following.pos[0] if following is not None else None,
            )
            self.visit(item, base, item_place, scope)

    def inner(self, node: Any, base: int, scope: _Scope) -> None:
        """Reads in words, and the commands of `$( )` and `<( )`."""
        kind = node.kind
        if kind == "parameter":
            self.scan_reads(base + node.pos[0], base + node.pos[1], scope)
            return
        if kind in ("commandsubstitution", "processsubstitution"):
            self.visit(node.command, base, _Place(), scope)
            return
        for attribute in ("parts", "output", "command", "list"):
            child = getattr(node, attribute, None)
            for item in child if isinstance(child, list) else [child]:
                if isinstance(item, bashlex.ast.node):
                    self.inner(item, base, scope)

    # -- the line-by-line fallback ------------------------------------------------------------

    def fallback(self, start: int, end: int, prepared: str, region: int, scope: _Scope) -> None:
        """The commands of a line bashlex rejected, from its words; reads from its text."""
        local = prepared[start - region : end - region]
        segment: list[Token] = []
        redirected = False
        for token in [*lex(local).tokens, Token("newline", len(local), len(local))]:
            if token.kind == "word":
                if not redirected:
                    segment.append(token)
                redirected = False
            elif token.kind == "op" and local[token.start : token.end] not in _SEGMENT_OPS:
                redirected = True  # a redirection: its target is not an argument
            elif token.kind != "comment":
                self.fallback_command(segment, start, scope)
                segment = []
        self.scan_reads(start, end, scope)

    def fallback_command(self, segment: list[Token], offset: int, scope: _Scope) -> None:
        words = [
            _Word(
                offset + t.start,
                offset + t.end,
                self.text[offset + t.start : offset + t.end],
                False,
            )
            for t in segment
        ]
        while words and words[0].raw in _RESERVED:
            words.pop(0)
        count = 0
        while count < len(words) and _ASSIGNMENT.match(words[count].raw):
            count += 1
        words = [replace(w, assignment=i < count) for i, w in enumerate(words)]
        if words:
            self.command(words, (words[0].start, words[-1].end), _Place(), scope)

    # -- commands -----------------------------------------------------------------------------

    def command(
        self, words: list[_Word], span: tuple[int, int], place: _Place, scope: _Scope
    ) -> None:
        """The accesses of one simple command."""
        ctx = _Command(self, words, span, place, scope)
        count = 0
        while count < len(words) and words[count].assignment:
            count += 1
        prefixes, rest = words[:count], words[count:]
        if not rest:
            ctx.assignments(prefixes)
            return
        scripts = _launched(rest)
        self.launches.append((scope.script, rest[0].start, scripts))
        ctx.prefixes(prefixes, rest[0], scripts)
        name = rest[0].value.rsplit("/", 1)[-1]
        minus = "".join(w.value[1:] for w in rest[1:] if w.value.startswith("-"))
        plus = "".join(w.value[1:] for w in rest[1:] if w.value.startswith("+"))
        if name == "export":  # `export -n X` takes X out of the environment
            ctx.declaration(rest[0], rest[1:], "export", exported="n" not in minus)
        elif name in _DECLARERS:
            exported = False if "x" in plus else True if "x" in minus else None
            ctx.declaration(rest[0], rest[1:], "declare", exported=exported)
        elif name == "unset":
            ctx.unset(rest[0], rest[1:])
        elif name == "env" or name in _WRAPPERS:
            ctx.env(rest)
        if name in _SLURM:
            ctx.slurm(rest)
        string = _shell_string(rest)
        if string is not None:
            start, end, quoting = string
            self.region(start, end, replace(scope, quoting=quoting))

    def add(self, access: TextAccess, scope: _Scope, bare_export: bool = False) -> None:
        if access.variable in self.names:
            key = (access.kind, access.start)
            self.accesses.setdefault(key, _Pending(access, scope.script, bare_export))

    def scan_reads(
        self,
        start: int,
        end: int,
        scope: _Scope,
        *,
        quotes: bool = True,
        arithmetic: bool = False,
    ) -> None:
        """`$X`, `${X...}` (and in arithmetic, a bare `X`) in text[start:end]; single-quoted
        text and comments are skipped when `quotes` (not in a here-document body)."""
        text = self.text
        i = start
        in_double = False
        while i < end:
            char = text[i]
            if char == "\\":
                i += 2
                continue
            if quotes and char == "'" and not in_double:
                close = text.find("'", i + 1)
                i = end if close == -1 else close + 1
                continue
            if quotes and char == '"':
                in_double = not in_double
            elif (
                quotes and char == "#" and not in_double and (i == start or text[i - 1] in _BLANKS)
            ):
                close = text.find("\n", i)
                i = end if close == -1 else close
                continue
            elif char == "$" or (arithmetic and _word_start(text, i, start)):
                match = (_PARAMETER if char == "$" else _NAME).match(text, i)
                if match is not None:
                    name = match.group("name") if char == "$" else match.group()
                    if name in self.names:
                        braced = char == "$" and match.group("brace")
                        stop = _brace_end(text, i + 1, end) if braced else match.end()
                        self.add(_read(name, i, stop, scope.note), scope)
                    i = match.end()
                    continue
            i += 1

    def slurm_list(
        self, start: int, raw: str, scope: _Scope, command: tuple[str, ...] | None
    ) -> None:
        """`--export=ALL,X=1,...`: each flag entry is a write that needs a hand edit."""
        for match in _EXPORT_ENTRY.finditer(raw):
            value = literal(match.group("value"))
            self.add(
                TextAccess(
                    variable=match.group("name"),
                    kind="write",
                    form="slurm-export",
                    value=FlagValue(None if value is None else (value,)),
                    start=start + match.start(),
                    end=start + match.end(),
                    launched=command or (),
                    note=_SLURM_NOTE,
                    applicability="manual",
                ),
                scope,
            )


@dataclass
class _Command:
    """Turns one simple command's words into accesses."""

    analyser: _Analyser
    words: list[_Word]
    span: tuple[int, int]
    place: _Place
    scope: _Scope

    @property
    def legacy(self) -> frozenset[str]:
        return self.analyser.names - _RECIPE_VARIABLES

    def applicability(self) -> Applicability | None:
        return "unsafe" if self.scope.degraded else None

    def write(
        self,
        word: _Word,
        form: str,
        removal: TextEdit | None,
        syntax: str,
        launched: tuple[str, ...] = (),
        container: TextEdit | None = None,
    ) -> None:
        match = _ASSIGNMENT.match(word.raw)
        if match is None:
            return
        raw_value = word.raw[match.end() :]
        value = None if match.group("append") or raw_value.startswith("(") else literal(raw_value)
        self.analyser.add(
            TextAccess(
                variable=match.group("name"),
                kind="write",
                form=form,
                value=FlagValue(None if value is None else (value,)),
                start=word.start,
                end=word.end,
                assignment=(word.start, word.end),
                value_range=(word.start + match.end(), word.end),
                removal=removal,
                container=container,
                syntax=self.scope.syntax(syntax),
                launched=launched,
                note=self.scope.note,
                applicability=self.applicability(),
            ),
            self.scope,
        )

    def other(
        self,
        word: _Word,
        kind: Access,
        form: str,
        removal: TextEdit | None,
        name_start: int | None = None,
        container: TextEdit | None = None,
    ) -> None:
        """A bare `export X` (a write of what X holds) or an `unset X`."""
        start = word.start if name_start is None else name_start
        name = self.analyser.text[start : word.end]
        self.analyser.add(
            TextAccess(
                variable=name,
                kind=kind,
                form=form,
                value=FlagValue(None) if kind == "write" else None,
                start=start,
                end=word.end,
                assignment=(start, word.end) if kind == "write" else None,
                removal=removal,
                container=container,
                syntax=self.scope.syntax(form),
                note=self.scope.note,
                applicability=self.applicability(),
            ),
            self.scope,
            bare_export=kind == "write",
        )

    def container(self, group: list[_Word]) -> TextEdit | None:
        """The whole command, for when every word of `group` (all accesses) is removed."""
        if len(group) > 1 and all(self.is_access(w) for w in group):
            return self.drop_command()
        return None

    # -- the forms ----------------------------------------------------------------------------

    def assignments(self, words: list[_Word]) -> None:
        """`X=1` alone (or `A=1 X=1`): shell variables, exported when they already were."""
        container = self.container(words)
        removals = self.word_removals(words, prefer_after=False)
        for index, word in enumerate(words):
            removal = self.drop_command() if len(words) == 1 else removals.get(index)
            alone = len(words) == 1 and word.raw.split("=")[0] in self.legacy
            syntax = "statement" if alone else "assignment"
            self.write(word, "assignment", removal, syntax, container=container)

    def word_removals(self, words: list[_Word], prefer_after: bool) -> dict[int, TextEdit]:
        """Removals for the access words among `words`, each taking the blanks on one side
        (after it when `prefer_after` or it leads, else before), never blanks another took."""
        taken: set[int] = set()  # blank k lies between words k and k + 1
        removals = {}
        for index, word in enumerate(words):
            if not self.is_access(word):
                continue
            after = index if index + 1 < len(words) and index not in taken else None
            before = index - 1 if index > 0 and index - 1 not in taken else None
            first, second = (after, before) if prefer_after or index == 0 else (before, after)
            gap = first if first is not None else second
            if gap is None:
                removals[index] = TextEdit(word.start, word.end, "")
                continue
            taken.add(gap)
            if gap == index:
                removals[index] = TextEdit(word.start, words[index + 1].start, "")
            else:
                removals[index] = TextEdit(words[index - 1].end, word.end, "")
        return removals

    def prefixes(self, prefixes: list[_Word], command: _Word, scripts: tuple[str, ...]) -> None:
        removals = self.word_removals([*prefixes, command], prefer_after=True)
        for index, word in enumerate(prefixes):
            self.write(word, "prefix", removals.get(index), "prefix", scripts)

    def declaration(
        self, keyword: _Word, arguments: list[_Word], form: str, exported: bool | None
    ) -> None:
        """`export`/`declare` arguments: `X=1` writes; a bare `X` exported (True) writes what X
        holds, unexported (False: `export -n X`, `declare +x X`) deletes it for children."""
        if any(w.value.startswith("-") and "f" in w.value for w in arguments):
            return  # functions, not variables
        names = [w for w in arguments if not w.value.startswith(("-", "+"))]
        container = self.container(names)
        removals = self.word_removals([keyword, *arguments], prefer_after=False)
        for word in names:
            index = arguments.index(word) + 1
            removal = self.drop_command() if len(names) == 1 else removals.get(index)
            if _ASSIGNMENT.match(word.raw):
                self.write(word, form, removal, form, container=container)
            elif exported is not None and _NAME.fullmatch(word.raw):
                kind: Access = "write" if exported else "delete"
                self.other(word, kind, form, removal, container=container)

    def unset(self, keyword: _Word, arguments: list[_Word]) -> None:
        if any(w.value.startswith("-") and "f" in w.value for w in arguments):
            return  # functions
        names = [w for w in arguments if _NAME.fullmatch(w.raw)]
        container = self.container(names)
        removals = self.word_removals([keyword, *arguments], prefer_after=False)
        for word in names:
            removal = (
                self.drop_command() if len(names) == 1 else removals.get(arguments.index(word) + 1)
            )
            self.other(word, "delete", "unset", removal, container=container)

    def env(self, words: list[_Word]) -> None:
        """`env [-i] [-u X] X=1 cmd`, also after a wrapper (`srun ... env X=1 python ...`)."""
        start = next((i for i, w in enumerate(words) if w.value.rsplit("/", 1)[-1] == "env"), None)
        if start is None:
            return

        def drop(first: int, last: int) -> TextEdit:
            if last + 1 < len(words):
                return TextEdit(words[first].start, words[last + 1].start, "")
            return TextEdit(words[first - 1].end, words[last].end, "")

        removals = self.word_removals(words, prefer_after=True)
        index = start + 1
        while index < len(words):
            word = words[index]
            value = word.value
            if value in ("-u", "--unset") and index + 1 < len(words):
                if _NAME.fullmatch(words[index + 1].raw):
                    self.other(words[index + 1], "delete", "env-command", drop(index, index + 1))
                index += 2
            elif value.startswith(("-u", "--unset=")):
                name_start = word.start + (len("--unset=") if value.startswith("--") else 2)
                self.other(word, "delete", "env-command", drop(index, index), name_start)
                index += 1
            elif value in ("-C", "--chdir", "-S", "--split-string"):
                index += 2
            elif value.startswith("-"):
                index += 1
            elif _ASSIGNMENT.match(word.raw):
                scripts = _launched(words[index + 1 :])
                self.write(word, "env-command", removals.get(index), "env-command", scripts)
                index += 1
            else:
                break

    def slurm(self, words: list[_Word]) -> None:
        scripts = _launched(words)
        for index, word in enumerate(words):
            if word.raw.startswith("--export="):
                self.analyser.slurm_list(word.start, word.raw, self.scope, scripts)
            elif word.raw == "--export" and index + 1 < len(words):
                following = words[index + 1]
                self.analyser.slurm_list(
                    following.start - 1, "=" + following.raw, self.scope, scripts
                )

    def is_access(self, word: _Word) -> bool:
        """A word that names a tracked variable (`X=1`, or a bare `X`)."""
        match = _ASSIGNMENT.match(word.raw)
        return (match.group("name") if match else word.raw) in self.analyser.names

    # -- removing a whole command -------------------------------------------------------------

    def drop_command(self) -> TextEdit | None:
        """Removes the command so the script stays valid: its lines when it is alone on them,
        its operator with it in a list, `:` where a body must keep a command."""
        text = self.analyser.text
        start, end = self.span
        place = self.place
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", end)
        line_end = len(text) if line_end == -1 else line_end
        before, after = text[line_start:start], text[end:line_end]
        alone = not before.strip() and re.fullmatch(r"[ \t\r]*;?[ \t\r]*(#.*)?", after) is not None
        if self.scope.degraded:
            if alone and _may_drop_line(text, line_start, line_end):
                return line_removal(text, start, end + len(after.split("#")[0].rstrip()))
            return TextEdit(start, end, ":")
        if place.in_pipeline:
            return None
        if alone:
            if place.sole and not place.may_be_empty:
                return TextEdit(start, end, ":")
            return line_removal(text, start, end + len(after.split("#")[0].rstrip()))
        if place.sole:
            if not place.may_be_empty:
                return TextEdit(start, end, ":")
            stop = end
            while stop < len(text) and text[stop] in " \t":
                stop += 1
            return TextEdit(start, stop, "")
        if place.prev_op == "&&" and place.prev_end is not None:
            return TextEdit(place.prev_end, end, "")
        last_on_line = place.next_start is None or place.next_op == "\n"
        if last_on_line and place.prev_op == ";" and place.prev_end is not None:
            return TextEdit(place.prev_end, end, "")
        if last_on_line and place.prev_op == "&" and place.prev_op_end is not None:
            return TextEdit(place.prev_op_end, end, "")
        opens = place.prev_op in ("", ";", "\n", "&")
        if opens and place.next_op in (";", "&&") and place.next_start is not None:
            return TextEdit(start, place.next_start, "")
        return TextEdit(start, end, ":")


def _shell_string(words: Sequence[_Word]) -> tuple[int, int, str] | None:
    """The command string of `bash -c '...'` (also after a wrapper, `srun bash -c "..."`),
    when its text is what the shell it starts reads: single-quoted, or double-quoted without
    escapes or backquotes (`$X` there is expanded first, and is this shell's read)."""
    for index, word in enumerate(words):
        if word.value.rsplit("/", 1)[-1] not in _SHELLS:
            continue
        for position in range(index + 1, len(words)):
            option = words[position].value
            if not option.startswith("-") or option.startswith("--"):
                return None
            if "c" in option and position + 1 < len(words):
                raw = words[position + 1]
                inner = raw.raw[1:-1]
                if len(raw.raw) < 2 or raw.raw[0] != raw.raw[-1]:
                    return None
                if raw.raw[0] == "'" and "'" not in inner:
                    return raw.start + 1, raw.end - 1, "single"
                if raw.raw[0] == '"' and not any(c in inner for c in '"\\`'):
                    return raw.start + 1, raw.end - 1, "double"
                return None
        return None
    return None


def _may_drop_line(text: str, line_start: int, line_end: int) -> bool:
    """Without a parse: a line may go unless it looks like the only command of a body."""
    before = text[:line_start].rstrip().split("\n")[-1].split("#")[0].strip()
    after = text[line_end:].lstrip().split("\n")[0].strip()
    opener = re.search(r"(?:^|[\s;])(?:then|do|else|in|\{|\()$", before) is not None
    closer = re.match(r"(?:fi|done|elif|else|esac|\}|\)|;;)(?:\s|;|$)", after) is not None
    return not (opener and closer)


def _parts(
    text: str,
) -> Iterator[tuple[Any, int, tuple[int, int, str, int] | None]]:
    """bashlex's top-level commands, one at a time, so one it rejects costs only its line:
    (node, offset, None) or (None, line start, (line start, line end, message, where))."""
    index = 0
    while True:
        index = _BLANK.match(text, index).end()  # type: ignore[union-attr]
        if index >= len(text):
            return
        try:
            node = bashlex.parser._parser(text[index:]).parse()
        except Exception as error:  # bashlex raises ParsingError, NotImplementedError and more
            line_end = index
            while True:
                newline = text.find("\n", line_end)
                line_end = len(text) if newline == -1 else newline
                if newline == -1 or not text[:line_end].endswith("\\"):
                    break
                line_end += 1
            where = index + getattr(error, "position", 0)
            message = getattr(error, "message", None) or str(error) or type(error).__name__
            message = re.sub(r"^type = \{([^}]*)\}.*", r"`\1` is not supported", message)
            yield (
                None,
                index,
                (index, line_end, f"bash syntax bashlex cannot read: {message}", where),
            )
            index = line_end + 1
            continue
        if not isinstance(node, bashlex.ast.node):
            return
        yield node, index, None
        index += node.pos[1] + 1


def _launched(words: Sequence[_Word]) -> tuple[str, ...]:
    """The `.py` script a command runs: `python train.py`, `torchrun ... train.py`,
    `python -m torch.distributed.run ... train.py`, `neuron_parallel_compile python train.py`."""
    launcher = False
    for index, word in enumerate(words):
        value = word.value
        if "$" in word.raw or not value:
            continue
        if not launcher:
            if index == 0 and value.endswith(".py"):
                return (value,)
            name = value.rsplit("/", 1)[-1]
            launcher = _PYTHON.fullmatch(name) is not None or name in _LAUNCHERS
            continue
        if value.startswith("-") or "=" in value:
            continue
        if value.endswith(".py"):
            return (value,)
    return ()


def _read(name: str, start: int, end: int, note: str) -> TextAccess:
    return TextAccess(
        variable=name, kind="read", form="read", value=None, start=start, end=end, note=note
    )


def _brace_end(text: str, i: int, limit: int) -> int:
    depth = 0
    while i < limit:
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return limit


def _word_start(text: str, i: int, start: int) -> bool:
    """Whether text[i] may begin a name in arithmetic (not `$X`, not the middle of `AX`)."""
    return i == start or not (text[i - 1].isalnum() or text[i - 1] in "_$")
