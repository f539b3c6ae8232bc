from __future__ import annotations

from pathlib import Path

import pytest

from xlamigrate.catalogue import Catalogue, load_catalogue

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture(scope="session")
def catalogue() -> Catalogue:
    return load_catalogue()
