"""The kinds of file xlamigrate does not read, as data: how each is named, pygments' lexer for
it (which tells its comments and strings apart), pre-commit's type, and what the finding calls
it. Each is a kind of the registry (`kinds.KINDS`) whose module is `kinds/unread.py`. No
imports: the registry reads this table at start-up."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UnreadKind:
    name: str  # the kind's name in the registry
    patterns: tuple[str, ...]  # file names, as a KindSpec's
    lexer: str  # pygments' alias
    identify: str  # pre-commit's (identify's) type
    what: str  # said in the finding
    not_patterns: tuple[str, ...] = ()  # names that look like the kind and are read elsewhere


UNREAD_KINDS: tuple[UnreadKind, ...] = (
    UnreadKind(
        "groovy", ("Jenkinsfile", "Jenkinsfile.*", "*.jenkinsfile", "*.groovy", "*.gradle"),
        "groovy", "groovy", "a Jenkins pipeline or Groovy script",
    ),
    UnreadKind("jsonnet", ("*.jsonnet", "*.libsonnet"), "jsonnet", "jsonnet", "a jsonnet template"),
    UnreadKind("terraform", ("*.tf", "*.tfvars"), "terraform", "terraform", "a Terraform file"),
    UnreadKind("json", ("*.json",), "json", "json", "a JSON file"),
    # (pyproject.toml is the project's configuration, read for [tool.xlamigrate] and its pins)
    UnreadKind("toml", ("*.toml",), "toml", "toml", "a TOML file", ("pyproject.toml",)),
    UnreadKind("batch", ("*.bat", "*.cmd"), "batch", "batch", "a Windows batch script"),
    UnreadKind(
        "powershell", ("*.ps1", "*.psm1"), "powershell", "powershell", "a PowerShell script",
    ),
)  # fmt: skip

# Folders whose files document rather than run: nothing in them is reported.
DOCUMENTATION_FOLDERS = frozenset({"docs", "doc", "documentation"})

# Inside a string, where a flag's name is a variable's and not a word of prose ({name}: the
# name, escaped). Outside strings and comments a name always counts; in a comment, never.
STRING_USES: tuple[str, ...] = (
    r"{name}\s*\+?=",  # NAME=value (a command line in a string, an assignment)
    r"{name}[\"']?\s*:",  # "NAME": value (a map's key)
    r"\$\{{?{name}\b",  # $NAME, ${{NAME}}
    r"\benv\.{name}\b",  # env.NAME (Jenkins)
    r"%{name}%",  # %NAME% (batch)
    r"\$env:{name}\b",  # $env:NAME (PowerShell)
    r"^\W*{name}\W*$",  # the whole string: a key, a list item
)
