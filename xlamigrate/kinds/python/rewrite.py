"""Rewrites one Python file to a recipe: analyses and plans it on the standard library's `ast`
(the same findings scan reports; the plan: planner.py), applies the plan with libcst
(apply.py: every byte the plan does not touch is kept), and returns the new bytes with what
was fixed and what is left to do by hand. libcst is loaded only where there is an edit to make.
"""

from __future__ import annotations

import ast
import re
from functools import partial

from xlamigrate.catalogue import Catalogue
from xlamigrate.findings import LEGACY_FLAG_STAYS_WITH_AUTOCAST, WRITE_NOT_REMOVABLE
from xlamigrate.kinds.python.astpositions import SourceLines
from xlamigrate.kinds.python.envaccess import EnvAccess
from xlamigrate.kinds.python.filefindings import (
    Pairs,
    api_pairs,
    env_analysis,
    framework_options,
    kept_for_children,
    python_variables,
    reported,
)
from xlamigrate.kinds.python.nxdt_orchestrator import orchestrator_reason
from xlamigrate.kinds.python.plan import Plan
from xlamigrate.kinds.python.planner import (
    FLAG_SET_AFTER_DEVICE_START,
    Planner,
    kept_enabling,
)
from xlamigrate.kinds.python.planstate import after_imports
from xlamigrate.kinds.python.recipe_steps.float64 import FLOAT64_UNDER_DOWNCAST
from xlamigrate.kinds.python.source import PythonFile, parse_failure, parsed_python
from xlamigrate.kinds.python.training import Line, Statement, TrainingScript
from xlamigrate.kinds.python.xlaapis import ApiEdits, ApiFinding
from xlamigrate.nesting import too_deep
from xlamigrate.neuronflags import RECIPE_VARIABLES
from xlamigrate.recipes import MODES as MODES
from xlamigrate.request import FileContext, FileTask, RewriteRequest
from xlamigrate.results import FileError, Finding, RewriteOutcome

# The rewrite's findings on a write it keeps, in place of the write's own finding.
_REPORTED_INSTEAD_OF_WRITE = (FLAG_SET_AFTER_DEVICE_START, WRITE_NOT_REMOVABLE)
# Its findings on what the recipe leaves to a hand edit where the recipe goes in.
_LEFT_BESIDE_THE_RECIPE = (LEGACY_FLAG_STAYS_WITH_AUTOCAST, FLOAT64_UNDER_DOWNCAST)


def rewrite_python(task: FileTask, request: RewriteRequest) -> RewriteOutcome:
    path, data, catalogue, enabled = task.path, task.data, task.catalogue, task.enabled
    context = task.decided
    parsed = parsed_python(data)
    if parsed is None:
        return RewriteOutcome(path, data, None, errors=(parse_failure(path, data),))
    source, module = parsed
    lines = SourceLines(source)
    file = PythonFile(path, source, module, lines)
    analysis = env_analysis(file, catalogue, RECIPE_VARIABLES)
    scopes = file.scopes
    pairs = kept_for_children(
        reported(path, source, analysis, lines.span, catalogue, enabled, scopes, context),
        context,
        analysis.children,
    )
    # shell command lines run child processes: reported for a hand edit, never rewritten here
    commands: list[Finding] = []
    if analysis.commands:
        from xlamigrate.kinds.python.commands import command_findings

        found = command_findings(path, source, lines, analysis.commands, catalogue, enabled)
        commands = list(found)
    apis = api_pairs(file, catalogue, enabled, context)
    commands += python_variables(file, catalogue, enabled)
    commands += framework_options(file, catalogue, enabled, context)
    if not pairs and context.recipe is None and not apis:
        remaining_commands = tuple(sorted(commands, key=lambda f: f.sort_key))
        return RewriteOutcome(path, data, None, remaining=remaining_commands)
    script = TrainingScript(module, source, scopes)
    if script.too_deep is not None:  # libcst, writing the edits, could not take it
        return RewriteOutcome(path, data, None, errors=(too_deep(path, script.too_deep),))
    planner = Planner(path, script, catalogue, request, context, analysis.accesses)
    plan = planner.make_plan(pairs)
    unapplied = planner.unapplied()
    if context.recipe is not None:  # a launched script: NxDT's orchestrator takes none
        unapplied = orchestrator_reason(module) or unapplied
    if unapplied is None and planner.blocked_in_file():
        # the file's own enabling writes stay: planned again with them left, manual
        problems = planner.problems()
        pairs = kept_enabling(pairs, planner)
        planner = Planner(path, script, catalogue, request, context, analysis.accesses)
        plan = planner.make_plan(pairs)
        planner.remaining.extend(problems)
    api_fixed, api_remaining = _api_fixes(plan, script, apis, request)
    remaining = tuple(
        sorted([*planner.remaining, *commands, *api_remaining], key=lambda f: f.sort_key)
    )
    fixed = tuple(sorted([*planner.fixed, *api_fixed], key=lambda f: f.sort_key))
    if unapplied is not None:
        return RewriteOutcome(path, data, None, fixed, remaining, unapplied=unapplied)
    if plan.is_empty() or request.plan_only:
        return RewriteOutcome(path, data, None, fixed, remaining)
    rewritten = _applied(path, data, script, plan, drop_unused=not request.keep_imports)
    if isinstance(rewritten, FileError):
        return RewriteOutcome(path, data, None, errors=(rewritten,))
    return RewriteOutcome(path, data, rewritten, fixed, remaining)


def _api_fixes(
    plan: Plan,
    script: TrainingScript,
    apis: list[tuple[ApiFinding, Finding]],
    request: RewriteRequest,
) -> tuple[list[Finding], list[Finding]]:
    """The torch-xla API fixes the request allows, added to the plan: (fixed, left). A fix that
    needs others (an import whose uses all change) goes in only with all of them."""

    def allowed(found: ApiFinding) -> bool:
        return found.edits is not None and (
            found.applicability == "safe"
            or (found.applicability == "unsafe" and request.unsafe_fixes)
        )

    applied = {id(found.node) for found, _ in apis if allowed(found) and not found.needs}
    chosen: list[ApiEdits] = []
    fixed: list[Finding] = []
    left: list[Finding] = []
    for found, finding in apis:
        if allowed(found) and all(id(node) in applied for node in found.needs):
            assert found.edits is not None
            chosen.append(found.edits)
            fixed.append(finding)
        else:
            left.append(finding)
    if not fixed:
        return fixed, left
    edits = ApiEdits()
    for one in chosen:
        edits.merge(one)
    for node, code in _nested_swaps_resolved(script, edits.swapped).items():
        plan.swapped[node] = code
    statements = edits.statement_code()
    _place_anchored_imports(plan, script, chosen, statements)
    for statement, lines in statements.items():
        if lines:
            plan.replacements[statement] = lines
        else:
            plan.removed.add(statement)
    top = ApiEdits()
    for one in chosen:
        if not one.anchors:
            top.imports |= one.imports
            top.aliased |= one.aliased
    first = _first_import_of(script, "torch_xla")
    if first is not None and first not in _leading_imports(script):
        # beside the file's own torch_xla import, after what the file sets up before it (an
        # environment variable torch_xla reads when imported, say)
        if top.import_lines():
            plan.insert_after(first, top.import_lines())
    else:  # with the leading imports, as every import the rewrite adds
        plan.imports |= top.imports
        plan.aliased |= top.aliased
    return fixed, left


def _place_anchored_imports(
    plan: Plan,
    script: TrainingScript,
    chosen: list[ApiEdits],
    statements: dict[ast.Import | ast.ImportFrom, list[str]],
) -> None:
    """The imports of fixes whose file imports torch-xla under a condition or in a function,
    each right after that import (in its place, where the fix removes it)."""
    placed: dict[int, tuple[ast.Import | ast.ImportFrom, set[str]]] = {}
    for one in chosen:
        for anchor in one.anchors:
            placed.setdefault(id(anchor), (anchor, set()))[1].update(one.import_lines())
    for anchor, added in placed.values():
        if anchor in statements:  # the import goes: the new ones take its place
            statements[anchor] = [*statements[anchor], *sorted(added)]
            continue
        line = script.statement_of(anchor)
        if isinstance(line, Line):
            plan.insert_after(line, sorted(added))
        else:  # on its header's line (`if c: import x`): the body is a block from here on
            statements[anchor] = [script.code(anchor), *sorted(added)]


def _leading_imports(script: TrainingScript) -> list[Statement]:
    """The module's leading docstring and import lines."""
    last = after_imports(script)
    if last is None:
        return []
    body = script.top.body
    return body[: body.index(last) + 1]


def _nested_swaps_resolved(
    script: TrainingScript, swapped: dict[ast.AST, str]
) -> dict[ast.AST, str]:
    """The swaps with any one inside another folded into it (the outer call's code quotes the
    inner's original text: `torch_xla.device(xm.get_ordinal())`)."""
    resolved = dict(swapped)
    spans = {node: script.offsets(node) for node in swapped}
    for inner, (start, end) in sorted(spans.items(), key=lambda item: item[1][0] - item[1][1]):
        for outer, (outer_start, outer_end) in spans.items():
            if outer is inner or not (outer_start <= start and end <= outer_end):
                continue
            if outer not in resolved or inner not in resolved:
                continue
            original = script.code(inner)
            resolved[outer] = resolved[outer].replace(original, resolved.pop(inner), 1)
            break
    return resolved


def _first_import_of(script: TrainingScript, package: str) -> Line | None:
    """The first line of the module's own body that imports from `package`."""
    for statement in script.top.body:
        if not isinstance(statement, Line):
            continue
        for small in statement.body:
            names = []
            if isinstance(small, ast.Import):
                names = [alias.name for alias in small.names]
            elif isinstance(small, ast.ImportFrom) and not small.level and small.module:
                names = [small.module]
            if any(name == package or name.startswith(package + ".") for name in names):
                return statement
    return None


def _applied(
    path: str, data: bytes, script: TrainingScript, plan: Plan, drop_unused: bool = True
) -> bytes | FileError:
    """The file's bytes with the plan applied by libcst (and, `drop_unused`, without the
    imports that left unused), or why it cannot be: libcst parses only the top-level
    statements the edits need where it can (cstslices.py), else the whole module."""
    from xlamigrate.kinds.python.cstslices import sliced_applied

    made: tuple[bytes | FileError, bool] | None = sliced_applied(data, script, plan, drop_unused)
    if made is None:
        made = whole_module_applied(path, data, script, plan, drop_unused)
    rewritten, parsed_already = made
    if isinstance(rewritten, FileError):
        return rewritten
    if not rewritten.strip():  # the flag's write and the import it used were all there was
        rewritten = b""
    if not parsed_already:  # a safety net: never write what does not parse
        try:
            compile(rewritten, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
        except (SyntaxError, ValueError) as error:
            message = getattr(error, "msg", None) or str(error)
            return FileError(path, None, f"internal error: the rewrite does not parse ({message})")
    return rewritten


def whole_module_applied(
    path: str, data: bytes, script: TrainingScript, plan: Plan, drop_unused: bool = True
) -> tuple[bytes | FileError, bool]:
    """`_applied` on the whole module's libcst tree, and whether its code was parsed on the
    way (the unused-import pass parses it)."""
    from xlamigrate.kinds.python.apply import UnpairedTree, applied
    from xlamigrate.kinds.python.cstcode import ModuleCode
    from xlamigrate.kinds.python.parse import parse_python
    from xlamigrate.kinds.python.unusedimports import may_leave_unused, unused_imports_dropped

    parsed = parse_python(path, data)
    if isinstance(parsed, FileError):
        return parsed, False
    made = ModuleCode()  # (each statement's code made once: the output's made again for edits)
    lost = _first_line_not_reproduced(data, made.code(parsed).encode(parsed.encoding))
    if lost is not None:  # writing libcst's code would also drop what it cannot reproduce
        message = (
            "cannot rewrite: libcst does not reproduce this line byte for byte (a form feed "
            "before code, or a final bare CR newline); the file is left untouched"
        )
        return FileError(path, lost, message), False
    try:
        edited, code = applied(script, parsed, plan), None
        if drop_unused and may_leave_unused(
            script.scopes, parsed, edited, made.lines(parsed), partial(made.statement, edited)
        ):  # (its code, where it made and parsed it: a large file's is slow)
            edited, code = unused_imports_dropped(script.scopes, edited, made.code)
        rewritten = (code if code is not None else made.code(edited)).encode(edited.encoding)
    except UnpairedTree as error:
        return FileError(path, None, f"internal error: {error}; the file is left untouched"), False
    return rewritten, code is not None


def kept_for_recipe(
    path: str,
    script: TrainingScript,
    pairs: Pairs,
    catalogue: Catalogue,
    context: FileContext,
    accesses: tuple[EnvAccess, ...],
) -> tuple[Pairs, list[Finding]]:
    """What a scan says of the file's own enabling writes: manual, as the rewrite (in
    `context.mode`) leaves them, where their recipe cannot go in whole; with what kept the
    recipe out (XM401...), which their messages refer to, as the rewrite lists it. `accesses`:
    the scan's analysis of the file, the recipe's own variables included (RECIPE_VARIABLES)."""
    request = RewriteRequest(context.mode, signal=context.signal)
    planner = Planner(path, script, catalogue, request, context, accesses)
    planner.make_plan(pairs)
    if planner.blocked_in_file():
        return kept_enabling(pairs, planner), planner.problems()
    # its reads, as the rewrite resolves them against the file's own configurations; a write
    # as the rewrite reports it where it does not remove it: after the device started (XM411),
    # inside a larger statement (XM404)
    worded = {(f.span, f.code): f for f in (*planner.fixed, *planner.remaining)}
    instead = {f.span: f for f in planner.remaining if f.code in _REPORTED_INSTEAD_OF_WRITE}
    kept = [
        (item, worded.get((f.span, f.code), f))
        if isinstance(item, EnvAccess) and item.kind == "read"
        else (item, instead.get(f.span, f))
        for item, f in pairs
    ]
    # what the recipe leaves to a hand edit beside it, as the rewrite lists it (XM405, XM412)
    return kept, [f for f in planner.remaining if f.code in _LEFT_BESIDE_THE_RECIPE]


def _first_line_not_reproduced(data: bytes, reproduced: bytes) -> int | None:
    """The 1-based line where libcst's code of a module first differs from the file's bytes."""
    if reproduced == data:
        return None
    same = next(
        (i for i, (a, b) in enumerate(zip(data, reproduced, strict=False)) if a != b),
        min(len(data), len(reproduced)),
    )
    return len(re.findall(rb"\r\n|\r|\n", data[:same])) + 1
