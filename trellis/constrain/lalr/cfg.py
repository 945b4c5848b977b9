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

from collections import OrderedDict
from typing import Hashable

import numpy as np
from torch import Tensor

from trellis.mask import write_row
from trellis.constrain.lalr.lalr_runtime import (TOP_DECODE, TOP_DEPTHS, VIABILITY_DEPTH, VIABILITY_TOP, CfgState,
                                            LalrRuntime, Stack)
from trellis.constrain.errors import lark_error
from trellis.constrain.lalr.lalr_runtime import GrammarTables
from trellis.constrain.lalr.lalr_tables import TOP_TABLE_BUDGET, build_top_table, compile_lark
from trellis.constrain.automata.dfa_minimise import byte_classes
from trellis.constrain.lalr.lexer import global_accept
from trellis.constrain.lalr.lalr_walks import (Continuation, Rests, StateTable, WalkTable, continuation, start_successors,
                                          state_table, walk_table)
from trellis.constrain.vocab.walks import TokenMatrix, scaled
from trellis.tokens import Vocabulary


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
        write_row(out, self.mask_array(state))

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


# this module's constraint and the re-exported names of lalr_tables.py and lalr_runtime.py
__all__ = ["TOP_DECODE", "TOP_DEPTHS", "TOP_TABLE_BUDGET", "VIABILITY_DEPTH", "VIABILITY_TOP", "CFGConstraint",
           "CfgState", "GrammarTables", "LalrRuntime", "Stack", "build_top_table", "compile_lark", "lark_error"]
