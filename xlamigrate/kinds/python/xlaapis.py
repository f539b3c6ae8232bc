"""The uses of deprecated and removed torch-xla APIs in one Python file (the table:
rules/xla_apis.toml), and what the fix writes for each.

Uses are found on `ast` by the qualified names the file's scopes give a name or an attribute
chain, so every import spelling resolves alike: `xm.mark_step` after `import
torch_xla.core.xla_model as xm`, `xla_model.mark_step` after `from torch_xla.core import
xla_model`, `mark_step` after `from torch_xla.core.xla_model import mark_step`, the dotted
path after `import torch_xla`. Calls, references (`f = xm.xrt_world_size`), calls in lambdas
and default arguments alike; a local name that shadows an import is not a use.

A fix refers to the replacement the way the file already does (a name it binds to the
replacement's module, `xr` for torch_xla.runtime, say), else through the conventional alias
(`import torch_xla.runtime as xr`) or the dotted path, and maps the call's arguments as the
table says. The import it adds goes where the file imports what the use goes through (under the
same `if`, in the same function): a module that imports torch-xla only where it is installed
still imports without it. An import that goes with its uses' fixes is one unit with them.
What it cannot write (an argument the replacement does not take, a replacement newer than the
torch-xla the project pins, or than the oldest release a version check around the use lets it
run on: `else` of `if is_pt21_plus:`, versionchecks.py) is reported, not fixed; so is a use
under a version check that cannot be read."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from xlamigrate.apitable import ApiTable, Parameter, Version, XlaApi, api_table
from xlamigrate.catalogue import Catalogue
from xlamigrate.kinds.python.astscopes import Scope, Scopes, last_name
from xlamigrate.kinds.python.source import PythonFile
from xlamigrate.kinds.python.versionchecks import Branch, Releases, VersionChecks
from xlamigrate.results import Applicability, Finding

# (as kinds/python/imports.py names them; that module loads libcst, which a scan never does)
Needed = tuple[str, str | None]  # (module, name): `import module` / `from module import name`
Aliased = tuple[str, str]  # (module, alias): `import module as alias`


@dataclass(frozen=True)
class ApiUse:
    """A name or attribute chain that resolves to a table entry (a module's member: the
    attribute on the module)."""

    api: XlaApi
    node: ast.expr
    scope: Scope
    call: ast.Call | None = None  # the call it is the function of
    member: str | None = None  # a module entry's member used through it (`pjrt.world_size`)
    module_node: ast.expr | None = None  # the module's own chain (`torch_xla.experimental.pjrt`)


@dataclass(frozen=True)
class ApiImport:
    """An import statement's name that is (or comes from) a table entry."""

    api: XlaApi
    statement: ast.Import | ast.ImportFrom
    alias: ast.alias
    bound: str  # the name the alias binds in the file
    member: str | None = None  # `from torch_xla.experimental.pjrt import world_size`


@dataclass
class ApiEdits:
    """What a fix writes: expressions swapped for code, names of import statements removed or
    imported from elsewhere (`statement_code` puts a statement's together), imports added."""

    swapped: dict[ast.AST, str] = field(default_factory=dict)
    # (statement, the name it imports, the import that takes its place: None for none)
    renamed: list[tuple[ast.Import | ast.ImportFrom, ast.alias, str | None]] = field(
        default_factory=list
    )
    imports: set[Needed] = field(default_factory=set)
    aliased: set[Aliased] = field(default_factory=set)
    # Where the added imports go: after these import statements, the file's own imports of
    # what the use goes through (in a function, under an `if`, in a `try`); none: with the
    # module's own imports at its top, the file's imports being unconditional there.
    anchors: tuple[ast.Import | ast.ImportFrom, ...] = ()

    def merge(self, other: ApiEdits) -> None:
        self.swapped.update(other.swapped)
        self.renamed += other.renamed
        self.imports |= other.imports
        self.aliased |= other.aliased

    def import_lines(self) -> list[str]:
        """The import statements the fix adds."""
        added = [f"import {module}" for module, name in self.imports if name is None]
        added += [f"from {module} import {name}" for module, name in self.imports if name]
        added += [f"import {module} as {alias}" for module, alias in self.aliased]
        return sorted(added)

    def statement_code(self) -> dict[ast.Import | ast.ImportFrom, list[str]]:
        """Each import statement with a name renamed or removed: the statements that take its
        place (its other names first; none where nothing is left)."""
        by_statement: dict[int, list[tuple[ast.Import | ast.ImportFrom, ast.alias, str | None]]]
        by_statement = {}
        for entry in self.renamed:
            by_statement.setdefault(id(entry[0]), []).append(entry)
        code: dict[ast.Import | ast.ImportFrom, list[str]] = {}
        for entries in by_statement.values():
            statement = entries[0][0]
            gone = {id(alias) for _, alias, _ in entries}
            kept = [a for a in statement.names if id(a) not in gone]
            lines = [_import_code(statement, kept)] if kept else []
            lines += _joined([new for _, _, new in entries if new is not None])
            code[statement] = lines
        return code


@dataclass(frozen=True)
class ApiFinding:
    """One use (or import) reported: where, what it says, and its fix (None: manual)."""

    api: XlaApi
    node: ast.AST
    subject: str
    applicability: Applicability
    edits: ApiEdits | None = None
    # the uses whose fixes this one needs applied with it (an import that goes once no use of
    # its name is left): one unit, applied whole or not at all
    needs: tuple[ast.AST, ...] = ()


def api_uses(scopes: Scopes, table: ApiTable) -> tuple[list[ApiUse], list[ApiImport]]:
    """The file's uses of table entries, and its imports of them, in walk order (an import
    tried under `except ImportError` is the file's own fallback: not one)."""
    statements = [node for node, _, _ in scopes.of(*_IMPORTS_AND_TRIES)]
    tried = _tried_imports(statements)
    imports = [
        found for node in statements if id(node) not in tried for found in _imported(node, table)
    ]
    names = {api.member for api in table.apis.values()}
    names |= {found.bound for found in imports if found.member is None}
    calls = {id(n.func): n for n, _, _ in scopes.of(ast.Call) if isinstance(n, ast.Call)}
    consumed: set[int] = set()  # a module's chain whose member was seen (`pjrt` in `pjrt.f`)
    uses: list[ApiUse] = []
    for node, scope, _ in scopes.of(ast.Attribute, ast.Name):
        assert isinstance(node, (ast.Attribute, ast.Name))
        if isinstance(node, ast.Name):
            if node.id not in names:
                continue  # (most names: the quick answer before _use's)
        elif node.attr not in names and last_name(node.value) not in names:
            continue
        if id(node) in consumed or not isinstance(node.ctx, ast.Load):
            continue
        use = _use(node, scope, names, table, calls)
        if use is not None:
            uses.append(use)
            if use.module_node is not None:
                consumed.add(id(use.module_node))
    return uses, imports


def _use(
    node: ast.Attribute | ast.Name,
    scope: Scope,
    names: set[str],
    table: ApiTable,
    calls: dict[int, ast.Call],
) -> ApiUse | None:
    if isinstance(node, ast.Attribute) and last_name(node.value) in names:
        api = _entry(scope.qualified(node.value), table)
        if api is not None and api.is_module:  # a member of a replaced module
            return ApiUse(api, node, scope, calls.get(id(node)), node.attr, node.value)
    if last_name(node) not in names:
        return None
    api = _entry(scope.qualified(node), table)
    if api is None:
        return None
    module_node = node if api.is_module else None
    return ApiUse(api, node, scope, calls.get(id(node)), module_node=module_node)


def _entry(qualified: set[str], table: ApiTable) -> XlaApi | None:
    """The one table entry a name's bindings all give; None where one gives something else
    (`try: from torch_xla.core.xla_model import xrt_world_size / except ImportError: from
    torch_xla.runtime import world_size as xrt_world_size`: the file handles both releases)."""
    found = {table.apis.get(name) for name in qualified}
    if len(found) != 1:
        return None
    return found.pop()


_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "AttributeError", "Exception"})


_IMPORTS_AND_TRIES = frozenset({ast.Import, ast.ImportFrom, ast.Try})


def _tried_imports(statements: list[ast.AST]) -> set[int]:
    """The ids of the imports in a `try` body whose handlers catch a failed import."""
    tried: set[int] = set()
    for node in statements:
        if not isinstance(node, ast.Try):
            continue
        caught = set()
        for handler in node.handlers:
            kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
            caught |= {last_name(kind) if kind is not None else "Exception" for kind in kinds}
        if caught & _IMPORT_ERRORS:
            for statement in node.body:
                tried |= {
                    id(inner)
                    for inner in ast.walk(statement)
                    if isinstance(inner, (ast.Import, ast.ImportFrom))
                }
    return tried


def _imported(node: ast.AST, table: ApiTable) -> Iterator[ApiImport]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            api = table.apis.get(alias.name)
            if api is not None:
                yield ApiImport(api, node, alias, alias.asname or alias.name.split(".")[0])
    elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
        for alias in node.names:
            api = table.apis.get(f"{node.module}.{alias.name}")
            bound = alias.asname or alias.name
            if api is not None:
                yield ApiImport(api, node, alias, bound)
                continue
            api = table.apis.get(node.module)
            if api is not None and api.is_module:
                yield ApiImport(api, node, alias, bound, member=alias.name)


class ApiFixer:
    """The findings (and fixes) for a file's uses and imports of table entries."""

    def __init__(
        self,
        scopes: Scopes,
        table: ApiTable,
        code: Callable[[ast.AST], str],
        fixes: dict[str, Applicability],
        floor: Version | None = None,
        suppressed: frozenset[int] = frozenset(),
    ) -> None:
        self.suppressed = suppressed  # the ids of uses whose findings a comment suppresses
        self.fixes = fixes  # each rule's applicability for a fix it writes (XM504: unsafe)
        self.scopes = scopes
        self.table = table
        self.code = code  # an expression's source text
        self.floor = floor  # the oldest torch-xla the project runs on (None: no pin known)

    def findings(self, uses: list[ApiUse], imports: list[ApiImport]) -> list[ApiFinding]:
        found: list[ApiFinding] = []
        # a from-imported name -> the weakest fix of its uses ("manual": one is not fixed) and
        # the uses themselves
        fixed_bindings: dict[str, tuple[Applicability, tuple[ast.AST, ...]]] = {}
        for use in uses:
            finding = self._module_use(use) if use.api.is_module else self._use(use)
            if finding is None:
                continue
            finding = self._unless_version_checked(self._placed(finding, use))
            found.append(finding)
            if isinstance(use.node, ast.Name):
                weakest, nodes = fixed_bindings.get(use.node.id, ("safe", ()))
                fix = finding.applicability if finding.edits is not None else "manual"
                if id(finding.node) in self.suppressed:  # the use stays: so does its import
                    fix = "manual"
                fixed_bindings[use.node.id] = (_weaker(weakest, fix), (*nodes, finding.node))
        found += self._imports(imports, uses, fixed_bindings)
        return found

    # -- a function's use ----------------------------------------------------------------------

    def _use(self, use: ApiUse) -> ApiFinding | None:
        api = use.api
        call = use.call
        if api.with_arguments_only and (call is None or not (call.args or call.keywords)):
            return None
        limited = self._limited_argument(api, call) if api.limited else None
        if api.limited and limited is None:
            return None  # a call within what torch-xla takes, or a reference: not a use
        spelled = self.code(use.node)
        if call is not None:
            spelled += "(...)" if call.args or call.keywords else "()"
        if api.replacement is None:
            return ApiFinding(api, use.node, f"{spelled}: {api.status}; {api.note}", "manual")
        if limited is not None:  # `nprocs=8` in xmp.spawn(...): the call stays, less that
            head = f"`{limited}` in {spelled}: {api.status}; {api.note}"
        else:
            head = f"{spelled}: {api.status}; use {_called(api.replacement, call)}{_since(api)}"
        problem = self._too_new(api.since, use.node)
        if problem is not None:
            return ApiFinding(api, use.node, f"{head}; not fixed: {problem}", "manual")
        edits = ApiEdits()
        if api.keeps_name and call is not None:
            target = self.code(call.func)
        else:
            target = self._written(api.replacement, use.scope, edits, dotted=_dotted(use.node))
        if call is None:
            applicability: Applicability = "safe" if self._as_is(api, use.node) else "unsafe"
            if api.prefix or api.defaults:
                return ApiFinding(
                    api,
                    use.node,
                    f"{head}; not fixed: a reference, whose calls need other arguments",
                    "manual",
                )
            edits.swapped[use.node] = target
            why = "" if applicability == "safe" else f" (the fix assumes {_assumed(api)})"
            return ApiFinding(api, use.node, f"{head}{why}", applicability, edits)
        arguments = self._arguments(api, call, use.scope, edits)
        if isinstance(arguments, str):
            return ApiFinding(api, use.node, f"{head}; not fixed: {arguments}", "manual")
        edits.swapped[call] = f"{target}({', '.join(arguments)})"
        return ApiFinding(api, use.node, head, self.fixes.get(api.rule, "safe"), edits)

    def _arguments(
        self, api: XlaApi, call: ast.Call, scope: Scope, edits: ApiEdits
    ) -> list[str] | str:
        """The replacement call's arguments, or why they cannot be written."""
        if any(isinstance(a, ast.Starred) for a in call.args) or any(
            k.arg is None for k in call.keywords
        ):
            return "the call passes *args or **kwargs"
        if api.call == "same":
            return [self.code(a) for a in call.args] + [
                f"{k.arg}={self.code(k.value)}" for k in call.keywords
            ]
        written = list(api.prefix)
        positional = not api.keywords
        passed: set[str] = set()
        for index, argument in enumerate(call.args):
            if index >= len(api.parameters):
                return f"it passes {len(call.args)} positional arguments"
            parameter = api.parameters[index]
            problem = self._mapped(parameter, argument, scope)
            if problem is not None:
                return problem
            passed.add(parameter.name)
            if self._goes(parameter, argument):
                positional = False  # the arguments after it move: by keyword from here
                continue
            code = self.code(argument)
            written.append(code if positional else f"{parameter.to}={code}")
        by_name = {p.name: p for p in api.parameters}
        for keyword in call.keywords:
            assert keyword.arg is not None
            found = by_name.get(keyword.arg)
            if found is None:
                return f"it passes `{keyword.arg}`, which {api.member} does not take"
            problem = self._mapped(found, keyword.value, scope)
            if problem is not None:
                return problem
            passed.add(found.name)
            if not self._goes(found, keyword.value):
                written.append(f"{found.to}={self.code(keyword.value)}")
        for name, qualified in api.defaults:
            if name not in passed:
                written.append(f"{name}={self._written(qualified, scope, edits)}")
        return written

    def _limited_argument(self, api: XlaApi, call: ast.Call | None) -> str | None:
        """The first argument of the call that torch-xla no longer takes (`nprocs=8`), where
        the entry limits what a parameter takes; None where the call passes none."""
        if call is None:
            return None
        by_position = zip(api.parameters, call.args, strict=False)
        by_name = {p.name: p for p in api.parameters}
        pairs = [*by_position, *((by_name.get(k.arg or ""), k.value) for k in call.keywords)]
        for parameter, argument in pairs:
            if isinstance(argument, ast.Starred):
                continue  # (what it passes is not known here)
            if parameter is not None and self._rejected(parameter, argument):
                return f"{parameter.name}={self.code(argument)}"
        return None

    def _rejected(self, parameter: Parameter, argument: ast.expr) -> bool:
        """Whether the argument may be a value torch-xla no longer takes for `parameter`
        (`1 if tp_degree == 1 else None` is one of the values it takes, either way)."""
        if not parameter.accepted:
            return False
        if isinstance(argument, ast.IfExp):
            return any(self._rejected(parameter, arm) for arm in (argument.body, argument.orelse))
        return self.code(argument) not in parameter.accepted

    def _goes(self, parameter: Parameter, argument: ast.expr) -> bool:
        """Whether the fix drops the argument: its parameter has no counterpart to pass it to,
        or torch-xla rejects the value (which the releases before ignored)."""
        return parameter.to == "-" or self._rejected(parameter, argument)

    def _mapped(self, parameter: Parameter, argument: ast.expr, scope: Scope) -> str | None:
        """Why an argument for `parameter` cannot be written (None: it can)."""
        if parameter.to is None:
            return f"it passes `{parameter.name}`, which its replacement has no counterpart for"
        if self._rejected(parameter, argument) and not _literal(argument):
            accepted = " or ".join(parameter.accepted)
            return (
                f"`{parameter.name}={self.code(argument)}` is computed: where it may be "
                f"{accepted}, the call needs it; drop it by hand where it never is"
            )
        if parameter.to == "-" and not self._plain(argument, scope):
            return f"its `{parameter.name}` argument would go, and with it what computing it does"
        if parameter.only is not None and parameter.only not in _qualified(scope, argument):
            return f"its `{parameter.name}` is not {parameter.only}"
        if parameter.to != "-":
            problem = self._too_new(parameter.since, argument)
            if problem is not None:
                return f"`{parameter.to}` needs torch-xla {parameter.since}; {problem}"
        return None

    def _as_is(self, api: XlaApi, node: ast.AST) -> bool:
        """Whether a reference to the function can name the replacement unchanged: every
        parameter keeps its name and the torch-xla the use runs on takes it."""
        return all(
            p.to == p.name and p.only is None and self._too_new(p.since, node) is None
            for p in api.parameters
        )

    def _plain(self, node: ast.expr, scope: Scope) -> bool:
        """Whether evaluating the expression does nothing but give its value: a constant, a
        name, an attribute of one, a negative number, a call of the table's value-only calls
        (`xm.xla_device()`) with such arguments."""
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            node = node.operand
        if isinstance(node, ast.Call):
            arguments = [*node.args, *(k.value for k in node.keywords)]
            return bool(_qualified(scope, node.func) & self.table.value_only) and all(
                self._plain(argument, scope) for argument in arguments
            )
        while isinstance(node, ast.Attribute):
            node = node.value
        return isinstance(node, (ast.Constant, ast.Name))

    def _too_new(self, since: Version | None, node: ast.AST) -> str | None:
        """Why a replacement from `since` cannot be written at `node` (None: it can): the
        oldest release it runs on is older, the project's floor or a version check's around it
        (`if is_pt21_plus:`: 2.1), or a check's branch has none (the `else` of that)."""
        if since is None:
            return None
        known = [(b, b.releases) for b in self._checks.around(node) if b.releases is not None]
        floor, deciding = self.floor, None
        for branch, releases in known:
            if releases.lower is not None and (floor is None or releases.lower >= floor):
                floor, deciding = releases.lower, branch
        if floor is not None and since <= floor:
            return None
        if deciding is None and (floor is not None or not known):
            return None if floor is None else f"the project runs on torch-xla {floor}"
        return _under(deciding or known[-1][0], [releases for _, releases in known], self.floor)

    # -- a replaced module's use ---------------------------------------------------------------

    def _module_use(self, use: ApiUse) -> ApiFinding | None:
        """A member of a replaced module, through a name an import binds to the module (fixed
        with the import, so not reported unless the runtime lacks it) or its dotted path."""
        api = use.api
        assert api.replacement is not None
        if use.member is None or use.member not in api.members:
            what = f"`{use.member}`" if use.member is not None else "the module itself"
            subject = (
                f"{self.code(use.node)}: {api.status}, and {api.replacement} has no {what}; "
                "not fixed: find its successor by hand"
            )
            return ApiFinding(api, use.node, subject, "manual")
        module_node = use.module_node
        assert module_node is not None
        if isinstance(module_node, ast.Name):
            return None  # an import binds the name: its finding (and fix) is the import's
        problem = self._too_new(api.since, module_node)
        head = f"{self.code(module_node)}: {api.status}; use {api.replacement}{_since(api)}"
        if problem is not None:
            return ApiFinding(api, module_node, f"{head}; not fixed: {problem}", "manual")
        edits = ApiEdits()
        edits.swapped[module_node] = self._written(api.replacement, use.scope, edits)
        return ApiFinding(api, module_node, head, "safe", edits)

    # -- imports -------------------------------------------------------------------------------

    def _imports(
        self, imports: list[ApiImport], uses: list[ApiUse], fixed: dict[str, _Fixed]
    ) -> list[ApiFinding]:
        """An import of a removed name fails at import time: it is reported and, once every use
        of the name it binds is fixed, removed (a module: imported from its successor)."""
        found = [self._import(entry, uses, fixed) for entry in imports]
        return [self._unless_version_checked(f) for f in found if f is not None]

    def _unless_version_checked(self, finding: ApiFinding) -> ApiFinding:
        """A fix inside a branch of a version check that cannot be read (`if version_ok():`)
        is left for a hand edit: the branch may be the one for a torch-xla older than the
        successor. One that can be read gives the oldest release instead (`_too_new`)."""
        if finding.edits is None:
            return finding
        unread = [b for b in self._checks.around(finding.node) if b.releases is None]
        if not unread:
            return finding
        test = unread[-1].test  # the innermost
        subject = (
            f"{finding.subject}; not fixed: under a version check (`{test}`), a branch that "
            "may run on an older torch-xla than its successor's: edit it by hand"
        )
        return ApiFinding(finding.api, finding.node, subject, "manual")

    @functools.cached_property
    def _checks(self) -> VersionChecks:
        """The branches of the file's version checks, and the releases each runs on."""
        return VersionChecks(self.scopes, self.code)

    def _import(
        self, entry: ApiImport, uses: list[ApiUse], fixed: dict[str, _Fixed]
    ) -> ApiFinding | None:
        """The import goes with the fixes of its name's uses, as one unit: as safe as the
        least safe of them, applied only where all of them are."""
        api = entry.api
        if api.keeps_name:
            return None  # the function stays: so does its import
        statement = entry.statement
        spelled = _import_code(statement, [entry.alias])
        if api.is_module:
            return self._module_import(entry, uses, spelled)
        weakest, needs = fixed.get(entry.bound, ("safe" if api.replacement else "manual", ()))
        all_fixed = weakest != "manual"
        if api.removed is None and not (all_fixed and needs):
            return None  # still importable; its uses have their own findings
        head = f"{spelled}: {api.status}"
        if api.removed is not None and not all_fixed:
            reason = "not fixed: its uses are not all fixed" if entry.bound in fixed else ""
            if api.replacement is None:
                reason = api.note
            return ApiFinding(api, entry.alias, f"{head}; {reason or 'remove it'}", "manual")
        if entry.bound in _exported(self.scopes):
            subject = f"{head}; not fixed: the module exports the name (`__all__`)"
            return ApiFinding(api, entry.alias, subject, "manual")
        edits = ApiEdits(renamed=[(statement, entry.alias, None)])
        subject = f"{head}; the import goes, its uses call {api.replacement}{_since(api)}"
        return ApiFinding(api, entry.alias, subject, weakest, edits, needs)

    def _module_import(self, entry: ApiImport, uses: list[ApiUse], spelled: str) -> ApiFinding:
        api = entry.api
        assert api.replacement is not None
        head = f"{spelled}: {api.status}; use {api.replacement}{_since(api)}"
        problem = self._too_new(api.since, entry.alias)
        if problem is not None:
            return ApiFinding(api, entry.alias, f"{head}; not fixed: {problem}", "manual")
        statement = entry.statement
        if entry.member is not None:  # from torch_xla.experimental.pjrt import world_size
            if entry.member not in api.members:
                subject = f"{head}, which has no `{entry.member}`; not fixed: find its successor"
                return ApiFinding(api, entry.alias, subject, "manual")
            assert isinstance(statement, ast.ImportFrom)
            replaced = ast.ImportFrom(api.replacement, [entry.alias], 0)
            code = _import_code(replaced, [entry.alias])
        else:
            missing = sorted(
                {
                    u.member or "the module itself"
                    for u in uses
                    if u.api is api
                    and (u.member is None or u.member not in api.members)
                    and _binds(u, entry)
                }
            )
            if missing:
                subject = f"{head}, which has no {', '.join(missing)}; not fixed"
                return ApiFinding(api, entry.alias, subject, "manual")
            code = _module_import_code(api.replacement, entry)
        edits = ApiEdits(renamed=[(statement, entry.alias, code)])
        return ApiFinding(api, entry.alias, head, "safe", edits)

    # -- where added imports go -----------------------------------------------------------------

    def _placed(self, finding: ApiFinding, use: ApiUse) -> ApiFinding:
        """The fix with its imports placed where the file imports what the use goes through:
        under the same condition, in the same function (a GPU or CPU run without torch-xla
        never reaches them), or with the module's imports where those are unconditional."""
        edits = finding.edits
        if edits is None or not (edits.imports or edits.aliased):
            return finding
        anchors = self._anchors(use)
        if anchors is None:
            subject = (
                f"{finding.subject}; not fixed: where the file imports "
                f"`{_root(use.node)}` is not an import statement the fix can add its import beside"
            )
            return ApiFinding(finding.api, finding.node, subject, "manual")
        edits.anchors = anchors
        return finding

    def _anchors(self, use: ApiUse) -> tuple[ast.Import | ast.ImportFrom, ...] | None:
        """The import statements binding the name the use starts from (none: they are all
        statements of the module's own body), or None where an import does not bind it."""
        root = _root(use.node)
        binder = use.scope.binder(root) if root is not None else None
        if binder is None:
            return None
        statements = self._binding_imports.get((id(binder), root), [])  # type: ignore[arg-type]
        if not statements:
            return None
        top = {id(statement) for statement in self.scopes.tree.body}
        if all(id(statement) in top for statement in statements):
            return ()
        return tuple(statements)

    @functools.cached_property
    def _binding_imports(self) -> dict[tuple[int, str], list[ast.Import | ast.ImportFrom]]:
        """The import statements binding each (scope, name)."""
        found: dict[tuple[int, str], list[ast.Import | ast.ImportFrom]] = {}
        for node, scope, _ in self.scopes.of(ast.Import, ast.ImportFrom):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    from_import = isinstance(node, ast.ImportFrom)
                    bound = alias.asname or (
                        alias.name if from_import else alias.name.split(".")[0]
                    )
                    found.setdefault((id(scope), bound), []).append(node)
        return found

    # -- writing a qualified name ----------------------------------------------------------------

    def _written(self, qualified: str, scope: Scope, edits: ApiEdits, dotted: bool = False) -> str:
        """The code for a qualified name at `scope` (`xr.world_size`, `torch_xla.device`), and
        the import it needs in `edits`. `dotted`: the use spells torch-xla's full path, so the
        replacement does too where the package's name is there to start it from."""
        module, _, name = qualified.rpartition(".")
        bound = self._binding_of(module, scope)
        if bound is not None:
            return f"{bound}.{name}"
        top = module.split(".")[0]
        if dotted and scope.lookup(top) == {top}:
            edits.imports.add((module, None))
            return qualified
        alias = self.table.aliases.get(module)
        if alias is not None and not self._bound_anywhere(alias):
            edits.aliased.add((module, alias))
            return f"{alias}.{name}"
        if scope.lookup(top) not in ({top}, set()):
            # the top name means something else here: import the module under its own alias
            alias = f"_{module.replace('.', '_')}"
            edits.aliased.add((module, alias))
            return f"{alias}.{name}"
        edits.imports.add((module, None))
        return qualified

    def _binding_of(self, module: str, scope: Scope) -> str | None:
        """A name `scope` or a scope around it binds to `module` and `scope` sees as such; for
        a top-level package, its own name once it is bound (`import torch_xla.core.xla_model`
        binds `torch_xla`)."""
        around: Scope | None = scope
        bindings: dict[str, set[str]] = {}
        while around is not None:
            bindings = {**around.bindings, **bindings}
            around = around.parent
        candidates = sorted(name for name, qualified in bindings.items() if qualified == {module})
        preferred = self.table.aliases.get(module)
        if preferred in candidates:
            candidates.remove(preferred)
            candidates.insert(0, preferred)
        return next((name for name in candidates if scope.lookup(name) == {module}), None)

    def _bound_anywhere(self, name: str) -> bool:
        scopes = [self.scopes.module, *self.scopes.opened.values()]
        return any(name in scope.bindings for scope in scopes)


_Fixed = tuple[Applicability, tuple[ast.AST, ...]]  # the weakest fix of a name's uses; the uses
_STRENGTH: dict[Applicability, int] = {"safe": 0, "unsafe": 1, "manual": 2}


def _weaker(one: Applicability, other: Applicability) -> Applicability:
    return one if _STRENGTH[one] >= _STRENGTH[other] else other


def _under(branch: Branch, around: list[Releases], floor: Version | None) -> str:
    """Which check keeps a use on releases older than its successor, and which those are."""
    releases = Releases(lower=floor)
    for each in around:
        releases = releases & each
    return f"under {branch.said}, it runs on {releases}"


def _joined(imports: list[str]) -> list[str]:
    """The import lines with the names of `from M import ...` lines of one module together."""
    joined: list[str] = []
    names: dict[str, list[str]] = {}
    for line in imports:
        source, separator, name = line.partition(" import ")
        if line.startswith("from ") and separator:
            if source not in names:
                names[source] = []
                joined.append(source)
            names[source].append(name)
        else:
            joined.append(line)
    return [f"{line} import {', '.join(names[line])}" if line in names else line for line in joined]


def _root(node: ast.expr) -> str | None:
    """The name an attribute chain starts from (`xm` in `xm.mark_step`)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _called(name: str, call: ast.Call | None) -> str:
    return f"{name}()" if call is not None else name


def _since(api: XlaApi) -> str:
    return f" (torch-xla {api.since}+)" if api.since is not None else ""


def _assumed(api: XlaApi) -> str:
    """What a reference's fix takes its calls to do (`its calls pass no defval`)."""
    gone = [f"`{p.name}`" for p in api.parameters if p.to in ("-", None)]
    moved = [f"`{p.name}`" for p in api.parameters if p.to not in ("-", None, p.name)]
    said = [f"no {' or '.join(gone)}"] if gone else []
    said += [f"{' and '.join(moved)} only by position"] if moved else []
    return "its calls pass " + ", and ".join(said or ["the arguments its successor takes"])


def _may_use(file: PythonFile, table: ApiTable) -> bool:
    """Whether the file may use an entry: it holds the entry's last name, and one of its
    imports (at any depth of statements) binds a name the entry is reached through (its module
    or a package above it, the entry itself, a module it is a member of). A use is resolved
    through the file's imports alone (`api_uses`), so a file without one has none."""
    named = [api.name for api in table.apis.values() if api.member in file.source]
    if not named:
        return False
    for statement in _statements(file.module.body):
        if isinstance(statement, ast.Import):
            bound = [a.name if a.asname else a.name.split(".")[0] for a in statement.names]
        elif isinstance(statement, ast.ImportFrom) and not statement.level and statement.module:
            module = statement.module
            bound = [module if a.name == "*" else f"{module}.{a.name}" for a in statement.names]
        else:
            continue
        if any(_reaches(path, name, file.source) for path in bound for name in named):
            return True
    return False


def _reaches(path: str, name: str, source: str) -> bool:
    """Whether a name bound to `path` may reach entry `name` in `source` (or is inside it: a
    module entry's member). Through a package above the entry's module, only a dotted path
    can (`torch_xla.amp.autocast` after `import torch_xla`): the source must spell the rest."""
    if path == name or path.startswith(f"{name}."):
        return True
    if not name.startswith(f"{path}."):
        return False
    rest = name[len(path) + 1 :].split(".")
    if len(rest) == 1:
        return True  # (its last name is in the source: `named`)
    return re.search(_DOT.join(map(re.escape, rest)), source) is not None


# A dot between two names as Python allows it: spaces, line continuations and, in brackets,
# comments and newlines around it, and the brackets themselves (`(torch_xla.core).xla_model`).
_DOT = r"(?:[\s\\()]|#[^\n]*)*\.(?:[\s\\()]|#[^\n]*)*"


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement, nested ones included (bodies, branches, handlers, cases), not the
    expressions: where an import can stand."""
    stack = list(reversed(body))
    while stack:
        statement = stack.pop()
        yield statement
        for part in ("body", "orelse", "finalbody"):
            inner = getattr(statement, part, None)
            if isinstance(inner, list):
                stack.extend(reversed([s for s in inner if isinstance(s, ast.stmt)]))
        for holder in (*getattr(statement, "handlers", ()), *getattr(statement, "cases", ())):
            stack.extend(reversed(holder.body))


def _literal(node: ast.expr) -> bool:
    """A constant, or a negated one (`-1`): the value the code passes, whatever runs before."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant)


def _dotted(node: ast.expr) -> bool:
    """Whether the expression spells a path from a package's own name (`torch_xla.a.b`)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id == "torch_xla"


def _qualified(scope: Scope, node: ast.expr) -> set[str]:
    return scope.qualified(node) if isinstance(node, (ast.Name, ast.Attribute)) else set()


def _binds(use: ApiUse, entry: ApiImport) -> bool:
    """Whether the use reaches the module through the name this import binds."""
    root = use.module_node
    while isinstance(root, ast.Attribute):
        root = root.value
    return isinstance(root, ast.Name) and root.id == entry.bound


def _module_import_code(replacement: str, entry: ApiImport) -> str:
    """The import of the module's successor binding the same name the old import did."""
    alias = entry.alias
    if isinstance(entry.statement, ast.ImportFrom) or alias.asname:
        package, _, leaf = replacement.rpartition(".")
        if isinstance(entry.statement, ast.ImportFrom):
            name = f" as {entry.bound}" if entry.bound != leaf else ""
            return f"from {package} import {leaf}{name}"
        return f"import {replacement} as {entry.bound}"
    return f"import {replacement}"


def _import_code(statement: ast.Import | ast.ImportFrom, names: list[ast.alias]) -> str:
    spelled = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in names)
    if isinstance(statement, ast.ImportFrom):
        return f"from {'.' * statement.level}{statement.module or ''} import {spelled}"
    return f"import {spelled}"


def _exported(scopes: Scopes) -> set[str]:
    """The names a module-level `__all__` lists (what another module may import from it)."""
    found: set[str] = set()
    for node, scope, _ in scopes.of(ast.Assign, ast.AugAssign):
        if scope is not scopes.module or not isinstance(node, (ast.Assign, ast.AugAssign)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            value = node.value
            if isinstance(value, (ast.List, ast.Tuple)):
                found |= {
                    e.value
                    for e in value.elts
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)
                }
    return found


def api_findings(
    file: PythonFile,
    code: Callable[[ast.AST], str],
    catalogue: Catalogue,
    enabled: frozenset[str],
    floor: Version | None,
    suppressed: frozenset[int] = frozenset(),
) -> list[tuple[ApiFinding, Finding]]:
    """The file's uses of deprecated and removed torch-xla APIs, as findings of the enabled
    rules (and what each fix writes: `code`, a node's text as a fix writes it).
    `suppressed`: the ids of the nodes whose findings a comment suppresses (their imports stay
    with them)."""
    table = api_table()
    rules = table.rules() & enabled
    if not rules or not any(name in file.source for name in table.last_names):
        return []
    if not _may_use(file, table):
        return []  # (no scopes built: half the cost of a file read for its API uses)
    uses, imports = api_uses(file.scopes, table)
    fixes = {code_: catalogue.rule(code_).fix or "manual" for code_ in rules}
    fixer = ApiFixer(file.scopes, table, code, fixes, floor, suppressed)
    paired = []
    for found in fixer.findings(uses, imports):
        if found.api.rule not in rules:
            continue
        rule = catalogue.rule(found.api.rule)
        span = file.lines.span(found.node)
        finding = rule.finding(file.path, span, found.subject, found.applicability)
        paired.append((found, finding))
    return paired
