"""Token elements in the scannerless engine (issue 58; ``terminal_kinds.py``): a terminal matched by
a token's id, not its text. Which ids each element terminal allows in a vocabulary, and a token's
advance as the union of its two readings. ``scannerless.EarleyConstraint`` adds an element's packed
ids to a mask where the element is expected."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from trellis.constrain.earley.earley import ChartState, Earley
from trellis.constrain.errors import GrammarError
from trellis.constrain.grammar.grammar_ir import GrammarIR
from trellis.constrain.vocab.walks import TokenMatrix


def element_ids(ir: GrammarIR, tm: TokenMatrix, toks: Sequence[bytes],
                special: frozenset) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """Per token-element terminal, the ids it matches in this vocabulary ([V] bool, and packed for
    masks); a ``GrammarError`` where an element names no token of it."""
    ok: dict[int, np.ndarray] = {}
    rows: dict[int, np.ndarray] = {}
    terms = ir.terminals
    if not any(t.token is not None for t in terms):
        return ok, rows
    guarded = next((t for t in terms if t.guard is not None), None)
    if guarded is not None:
        raise GrammarError(f"token elements in a grammar with a lookahead past a terminal (terminal "
                           f"{guarded.name}) are not supported", source=ir.source)
    eos = frozenset(int(i) for i in tm.eos)
    for t, term in enumerate(terms):
        if term.token is not None:
            try:
                ok[t] = term.token.allowed(toks, tm.valid, eos, special)
            except GrammarError as e:
                raise GrammarError(e.message, source=ir.source) from None
            rows[t] = tm.pack_ids(np.flatnonzero(ok[t]))
    return ok, rows


def advance_both(earley: Earley, toks: Sequence[bytes], valid: np.ndarray, ok: dict[int, np.ndarray],
                 state: ChartState, token: int) -> ChartState | None:
    """A token's advance in a grammar with token elements (``ok``: ``element_ids``' first part): the
    union of its two readings, its bytes through the text terminals and its id through the token
    elements expected here (each completes at its boundary); a chart state is a set of alternatives."""
    nxt = earley.walk(state, toks[token]) if valid[token] else None
    scans: set = set()
    acc = False
    term = earley.scan_term
    for d, _, e in state[0]:
        allowed = ok.get(term[d])
        if allowed is not None and allowed[token]:
            starts, a = earley.boundary_scans(e, d)
            scans |= starts
            acc |= a
    if not scans and not acc:
        return nxt
    if nxt is not None:
        scans.update(nxt[0])
        acc |= nxt[1]
    return earley.make_state(scans, acc)
