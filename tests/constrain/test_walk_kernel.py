"""The C walk kernel (``trellis/constrain/vocab/_walkc.c``) returns exactly what the numpy walks return,
element for element and in the same order: inside flags, crossings, and the leftover rest sets
(their order matters: walks over leftovers are cached on disk by the key of the walk that made
them, so processes with different kernels must agree on every index). Random vocabularies full of
shared prefixes, twins and NUL bytes; terminal DFAs from every state; follow sets; leftovers of
leftovers."""

from __future__ import annotations

import numpy as np
import pytest

from trellis.constrain.vocab import rest_walk, walks
from trellis.constrain.automata.byte_dfa import ByteDFA
from trellis.constrain.automata.regex import regex_to_byte_dfa
from trellis.constrain.vocab.rest_walk import RestSet, Walk, walk, walk_numpy
from trellis.constrain.vocab.trie_walk import walk_vocabulary, walk_vocabulary_numpy
from trellis.constrain.vocab.walks import TokenMatrix

from .test_trie_walk import PATTERNS, _vocab

pytestmark = pytest.mark.skipif(walks.KERNEL != "c", reason="the C kernel is not built in this install")

MORE = [r"\s+", r'"[^"]*"', r"(?i:select|from)", r"[^\x00]{2,5}", r"(?:\xc3\xa9|e)+\."]


def _same(a: Walk, b: Walk) -> None:
    assert np.array_equal(a.inside, b.inside)
    assert np.array_equal(a.src, b.src) and np.array_equal(a.inv, b.inv)
    assert (a.cross is None) == (b.cross is None)
    if a.cross is not None:
        for f in ("tid", "base", "length", "lo"):
            x, y = getattr(a.cross, f), getattr(b.cross, f)
            assert x.dtype == y.dtype and np.array_equal(x, y), f
        assert a.cross.distinct == b.cross.distinct


@pytest.mark.parametrize("seed", range(4))
def test_c_walks_equal_the_numpy_walks(seed: int) -> None:
    tm = TokenMatrix.of(_vocab(100 + seed))
    rng = np.random.default_rng(seed)
    vocab = RestSet.vocabulary(tm)
    compared = crossed = 0
    for p in PATTERNS + MORE:
        dfa = regex_to_byte_dfa(p)
        for q in range(dfa.trans.shape[0]):
            for follow in (None, rng.random(256) < 0.5, np.zeros(256, dtype=bool)):
                w = walk(dfa.trans, dfa.final, q, vocab, tm, follow)
                _same(w, walk_numpy(dfa.trans, dfa.final, q, vocab, tm, follow))
                _same(walk_vocabulary(dfa.trans, dfa.final, q, vocab, tm, follow),
                      walk_vocabulary_numpy(dfa.trans, dfa.final, q, vocab, tm, follow))
                compared += 1
                # leftovers (not distinct after a second split) walked by another terminal
                rs = w.cross
                for depth in range(2):
                    if rs is None:
                        break
                    crossed += 1
                    other = regex_to_byte_dfa(PATTERNS[int(rng.integers(len(PATTERNS)))])
                    a = walk(other.trans, other.final, 0, rs, tm, follow)
                    _same(a, walk_numpy(other.trans, other.final, 0, rs, tm, follow))
                    rs = a.cross
    assert compared > 100 and crossed > 20


def test_the_kernel_refuses_arrays_of_the_wrong_dtype() -> None:
    tm = TokenMatrix.of(_vocab(7))
    rs = RestSet.vocabulary(tm)
    dfa = regex_to_byte_dfa(r"[a-z]+")
    inside = np.zeros(len(rs), dtype=bool)
    with pytest.raises(ValueError, match="wrong size or dtype"):
        rest_walk.walkc.walk_rests(dfa.trans, dfa.final, 0, rest_walk.rows(tm), tm.mat_t.shape[0],
                                    tm.mat_t.shape[1], rs.base, rs.length.astype(np.int64), rs.lo, None, inside)
    with pytest.raises(ValueError, match="wrong size or dtype"):
        rest_walk.walkc.walk_rests(dfa.trans, dfa.final, 5, rest_walk.rows(tm), tm.mat_t.shape[0],
                                    tm.mat_t.shape[1], rs.base, rs.length, rs.lo, None, inside)


@pytest.mark.parametrize("seed", range(3))
def test_walk_trie_leftovers_equal_the_spread_runs_and_generic_leftovers(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``walk_vocabulary`` in one C call (``_walkc.walk_trie_leftovers``) is what ``walk_trie``,
    spreading its runs out, dropping the tokens inside and ``rest_walk.leftovers`` make, element for
    element (the leftovers' order is part of their cache key), with and without a follow set and
    with a trie cut (whose known tokens join ``inside`` before the crossings are dropped); the
    patterns include ones that can end after any byte (runs at most nodes, their tokens mostly
    inside: the prefix count drops those runs whole)."""
    from trellis.constrain.vocab import slices, trie_walk

    monkeypatch.setattr(slices, "CUT_LEVELS", (1, 2, 3, 4))
    tm = TokenMatrix.of(_vocab(300 + seed))
    rng = np.random.default_rng(seed)
    vocab = RestSet.vocabulary(tm)
    crossed = cuts = 0
    for p in PATTERNS + MORE + [r"[^\n]+", r"[^\x00]+", r"(?:ab|[^a])+"]:
        dfa = regex_to_byte_dfa(p)
        for q in range(dfa.trans.shape[0]):
            cut = slices.trie_cut_for(tm, dfa, q)
            cuts += cut is not None
            for follow in (None, rng.random(256) < 0.5):
                for c in (None, cut) if cut is not None else (None,):
                    with monkeypatch.context() as m:
                        m.setattr(trie_walk, "TRIE_LEFTOVERS", False)
                        want = walk_vocabulary(dfa.trans, dfa.final, q, vocab, tm, follow, c)
                    _same(walk_vocabulary(dfa.trans, dfa.final, q, vocab, tm, follow, c), want)
                    # the capped forms: runs past a cap of none, then the tokens walked one by one
                    # (flat), or the trie walked again recording every run
                    for cap, flat_max in ((0, 1 << 40), (0, 0), (3, 1 << 40)):
                        _same(_walk_capped(dfa, q, vocab, tm, follow, c, cap, flat_max), want)
                    crossed += want.cross is not None
    assert crossed > 20 and cuts > 0


def _walk_capped(dfa: ByteDFA, q: int, rs: RestSet, tm: TokenMatrix, follow: np.ndarray | None, cut: object,
                 cap: int, flat_max: int) -> Walk:
    """``walk_vocabulary`` through ``_walkc.walk_trie_leftovers`` with its cap on recorded runs and
    its bound on the tokens walked one by one set (``flat_max`` 0: a capped walk with any candidate
    token walks the trie again)."""
    from trellis.constrain.vocab.rest_walk import c_bool, c_table
    from trellis.constrain.vocab.trie_walk import TokenTrie

    trie = TokenTrie.of(tm)
    byte, depth, skip, tlo, thi, end_lo, end_tok, levels = trie.preorder()
    inside = np.zeros(len(rs), dtype=bool)
    out = rest_walk.walkc.walk_trie_leftovers(
        c_table(dfa.trans), c_bool(dfa.final), q, byte, depth, skip, tlo, thi, end_lo, end_tok,
        None if follow is None else c_bool(follow), inside, levels, None if cut is None else cut.nodes,  # type: ignore[attr-defined]
        None if cut is None else c_bool(cut.known), trie.lex, rs.tid, rs.base, rs.length, rs.lo,  # type: ignore[attr-defined]
        tm.mat_t.reshape(-1), tm.mat_t.shape[1], cap, flat_max)
    ci, tid, base, length, lo, pos = out
    none = np.zeros(0, dtype=np.int64)
    if not ci:
        return Walk(inside, None, none, none)
    return Walk(inside, rest_walk.rest_set_of_bytes(tid, base, length, lo), np.frombuffer(ci, np.int64),
                np.frombuffer(pos, np.int64))


def test_walk_trie_leftovers_refuses_arrays_out_of_range() -> None:
    from trellis.constrain.vocab.trie_walk import TokenTrie

    tm = TokenMatrix.of(_vocab(7))
    rs = RestSet.vocabulary(tm)
    trie = TokenTrie.of(tm)
    byte, depth, skip, tlo, thi, end_lo, end_tok, levels = trie.preorder()
    dfa = regex_to_byte_dfa(r"[a-z]+")

    def run(lex: np.ndarray, thi: np.ndarray = thi, length: np.ndarray = rs.length) -> object:
        inside = np.zeros(len(rs), dtype=bool)
        return rest_walk.walkc.walk_trie_leftovers(dfa.trans, dfa.final, 0, byte, depth, skip, tlo, thi, end_lo,
                                                   end_tok, None, inside, levels, None, None, lex, rs.tid, rs.base,
                                                   length, rs.lo, tm.mat_t.reshape(-1), tm.mat_t.shape[1])

    run(trie.lex)  # (as it is: fine)
    with pytest.raises(ValueError, match="wrong size or dtype"):
        run(trie.lex[:-1])
    with pytest.raises(IndexError, match="token out of range"):
        run(np.full_like(trie.lex, len(rs) + 5))  # (read where a run holds it)
    with pytest.raises(IndexError, match="run out of range"):
        run(trie.lex, thi + len(rs))
    with pytest.raises(IndexError, match="outside the token matrix"):
        run(trie.lex, length=np.ones_like(rs.length))  # every token one byte long: no byte is left over


def _rest_sets_equal(a: RestSet, b: RestSet) -> None:
    for f in ("tid", "base", "length", "lo"):
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and np.array_equal(x, y), f


@pytest.mark.parametrize("seed", range(3))
def test_c_leftovers_equal_restset_of(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``rest_walk.leftovers`` in C is ``RestSet.of`` element for element: leftovers from the
    vocabulary (distinct) and from a set of suffixes where different crossings leave the very same
    bytes (deduplicated, kept at the first crossing), with repeated crossings too."""
    tm = TokenMatrix.of(_vocab(200 + seed))
    rng = np.random.default_rng(seed)
    vocab = RestSet.vocabulary(tm)
    long = np.flatnonzero(vocab.length > 2)
    cases = []
    ci = rng.choice(long, size=min(len(long), 300), replace=False)  # distinct rests, any split
    cases.append((vocab, ci, rng.integers(1, vocab.length[ci]), True))
    # every suffix token[1:] of the long tokens (a non-distinct set), split so that token[1:]
    # after 2 bytes and token[2:] after 1 byte (of the same token) leave the same rest
    cj0 = np.ones(len(long), dtype=np.int64)
    sub, _ = rest_walk.leftovers(tm, vocab, long, cj0, True)
    ok = np.flatnonzero(sub.length > 2)
    more = rng.choice(ok, size=50)
    ci = np.concatenate([ok, ok, more])
    cj = np.concatenate([np.ones(len(ok), dtype=np.int64), np.full(len(ok), 2, dtype=np.int64),
                         rng.integers(1, sub.length[more])])
    cases.append((sub, ci, cj, False))
    cases.append((sub, ci[:0], cj[:0], False))  # no crossing at all
    for rs, ci, cj, distinct in cases:
        got, got_pos = rest_walk.leftovers(tm, rs, ci, cj, distinct)
        with monkeypatch.context() as m:
            m.setattr(rest_walk, "walkc", None)
            want, want_pos = rest_walk.leftovers(tm, rs, ci, cj, distinct)
        _rest_sets_equal(got, want)
        assert np.array_equal(got_pos, want_pos)
    assert len(cases[1][1]) > 20


@pytest.mark.parametrize("seed", range(3))
def test_c_marks_equal_the_numpy_sources(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Walk.mark_sources`` (C: a CSR index or one dense pass) marks exactly ``sources(allowed)``,
    as rest flags and as token bits; ``TokenMatrix.pack_ids`` packs exactly numpy's bits."""
    tm = TokenMatrix.of(_vocab(300 + seed))
    rng = np.random.default_rng(seed)
    vocab = RestSet.vocabulary(tm)
    tried = 0
    for p in PATTERNS + MORE:
        dfa = regex_to_byte_dfa(p)
        w = walk(dfa.trans, dfa.final, 0, vocab, tm, None)
        if w.cross is None:
            continue
        n, cross = len(w.cross), w.cross
        for size in (1, max(1, n // 20), n):  # few allowed (the index), many (one pass)
            allowed = np.sort(rng.choice(n, size=min(size, n), replace=False)).astype(np.int64)
            flags = np.zeros(len(vocab), dtype=bool)
            w.mark_sources(allowed, flags)
            bits = tm.pack_ids(np.array([0], dtype=np.int64))  # bits already set stay set
            w.mark_sources(allowed, bits, vocab.tid)
            with monkeypatch.context() as m:  # the reference: numpy alone, its own index
                m.setattr(rest_walk, "walkc", None)
                ref_w = Walk(w.inside, w.cross, w.src, w.inv)
                want = np.zeros(len(vocab), dtype=bool)
                want[ref_w.sources(allowed)] = True
                ref = tm.pack_ids(np.concatenate([[0], vocab.tid[ref_w.sources(allowed)]]))
                ref2 = tm.pack_ids(np.array([0], dtype=np.int64))
                ref_w.mark_sources(allowed, ref2, vocab.tid)
                ref_index = ref_w._index()
            assert np.array_equal(flags, want)
            assert np.array_equal(bits, ref) and np.array_equal(ref2, ref)
            for a, b in zip(w._index(), ref_index):  # the C counting sort == numpy's stable argsort
                assert a.dtype == b.dtype and np.array_equal(a, b)
            tried += 1
    assert tried > 10
    # the index with many crossings per leftover (a walk over a set that is not distinct)
    inv = rng.integers(0, len(cross), size=5 * len(cross))
    many = Walk(np.zeros(0, dtype=bool), cross, rng.permutation(len(inv)).astype(np.int64), inv)
    got = many._index()
    with monkeypatch.context() as m:
        m.setattr(rest_walk, "walkc", None)
        want = Walk(many.inside, cross, many.src, inv)._index()
    assert all(np.array_equal(a, b) for a, b in zip(got, want))
    ids = rng.choice(tm.size, size=500).astype(np.int64)
    with monkeypatch.context() as m:
        m.setattr(rest_walk, "walkc", None)
        ref = tm.pack_ids(ids)
    assert np.array_equal(tm.pack_ids(ids), ref)
    assert np.array_equal(tm.pack_ids(ids.astype(np.int32)), ref)


def test_c_canonical_shape_equals_the_python_one(monkeypatch) -> None:
    """``dfa_shapes._bfs_shape`` in C (``_dfac.bfs_shape``) and in Python (numpy) give the same
    bytes from every state, including the refusal past ``CANON_MAX`` states (a 300-character
    bounded string)."""
    from trellis.constrain.vocab import dfa_shapes

    dfas = [regex_to_byte_dfa(p) for p in PATTERNS + MORE + [r'"[^"]{0,300}"', r"(?:ab|c){2,40}d"]]
    fast = [[dfa_shapes._bfs_shape(d, q) for q in range(d.num_states)] for d in dfas]
    monkeypatch.setattr(dfa_shapes, "dfac", None)
    slow = [[dfa_shapes._bfs_shape(d, q) for q in range(d.num_states)] for d in dfas]
    assert fast == slow
    assert any(x is None for row in fast for x in row) and any(x is not None for row in fast for x in row)


@pytest.mark.parametrize("seed", range(4))
def test_depth_classes_are_the_states_alike_up_to_the_depth(seed: int) -> None:
    """``_dfac.depth_classes``: two states share a class exactly when they keep alive, and accept
    after, the same byte strings of up to ``depth`` bytes (every string over a small alphabet
    enumerated), on random DFAs with dead bytes, several accepting states and unreachable ones;
    classes are numbered by their first state."""
    import itertools

    from trellis.constrain.automata.dfa_minimise import dfac as kernel

    if kernel is None:
        pytest.skip("the C kernel is not built")
    rng = np.random.default_rng(seed)
    alphabet = [0, 7, 97, 255]
    for _ in range(40):
        n = int(rng.integers(1, 12))
        trans = np.full((n, 256), -1, dtype=np.int32)
        for q in range(n):
            for b in alphabet:
                if rng.random() < 0.75:
                    trans[q, b] = rng.integers(0, n)
        final = rng.random(n) < 0.35
        depth = int(rng.integers(0, 5))
        cls = np.frombuffer(kernel.depth_classes(trans, final, depth), dtype=np.int32)

        def behaviour(q: int) -> tuple:
            out = []
            for k in range(depth + 1):
                for word in itertools.product(alphabet, repeat=k):
                    s = q
                    for b in word:
                        s = trans[s, b] if s >= 0 else -1
                    out.append(-1 if s < 0 else int(final[s]))
            return tuple(out)

        seen = [behaviour(q) for q in range(n)]
        for p in range(n):
            for q in range(n):
                assert (cls[p] == cls[q]) == (seen[p] == seen[q]), (n, depth, p, q)
        firsts = [int(cls[q]) for q in range(n) if cls[q] not in cls[:q]]
        assert firsts == list(range(len(firsts)))
    with pytest.raises(ValueError):
        kernel.depth_classes(np.zeros((2, 256), dtype=np.int32), np.zeros(3, dtype=bool), 1)
    with pytest.raises(ValueError):  # a transition past the last state
        kernel.depth_classes(np.full((2, 256), 2, dtype=np.int32), np.zeros(2, dtype=bool), 1)


@pytest.mark.parametrize("seed", range(3))
def test_pack_where_equals_packing_the_gathered_ids(seed: int) -> None:
    """``TokenMatrix.pack_where`` (C ``set_bits`` with flags) packs exactly ``ids[flags]``, at every
    density, with ids repeated (an OR), and a flag array of the wrong length is refused."""
    tm = TokenMatrix.of(_vocab(seed))
    rng = np.random.default_rng(seed)
    rs = RestSet.vocabulary(tm)
    for density in (0.0, 0.01, 0.5, 0.99, 1.0):
        ids = np.concatenate([rs.tid, rs.tid[: len(rs.tid) // 3]])
        flags = rng.random(len(ids)) < density
        assert np.array_equal(tm.pack_where(ids, flags), tm.pack_ids(ids[flags]))
        assert np.array_equal(tm.pack_where(rs.tid, flags[: len(rs.tid)]), tm.pack_ids(rs.tid[flags[: len(rs.tid)]]))
    if walks.walkc is not None:
        with pytest.raises(ValueError):
            walks.walkc.set_bits(np.zeros(tm.words, dtype=np.int32), rs.tid, np.zeros(3, dtype=np.uint8))
        with pytest.raises(IndexError):
            walks.walkc.set_bits(np.zeros(1, dtype=np.int32), np.array([40], dtype=np.int64), np.ones(1, dtype=np.uint8))


@pytest.mark.parametrize("seed", range(3))
def test_column_classes_are_the_table_with_alike_columns_once(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``dfa_shapes.column_classes``: the C kernel and numpy give the same bytes, and they are the
    table exactly (every column is its class's column; classes numbered by first byte, no two
    alike); the content digest tells apart tables that differ in one cell or one final flag."""
    from trellis.constrain.vocab import dfa_shapes

    rng = np.random.default_rng(seed)
    tables = [regex_to_byte_dfa(p).trans for p in PATTERNS[:6] + [r'"[^"]{0,40}"']]
    for _ in range(30):
        n = int(rng.integers(1, 40))
        t = np.full((n, 256), -1, dtype=np.int32)
        cols = rng.choice(256, size=int(rng.integers(1, 256)), replace=False)
        t[:, cols] = rng.integers(-1, n, size=(n, len(cols)))
        if rng.random() < 0.5:  # some columns copied: classes of several bytes
            t[:, rng.integers(0, 256, 20)] = t[:, [cols[0]]]
        tables.append(t)
    for t in tables:
        cmap, table = dfa_shapes.column_classes(t)
        with monkeypatch.context() as m:
            m.setattr(dfa_shapes, "dfac", None)
            assert dfa_shapes.column_classes(t) == (cmap, table)
        cm = np.frombuffer(cmap, dtype=np.uint8)
        tab = np.frombuffer(table, dtype=np.int32).reshape(t.shape[0], -1)
        assert np.array_equal(tab[:, cm], t)
        firsts = [int(cm[b]) for b in range(256) if cm[b] not in cm[:b]]
        assert firsts == list(range(tab.shape[1]))
        assert len({tab[:, c].tobytes() for c in range(tab.shape[1])}) == tab.shape[1]
    base = regex_to_byte_dfa(r'"[^"]{0,40}"')
    other = base.trans.copy()
    u, b = np.argwhere(other >= 0)[-1]
    other[u, b] = -1
    flipped = base.final.copy()
    flipped[2] = not flipped[2]
    digests = {dfa_shapes.content_digest(ByteDFA(t, f)) for t, f in
               [(base.trans, base.final), (other, base.final), (base.trans, flipped)]}
    assert len(digests) == 3


def _moore(trans: np.ndarray, final: np.ndarray, rounds: int) -> np.ndarray:
    """Moore's refinement, every state every round (numpy), classes numbered by first state."""
    def by_first(cls: np.ndarray) -> np.ndarray:
        _, first, inv = np.unique(cls, return_index=True, return_inverse=True)
        rank = np.empty(len(first), dtype=np.int32)
        rank[np.argsort(first)] = np.arange(len(first))
        return rank[inv.reshape(-1)]

    cls = by_first((final != final[0]).astype(np.int64))
    for _ in range(rounds):
        nxt = np.where(trans >= 0, cls[np.maximum(trans, 0)], -1)
        sig = np.concatenate([cls[:, None], nxt], axis=1)
        _, first, inv = np.unique(sig, axis=0, return_index=True, return_inverse=True)
        new = by_first(inv.reshape(-1))
        if len(first) == cls.max() + 1:
            break
        cls = new
    return cls


@pytest.mark.parametrize("seed", range(3))
def test_depth_classes_by_worklist_equal_moore_rounds(seed: int) -> None:
    """``_dfac.depth_classes`` (refinement by worklist: only the predecessors of states that moved
    are looked at again) equals Moore's refinement over every state every round, on length-bounded
    strings (which split one position a round, for up to ~60 rounds) and random DFAs of up to 300
    states, at depths 0-70."""
    from trellis.constrain.automata.dfa_minimise import dfac as kernel

    if kernel is None:
        pytest.skip("the C kernel is not built")
    rng = np.random.default_rng(seed)
    cases = [(regex_to_byte_dfa(p).trans, regex_to_byte_dfa(p).final)
             for p in [r'"[^"]{0,60}"', r'[a-c]{3,50}x', r"(?:ab|c){2,40}d", r'"(?:[^"\\]|\\.){5,30}"']]
    for _ in range(12):
        n = int(rng.integers(1, 300))
        trans = np.full((n, 256), -1, dtype=np.int32)
        live = rng.choice(256, size=int(rng.integers(1, 12)), replace=False)
        for b in live:
            on = rng.random(n) < 0.7
            trans[on, b] = rng.integers(0, n, size=int(on.sum()))
        cases.append((trans, rng.random(n) < 0.2))
    for trans, final in cases:
        for depth in (0, 1, 2, 5, 17, 48, 70):
            got = np.frombuffer(kernel.depth_classes(trans, np.ascontiguousarray(final, np.bool_), depth),
                                dtype=np.int32)
            assert np.array_equal(got, _moore(trans, final, depth)), (trans.shape[0], depth)


def _reachable_table(trans: np.ndarray, final: np.ndarray, q: int) -> tuple[np.ndarray, np.ndarray]:
    """The sub-automaton reachable from ``q`` as a [n, 256] table and flags, states numbered in
    breadth-first order of first appearance, each state's targets by byte (the test's own)."""
    order, index = [q], {q: 0}
    for u in order:
        for b in range(256):
            v = int(trans[u, b])
            if v >= 0 and v not in index:
                index[v] = len(order)
                order.append(v)
    sub = np.array([[index[int(v)] if v >= 0 else -1 for v in trans[u]] for u in order], dtype=np.int32)
    return sub, final[order]


@pytest.mark.parametrize("kernel", [True, False])
def test_compact_shapes_are_the_reachable_tables(monkeypatch: pytest.MonkeyPatch, kernel: bool) -> None:
    """A shape decodes to the [n, 256] table and flags of the sub-automaton reachable from its
    state, renumbered breadth-first (so equal shapes are equal sub-automata), in C and in numpy;
    whether its accepting states end dead is read off it; random DFAs with dead bytes and
    unreachable states too."""
    import struct

    from trellis.constrain.vocab import dfa_shapes

    if not kernel:
        monkeypatch.setattr(dfa_shapes, "dfac", None)
    dfas = [regex_to_byte_dfa(p) for p in PATTERNS + MORE + [r'"[^"]{0,100}"', r"(?:ab|c){2,40}d"]]
    rng = np.random.default_rng(5)
    for n in (1, 3, 9, 40):
        trans = rng.integers(-1, n, size=(n, 256)).astype(np.int32)
        trans[:, rng.random(256) < 0.5] = -1  # columns dead everywhere: few byte classes
        dfas.append(ByteDFA(trans, rng.random(n) < 0.3))
    seen = 0
    for d in dfas:
        for q in range(d.num_states):
            shape = dfa_shapes._bfs_shape(d, q)
            sub, fin = _reachable_table(d.trans, d.final, q)
            if len(sub) > dfa_shapes.CANON_MAX:
                assert shape is None
                continue
            n, nc = struct.unpack_from("<ii", shape, 1)
            cmap = np.frombuffer(shape, dtype=np.uint8, count=256, offset=9)
            table = np.frombuffer(shape, dtype=np.int32, count=n * nc, offset=9 + 256).reshape(n, nc)
            assert shape[:1] == b"C" and len(shape) == 9 + 256 + 4 * n * nc + n
            assert np.array_equal(table[:, cmap], sub)
            assert shape[9 + 256 + 4 * n * nc:] == fin.astype(np.bool_).tobytes()
            assert len(set(map(bytes, table.T))) == nc  # each column once
            assert dfa_shapes._ends_dead(shape) == (not (fin & (sub >= 0).any(axis=1)).any())
            seen += 1
    assert seen > 300
    if kernel:
        with pytest.raises(ValueError):  # a transition past the last state
            dfa_shapes.dfac.bfs_shape(np.full((2, 256), 2, dtype=np.int32), np.zeros(2, dtype=bool), 0, 256)
        with pytest.raises(ValueError):  # tables of different sizes
            dfa_shapes.dfac.bfs_shape(np.zeros((2, 256), dtype=np.int32), np.zeros(3, dtype=bool), 0, 256)
