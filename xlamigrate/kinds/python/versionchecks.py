"""The torch-xla releases each branch of a version check runs on, read on `ast`: a fix inside
`if is_pt21_plus:` may write a successor torch-xla 2.1 has, one in its `else` may not. A test
that looks like a version check (`_LOOKS_LIKE`) but cannot be read gives None: the branch may
run on any release. A check of another package's version alone (`transformers.__version__`,
`_TORCHMETRICS_GREATER_EQUAL_1_0_0`) is no check of torch-xla's.

Read: a comparison of the running version (`torch.__version__`, `torch_xla.__version__`, a name
like `TORCH_VERSION`, `version.parse(...)`, `Version(...)`, `LooseVersion(...)`,
`tuple(map(int, v.split(".")[:2]))`, `get_version("torch")`) with a constant (`"2.1"`,
`(2, 1)`, `version.parse("2.1")`); `v.startswith("2.0")`; transformers'
`is_torch_greater_or_equal("2.1")`, accelerate's `is_torch_version(">=", "2.1")` and
`compare_versions("torch", ">=", "2.1")`, Lightning's `compare_version("torch", operator.ge,
"2.1.0")` and `RequirementCache("torch_xla>=2.1")`; flags named for a release
(`is_pt21_plus`, `_TORCH_GREATER_EQUAL_2_1`, `is_torch_xla_2_1_or_later`, `is_pt20`); a name
assigned once from any of these; `and`, `or`, `not`. A torch release is read as the torch-xla
built for it (rules/releases.toml)."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from xlamigrate.apitable import Version
from xlamigrate.kinds.python.astscopes import Scope, Scopes, last_name
from xlamigrate.releasetable import ReleaseTable, release_table

_T = TypeVar("_T")

# What a test of the running release looks like, read or not: `torch_xla.__version__`,
# `version_tuple >=`, `is_pt20`, `TORCH_VERSION`, `_XLA_GREATER_EQUAL_2_1`, `is_pt21_plus`...
_LOOKS_LIKE = re.compile(
    r"(?i)version|\bis_(?:pt|torch|xla)_?\d|\bpt_?\d{2}\b|(?:greater|less)_(?:or_)?(?:equal|than)"
    r"|\d_?(?:plus|or_later|or_newer)\b"
)


@dataclass(frozen=True)
class Releases:
    """The torch-xla releases from `lower` up to, not including, `upper` (None: unbounded)."""

    lower: Version | None = None
    upper: Version | None = None

    def __and__(self, other: Releases) -> Releases:
        lower = max((v for v in (self.lower, other.lower) if v is not None), default=None)
        upper = min((v for v in (self.upper, other.upper) if v is not None), default=None)
        return Releases(lower, upper)

    def __or__(self, other: Releases) -> Releases:
        """The releases of either (and those between: a range has no gaps)."""
        lower = upper = None
        if self.lower is not None and other.lower is not None:
            lower = min(self.lower, other.lower)
        if self.upper is not None and other.upper is not None:
            upper = max(self.upper, other.upper)
        return Releases(lower, upper)

    def __str__(self) -> str:
        if self.lower is None:
            return f"torch-xla before {self.upper}" if self.upper else "any torch-xla"
        return f"torch-xla {self.lower}+" + (f", before {self.upper}" if self.upper else "")


ANY = Releases()


@dataclass(frozen=True)
class Branch:
    """A branch of a version check: how a finding names it (`if is_pt21_plus:`, the `else` of
    it), its test as written, and the releases it runs on (None: the test cannot be read)."""

    said: str
    test: str
    releases: Releases | None


class VersionChecks:
    """The version checks of one file, read once, on the first question."""

    def __init__(
        self,
        scopes: Scopes,
        code: Callable[[ast.AST], str] = ast.unparse,
        table: ReleaseTable | None = None,
    ) -> None:
        self.scopes = scopes
        self.code = code  # an expression's source text, as a finding quotes it
        self.reader = _Reader(scopes, table or release_table())
        self._said: dict[int, _Said] = {}  # each test read, by its check's id
        self._read: dict[tuple[int, int], Branch | None] = {}  # (check's id, side): its branch

    def around(self, node: ast.AST) -> tuple[Branch, ...]:
        """The branches of version checks the node is in, the outermost first. Only the tests
        of the `if`s around the node are read: those whose branches hold its place in the
        text (a node without one: every test of the file, and where each branch reaches)."""
        place = _place(node)
        if place is None:
            return self._branches.get(id(node), ())
        start, end = place
        found: list[Branch] = []
        for check, regions in self._regions:
            for side, (first, last) in enumerate(regions):
                if first is not None and first <= start and last is not None and end <= last:
                    branch = self._branch(check, side)
                    if branch is not None:
                        found.append(branch)
                    break
        return tuple(found)

    @functools.cached_property
    def _branches(self) -> dict[int, tuple[Branch, ...]]:
        """Each node of a branch of a version check, with the branches it is in."""
        found: dict[int, tuple[Branch, ...]] = {}
        for check, _ in self._regions:
            for side, parts in enumerate(_sides(check.node)):
                branch = self._branch(check, side)
                if branch is None:
                    break  # (the test reads no release: neither side is a version's branch)
                for inner in _walked(parts):
                    found[id(inner)] = (*found.get(id(inner), ()), branch)
        return found

    @functools.cached_property
    def _regions(self) -> list[tuple[_Check, tuple[_Region, _Region]]]:
        """Each `if` and conditional expression in walk order (the outer before the inner),
        with where its branches are in the text."""
        checks: list[tuple[_Check, tuple[_Region, _Region]]] = []
        elifs: set[int] = set()
        for node, scope, _ in self.scopes.of(ast.If, ast.IfExp):
            if not isinstance(node, (ast.If, ast.IfExp)):
                continue
            if isinstance(node, ast.If) and _is_elif(node):
                elifs.add(id(node.orelse[0]))
            check = _Check(node, scope, id(node) in elifs)
            checks.append((check, (_region(_sides(node)[0]), _region(_sides(node)[1]))))
        return checks

    def _branch(self, check: _Check, side: int) -> Branch | None:
        """The check's `if` side (0) or `else` side (1) as a branch; None where its test
        reads no release."""
        key = (id(check.node), side)
        if key not in self._read:
            self._read[key] = self._made(check, side)
        return self._read[key]

    def _made(self, check: _Check, side: int) -> Branch | None:
        said = self._said.get(id(check.node))
        if said is None:
            said = self._said[id(check.node)] = self.reader.condition(check.node.test, check.scope)
        if not said.reads:
            return None
        test = " ".join(self.code(check.node.test).split())
        if isinstance(check.node, ast.IfExp):
            this = f"`... if {test} else ...`"
        else:
            this = f"`{'elif' if check.is_elif else 'if'} {test}:`"
        if side == 0:
            return Branch(this, test, said.true)
        return Branch(f"the `else` of {this}", test, said.false)


@dataclass(frozen=True)
class _Check:
    """An `if` (an `elif`, where it is one) or a conditional expression, and its scope."""

    node: ast.If | ast.IfExp
    scope: Scope
    is_elif: bool


# Where a branch's nodes are in the text: from the first one's start to the last one's end
# ((line, column) pairs; None, None: an empty branch).
_Region = tuple[tuple[int, int] | None, tuple[int, int] | None]


def _sides(node: ast.If | ast.IfExp) -> tuple[list[ast.AST], list[ast.AST]]:
    """The nodes of its `if` side and of its `else` side."""
    if isinstance(node, ast.IfExp):
        return [node.body], [node.orelse]
    return [*node.body], [*node.orelse]


def _region(parts: list[ast.AST]) -> _Region:
    """Where the nodes below `parts` are: a statement's decorators stand before it."""
    if not parts:
        return None, None
    first, last = parts[0], parts[-1]
    starts = [_place(first)] + [_place(d) for d in getattr(first, "decorator_list", ())]
    begun = [place[0] for place in starts if place is not None]
    ended = _place(last)
    return (min(begun) if begun else None), (ended[1] if ended is not None else None)


def _place(node: ast.AST) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """Where the node is in the text (None: the parser gives it no place)."""
    line = getattr(node, "lineno", None)
    end_line = getattr(node, "end_lineno", None)
    if line is None or end_line is None:
        return None
    return (line, node.col_offset), (end_line, node.end_col_offset)  # type: ignore[attr-defined]


def _is_elif(node: ast.If) -> bool:
    """Whether the `if`'s `else` holds an `elif` (an `if`, alone, in the same column)."""
    inner = node.orelse[0] if len(node.orelse) == 1 else None
    return isinstance(inner, ast.If) and inner.col_offset == node.col_offset


def _walked(parts: Iterable[ast.AST]) -> Iterable[ast.AST]:
    for part in parts:
        yield from ast.walk(part)


@dataclass(frozen=True)
class _Said:
    """The releases a condition holds on and those it fails on (None: it cannot be read);
    `reads`: whether it reads the release at all."""

    true: Releases | None
    false: Releases | None
    reads: bool = True

    def negated(self) -> _Said:
        return _Said(self.false, self.true, self.reads)


_NOTHING = _Said(ANY, ANY, reads=False)  # a test of something else (`use_xla`)
_UNREAD = _Said(None, None)


def _all(parts: list[_Said]) -> _Said:
    """`a and b`: it holds where all hold (an unread part narrows it further, no wider), fails
    where one fails (anywhere, where one cannot be read)."""
    if not any(part.reads for part in parts):
        return _NOTHING
    held = ANY
    for part in parts:
        if part.true is not None:
            held = held & part.true
    true = None if held == ANY and any(part.true is None for part in parts) else held
    falses = [part.false for part in parts if part.false is not None]
    false: Releases | None = None
    if len(falses) == len(parts):
        false = falses[0]
        for one in falses[1:]:
            false = false | one
    return _Said(true, false)


def _any(parts: list[_Said]) -> _Said:
    """`a or b`: not (not a and not b)."""
    return _all([part.negated() for part in parts]).negated()


_OPERATORS: dict[type[ast.cmpop], str] = {
    ast.GtE: ">=", ast.Gt: ">", ast.LtE: "<=", ast.Lt: "<", ast.Eq: "==", ast.NotEq: "!=",
}  # fmt: skip
_FLIPPED = {">=": "<=", ">": "<", "<=": ">=", "<": ">", "==": "==", "!=": "!="}
_NAMED_OPERATORS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "eq": "==", "ne": "!="}
_PACKAGES = frozenset({"torch", "torch-xla", "torch-neuronx"})
# calls whose first argument's version they give (`version.parse(torch.__version__)`)
_WRAPPERS = frozenset({"parse", "Version", "LooseVersion", "StrictVersion", "parse_version"})
_PASSING = frozenset({"tuple", "list", "map", "str"})  # `tuple(map(int, v.split(".")))`
_STRING_METHODS = frozenset({"split", "rsplit", "partition", "strip", "rstrip", "replace"})
_VERSION_PARTS = frozenset({"release", "base_version", "public", "vstring", "version"})
_DISTRIBUTION = frozenset({"version", "get_version", "get_distribution", "_get_package_version"})
_RUNNING = re.compile(r"(torch_xla|torch_neuronx|torch)(?:\.version)?\.__version__")
_PACKAGE = r"(?P<package>torch_?xla|xla|torch|pytorch|pt)"
_NUMBERS = r"(?P<numbers>\d+(?:_\d+)*)"
_VERSION_NAME = re.compile(rf"(?i)_*{_PACKAGE}_?version(?:_?(?:tuple|info|str|string))?")
_FLAG_OPERATORS = {
    "greater_or_equal": ">=", "greater_equal": ">=", "greater_than_or_equal": ">=", "ge": ">=",
    "gte": ">=", "at_least": ">=", "greater_than": ">", "greater": ">", "gt": ">",
    "less_or_equal": "<=", "less_equal": "<=", "le": "<=", "lte": "<=", "at_most": "<=",
    "less_than": "<", "less": "<", "lt": "<", "equal": "==", "eq": "==",
}  # fmt: skip
_LATER = "plus|or_later|or_newer|or_above|or_greater|and_above|and_later|and_newer|and_up|up"
_COMPARED_FLAG = re.compile(
    rf"(?i)_*(?:is_|has_)?{_PACKAGE}_?(?P<operator>{'|'.join(_FLAG_OPERATORS)})(?:_than)?_?{_NUMBERS}"
)  # _TORCH_GREATER_EQUAL_2_1, is_torch_greater_or_equal_than_1_13, _XLA_LESS_THAN_2_5
_LATER_FLAG = re.compile(rf"(?i)_*(?:is_|has_)?{_PACKAGE}_?{_NUMBERS}_?(?:{_LATER})")
_RELEASE_FLAG = re.compile(rf"(?i)_*is_{_PACKAGE}_?{_NUMBERS}")  # is_pt20, is_pt2_5: that one


class _Reader:
    """Reads conditions of one file: what each says of the running torch-xla."""

    def __init__(self, scopes: Scopes, table: ReleaseTable) -> None:
        self.table = table
        self._values: dict[int, tuple[ast.expr, Scope]] = {}  # a stored Name -> its value
        for node, scope, _ in scopes.of(ast.Assign, ast.AnnAssign):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                target, value = node.target, node.value
            else:
                continue
            if isinstance(target, ast.Name):
                self._values[id(target)] = (value, scope)
        self._reading: set[int] = set()  # the values being read (`a = b`, `b = a`)

    def condition(self, node: ast.expr, scope: Scope) -> _Said:
        if isinstance(node, ast.BoolOp):
            parts = [self.condition(value, scope) for value in node.values]
            return _all(parts) if isinstance(node.op, ast.And) else _any(parts)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return self.condition(node.operand, scope).negated()
        if isinstance(node, ast.Compare):
            pairs = zip([node.left, *node.comparators], node.comparators, node.ops, strict=False)
            return _all([self._comparison(a, b, op, scope) for a, b, op in pairs])
        if isinstance(node, ast.Call):
            return self._call(node, scope)
        if isinstance(node, (ast.Name, ast.Attribute)):
            return self._flag(node, scope)
        return _unread(node)

    def _comparison(self, left: ast.expr, right: ast.expr, op: ast.cmpop, scope: Scope) -> _Said:
        operator = _OPERATORS.get(type(op))
        if operator is not None:
            package = self._running(left, scope)
            numbers = self._constant(right, scope)
            if package is not None and numbers is not None:
                return self._compared(operator, numbers, package)
            package = self._running(right, scope)
            numbers = self._constant(left, scope)
            if package is not None and numbers is not None:
                return self._compared(_FLIPPED[operator], numbers, package)
        return _unread(ast.Compare(left, [op], [right]))

    def _call(self, node: ast.Call, scope: Scope) -> _Said:
        name = last_name(node.func)
        texts = [_text(argument) for argument in node.args]
        if name == "startswith" and isinstance(node.func, ast.Attribute) and texts:
            package = self._running(node.func.value, scope)
            numbers = _numbers(texts[0])
            if package is not None and numbers is not None:
                return self._compared("startswith", numbers, package)
        elif name == "is_torch_greater_or_equal" and texts and texts[0]:  # transformers
            return self._said(">=", texts[0], "torch")
        elif name == "is_torch_version" and len(texts) == 2 and texts[0] and texts[1]:
            return self._said(texts[0], texts[1], "torch")  # accelerate
        elif name in ("compare_versions", "compare_version") and len(node.args) >= 3:
            package = _package(texts[0]) or self._running(node.args[0], scope)
            operator = texts[1] or _NAMED_OPERATORS.get(last_name(node.args[1]) or "")
            if package is not None and operator and texts[2]:  # accelerate; lightning_utilities
                return self._said(operator, texts[2], package)
        elif name == "RequirementCache" and texts and texts[0]:  # lightning_utilities
            return self._required(texts[0]) or _unread(node)
        return _unread(node)

    def _flag(self, node: ast.Name | ast.Attribute, scope: Scope) -> _Said:
        """A name assigned once from a check, else one named for a release (`is_pt21_plus`)."""
        said = self._assigned(node, scope, self.condition)
        if said is not None and said.reads and said != _UNREAD:
            return said
        # its own name, and the one it was imported by (`import is_pt21_plus as new_enough`)
        names = {last_name(node) or ""} | {q.rpartition(".")[2] for q in scope.qualified(node)}
        for name in sorted(names):
            for pattern, operator in ((_LATER_FLAG, ">="), (_RELEASE_FLAG, "==")):
                match = pattern.fullmatch(name)
                if match is not None:
                    return self._compared(operator, _flag_numbers(match["numbers"]), "torch-xla")
            match = _COMPARED_FLAG.fullmatch(name)
            if match is not None:
                operator = _FLAG_OPERATORS[match["operator"].lower()]
                return self._compared(operator, _flag_numbers(match["numbers"]), "torch-xla")
        return _unread(node)

    def _said(self, operator: str, version: str, package: str | None) -> _Said:
        """A comparison written as text (`">=", "2.1"`; `== 2.*`: any 2.x)."""
        numbers = _numbers(version)
        if package is None or numbers is None:
            return _UNREAD
        if version.endswith(".*") and operator in ("==", "!="):
            said = self._compared("startswith", numbers, package)
            return said if operator == "==" else said.negated()
        return self._compared(operator.strip(), numbers, package)

    def _required(self, text: str) -> _Said | None:
        """A requirement string's releases (`torch_xla>=2.1`), where it names torch(-xla)."""
        from packaging.requirements import InvalidRequirement, Requirement

        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            return None
        package = _package(requirement.name)
        if package is None or not requirement.specifier:
            return None
        return _all([self._said(s.operator, s.version, package) for s in requirement.specifier])

    def _compared(self, operator: str, numbers: tuple[int, ...], package: str) -> _Said:
        """What `running <operator> numbers` says of the torch-xla release, read a release at a
        time: `>= 2.1.2` holds on 2.1 and newer, fails on 2.1 and older."""
        given = len(numbers)
        numbers = (*numbers, 0)[: max(2, given)]
        release = Version(numbers[:2])
        if package != "torch-xla":  # torch's release (torch-neuronx's first numbers)
            release = self.table.torch_xla(release)
        after = self.table.after(release)
        exact = not any(numbers[2:])  # 2.1 or 2.1.0: no 2.1 holds `< 2.1`
        from_it = Releases(lower=release)
        before_it = Releases(upper=release if exact else after)  # where `< numbers` may hold
        up_to_it = Releases(upper=after)  # where `<= numbers` may hold
        if operator == "startswith" and given == 1:  # `startswith("2")`: every 2.x
            return _Said(Releases(release, Version((release.numbers[0] + 1, 0))), ANY)
        said = {
            ">=": _Said(from_it, before_it),
            "~=": _Said(from_it, ANY),
            ">": _Said(from_it, up_to_it),
            "<": _Said(before_it, from_it),
            "<=": _Said(up_to_it, from_it),
            "==": _Said(Releases(release, after), ANY),
            "===": _Said(Releases(release, after), ANY),
            "startswith": _Said(Releases(release, after), ANY),
            "!=": _Said(ANY, Releases(release, after)),
        }
        return said.get(operator, _UNREAD)

    def _running(self, node: ast.expr, scope: Scope) -> str | None:
        """The package whose running version the expression gives, if torch's or torch-xla's:
        `torch.__version__`, `version.parse(torch_xla.__version__).release`, `XLA_VERSION`."""
        if isinstance(node, (ast.Name, ast.Attribute)):
            for qualified in scope.qualified(node):
                match = _RUNNING.fullmatch(qualified)
                if match is not None:
                    return match[1].replace("_", "-")
            package = self._assigned(node, scope, self._running)
            if package is not None:
                return package
            if isinstance(node, ast.Attribute) and node.attr in _VERSION_PARTS:
                return self._running(node.value, scope)
            match = _VERSION_NAME.fullmatch(last_name(node) or "")
            if match is not None:
                return "torch-xla" if "xla" in match["package"].lower() else "torch"
            return None
        if isinstance(node, ast.Subscript):
            return self._running(node.value, scope)
        if not isinstance(node, ast.Call):
            return None
        name = last_name(node.func)
        if isinstance(node.func, ast.Attribute) and name in _STRING_METHODS:
            return self._running(node.func.value, scope)
        if name in _WRAPPERS or name in _PASSING:
            found = (self._running(argument, scope) for argument in node.args)
            return next((package for package in found if package is not None), None)
        if name in _DISTRIBUTION and node.args:
            return _package(_text(node.args[0]))
        return None

    def _constant(self, node: ast.expr, scope: Scope) -> tuple[int, ...] | None:
        """The numbers of a constant version: `"2.1"`, `(2, 1)`, `version.parse("2.1")`."""
        text = _text(node)
        if text is not None:
            return _numbers(text)
        if isinstance(node, ast.Tuple) and node.elts:
            numbers = [
                e.value for e in node.elts if isinstance(e, ast.Constant) and type(e.value) is int
            ]
            return tuple(numbers) if len(numbers) == len(node.elts) else None
        if isinstance(node, ast.Call) and last_name(node.func) in _WRAPPERS and node.args:
            return self._constant(node.args[0], scope)
        return self._assigned(node, scope, self._constant)

    def _assigned(
        self, node: ast.expr, scope: Scope, read: Callable[[ast.expr, Scope], _T]
    ) -> _T | None:
        """`read` of the value a name assigned once (in the scope it has here) was assigned;
        None where it is not such a name, or is being read already (`a = b`, `b = a`)."""
        if not isinstance(node, ast.Name):
            return None
        binder = scope.binder(node.id)
        if binder is None or binder.bindings[node.id] != {f"{binder.prefix}{node.id}"}:
            return None  # unbound, or imported
        stores = binder.targets.get(node.id, [])
        store = id(stores[0]) if len(stores) == 1 else None
        if store is None or store not in self._values or store in self._reading:
            return None
        value, evaluated = self._values[store]
        self._reading.add(store)
        try:
            return read(value, evaluated)
        finally:
            self._reading.discard(store)


# Another package's version (`transformers.__version__`, `_TORCHMETRICS_GREATER_EQUAL_1_0_0`),
# and a mention of torch's, torch-xla's or torch-neuronx's (not torchmetrics', torchvision's...).
_OTHER_PACKAGE = re.compile(
    r"(?i)\b(?!(?:torch|torch_xla|torch_neuronx)\.)[a-z_][a-z0-9_]*\.__version__"
    r"|\b_*(?!(?:torch|torch_?xla|xla|pytorch|pt)_)[a-z][a-z0-9]*_(?:greater|less)_"
)
_TORCH_MENTION = re.compile(r"(?i)torch(?!metrics|vision|audio|text|data)|xla|\bpt_?\d")


def _unread(node: ast.expr) -> _Said:
    """A condition not read: a version check that cannot be, or a test of something else (a
    check of another package's version only is one)."""
    if not any(_LOOKS_LIKE.search(word) for word in _words(node)):
        return _NOTHING  # (nor can its text: the quicker answer for most tests of a file)
    text = ast.unparse(node)
    if not _LOOKS_LIKE.search(text):
        return _NOTHING
    if _OTHER_PACKAGE.search(text) and not _TORCH_MENTION.search(text):
        return _NOTHING
    return _UNREAD


def _words(node: ast.expr) -> Iterator[str]:
    """The names and constants of an expression, as its text spells them: what _LOOKS_LIKE
    can match in that text (each of its words stands within a name or a constant)."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name):
            yield inner.id
        elif isinstance(inner, ast.Attribute):
            yield inner.attr
        elif isinstance(inner, ast.Constant):
            yield repr(inner.value)
        elif isinstance(inner, ast.keyword | ast.arg):
            yield inner.arg or ""


def _text(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _numbers(text: str | None) -> tuple[int, ...] | None:
    """A version's leading numbers (`2.1.0+cpu`, `v2.1`, `2.1.0a0`: 2.1.0)."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", text or "")
    return tuple(int(part) for part in match[1].split(".")) if match else None


def _flag_numbers(text: str) -> tuple[int, ...]:
    """A release in a name: `2_1` or `21` (2.1), `113` (1.13), `2_4_1`."""
    if "_" in text:
        return tuple(int(part) for part in text.split("_"))
    return (int(text[0]), int(text[1:])) if len(text) > 1 else (int(text),)


def _package(name: str | None) -> str | None:
    """torch, torch-xla or torch-neuronx, however spelled (`torch_xla`); None: another."""
    package = re.sub(r"[-_.]+", "-", (name or "").lower())
    return package if package in _PACKAGES else None
