"""The C walk kernel (``trellis/constrain/_walkc.c``) returns exactly what the numpy walks return,
element for element and in the same order: inside flags, crossings, and the leftover rest sets
(their order matters: walks over leftovers are cached on disk by the key of the walk that made
them, so processes with different kernels must agree on every index). Random vocabularies full of
shared prefixes, twins and NUL bytes; terminal DFAs from every state; follow sets; leftovers of
leftovers."""

from __future__ import annotations

import numpy as np
import pytest

from trellis.constrain import rest_walk
from trellis.constrain.regex import regex_to_byte_dfa
from trellis.constrain.rest_walk import RestSet, Walk, walk, walk_numpy
from trellis.constrain.trie_walk import walk_vocabulary, walk_vocabulary_numpy
from trellis.constrain.walks import TokenMatrix

from .test_trie_walk import PATTERNS, _vocab

pytestmark = pytest.mark.skipif(rest_walk.KERNEL != "c", reason="the C kernel is not built in this install")

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
