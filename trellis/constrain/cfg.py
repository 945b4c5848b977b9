"""Lark grammar -> token-level pushdown constraint with exact masks and a mask cache.

Semantics (what "the language of a grammar" means here)
-------------------------------------------------------
A grammar is a Lark grammar, compiled by Lark itself with ``parser="lalr"`` and ``strict=True``
(so LALR shift/reduce and reduce/reduce conflicts are errors); Lark's lexer is never built, and
its checks run on our byte DFAs instead (same-priority regex collisions, zero-width terminals).
A byte string is in the language when the following deterministic process accepts it:

* **Contextual lexing.** A lexeme is lexed against the terminals the current LALR state has an
  action for (``parse_table.states[top]``, exactly the set Lark's ``ContextualLexer`` uses), plus
  the ``%ignore`` terminals.
* **Greedy lexemes, no backtracking.** A lexeme continues while the next byte can extend a match
  of some terminal of that set (byte-level DFA of the union); it ends when the next byte cannot,
  or at the end of the text, and must then fully match some terminal of the set.
* **Ties** between terminals that match the same lexeme are resolved the way Lark resolves them:
  Lark's lexer order (priority, then max width, then pattern length, then name) with its
  ``unless`` retyping (a literal that a same-priority regex terminal also matches, e.g. the
  keyword ``"select"`` vs ``NAME``, wins when the lexeme equals it).
* The resulting terminal sequence (``%ignore`` terminals dropped) must be accepted by the LALR
  table, followed by ``$END``.

Where this differs from Lark's own lexer (``lark.Lark(..., parser="lalr").parse``):

1. Lark's lexer is a Python ``re`` alternation: it takes the first terminal (in the order above)
   that matches *some prefix*, not the longest lexeme; and inside one regex ``a|ab`` is
   leftmost-first. E.g. with ``A.2: "a"`` and ``B: "ab"``, Lark lexes ``ab`` as ``A`` + error,
   we lex it as ``B``. Grammars where a higher-ranked terminal matches a proper prefix of a
   lower-ranked one's lexeme can disagree.
2. Lark backtracks to a shorter match when the longer one dies: with terminals ``"a"`` and
   ``"abc"``, Lark lexes ``abd`` as ``a`` then ``bd``...; we reject at ``d`` (the lexeme ``ab``
   is not complete). So our language can be smaller than Lark's, never containing a string whose
   greedy lexing Lark would do differently.
3. Terminal regexes mean what ``re`` means (``regex_compile.py``: Unicode ``\\w \\d \\s``, flags).
4. Regex features that look outside the match or need backtracking state (a lookaround that can
   see past the match, backreferences, anchors) are refused with ``GrammarError``; ``common.ESCAPED_STRING`` (a lookbehind) is rewritten into the
   equivalent lookaround-free regex.

The shipped grammars (``trellis/grammars/*.lark``) avoid 1-3; the oracle tests check that every
completed document parses with Lark's own parser.

Exactness
---------
``fill_mask(state)`` allows exactly the tokens ``t`` such that ``text + bytes(t)`` can still be
completed to a sentence, and EOS exactly when ``text`` is a sentence. A partial lexeme is viable
when it can be completed to a terminal the parser accepts on the real stack (LALR lookaheads are
over-approximate, so reductions are simulated) and, for the greedy-lexing boundary, when a byte
that cannot extend the lexeme can start a viable next lexeme. That boundary check is followed
``VIABILITY_DEPTH`` lexemes deep; a dead end that only shows more than that many lexemes later
(possible only in grammars where greedy lexing makes whole terminal sequences unrealisable)
would be missed — the shipped grammars have none, which the oracle tests check. The search
is first run on the top ``VIABILITY_TOP`` states of the stack alone, and its answer shared by every
stack with that top; where it would pop below them (or needs ``$END``'s acceptance) the whole
stack is searched, so answers are those of the whole stack.

Engine (XGrammar-style)
-----------------------
State = ``(stack, d)``: the LALR state stack (a tuple) and the state of the current lexeme in the
lexer DFA of the stack top's terminal set (``0`` = no lexeme started; only at the very start).
Per global lexer state, the whole vocabulary is walked once with numpy (``walks.walk_table``) and
split into tokens that stay inside the lexeme (grouped by end state: context-independent, packed
bitsets), tokens whose first byte ends a complete lexeme (masked by the mask of the state after
that lexeme), and tokens that end it later: their rests are walked from the start of every
lexer that can follow the lexeme's terminal (``walks.continuation``: in global states, per
first-byte bucket, shared by lexers that begin the rests alike and by states with equal crossing
sets; precomputed and disk-cached with the tables), and their groups kept where the real stack
makes them viable. Whole masks are cached by state in an LRU.
"""

from __future__ import annotations

import functools
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Hashable, Iterable

import numpy as np
import torch
from torch import Tensor

from trellis.constrain.errors import GrammarError
from trellis.constrain.lexer import (LexerDFA, TerminalCollision, TerminalInfo, build_lexer_dfa, byte_classes,
                                     global_accept, globalize)
from trellis.constrain.walks import (Continuation, Rests, StateTable, TokenMatrix, WalkTable, continuation, scaled,
                                     start_successors, state_table, walk_table)
from trellis.constrain.regex import literal_dfa, terminal_dfa
from trellis.tokens import Vocabulary

VIABILITY_DEPTH = 3
# viable() first asks the top VIABILITY_TOP states of the stack (answers shared by every stack with
# that top, see LalrRuntime._viable_top); only when the answer needs deeper states does it use the
# whole stack. 3 measured best on python_call.lark (first-visit mask time, 10 Gemma walks: 3 -> 0.75x
# of whole-stack viability, 4 -> 0.87x, 6 -> 0.92x).
VIABILITY_TOP = 3
# A precomputed compile answers every depth-VIABILITY_DEPTH question on every possible stack top
# ahead of time (``GrammarTables.top_table``) when there are at most this many: python_call.lark
# has 6.7k (~70 ms, once per grammar, disk-cached with it), sql_select.lark 57k (~0.7 s, and a
# pickle too big for its 50 ms warm compile), so sql_select answers them on first use.
TOP_TABLE_BUDGET = 10_000
TOP_DEPTHS = VIABILITY_DEPTH + 1  # depths 0..VIABILITY_DEPTH per state in a top_table row
TOP_DECODE = (False, True, None)  # top_table codes; 3 = not computed

Stack = tuple[int, ...]
CfgState = tuple[Stack, int]


# ----------------------------------------------------------------------------- compiled grammar


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


def _locate(text: str, pattern: str) -> tuple[int | None, int | None]:
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
                line, col = _locate(text, rf"^[ \t]*[?!]?{re.escape(name)}(?:\.-?\d+)?[ \t]*:")
                if line is not None:
                    break
    if line is None:
        # Name-based: find where the offending rule/terminal is mentioned.
        for rx in (r"[Rr]ule '?([A-Za-z_]\w*)'? used but not defined", r"Terminal used but not defined: (\w+)",
                   r"'([A-Za-z_]\w*)'", r"\b([A-Za-z_]\w*) is not defined"):
            m = re.search(rx, msg)
            if m:
                name = m.group(1).lstrip("?!")
                line, col = _locate(text, rf"(?<![\w.]){re.escape(name)}(?!\w)")
                if line is not None:
                    break
    first = msg.splitlines()[0] if msg else type(e).__name__
    if "collision" in msg.lower() or "conflict" in msg.lower():
        first = " ".join(msg.split())[:400]
    return GrammarError(first, source=source, text=text, line=line, column=col)


@functools.cache
def _no_lexer() -> type:
    """A Lark lexer class that is never used (lark is imported lazily, so built on first call)."""
    from lark.lexer import Lexer

    class NoLexer(Lexer):
        """Stands in for Lark's lexer: trellis lexes with its own byte DFAs."""

        def __init__(self, conf: object) -> None:
            pass

        def lex(self, *args: object) -> None:  # type: ignore[override]
            raise NotImplementedError("trellis grammars are lexed by trellis.constrain.lexer")

    return NoLexer


def _terminal_error(msg: str, td: object, text: str, source: str) -> GrammarError:
    """GrammarError at the definition of terminal ``td`` (or its pattern, for anonymous ones)."""
    nm, pat = td.name, td.pattern  # type: ignore[attr-defined]
    line, col = _locate(text, rf"^\s*{re.escape(nm)}\b") if not nm.startswith("__") else (None, None)
    if line is None:
        line, col = _locate(text, re.escape(pat.value)) if pat.value else (None, None)
    return GrammarError(msg, source=source, text=text, line=line, column=col)


def _validate_terminals(defs: list, ignore: set[str], text: str, source: str) -> None:
    """What Lark's lexer construction checks (we never build it): each terminal compiles as a
    Python regex and matches no empty lexeme, and every %ignore'd name is defined. Collisions
    (the other strict check) are found while building the lexer DFAs."""
    undefined = ignore - {td.name for td in defs}
    if undefined:
        raise GrammarError(f"%ignore of undefined terminals: {', '.join(sorted(undefined))}", source=source,
                           text=text, line=_locate(text, r"^%ignore")[0], column=1)
    for td in defs:
        try:
            re.compile(td.pattern.to_regexp())
        except re.error as e:
            raise _terminal_error(f"Cannot compile terminal {td.name}: {e}", td, text, source) from None
        if td.pattern.min_width == 0:
            raise _terminal_error(f"Lexer does not allow zero-width terminals. ({td.name}: {td.pattern})", td,
                                  text, source)


def compile_lark(text: str, *, source: str = "<grammar>", start: str = "start") -> GrammarTables:
    """Compile Lark grammar text into vocabulary-independent tables; errors -> ``GrammarError``."""
    import lark
    from lark.parsers.lalr_analysis import Shift

    try:
        # Lark builds the grammar and the LALR table; its own lexer is never used, and building it
        # (a Python-regex lexer per parser state plus interegular FSMs for the strict collision
        # check) was ~25 ms of a json.lark compile: ``_validate_terminals`` and the lexer DFAs
        # below check the same things on our byte DFAs.
        lk = lark.Lark(text, parser="lalr", lexer=_no_lexer(), start=start, strict=True)
    except Exception as e:  # lark raises GrammarError, LexError, UnexpectedInput, ConfigurationError ...
        raise lark_error(e, text, source) from None
    pt = lk.parser.parser.parser.parse_table
    term_defs = {t.name: t for t in lk.terminals}
    used: set[str] = set(lk.ignore_tokens)
    for row in pt.states.values():
        used.update(k for k in row if k in term_defs)
    names = sorted(used)
    _validate_terminals([term_defs[n] for n in names], set(lk.ignore_tokens), text, source)
    terms: list[TerminalInfo] = []
    for nm in names:
        td = term_defs[nm]
        pat = td.pattern
        try:
            if type(pat).__name__ == "PatternStr" and not pat.flags and pat.value:
                dfa = literal_dfa(pat.value.encode("utf-8"))
            else:
                dfa = terminal_dfa(pat.to_regexp(), name=f"terminal {nm}")
        except GrammarError as ge:
            raise _terminal_error(ge.message, td, text, source) from None
        mw = pat.max_width
        terms.append(TerminalInfo(nm, td.priority, type(pat).__name__ == "PatternStr", pat.value,
                                  frozenset(pat.flags), int(min(mw, 2**62)), dfa))
    tid = {t.name: i for i, t in enumerate(terms)}
    end = len(terms)
    nts: dict[str, int] = {}
    rules: list[tuple[int, int]] = []
    rule_ids: dict[object, int] = {}
    n_states = max(pt.states) + 1
    actions: list[dict[int, int]] = [dict() for _ in range(n_states)]
    gotos: list[dict[int, int]] = [dict() for _ in range(n_states)]
    for s, row in pt.states.items():
        for k, (act, arg) in row.items():
            if k == "$END" or k in tid:
                t = end if k == "$END" else tid[k]
                if act is Shift:
                    actions[s][t] = int(arg)
                else:
                    r = rule_ids.get(id(arg))
                    if r is None:
                        lhs = nts.setdefault(arg.origin.name, len(nts))
                        r = rule_ids[id(arg)] = len(rules)
                        rules.append((lhs, len(arg.expansion)))
                    actions[s][t] = -1 - r
            else:
                gotos[s][nts.setdefault(k, len(nts))] = int(arg)
    ignore = frozenset(tid[n] for n in lk.ignore_tokens)
    sets: dict[frozenset[int], int] = {}
    lexer_of = []
    for s in range(n_states):
        key = frozenset(t for t in actions[s] if t != end) | ignore
        lexer_of.append(sets.setdefault(key, len(sets)))
    memo: dict = {}
    try:
        lexers = [build_lexer_dfa(terms, sorted(k), memo) for k in sets]
    except TerminalCollision as e:
        raise _terminal_error(str(e), term_defs[e.names[0]], text, source) from None
    gtrans, gfinal = globalize(lexers)
    g = GrammarTables(text, source, terms, ignore, end, actions, rules, gotos, pt.start_states[start],
                        pt.end_states[start], lexer_of, lexers, gtrans, gfinal)
    probe = LalrRuntime(g)
    if not probe.viable(((g.start_state,), 0), depth=VIABILITY_DEPTH + 2):
        raise GrammarError("the grammar's language is empty (under greedy contextual lexing)",
                           source=source, text=text, line=1, column=1)
    return g


def build_top_table(g: GrammarTables, budget: int = TOP_TABLE_BUDGET) -> None:
    """Set ``g.top_table`` (empty when it would take more than ``budget`` questions)."""
    g.top_table = LalrRuntime(g).top_table(budget)


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
        """Can the text that led to ``state`` be completed to a sentence? (see module docstring)"""
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


# ----------------------------------------------------------------------------- the constraint


class CFGConstraint:
    """Token-level constraint of a compiled Lark grammar over one vocabulary.

    States are ``(stack, lexer_state)`` tuples (immutable, hashable). Masks are exact (module
    docstring); per-lexer-state vocabulary tables are built lazily on first use and whole masks
    are kept in an LRU of ``cache_size`` rows (4·ceil(V/32) bytes each).
    """

    def __init__(self, grammar: GrammarTables, vocab: Vocabulary, *, cache_size: int = 2048,
                 tables: dict[int, WalkTable] | None = None) -> None:
        self.vocab = vocab
        self.grammar = grammar
        self.rt = LalrRuntime(grammar)
        self.tm = TokenMatrix.of(vocab)
        self.tables: dict[int, WalkTable] = dict(tables or {})  # by global lexer state
        self._views: dict[tuple[int, int], StateTable] = {}
        self._gaccept = global_accept(grammar.lexers, len(grammar.gfinal))
        # Equal crossing sets (Rests) of different global states are one object, with one set of
        # continuations (on json.lark the 18 lexer states that end a whitespace lexeme are crossed
        # by the same ~137k Gemma tokens).
        self._rests: dict[bytes, Rests] = {}
        self._local: dict[int, np.ndarray] = {}
        self._gt256: np.ndarray | None = None  # scaled(gtrans), for continuations
        self._succ: dict[int, np.ndarray] = {}  # start_successors per lexer
        self._masks: OrderedDict[CfgState, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._eos = self.tm.eos_bits()
        self._toks = vocab.tokens
        self._byte_classes: np.ndarray | None = None
        self._class_reps: list[tuple[int, int]] | None = None  # (representative byte, class size)
        self._forced: dict[tuple[Hashable, int], bytes] = {}
        self._walk_memo: dict = {}  # walk_live's shared first-byte buckets (dropped once every table is built)
        self._by_row: dict[tuple[bytes, bool], WalkTable] = {}  # likewise: tables by (transition row, final)

    # -- protocol
    def start(self) -> CfgState:
        return ((self.grammar.start_state,), 0)

    def advance(self, state: Hashable, token: int) -> CfgState | None:
        if not 0 <= token < self.tm.size or not self.tm.valid[token]:
            return None
        stack, d = state  # type: ignore[misc]
        nxt = self.rt.walk(stack, d, self._toks[token])
        if nxt is None or not self.rt.viable(nxt):
            return None
        return nxt

    def is_accepting(self, state: Hashable) -> bool:
        return self.rt.is_accepting(state)  # type: ignore[arg-type]

    def byte_classes(self) -> np.ndarray:
        """[256] class id per byte: bytes of one class drive every lexer identically, so a
        single-byte token of either leads to the same state (``Budgeted``'s search uses one)."""
        if self._byte_classes is None:
            self._byte_classes = byte_classes(self.grammar.gtrans)
        return self._byte_classes

    def completion_hint(self, state: Hashable) -> int:
        """Parser stack depth: it falls as open structures close, so ``Budgeted``'s completion
        search expands shallow states first."""
        return len(state[0])  # type: ignore[index]

    def fill_mask(self, state: Hashable, out: Tensor) -> None:
        out.copy_(torch.from_numpy(self.mask_array(state)))

    # -- masks
    def walk(self, g: int) -> WalkTable:
        """The vocabulary walk of global lexer state ``g`` (built on first use, ~15 ms at 262k)."""
        w = self.tables.get(g)
        if w is None:
            gtrans, gfinal = self.grammar.gtrans, self.grammar.gfinal
            # A walk depends on the state only through its transition row and finality, and
            # states of different lexers often agree on both (json.lark: 123 states, 79 rows):
            # one table for each, shared (also in the pickle).
            key = (gtrans[g].tobytes(), bool(gfinal[g]))
            w = self._by_row.get(key)
            if w is None:
                w = self._by_row[key] = walk_table(gtrans, gfinal, self._gaccept, g, self.tm, self._rests,
                                                   self._walk_memo)
            self.tables[g] = w
            if len(self.tables) == len(gfinal):
                self._walk_memo.clear()
                self._by_row.clear()
        return w

    def table(self, lexer_id: int, d: int) -> StateTable:
        """The vocabulary table of lexer state ``d`` of lexer ``lexer_id`` (built on first use)."""
        key = (lexer_id, d)
        t = self._views.get(key)
        if t is None:
            lex = self.grammar.lexers[lexer_id]
            t = self._views[key] = state_table(lex, d, self.walk(int(lex.glob[d])), self._local_of(lexer_id),
                                               self.rt.vclass(lexer_id))
        return t

    def mask_array(self, state: Hashable) -> np.ndarray:
        """[W] int32 packed mask row of ``state`` (cached: do not modify)."""
        m = self._masks.get(state)  # type: ignore[arg-type]
        if m is not None:
            self._masks.move_to_end(state)  # type: ignore[arg-type]
            return m
        m = self._token_mask(state)  # type: ignore[arg-type]
        if self.rt.is_accepting(state):  # type: ignore[arg-type]
            m = m | self._eos
        self._masks[state] = m  # type: ignore[index]
        if len(self._masks) > self._cache_size:
            self._masks.popitem(last=False)
        return m

    def _token_mask(self, state: CfgState) -> np.ndarray:
        stack, d = state
        rt = self.rt
        lid = self.grammar.lexer_of[stack[-1]]
        lex = self.grammar.lexers[lid]
        tab = self.table(lid, d)
        m = np.zeros(self.tm.words, dtype=np.int32)
        for u, words, vals in tab.inside:
            if rt.viable((stack, u)):
                m[words] |= vals  # words are distinct: a fancy in-place OR is exact
        if tab.group0 is not None:
            s2 = rt.after_lexeme(stack, int(lex.accept[d]))
            if s2 is not None:
                m |= tab.group0 & self._token_mask_cached((s2, 0))
        extra: list[np.ndarray] = []
        rows: list[np.ndarray] = []
        self._crossing(stack, tab, extra, rows)
        if extra:
            words, vals = self.tm.sparse_ids(np.concatenate(extra))
            m[words] |= vals
        for r in rows:
            m |= r
        return m

    def _crossing(self, stack: Stack, tab: StateTable | Continuation, out: list[np.ndarray],
                  rows: list[np.ndarray]) -> None:
        """Append to ``out`` the ids of ``tab``'s boundary-crossing tokens allowed on ``stack``
        (to ``rows`` the groups kept packed, ``Continuation.packed``).

        Each crossing is one vectorised walk of the tokens' rests from the next lexer's start
        state (cached per (rests, lexer)); tokens that cross again recurse on the new stack.
        """
        rt = self.rt
        for term, rests in tab.cross.items():
            s2 = rt.after_lexeme(stack, term)
            if s2 is None:
                continue
            lid2 = self.grammar.lexer_of[s2[-1]]
            cont = rests.after.get(lid2)
            if cont is None:
                cont = rests.after[lid2] = self._continuation(rests, lid2)
            for (u, group), row in zip(cont.groups, cont.packed):  # type: ignore[arg-type]
                if rt.viable((s2, u)):
                    if row is None:
                        out.append(group)
                    else:
                        rows.append(row)
            if cont.cross:
                self._crossing(s2, cont, out, rows)

    def _continuation(self, rests: Rests, lid: int) -> Continuation:
        """``rests`` walked from lexer ``lid``'s start, in its state numbering."""
        gc = self._global_continuation(rests, lid)
        local, vc = self._local_of(lid), self.rt.vclass(lid)
        by_class: dict[int, list[np.ndarray]] = {}  # one viability question per class, one array
        for u, ids in gc.groups:
            by_class.setdefault(vc[int(local[u])], []).append(ids)
        groups = [(u, a[0] if len(a) == 1 else np.concatenate(a)) for u, a in by_class.items()]
        packed = [self.tm.pack_ids(ids) if len(ids) > self.tm.words // 2 else None for _, ids in groups]
        return Continuation(groups, gc.cross, packed)

    def _global_continuation(self, rests: Rests, lid: int) -> Continuation:
        """``rests`` walked from lexer ``lid``'s start, in global states: shared by every lexer
        whose start enters the same global states on the rests' first bytes (python_call.lark:
        5 lexers, ~94k Gemma rests after a space, one walk)."""
        succ = self._succ.get(lid)
        if succ is None:
            succ = self._succ[lid] = start_successors(self.grammar.lexers[lid])
        key = succ[rests.firsts()].tobytes()
        gc = rests.by_start.get(key)
        if gc is None:
            if self._gt256 is None:
                self._gt256 = scaled(self.grammar.gtrans)
            gc = rests.by_start[key] = continuation(rests, succ, self.tm, self._gt256, self._gaccept, self._rests)
        return gc

    def precompute_continuations(self) -> None:
        """Walk, now, every crossing set's rests from every lexer that can follow its terminal, so
        that no first visit pays a continuation walk (they were most of the p99 mask time: ~20 ms
        for the ~137k Gemma tokens that begin with a space, 0.3 ms per level of "((((").

        The lexer after terminal ``T`` is that of a state ``T`` shifts into (any stack: a superset
        of the lexers a real stack can reach); after an ``%ignore``d terminal it is the same lexer.
        Needs every walk table (``precompute_tables``); results land in ``Rests.by_start``."""
        g = self.grammar
        follow: dict[int, set[int]] = {}
        for acts in g.actions:
            for t, a in acts.items():
                if a >= 0:
                    follow.setdefault(t, set()).add(g.lexer_of[a])
        todo = [(r, t, lid) for lid, lex in enumerate(g.lexers) for gs in sorted(set(lex.glob.tolist()))
                for t, r in self.walk(gs).cross.items()]
        done: set[tuple[int, int]] = set()
        while todo:
            r, t, lid = todo.pop()
            for lid2 in ((lid,) if t in g.ignore else sorted(follow.get(t, ()))):
                if (id(r), lid2) in done:
                    continue
                done.add((id(r), lid2))
                todo.extend((r2, t2, lid2) for t2, r2 in self._global_continuation(r, lid2).cross.items())
        for r in self._rests.values():
            r.walked.clear()  # bucket walks: only needed to build more continuations

    def _local_of(self, lexer_id: int) -> np.ndarray:
        """[G] global -> lexer ``lexer_id``'s state (-1: not one of its states)."""
        local = self._local.get(lexer_id)
        if local is None:
            lex = self.grammar.lexers[lexer_id]
            local = np.full(len(self.grammar.gfinal), -1, dtype=np.int32)
            local[lex.glob] = np.arange(len(lex.glob), dtype=np.int32)
            self._local[lexer_id] = local
        return local

    def _token_mask_cached(self, state: CfgState) -> np.ndarray:
        key = ("after", state)
        m = self._masks.get(key)  # type: ignore[arg-type]
        if m is None:
            m = self._token_mask(state)
            self._masks[key] = m  # type: ignore[index]
            if len(self._masks) > self._cache_size:
                self._masks.popitem(last=False)
        return m

    # -- jump-forward
    def forced_bytes(self, state: Hashable, limit: int = 256) -> bytes:
        """The bytes every completion of ``state`` starts with (stops where EOS is possible)."""
        key = (state, limit)
        hit = self._forced.get(key)
        if hit is not None:
            return hit
        if self._class_reps is None:
            cls = self.byte_classes()
            members: dict[int, list[int]] = {}
            for b in range(256):
                members.setdefault(int(cls[b]), []).append(b)
            # One byte per class decides for the class; a viable class of several bytes is a choice.
            self._class_reps = [(m[0], len(m)) for m in members.values()]
        out = bytearray()
        st: CfgState = state  # type: ignore[assignment]
        while len(out) < limit and not self.rt.is_accepting(st):
            only: tuple[int, CfgState] | None = None
            for b, size in self._class_reps:
                nxt = self.rt.walk(st[0], st[1], bytes((b,)))
                if nxt is not None and self.rt.viable(nxt):
                    if only is not None or size > 1:
                        only = None
                        break
                    only = (b, nxt)
            if only is None:
                break
            out.append(only[0])
            st = only[1]
        if len(self._forced) > 65536:  # states are many in long runs; forced runs are cheap to redo
            self._forced.clear()
        self._forced[key] = res = bytes(out)
        return res

    def forced_tokens(self, state: Hashable) -> list[int]:
        """Canonical tokens of the forced continuation: greedy longest-token, each one allowed."""
        return self.tm.tokenize_forced(self.forced_bytes(state), self.advance, state)

    def __repr__(self) -> str:
        return (f"CFGConstraint({self.grammar.source}, parser_states={len(self.grammar.actions)}, "
                f"lexers={len(self.grammar.lexers)}, vocab={self.tm.size})")
