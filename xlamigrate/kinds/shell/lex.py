"""A small bash lexer for what bashlex cannot parse: it finds here-documents, `case` statements,
`[[ ]]`, arithmetic and array values with their offsets, and rewrites them, length for length,
into text bashlex reads. `shell.py` analyses the pieces it set aside on their own."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_METACHARS = frozenset(" \t\n;&|<>()")
# Longest first: the lexer takes the first that matches.
_OPERATORS = (
    ";;&",
    "&>>",
    "<<<",
    "<<-",
    ";;",
    ";&",
    "&&",
    "||",
    "|&",
    "&>",
    "<<",
    ">>",
    "<&",
    ">&",
    "<>",
    ">|",
    ";",
    "&",
    "|",
    "(",
    ")",
    "<",
    ">",
)
_REDIRECTIONS = frozenset({"<", ">", ">>", "<&", ">&", "<>", ">|", "&>", "&>>", "<<<"})
_SEPARATORS = frozenset({";", "&", "&&", "||", "|", "|&", ";;", ";&", ";;&"})
_CASE_ENDS = frozenset({";;", ";&", ";;&"})
# Reserved words after which the next word is again a command.
_COMMAND_STARTERS = frozenset({"then", "do", "else", "elif", "if", "while", "until", "!", "{"})
_ASSIGNMENT_START = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=")


@dataclass(frozen=True)
class Token:
    kind: str  # "word", "op", "newline", "comment"
    start: int
    end: int


@dataclass(frozen=True)
class HereDoc:
    operator: tuple[int, int]  # `<<EOF`, `<<-'EOF'`: the operator and its delimiter
    body: tuple[int, int]  # the lines between, newline of the last included
    end: int  # after the terminator line
    quoted: bool  # `<<'EOF'`: the body is not expanded


@dataclass(frozen=True)
class CaseClause:
    pattern: tuple[int, int]  # `a|b)`, the `)` included
    body: tuple[int, int]  # up to its `;;` (or `esac`)


@dataclass(frozen=True)
class CaseStatement:
    start: int
    end: int  # after `esac`
    subject: tuple[int, int]
    clauses: tuple[CaseClause, ...]


@dataclass
class Lexed:
    """The pieces of one script; offsets are into the lexed text."""

    tokens: list[Token] = field(default_factory=list)  # outside `$( )`
    heredocs: list[HereDoc] = field(default_factory=list)
    cases: list[CaseStatement] = field(default_factory=list)
    # `[[ ]]`, `(( ))`, `for (( ))`, `$(( ))`, array values, `time`, '...' text:
    # (kind, start, end)
    masks: list[tuple[str, int, int]] = field(default_factory=list)


@dataclass
class _Case:
    start: int
    phase: str = "subject"  # subject, in, pattern, body
    subject: tuple[int, int] = (0, 0)
    pattern_start: int | None = None
    body_start: int = 0
    clauses: list[CaseClause] = field(default_factory=list)


@dataclass
class _PendingHereDoc:
    operator_start: int
    strip_tabs: bool
    delimiter: tuple[int, int] | None = None


class _Lexer:
    def __init__(self, text: str) -> None:
        self.s = text
        self.n = len(text)
        self.out = Lexed()
        self.pending: list[_PendingHereDoc] = []

    # -- scripts ------------------------------------------------------------------------------

    def script(self, i: int, closer: str | None, tokens: list[Token]) -> int:
        """Lexes commands from i until an unmatched `)` (closer) or the end; returns where."""
        s = self.s
        command_position = True
        # the next word: "target" (of a redirection), "heredoc" (its delimiter), "time-option",
        # "function-name"
        expect: str | None = None
        cases: list[_Case] = []
        depth = 0
        double_bracket: int | None = None
        while i < self.n:
            char = s[i]
            if char in " \t\r":
                i += 1
                continue
            if s.startswith("\\\n", i):
                i += 2
                continue
            if char == "\n":
                tokens.append(Token("newline", i, i + 1))
                i = self._heredoc_bodies(i + 1)
                expect = None
                if not (cases and cases[-1].phase in ("pattern", "in")):
                    command_position = True
                continue
            if char == "#":
                end = s.find("\n", i)
                end = self.n if end == -1 else end
                tokens.append(Token("comment", i, end))
                self.out.masks.append(("comment", i, end))
                i = end
                continue
            if double_bracket is None and command_position and s.startswith("((", i):
                end = self._arithmetic_end(i + 2)
                if end != -1:
                    self.out.masks.append(("arithmetic-command", i, end))
                    tokens.append(Token("word", i, end))
                    command_position = False
                    i = end
                    continue
            if char in "<>" and i + 1 < self.n and s[i + 1] == "(":
                end = self.word(i)
                tokens.append(Token("word", i, end))
                command_position = False
                i = end
                continue
            operator = next((op for op in _OPERATORS if s.startswith(op, i)), None)
            if operator is not None and double_bracket is None:
                start = i
                i += len(operator)
                case = cases[-1] if cases else None
                if operator == ")" and case is not None and case.phase == "pattern":
                    pattern_start = start if case.pattern_start is None else case.pattern_start
                    case.clauses.append(CaseClause((pattern_start, i), (i, i)))
                    case.phase, case.body_start, case.pattern_start = "body", i, None
                    command_position = True
                    tokens.append(Token("op", start, i))
                    continue
                if operator == "(" and case is not None and case.phase == "pattern":
                    if case.pattern_start is None:
                        case.pattern_start = start
                    continue
                if operator == ")" and depth == 0 and closer == ")":
                    return start
                tokens.append(Token("op", start, i))
                if operator in _CASE_ENDS and case is not None and case.phase == "body":
                    self._close_clause(case, start)
                    case.phase = "pattern"
                    continue
                if operator == "(":
                    depth += 1
                    command_position = True
                elif operator == ")":
                    depth = max(depth - 1, 0)
                    command_position = True  # `f() {` and `) ;`: harmless either way
                elif operator in ("<<", "<<-"):
                    self.pending.append(_PendingHereDoc(start, operator == "<<-"))
                    expect = "heredoc"
                elif operator in _REDIRECTIONS:
                    expect = "target"
                elif operator in _SEPARATORS:
                    command_position = True
                continue
            start = i
            i = self.word(i)
            if i == start:  # an operator character inside [[ ]]
                i += 1
                continue
            tokens.append(Token("word", start, i))
            text = s[start:i]
            if double_bracket is not None:
                if text == "]]":
                    self.out.masks.append(("double-bracket", double_bracket, i))
                    double_bracket = None
                    command_position = False
                continue
            if expect == "heredoc" and self.pending:
                self.pending[-1].delimiter = (start, i)
                expect = None
                continue
            if expect == "target":
                expect = None
                continue
            if expect == "function-name":  # `function f {`: the body's words are commands
                expect = None
                command_position = True
                continue
            if expect == "time-option":
                expect = None
                if text == "-p":
                    self.out.masks.append(("time", start, i))
                    continue
            case = cases[-1] if cases else None
            if case is not None and case.phase == "subject":
                case.subject, case.phase = (start, i), "in"
                continue
            if case is not None and case.phase == "in":
                case.phase = "pattern"  # the word `in`
                continue
            if case is not None and case.phase == "pattern":
                if text == "esac" and case.pattern_start is None:
                    self._close_case(cases.pop(), i)
                    command_position = False
                elif case.pattern_start is None:
                    case.pattern_start = start
                continue
            if not command_position:
                continue
            if text == "case":
                cases.append(_Case(start))
            elif text == "esac" and case is not None and case.phase == "body":
                self._close_clause(case, start)
                self._close_case(cases.pop(), i)
                command_position = False
            elif text == "[[":
                double_bracket = start
            elif text == "time":
                self.out.masks.append(("time", start, i))
                expect = "time-option"
            elif text == "for":
                end = self._arithmetic_for(start, i)
                command_position = end != i  # `for ((...))`: `do` comes next
                i = end
            elif text == "function":
                expect = "function-name"
            elif text in _COMMAND_STARTERS:
                pass
            elif not _ASSIGNMENT_START.match(text):
                command_position = False
        return i

    def _close_clause(self, case: _Case, end: int) -> None:
        clause = case.clauses[-1]
        case.clauses[-1] = CaseClause(clause.pattern, (case.body_start, end))

    def _close_case(self, case: _Case, end: int) -> None:
        self.out.cases.append(CaseStatement(case.start, end, case.subject, tuple(case.clauses)))

    def _arithmetic_for(self, start: int, i: int) -> int:
        """`for ((i = 0; i < n; i++))`: masked whole; returns where lexing goes on."""
        j = i
        while j < self.n and self.s[j] in " \t":
            j += 1
        if not self.s.startswith("((", j):
            return i
        end = self._arithmetic_end(j + 2)
        if end == -1:
            return i
        self.out.masks.append(("arithmetic-for", start, end))
        return end

    # -- here-documents -----------------------------------------------------------------------

    def _heredoc_bodies(self, i: int) -> int:
        """Reads the bodies of the here-documents opened on the line that just ended."""
        pending, self.pending = self.pending, []
        for heredoc in pending:
            if heredoc.delimiter is None:
                continue
            raw = self.s[heredoc.delimiter[0] : heredoc.delimiter[1]]
            delimiter = re.sub(r"[\"'\\]", "", raw)
            body_start = i
            end = self.n
            body_end = self.n
            while i < self.n:
                line_end = self.s.find("\n", i)
                line_end = self.n if line_end == -1 else line_end
                line = self.s[i:line_end].rstrip("\r")
                if (line.lstrip("\t") if heredoc.strip_tabs else line) == delimiter:
                    body_end, end = i, min(line_end + 1, self.n)
                    i = end
                    break
                i = line_end + 1
            i = min(i, self.n)
            self.out.heredocs.append(
                HereDoc(
                    (heredoc.operator_start, heredoc.delimiter[1]),
                    (body_start, body_end),
                    end,
                    any(c in raw for c in "\"'\\"),
                )
            )
        return i

    # -- words --------------------------------------------------------------------------------

    def word(self, i: int) -> int:
        s = self.s
        start = i
        if s[i] in "<>" and i + 1 < self.n and s[i + 1] == "(":
            i = self.script(i + 2, ")", []) + 1
        while i < self.n:
            char = s[i]
            if char in _METACHARS:
                if char == "(" and _ASSIGNMENT_START.fullmatch(s[start:i]):
                    end = self._balanced(i + 1)
                    self.out.masks.append(("array", i, end))
                    i = end
                    continue
                if char == "(" and i > start and s[i - 1] in "@!?*+":
                    i = self._balanced(i + 1)  # extglob
                    continue
                break
            if char == "\\":
                i += 2
            elif char == "'":
                i = self._single(i + 1)
            elif char == '"':
                i = self._double(i + 1)
            elif char == "`":
                i = self._backtick(i + 1)
            elif char == "$":
                i = self._dollar(i)
            else:
                i += 1
        return min(i, self.n)

    def _single(self, i: int) -> int:
        end = self.s.find("'", i)
        end = self.n if end == -1 else end
        self.out.masks.append(("single-quoted", i, end))
        return min(end + 1, self.n)

    def _double(self, i: int) -> int:
        while i < self.n:
            char = self.s[i]
            if char == "\\":
                i += 2
            elif char == '"':
                return i + 1
            elif char == "`":
                i = self._backtick(i + 1)
            elif char == "$":
                i = self._dollar(i)
            else:
                i += 1
        return self.n

    def _backtick(self, i: int) -> int:
        while i < self.n:
            if self.s[i] == "\\":
                i += 2
            elif self.s[i] == "`":
                return i + 1
            else:
                i += 1
        return self.n

    def _dollar(self, i: int) -> int:
        s = self.s
        if s.startswith("$((", i):
            end = self._arithmetic_end(i + 3)
            if end != -1:
                self.out.masks.append(("arithmetic", i, end))
                return end
        if s.startswith("$(", i):
            return min(self.script(i + 2, ")", []) + 1, self.n)
        if s.startswith("${", i):
            return self._brace(i + 2)
        if s.startswith("$'", i):
            j = i + 2
            while j < self.n and s[j] != "'":
                j += 2 if s[j] == "\\" else 1
            return min(j + 1, self.n)
        return i + 1

    def _brace(self, i: int) -> int:
        while i < self.n:
            char = self.s[i]
            if char == "\\":
                i += 2
            elif char == "}":
                return i + 1
            elif char == "'":
                i = self._single(i + 1)
            elif char == '"':
                i = self._double(i + 1)
            elif char == "`":
                i = self._backtick(i + 1)
            elif char == "$":
                i = self._dollar(i)
            else:
                i += 1
        return self.n

    def _balanced(self, i: int) -> int:
        """After a `(`: the index after its matching `)` (quotes, comments, `$( )` skipped)."""
        depth = 1
        at_word_start = True
        while i < self.n:
            char = self.s[i]
            if char == "#" and at_word_start:
                end = self.s.find("\n", i)
                i = self.n if end == -1 else end
                continue
            at_word_start = char in " \t\n("
            if char == "\\":
                i += 2
            elif char == "'":
                i = self._single(i + 1)
            elif char == '"':
                i = self._double(i + 1)
            elif char == "`":
                i = self._backtick(i + 1)
            elif char == "$":
                i = self._dollar(i)
            elif char == "(":
                depth += 1
                i += 1
            elif char == ")":
                depth -= 1
                i += 1
                if depth == 0:
                    return i
            else:
                i += 1
        return self.n

    def _arithmetic_end(self, i: int) -> int:
        """After `((`: the index after the matching `))`, or -1 when it is not arithmetic."""
        depth = 0
        while i < self.n:
            char = self.s[i]
            if char == "\\":
                i += 2
                continue
            if char in "'\"":
                i = self._single(i + 1) if char == "'" else self._double(i + 1)
                continue
            if char == "$":
                i = self._dollar(i)
                continue
            if char == "(":
                depth += 1
            elif char == ")":
                if depth == 0:
                    return i + 2 if self.s.startswith("))", i) else -1
                depth -= 1
            i += 1
        return -1


def lex(text: str) -> Lexed:
    lexer = _Lexer(text)
    lexer.script(0, None, lexer.out.tokens)
    return lexer.out


@dataclass(frozen=True)
class Prepared:
    """`text` for bashlex (same length as the source) and the pieces set aside from it."""

    text: str
    heredocs: tuple[HereDoc, ...]
    cases: tuple[CaseStatement, ...]  # outermost only; their bodies are scripts of their own
    opaque: tuple[tuple[str, int, int], ...]  # masked regions to search for reads only


def prepare(source: str) -> Prepared:
    lexed = lex(source)
    chars = list(source)
    for index, char in enumerate(chars):
        if char == "\r" and index + 1 < len(chars) and chars[index + 1] == "\n":
            chars[index] = " "
    outer = _outermost(lexed.cases)
    inside = [(case.start, case.end) for case in outer]

    def free(start: int) -> bool:
        return not any(a <= start < b for a, b in inside)

    heredocs = tuple(h for h in lexed.heredocs if free(h.operator[0]))
    for heredoc in heredocs:
        _blank(chars, *heredoc.operator, keep_newlines=True)
        _blank(chars, heredoc.body[0], heredoc.end, keep_newlines=True)
    opaque = []
    for kind, start, end in lexed.masks:
        if not free(start):
            continue
        if kind in ("arithmetic", "array"):
            chars[start:end] = "_" * (end - start)
        elif kind == "single-quoted":  # bashlex loops on `'${'x`; it needs no quoted text
            for index in range(start, end):
                if chars[index] != "\n":
                    chars[index] = "_"
            continue
        elif kind in ("time", "comment"):  # bashlex loops on `$(x # ${` too
            _blank(chars, start, end)
        elif kind == "arithmetic-for":
            _blank(chars, start, end)
            chars[start : start + 7] = "while :"
        else:  # `[[ ]]` and `(( ))` commands
            _blank(chars, start, end)
            chars[start] = ":"
        if kind not in ("time", "comment"):
            opaque.append((kind, start, end))
    for case in outer:
        _blank(chars, case.start, case.end)
        chars[case.start] = ":"
        opaque.append(("case-subject", *case.subject))
        opaque.extend(("case-pattern", *clause.pattern) for clause in case.clauses)
    return Prepared("".join(chars), heredocs, tuple(outer), tuple(opaque))


def _outermost(cases: list[CaseStatement]) -> list[CaseStatement]:
    ordered = sorted(cases, key=lambda c: (c.start, -c.end))
    outer: list[CaseStatement] = []
    for case in ordered:
        if not outer or case.start >= outer[-1].end:
            outer.append(case)
    return outer


def _blank(chars: list[str], start: int, end: int, keep_newlines: bool = False) -> None:
    for index in range(start, min(end, len(chars))):
        if not (keep_newlines and chars[index] == "\n"):
            chars[index] = " "
