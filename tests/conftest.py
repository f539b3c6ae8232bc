from __future__ import annotations

from pathlib import Path

import pytest

from xlamigrate.catalogue import Catalogue, load_catalogue

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


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
