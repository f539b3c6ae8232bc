"""`python -m xlamigrate`, the same as the `xlamigrate` command."""

from xlamigrate.cli import entry

entry()
