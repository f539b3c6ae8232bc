"""Scan and rewrite for every text kind (shell, Dockerfile, YAML, .env) on one model: the kind
module finds the accesses and knows its syntax; findings, suppressions and the recipes' edits
are the same for all."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from xlamigrate.catalogue import Catalogue
from xlamigrate.findings import (
    LEGACY_FLAG_NAMED,
    LEGACY_FLAG_STAYS_WITH_AUTOCAST,
    WRITE_NOT_REMOVABLE,
    access_findings,
    manual_finding,
    mention_finding,
)
from xlamigrate.flagvalue import RECIPE_FLAGS
from xlamigrate.kinds.decided import with_decision
from xlamigrate.kinds.embedded import SHELL_SYNTAX, CannotRender
from xlamigrate.kinds.textaccess import (
    LineIndex,
    TextAccess,
    TextAnalysis,
    TextEdit,
    TextMention,
    apply_edits,
    hash_comments,
    runs_with,
)
from xlamigrate.neuronflags import NEURON_CC_FLAGS, STOCHASTIC_ROUNDING, merge_auto_cast_none
from xlamigrate.project.launchers import copies_a_switch, is_enabling
from xlamigrate.request import FileContext, FileTask, RewriteRequest
from xlamigrate.results import FileError, FileResult, Finding, RewriteOutcome
from xlamigrate.suppression import finding_suppressed, parse_suppressions
from xlamigrate.xlavariables import variable_findings, variable_names

_AUTO_CAST_NONE = "--auto-cast=none"
AUTO_CAST_NOT_MERGED = "XM407"


Analyse = Callable[[str, frozenset[str]], TextAnalysis]
Render = Callable[..., str]  # (syntax, name, value, append=False) -> the construct's text


@dataclass(frozen=True)
class TextKind:
    """A text kind's two parts: `analyse(text, names)` finds the accesses, `render(syntax, name,
    value, append=False)` spells an assignment in the construct an access was found in."""

    analyse: Analyse
    render: Render

    def scan(self, task: FileTask, analysis: TextAnalysis | None = None) -> FileResult:
        return scan_text(task, self, analysis)

    def rewrite(self, task: FileTask, request: RewriteRequest) -> RewriteOutcome:
        return rewrite_text(task, self, request)

    def analyse_file(self, path: str, data: bytes, catalogue: Catalogue) -> TextAnalysis | None:
        return analyse_file(path, data, self, catalogue)


@dataclass(frozen=True)
class _Decoded:
    text: str
    bom: bool


def _decode(path: str, data: bytes) -> _Decoded | FileError:
    bom = data.startswith(b"\xef\xbb\xbf")
    body = data[3:] if bom else data
    try:
        return _Decoded(body.decode("utf-8"), bom)
    except UnicodeDecodeError as error:  # where: the line, and the characters before it there
        line = body.count(b"\n", 0, error.start) + 1
        before = body[body.rfind(b"\n", 0, error.start) + 1 : error.start].decode("utf-8")
        message = f"could not decode as UTF-8: {error.reason}"
        return FileError(path, line, message, column=len(before) + 1)


def _analyse(kind: TextKind, text: str, catalogue: Catalogue) -> TextAnalysis:
    return kind.analyse(text, frozenset(catalogue.flags) | {STOCHASTIC_ROUNDING, NEURON_CC_FLAGS})


def analyse_file(
    path: str, data: bytes, kind: TextKind, catalogue: Catalogue
) -> TextAnalysis | None:
    """The analysis the project is built from (None: the file cannot be decoded)."""
    decoded = _decode(path, data)
    if isinstance(decoded, FileError):
        return None
    return _analyse(kind, decoded.text, catalogue)


_MENTION_WHERE = (
    "in text xlamigrate cannot follow (a string another program reads, a file a here-document"
    " writes)"
)


def _reported(
    path: str,
    text: str,
    analysis: TextAnalysis,
    catalogue: Catalogue,
    enabled: frozenset[str],
    context: FileContext | None = None,
) -> list[tuple[TextAccess | TextMention, Finding]]:
    index = LineIndex(text)
    accesses = tuple(_kept_if_it_may_enable(a) for a in analysis.accesses)
    if context is not None:
        accesses = tuple(with_decision(a, context) for a in accesses)
    pairs: list[tuple[TextAccess | TextMention, Finding]] = [
        (access, finding)
        for access, finding in access_findings(
            path, accesses, lambda a: index.span(a.start, a.end), catalogue
        )
        if finding.code in enabled
    ]
    if LEGACY_FLAG_NAMED in enabled:
        pairs.extend(
            (
                mention,
                mention_finding(
                    catalogue,
                    path,
                    index.span(mention.start, mention.end),
                    mention.variable,
                    mention.note or _MENTION_WHERE,
                ),
            )
            for mention in analysis.mentions
        )
    table = parse_suppressions(hash_comments(text)) if pairs else {}
    return [
        (access, finding) for access, finding in pairs if not finding_suppressed(finding, table)
    ]


def _kept_if_it_may_enable(access: TextAccess) -> TextAccess:
    """A write of a legacy flag whose value may turn it on, yet is not known well enough to
    migrate (`XLA_USE_BF16=$X`, X set elsewhere): removing it would drop the flag with no recipe
    in its place (--unsafe-fixes included), so it stays, manual."""
    value = access.value
    if (
        access.kind != "write"
        or access.variable not in RECIPE_FLAGS
        or value is None
        or value.enabled is not None
        or is_enabling(access)
        or access.applicability == "manual"
    ):
        return access
    note = (
        f"{access.note}; its value is not known here, so the rewrite cannot tell where the"
        " recipe belongs: write it as a literal, or copy a variable this file sets to 0 or 1"
        " (`USE_BF16=0` and a switch that sets 1), or put the recipe in the script by hand;"
        " removing it alone would train in FP32"
    )
    return replace(access, note=note, applicability="manual")


def _problems(path: str, analysis: TextAnalysis) -> tuple[FileError, ...]:
    return tuple(
        FileError(path, p.line, f"could not parse: {p.message}", column=p.column)
        for p in analysis.problems
    )


def scan_text(task: FileTask, kind: TextKind, analysis: TextAnalysis | None = None) -> FileResult:
    """The file's findings; with the project's context, an enabling write says which script
    it starts and whether the rewrite can migrate it. `analysis`: the file's `analyse_file`,
    where the project was built from it already."""
    path, catalogue, enabled, context = task.path, task.catalogue, task.enabled, task.context
    decoded = _decode(path, task.data)
    if isinstance(decoded, FileError):
        return FileResult(path, errors=(decoded,))
    if analysis is None:
        analysis = _analyse(kind, decoded.text, catalogue)
    pairs = _reported(path, decoded.text, analysis, catalogue, enabled, context)
    found = [f for _, f in pairs]
    if context is not None and pairs:  # as the rewrite in the scan's mode would report them
        request = RewriteRequest(context.mode, signal=context.signal)
        plan = _TextPlan(kind, decoded.text, analysis, catalogue, request, context)
        for access, finding in pairs:
            plan.take(access, finding)
        plan.finish(path)
        found = [*plan.fixed, *plan.remaining]
    found += _variables(path, decoded.text, kind, catalogue, enabled)
    findings = tuple(sorted(found, key=lambda f: f.sort_key))
    return FileResult(path, findings=findings, errors=_problems(path, analysis))


def _variables(
    path: str, text: str, kind: TextKind, catalogue: Catalogue, enabled: frozenset[str]
) -> list[Finding]:
    """The file's writes of torch-xla runtime variables 2.9 no longer reads (XM503)."""
    names = variable_names(enabled)
    if not any(name in text for name in names):
        return []
    index = LineIndex(text)
    found = variable_findings(
        path,
        kind.analyse(text, names).accesses,
        lambda a: index.span(a.start, a.end),
        catalogue,
        enabled,
    )
    table = parse_suppressions(hash_comments(text)) if found else {}
    return [f for f in found if not finding_suppressed(f, table)]


def rewrite_text(task: FileTask, kind: TextKind, request: RewriteRequest) -> RewriteOutcome:
    path, data, catalogue, enabled = task.path, task.data, task.catalogue, task.enabled
    context = task.decided
    decoded = _decode(path, data)
    if isinstance(decoded, FileError):
        return RewriteOutcome(path, data, None, errors=(decoded,))
    text = decoded.text
    analysis = _analyse(kind, text, catalogue)
    pairs = _reported(path, text, analysis, catalogue, enabled, context)
    errors = _problems(path, analysis)
    variables = _variables(path, text, kind, catalogue, enabled)
    if not pairs:
        remaining = tuple(sorted(variables, key=lambda f: f.sort_key))
        return RewriteOutcome(path, data, None, remaining=remaining, errors=errors)
    plan = _TextPlan(kind, text, analysis, catalogue, request, context)
    for access, finding in pairs:
        plan.take(access, finding)
    plan.finish(path)
    new_text = apply_edits(text, _whole_containers(analysis.accesses, plan.edits))
    rewritten = (b"\xef\xbb\xbf" if decoded.bom else b"") + new_text.encode("utf-8")
    return RewriteOutcome(
        path,
        data,
        rewritten if rewritten != data else None,
        tuple(sorted(plan.fixed, key=lambda f: f.sort_key)),
        tuple(sorted([*plan.remaining, *variables], key=lambda f: f.sort_key)),
        errors,
    )


@dataclass
class _TextPlan:
    """The edits of one text file: every write the user may have fixed goes; an enabling write
    goes only as the project decided (into the signal, or into the recipe's environment
    variables where the script's recipe is unconditional), else it stays, reported."""

    kind: TextKind
    text: str
    analysis: TextAnalysis
    catalogue: Catalogue
    request: RewriteRequest
    context: FileContext
    edits: list[TextEdit] = field(default_factory=list)
    fixed: list[Finding] = field(default_factory=list)
    remaining: list[Finding] = field(default_factory=list)
    # a recipe replacement -> the plain removal, in case --auto-cast=none must not go in
    fallbacks: dict[TextEdit, TextEdit | None] = field(default_factory=dict)
    replaced: list[TextAccess] = field(default_factory=list)  # writes now the recipe's variable
    unconditional: bool = False  # some write migrated into the recipe itself (no signal)

    def __post_init__(self) -> None:
        self.writes = [a for a in self.analysis.accesses if a.kind == "write"]
        self.has_rounding = any(a.variable == STOCHASTIC_ROUNDING for a in self.writes)
        self.flag_writes = [a for a in self.writes if a.variable == NEURON_CC_FLAGS]
        self.recipe = self.request.recipe
        self.environment = self.recipe.environment_on(self.context.platform)

    def take(self, access: TextAccess | TextMention, finding: Finding) -> None:
        applicability = finding.fix.applicability if finding.fix else None
        allowed = applicability == "safe" or (
            applicability == "unsafe" and self.request.unsafe_fixes
        )
        if isinstance(access, TextMention) or access.kind == "read" or not allowed:
            self.remaining.append(finding)
            return
        edit = access.removal
        if is_enabling(access):
            decision = self.context.decision(access)
            if not decision.migrated:  # (reported manual already, with the reason)
                self.remaining.append(finding)
                return
            try:
                replacement = self._replacement(access, decision.signal)
            except CannotRender:  # the host cannot spell the recipe's variable here
                self.remaining.append(_manual(self.catalogue, finding))
                return
            self.unconditional = self.unconditional or decision.signal is None
            if copies_a_switch(access) and decision.signal is not None:  # the value stays
                replacement = None
                edit = TextEdit(access.start, access.start + len(access.variable), decision.signal)
                self.replaced.append(access)
            elif replacement is not None:
                assert access.assignment is not None
                edit = TextEdit(*access.assignment, replacement)
                self.fallbacks[edit] = access.removal
                self.replaced.append(access)
        if edit is None:
            self.remaining.append(_manual(self.catalogue, finding))
            return
        self.edits.append(edit)
        self.fixed.append(finding)

    def _replacement(self, access: TextAccess, signal: str | None) -> str | None:
        """What an enabling write becomes in its own construct (None: removed)."""
        if signal is not None:
            return _render(self.kind, access.syntax, signal, "1")
        if any(runs_with(done.branch, access.branch) for done in self.replaced):
            return None  # the recipe's variables are already set wherever this write runs
        if self.environment.rounding_on and not self.has_rounding:
            return _render(self.kind, access.syntax, STOCHASTIC_ROUNDING, "1")
        if self.environment.auto_cast_none and not self.flag_writes:
            return _render(self.kind, access.syntax, NEURON_CC_FLAGS, _AUTO_CAST_NONE, append=True)
        return None

    def finish(self, path: str) -> None:
        """The edits beyond the flag's own writes, for a recipe that went in unconditionally:
        NEURON_CC_FLAGS gets --auto-cast=none, an explicit rounding "1" goes (as the recipe's
        environment edits on this platform say)."""
        if self.unconditional:
            if self.environment.auto_cast_none and not any(
                _AUTO_CAST_NONE in e.replacement for e in self.edits
            ):
                merges, unmerged = _merge_auto_cast_none(self.kind, self.flag_writes)
                self.edits.extend(merges)
                index = LineIndex(self.text)
                self.remaining.extend(
                    manual_finding(
                        self.catalogue,
                        AUTO_CAST_NOT_MERGED,
                        path,
                        index.span(w.start, w.end),
                        f"{NEURON_CC_FLAGS} set here",
                    )
                    for w in unmerged
                )
            if self.environment.rounding_off:  # the master weights replace an explicit "1"
                self.edits.extend(
                    a.removal
                    for a in self.writes
                    if a.variable == STOCHASTIC_ROUNDING
                    and a.removal is not None
                    and a.value is not None
                    and a.value.enabled is True
                )
        if self.recipe.adds_auto_cast_none:
            self.edits = _no_auto_cast_beside_a_legacy_flag(
                self.catalogue,
                path,
                self.text,
                self.writes,
                self.edits,
                self.fallbacks,
                self.remaining,
            )


def _no_auto_cast_beside_a_legacy_flag(
    catalogue: Catalogue,
    path: str,
    text: str,
    writes: list[TextAccess],
    edits: list[TextEdit],
    fallbacks: dict[TextEdit, TextEdit | None],
    remaining: list[Finding],
) -> list[TextEdit]:
    """A legacy flag left set (noqa'd, not removable) and --auto-cast=none crash neuronx-cc:
    then no NEURON_CC_FLAGS edit is made, and the flag is reported (XM405)."""
    if not any(_AUTO_CAST_NONE in edit.replacement for edit in edits):
        return edits  # nothing would add --auto-cast=none
    chosen = {(edit.start, edit.end) for edit in edits}
    for write in writes:
        if write.variable not in RECIPE_FLAGS or (write.value and write.value.enabled is False):
            continue
        spans = {
            write.assignment,
            (write.removal.start, write.removal.end) if write.removal else None,
        }
        if not any(span in chosen for span in spans if span is not None):
            span = LineIndex(text).span(write.start, write.end)
            remaining.append(
                manual_finding(
                    catalogue, LEGACY_FLAG_STAYS_WITH_AUTOCAST, path, span, write.variable
                )
            )
            kept = [fallbacks.get(edit, edit) for edit in edits]
            return [e for e in kept if e is not None and _AUTO_CAST_NONE not in e.replacement]
    return edits


def _whole_containers(accesses: tuple[TextAccess, ...], edits: list[TextEdit]) -> list[TextEdit]:
    """Where every access of a construct is removed, remove the construct instead."""
    chosen = set(edits)
    members: dict[TextEdit, list[TextAccess]] = {}
    for access in accesses:
        if access.container is not None:
            members.setdefault(access.container, []).append(access)
    for container, group in members.items():
        removals = [access.removal for access in group]
        if all(removal is not None and removal in chosen for removal in removals):
            chosen -= {removal for removal in removals if removal is not None}
            chosen.add(container)
    return list(chosen)


def _render(kind: TextKind, syntax: str, name: str, value: str, append: bool = False) -> str:
    """An assignment in the construct of `syntax`: shell text anywhere is the shell's to spell."""
    if syntax.startswith(SHELL_SYNTAX):
        from xlamigrate.kinds.shell.render import render as render_shell

        return render_shell(syntax, name, value, append=append)
    return kind.render(syntax, name, value, append=append)


def _merge_auto_cast_none(
    kind: TextKind, flag_writes: list[TextAccess]
) -> tuple[list[TextEdit], list[TextAccess]]:
    """Edits that end every NEURON_CC_FLAGS write with --auto-cast=none, and the writes that
    cannot take one (reported, never dropped silently)."""
    edits: list[TextEdit] = []
    unmerged: list[TextAccess] = []
    for write in flag_writes:
        literal = write.value.literal if write.value else None
        if literal is not None and write.assignment is not None:
            merged = merge_auto_cast_none(literal)
            if merged == literal:
                continue
            try:
                replacement = _render(kind, write.syntax, NEURON_CC_FLAGS, merged)
            except CannotRender:
                unmerged.append(write)
                continue
            edits.append(TextEdit(*write.assignment, replacement))
        elif write.auto_cast_none is not None:
            edits.extend(write.auto_cast_none)
        elif write.value_range is not None:  # (no value_range: `export X` passes a value on)
            unmerged.append(write)
    return edits, unmerged


def _manual(catalogue: Catalogue, finding: Finding) -> Finding:
    return manual_finding(
        catalogue, WRITE_NOT_REMOVABLE, finding.path, finding.span, finding.message
    )
