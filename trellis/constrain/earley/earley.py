"""A scannerless Earley recogniser over bytes: the parser of the constraint engine.

Earley, "An efficient context-free parsing algorithm" (CACM 1970), with the nullable-symbol
prediction of Aycock & Horspool, "Practical Earley Parsing" (Computer Journal 2002). Terminals are
not lexed: each is a trimmed byte DFA run *inside* the chart (the XGrammar / Lark
``lexer="dynamic_complete"`` semantics), so every way of splitting the text into terminals is
followed at once and no lexer has to guess where a lexeme ends.

Objects
-------
``ESet``: the Earley items of one terminal boundary, closed under prediction and completion,
  interned by kernel (so equal sets reached along different paths are one object). An item is
  ``(i, origin)``: LR(0) item ``i`` and the ``ESet`` it started in (``None`` in the kernel-less
  initial set means "this set"). The items a set predicts (origin "this set") depend only on
  which nonterminals it predicts: they are closed once and shared by every such set
  (``Predicted``, plain ints); a set holds its own items with origins (``waiting``/``expects``)
  and its ``Predicted`` (``static``).
A *chart state* is ``(scans, accepting)`` (``chart_state``: a C ``_statec.State``, or a tuple):
  ``scans`` a set of ``(t, q, E)``: terminal ``t`` is being scanned, its DFA is in state ``q``, it
  started at boundary ``E`` (whose items wait for it). Ignored terminals have their own scan ids ``>= M`` (``Earley.ignore_scans``); completing one
  restarts the scans of the boundary it began at, so ``%ignore`` text may stand between any two
  terminals, at the start and at the end. States are immutable and hashable.

Stepping a byte moves every scan's DFA; a scan whose DFA reaches an accepting state also completes
its terminal: the items waiting for it advance into a new ``ESet`` (all terminals completed at one
byte into one set, as in Earley's algorithm), whose expected terminals start new scans. Sets are
interned by their future (items still waiting, with origins), so equal boundaries reached along
different splits are one object. ``after(E, t)`` is the boundary of one scan alone (memoised per
``(E, t)``): the mask computation splits a state by scan, which is exact because the language after
a union of item sets is the union of the languages after each.

A terminal part with a follow guard (a trailing one-character lookahead, ``Terminal.guard``)
completes into a boundary whose scans, ``%ignore`` ones included, are replaced by copies whose
first character must pass the guard (``_guarded``: a scan id per (scan, guard), its DFA cut by
``regex.restrict_first_char``; a copy that keeps nothing is dropped), and which accepts only if
the guard lets the text end there. The guard thus sees exactly the next character of the text.

Because the grammar is productive and every DFA state can reach acceptance (``grammar_ir``), a
state with a scan (or accepting) is a viable prefix: Earley's correct-prefix property (a guarded
copy is kept only while its DFA still reaches acceptance, so this holds with guards too).
"""

from __future__ import annotations

from array import array
from typing import Iterable

import numpy as np

from trellis.constrain.automata.byte_dfa import ByteDFA, difference, intersects, one_byte_ending, restrict_first_char
from trellis.constrain.automata.charsets import cs_diff
from trellis.constrain.grammar.analysis import bits_to_bool, item_tables, state_bits
from trellis.constrain.grammar.grammar_ir import GrammarIR
from trellis.constrain.automata.lookaround import END_OF_TEXT, FollowGuard
from trellis.constrain.earley.chart_kernel import (ChartState, NativeState, agenda, chart_state, native_after,
                                                   native_close, native_close_kernel, native_next_kernel, native_step,
                                                   native_take_rests, native_walk, scan_tables)
from trellis.constrain.earley.chart_kernel import STATE_KERNEL, tuple_state  # noqa: F401 - read here by tests and docs

# Scans (~100 bytes each: a 3-tuple and its set slot) that the step memo may hold, keys and values
# summed: ~400 MB at most, whatever the size of the states.
STEP_CACHE_SCANS = 1 << 22
# Item sets made before the memos that link them are dropped (``Earley._forget``): every set
# memoises its successors (``ESet.after``), so all sets ever made stay reachable from the first
# one. ~2-4 KB a set: a few hundred MB at most (lark.lark grew 0.45 GB per 250 fuzz decodes).
MAX_SETS = 1 << 16
_MISS = object()  # not in a memo (``walk``)
_NO_ROOTS: frozenset = frozenset()  # the kernel items predicted "here" (origin None): none but the first set's

# Memoised prediction closures (``Earley._static``) before the memo is cleared: each is a few
# tuples of ints, bounded by the grammar's combinations of predicted nonterminals.
MAX_PREDICTED = 1 << 14

UNBOUNDED = 1 << 62


class WorkExhausted(Exception):
    """Raised inside the chart when ``Earley.work`` passes ``Earley.work_limit`` (``scannerless``
    turns it into a ``GrammarBudgetError`` naming the culprit)."""


class ESet:
    """The closed item set of one terminal boundary (see module docstring). ``waiting`` (by
    nonterminal) and ``expects`` (by terminal) list ``(item, origin set)`` of the items with an
    origin; the items predicted here are in ``static`` (a ``Predicted``)."""

    __slots__ = ("kernel", "waiting", "expects", "static", "accepting", "starts", "after")

    def __init__(self) -> None:
        self.after: dict[int, ESet] = {}


class Predicted:
    """The items a boundary predicts (all with origin "this set"), closed: ``waiting`` and
    ``expects`` list item numbers by symbol; ``content`` the items not yet complete. Plain ints
    only, shared by every ``ESet`` that predicts the same (``Earley._static``)."""

    __slots__ = ("waiting", "expects", "accepting", "content")

    def __init__(self, waiting: dict[int, tuple[int, ...]], expects: dict[int, tuple[int, ...]],
                 accepting: bool, content: frozenset) -> None:
        self.waiting, self.expects, self.accepting, self.content = waiting, expects, accepting, content


class Earley:
    """The recogniser of one ``GrammarIR`` (its tables; chart states are plain values)."""

    def __init__(self, ir: GrammarIR) -> None:
        self.ir = ir
        # One form of chart state for this recogniser's whole life (read once: a test can build one
        # of each), and the C step only over C states.
        self.make_state = chart_state
        native = chart_state is NativeState
        self._native_step, self._native_close, self._native_walk, self._native_take_rests, self._native_after, \
            self._native_close_kernel, self._native_next_kernel = (
                (native_step, native_close, native_walk, native_take_rests, native_after, native_close_kernel,
                 native_next_kernel) if native else (None,) * 7)
        m = len(ir.terminals)
        # LR(0) items numbered rule by rule: item i + 1 is item i with the dot one symbol on; the
        # augmented rule start -> <start> completes after one symbol (accept_item). The same
        # tables as C arrays for ``_statec.close`` (next_sym's None as INT32_MIN).
        self.next_sym, self.lhs, self.predict, self.accept_item, self._next_sym_c, self._lhs_c = item_tables(
            ir.rules, len(ir.nonterminals), ir.start)
        self.nullable = ir.nullable
        self._nullable_c = bytes(bool(x) for x in self.nullable)
        # Scans run DFAs by scan id: 0..m-1 the terminals, m.. the %ignore terminals, then the
        # terminals cut by higher-priority ones expected beside them (``lexical_priority``),
        # added as they are met. Tables are flat ``array``s and ``bytes`` (``scan_tables``): an
        # index per byte from Python, not numpy's per-call overhead, and nothing for the collector.
        self.scan_dfa: list[ByteDFA] = []
        self.scan_term: list[int] = []  # the terminal a scan completes
        self.scan_ignore: list[bool] = []
        # The follow guard of a scan's terminal (a trailing lookahead, ``regex.terminal_parts``):
        # when it completes, what starts after it is restricted to the characters the guard allows
        # (``_guarded``), and the text may end there only if the guard lets it.
        self.scan_guard: list[FollowGuard | None] = []
        self._guard_scans: dict[tuple[int, FollowGuard, bool], int | None] = {}
        self._guarded_starts: dict[tuple[frozenset, FollowGuard], frozenset] = {}
        self.trans: list[array] = []
        self.final: list[bytes] = []
        self.has_out: list[bytes] = []
        # The boundary after several terminals complete at one byte, by their (terminal, start set)
        # pairs (``step``; a kernel of many waiting items hashed was 0.9 s of 4 s on lark.lark).
        self._after_many: dict[frozenset, ESet] = {}
        # What the C step reads (``_statec.c``), all grown or cleared in place, never replaced.
        self._tables = (self.trans, self.final, self.has_out, self.scan_guard, self.scan_ignore, self.scan_term,
                        self._after_many)
        for t in range(m):
            self._add_scan(ir.terminals[t].dfa, t, False)
        self.ignore_scans = tuple(self._add_scan(ir.terminals[t].dfa, t, True) for t in ir.ignore)
        for d in self.ignore_scans:
            self._load(d)
        self._prio = [t.priority for t in ir.terminals] if ir.lexical_priority else None
        self._cut: dict[tuple[int, tuple[int, ...]], int | None] = {}
        self._scan_ids: dict[frozenset, tuple[int, ...]] = {}  # expected terminals -> scan ids (_scans)
        self._overlap: dict[tuple[int, int], bool] = {}
        # Interning tables, plain dicts: a set made stays reachable from the first one anyway
        # (``ESet.after``, MAX_SETS), so weak values freed nothing and cost ~2 us a store (50
        # median maskbench schemas, fresh: (a) per input 0.985 with plain dicts).
        self._sets: dict[frozenset, ESet] = {}
        self._futures: dict[tuple, ESet] = {}
        self._made = 0  # item sets made since the last _forget (MAX_SETS)
        self._live_rows: dict[tuple[int, int], int] = {}  # (scan, DFA state) -> live bytes as bits
        self._predicted: dict[tuple[frozenset, frozenset], Predicted] = {}
        self._predicted_by_content: dict[tuple[frozenset, bool], Predicted] = {}
        # Work done since the caller last reset it (``charge``; the units: ``work_bound.py``); the
        # caller (a mask, an advance) sets ``work_limit`` and the chart raises ``WorkExhausted``
        # past it, so no grammar holds a server's engine step (issue 58).
        self.work = 0
        self.work_limit = UNBOUNDED
        # What the C ``after`` / ``close_kernel`` read (``_statec.c``): the dicts are cleared in place.
        self._close_ctx = (self._next_sym_c, self._lhs_c, self._nullable_c, self.accept_item, self._predicted,
                           self._futures, self._sets, self._scan_ids, ESet, _NO_ROOTS, MAX_SETS)
        # with it, the C step makes a boundary not memoised yet (else it declines to ``_step``)
        self._tables += (self._close_ctx if self._native_after is not None else None,)
        self.initial = self._close(frozenset([(self.accept_item - 1, None)]))
        self._start = self.make_state(self.initial.starts, self.initial.accepting)
        self._boundaries: dict[tuple[ESet, int], ChartState] = {}  # (set, scan) -> state (``boundary``)
        self._steps: dict[tuple[ChartState, int], ChartState | None] = {}
        self._steps_scans = 0  # scans summed over the states _steps holds (STEP_CACHE_SCANS)

    def _add_scan(self, dfa: ByteDFA, t: int, ignore: bool) -> int:
        """A new scan id; its flat tables are made when a boundary first starts it (``_load``): a
        schema grammar has a literal terminal per key, most never expected along one document (all
        up front was ~40% of Earley's construction on large schemas: 135 maskbench compiles, cd894bb)."""
        self.scan_dfa.append(dfa)
        self.scan_term.append(t)
        self.scan_ignore.append(ignore)
        self.scan_guard.append(self.ir.terminals[t].guard)
        for table in (self.trans, self.final, self.has_out):
            table.append(None)  # type: ignore[arg-type]
        return len(self.scan_dfa) - 1

    def _load(self, d: int) -> None:
        self.trans[d], self.final[d], self.has_out[d] = scan_tables(self.scan_dfa[d])

    def _scan_of(self, t: int, expected: Iterable[int]) -> int | None:
        """The scan id for terminal ``t`` at a boundary expecting ``expected``: ``t`` itself, or
        ``t`` cut by the overlapping terminals of higher priority expected there (None: nothing
        of ``t`` is left)."""
        if self._prio is None:
            return t
        p = self._prio[t]
        higher = tuple(sorted(u for u in expected if self._prio[u] > p and self._overlaps(t, u)))
        if not higher:
            return t
        key = (t, higher)
        if key not in self._cut:
            dfas = self.ir.terminals
            cut = difference(dfas[t].dfa, [dfas[u].dfa for u in higher], name=f"terminal {dfas[t].name}")
            self._cut[key] = None if cut is None else self._add_scan(cut, t, False)
        return self._cut[key]

    def _overlaps(self, t: int, u: int) -> bool:
        key = (min(t, u), max(t, u))
        hit = self._overlap.get(key)
        if hit is None:
            hit = self._overlap[key] = intersects(self.ir.terminals[t].dfa, self.ir.terminals[u].dfa)
        return hit

    # -- item sets
    def _static(self, roots: frozenset, symbols: frozenset) -> "Predicted":
        """The closure of the items predicted at a boundary (origin None: "this set"), from
        kernel items ``roots`` and nonterminals ``symbols`` predicted by the other items; memoised
        and interned by content, so boundaries predicting alike share one object."""
        key = (roots, symbols)
        hit = self._predicted.get(key)
        if hit is not None:
            return hit
        nxt, predict, nullable = self.next_sym, self.predict, self.nullable
        items = set(roots)
        for sym in symbols:
            items.update(predict[sym])
        agenda = list(items)
        done = set(symbols)
        waiting: dict[int, list[int]] = {}
        expects: dict[int, list[int]] = {}
        accepting = False
        while agenda:
            i = agenda.pop()
            sym = nxt[i]
            if sym is None:
                accepting |= i == self.accept_item  # (a nullable completion: done at prediction)
            elif sym >= 0:
                waiting.setdefault(sym, []).append(i)
                new = [i + 1] if nullable[sym] else []
                if sym not in done:
                    done.add(sym)
                    new += predict[sym]
                for j in new:
                    if j not in items:
                        items.add(j)
                        agenda.append(j)
            else:
                expects.setdefault(-1 - sym, []).append(i)
        content = frozenset(i for i in items if nxt[i] is not None)
        hit = self._predicted_by_content.get((content, accepting))
        if hit is None:
            hit = Predicted({k: tuple(v) for k, v in waiting.items()}, {k: tuple(v) for k, v in expects.items()},
                            accepting, content)
            self._predicted_by_content[(content, accepting)] = hit
        if len(self._predicted) > MAX_PREDICTED:
            self._predicted.clear()
            self._predicted_by_content.clear()
        self._predicted[key] = hit
        return hit

    def _close(self, kernel: frozenset) -> ESet:
        hit = self._sets.get(kernel)
        if hit is not None:
            return hit
        self._made += 1
        if self._made > MAX_SETS:
            self._forget()
        # Items with an origin set are closed here; the items this boundary predicts (origin
        # None) come from ``_static``, shared by every boundary that predicts the same: on
        # sql_select.lark a boundary predicts ~100 items (tracked objects retained over 3
        # documents 290,735 -> 235,478, commit 2a8cb92). Items closed here always have an origin.
        # The agenda runs in C where _statec is built (``chart_kernel.agenda`` is its Python twin).
        roots = _NO_ROOTS
        if (self.accept_item - 1, None) in kernel:  # only the initial kernel has rootless items
            roots = frozenset(i for i, o in kernel if o is None)
            kernel_items = frozenset(it for it in kernel if it[1] is not None)
        else:
            kernel_items = kernel
        if self._native_close is not None:
            items, waiting, expects, predicted, accepting, pending = self._native_close(
                kernel_items, self._next_sym_c, self._lhs_c, self._nullable_c, self.accept_item)
        else:
            items, waiting, expects, predicted, accepting, pending = agenda(
                kernel_items, self.next_sym, self.lhs, self.nullable, self.accept_item)
        self.charge(len(items))
        static = self._static(roots, predicted)
        accepting |= static.accepting
        # Sets with the same future (the items still waiting for a symbol, with their origins)
        # are one set, whatever completed items led to them: after a word that can split into
        # words at every byte, each split's boundary is the same set (composition_csv.lark).
        future = (pending, static.content, accepting)
        same = self._futures.get(future)
        if same is not None:
            self._sets[kernel] = same
            return same
        e = ESet()
        e.kernel = kernel
        e.waiting = waiting
        e.expects = expects
        e.static = static
        e.accepting = accepting
        return self._scans(e, kernel, future)

    def _scans(self, e: "ESet", kernel: frozenset, future: tuple) -> "ESet":
        """The new item set ``e``'s scans (``starts``), and ``e`` interned by kernel and future."""
        expected = frozenset(e.expects).union(e.static.expects)
        ids = self._scan_ids.get(expected)
        if ids is None:
            ids = self._scan_ids[expected] = self._scan_ids_of(expected)
        e.starts = frozenset([(d, 0, e) for d in ids])
        self._sets[kernel] = e
        self._futures[future] = e
        return e

    def _scan_ids_of(self, expected: frozenset) -> tuple[int, ...]:
        """The scan ids that start at a boundary expecting terminals ``expected`` (their tables
        loaded), the ignored terminals' included: each terminal, or its cut by the overlapping
        expected terminals of higher priority (none where nothing of it is left). A function of
        the set alone, so ``_scans`` memoises it: the items of an array's every element are new
        sets (new origins) expecting the same terminals (a key position tested each expected key
        for overlap again: ~9% of fresh masks' time was ``_scans``, 100 maskbench schemas)."""
        terms = list(expected)
        prio = self._prio
        ps = [prio[t] for t in terms] if prio is not None and terms else None
        if ps is None or min(ps) == max(ps):
            ids = terms
        else:
            # Only a terminal below the top priority expected here can be cut (a schema object
            # expects dozens of equal-priority keys: testing each pair was O(k^2) per set).
            top = max(ps)
            ids = [d for d in (t if p >= top else self._scan_of(t, expected) for t, p in zip(terms, ps))
                   if d is not None]
        trans = self.trans
        for d in ids:
            if trans[d] is None:
                self._load(d)
        return tuple(ids) + tuple(self.ignore_scans)

    def _next_kernel(self, pairs: Iterable[tuple[int, "ESet"]]) -> frozenset:
        """The kernel of the boundary after terminals ``t`` (each started at its ``e``) complete:
        every item of ``e`` waiting for ``t``, advanced over it."""
        out = []
        for t, e in pairs:
            out += [(i + 1, o) for i, o in e.expects.get(t, ())]
            out += [(i + 1, e) for i in e.static.expects.get(t, ())]
        return frozenset(out)

    def _forget(self) -> None:
        """Drop the memos that keep item sets alive (interning tables, successor links, step memo).
        Older chart states stay valid; their successors are made again as new objects, so a state
        from before and its equal from after compare unequal (a cache miss, never a wrong answer)."""
        for e in list(self._sets.values()):
            e.after = {}
        self._sets.clear()
        self._futures.clear()
        self._scan_ids.clear()
        self._guarded_starts.clear()
        self._boundaries.clear()
        self._after_many.clear()
        self._steps.clear()
        self._steps_scans = 0
        self._made = 0

    def after(self, e: ESet, t: int) -> ESet:
        """The boundary after terminal ``t`` (started at ``e``) completes (in C where built)."""
        if self._native_after is not None:
            return self._native_after(e, t, self, self._close_ctx)
        hit = e.after.get(t)
        if hit is None:
            hit = e.after[t] = self._close(self._next_kernel([(t, e)]))
        return hit

    def boundary(self, e: ESet, scan: int) -> ChartState:
        """The chart state just after scan ``scan`` (started at ``e``) completes (memoised here, not
        on ``e``: the collector cannot see a C ``State``, so a cycle through an item set holding one
        would keep a dropped grammar's sets alive: test_a_dropped_constraint_leaves_no_item_sets)."""
        key = (e, scan)
        hit = self._boundaries.get(key)
        if hit is None:
            if len(self._boundaries) > MAX_SETS:
                self._boundaries.clear()
            hit = self._boundaries[key] = self.make_state(*self.boundary_scans(e, scan))
        return hit

    def boundary_scans(self, e: ESet, scan: int) -> tuple[frozenset, bool]:
        """``boundary``'s scans and accepting flag: the new boundary's scans, or for an ignored
        terminal ``e``'s own scans again (restricted by the scan's follow guard, if it has one)."""
        a = e if self.scan_ignore[scan] else self.after(e, self.scan_term[scan])
        g = self.scan_guard[scan]
        if g is None:
            return (a.starts, a.accepting)
        return (self._guarded(a.starts, g), a.accepting and g.at_end)

    def _guarded(self, starts: frozenset, g: FollowGuard) -> frozenset:
        """``starts`` with every scan's first character restricted to what guard ``g`` allows
        (each scan id paired with ``g`` becomes a scan id of its own, memoised). A character of
        ``g.last`` (Python's ``$``: a newline that ends the text) is taken only by a copy that
        reads it alone and then lets nothing follow (its own guard ``END_OF_TEXT``)."""
        key = (starts, g)
        hit = self._guarded_starts.get(key)
        if hit is None:
            out = []
            if g.allowed:
                free = g.allowed if not g.last else cs_diff(g.allowed, g.last)
                for d, q, e in starts:
                    for last in (False, True) if g.last else (False,):
                        d2 = self._guard_scans.get((d, g, last), -1)
                        if d2 == -1:
                            d2 = self._guard_copy(d, g.last if last else free, last)
                            self._guard_scans[(d, g, last)] = d2
                        if d2 is not None:
                            out.append((d2, q, e))
            hit = self._guarded_starts[key] = frozenset(out)
        return hit

    def _guard_copy(self, d: int, chars: tuple, last: bool) -> int | None:
        """Scan ``d`` restricted to start with a character of ``chars``; ``last``: to read one of
        them alone, the document's last character (None: nothing of ``d`` is left)."""
        if not chars:
            return None
        if not last:
            cut = restrict_first_char(self.scan_dfa[d], chars)
            if cut is None:
                return None
            d2 = self._add_scan(cut, self.scan_term[d], self.scan_ignore[d])
        else:
            own = self.scan_guard[d]
            one = one_byte_ending(self.scan_dfa[d], chars)
            if one is None or (own is not None and not own.at_end):
                return None
            d2 = self._add_scan(one, self.scan_term[d], self.scan_ignore[d])
            self.scan_guard[d2] = END_OF_TEXT
        self._load(d2)
        return d2

    # -- chart states
    def start(self) -> ChartState:
        return self._start

    def step(self, state: ChartState, b: int) -> ChartState | None:
        """The state after byte ``b``, or None when no scan can take it (memoised)."""
        hit = self._steps.get((state, b), _MISS)
        return self.step_miss(state, b) if hit is _MISS else hit

    def step_miss(self, state: ChartState, b: int, native: bool = True) -> ChartState | None:
        """``step`` where the memo has no entry; ``native=False``: the C step has declined already."""
        self.charge(len(state[0]) + 1)
        res = self._native_step(state, b, *self._tables, self) if native and self._native_step is not None else False
        if res is False:  # (the C loop declines what it does not take: see _statec.c)
            res = self._step(state, b)
        # Bounded by entries AND by the scans they hold (the C walks' misses too): lark.lark's
        # states of hundreds of scans took 11 GB at 2^18 entries (fuzz_grammars --corpus).
        if len(self._steps) > 1 << 18 or self._steps_scans > STEP_CACHE_SCANS:
            self._steps.clear()
            self._steps_scans = 0
        self._steps[(state, b)] = res
        self._steps_scans += len(state[0]) + (len(res[0]) if res is not None else 0)
        return res

    def step_declined(self, state: ChartState, b: int) -> ChartState | None:  # (the C walks' declined misses)
        return self.step_miss(state, b, False)

    def _step(self, state: ChartState, b: int) -> ChartState | None:
        """``step`` unmemoised, in Python (``_statec.step`` takes the common case in C)."""
        out: set = set()
        acc = False
        done: list[tuple[int, ESet]] = []
        trans, final, has_out, guard = self.trans, self.final, self.has_out, self.scan_guard
        for t, q, e in state[0]:
            q2 = trans[t][(q << 8) | b]
            if q2 < 0:
                continue
            if has_out[t][q2]:
                out.add((t, q2, e))
            if final[t][q2]:
                if guard[t] is not None:  # its own boundary: what follows must pass the guard
                    starts, a_acc = self.boundary_scans(e, t)
                    out |= starts
                    acc |= a_acc
                elif self.scan_ignore[t]:
                    out |= e.starts
                    acc |= e.accepting
                else:
                    done.append((self.scan_term[t], e))
        if len(done) == 1:
            a = self.after(done[0][1], done[0][0])
            out |= a.starts
            acc |= a.accepting
        elif done:
            # Terminals completed at one byte make ONE Earley set (as in Earley's algorithm): its
            # predictions are shared instead of repeated per completing scan.
            key = frozenset(done)
            a = self._after_many.get(key)  # type: ignore[assignment]
            if a is None:
                if len(self._after_many) > MAX_SETS:
                    self._after_many.clear()
                a = self._after_many[key] = (
                    self._close(self._next_kernel(done)) if self._native_close_kernel is None else
                    self._native_close_kernel(self._native_next_kernel(done), self, self._close_ctx))
            out |= a.starts
            acc |= a.accepting
        return self.make_state(out, acc) if out or acc else None

    def charge(self, units: int) -> None:
        """Count ``units`` of work (see ``__init__``) against ``work_limit``."""
        self.work += units
        if self.work > self.work_limit:
            raise WorkExhausted

    def walk(self, state: ChartState, data: bytes) -> ChartState | None:
        steps = self._steps  # (memo hits looked up here: no call per byte; the dict is only cleared)
        self.charge(len(data) >> 3)
        if self._native_walk is not None:
            return self._native_walk(state, data, steps, self.step_declined, self, self._tables, STEP_CACHE_SCANS)
        for b in data:
            nxt = steps.get((state, b), _MISS)
            state = self.step(state, b) if nxt is _MISS else nxt  # type: ignore[assignment]
            if state is None:
                return None
        return state

    def take_rests(self, state: ChartState, base: np.ndarray, length: np.ndarray, flat: np.ndarray,
                   stride: int) -> np.ndarray | None:
        """Sorted indices of the rests (bytes ``flat[base[r] + d * stride]``, ``d < length[r]``) the
        chart takes whole from ``state``, grouped by chart state in C; None without ``_statec``."""
        if self._native_take_rests is None:
            return None
        taken, units = self._native_take_rests(state, base, length, flat, stride, self._steps, self.step_declined,
                                               self, self._tables, STEP_CACHE_SCANS)
        self.charge(units)
        return np.frombuffer(taken, dtype=np.int64)

    def live_bytes(self, state: ChartState) -> np.ndarray:
        """[256] bool: the bytes ``step`` accepts from ``state`` (a scan's DFA moves on them)."""
        # (np.asarray of a 256-slice per scan was ~7% of sql_select's masks, commit c71625a)
        bits = 0
        for t, q, _ in state[0]:
            bits |= self.live_bits(t, q)
        return bits_to_bool(bits)

    def live_bits(self, t: int, q: int) -> int:
        """The bytes scan ``t``'s DFA takes from state ``q``, as a 256-bit int (memoised)."""
        b = self._live_rows.get((t, q))
        if b is None:
            b = self._live_rows[(t, q)] = state_bits(self.scan_dfa[t], q)
        return b

