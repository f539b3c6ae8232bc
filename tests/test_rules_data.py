"""rules/*.toml read through their parsed copies (rulesdata.read_toml): kept as Python keeps a
module's bytecode, beside the file in __pycache__, used only while the file is as it was."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from xlamigrate import rulesdata
from xlamigrate.rulesdata import CatalogueError, read_toml

_HOUR_AGO_NS = 3600 * 10**9


def _data_file(folder: Path, text: str, age_ns: int = _HOUR_AGO_NS) -> Path:
    path = folder / "table.toml"
    path.write_text(text, encoding="utf-8")
    then = time.time_ns() - age_ns
    os.utime(path, ns=(then, then))
    return path


def _parse_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(text: str) -> dict[str, object]:
        raise AssertionError("parsed again")

    monkeypatch.setattr(rulesdata.toml_module(), "loads", refuse)


@pytest.fixture(autouse=True)
def _bytecode_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


def test_a_parsed_copy_is_kept_and_read_instead_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _data_file(tmp_path, 'name = "x"\n[table]\nvalues = [1, 2.5, true]\n')
    first = read_toml(path)
    assert first == {"name": "x", "table": {"values": [1, 2.5, True]}}
    assert [p.name for p in (tmp_path / "__pycache__").iterdir()] == [
        f"table.toml.{sys.implementation.cache_tag}.marshal"
    ]
    _parse_fails(monkeypatch)
    assert read_toml(path) == first


def test_a_changed_file_is_parsed_again(tmp_path: Path) -> None:
    path = _data_file(tmp_path, 'name = "x"\n')
    read_toml(path)
    _data_file(tmp_path, 'name = "y"\n', age_ns=_HOUR_AGO_NS // 2)  # (same size, newer mtime)
    assert read_toml(path) == {"name": "y"}
    _data_file(tmp_path, 'name = "longer"\n', age_ns=_HOUR_AGO_NS // 2)  # (same mtime, size)
    assert read_toml(path) == {"name": "longer"}


def test_a_file_changed_just_now_is_not_kept(tmp_path: Path) -> None:
    # (its mtime may not show a second change within the same tick)
    path = _data_file(tmp_path, 'name = "x"\n', age_ns=0)
    assert read_toml(path) == {"name": "x"}
    assert not (tmp_path / "__pycache__").exists()


def test_no_copy_is_written_where_bytecode_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    path = _data_file(tmp_path, 'name = "x"\n')
    assert read_toml(path) == {"name": "x"}
    assert not (tmp_path / "__pycache__").exists()


def test_a_damaged_or_foreign_copy_is_ignored(tmp_path: Path) -> None:
    path = _data_file(tmp_path, 'name = "x"\n')
    read_toml(path)
    (copy,) = (tmp_path / "__pycache__").iterdir()
    for damaged in (b"", b"\x00garbage", copy.read_bytes()[:-3]):
        copy.write_bytes(damaged)
        assert read_toml(path) == {"name": "x"}


def test_a_read_only_folder_still_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _data_file(tmp_path, 'name = "x"\n')

    def unwritable(self: Path, data: bytes) -> int:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "write_bytes", unwritable)
    assert read_toml(path) == {"name": "x"}
    assert read_toml(path) == {"name": "x"}


def test_a_malformed_file_is_a_catalogue_error_naming_it(tmp_path: Path) -> None:
    path = _data_file(tmp_path, "name = \n")
    with pytest.raises(CatalogueError, match=r"table\.toml"):
        read_toml(path)


def test_the_shipped_data_reads_the_same_through_its_copies() -> None:
    for entry in rulesdata.rules_directory().iterdir():
        if entry.name.endswith(".toml"):
            expected = rulesdata.toml_module().loads(entry.read_text(encoding="utf-8"))
            assert read_toml(entry) == expected
            assert read_toml(entry) == expected
