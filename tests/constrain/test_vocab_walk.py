"""``vocab_walk.walk``: the trie, flat and sliced walks agree, and the leftovers' cache key names
the method that ordered them, so walks over leftovers cached under one method's order are never
read back for another's (masks stay exact when the choice changes inside one process)."""

from __future__ import annotations

import numpy as np

from tests.constrain.test_slices import _vocab
from tests.constrain.test_trie_walk import _canon
from trellis.constrain import compile
from trellis.constrain.earley import scannerless
from trellis.constrain.vocab import vocab_walk
from trellis.constrain.compile import COMPILED
from trellis.constrain.automata.regex import regex_to_byte_dfa
from trellis.constrain.vocab.rest_walk import RestSet
from trellis.constrain.vocab.walk_cache import SHARED
from trellis.constrain.vocab.walks import TokenMatrix


def _walks(monkeypatch, pattern: str, q: int) -> dict:
    tm = TokenMatrix.of(_vocab(0))
    dfa = regex_to_byte_dfa(pattern)
    out = {}
    for how, threshold in (("trie", 0), ("flat", 2)):
        monkeypatch.setattr(vocab_walk, "TRIE_MIN_SHARE", threshold)
        out[how] = vocab_walk.walk(dfa, q, tm, None, ("shape", pattern, q))
    return out


def test_trie_and_flat_walks_agree_and_key_their_order(monkeypatch) -> None:
    rs = RestSet.vocabulary(TokenMatrix.of(_vocab(0)))
    # an identifier's interior without "a" (one with every letter takes the word slices, not these
    # methods): many crossings
    out = _walks(monkeypatch, r"[b-z_][0-9_b-z]*", 1)
    (p1, w1), (p2, w2) = out["trie"], out["flat"]
    assert (p1 == p2).all()
    assert _canon(w1, rs) == _canon(w2, rs) and w1.cross is not None
    assert w1.cross.key != w2.cross.key
    again = _walks(monkeypatch, r"[b-z_][0-9_b-z]*", 1)
    assert again["trie"][1].cross.key == w1.cross.key  # the same method, the same key


def test_masks_stay_exact_when_the_walk_method_changes_in_one_process(monkeypatch, tmp_path) -> None:
    """Leftover walks are shared across constraints by the leftovers' key: with one key for every
    method, a vocabulary walk made again by another method (its entry evicted, the walks over its
    leftovers kept) read those walks as indices into the other method's order."""
    vocab = _vocab(2)
    grammar = 'start: (WORD | NUM)+\nWORD: /[a-z_]+/\nNUM: /[0-9]+/\n%ignore " "\n'  # abutting terminals
    text = b"ab_c0 9a b__a90c"
    monkeypatch.setenv("TRELLIS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(scannerless, "WALK_DISK_MIN", 0)  # small leftover walks shared too
    SHARED.clear()
    try:
        for threshold in (0, 2, 0):
            monkeypatch.setattr(vocab_walk, "TRIE_MIN_SHARE", threshold)
            COMPILED.clear()  # a new constraint, sharing walks (SHARED) with the ones before it,
            for k in [k for k in SHARED._mem if not (isinstance(k[1], tuple) and k[1][0] == "x")]:
                del SHARED._mem[k]  # but its vocabulary walks made again (as after an LRU eviction)
            c = compile(grammar, vocab)
            toks = vocab.tokens
            s = c.start()
            for b in text:
                m = c.mask_array(s)
                bits = np.unpackbits(m.view(np.uint8), bitorder="little")[:len(toks)].astype(bool)
                brute = np.array([bool(t) and i not in vocab.eos and c.earley.walk(s, t) is not None
                                  for i, t in enumerate(toks)])
                wrong = np.flatnonzero(bits[:len(toks)] != brute)
                wrong = [i for i in wrong if i not in vocab.eos]
                assert not wrong, (threshold, [toks[i] for i in wrong[:8]])
                s = c.advance(s, toks.index(bytes([b])))
    finally:
        SHARED.clear()
