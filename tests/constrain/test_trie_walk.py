"""``trie_walk.walk_vocabulary`` returns exactly what ``rest_walk.walk`` returns for the whole
vocabulary: the same tokens inside, the same crossings (token, offset), on random vocabularies
full of shared prefixes, byte-equal twins and NUL bytes, random terminal DFAs and follow sets."""

from __future__ import annotations

import random

import numpy as np
import pytest

from trellis.constrain.automata.regex import regex_to_byte_dfa
from trellis.constrain.vocab.rest_walk import RestSet, walk
from trellis.constrain.vocab.trie_walk import TokenTrie, walk_vocabulary
from trellis.constrain.vocab.walks import TokenMatrix
from trellis.tokens import Vocabulary

PATTERNS = [
    r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt])*"',
    r"[ \t\n]*",
    r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?",
    r"[a-z_]\w*",
    r"(?s:.)*?\*/",
    r"ab|abc|b",
    r"(?:a\x00)+",
    r"[^\n]*\n",
]


def _vocab(seed: int) -> Vocabulary:
    rng = random.Random(seed)
    alpha = b'ab c"\\\n*/_\x00\xc3\xa9.-09'
    toks = {bytes(rng.choice(alpha) for _ in range(rng.randint(1, 7))) for _ in range(400)}
    toks |= {t[:i] for t in list(toks)[:60] for i in range(1, len(t))}  # every prefix of some
    lst = sorted(toks)
    rng.shuffle(lst)
    lst += lst[:15]  # byte-equal twins (a piece and its byte-fallback token)
    return Vocabulary(tuple([b"</s>", b""] + lst), eos=frozenset({0}), special=frozenset({0}))


def _canon(w, rs: RestSet):  # type: ignore[no-untyped-def]
    cross = set()
    if w.cross is not None:
        for s, i in zip(w.src.tolist(), w.inv.tolist()):
            cross.add((int(rs.tid[s]), int(w.cross.tid[i]), int(w.cross.base[i]), int(w.cross.length[i])))
    return np.flatnonzero(w.inside).tolist(), cross


@pytest.mark.parametrize("seed", range(3))
def test_trie_walk_equals_the_flat_walk(seed: int) -> None:
    tm = TokenMatrix.of(_vocab(seed))
    rs = RestSet.vocabulary(tm)
    trie = TokenTrie.of(tm)
    assert trie.nodes == len({t[:i] for t in (tm.tokens[j] for j in tm.order.tolist()) for i in range(1, len(t) + 1)})
    rng = np.random.default_rng(seed)
    for p in PATTERNS:
        dfa = regex_to_byte_dfa(p)
        for q in range(min(dfa.trans.shape[0], 4)):
            for follow in (None, rng.random(256) < 0.5):
                flat = walk(dfa.trans, dfa.final, q, rs, tm, follow)
                via_trie = walk_vocabulary(dfa.trans, dfa.final, q, rs, tm, follow)
                assert _canon(flat, rs) == _canon(via_trie, rs), (p, q)
                # a rest that stays inside is allowed outright: its splits are never reported
                assert not flat.inside[flat.src].any() and not via_trie.inside[via_trie.src].any()
                if via_trie.cross is not None:  # leftovers are the bytes after the split
                    c = via_trie.cross
                    for i in range(len(c)):
                        whole = tm.tokens[int(c.tid[i])]
                        off = int(c.base[i]) // tm.mat_t.shape[1]
                        assert len(whole) - off == int(c.length[i]) > 0


def test_a_cut_walk_releases_the_cut_array() -> None:
    """``_walkc.walk_trie`` takes the cut's buffer once and gives it back: the array can be resized
    after the walk (a buffer still exported refuses it; the cut's was taken twice, released once)."""
    from trellis.constrain.vocab.trie_walk import TrieCut
    from trellis.constrain.vocab.walks import walkc

    if walkc is None:
        pytest.skip("the C walk kernel is not built")
    tm = TokenMatrix.of(_vocab(0))
    rs = RestSet.vocabulary(tm)
    nodes = bytearray(TokenTrie.of(tm).nodes)  # (a bytearray counts its exports; numpy does not)
    dfa = regex_to_byte_dfa(PATTERNS[3])
    walk_vocabulary(dfa.trans, dfa.final, 0, rs, tm, None, TrieCut(nodes, np.zeros(len(rs), dtype=bool)))  # type: ignore[arg-type]
    nodes.append(0)  # BufferError while an export is held
