"""What a rewrite is asked to do (one value carried through the engine and the kinds), and what
the project decided for one file."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xlamigrate.apitable import Version
from xlamigrate.config import DEFAULT_RUNTIME
from xlamigrate.frameworktable import Releases
from xlamigrate.kinds.textaccess import TextAccess
from xlamigrate.project.model import ScriptRecipe, WriteDecision
from xlamigrate.recipes import DEFAULT_MODE as DEFAULT_MODE
from xlamigrate.recipes import Recipe, recipe_of
from xlamigrate.settingvalues import TARGETS as TARGETS

if TYPE_CHECKING:
    from xlamigrate.catalogue import Catalogue

# The environment variable launchers set, in place of the legacy flag, for the configurations
# that enabled it; the launched script applies its recipe when it is "1".
DEFAULT_SIGNAL = "BF16_RECIPE"


@dataclass(frozen=True)
class RewriteRequest:
    mode: str  # a recipe's name (an unknown one is an UnknownModeError here)
    unsafe_fixes: bool = False
    target: str | None = None  # the platform, where the user says it (else inferred, else neuron)
    signal: str = DEFAULT_SIGNAL
    # Decide and word the findings, write nothing: what a scan asks of the scripts its
    # launchers start (whether each takes its recipe). A Python file is then never parsed by
    # libcst, so an edit libcst could not write shows only when the rewrite runs.
    plan_only: bool = False
    # How the runtime rewritten scripts import reaches them: "package" declares
    # `xlamigrate-runtime` in the project's dependencies, "vendor" copies it into the project.
    runtime: str = DEFAULT_RUNTIME
    # Part of the file stays unread (a notebook cell that does not parse, left out of the
    # kernel): an import the rewrite leaves unused in the rest may be used there, so it stays.
    keep_imports: bool = False

    def __post_init__(self) -> None:
        recipe_of(self.mode)

    @property
    def recipe(self) -> Recipe:
        """What the mode does, which the kinds ask (they never compare its name)."""
        return recipe_of(self.mode)


@dataclass(frozen=True)
class FileContext:
    """The project's decisions for one file: its enabling writes (by offset) and, when the file
    is a launched script, the recipe it gets. With `assume_migrated`, a file rewritten alone
    takes every process it starts as one that got the recipe (the per-file fixtures' premise);
    otherwise a write the project did not decide on is kept."""

    writes: Mapping[int, WriteDecision] = field(default_factory=dict)
    recipe: ScriptRecipe | None = None
    platform: str = "neuron"
    assume_migrated: bool = False
    signal: str = DEFAULT_SIGNAL
    # A module a launched script imports (from the script's own folder): the recipe of the
    # script(s) that import it, against which its reads of the flag resolve.
    imported_by: ScriptRecipe | None = None
    # Python scripts this file's own process starts (a notebook's `!python train.py`): they
    # inherit its environment, so its writes of a legacy flag reach them too.
    children: tuple[str, ...] = ()
    # The mode a scan words its findings for (a rewrite's request carries its own).
    mode: str = DEFAULT_MODE
    # The oldest torch-xla the project runs on (its pins, or --torch-xla-version): an API fix
    # whose replacement is newer is reported instead. None: no pin known, every fix is written.
    torch_xla: Version | None = None
    # The releases of the frameworks (and platform packages) the project pins for this file
    # (project/frameworkpins.py): a framework that sets a legacy flag only in some of its
    # releases is reported where the pins allow one of them (XM104). Empty: no pin known.
    frameworks: tuple[tuple[str, Releases], ...] = ()

    @property
    def reads_against(self) -> ScriptRecipe | None:
        """The recipe the file's reads of a legacy flag are resolved against (None: left)."""
        return self.recipe or self.imported_by

    def decision(self, access: TextAccess) -> WriteDecision:
        found = self.writes.get(access.start)
        if found is not None:
            return found
        if self.assume_migrated:
            return WriteDecision(True, access.launched, self.signal if access.branch else None)
        return WriteDecision(
            False,
            reason="rewritten alone, the script it starts is out of sight (rewrite the launcher"
            " together with its scripts)",
        )


STANDALONE = FileContext()


@dataclass(frozen=True)
class FileTask:
    """One file as a kind is asked about it: its display path and bytes, the catalogue and the
    codes the user selected, and the project's decisions for it (None: none made, as for a file
    scanned on its own; a scan then says nothing of where a write goes)."""

    path: str
    data: bytes
    catalogue: Catalogue
    enabled: frozenset[str]
    context: FileContext | None = None

    @property
    def decided(self) -> FileContext:
        """The project's decisions, STANDALONE where none were made."""
        return self.context or STANDALONE
