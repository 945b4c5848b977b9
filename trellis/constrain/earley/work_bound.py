"""Work bounds: no grammar may hold its caller (a vLLM engine step serves every request in the batch).

The Earley chart counts its work (``Earley.charge``: one unit a scan moved by ``step`` and an
item closed by ``_close``, one per eight memoised bytes walked, one a rest walk plus one per 64
rests, 16 a group of rests a chart walk steps together plus one per 16 rests; a unit is under a
microsecond of Python on a 2-core VM, benchmarks/README.md) and raises ``earley.WorkExhausted``
past ``work_limit``. ``bounded`` sets the limit around each mask and each advance of an
``EarleyConstraint`` (``MASK_WORK``, ``ADVANCE_WORK``; ``compile(..., mask_work=...,
advance_work=...)``; the environment variables ``TRELLIS_MASK_WORK`` / ``TRELLIS_ADVANCE_WORK``)
and turns the signal into a ``GrammarBudgetError`` that names what filled the chart
(``budget_error``). Counting work rather
than time keeps the bound deterministic: the same grammar, document and bound give the same
answer on any machine and under any load.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any, Callable

from trellis.constrain.earley.earley import UNBOUNDED, ChartState, Earley, WorkExhausted
from trellis.constrain.errors import GrammarBudgetError
from trellis.constrain.grammar.grammar_ir import GrammarIR

# Calibrated with benchmarks/bench_grammar_bounds.py on the shared and collected real grammars
# (benchmarks/README.md, "bench_grammar_bounds.py").
MASK_WORK = int(os.environ.get("TRELLIS_MASK_WORK", "50000"))
ADVANCE_WORK = int(os.environ.get("TRELLIS_ADVANCE_WORK", "50000"))
# The start state's mask is computed once per grammar (then cached), as part of what a new grammar
# costs before its first token: it gets this many times the mask bound (cairo.lark's and
# latex.lark's take 60-240k units, ~0.1-0.5 s, and their later masks stay under the bound or not).
START_FACTOR = 10


def bounded(c: Any, what: str, state: ChartState, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(state, *args)`` under the work bound of ``what`` ("mask": ``c.mask_work``, or
    "advance": ``c.advance_work``) of ``EarleyConstraint`` ``c``; past it a ``GrammarBudgetError``.
    The memos keep only finished work, so ``c`` stays usable (and exact) after the error."""
    e = c.earley
    limit = c.mask_work if what == "mask" else c.advance_work
    if what == "mask" and state == e.start() and limit < UNBOUNDED // START_FACTOR:
        limit *= START_FACTOR  # once per grammar, like its compile: every rule is predicted at once
    e.work, e.work_limit = 0, limit
    try:
        return fn(state, *args)
    except WorkExhausted:
        raise budget_error(c.ir, e, what, state, e.work_limit) from None
    finally:
        e.work_limit = UNBOUNDED


def budget_error(ir: GrammarIR, earley: Earley, what: str, state: ChartState, budget: int) -> GrammarBudgetError:
    """The error of a ``what`` ("mask" or "advance") from ``state`` that passed ``budget``: names
    the terminal with the most scans in the chart (ambiguity shows as many scans of one terminal
    started at different boundaries) and the rules that use it."""
    by_term = Counter(ir.terminals[earley.scan_term[t]].name for t, _, _ in state[0])
    culprit, where = None, ""
    if by_term:
        culprit, n = by_term.most_common(1)[0]
        term = next(i for i, t in enumerate(ir.terminals) if t.name == culprit)
        rules: list[str] = []
        for lhs, rhs in ir.rules:
            if -1 - term in rhs and ir.nonterminals[lhs] not in rules:
                rules.append(ir.nonterminals[lhs])
        where = (f"; the chart holds {len(state[0])} scans, {n} of terminal {culprit}"
                 + (f" (in rule {', '.join(rules[:3])})" if rules else ""))
    return GrammarBudgetError(
        f"this {what} needs more than {budget:,} units of work{where}: the grammar is too ambiguous "
        f"here to answer within the bound (raise it with compile(..., {what}_work=...) or "
        f"TRELLIS_{what.upper()}_WORK)", what=what, budget=budget, culprit=culprit, source=ir.source)
