"""A libcst module's code, made statement by statement with each top-level statement's code
kept: the modules a rewrite makes from a parsed one keep its unchanged statements (the same
objects), so their code is made again only for the statements an edit changed. A 200,000-line
file's code took some 3.5 s to make, and a rewrite made it twice (once to check that libcst
reproduces the file, once for what it writes)."""

from __future__ import annotations

import libcst as cst


class ModuleCode:
    """Makes modules' code, keeping each top-level statement's (by the statement object)."""

    def __init__(self) -> None:
        self._made: dict[int, tuple[cst.BaseStatement, str, str, str]] = {}

    def code(self, module: cst.Module) -> str:
        """`module.code`, the same text."""
        body = module.body
        if not body:
            return module.code
        parts = [module.code_for_node(line) for line in module.header]
        parts += [self.statement(module, statement) for statement in body[:-1]]
        # The last statement with the footer, as the module ends them (its final newline
        # dropped where the file has none).
        parts.append(module.with_changes(header=(), body=body[-1:]).code)
        return "".join(parts)

    def statement(self, module: cst.Module, statement: cst.BaseStatement) -> str:
        """`module.code_for_node(statement)`, made once for the statement object."""
        made = self._made.get(id(statement))
        if (
            made is not None
            and made[0] is statement
            and made[1] == module.default_indent
            and made[2] == module.default_newline
        ):
            return made[3]
        code = module.code_for_node(statement)
        self._made[id(statement)] = (statement, module.default_indent, module.default_newline, code)
        return code

    def lines(self, module: cst.Module) -> list[tuple[int, int]]:
        """Each top-level statement's first and last line in the module's code (its leading
        comments and blank lines included; the last one's, the module's footer too)."""
        line = 1 + len(module.header)
        spans: list[tuple[int, int]] = []
        body = module.body
        for index, statement in enumerate(body):
            last = index == len(body) - 1
            code = (
                module.with_changes(header=(), body=body[-1:]).code
                if last
                else self.statement(module, statement)
            )
            count = max(1, code.count("\n") + (not code.endswith("\n")))
            spans.append((line, line + count - 1))
            line += count
        return spans
