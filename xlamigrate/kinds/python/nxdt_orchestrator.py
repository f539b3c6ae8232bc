"""A launched script that is neuronx-distributed-training's training_orchestrator.py (or the copy
of it a project keeps, as NxDT's examples are meant to be copied) never takes a recipe: it sets
the flags from its YAML config's `precision.type`, through `set_env_variable`, which leaves a
variable the launcher exported as it is. So a launcher's export overrides the config, and the
migration is the config's type (XM105), not the launcher's environment."""

from __future__ import annotations

import ast

from xlamigrate.nxdttable import nxdt_table


def orchestrator_reason(module: ast.Module) -> str | None:
    """Why the script takes no recipe, where it is NxDT's orchestrator; else None."""
    table = nxdt_table()
    defined = {
        node.name
        for node in module.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    if not table.orchestrator_functions <= defined:
        return None
    return (
        f"it is {table.framework}'s {table.orchestrator}, which sets the flags from its YAML"
        " config's precision.type but keeps a value exported before it (set_env_variable sets"
        " only unset variables): this export overrides the config; choose the recipe with"
        " precision.type there (XM105 says what each type sets) and remove the export"
    )
