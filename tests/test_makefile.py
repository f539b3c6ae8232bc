"""Makefiles: recipe lines through the one shell engine, make's exported variables as writes;
every finding manual (the rewrite does not edit Makefiles). The full example:
tests/fixtures/cases/makefile_recipes.mk."""

from __future__ import annotations

from xlamigrate.catalogue import Catalogue
from xlamigrate.engine import rewrite_source, scan_source
from xlamigrate.kinds import kind_by_name
from xlamigrate.kinds.makefile.syntax import read
from xlamigrate.request import RewriteRequest

MAKEFILE = (
    "train:\n"
    "\t@XLA_USE_BF16=1 \\\n"
    "\t  python train.py --out $$HOME/$(RUN)\n"
    "tpu:\n"
    '\texport XRT_TPU_CONFIG="localservice;0;localhost:51011"; python3 test_train_mp_mnist.py\n'
)


def test_makefiles_are_their_own_kind() -> None:
    for name in ("Makefile", "makefile", "GNUmakefile", "rules.mk"):
        assert kind_by_name(name) == "makefile"


def test_a_recipe_line_is_the_shell_text_make_runs_mapped_back_to_the_makefile() -> None:
    (recipe, _) = read(MAKEFILE).recipes
    assert recipe.shell.text == "XLA_USE_BF16=1 \\\n  python train.py --out $HOME/$_____"
    start = recipe.shell.text.index("python")
    assert MAKEFILE[recipe.shell.start_of(start) :].startswith("python train.py")
    assert [e.name for e in recipe.expansions] == ["RUN"]


def test_recipe_writes_are_manual_findings_that_say_what_to_do(catalogue: Catalogue) -> None:
    enabled = catalogue.select((), ())
    result = scan_source("Makefile", MAKEFILE.encode(), "makefile", catalogue, enabled)
    assert [(f.span.line, f.span.column, f.code) for f in result.findings] == [
        (2, 3, "XM101"),
        (5, 9, "XM503"),
    ]
    write = result.findings[0]
    assert write.fix is not None and write.fix.applicability == "manual"
    assert "xlamigrate does not rewrite Makefiles" in write.message
    assert "BF16_RECIPE=1" in write.message


def test_the_rewrite_leaves_a_makefile_as_it_is(catalogue: Catalogue) -> None:
    enabled = catalogue.select((), ())
    request = RewriteRequest("full-bf16")
    outcome = rewrite_source("Makefile", MAKEFILE.encode(), "makefile", catalogue, enabled, request)
    assert outcome.rewritten is None
    assert [f.code for f in outcome.remaining] == ["XM101", "XM503"]


def test_direnv_envrc_is_a_shell_file(catalogue: Catalogue) -> None:
    assert kind_by_name(".envrc") == "shell"
    data = b"export XLA_USE_BF16=1\n"
    result = scan_source(".envrc", data, "shell", catalogue, frozenset({"XM101"}))
    assert [(f.span.line, f.span.column, f.code) for f in result.findings] == [(1, 8, "XM101")]
