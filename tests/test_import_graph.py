"""The modules of xlamigrate/ import one another without a cycle, function-level imports
included (issue 38): a module that needs another's function at run time cannot be needed by it
in turn. Imports under `if TYPE_CHECKING:` are left out (they never run: annotations only).

And each module belongs to one stage of the pipeline (docs/architecture.md): base (types,
tables, the cache), analyse (what a file or project holds), plan (what the recipe changes and
what stays, worded as findings), report | apply (the outputs of a scan, the edits of a rewrite),
drive (the engine, the kinds' entry points, the CLI, verify). No module imports one of a later
stage, and report and apply do not import each other: a scan is a plan with no apply."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "xlamigrate"


def modules() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _run_time_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement of the module, at any depth, but those under TYPE_CHECKING."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        children = list(ast.iter_child_nodes(node))
        if _type_checking(node):
            children = list(node.orelse) if isinstance(node, ast.If) else []
        stack.extend(children)


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules `name` imports when it runs (a module's parent packages, which
    importing it runs first, are not counted: they are where it lives, not what it uses)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _run_time_imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        found.update(t for t in targets if t in known and not name.startswith(f"{t}."))
    found.discard(name)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


# Each module's stage, by dotted name under xlamigrate (the longest prefix that is listed).
STAGES: dict[str, tuple[str, ...]] = {
    "base": (
        "apitable", "cache", "catalogue", "config", "findings", "flagvalue", "frameworktable",
        "fileread", "ignorepatterns", "speculation",
        "kinds", "kinds.embedded", "kinds.launch", "kinds.python.envaccess",
        "kinds.python.markers", "kinds.textaccess", "kinds.unreadtable", "launchtable",
        "masterweights", "modelowners", "nesting", "neuronflags", "nxdttable",
        "optimizer_facts", "optimizerfactories", "progress", "project", "project.model",
        "project.platform", "recipeproblems", "recipes", "releasetable", "request", "results",
        "ruleexamples", "rulesdata", "settingvalues", "suppression", "textwords", "xlavariables",
    ),
    "analyse": (
        "discover", "kinds.dockerfile.analysis", "kinds.dockerfile.commands",
        "kinds.dockerfile.execform", "kinds.dockerfile.image", "kinds.dockerfile.parse",
        "kinds.ini.settings", "kinds.makefile.syntax", "kinds.notebook.document",
        "kinds.notebook.escapes", "kinds.notebook.kernel", "kinds.notebook.lines",
        "kinds.notebook.magics", "kinds.notebook.mentions", "kinds.notebook.place",
        "kinds.python.astpositions", "kinds.python.astscopes", "kinds.python.astwalk",
        "kinds.python.commands", "kinds.python.conditions", "kinds.python.detect",
        "kinds.python.envanalysis", "kinds.python.envraw", "kinds.python.envresolve",
        "kinds.python.flagtests", "kinds.python.frameworks", "kinds.python.lastreads",
        "kinds.python.launchcalls", "kinds.python.mentionholders",
        "kinds.python.nxdt_orchestrator", "kinds.python.parse", "kinds.python.source",
        "kinds.python.training", "kinds.python.versionchecks", "kinds.python.xlaapis",
        "kinds.shell.analysis", "kinds.shell.auto_cast", "kinds.shell.commands",
        "kinds.shell.ownfolder", "kinds.shell.syntax", "kinds.shell.words",
        "kinds.shell.workdir", "kinds.yaml.analysis", "kinds.yaml.nodes", "kinds.yaml.nxdt",
        "kinds.yaml.nodetext", "kinds.yaml.scalar", "kinds.yaml.scripts", "kinds.yaml.sites",
        "prefilter", "project.builds", "project.dependencies", "project.disk",
        "project.dockerignore", "project.frameworkpins", "project.images", "project.imports",
        "project.launchers", "project.mentions", "project.pins", "project.projectfiles",
        "project.questions", "project.resolve", "selection", "walkcache",
    ),
    "plan": (
        "kinds.decided", "kinds.python.filefindings", "kinds.python.launchapis",
        "kinds.python.plan", "kinds.python.planner", "kinds.python.planstate",
        "kinds.python.reads", "kinds.python.recipe_steps", "kinds.shell.render",
        "project.build", "project.decide", "project.units",
    ),
    "report": ("report", "ruletext"),
    "apply": (
        "kinds.python.apply", "kinds.python.cstcode", "kinds.python.cstedits",
        "kinds.python.cstslices", "kinds.python.imports", "kinds.python.puretests",
        "kinds.python.unusedimports", "writer",
    ),
    "drive": (
        "", "__main__", "cli", "decidedcache", "engine", "jobs", "kinds.dockerfile", "kinds.dotenv",
        "kinds.ini", "kinds.makefile", "kinds.notebook", "kinds.notebook.cells",
        "kinds.notebook.shell", "kinds.python.kind", "kinds.python.rewrite", "kinds.python.scan",
        "kinds.shell", "kinds.textkind", "kinds.unread", "kinds.yaml", "verify", "workers",
    ),
}  # fmt: skip
ORDER = ("base", "analyse", "plan", "report", "apply", "drive")
SIBLINGS = frozenset({"report", "apply"})


def stage_of(module: str) -> str | None:
    """The stage listed for the module or the nearest package above it."""
    listed = {
        ".".join(("xlamigrate", name)).rstrip("."): stage
        for stage, names in STAGES.items()
        for name in names
    }
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        stage = listed.get(".".join(parts[:end]))
        if stage is not None:
            return stage
    return None


def out_of_order(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a later stage's module (or between report and apply)."""
    found = []
    for name, targets in sorted(graph.items()):
        stage = stage_of(name)
        assert stage is not None, f"{name} has no stage: add it to STAGES"
        for target in sorted(targets):
            other = stage_of(target)
            assert other is not None, f"{target} has no stage: add it to STAGES"
            if ORDER.index(other) > ORDER.index(stage) or {stage, other} == SIBLINGS:
                found.append(f"{name} ({stage}) imports {target} ({other})")
    return found


def test_the_package_imports_without_a_cycle() -> None:
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    assert sum(map(len, graph.values())) > 300  # (the walk sees the package's imports)
    assert cycles(graph) == []


def test_a_cycle_through_a_function_level_import_is_found() -> None:
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    scan, rewrite = "xlamigrate.kinds.python.scan", "xlamigrate.kinds.python.rewrite"
    assert rewrite in graph[scan]  # (scan asks the rewrite whether a recipe goes in whole)
    assert cycles({**graph, rewrite: graph[rewrite] | {scan}}) == [[rewrite, scan]]


def test_every_module_imports_only_its_own_stage_and_earlier_ones() -> None:
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    assert {stage_of(name) for name in known} == set(ORDER)
    assert out_of_order(graph) == []


def test_an_import_of_a_later_stage_is_found() -> None:
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    analysis, planner = "xlamigrate.kinds.python.astwalk", "xlamigrate.kinds.python.planner"
    report, apply = "xlamigrate.report.text_format", "xlamigrate.kinds.python.apply"
    graph = {**graph, analysis: graph[analysis] | {planner}, report: graph[report] | {apply}}
    assert out_of_order(graph) == [
        f"{analysis} (analyse) imports {planner} (plan)",
        f"{report} (report) imports {apply} (apply)",
    ]
