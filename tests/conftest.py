from __future__ import annotations

import platform
import sys
from pathlib import Path

import pytest

from xlamigrate.catalogue import Catalogue, load_catalogue

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"

# The `test` extra installs torch-xla wherever wheels exist; there a missing install must fail.
needs_torch_xla_platform = pytest.mark.skipif(
    not (sys.platform == "linux" and platform.machine() == "x86_64"),
    reason="torch-xla wheels exist for Linux x86-64 only",
)


@pytest.fixture(scope="session")
def catalogue() -> Catalogue:
    return load_catalogue()


# Fixture files name their kind by extension (tests/fixtures/scan/<case>.<ext>,
# tests/fixtures/<mode>/<case>.in.<ext>).
KIND_BY_EXTENSION = {
    ".py": "python",
    ".sh": "shell",
    ".env": "dotenv",
    ".dockerfile": "dockerfile",
    ".yaml": "yaml",
    ".ipynb": "notebook",
}
