"""The values the target and runtime settings take, in [tool.xlamigrate] and on the command line:
plain tuples in a module that imports nothing, so the CLI lists them before anything is read."""

from __future__ import annotations

# The platforms a rewrite is for (their environments: rules/modes.toml).
TARGETS = ("neuron", "tpu")
# How rewritten scripts get the runtime they import: a dependency the project declares, or a
# copy of the package written next to them.
RUNTIMES = ("package", "vendor")
DEFAULT_RUNTIME = RUNTIMES[0]
