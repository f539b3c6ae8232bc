"""The comments the tool writes as markers (a notebook's masked magic lines, its cells): the
notebook kind restores or drops them; a rewrite never carries one to another line."""

from __future__ import annotations

TOOL_MARKER = "# xlamigrate-"
