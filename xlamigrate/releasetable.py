"""The lock-step releases of torch and torch-xla (`rules/releases.toml`): what a `torch` pin or a
check of `torch.__version__` says of the torch-xla a project runs on. Data only."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from xlamigrate.apitable import Version
from xlamigrate.rulesdata import RELEASES_FILE, CatalogueError, read_toml, rules_directory


@dataclass(frozen=True)
class Release:
    torch: Version
    torch_xla: Version
    evidence: str = ""


@dataclass(frozen=True)
class ReleaseTable:
    releases: tuple[Release, ...]  # oldest first

    def torch_xla(self, torch: Version) -> Version:
        """The torch-xla built for a torch release (`1.13.1`: 1.13); one the table does not
        list keeps its numbers, the two being released in lock-step."""
        release = Version(torch.numbers[:2])
        for row in self.releases:
            if row.torch == release:
                return row.torch_xla
        return release

    def after(self, torch_xla: Version) -> Version:
        """The torch-xla release that follows one (1.13: 2.0); past the table's, the next minor."""
        release = Version(torch_xla.numbers[:2])
        newer = [row.torch_xla for row in self.releases if row.torch_xla > release]
        if newer:
            return min(newer)
        major, minor = (*release.numbers, 0)[:2]
        return Version((major, minor + 1))


@functools.cache
def release_table() -> ReleaseTable:
    data = read_toml(rules_directory().joinpath(RELEASES_FILE))
    try:
        rows = [
            Release(
                Version.parse(item["torch"]),
                Version.parse(item["torch_xla"]),
                item.get("evidence", ""),
            )
            for item in data.get("release", [])
        ]
    except (KeyError, TypeError, ValueError) as error:
        raise CatalogueError(f"{RELEASES_FILE}: {type(error).__name__}: {error}") from error
    return ReleaseTable(tuple(sorted(rows, key=lambda row: row.torch)))
