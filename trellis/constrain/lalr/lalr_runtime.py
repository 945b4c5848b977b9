"""The LALR engine (``engine="lalr"``), runtime stage: stack operations and viability.

``LalrRuntime`` runs a compiled grammar (``GrammarTables``, built by ``lalr_tables.compile_lark``) with no vocabulary
involved: feeding terminals to the LALR stack, greedy contextual lexing of bytes, and the
viability search (can the text so far still be completed? see ``cfg.py``'s module docstring),
first on the top states of the stack alone, answers shared by every stack with that top.
``cfg.CFGConstraint`` builds token masks on it; ``lalr_tables.compile_lark`` probes with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from trellis.constrain.lalr.lexer import LexerDFA, TerminalInfo


VIABILITY_DEPTH = 3
# viable() first asks the top VIABILITY_TOP states of the stack (answers shared by every stack with
# that top, see LalrRuntime._viable_top); only when the answer needs deeper states does it use the
# whole stack. 3 measured best on python_call.lark (first-visit mask time, 10 Gemma walks: 3 -> 0.75x
# of whole-stack viability, 4 -> 0.87x, 6 -> 0.92x).
VIABILITY_TOP = 3
TOP_DEPTHS = VIABILITY_DEPTH + 1  # depths 0..VIABILITY_DEPTH per state in a top_table row
TOP_DECODE = (False, True, None)  # top_table codes; 3 = not computed

Stack = tuple[int, ...]
CfgState = tuple[Stack, int]


# ----------------------------------------------------------------------------- parser runtime


class LalrRuntime:
    """Stack operations and viability on a GrammarTables (no vocabulary involved)."""

    def __init__(self, g: GrammarTables, *, top: int = VIABILITY_TOP) -> None:
        self.g = g
        self.top = top
        self._feed_cache: dict[tuple[Stack, int], Stack | None] = {}
        self._viable_cache: dict[tuple[Stack, int, int], bool] = {}
        # viable() asks the same few (lexer, byte set) and terminal-set questions again and again:
        # answering them from Python bit loops was ~60% of a first-visit mask on arithmetic.lark
        self._starts: dict[tuple[int, int], tuple[int, ...]] = {}
        self._bits: dict[int, tuple[int, ...]] = {}
        self._top_feed: dict[tuple[Stack, int], Stack | bool | None] = {}
        self._top_viable: dict[tuple[Stack, int, int], bool | None] = {}
        self._vclass: list[list[int] | None] = [None] * len(g.lexers)
        self._table = g.top_table or {}  # read-only, shared by every runtime of g

    def lexer(self, stack: Stack) -> LexerDFA:
        return self.g.lexers[self.g.lexer_of[stack[-1]]]

    def feed(self, stack: Stack, t: int) -> Stack | None:
        """Stack after the parser consumes terminal ``t`` (reductions then shift), None on error.

        For ``$END`` the returned stack is the accepting one."""
        key = (stack, t)
        c = self._feed_cache.get(key, False)
        if c is not False:
            return c  # type: ignore[return-value]
        res = self._lr(stack, t, whole=True)
        if len(self._feed_cache) > 500_000:
            self._feed_cache.clear()
        self._feed_cache[key] = res
        return res

    def after_lexeme(self, stack: Stack, t: int) -> Stack | None:
        return stack if t in self.g.ignore else self.feed(stack, t)

    def eos_ok(self, stack: Stack) -> bool:
        return self.feed(stack, self.g.end) is not None

    def is_accepting(self, state: CfgState) -> bool:
        stack, d = state
        if d == 0:
            return self.eos_ok(stack)
        t = int(self.lexer(stack).accept[d])
        if t < 0:
            return False
        s2 = self.after_lexeme(stack, t)
        return s2 is not None and self.eos_ok(s2)

    def walk(self, stack: Stack, d: int, data: bytes) -> CfgState | None:
        """Feed ``data`` byte by byte (greedy contextual lexing); None if some byte is impossible."""
        lex = self.lexer(stack)
        rows = lex.rows
        for b in data:
            nd = rows[d][b]
            if nd >= 0:
                d = nd
                continue
            t = int(lex.accept[d])
            if d == 0 or t < 0:
                return None
            s2 = self.after_lexeme(stack, t)
            if s2 is None:
                return None
            stack = s2
            lex = self.lexer(stack)
            rows = lex.rows
            d = rows[0][b]
            if d < 0:
                return None
        return stack, d

    def vclass(self, lexer_id: int) -> list[int]:
        """[S] the viability class of each state of lexer ``lexer_id``: the lowest state with the
        same ``completable`` and ``boundary``, the only things viability reads of a lexer state (0,
        no lexeme yet, is its own class). Masks ask one question per class, not per end state:
        python_call.lark's 239 lexer states fall into 103 classes."""
        vc = self._vclass[lexer_id]
        if vc is None:
            lex = self.g.lexers[lexer_id]
            seen: dict[tuple[int, tuple[tuple[int, int], ...]], int] = {}
            vc = [0] + [seen.setdefault((lex.completable[d], tuple(sorted(lex.boundary[d].items()))), d)
                        for d in range(1, len(lex.accept))]
            self._vclass[lexer_id] = vc
        return vc

    def viable(self, state: CfgState, depth: int = VIABILITY_DEPTH) -> bool:
        """Can the text that led to ``state`` be completed to a sentence? (see ``cfg.py``'s module docstring)"""
        stack, d = state
        d = self.vclass(self.g.lexer_of[stack[-1]])[d]
        key = (stack, d, depth)
        c = self._viable_cache.get(key)
        if c is not None:
            return c
        res = self._viable_top(stack[-self.top:], d, depth) if len(stack) > self.top else None
        if res is None:
            res = self._viable_stack(stack, d, depth)
        if len(self._viable_cache) > 500_000:
            self._viable_cache.clear()
        self._viable_cache[key] = res
        return res

    def _viable_stack(self, stack: Stack, d: int, depth: int) -> bool:
        lid = self.g.lexer_of[stack[-1]]
        lex = self.g.lexers[lid]
        if d == 0:
            return any(self.viable((stack, nd), depth) for nd in self.starts(lid, lex.first))
        for t in self._bit_list(lex.completable[d]):
            s2 = self.after_lexeme(stack, t)
            if s2 is None:
                continue
            if self.eos_ok(s2) or depth == 0:
                return True
            lid2 = self.g.lexer_of[s2[-1]]
            follow = lex.boundary[d].get(t, 0) & self.g.lexers[lid2].first
            if any(self.viable((s2, nd), depth - 1) for nd in self.starts(lid2, follow)):
                return True
        return False

    def top_table(self, budget: int) -> dict[Stack, bytes]:
        """``_viable_top`` at depth ``VIABILITY_DEPTH`` for every class of every possible top of
        ``self.top`` states (an LALR stack's adjacent states are joined by a shift or a goto, so
        the paths of that many states hold every real top), with the lower depths its searches
        answered on the way, encoded as ``GrammarTables.top_table``; empty when that is more than
        ``budget`` questions. First visits of new stacks then find their top's answer ready: on
        python_call.lark ~150 of a worst mask's ~270 top questions were new tops."""
        g = self.g
        succ = [sorted({a for a in acts.values() if a >= 0} | set(gt.values())) for acts, gt in zip(g.actions, g.gotos)]
        tops: list[Stack] = [(a,) for a in range(len(succ))]
        for _ in range(self.top - 1):
            tops = [t + (b,) for t in tops for b in succ[t[-1]]]
        classes = [sorted(set(self.vclass(i))) for i in range(len(g.lexers))]
        if sum(len(classes[g.lexer_of[t[-1]]]) for t in tops) > budget:
            return {}
        for t in tops:
            for d in classes[g.lexer_of[t[-1]]]:
                self._viable_top(t, d, VIABILITY_DEPTH)
        rows: dict[Stack, bytearray] = {}
        for (top, d, depth), v in self._top_viable.items():
            if depth < TOP_DEPTHS:
                row = rows.get(top)
                if row is None:
                    row = rows[top] = bytearray([3]) * (len(g.lexers[g.lexer_of[top[-1]]].accept) * TOP_DEPTHS)
                row[d * TOP_DEPTHS + depth] = 2 if v is None else int(v)
        return {t: bytes(r) for t, r in rows.items()}

    def _viable_top(self, top: Stack, d: int, depth: int) -> bool | None:
        """``viable`` of every stack that ends in ``top``, or None when that depends on the states
        below it. The same search as ``_viable_stack``, on ``top`` alone: a reduction that would pop
        below it, or ``$END`` (acceptance needs the bottom), makes its branch unknown. An answer is
        shared by all stacks with that top, so a first visit of a deep stack (nested calls, SQL
        subqueries) mostly finds its viability already known instead of searching again."""
        row = self._table.get(top)
        if row is not None and depth < TOP_DEPTHS and row[d * TOP_DEPTHS + depth] != 3:
            return TOP_DECODE[row[d * TOP_DEPTHS + depth]]
        key = (top, d, depth)
        c = self._top_viable.get(key, 0)
        if c != 0:
            return c  # type: ignore[return-value]
        lid = self.g.lexer_of[top[-1]]
        lex = self.g.lexers[lid]
        res: bool | None
        if d == 0:
            res = _any3(self._viable_top(top, nd, depth) for nd in self.starts(lid, lex.first))
        else:
            res = False
            for t in self._bit_list(lex.completable[d]):
                s2 = top if t in self.g.ignore else self._feed_top(top, t)
                if s2 is None:
                    continue
                if s2 is False:
                    res = None
                    continue
                if depth == 0:
                    res = True
                    break
                lid2 = self.g.lexer_of[s2[-1]]
                follow = lex.boundary[d].get(t, 0) & self.g.lexers[lid2].first
                sub = _any3(self._viable_top(s2[-self.top:], nd, depth - 1) for nd in self.starts(lid2, follow))
                if sub:
                    res = True
                    break
                if sub is None or self._feed_top(s2, self.g.end) is not None:  # EOS here: unknown
                    res = None
        if len(self._top_viable) > 500_000:
            self._top_viable.clear()
        self._top_viable[key] = res
        return res

    def _feed_top(self, top: Stack, t: int) -> Stack | bool | None:
        """``feed`` on the top of a stack: the new top, None on a parse error, False when a
        reduction pops below ``top`` (so does ``$END``'s acceptance: ``top`` never holds the start state)."""
        key = (top, t)
        c = self._top_feed.get(key, 0)
        if c != 0:
            return c  # type: ignore[return-value]
        res = self._lr(top, t, whole=False)
        if len(self._top_feed) > 500_000:
            self._top_feed.clear()
        self._top_feed[key] = res
        return res

    def _lr(self, stack: Stack, t: int, *, whole: bool) -> Stack | bool | None:
        """The LALR step on terminal ``t``: reductions, then the shift (or ``$END``'s acceptance).
        None on a parse error; False when ``stack`` is only a top (``whole=False``) and a
        reduction would pop below it."""
        g = self.g
        st = list(stack)
        while True:
            a = g.actions[st[-1]].get(t)
            if a is None:
                return None
            if a >= 0:
                st.append(a)
                return tuple(st)
            lhs, n = g.rules[-1 - a]
            if not whole and n >= len(st):
                return False
            if n:
                del st[-n:]
            st.append(g.gotos[st[-1]][lhs])
            if t == g.end and st[-1] == g.end_state:
                return tuple(st)

    def _bit_list(self, bits: int) -> tuple[int, ...]:
        hit = self._bits.get(bits)
        if hit is None:
            hit = self._bits[bits] = tuple(_bit_indices(bits))
        return hit

    def starts(self, lexer_id: int, byteset: int) -> tuple[int, ...]:
        """Distinct viability classes (``vclass``) of the states of lexer ``lexer_id`` reached from
        its state 0 by one byte of ``byteset``."""
        key = (lexer_id, byteset)
        hit = self._starts.get(key)
        if hit is None:
            row, vc = self.g.lexers[lexer_id].rows[0], self.vclass(lexer_id)
            hit = self._starts[key] = tuple(sorted({vc[row[b]] for b in _bit_indices(byteset) if row[b] >= 0}))
        return hit


def _any3(answers: Iterable[bool | None]) -> bool | None:
    """True if some answer is True, else None if some is unknown, else False."""
    unknown = False
    for a in answers:
        if a:
            return True
        unknown |= a is None
    return None if unknown else False


def _bit_indices(x: int) -> Iterable[int]:
    while x:
        low = x & -x
        yield low.bit_length() - 1
        x ^= low


@dataclass(eq=False)
class GrammarTables:
    """Vocabulary-independent tables of a Lark grammar (picklable).

    ``actions[p][T]``: ``>= 0`` shift to that state, ``< 0`` reduce rule ``-1 - a``; terminal id
    ``end`` is ``$END``. ``lexer_of[p]``: index into ``lexers`` of state ``p``'s terminal set.
    """

    text: str
    source: str
    terminals: list[TerminalInfo]
    ignore: frozenset[int]
    end: int
    actions: list[dict[int, int]]
    rules: list[tuple[int, int]]  # (lhs nonterminal id, rhs length)
    gotos: list[dict[int, int]]
    start_state: int
    end_state: int
    lexer_of: list[int]
    lexers: list[LexerDFA]
    gtrans: np.ndarray  # [G, 256] int32: the lexer states of all lexers, numbered by ``globalize``
    gfinal: np.ndarray  # [G] bool
    # top_table[top][d * TOP_DEPTHS + depth]: ``LalrRuntime._viable_top(top, d, depth)`` answered ahead of
    # time (0 False, 1 True, 2 unknown, 3 not computed), for every LALR path of 3 states as ``top``
    # (``build_top_table``; None: not built, only precomputed compiles build it).
    top_table: dict[tuple[int, ...], bytes] | None = None

    @property
    def terminal_names(self) -> list[str]:
        return [t.name for t in self.terminals]
