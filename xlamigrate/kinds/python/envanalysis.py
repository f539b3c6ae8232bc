"""The env-access analysis of a module: the walk over its `ast` tree (astwalk.py, with envraw.py's
raw accesses) resolved into accesses and mentions (envresolve.py), as envaccess.py's types. The
one entry the kinds call; the modules behind it import envaccess.py for its types alone."""

from __future__ import annotations

import ast
from collections.abc import Collection

from xlamigrate.kinds.python.astscopes import Scopes
from xlamigrate.kinds.python.astwalk import AstEnvWalker
from xlamigrate.kinds.python.envaccess import EnvAccessAnalysis
from xlamigrate.kinds.python.envresolve import resolve_walk


def analyse_env_accesses(
    module: ast.Module,
    source: str,
    flags: Collection[str],
    also: Collection[str] = (),
    scopes: Scopes | None = None,
) -> EnvAccessAnalysis:
    """Every access to (and leftover mention of) a flag in the module (the standard library's
    `ast` tree of `source`), resolved; accesses to the `also` variables too (the rewriter's
    NEURON_* variables), without mentions. Its nodes are ast's (a dict entry: astwalk.DictItem).
    `scopes`: the module's, where the caller has them already."""
    walker = AstEnvWalker(module, source, frozenset(flags), frozenset(also), scopes)
    return resolve_walk(walker)
