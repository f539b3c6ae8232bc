"""The file-kind registry: every kind is named once, by file name, suffix or shebang."""

from __future__ import annotations

import importlib

import pytest

from xlamigrate import kinds
from xlamigrate.kinds import KINDS, kind_by_name, kind_by_shebang


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("train.py", "python"),
        ("run.sh", "shell"),
        ("job.slurm", "shell"),
        ("job.sbatch", "shell"),
        ("x.bash", "shell"),
        ("Dockerfile", "dockerfile"),
        ("Dockerfile.neuron", "dockerfile"),
        ("Dockerfile.py", "dockerfile"),  # a name pattern wins over a suffix, as Docker reads it
        ("Containerfile", "dockerfile"),
        ("train.dockerfile", "dockerfile"),
        ("train.Dockerfile", "dockerfile"),  # (as `docker build -f train.Dockerfile` is named)
        ("train.Containerfile", "dockerfile"),
        ("Dockerfile.md", None),
        ("job.yaml", "yaml"),
        ("job.yml", "yaml"),
        (".env", "dotenv"),
        (".env.local", "dotenv"),
        ("training.env", "dotenv"),
        ("nb.ipynb", "notebook"),
        ("README.md", None),
        ("Makefile", "makefile"),
        (".envrc", "shell"),
    ],
)
def test_kind_by_name(name: str, kind: str | None) -> None:
    assert kind_by_name(name) == kind


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (b"#!/bin/bash", "shell"),
        (b"#!/bin/sh -e", "shell"),
        (b"#!/usr/bin/env bash", "shell"),
        (b"#!/usr/bin/env -S bash -eu", "shell"),
        (b"#!/usr/bin/python3", "python"),
        (b"#!/usr/bin/env python3.11", "python"),
        (b"#!/usr/bin/env node", None),
        (b"# not a shebang", None),
    ],
)
def test_kind_by_shebang(line: bytes, kind: str | None) -> None:
    assert kind_by_shebang(line) == kind


def test_every_kind_module_scans_and_rewrites() -> None:
    for spec in KINDS:
        module = importlib.import_module(spec.module)
        assert callable(module.scan) and callable(module.rewrite), spec.name
        assert kinds.load(spec.name) is module


def test_kind_names_are_unique() -> None:
    names = [spec.name for spec in KINDS]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("spec", KINDS, ids=lambda spec: spec.name)
def test_a_kind_says_whether_it_launches_as_its_module_does(spec: kinds.KindSpec) -> None:
    # (the engine asks the table, so that asking imports no parser)
    module = importlib.import_module(spec.module)
    assert spec.launches == hasattr(module, "analyse_file")
    assert kinds.analyses_launches(spec.name) is spec.launches
