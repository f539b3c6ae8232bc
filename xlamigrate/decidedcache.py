"""The project as a scan decided it (each file's context, the findings of the recipes that
failed, the launch edges), kept in the cache folder with what deciding it asked, so that a
pre-commit run reuses it while nothing it asked has a new answer.

Deciding reads the whole tree: every file is asked which launched scripts it names, the
launched scripts which modules they import, the launchers what they write and start, the
resolver the Dockerfiles and paths a container copies; the launched scripts are planned to
learn whether they take their recipe. Each of these is recorded (a `Journal`) with its answer.
A later run compares every discovered file's bytes (by the digests the run cache knows, most
by their stat); a changed file is asked again only what deciding asked of it, and the kept
decision holds where every answer is the same (as a build system's early cutoff: the decision
is a function of the answers, and nothing else of the file was looked at). A file read whole,
a script whose recipe failed, a new or removed file, another set of flagged files: decided
again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from xlamigrate.cache import (
    RunCache,
    content_digest,
    read_side_file,
    stable_digest,
    write_side_file,
)
from xlamigrate.project.disk import Disk
from xlamigrate.project.questions import answer

if TYPE_CHECKING:
    from xlamigrate.project.model import Analysed

_FORMAT = 1
_MAX_CHANGES = 256  # files changed alike kept apart; beyond, the decision is written again
# A file's state among the inputs: its kind and the digest of its bytes.
Input = tuple[str, str]


def launcher_summary(analysed: Analysed | None) -> str:
    """A digest of what the project takes of a launcher's analysis (its enabling writes, with
    their lines and the scripts they start, where it launches, its platform; whether it turns
    stochastic rounding on): another analysis with the same summary decides the same."""
    if analysed is None:
        return stable_digest(None)
    from xlamigrate.project.launchers import launcher_of, launches_with_flag, sets_rounding

    analysis = analysed.analysis
    launcher = (
        launcher_of(analysed.path, analysed.kind, analysed.text, analysis)
        if launches_with_flag(analysis)
        else None
    )
    return stable_digest(launcher, sets_rounding(analysis))


@dataclasses.dataclass
class Journal:
    """What deciding the project asked, with the answers: the questions asked of each file
    (questions.answer), the files read whole, what the filesystem said beyond the discovered files,
    and the summary of each launcher's analysis."""

    answers: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    read: set[str] = dataclasses.field(default_factory=set)
    disk: dict[tuple[str, str], object] = dataclasses.field(default_factory=dict)
    launchers: dict[str, str] = dataclasses.field(default_factory=dict)


class Recorder:
    """Fills a journal while the project is decided: wraps the builder's reads and remembered
    answers, and is the resolver's disk."""

    def __init__(self, discovered: Mapping[str, object]) -> None:
        self.journal = Journal()
        self._discovered = discovered
        self._answering = 0  # (a read made to answer a question is the question's)

    def reading(self, read: Callable[[str], bytes | None]) -> Callable[[str], bytes | None]:
        def recorded(display: str) -> bytes | None:
            if not self._answering:
                self.journal.read.add(display)
            return read(display)

        return recorded

    def remembering(
        self, remembered: Callable[[str, str, Callable[[], Any]], Any]
    ) -> Callable[[str, str, Callable[[], Any]], Any]:
        def recorded(question: str, display: str, compute: Callable[[], Any]) -> Any:
            def answering() -> Any:
                self._answering += 1
                try:
                    return compute()
                finally:
                    self._answering -= 1

            found = remembered(question, display, answering)
            self.journal.answers.setdefault(display, {})[question] = found
            return found

        return recorded

    def disk(self) -> Disk:
        return _RecordingDisk(self.journal, self._discovered)


class _RecordingDisk(Disk):
    def __init__(self, journal: Journal, discovered: Mapping[str, object]) -> None:
        self._journal = journal
        self._discovered = discovered

    def read_text(self, path: str) -> str | None:
        text = super().read_text(path)
        if path in self._discovered:  # (its bytes are an input already)
            self._journal.read.add(path)
        else:
            self._journal.disk[("text", path)] = _text_digest(text)
        return text

    def is_file(self, path: str) -> bool:
        found = super().is_file(path)
        self._journal.disk[("file", path)] = found
        return found

    def is_dir(self, path: str) -> bool:
        found = super().is_dir(path)
        self._journal.disk[("dir", path)] = found
        return found


def _text_digest(text: str | None) -> str | None:
    return None if text is None else content_digest(text.encode("utf-8", "surrogatepass"))


def _disk_answer(what: str, path: str) -> object:
    disk = Disk()
    if what == "text":
        return _text_digest(disk.read_text(path))
    return disk.is_file(path) if what == "file" else disk.is_dir(path)


@dataclasses.dataclass
class Decision:
    """A kept decision: the inputs it was made from, what deciding asked, the flagged files,
    the launched scripts (and those whose recipe failed), and the decision itself (plain
    values of the engine's, kept as it gave them)."""

    inputs: dict[str, Input]  # every discovered file: display -> (kind, digest)
    flagged: tuple[tuple[str, str], ...]  # the files that mention a flag: (display, kind)
    journal: Journal
    scripts: frozenset[str]
    failed: frozenset[str]
    decided: object

    def changed(self, inputs: Mapping[str, Input]) -> list[str] | None:
        """The files whose bytes changed; None where the files are not the same ones."""
        if inputs.keys() != self.inputs.keys():
            return None
        changed = []
        for display, state in inputs.items():
            kept = self.inputs[display]
            if state != kept:
                if state[0] != kept[0]:
                    return None
                changed.append(display)
        return changed

    def disk_unchanged(self) -> bool:
        return all(
            _disk_answer(what, path) == found for (what, path), found in self.journal.disk.items()
        )

    def answers_hold(self, display: str, data: bytes | None) -> bool:
        """Whether the file's new bytes answer every question deciding asked of it alike."""
        asked = self.journal.answers.get(display, {})
        return all(answer(question, data) == found for question, found in asked.items())

    def undecidable(self, display: str) -> bool:
        """Whether a change of the file decides again whatever it says: it was read whole, or
        it is a script whose recipe failed."""
        return display in self.journal.read or display in self.failed


class Kept:
    """Where a run's decision is kept, beside its run cache (of the same tool, settings and
    rules): the decision, and the files changed since it was made that answered alike (a
    small file, written where rewriting the whole decision would cost a warm run more)."""

    def __init__(self, cache: RunCache) -> None:
        self._decision = cache.companion("decision")
        self._changes = cache.companion("decision-changes")
        self._saved: dict[str, Input] = {}  # the inputs as the decision's file has them
        self._token: str | None = None  # (and the token naming it)

    def load(self) -> Decision | None:
        """The decision kept, made from the current folder (the display paths' base), with
        the changes found alike since."""
        entries = read_side_file(self._decision, values=True)
        decision = entries.get("decision")
        if (
            not isinstance(decision, Decision)
            or entries.get("format") != _FORMAT
            or entries.get("base") != os.getcwd()
        ):
            return None
        token = entries.get("token")
        self._saved, self._token = decision.inputs, token if isinstance(token, str) else None
        changes = read_side_file(self._changes)
        if self._token is not None and changes.get("token") == self._token:
            merged = dict(decision.inputs)
            found = changes.get("inputs")
            merged.update(
                (display, state)
                for display, state in (found.items() if isinstance(found, dict) else ())
                if display in merged and isinstance(state, tuple)
            )
            decision = dataclasses.replace(decision, inputs=merged)
        return decision

    def save(self, decision: Decision) -> None:
        token = os.urandom(8).hex()  # (the changes written later name the decision they amend)
        entries = {"decision": decision, "format": _FORMAT, "base": os.getcwd(), "token": token}
        write_side_file(self._decision, entries)
        with contextlib.suppress(OSError):
            self._changes.unlink()
        self._saved, self._token = decision.inputs, token

    def save_changed(self, decision: Decision, inputs: Mapping[str, Input]) -> None:
        """Keeps a reused decision with this run's inputs, where some file changed (its
        answers alike: the next run need not ask it again)."""
        if inputs == decision.inputs:
            return
        changes = {d: state for d, state in inputs.items() if self._saved.get(d) != state}
        if len(changes) > _MAX_CHANGES or self._token is None:
            self.save(dataclasses.replace(decision, inputs=dict(inputs)))
        else:
            write_side_file(self._changes, {"token": self._token, "inputs": changes})
