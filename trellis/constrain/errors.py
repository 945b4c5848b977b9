"""Typed errors for bad grammars and schemas, with a readable location."""

from __future__ import annotations

import re

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


def locate_in_text(text: str, pattern: str) -> tuple[int | None, int | None]:
    m = re.search(pattern, text, re.M)
    if not m:
        return None, None
    line = text.count("\n", 0, m.start()) + 1
    col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
    return line, col

def lark_error(e: Exception, text: str, source: str) -> GrammarError:
    """Convert any Lark exception into a GrammarError with the best location we can find."""
    msg = str(e).strip()
    line = getattr(e, "line", None)
    col = getattr(e, "column", None)
    if not isinstance(line, int) or line < 1:
        line, col = None, None
        m = re.search(r"at line (\d+) column (\d+)", msg) or re.search(r"[Ll]ine (\d+), column (\d+)", msg)
        if m:
            line, col = int(m.group(1)), int(m.group(2))
    if line is None:
        # Definition of the rule/terminal the message is about (conflicts, collisions, ...).
        for rx in (r"<([A-Za-z_]\w*) :", r"Terminals ([A-Za-z_]\w*)", r"\(([A-Za-z_]\w*): ",
                   r"[Tt]erminal ([A-Z_]\w*)"):
            m = re.search(rx, msg)
            if m:
                name = m.group(1).lstrip("_") if m.group(1).startswith("__") else m.group(1)
                line, col = locate_in_text(text, rf"^[ \t]*[?!]?{re.escape(name)}(?:\.-?\d+)?[ \t]*:")
                if line is not None:
                    break
    if line is None:
        # Name-based: find where the offending rule/terminal is mentioned.
        for rx in (r"[Rr]ule '?([A-Za-z_]\w*)'? used but not defined", r"Terminal used but not defined: (\w+)",
                   r"'([A-Za-z_]\w*)'", r"\b([A-Za-z_]\w*) is not defined"):
            m = re.search(rx, msg)
            if m:
                name = m.group(1).lstrip("?!")
                line, col = locate_in_text(text, rf"(?<![\w.]){re.escape(name)}(?!\w)")
                if line is not None:
                    break
    first = msg.splitlines()[0] if msg else type(e).__name__
    if "collision" in msg.lower() or "conflict" in msg.lower():
        first = " ".join(msg.split())[:400]
    return GrammarError(first, source=source, text=text, line=line, column=col)
