"""A .gitignore's patterns as the walk asks them (xlamigrate/ignorepatterns.py): the quick
answer never says "no" where pathspec's spec matches, and the exact answer is pathspec's."""

from __future__ import annotations

import itertools

import pathspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xlamigrate.ignorepatterns import IgnorePatterns

# The shapes real projects' .gitignore files hold (pytorch/ao's, fairseq's, GitHub's Python
# template), and some they rarely do.
LINES = [
    "# comment",
    "",
    "*.pyc",
    "*.py[cod]",
    "*.egg-info/",
    "build/",
    "dist",
    ".coverage",
    ".coverage.*",
    "*.so*",
    "*/*.pyc",
    "*/**/__pycache__",
    "*/**/*.dylib*",
    "/site",
    "/docs/_build/",
    "docs/src/**/*",
    "test/*.bak",
    "test/**/*.bak",
    "torch/lib/*.a*",
    "torch/csrc/lazy/generated/*.[!m]*",
    "**/core.[1-9]*",
    "*.*project",
    "sccache-stats*.json",
    "exp*",
    "!keep.pyc",
    "!build/keep/",
    "\\#hash",
    "trailing  ",
    "a?c",
    "[ab]x",
    "**/deep/**/name",
    ".vscode/*",
]
COMPONENTS = [
    "a", "x.pyc", "x.pyo", "keep.pyc", "build", "dist", ".coverage", ".coverage.1", "lib.so.1",
    "__pycache__", "site", "docs", "_build", "src", "test", "old.bak", "torch", "lib", "z.a1",
    "csrc", "lazy", "generated", "gen.cpp", "main.cpp", "core.7", "my.project", "exp1",
    "sccache-stats-1.json", "#hash", "trailing", "abc", "bx", "deep", "name", ".vscode",
    "settings.json", "pkg.egg-info", "keep",
]  # fmt: skip


def _paths(depth: int) -> list[str]:
    found = []
    for size in range(1, depth + 1):
        for parts in itertools.product(COMPONENTS, repeat=size):
            path = "/".join(parts)
            found += [path, f"{path}/"]
    return found


def _spec(lines: list[str]) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines(lines)


def test_the_quick_answer_never_misses_a_match() -> None:
    patterns, spec = IgnorePatterns(LINES), _spec(LINES)
    for path in _paths(3):
        matched = spec.check_file(path).include is not None
        assert patterns.may_match(path) or not matched, path
        if matched:
            assert patterns.ignored(path) == spec.check_file(path).include, path


def test_most_patterns_need_no_regular_expression() -> None:
    patterns = IgnorePatterns(LINES)
    assert {".coverage", "build", "dist", "__pycache__", "#hash", "trailing"} <= patterns.names
    assert {".pyc", ".pyo", ".pyd", ".egg-info"} <= set(patterns.suffixes)
    assert ".coverage." in patterns.prefixes and ".so" in patterns.parts
    assert {"site", "docs/_build", "build/keep"} <= patterns.paths
    assert {"docs", "test", "torch", ".vscode"} <= set(patterns.below)
    assert patterns.may_match("src/x.pyc") and not patterns.may_match("src/train.py")
    assert not patterns.may_match("src/")


def test_the_spec_is_built_only_for_a_path_that_may_match() -> None:
    patterns = IgnorePatterns(["*.pyc", "build/"])
    assert not patterns.may_match("src/train.py")
    assert patterns._spec is None
    assert patterns.ignored("build/") is True
    assert patterns._spec is not None


def test_a_malformed_pattern_fails_as_the_spec_does() -> None:
    with pytest.raises(Exception) as by_spec:
        _spec(["!"])
    with pytest.raises(type(by_spec.value)):
        IgnorePatterns(["!"])


_PATTERN_TEXT = st.text(alphabet="ab./*?[]!#\\ -", min_size=1, max_size=8)
_PATH = st.lists(
    st.sampled_from(["a", "b", "a.b", ".a", "ab", "b-a", "a b"]), min_size=1, max_size=4
)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # (re's about `[[` in a random pattern)
@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(_PATTERN_TEXT, min_size=1, max_size=6), st.lists(_PATH, min_size=1, max_size=8))
def test_random_patterns_never_miss_a_match(lines: list[str], paths: list[list[str]]) -> None:
    try:
        spec = _spec(lines)
    except Exception:  # (a malformed pattern: no spec to compare with)
        return
    patterns = IgnorePatterns(lines)
    for parts in paths:
        for path in ("/".join(parts), "/".join(parts) + "/"):
            include = spec.check_file(path).include
            if include is not None:
                assert patterns.may_match(path), (lines, path)
                assert patterns.ignored(path) == include
