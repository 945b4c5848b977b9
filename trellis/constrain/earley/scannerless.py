"""Exact token masks for any context-free grammar: the scannerless Earley constraint.

Semantics
---------
The language of a grammar is the language of its CFG with every terminal expanded to its regular
language (a terminal is a set of byte strings), with any number of ``%ignore`` terminals allowed
before, between and after terminals. For a GBNF grammar that is what llama.cpp and XGrammar
accept. For a Lark grammar it is what Lark's Earley parser accepts with
``lexer="dynamic_complete"``, except where Lark's regex-based terminal matcher finds fewer
matches than the terminal's language has (pinned in ``tests/constrain/test_lark_oracle.py``):

1. Lark takes the match ``re.match`` returns at a position and shorter cuts of it, never a longer
   alternative: with ``X: /a|ab/`` Lark never reads ``ab`` as one ``X``; trellis does.
2. Lark matches an ``%ignore`` terminal once, greedily: with ``%ignore /[ ]+/`` before a terminal
   that starts with a space, Lark can reject text that trellis accepts.
3. Lazy quantifiers are the exception that is honoured: a terminal with one means its first-match
   language ``{w : re.match(T, w) matches all of w}``, exactly the tokens Lark finds
   (``regex.terminal_parts``, ``lookaround.automaton(ordered=True)``): ``C_COMMENT`` ends at its
   first ``*/``, Lark's own ``REGEXP`` keeps its flags. A lazy regex with a repeat whose body can
   match the empty string is refused by name.

Terminal regexes mean what Python's ``re`` means, read by ``re``'s own parser
(``regex_compile.py``): Unicode ``\\w \\d \\s``, flags ``i`` (with ``re``'s folds: Kelvin sign, long s)
``s`` ``x`` ``m`` ``u`` ``a``. A lookaround inside a terminal is compiled exactly when it sees only
the terminal's own text (``lookaround.py``: ``(\\*(?!\\/)|[^*])*`` in a block comment); a lookahead
that sees ONE character past the terminal (lark.lark's ``/[+*]|[?](?![a-z])/``) sees the
document, as Lark's ``re.match(text, pos)`` does: the terminal ends there under a follow guard
that restricts the first character of whatever starts after it, ``%ignore`` text included
(``earley.Earley._guarded``). Lookarounds that see further, anchors, backreferences and
``%declare``d terminals are refused with ``GrammarError``. No lexer is involved, so colliding
terminals (keyword vs identifier), ambiguous, non-LALR, left- and right-recursive grammars and
empty rules all mean what they say. Terminal priorities choose between parse trees in Lark and do
not change its language; they are ignored, except in grammars generated from JSON Schemas
(``GrammarIR.lexical_priority``: there a contextual lexer's priority rule is part of the meaning).

Token elements (``terminal_kinds.py``: xgrammar's ``Token``, llama.cpp's ``<[id]>``) are terminals
matched by token id: their scans take no byte, a mask adds their ids where one is expected, and
``advance`` unions a token's reading as text with its readings as the elements expected. A token is
read whole, as text or as one element ("prefix" below: of a token sequence).

Exactness
---------
``fill_mask(state)`` allows exactly the tokens ``t`` such that ``text + bytes(t)`` is a prefix of a
sentence, and EOS exactly when ``text`` is a sentence. A token is allowed iff the Earley chart
(``earley.py``) stepped over its bytes is not empty: with a productive grammar and trimmed DFAs a
non-empty chart is a viable prefix (correct-prefix property), so no look-ahead is needed.

How a mask is computed
----------------------
A chart state is a set of scans ``(t, q, E)``. A token is allowed iff for some scan either
(a) terminal ``t``'s DFA survives the whole token from ``q`` (context-free: one vocabulary walk per
DFA state, ``rest_walk.walk``, kept as a packed bitset and shared across grammars and runs by the
shape of the sub-automaton, ``walk_cache.py``, and by the bytes that may follow the terminal unless
its accepting states are dead ends; a terminal cut by lexical priority patches its terminal's walk,
``cut_walk.py``; a length-bounded one's positions are read off one counting walk,
``counted_walk.py``), or (b) ``t`` can end after ``j`` of its bytes with a byte that may follow it
(FOLLOW sets) and the rest is allowed from the boundary after ``t``
completes at ``E``: the same question one level down on the set of leftovers (a ``RestSet``),
cached per (boundary state, rest set). Below ``SPLIT_DEPTH`` levels the leftovers are stepped
through the chart itself, grouped by chart state (``_chart_walk``). Only which scans a state has,
and which boundaries follow them, depend on the parse. Whole masks are kept in an LRU by state.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Hashable, Iterable

import numpy as np
from torch import Tensor

from trellis.mask import write_row
from trellis.constrain.vocab.cut_walk import Simulation, patch
from trellis.constrain.vocab.dfa_shapes import canonical
from trellis.constrain.earley.chart_kernel import grouped_walk, take_each
from trellis.constrain.earley.earley import ChartState, Earley
from trellis.constrain.earley.token_elements import advance_both, element_ids
from trellis.constrain.earley.work_bound import ADVANCE_WORK, MASK_WORK, bounded
from trellis.constrain.gc_pause import paused
from trellis.constrain.grammar.analysis import bits_to_bool, follow_bytes
from trellis.constrain.grammar.grammar_ir import GrammarIR
from trellis.constrain.vocab import counted_walk, vocab_walk
from trellis.constrain.automata.byte_dfa import literal_at
from trellis.constrain.vocab.literal_walk import literal_rests_fit, walk_literal_rests
from trellis.constrain.vocab.rest_walk import RestSet, Walk, walk
from trellis.constrain.vocab.walk_cache import SHARED, key_digest
from trellis.constrain.vocab.walks import TokenMatrix, sparse_words
from trellis.tokens import Vocabulary


class EarleyConstraint:
    """Token-level constraint of a ``GrammarIR`` over one vocabulary (module docstring).

    States are chart states ``(frozenset of scans, accepting)``: immutable and hashable, so beams,
    MCTS nodes and draft trees fork them for free. ``semantics`` names the language: ``"earley"``.
    """

    semantics = "earley"

    def __init__(self, ir: GrammarIR, vocab: Vocabulary, *, cache_size: int = 2048, share: bool = True,
                 mask_work: int | None = None, advance_work: int | None = None) -> None:
        self.vocab = vocab
        # work bounds (MASK_WORK, ADVANCE_WORK when None; earley.UNBOUNDED: none)
        self.mask_work = MASK_WORK if mask_work is None else mask_work
        self.advance_work = ADVANCE_WORK if advance_work is None else advance_work
        self.share = share  # vocabulary walks from / into the process and disk cache (walk_cache.py)
        self._vocab_fp = vocab.fingerprint()
        self.ir = ir
        self.earley = Earley(ir)
        self.tm = TokenMatrix.of(vocab)
        self._toks = tuple(vocab.tokens)  # (no copy when it is one)
        self._flat = np.ascontiguousarray(self.tm.mat_t).reshape(-1)  # (a view: mat_t is contiguous; take_rests)
        self._vocab_rests = RestSet.vocabulary(self.tm)
        self._dfa = self.earley.scan_dfa  # per scan id (grows as cut terminals are met)
        # Bytes that can start what follows each terminal (FOLLOW sets): a token split after a
        # terminal is only worth a walk when the rest starts with one of them. On csv.lark this
        # keeps ~1/200 of the splits of a field token (fields end only at , " \r \n).
        self._follow_bits = follow_bytes(ir)  # 256-bit ints, as arrays on first use (_follow)
        self._follow_of_term: dict[int, np.ndarray] = {}
        self._shapes: dict[tuple[int, int], Hashable] = {}
        self._inside: dict[Hashable, tuple[np.ndarray, Walk]] = {}  # shape -> packed, walk
        self._sims: dict[int, Simulation | None] = {}  # cut scan -> how it sits in its terminal
        self._cut_entries: dict[tuple[int, int], tuple[np.ndarray, Walk] | None] = {}
        self._counted: dict[tuple[int, int], tuple[np.ndarray, Walk] | None] = {}  # (scan, q) -> walk
        self._chains: dict[int, counted_walk.Chain | None] = {}  # terminal -> its counting form (counted_walk.chain_of)
        self._rows: dict[tuple[int, int], list] = {}  # (scan, q) -> ``_row_of``
        self._walks: dict[tuple[Hashable, int], Walk] = {}  # (shape, id(rests)) -> walk
        self._keep: list[RestSet] = []  # rest sets whose id() keys ``_walks`` stay alive
        self._allowed: dict[tuple[ChartState, int], np.ndarray] = {}
        self._allowed_bytes = 0
        self._masks: OrderedDict[ChartState, np.ndarray] = OrderedDict()
        self._advance: dict[tuple[ChartState, int], ChartState | None] = {}
        self._memo_scans = {"advance": 0, "group": 0, "live": 0}  # scans each state memo holds
        self._cache_size = cache_size
        self._eos = self.tm.eos_bits()
        # Token elements (``terminal_kinds.py``), by terminal: the ids each matches, [V] bool and packed
        self._token_ok, self._token_rows = element_ids(ir, self.tm, self._toks, vocab.special)
        self._group_memo: dict[ChartState, list] = {}
        self._live_memo: dict[ChartState, np.ndarray] = {}
        self._byte_classes: np.ndarray | None = None

    # -- protocol
    def start(self) -> ChartState:
        return self.earley.start()

    def advance(self, state: Hashable, token: int) -> ChartState | None:
        key = (state, token)
        if (hit := self._advance.get(key, False)) is not False:
            return hit  # type: ignore[return-value]
        if not 0 <= token < self.tm.size or not (self._token_ok or self.tm.valid[token]):
            return None
        step, arg = (self._advance_both, token) if self._token_ok else (self.earley.walk, self._toks[token])
        with paused():
            nxt = bounded(self, "advance", state, step, arg)
        if len(self._advance) > 1 << 18 or self._over("advance", state, nxt):
            self._advance.clear()
        self._advance[key] = nxt
        return nxt

    def _advance_both(self, state: ChartState, token: int) -> ChartState | None:
        return advance_both(self.earley, self._toks, self.tm.valid, self._token_ok, state, token)

    def token_ids(self, state: Hashable) -> np.ndarray | None:
        """[V] bool: the ids the token elements expected in ``state`` match (None: none is)."""
        term, ok = self.earley.scan_term, self._token_ok
        rows = [ok[term[d]] for d, _, _ in state[0] if term[d] in ok] if ok else []  # type: ignore[index]
        return np.logical_or.reduce(rows) if rows else None

    def is_accepting(self, state: Hashable) -> bool:
        return bool(state[1])  # type: ignore[index]

    def fill_mask(self, state: Hashable, out: Tensor) -> None:
        write_row(out, self.mask_array(state))

    def mask_array(self, state: Hashable) -> np.ndarray:
        """[W] int32 packed mask row of ``state`` (cached: do not modify)."""
        m = self._masks.get(state)  # type: ignore[arg-type]
        if m is not None:
            self._masks.move_to_end(state)  # type: ignore[arg-type]
            return m
        with paused():
            m = bounded(self, "mask", state, self._token_mask)
        if state[1]:  # type: ignore[index]
            m = m | self._eos
        self._masks[state] = m  # type: ignore[index]
        if len(self._masks) > self._cache_size:
            self._masks.popitem(last=False)
        return m

    # -- masks
    def _shape(self, d: int, q: int) -> Hashable:
        """What a walk from state ``q`` of scan ``d``'s DFA depends on: the sub-automaton reachable
        from ``q`` (canonically numbered, so equal shapes of different terminals share one walk:
        a schema's string fields are one string DFA under several terminal names) and the bytes
        that may follow the terminal. Sub-automata over ``CANON_MAX`` states are keyed by the DFA's
        content digest (``("dfa", digest, q)``): shared with DFAs of the very same tables."""
        key = (d, q)
        hit = self._shapes.get(key)
        if hit is None:
            # A sub-automaton whose accepting states are dead ends (a JSON string ends at its
            # closing quote) crosses at most once per token, so it is walked with no follow set,
            # keyed without one, and filtered here (``_by_follow``): a string's walks are shared
            # by every context it appears in (objects, arrays, each schema's set of followers).
            # A state few tokens start from is keyed by its DFA's digest (``vocab_walk.narrow``).
            dfa = self._dfa[d]
            narrow = NARROW_WALKS and vocab_walk.narrow(dfa, q, self.tm)
            canon, free = (vocab_walk.narrow_key(dfa, q), vocab_walk.ends_dead(dfa)) if narrow else \
                canonical(dfa, q, self.tm.mat_t.shape[0])
            hit = self._shapes[key] = (canon, b"" if free else self._follow(d).tobytes())
        return hit

    def _by_follow(self, d: int, shape: Hashable, w: Walk) -> Walk:
        """``w`` keeping the crossings whose leftover starts with a byte that may follow scan
        ``d``'s terminal, where ``shape`` was walked with no follow set (``_shape``)."""
        if shape[1] or w.cross is None:
            return w
        first = w.cross.__dict__.get("_first")
        if first is None:
            first = w.cross.__dict__["_first"] = self.tm.mat_t.reshape(-1)[w.cross.base]
        keep = self._follow(d)[first[w.inv]]
        if keep.all():
            return w
        return Walk(w.inside, w.cross if keep.any() else None, w.src[keep], w.inv[keep])

    def _entry_key(self, d: int, shape: Hashable) -> Hashable:
        """What scan ``d``'s walk entry depends on: its shape, with its followers where the walk
        itself was keyed without them (``_by_follow`` filters by them)."""
        return shape if shape[1] else (shape[0], self._follow(d).tobytes())

    def _follow(self, d: int) -> np.ndarray:
        """[256] bool: the bytes that can start what follows scan ``d``'s terminal."""
        t = self.earley.scan_term[d]
        hit = self._follow_of_term.get(t)
        if hit is None:
            hit = self._follow_of_term[t] = bits_to_bool(self._follow_bits[t])
        return hit

    def _inside_of(self, d: int, q: int) -> tuple[np.ndarray, Walk]:
        """Packed tokens that stay inside DFA ``d`` from ``q``, and the vocabulary walk."""
        t = self.earley.scan_term[d]
        if self._dfa[d] is not self.ir.terminals[t].dfa:  # a cut of terminal t (cut_walk.py)
            hit = self._cut_inside(d, q, t)
            if hit is not None:
                return hit
        elif self.share and (hit := self._counted_inside(d, q, t)) is not None:  # (shared, like walks)
            return hit
        key = self._shape(d, q)
        ekey = self._entry_key(d, key)
        hit = self._inside.get(ekey)
        if hit is None:
            dfa = self._dfa[d]
            follow = self._follow(d) if key[1] else None

            def build() -> tuple[np.ndarray, Walk]:
                return vocab_walk.walk(dfa, q, self.tm, follow, key)

            shared = self.share
            # A literal's walk (two bisects per prefix) and a narrow one are never slow enough to
            # be persisted (walk_cache.PERSIST_MIN_S), so they are not looked up on disk either.
            hit = SHARED.get(self._vocab_fp, key, build, disk=key[0][0] not in ("lit", "narrow")) if shared else build()
            if hit[1].cross is not None:
                self._keep.append(hit[1].cross)
            hit = self._inside[ekey] = (hit[0], self._by_follow(d, key, hit[1]))
        return hit

    def _counted_inside(self, d: int, q: int, t: int) -> tuple[np.ndarray, Walk] | None:
        """``_inside_of`` at a position inside a length-bounded terminal (``counted_walk.py``), else None."""
        ch = self._chains.get(t, False)
        if ch is False:  # per terminal, not per (scan, state): most terminals have no chain
            term = self.ir.terminals[t]
            ch = self._chains[t] = counted_walk.chain_of(term.dfa, term.pattern) if term.token is None else None
        if ch is None:
            return None
        hit = self._counted.get((d, q), False)
        if hit is False:
            hit = self._counted[(d, q)] = counted_walk.walk(ch, q, self.tm)
            if hit is not None:  # a chain ends at its closing quote: crossings filtered by the followers
                self._keep += [hit[1].cross] if hit[1].cross is not None else []
                hit = self._counted[(d, q)] = (hit[0], self._by_follow(d, (None, b""), hit[1]))
        return hit

    def _cut_inside(self, d: int, q: int, t: int) -> tuple[np.ndarray, Walk] | None:
        """``_inside_of`` for a scan whose DFA was cut from terminal ``t``'s, patched from the
        terminal's own (shared) walk; None where ``cut_walk.patch`` declines."""
        key = (d, q)
        if key in self._cut_entries:
            return self._cut_entries[key]
        sim = self._sims.get(d, False)
        if sim is False:
            sim = self._sims[d] = Simulation.of(self._dfa[d], self.ir.terminals[t].dfa)
        hit = None
        if sim is not None:
            # t is also the scan id of the uncut terminal (Earley numbers those first)
            hit = patch(sim, q, self._inside_of(t, int(sim.origin[q])), self.tm, self._follow(d))
        self._cut_entries[key] = hit
        return hit

    def _walk(self, d: int, q: int, rs: RestSet) -> Walk:
        """DFA ``d`` from ``q`` over the leftovers ``rs``. Where ``rs`` has a shareable key (it was
        split off the vocabulary by shared walks), the walk is shared like a vocabulary walk, keyed
        by both shapes: the leftovers of ``%ignore WS`` followed by a NAME are the same in every
        grammar (~94k space-led Gemma tokens, 2-3 ms a walk)."""
        shape = self._shape(d, q)
        key = (self._entry_key(d, shape), id(rs))
        w = self._walks.get(key)
        self.earley.charge(1 + (len(rs) >> 6))  # (the walk, or its memo hit and the marks after it)
        if w is None:
            dfa = self._dfa[d]
            follow = self._follow(d) if shape[1] else None
            lit = literal_at(dfa, q)
            if lit is not None and literal_rests_fit(lit, rs):  # a few rests: in Python, by prefix
                tag, make = "xl", lambda: walk_literal_rests(lit, rs, self.tm, follow)
            else:
                tag, make = "x", lambda: walk(dfa.trans, dfa.final, q, rs, self.tm, follow)
            if self.share and rs.key is not None:
                # A literal's walk is shared too (never persisted: it is cheap): a schema's string
                # values all close into the same ~680 rests (a quote, then more) and meet the same
                # "," "}" "]" after them, walked again per schema (~0.15 ms a document, 50 median
                # maskbench schemas). The method is in the key: each orders its leftovers its way.
                skey = (tag, rs.key, shape)
                w = SHARED.get(self._vocab_fp, skey, lambda: (_NOTHING, make()),
                               disk=tag == "x" and len(rs) >= WALK_DISK_MIN)[1]
                if w.cross is not None and w.cross.key is None:
                    w.cross.key = key_digest(skey)
            else:
                w = make()
            if w.cross is not None:
                self._keep.append(w.cross)
            w = self._walks[key] = self._by_follow(d, shape, w)
        return w

    def _groups(self, state: ChartState) -> list[tuple[int, int, int, list]]:
        """The scans of ``state`` by (scan id, DFA state): [(t, q, first-byte bits, [E...])]."""
        hit = self._group_memo.get(state)
        if hit is None:
            groups: dict[tuple[int, int], list] = {}
            for t, q, e in state[0]:
                groups.setdefault((t, q), []).append(e)
            hit = [(t, q, self.earley.live_bits(t, q), es) for (t, q), es in groups.items()]
            if len(self._group_memo) > 1 << 16 or self._over("group", state):
                self._group_memo.clear()
            self._group_memo[state] = hit
        return hit

    def _token_mask(self, state: ChartState) -> np.ndarray:
        # The first row's packed walk is the mask until something is added to it (copy on
        # write: the walk caches share that array, it must never change).
        m: np.ndarray | None = None
        owned = False
        tid = self._vocab_rests.tid
        tokens, term = self._token_rows, self.earley.scan_term
        # A state masked here is new (the mask cache missed): its scans are read in order, not as
        # ``_groups`` (a memo entry, live bits, accounting for one pass: mask time x0.93 per schema,
        # x0.97 per corpus document, in-process A/B in benchmarks/README.md's bench_fresh section).
        # A C state's scans are sorted, so a DFA state's row is OR-ed once (the tuple form may
        # repeat one: an OR of bits already set).
        last = None
        for t, q, e in state[0]:  # type: ignore[index]
            if (t, q) != last:
                last = (t, q)
                if tokens and term[t] in tokens:  # a token element: its ids, whole tokens only
                    row = [tokens[term[t]], None, None]
                else:
                    row = self._row_of(t, q) if SPARSE_ROWS else [*self._inside_of(t, q), None]
                packed = row[0]
                if m is not None and row[2] is False:  # (the row's first OR into a mask)
                    row[2] = sparse_words(packed, SPARSE_WORDS)
                if m is None:
                    m = packed
                elif row[2] is not None:  # a few nonzero words (a key literal's tokens): OR-ed word by word
                    if not owned:
                        m, owned = m.copy(), True
                    m[row[2][0]] |= row[2][1]
                elif owned:
                    m |= packed
                else:
                    m, owned = m | packed, True
            w = row[1]
            if w is not None and w.cross is not None:
                ok = self._rests_allowed(self.earley.boundary(e, t), w.cross)
                if len(ok):
                    if not owned:
                        m, owned = m.copy(), True
                    w.mark_sources(ok, m, tid)
        return np.zeros(self.tm.words, dtype=np.int32) if m is None else m

    def _row_of(self, t: int, q: int) -> list:
        """[packed, walk, words]: ``_inside_of(t, q)`` memoised per scan state (its lookups ran per
        DFA state per mask); words: ``sparse_words`` of the row once a mask ORs it in (False before)."""
        hit = self._rows.get((t, q))
        if hit is None:
            hit = self._rows[(t, q)] = [*self._inside_of(t, q), False]
        return hit

    def _rests_allowed(self, state: ChartState, rs: RestSet, depth: int = 1) -> np.ndarray:
        """Sorted indices of the rests of ``rs`` that the chart ``state`` can take whole (cached
        per state, as indices: usually a few of thousands; the cache is bounded in bytes).

        Rests are split per scan (context-free walks, cached per sub-automaton and rest set) down
        to ``SPLIT_DEPTH`` terminals; the leftovers beyond are stepped through the chart itself
        (``_chart_walk``), so grammars whose terminals can abut (every split of a word into
        words) cost a chart step per byte instead of a rest set per way of splitting. Sets of at
        most ``CHART_WALK_SMALL`` rests are stepped through the chart at any depth in grammars
        without ``%ignore`` terminals (a JSON Schema's), of at most ``CHART_FIRST_IGNORE`` in
        grammars with them."""
        key = (state, id(rs))
        hit = self._allowed.get(key)
        if hit is not None:
            return hit
        if self._chart_first(rs):
            res = self._chart_walk_small(state, rs)
        else:
            ok = np.zeros(len(rs), dtype=bool)
            firsts = rs.firsts
            for t, q, bits, es in self._groups(state):
                if not bits & firsts:
                    continue
                w = self._walk(t, q, rs)
                ok |= w.inside
                if w.cross is None:
                    continue
                for e in es:
                    a = self.earley.boundary(e, t)
                    if depth < SPLIT_DEPTH:
                        sub = self._rests_allowed(a, w.cross, depth + 1)
                    else:
                        sub = self._chart_walk(a, w.cross)
                    if len(sub):
                        w.mark_sources(sub, ok)
            res = np.flatnonzero(ok)
        size = res.nbytes + 100 + 100 * len(state[0])  # the key's state is kept alive too
        self._allowed_bytes += size
        if self._allowed_bytes > ALLOWED_CACHE_BYTES:
            self._allowed.clear()
            self._allowed_bytes = size
        self._allowed[key] = res
        return res

    def _chart_first(self, rs: RestSet) -> bool:
        """Whether ``_rests_allowed`` steps ``rs`` through the chart at once: a few rests' bytes
        stepped through the chart (memoised per state and byte) cost less than a walk per scan
        of the state, each with its crossings and the boundaries they reach (a key position
        expects a literal per remaining key); ``CHART_WALK_SMALL``, ``CHART_FIRST_IGNORE``."""
        return len(rs) <= (CHART_FIRST_IGNORE if self.earley.ignore_scans else CHART_WALK_SMALL)

    def _chart_walk(self, state: ChartState, rs: RestSet) -> np.ndarray:
        """Sorted indices of the rests of ``rs`` whose bytes the chart takes from ``state``.

        Rests are stepped a byte at a time, grouped by chart state: rests that reach equal states
        share every later step, each (state, byte) pair one memoised ``Earley.step``. Where
        ``_statec`` is built, and for small sets, ``_chart_walk_small`` does it (this: ~15 numpy calls a byte)."""
        if len(rs) <= CHART_WALK_SMALL or (CHART_WALK_C and self.earley._native_take_rests is not None):
            return self._chart_walk_small(state, rs)
        return grouped_walk(state, rs, self._live(state), self.tm.mat_t, self.earley.step, self.earley.charge,
                            self._take, CHART_GROUP_SMALL)

    def _chart_walk_small(self, state: ChartState, rs: RestSet) -> np.ndarray:
        """``_chart_walk`` one rest at a time (in C: the rests grouped by chart state, over the
        set's own arrays: ``Earley.take_rests``)."""
        if CHART_WALK_C:
            taken = self.earley.take_rests(state, rs.base, rs.length, self._flat, self.tm.mat_t.shape[1])
            if taken is not None:
                return taken
        return np.array(self._take(state, range(len(rs)), rs.tid.tolist(), rs.length.tolist(), [0] * len(rs)), np.int64)

    def _take(self, state: ChartState, idx: Iterable[int], tids: list[int], lengths: list[int],
              done: list[int]) -> list[int]:
        """``chart_kernel.take_each`` from ``state`` (the form without ``_statec``)."""
        return take_each(self.earley.walk, self._toks, state, idx, tids, lengths, done)

    def _over(self, memo: str, *states: ChartState | None) -> bool:
        """Count ``states``' scans against ``memo``'s share of ``MEMO_SCANS``; True (and the count
        restarts) when the memo should be cleared before it takes them. The memos are bounded
        by entries too, but one state of an ambiguous grammar holds hundreds of scans."""
        k = sum(len(s[0]) for s in states if s is not None)
        over = self._memo_scans[memo] + k > MEMO_SCANS
        self._memo_scans[memo] = k if over else self._memo_scans[memo] + k
        return over

    def _live(self, state: ChartState) -> np.ndarray:
        """[256] bool: the bytes the chart takes from ``state`` (cached)."""
        hit = self._live_memo.get(state)
        if hit is None:
            if len(self._live_memo) > 1 << 16 or self._over("live", state):
                self._live_memo.clear()
            hit = self._live_memo[state] = self.earley.live_bytes(state)
        return hit

    # -- helpers the strategies use
    def byte_classes(self) -> np.ndarray:
        """[256] class id per byte: bytes on which every terminal DFA agrees everywhere (the DFAs
        that lexical priority cuts out of them are products of these, so they agree too)."""
        if self._byte_classes is None:
            from trellis.constrain.automata.dfa_minimise import byte_classes

            mats = [t.dfa.trans for t in self.ir.terminals] or [np.full((1, 256), -1, dtype=np.int32)]
            self._byte_classes = byte_classes(np.vstack(mats))
        return self._byte_classes

    def completion_hint(self, state: Hashable) -> int:
        """Fewer open scans first: a rough distance to completion for ``Budgeted``'s search."""
        return len(state[0])  # type: ignore[index]

    def forced_bytes(self, state: Hashable, limit: int = 256) -> bytes:
        """The bytes every completion of ``state`` starts with (stops where EOS is possible)."""
        out = bytearray()
        st: ChartState = state  # type: ignore[assignment]
        while len(out) < limit and not st[1]:
            if self._token_ok and any(self.earley.scan_term[d] in self._token_ok for d, _, _ in st[0]):
                break  # a token element may come next: no byte is forced (a presence test, not token_ids' OR)
            live = np.flatnonzero(self._live(st))
            if len(live) != 1:
                break
            b = int(live[0])
            nxt = self.earley.step(st, b)
            if nxt is None:
                break
            out.append(b)
            st = nxt
        return bytes(out)

    def forced_tokens(self, state: Hashable) -> list[int]:
        """Canonical tokens of the forced continuation: greedy longest-token, each one allowed."""
        return self.tm.tokenize_forced(self.forced_bytes(state), self.advance, state)

    def __repr__(self) -> str:
        return (f"EarleyConstraint({self.ir.source}, rules={len(self.ir.rules)}, "
                f"terminals={len(self.ir.terminals)}, vocab={self.tm.size})")


_NOTHING = np.zeros(0, dtype=np.int32)  # the packed part of a shared walk over leftovers (unused)

# A scan state's packed row with at most this many nonzero int32 words (of 8,192 on Gemma) is OR-ed
# into a mask word by word (``_row_of``): most rows a mask adds to its first are a key literal's
# few tokens. False: every row OR-ed whole and looked up per mask, as before (``benchmarks/
# ab_masks.py --switch sparse``).
SPARSE_ROWS = True
# A scan state few tokens start from keyed by its DFA's digest, not its canonical shape
# (``vocab_walk.narrow``); False: as every state (``benchmarks/ab_masks.py --switch narrow``).
NARROW_WALKS = True
SPARSE_WORDS = 256

# Bound on the per-constraint cache of answers for rest sets (indices): a random walk over Gemma's
# vocabulary on a corpus grammar grew the earlier unbounded bool arrays to 20 GB.
ALLOWED_CACHE_BYTES = 64 * 2**20
# Scans (~100 bytes each) that each memo keyed by chart states (advance, groups, live bytes) may
# hold: ~200 MB apiece whatever the size of the states (earley.STEP_CACHE_SCANS, same reason).
MEMO_SCANS = 1 << 21
# How many terminals a token may be split into by per-scan walks before its leftovers are stepped
# through the chart (``_rests_allowed``). Per-scan splitting reuses context-free walks (sql_select
# fresh masks: 1.8 s a document at depth unbounded vs 13 s all by chart steps), but on grammars
# whose terminals abut (Lark's composition_csv: WORD WORD) every level re-splits every suffix
# (20 GB at depth unbounded).
SPLIT_DEPTH = 2
# Rest sets up to this size are chart-walked rest by rest (``_chart_walk_small``): sql_select's
# 144-token document 333 -> 289 ms (min of 6, alternating; 0 vs 64, 1024 no better). Without %ignore
# at every depth (``_chart_first``): 50 median maskbench schemas, per-input (a) 0.944 (32: 0.953,
# 128: 0.935, 256: 0.948); with the C walks, 256/1024/16 were worse in sum (benchmarks/README.md).
CHART_WALK_SMALL = 64
# The same bound in grammars with %ignore (``_chart_first``): 64 since the C chart walks (ab_masks
# --grammars --set CHART_FIRST_IGNORE=64: 2,817 -> 2,688 ms, per-document median 1.017); every set
# first: 1,247 -> 10,828 ms (the %ignore scans stand in every state; their per-scan walks are shared).
CHART_FIRST_IGNORE = 64
# In the numpy grouped walk, a state left with at most this many rests finishes them one by one
# (``_take``): lark.lark's documents 2 and 8, 261 -> 230 and 722 -> 670 ms (0 vs 32; 128 no better).
CHART_GROUP_SMALL = 32
# Where ``_statec`` is built, a chart walk of any size is one C call over the rest set's arrays,
# grouped by chart state (``Earley.take_rests``): ab_masks --switch ctrie, 100 schemas' masks 1,142
# -> 989 ms, the grammars' 1,699 -> 1,625 ms, lark.lark's slowest ~2x, robotstxt.lark's 3x.
CHART_WALK_C = True
# Walks of fewer leftovers take well under ``walk_cache.PERSIST_MIN_S`` (sql_select's: 63 us on
# average), so they are neither written to disk nor looked up there (30 ms of 372 lookups, profiled).
WALK_DISK_MIN = 4096
