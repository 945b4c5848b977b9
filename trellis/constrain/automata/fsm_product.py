"""Intersection, difference and minimisation of interegular FSMs (the JSON Schema translation's key
classes, string Venn regions, disjointness tests and automaton -> regex), without interegular's
generic ``crawl``.

interegular crawls a product through a ``follow`` that builds a dict per (state, symbol) and finds
each successor with ``list.index`` over the states made so far (quadratic in the product's size),
and it keeps product states in which a component is dead, although no final state is reachable
from them. Here a product state is a pair ``(p, q)`` found through a dict, and the pairs that
cannot reach a final state for the operation are never made: for ``A & B`` both components must
be alive, for ``A - B`` the first (the second may be dead: ``None``, "B rejects from here on").
The language is the same as interegular's (``tests/constrain/test_fsm_product.py``); the state
count can only be smaller. On JsonSchemaStore's monika-config schema, whose string alternatives
make 693 products, the translation took 1,620 ms with interegular's products (cProfile: 95% in
``crawl``/``follow``). ``minimal`` is interegular's ``reduce`` (Brzozowski: the reversal
determinised twice) with the same dict-indexed subset construction: 11 of 29 s on o63934's
length-bounded pattern (1,926 states) went to ``reduce``'s ``list.index``.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, Hashable, Iterator


def product(a: Any, b: Any, difference: bool) -> Any:
    """``a & b`` (``difference`` False) or ``a - b`` (True) as an interegular ``FSM`` over the
    union of their alphabets, states numbered in the order they are found (0: initial)."""
    alphabet, by_a = _union(a.alphabet, b.alphabet)
    a_map, b_map, a_fin, b_fin = a.map, b.map, a.finals, b.finals
    none: dict = {}

    def final(pq: tuple) -> bool:
        p, q = pq
        return p in a_fin and ((q is None or q not in b_fin) if difference else q in b_fin)

    def step(pq: tuple) -> Iterator[tuple]:
        # Only the union transitions under a's moves from p (where a is dead nothing final
        # follows, either way), in the union alphabet's order: states are numbered as found, and
        # the numbering decides the regex written from the FSM. A state of a literal or a short
        # chain has one or two moves among the union's dozens of transitions (o17072's 4,008
        # products: 717k dict lookups, 0.14 of 0.41 s of its translation under cProfile).
        p, q = pq
        qb = none if q is None else b_map.get(q, none)
        out = []
        for ka, np_ in a_map.get(p, none).items():
            for i, t, kb in by_a.get(ka, ()):
                nq = qb.get(kb)
                if nq is None and not difference:
                    continue
                out.append((i, t, (np_, nq)))
        out.sort()  # by position: each union transition is under one of a's, so positions never tie
        for _, t, pair in out:
            yield t, pair

    return _crawl(alphabet, (a.initial, b.initial), final, step)


# {id(A), id(B)} -> (A, B, their union, per transition of A the union's under it, the same per
# transition of B once asked), either order: the products of a Venn decomposition (g & f, g - f,
# f - g, then the next f against every region made so far) meet the same few alphabets again and
# again (Github_ultra o17072: 4,008 products, interegular's Alphabet.union 0.73 of 1.9 s under
# cProfile; with the memo, translation A/B in one process, other memos cold, min of 3:
# monika-config 71 -> 50 ms, strmprivacy 189 -> 174 ms, o17072 unchanged, its unions mostly of new
# pairs). The entry holds A and B, so their ids cannot be reused while it lives.
# It lives for one translation (``translation_scope``): across schemas it saved nothing (100
# maskbench schemas translated with the other schemas' unions vs none, min of 3 alternating: 552 vs
# 553 ms in all, median ratio 1.00), and kept it held every alphabet it pinned (1,658 entries, ~120k
# objects the collector tracks, after 100 schemas): each full collection walked them, and they
# were the growth that triggered those collections (``benchmarks/bench_gc.py``).
_UNIONS: dict[tuple[int, int], list] = {}
_scopes = 0  # translations in progress (``translation_scope``); threads share the count
_scopes_lock = threading.Lock()


@contextmanager
def translation_scope() -> Iterator[None]:
    """The extent of one translation: ``_UNIONS`` is emptied when the outermost one ends (the
    last of those running, when threads translate at once)."""
    global _scopes
    with _scopes_lock:
        _scopes += 1
    try:
        yield
    finally:
        with _scopes_lock:
            _scopes -= 1
            if _scopes == 0:
                _UNIONS.clear()


def _union(a: Any, b: Any) -> tuple[Any, dict]:
    """(the union alphabet of ``a`` and ``b``, per transition of ``a`` the union's transitions
    under it as (position in the union, union transition, ``b``'s transition) triples)."""
    key = (id(a), id(b)) if id(a) <= id(b) else (id(b), id(a))
    hit = _UNIONS.get(key)
    if hit is None or not ((hit[0] is a and hit[1] is b) or (hit[0] is b and hit[1] is a)):
        alphabet, (a_key, b_key) = alphabet_union(a, b)
        if len(_UNIONS) >= 4096:
            _UNIONS.clear()
        keys = [(t, a_key[t], b_key[t]) for t in alphabet.by_transition]
        hit = _UNIONS[key] = [a, b, alphabet, _under(keys, 1, 2), keys]
    if hit[0] is a:
        return hit[2], hit[3]
    if isinstance(hit[4], list):  # asked in the other order: index by the other's transitions
        hit[4] = _under(hit[4], 2, 1)
    return hit[2], hit[4]


def alphabet_union(a: Any, b: Any) -> tuple[Any, tuple[dict, dict]]:
    """interegular's ``Alphabet.union(a, b)``: the coarsest alphabet that refines both, and per
    new transition the transition of ``a`` and of ``b`` under it (``None`` where one has no
    transition for those symbols). The same partition of the symbols as interegular's, in one
    pass of two dict lookups per symbol: interegular's builds a tuple through a generator and
    calls ``Alphabet.__getitem__`` per symbol per alphabet, then a second mapping and an
    ``Alphabet`` that regroups every symbol. Github_ultra o17072 (4,923 unions of alphabets of
    up to 43 symbols over 15 warm-up schemas and three cold translations, collector paused):
    213 -> 68 ms in all, 43 -> 14 us a union. New transitions are numbered in first-seen order
    of their (a's, b's) pair over a's symbols, then b's own (interegular's order follows a
    frozenset's iteration; the translation's output does not depend on it: grammar texts
    byte-identical in both forms on all 2,640 real-world maskbench schemas)."""
    from interegular.fsm import Alphabet, anything_else

    ma, mb = a._symbol_mapping, b._symbol_mapping
    ea, eb = ma.get(anything_else), mb.get(anything_else)  # where the other's extra symbols go
    cells: dict[tuple, list] = {}
    for s, ka in ma.items():
        cells.setdefault((ka, mb.get(s, eb)), []).append(s)
    for s, kb in mb.items():
        if s not in ma:
            cells.setdefault((ea, kb), []).append(s)
    mapping: dict = {}
    a_key: dict = {}
    b_key: dict = {}
    for i, (pair, syms) in enumerate(cells.items()):
        for s in syms:
            mapping[s] = i
        a_key[i], b_key[i] = pair
    alphabet = Alphabet.__new__(Alphabet)  # Alphabet(mapping) would regroup every symbol again
    alphabet._symbol_mapping = mapping
    alphabet._by_transition = dict(enumerate(cells.values()))
    return alphabet, (a_key, b_key)


def _under(keys: list, mine: int, other: int) -> dict:
    """(union transition, a's, b's) triples indexed by component ``mine``'s transition."""
    under: dict = {}
    for i, k in enumerate(keys):
        under.setdefault(k[mine], []).append((i, k[0], k[other]))
    return under


def minimal(f: Any) -> Any:
    """The minimal DFA of ``f``'s language over its alphabet (``f.reduce()``, faster)."""
    return _reversed(_reversed(f))


def _reversed(f: Any) -> Any:
    """An FSM of the reversed language: subsets of ``f``'s states, from its finals (0: initial)."""
    back: dict[Any, dict[Any, list]] = {}  # state -> transition -> its predecessors over it
    for s, row in f.map.items():
        for t, d in row.items():
            back.setdefault(d, {}).setdefault(t, []).append(s)
    keys = list(f.alphabet.by_transition)
    none: dict = {}

    def step(cur: frozenset) -> Iterator[tuple]:
        acc: dict[Any, set] = {}
        for s in cur:  # only the transitions that lead into cur
            for t, preds in back.get(s, none).items():
                acc.setdefault(t, set()).update(preds)
        for t in keys:  # in alphabet order, as interegular numbers the subsets
            nxt = acc.get(t)
            if nxt:
                yield t, frozenset(nxt)

    return _crawl(f.alphabet, frozenset(f.finals), lambda cur: f.initial in cur, step)


def _crawl(alphabet: Any, start: Hashable, final: Callable[[Any], bool],
           step: Callable[[Any], Iterator[tuple]]) -> Any:
    """interegular's ``crawl`` with a dict index: the states reachable from ``start`` through
    ``step(state)`` -> (transition, next state) pairs, numbered as found (0: ``start``)."""
    from interegular.fsm import FSM

    index = {start: 0}
    found = [start]
    finals = set()
    out: dict[int, dict] = {}
    i = 0
    while i < len(found):  # grows while read
        s = found[i]
        if final(s):
            finals.add(i)
        row = {}
        for t, n in step(s):
            j = index.get(n)
            if j is None:
                j = index[n] = len(found)
                found.append(n)
            row[t] = j
        out[i] = row
        i += 1
    return FSM(alphabet=alphabet, states=range(len(found)), initial=0, finals=finals, map=out,
               __no_validation__=True)


__all__ = ["minimal", "product"]
