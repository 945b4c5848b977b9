"""Typed errors for bad grammars and schemas, with a readable location."""

from __future__ import annotations

from trellis.errors import TrellisError


class ConstraintError(TrellisError):
    """Base class of trellis constraint errors."""


class GrammarError(ConstraintError, ValueError):
    """A grammar that cannot be compiled; ``str()`` names file:line:col and shows a caret excerpt."""

    def __init__(self, message: str, *, source: str | None = None, text: str | None = None,
                 line: int | None = None, column: int | None = None) -> None:
        self.message, self.source, self.line, self.column = message, source, line, column
        where = source or "<grammar>"
        if line is not None:
            where += f":{line}" + (f":{column}" if column is not None else "")
        full = f"{where}: {message}"
        if text is not None and line is not None and 1 <= line <= len(text.splitlines()):
            src_line = text.splitlines()[line - 1]
            full += f"\n    {src_line}"
            if column is not None:
                full += "\n    " + " " * max(column - 1, 0) + "^"
        super().__init__(full)


class GrammarBudgetError(GrammarError):
    """A grammar whose mask or advance needed more work than its bound allows (issue 58: no
    grammar may hold a server's engine step). ``what`` is ``"mask"`` or ``"advance"``; ``budget``
    the bound in work units; ``culprit`` the terminal with the most scans in the chart, when it has
    any. Raise the bound (``compile(..., mask_work=..., advance_work=...)``, ``TRELLIS_MASK_WORK``,
    ``TRELLIS_ADVANCE_WORK``) to allow it. (A terminal's automaton past its build bounds is a plain
    ``GrammarError`` naming the terminal.)"""

    def __init__(self, message: str, *, what: str, budget: int, culprit: str | None = None,
                 source: str | None = None) -> None:
        self.what, self.budget, self.culprit = what, budget, culprit
        super().__init__(message, source=source)


class SchemaError(ConstraintError, ValueError):
    """A JSON Schema that cannot be compiled exactly; names the JSON pointer of the culprit."""

    def __init__(self, message: str, *, pointer: str = "") -> None:
        self.message, self.pointer = message, pointer
        super().__init__(f"{pointer or '#'}: {message}")


class ConstraintUsageError(ConstraintError, RuntimeError):
    """A constraint used against its contract (e.g. advancing a finished state)."""
