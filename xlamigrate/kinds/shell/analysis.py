"""The one shell engine: the flag accesses of a shell script, on tree-sitter-bash.

Writes (`export X=1`, `X=1 cmd` prefixes, `env X=1 cmd`, `declare -x`, plain `X=1`,
`mpirun -x X=1`, SLURM `--export` lists), deletes (`unset X`, `env -u X`, `export -n X`) and
reads (`$X`, `${X:-0}`, arithmetic, `[[ -v X ]]`), each with the edit that removes it so the script
stays valid. Here-documents and the strings of `bash -c`, `sbatch --wrap`, `ssh HOST CMD` are
scripts of their own. Every shell text xlamigrate reads (a .sh file, a RUN instruction, a YAML
`run:` block, a notebook `%%bash` cell, a Python `os.system` string) comes here as an `Embedded`
text, and the accesses come back in the host file's offsets. What tree-sitter cannot read is
skipped locally: edits next to it are refused, and only a script bash itself rejects is an error.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from xlamigrate.flagvalue import FlagValue
from xlamigrate.kinds.embedded import Embedded
from xlamigrate.kinds.launch import Launch, launch, program_named
from xlamigrate.kinds.shell.commands import RECIPE_VARIABLES, Command, Place, Word, prefix_count
from xlamigrate.kinds.shell.ownfolder import OwnFolder
from xlamigrate.kinds.shell.syntax import (
    Node,
    Parsed,
    bash_rejects,
    error_nodes,
    parse,
    rejected_at,
    walk,
)
from xlamigrate.kinds.shell.words import literal, string_text
from xlamigrate.kinds.shell.workdir import MOVERS, START_DIRECTORY, WorkingDirectory
from xlamigrate.kinds.textaccess import (
    Branch,
    LaunchSite,
    Problem,
    TextAccess,
    TextAnalysis,
    TextEdit,
    TextMention,
    exclusive,
)

_SBATCH_EXPORT = re.compile(r"#SBATCH\b.*?--export[= ]\s*(?P<list>\S+)")
_EXPORT_ENTRY = re.compile(r"(?<=[=,\"'])(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>[^,\"'\s]*)")
_DECLARERS = frozenset({"declare", "typeset", "local", "readonly"})
_SLURM = frozenset({"srun", "sbatch", "salloc"})
_PRINTERS = frozenset({"echo", "printf"})  # a flag's name in what they print is only text
_STATEMENTS = frozenset(
    {
        "command", "declaration_command", "unset_command", "variable_assignment",
        "variable_assignments", "list", "pipeline", "subshell", "compound_statement",
        "if_statement", "case_statement", "for_statement", "c_style_for_statement",
        "while_statement", "function_definition", "redirected_statement", "negated_command",
        "test_command",
    }
)  # fmt: skip
_SIMPLE = frozenset(
    {"command", "declaration_command", "unset_command"}
    | {"variable_assignment", "variable_assignments"}
)
_KEYWORD_WORDS = frozenset({"export", "declare", "typeset", "local", "readonly", "unset"})
_SEPARATORS = frozenset({";", "&", ";;", ";&", ";;&", "&&", "||", "|", "|&"})
# Where a bare name is a variable's value: arithmetic.
_ARITHMETIC = frozenset({"arithmetic_expansion", "c_style_for_statement"})
# Forms whose write lands in this shell's environment, for every command after it.
_SESSION_FORMS = frozenset({"export", "declare", "assignment"})

_HEREDOC_NOTE = " inside a here-document (in the script this one writes out)"
_SLURM_NOTE = " in a SLURM --export list (edit the list by hand)"
_STRING_NOTE = " in the command string of `{program}`"
_REMOTE_NOTE = " in a command run on another machine (`{program}`)"


@dataclass(frozen=True)
class ShellAnalysis:
    """A shell text's accesses (host offsets), what it launches, and what it names otherwise."""

    accesses: tuple[TextAccess, ...] = ()
    mentions: tuple[TextMention, ...] = ()
    problems: tuple[Problem, ...] = ()
    launches: tuple[Launch, ...] = ()
    sites: tuple[LaunchSite, ...] = ()  # where each Python script is launched (host offsets)

    def text_analysis(self) -> TextAnalysis:
        return TextAnalysis(self.accesses, self.problems, self.mentions, self.sites)


def analyse(text: str, names: frozenset[str]) -> TextAnalysis:
    """A shell file's accesses."""
    if not any(name in text for name in names):
        return TextAnalysis()
    return analyse_source(Embedded.whole(text), names, own_folder=True).text_analysis()


def analyse_source(
    source: Embedded,
    names: frozenset[str],
    *,
    note: str = "",
    may_be_empty: bool = True,
    whole: TextEdit | None = None,
    later: tuple[str, ...] = (),
    own_folder: bool = False,
    where: WorkingDirectory = START_DIRECTORY,
) -> ShellAnalysis:
    """The accesses of the shell text `source` (a file, or a text inside another file).
    `whole` removes the construct that holds the text, for when its only command goes; without
    it, a text that must keep a command (`may_be_empty` False) keeps a `:`. `later`: the Python
    scripts that texts run after this one in the same shell (the next items of a GitLab
    `script:` list), which see the variables this text leaves set. `own_folder`: the text is a
    script file of its own, whose `$(dirname "$0")` is the file's folder. `where`: the folder
    the shell is in when the text starts (after a GitLab job's earlier items)."""
    analyser = _Analyser(source.host, names, later=later)
    top = _Script(source, 0, note, may_be_empty, whole, own_folder=own_folder, where=where)
    analyser.script(top, sbatch=True)
    return analyser.result()


def launches(source: Embedded) -> tuple[Launch, ...]:
    """What every command of the shell text `source` runs, whether or not it names a flag (the
    scripts a Dockerfile's CMD starts): its launches, nothing else analysed."""
    return run_through(source)[0]


def run_through(
    source: Embedded, where: WorkingDirectory = START_DIRECTORY
) -> tuple[tuple[Launch, ...], WorkingDirectory]:
    """The launches of the shell text `source` run from `where`, and the folder the shell is
    in after it (the next item of a GitLab `script:` list starts there)."""
    analyser = _Analyser(source.host, frozenset(), every_script=True)
    analyser.script(_Script(source, 0, where=where))
    return analyser.result().launches, analyser.ended or where


def _remote_reader(redirect: Node) -> str | None:
    """The program that reads a here-document as a command line to run on another machine
    (`ssh HOST <<EOF`), if that is what reads it."""
    statement = redirect.parent
    command = statement
    if statement is not None and statement.type == "redirected_statement":
        command = statement.child_by_field_name("body")
    if command is None or command.type != "command":
        return None
    name = command.child_by_field_name("name")
    if name is None or name.text is None:
        return None
    program = os.path.basename(name.text.decode("utf-8", "replace"))
    known = program_named(program)
    return program if known is not None and known.role == "remote" else None


@dataclass(frozen=True)
class _Script:
    """One stretch of shell read as a script: the text, a here-document, a `bash -c` string."""

    source: Embedded
    id: int
    note: str = ""
    may_be_empty: bool = True
    whole: TextEdit | None = None  # a host edit: removes what holds the script
    # Whether a syntax error here is the file's problem: a here-document may hold another
    # language (a Python script `python3 <<EOF` reads), so its errors only refuse edits.
    must_parse: bool = True
    branch: Branch = ()  # the arms around the command that holds it
    own_folder: bool = False  # a script file of its own: `$(dirname "$0")` is its folder
    where: WorkingDirectory = START_DIRECTORY  # the folder it starts in (`cd x && bash -c`)


@dataclass
class _Pending:
    access: TextAccess
    script: int
    local_start: int
    bare_export: bool = False


@dataclass
class _Analyser:
    host: str
    names: frozenset[str]
    accesses: dict[tuple[str, int], _Pending] = field(default_factory=dict)
    launches: list[tuple[int, int, Launch, LaunchSite | None]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    # host ranges where a flag's name is only text: comments, what echo and printf print
    quiet: list[tuple[int, int]] = field(default_factory=list)
    pending: list[_Script] = field(default_factory=list)
    last_script: int = 0
    top: Embedded | None = None
    seen: set[tuple[int, int]] = field(default_factory=set)  # nested scripts already queued
    every_script: bool = False  # read scripts that name no flag too (for their launches)
    later: tuple[str, ...] = ()  # scripts launched after the text, in the same shell
    # every shell variable's assignments in the text: (literal value or None, arms around it)
    assigned: dict[str, list[tuple[str | None, Branch]]] = field(default_factory=dict)
    ended: WorkingDirectory | None = None  # the folder the shell is in after the text

    def script(self, script: _Script, sbatch: bool = False) -> None:
        """Analyses a script, then the scripts found inside it (here-documents, strings)."""
        self.pending.append(script)
        if self.top is None:
            self.top = script.source
        while self.pending:
            current = self.pending.pop(0)
            ScriptReader(self, current).analyse(sbatch and current.id == 0)

    def new_script(
        self,
        source: Embedded,
        note: str,
        may_be_empty: bool = True,
        whole: TextEdit | None = None,
        must_parse: bool = True,
        branch: Branch = (),
        where: WorkingDirectory | None = None,
    ) -> None:
        key = (source.start_of(0), source.end_of(len(source.text)))
        if key in self.seen:
            return
        self.seen.add(key)
        self.last_script += 1
        script = _Script(
            source, self.last_script, note, may_be_empty, whole, must_parse, branch,
            where=where or START_DIRECTORY,
        )  # fmt: skip
        self.pending.append(script)

    def add(
        self, access: TextAccess, script: int, local_start: int, bare_export: bool = False
    ) -> None:
        if access.variable in self.names:
            key = (access.kind, access.start)
            self.accesses.setdefault(key, _Pending(access, script, local_start, bare_export))

    def result(self) -> ShellAnalysis:
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
            if access.value_from is not None and access.value and access.value.candidates is None:
                access = replace(access, value=self.copied_value(access.value_from))
            if access.kind == "write" and access.form in _SESSION_FORMS and not access.launched:
                access = replace(access, launched=self.launched_after(pending))
            out.append(access)
        accesses = tuple(out)
        return ShellAnalysis(
            accesses,
            self.mentions(accesses),
            tuple(self.problems),
            tuple(launch for _, _, launch, _ in self.launches),
            tuple(site for _, _, _, site in self.launches if site is not None),
        )

    def copied_value(self, name: str) -> FlagValue:
        """The values a shell variable may hold where the text sets it: its literal assignments,
        where one is unconditional (a default before a switch) and every one is a literal;
        else unknown (it may come from the environment)."""
        assigned = self.assigned.get(name, [])
        values = [value for value, _ in assigned]
        if not assigned or None in values or all(branch for _, branch in assigned):
            return FlagValue(None)
        return FlagValue(tuple(dict.fromkeys(v for v in values if v is not None)))

    def launched_after(self, pending: _Pending) -> tuple[str, ...]:
        """The scripts launched after a session write, in the same script, in an arm that can
        run with it."""
        found = (
            site.script
            for script, at, _, site in self.launches
            if script == pending.script
            and at > pending.local_start
            and site is not None
            and not site.captured
            and not exclusive(pending.access.branch, site.branch)
        )
        later = self.later if pending.script == 0 else ()
        return tuple(dict.fromkeys(s for s in (*found, *later) if s is not None))

    def mentions(self, accesses: Sequence[TextAccess]) -> tuple[TextMention, ...]:
        """Flag names in the text that no access accounts for (a Python one-liner, a config
        file a here-document writes, an `echo`): reported so nothing slips through."""
        if self.top is None:
            return ()
        text = self.top.text
        found = []
        covered = [(a.start, a.end) for a in accesses]
        for name in sorted(self.names - RECIPE_VARIABLES):
            for match in re.finditer(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text):
                start, end = self.top.span(match.start(), match.end())
                inside = any(s <= start and end <= e for s, e in (*covered, *self.quiet))
                if not inside:
                    found.append(TextMention(name, start, end))
        return tuple(sorted(found, key=lambda m: m.start))


class ScriptReader:
    """Reads one script's tree: its statements, and the reads anywhere in it."""

    def __init__(self, analyser: _Analyser, script: _Script) -> None:
        self.analyser = analyser
        self.script = script
        self.source = script.source
        self.parsed: Parsed = parse(script.source.text)
        self.text = self.parsed.text
        self.broken: list[tuple[int, int, int]] = []  # top-level statements with an error
        self.arms: list[tuple[int, int]] = list(script.branch)
        self.capturing = 0  # inside how many command substitutions (`$(...)`, backquotes)
        self.folder: OwnFolder | None = None  # read on the first word that expands something
        self.where = script.where  # the folder the shell is in (`cd`, `pushd`, `popd`)
        # per conditional construct being read: the folder it started in, and its arms' ends
        self.arm_folders: list[tuple[WorkingDirectory, list[WorkingDirectory]]] = []

    @property
    def branch(self) -> Branch:
        """The conditional arms around the statement being read (host offsets)."""
        return tuple(self.arms)

    def under(self, construct: Node, arm: Node) -> _Arm:
        return _Arm(
            self,
            (
                self.source.start_of(self.parsed.start(construct)),
                self.source.start_of(self.parsed.start(arm)),
            ),
        )

    def analyse(self, sbatch: bool) -> None:
        names = self.analyser.names
        if not self.analyser.every_script and not any(name in self.text for name in names):
            return
        root = self.parsed.root
        if self.analyser.names:
            self.check_errors(root)
        for node in walk(root):
            if node.type == "comment":
                self.analyser.quiet.append(self.span(node))
        self.body(root, may_be_empty=self.script.may_be_empty, top=True)
        self.reads(root)
        if sbatch:
            self.sbatch_directives()
        if self.script.id == 0:
            self.analyser.ended = self.where

    # -- errors -------------------------------------------------------------------------------

    def check_errors(self, root: Node) -> None:
        errors = error_nodes(root)
        if not errors:
            return
        for statement in root.children:
            if statement.has_error or statement.is_missing:
                first = next(n for n in walk(statement) if n.is_error or n.is_missing)
                line = self.host_line(self.parsed.start(first))
                self.broken.append((self.parsed.start(statement), self.parsed.end(statement), line))
        if not self.script.must_parse:
            return
        try:
            rejected = bash_rejects(self.text)
        except OSError:  # no bash here (or it hung): tree-sitter's word stands
            first = errors[0]
            message = f"tree-sitter-bash cannot read `{self.parsed.raw(first)[:40]}`"
            if first.is_missing:  # (a token it recovered around: it has no text)
                message = f"tree-sitter-bash finds `{first.type}` missing"
            self.analyser.problems.append(
                self.host_problem(self.parsed.start(first), f"bash syntax: {message}")
            )
            return
        if rejected is not None:  # bash's line and words; where on that line, as it says
            line, message = rejected
            offset = _line_offset(self.text, line)
            at = rejected_at(self.text, offset, message)
            if at is None:  # else where tree-sitter's first error on that line starts
                end = _line_offset(self.text, line + 1)
                starts = [self.parsed.start(node) for node in errors]
                at = next((start for start in starts if offset <= start < end), None)
            if at is None:
                problem = Problem(self.host_line(offset), f"bash: {message}")
            else:
                problem = self.host_problem(at, f"bash: {message}")
            self.analyser.problems.append(problem)

    def host_problem(self, offset: int, message: str) -> Problem:
        """`message` about the text at `offset`, placed in the host file."""
        host, at = self.analyser.host, self.source.start_of(offset)
        return Problem(host.count("\n", 0, at) + 1, message, at - host.rfind("\n", 0, at))

    def host_line(self, offset: int) -> int:
        host_offset = self.source.start_of(offset)
        return self.analyser.host.count("\n", 0, host_offset) + 1

    def error_line(self, start: int) -> int | None:
        """The line of the syntax error in the top-level statement holding `start`, if any."""
        for statement_start, statement_end, line in self.broken:
            if statement_start <= start < statement_end:
                return line
        return None

    # -- statements ---------------------------------------------------------------------------

    def body(self, parent: Node, may_be_empty: bool, top: bool = False) -> None:
        """The statements directly in `parent`, run by run between its keywords."""
        run: list[Node] = []
        for child in parent.children:
            if child.type in _STATEMENTS or child.type in _SEPARATORS or child.type == "comment":
                run.append(child)
            elif child.type == "ERROR":
                self.sequence(run, may_be_empty, top)
                run = []
                self.body(child, may_be_empty=True, top=top)
            else:
                self.sequence(run, may_be_empty, top)
                run = []
                self.nested(child)
        self.sequence(run, may_be_empty, top)

    def nested(self, node: Node) -> None:
        """Bodies inside a keyword's clause (do groups, elif/else clauses, case items...)."""
        kind = node.type
        if kind in ("else_clause", "elif_clause") and node.parent is not None:
            outer = self.arms.pop() if self.arms else None  # the `then` arm of the same `if`
            self.next_arm()
            with self.under(node.parent, node):
                self.body(node, may_be_empty=False)
            if outer is not None:
                self.arms.append(outer)
        elif kind == "do_group":
            self.body(node, may_be_empty=False)
        elif kind == "case_item" and node.parent is not None:
            self.next_arm()
            with self.under(node.parent, node):
                self.body(node, may_be_empty=True)
        elif kind == "heredoc_body":
            return
        else:
            for child in node.children:
                if child.type in _STATEMENTS:
                    self.statement(child, Place(may_be_empty=False))
                elif child.child_count:
                    self.nested(child)
            self.expansions(node)

    def sequence(self, run: list[Node], may_be_empty: bool, top: bool) -> None:
        """`a; b && c`: each command with the operators and commands around it."""
        items: list[tuple[Node, str]] = []  # (statement, the operator before it)
        operator = ""
        for node in run:
            if node.type == "comment":
                continue
            if node.type in _SEPARATORS:
                operator = node.type
                continue
            for item, op in self.flatten(node):
                items.append((item, op or operator or ("\n" if items else "")))
                operator = ""
        chain: Node | None = None  # the first command of the current `a && b || c` chain
        decides = False  # whether the chain so far chooses what runs next (a test, an `||`)
        moved: str | None = None  # a move of the folder the chain makes only in some cases
        for index, (item, before) in enumerate(items):
            if before not in ("&&", "||") or chain is None:
                if moved is not None:
                    self.where = self.where.unknown(moved)
                chain, decides, moved = item, False, None
            elif before == "||":
                decides = True
            previous = items[index - 1][0] if index else None
            following = items[index + 1] if index + 1 < len(items) else None
            after = following[1] if following else self.trailing_operator(item, run)
            place = Place(
                may_be_empty=may_be_empty,
                sole=len(items) == 1,
                top=top,
                prev_op=before if previous is not None else "",
                prev_end=self.parsed.end(previous) if previous is not None else None,
                prev_op_end=self.operator_end(previous, item) if previous is not None else None,
                next_op=after,
                next_start=self.parsed.start(following[0]) if following else None,
            )
            if chain is item or not decides:  # `cd dir && export X=1`: a failure ends the run
                self.statement(item, place)
            else:  # `[[ $P == bf16 ]] && export X=1`: runs in the configurations the test picks
                where = self.where
                with self.under(chain, chain):
                    self.statement(item, place)
                if self.where != where and moved is None:
                    line = self.host_line(self.parsed.start(item))
                    command = " ".join(self.parsed.raw(item).split())
                    moved = f"`{command}` at line {line} runs in some cases only"
            decides = decides or self.is_test(item)
        if moved is not None:
            self.where = self.where.unknown(moved)

    def is_test(self, node: Node) -> bool:
        """`[[ ... ]]`, `[ ... ]`, `test ...`, `(( ... ))`: a command whose status is an answer."""
        if node.type == "test_command" or (
            node.type == "compound_statement" and node.children and node.children[0].type == "(("
        ):
            return True
        if node.type == "negated_command":
            return True
        if node.type == "command":
            name = node.child_by_field_name("name")
            return name is not None and self.parsed.raw(name) in (
                "test",
                "[",
                "grep",
                "true",
                "false",
            )
        return False

    def flatten(self, node: Node) -> Iterator[tuple[Node, str]]:
        """A `list` (`a && b || c`) as its commands, each with the operator before it."""
        if node.type != "list":
            yield node, ""
            return
        operator = ""
        for child in node.children:
            if child.type in ("&&", "||"):
                operator = child.type
            elif child.type in _STATEMENTS:
                for item, op in self.flatten(child):
                    yield item, op or operator
                    operator = ""

    def trailing_operator(self, item: Node, run: list[Node]) -> str:
        """The separator right after the last command of a run (`a &`), if any."""
        for node in run:
            if node.start_byte >= item.end_byte:
                return node.type if node.type in _SEPARATORS else ""
        return ""

    def operator_end(self, previous: Node, item: Node) -> int | None:
        """The end of the operator between two commands (`a & b`: after the `&`)."""
        between = self.text[self.parsed.end(previous) : self.parsed.start(item)]
        stripped = between.rstrip()
        if not stripped.strip():
            return None
        return self.parsed.end(previous) + len(stripped)

    def statement(self, node: Node, place: Place, span: Node | None = None) -> None:
        kind = node.type
        if kind in _SIMPLE:
            self.simple(node, place, span or node)
            self.expansions(node)
        elif kind == "redirected_statement":
            body = node.child_by_field_name("body")
            if body is not None and body.type in _STATEMENTS:
                self.statement(body, place, span=node)
            for child in node.children:
                if child is not body:
                    self.redirect(child)
        elif kind in ("pipeline", "negated_command"):  # no command there can go alone
            for child in node.children:
                if child.type in _STATEMENTS:
                    with self.own_folder(kind == "pipeline"):  # (each part: a subshell)
                        self.statement(child, Place(in_pipeline=True))
        elif kind == "list":
            self.sequence([node], place.may_be_empty, place.top)
        elif kind in ("compound_statement", "subshell"):
            if node.children and node.children[0].type == "((":
                self.expansions(node)
            else:
                with self.own_folder(kind == "subshell"):
                    self.body(node, may_be_empty=False)
        elif kind in ("if_statement", "while_statement"):
            with self.under(node, node), self.arm_folder(node):
                self.body(node, may_be_empty=False)
        elif kind == "case_statement":
            with self.arm_folder(node):
                self.body(node, may_be_empty=True)
        elif kind in ("for_statement", "c_style_for_statement"):
            with self.under(node, node), self.arm_folder(node):
                self.body(node, may_be_empty=False)
        elif kind == "function_definition":  # (its `cd` moves the callers too: not followed)
            with self.under(node, node), self.own_folder():
                self.body(node, may_be_empty=False)
        else:  # test_command
            self.expansions(node)

    @contextmanager
    def own_folder(self, applies: bool = True) -> Iterator[None]:
        """A subshell's (a function's): a move inside it leaves the shell's folder as it was."""
        where = self.where
        try:
            yield
        finally:
            if applies:
                self.where = where

    @contextmanager
    def arm_folder(self, construct: Node) -> Iterator[None]:
        """A conditional construct or a loop: where one of its arms (or the loop's body,
        which may not run) moves the folder, the folder after it is not known."""
        start = self.where
        self.arm_folders.append((start, []))
        try:
            yield
        finally:
            _, ends = self.arm_folders.pop()
            if any(end != start for end in (*ends, self.where)):
                keyword = construct.children[0].type if construct.children else construct.type
                line = self.host_line(self.parsed.start(construct))
                self.where = start.unknown(
                    f"the `{keyword}` at line {line} changes the folder in some cases only"
                )

    def next_arm(self) -> None:
        """The next arm of the construct being read starts where the construct did."""
        if self.arm_folders:
            start, ends = self.arm_folders[-1]
            ends.append(self.where)
            self.where = start

    def redirect(self, node: Node) -> None:
        if node.type == "heredoc_redirect":
            self.heredoc(node)
        self.expansions(node)

    def heredoc(self, node: Node) -> None:
        """A here-document's body is a script of its own (often one written out and run)."""
        body = next((c for c in node.children if c.type == "heredoc_body"), None)
        if body is None:
            return
        start, end = self.parsed.start(body), self.parsed.end(body)
        source = self.source.inner(Embedded.slice(self.text, start, end))
        remote = _remote_reader(node)
        note = _HEREDOC_NOTE if remote is None else _REMOTE_NOTE.format(program=remote)
        where = self.where if remote is None else None
        self.analyser.new_script(source, note, must_parse=False, branch=self.branch, where=where)

    def expansions(self, node: Node) -> None:
        """Command and process substitutions inside a command's words: their commands."""
        for child in node.children:
            if child.type == "command_substitution":
                self.capturing += 1
                try:
                    with self.own_folder():
                        self.body(child, may_be_empty=True)
                finally:
                    self.capturing -= 1
            elif child.type == "process_substitution":
                with self.own_folder():
                    self.body(child, may_be_empty=True)
            elif child.type == "heredoc_redirect":
                self.heredoc(child)
            elif child.child_count and child.type not in _STATEMENTS:
                self.expansions(child)

    # -- simple commands ----------------------------------------------------------------------

    def simple(self, node: Node, place: Place, span: Node) -> None:
        words = self.words(node)
        if not words:
            return
        # tree-sitter-bash reads `A=1` on one line and `cmd` on the next as one command:
        # split where a newline separates the assignments from the command.
        count = prefix_count(words)
        if 0 < count < len(words) and "\n" in self.text[words[count - 1].end : words[count].start]:
            self.command(words[:count], (words[0].start, words[count - 1].end), place)
            self.command(words[count:], (words[count].start, self.parsed.end(span)), place)
            return
        redirected = span.type == "redirected_statement" and any(
            child.type == "file_redirect" for child in span.children
        )
        self.command(words, (self.parsed.start(span), self.parsed.end(span)), place, redirected)

    def words(self, node: Node) -> list[Word]:
        out: list[Word] = []
        for child in node.children:
            kind = child.type
            if kind in ("variable_assignment", "variable_assignments"):
                parts = child.children if kind == "variable_assignments" else [child]
                for part in parts:
                    if part.type == "variable_assignment":
                        out.append(self.word(part, assignment=True))
            elif kind == "command_name":
                out.append(self.word(child, assignment=False))
            elif kind in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
                self.redirect(child)
            elif kind in _SEPARATORS or kind == "comment":
                continue
            elif child.is_named or kind in _KEYWORD_WORDS:
                out.append(self.word(child, assignment=False))
        if node.type == "variable_assignment":
            out = [self.word(node, assignment=True)]
        return out

    def word(self, node: Node, assignment: bool) -> Word:
        start, end = self.parsed.start(node), self.parsed.end(node)
        return Word(start, end, self.text[start:end], assignment, node)

    def command(
        self, words: list[Word], span: tuple[int, int], place: Place, redirected: bool = False
    ) -> None:
        """The accesses of one simple command (`redirected`: its output goes to a file)."""
        ctx = Command(self, words, span, place)
        count = prefix_count(words)
        prefixes, rest = words[:count], words[count:]
        if not rest:
            ctx.assignments(prefixes)
            return
        values = [self.known(w) for w in rest]
        made = launch(values, [w.raw for w in rest])
        script = made.python_script
        site = None
        if script:
            script = self.where.folder.placed(script)  # (from the folder the shell is in)
            made = replace(made, script=script)
            # a write on the command line itself (`env X=1 torchrun`) comes before the launch
            at = made.script_index if made.script_index is not None else 0
            start = self.source.start_of(rest[at].start)
            site = LaunchSite(script, start, self.branch, captured=self.capturing > 0)
        self.analyser.launches.append((self.script.id, rest[0].start, made, site))
        scripts = (script,) if script else ()
        ctx.prefixes(prefixes, rest[0], scripts)
        name = rest[0].value.rsplit("/", 1)[-1]
        minus = "".join(w.value[1:] for w in rest[1:] if w.value.startswith("-"))
        plus = "".join(w.value[1:] for w in rest[1:] if w.value.startswith("+"))
        if name in _PRINTERS and not ctx.place.in_pipeline and not redirected:
            for word in rest[1:]:  # printed, not written to a file ($GITHUB_ENV) or a pipe
                self.quiet_text(word.node)
        if name == "export":  # `export -n X` takes X out of the environment
            ctx.declaration(rest[0], rest[1:], "export", exported="n" not in minus)
        elif name in _DECLARERS:
            exported = False if "x" in plus else True if "x" in minus else None
            ctx.declaration(rest[0], rest[1:], "declare", exported=exported)
        elif name == "unset":
            ctx.unset(rest[0], rest[1:])
        ctx.launch_environment(rest, made, scripts)
        if name in _SLURM or any(p in _SLURM for p in made.programs):
            ctx.slurm(rest, scripts)
        for index in made.shell_strings:
            self.shell_string(rest, index, made)
        if name in MOVERS:
            spelled = f"`{' '.join(w.raw for w in rest)}` at line {self.host_line(rest[0].start)}"
            self.where = self.where.after([name, *values[1:]], spelled)

    def known(self, word: Word) -> str | None:
        """The word's value; in a script file, `$SCRIPT_DIR/train.py` and the like too, the
        launcher's folder spelled as the launch model's `OWN_FOLDER`."""
        value = word.known
        if value is not None or not self.script.own_folder or word.node is None:
            return value
        if self.folder is None:
            self.folder = OwnFolder(self.parsed)
        return self.folder.value(word.node)

    def shell_string(self, words: list[Word], index: int, made: Launch) -> None:
        """The string of `bash -c`, `sbatch --wrap`, `ssh HOST`: a script of its own."""
        word = words[index]
        node = word.node
        if node is None:
            return
        start = word.start
        target = node
        if node.type in ("word", "concatenation") and "=" in word.raw:  # --wrap="..."
            value = next((c for c in node.children if c.type in ("string", "raw_string")), None)
            if value is None:
                return
            target = value
            start = self.parsed.start(value)
        inner = string_text(self.parsed, target)
        if inner is None:
            plain = word.known
            if plain is None or not plain.strip():
                return
            inner = replace(Embedded.slice(self.text, start, start + len(word.raw)), editable=False)
        program = made.programs[-1] if made.programs else "sh"
        option = words[index - 1].value if index else ""
        if option.startswith("-"):
            program += f" {option}"
        elif word.value.startswith("-"):  # --wrap=...
            program += f" {word.value.partition('=')[0]}"
        note = (_REMOTE_NOTE if made.remote else _STRING_NOTE).format(program=program)
        where = None if made.remote else self.where
        self.analyser.new_script(self.source.inner(inner), note, branch=self.branch, where=where)

    def quiet_text(self, node: Node | None) -> None:
        """Marks the literal text of a printed word (not the commands substituted into it)."""
        if node is None or node.type in ("command_substitution", "process_substitution"):
            return
        if node.type in ("word", "string_content", "raw_string") or not node.children:
            self.analyser.quiet.append(self.span(node))
            return
        for child in node.children:
            self.quiet_text(child)

    # -- reads --------------------------------------------------------------------------------

    def reads(self, root: Node) -> None:
        """`$X`, `${X...}`, a bare `X` in arithmetic, `[[ -v X ]]`, anywhere in the script."""
        names = self.analyser.names
        for node in walk(root):
            kind = node.type
            if kind in ("simple_expansion", "expansion"):
                variable = next((c for c in node.children if c.type == "variable_name"), None)
                if variable is None:
                    subscript = next((c for c in node.children if c.type == "subscript"), None)
                    if subscript is not None:
                        variable = subscript.child_by_field_name("name")
                if variable is not None and self.parsed.raw(variable) in names:
                    self.read(self.parsed.raw(variable), node)
            elif kind == "variable_name" and self.in_arithmetic(node):
                if self.parsed.raw(node) in names:
                    self.read(self.parsed.raw(node), node)
            elif kind == "unary_expression":
                operator = node.child_by_field_name("operator") or (
                    node.children[0] if node.children else None
                )
                operand = node.children[-1] if node.children else None
                if operator is not None and self.parsed.raw(operator) == "-v" and operand:
                    name = literal(self.parsed.raw(operand))
                    if name in names and operand is not operator:
                        self.read(name, operand)

    def in_arithmetic(self, node: Node) -> bool:
        parent = node.parent
        if parent is not None and parent.type in ("variable_assignment", "for_statement"):
            return False  # the variable a loop or an assignment sets
        while parent is not None:
            if parent.type in _ARITHMETIC:
                return True
            if parent.type == "compound_statement":
                return bool(parent.children) and parent.children[0].type == "(("
            if parent.type in ("expansion", "simple_expansion", "subscript"):
                return False
            if parent.type in _STATEMENTS:
                return False
            parent = parent.parent
        return False

    def read(self, name: str, node: Node) -> None:
        start, end = self.span(node)
        access = TextAccess(
            variable=name,
            kind="read",
            form="read",
            value=None,
            start=start,
            end=end,
            note=self.script.note,
            branch=self.branch,
        )
        self.analyser.add(access, self.script.id, self.parsed.start(node))

    # -- SLURM ----------------------------------------------------------------------------------

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
                self.slurm_list(offset + column, match.group("list"), ())
            offset += len(line)

    def slurm_list(self, start: int, raw: str, scripts: tuple[str, ...]) -> None:
        """`--export=ALL,X=1,...`: each flag entry is a write that needs a hand edit."""
        for match in _EXPORT_ENTRY.finditer(raw):
            value = literal(match.group("value"))
            host_start, host_end = self.source.span(start + match.start(), start + match.end())
            self.analyser.add(
                TextAccess(
                    variable=match.group("name"),
                    kind="write",
                    form="slurm-export",
                    value=FlagValue(None if value is None else (value,)),
                    start=host_start,
                    end=host_end,
                    launched=scripts,
                    branch=self.branch,
                    note=self.script.note + _SLURM_NOTE,
                    applicability="manual",
                ),
                self.script.id,
                start + match.start(),
            )

    # -- offsets ------------------------------------------------------------------------------

    def span(self, node: Node) -> tuple[int, int]:
        return self.source.span(self.parsed.start(node), self.parsed.end(node))


@dataclass
class _Arm:
    """`with reader.under(construct, arm):` the statements read inside are under that arm."""

    reader: ScriptReader
    arm: tuple[int, int]

    def __enter__(self) -> None:
        self.reader.arms.append(self.arm)

    def __exit__(self, *_: object) -> None:
        self.reader.arms.pop()


def _line_offset(text: str, line: int) -> int:
    """The offset where 1-based `line` starts (the end of the text past the last line)."""
    offset = 0
    for _ in range(line - 1):
        newline = text.find("\n", offset)
        if newline == -1:
            return len(text)
        offset = newline + 1
    return offset
