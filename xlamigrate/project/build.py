"""Builds the project model from the analyses of the flagged launcher files: resolves the
scripts they launch among the discovered files, looks for other files that name those scripts,
picks the signal's name, and decides."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

from xlamigrate.kinds.launch import anchored, split_function
from xlamigrate.project.decide import Inputs, decide
from xlamigrate.project.imports import Reference, imported_modules
from xlamigrate.project.launchers import launcher_of, sets_rounding
from xlamigrate.project.model import Analysed, Launcher, Project, ScriptRecipe
from xlamigrate.project.questions import IMPORTS, MENTIONS, answer
from xlamigrate.project.resolve import ScriptResolver

# Used when the default signal's name already means something else in the tree.
_FALLBACK_SIGNAL = "XLAMIGRATE_BF16_RECIPE"


@dataclass
class ProjectBuilder:
    resolver: ScriptResolver
    read: Callable[[str], bytes | None]  # display path -> bytes (None: unreadable)
    others: Sequence[str]  # every discovered file's display path
    signal: str
    signal_configured: bool = False
    target: str | None = None
    # A file's answer to a question about its bytes (the question, its path, how to answer:
    # plain values), remembered for the bytes where a cache knows them (engine.py).
    remembered: Callable[[str, str, Callable[[], Any]], Any] = field(default=lambda q, p, a: a())
    _counted: dict[tuple[bytes, ...], dict[str, dict[str, int]]] = field(default_factory=dict)
    _imported: dict[str, list[str]] = field(default_factory=dict)  # a script -> its modules
    # the launchers of the analyses last asked about (asked again for each decision, edges)
    _launchers: tuple[tuple[Analysed, ...], list[Launcher]] | None = None

    def modules_of(self, project: Project) -> dict[str, ScriptRecipe]:
        """The in-tree modules the launched scripts import, each with the recipe its reads of
        the flag resolve against (merged over the scripts importing it; a module imported by
        scripts whose recipes disagree on being gated gets none)."""
        importers: dict[str, list[ScriptRecipe]] = {}
        for script, recipe in project.scripts.items():
            for module in self.imports_of(script):  # (asked again each time it is decided)
                if module not in project.scripts:
                    importers.setdefault(module, []).append(recipe)
        merged = {}
        for module, recipes in importers.items():
            if len({recipe.signal for recipe in recipes}) == 1:
                merged[module] = _merged(recipes)
        return merged

    def imports_of(self, script: str) -> list[str]:
        """The in-tree modules a script imports, directly or not (read once)."""
        if script not in self._imported:
            self._imported[script] = imported_modules(
                script, self.read, self.resolver.files, self._references
            )
        return self._imported[script]

    def _references(self, path: str) -> tuple[Reference, ...]:
        return cast(
            "tuple[Reference, ...]",
            self.remembered(IMPORTS, path, partial(self._answer, IMPORTS, path)),
        )

    def _answer(self, question: str, path: str) -> Any:
        return answer(question, self.read(path))

    def launchers(self, analysed: Sequence[Analysed]) -> list[Launcher]:
        key = tuple(analysed)
        if self._launchers is not None and self._launchers[0] == key:
            return self._launchers[1]
        found = [launcher_of(a.path, a.kind, a.text, a.analysis) for a in analysed]
        launchers = [launcher for launcher in found if launcher.writes]
        self._launchers = (key, launchers)
        return launchers

    def build(
        self,
        analysed: Sequence[Analysed],
        failed: Mapping[str, str] | None = None,
    ) -> tuple[Project, str, dict[str, str]]:
        """The project, the signal's name, and the platform of each launcher."""
        launchers = self.launchers(analysed)
        platforms = self._platforms(launchers)
        if not launchers:
            return Project(), self.signal, platforms
        counts = self._counts(launchers)
        signal = self._signal(counts)
        kinds = {launcher.path: launcher.kind for launcher in launchers}
        inputs = Inputs(
            resolve=self.resolver,
            unresolved=self.resolver.unresolved,
            named_elsewhere=lambda script, paths: _named_elsewhere(script, paths, counts, kinds),
            signal=signal,
            rounding_writes={a.path: sets_rounding(a.analysis) for a in analysed},
            default_platform=self._default_platform(platforms),
        )
        with_platforms = [
            Launcher(x.path, x.writes, x.sites, x.kind, platforms[x.path]) for x in launchers
        ]
        return decide(with_platforms, inputs, failed), signal, platforms

    def _platforms(self, launchers: Sequence[Launcher]) -> dict[str, str]:
        default = self._default_platform({x.path: x.platform for x in launchers})
        return {
            launcher.path: self.target or launcher.platform or default for launcher in launchers
        }

    def _default_platform(self, platforms: Mapping[str, str | None]) -> str:
        if self.target:
            return self.target
        said = set(platforms.values()) - {None}
        return "tpu" if said == {"tpu"} else "neuron"

    def _counts(self, launchers: Sequence[Launcher]) -> dict[str, dict[str, int]]:
        """Per discovered file: how often it names each launched script's file name (and the
        signal's name, under the key "")."""
        names = {_file_name(site.script) for launcher in launchers for site in launcher.sites}
        names |= {_file_name(s) for x in launchers for w in x.writes for s in w.launched}
        names.discard("")
        words = sorted(names | {self.signal}, key=len, reverse=True)
        key_words = tuple(word.encode() for word in words)
        cached = self._counted.get(key_words)
        if cached is not None:
            return cached
        # (the words sorted alike in every process: equally long ones are in a set's order)
        question = "\0".join([MENTIONS, self.signal, *sorted(words)])

        counts: dict[str, dict[str, int]] = {}
        for path in self.others:
            found = self.remembered(question, path, partial(self._answer, question, path))
            if found:
                counts[path] = dict(found)
        self._counted[key_words] = counts
        return counts

    def _signal(self, counts: Mapping[str, Mapping[str, int]]) -> str:
        """The configured name; else the default, unless the tree already uses it for
        something else (a gate xlamigrate wrote reads `os.environ.get("NAME") == "1"`)."""
        if self.signal_configured:
            return self.signal
        users = [path for path, found in counts.items() if "" in found]
        if not users:
            return self.signal
        ours = f'os.environ.get("{self.signal}") == "1"'.encode()
        if any(ours in (self.read(path) or b"") for path in users):
            return self.signal
        return _FALLBACK_SIGNAL


def _file_name(written: str) -> str:
    """The file name a launch's script goes by in other files: `train.py` for `<image>train.py`,
    `<repository root>/src/train.py` or `train.py::train_func` alike."""
    return posixpath.basename(split_function(anchored(written)[1])[0])


def _named_elsewhere(
    script: str,
    launcher_paths: Sequence[str],
    counts: Mapping[str, Mapping[str, int]],
    kinds: Mapping[str, str],
) -> bool:
    """Whether some file other than the script and its launchers names the script (a launch
    xlamigrate did not see), or a launcher of a kind without launch lists names it twice."""
    name = posixpath.basename(script)
    for path, found in counts.items():
        count = found.get(name, 0)
        if not count or path == script:
            continue
        if path in launcher_paths and (kinds.get(path) == "shell" or count == 1):
            continue
        return True
    return False


def _merged(recipes: Sequence[ScriptRecipe]) -> ScriptRecipe:
    """One recipe standing for several scripts' (same signal): their configurations together."""
    first = recipes[0]
    if len(recipes) == 1:
        return first
    return ScriptRecipe(
        path=first.path,
        signal=first.signal,
        flags=tuple(sorted({flag for recipe in recipes for flag in recipe.flags})),
        launchers=tuple(dict.fromkeys(x for recipe in recipes for x in recipe.launchers)),
        platform=first.platform,
        configurations=tuple(dict.fromkeys(c for recipe in recipes for c in recipe.configurations)),
    )
