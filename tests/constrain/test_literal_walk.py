"""``literal_walk`` returns exactly what ``rest_walk.walk`` returns from a DFA state with one path
left: the same tokens inside and the same crossings (token, offset), over the whole vocabulary and
over rest sets of split tokens, on random vocabularies full of shared prefixes, byte-equal twins,
NUL and 0xff bytes, with and without follow sets."""

from __future__ import annotations

import random

import numpy as np
import pytest

from trellis.constrain.automata.byte_dfa import Literal, literal_at
from trellis.constrain.vocab.literal_walk import literal_vocabulary_ids, walk_literal_rests, words_at, words_vocabulary_ids
from trellis.constrain.automata.regex import regex_to_byte_dfa
from trellis.constrain.vocab.rest_walk import RestSet, walk
from trellis.constrain.vocab.walks import TokenMatrix
from trellis.tokens import Vocabulary

from tests.constrain.test_trie_walk import _canon

ALPHA = b'ab c"\\:,\x00\xff\xc3\xa9'
LITERALS = [rb'"ab"', r"a(?:bc)?", r"ab(?:c|c\x00)", r'"a\\b":', r"\xff\xff", r"\x00a", r"a\xffb", r"ab c"]


def _vocab(seed: int) -> Vocabulary:
    rng = random.Random(seed)
    toks = {bytes(rng.choice(ALPHA) for _ in range(rng.randint(1, 6))) for _ in range(500)}
    for lit in (b'"ab"', b"abc", b'"a\\b":', b"\xff\xff", b"a\xffb", b"ab c"):  # every prefix and extension
        toks |= {lit[:i] for i in range(1, len(lit) + 1)}
        toks |= {lit + bytes([c]) for c in ALPHA}
    lst = sorted(toks)
    rng.shuffle(lst)
    lst += lst[:20]  # byte-equal twins
    return Vocabulary(tuple([b"</s>", b""] + lst), eos=frozenset({0}), special=frozenset({0}))


def test_literal_at_finds_chains_only() -> None:
    assert literal_at(regex_to_byte_dfa(r"a(?:bc)?"), 0) == Literal(b"abc", (1, 3))
    assert literal_at(regex_to_byte_dfa(r'"ab"'), 0) == Literal(b'"ab"', (4,))
    assert literal_at(regex_to_byte_dfa(r"ab|ac"), 0) is None  # branches
    assert literal_at(regex_to_byte_dfa(r"(?:ab)+"), 0) is None  # loops
    dfa = regex_to_byte_dfa(r"[xy]abc")
    assert literal_at(dfa, 0) is None and literal_at(dfa, int(dfa.trans[0, ord("x")])) == Literal(b"abc", (3,))


def _vocabulary_walks(seed: int, patterns: list, find):
    """Every state of ``patterns`` where ``find`` (``literal_at`` or ``words_at``) finds paths, with
    and without a random follow set, after checking that the walk by prefix lookups over the
    whole vocabulary equals the flat walk: yields (pattern, state, DFA, the paths, follow set,
    token matrix, vocabulary rests)."""
    tm = TokenMatrix.of(_vocab(seed))
    vocab_rs = RestSet.vocabulary(tm)
    rng = np.random.default_rng(seed)
    for p in patterns:
        dfa = regex_to_byte_dfa(p)
        for q in range(dfa.trans.shape[0]):
            found = find(dfa, q)
            if found is None:
                continue
            for follow in (None, rng.random(256) < 0.5):
                flat = walk(dfa.trans, dfa.final, q, vocab_rs, tm, follow)
                ids, fast = words_vocabulary_ids((found,) if isinstance(found, Literal) else found, vocab_rs, tm, follow)
                assert ids.tolist() == np.flatnonzero(flat.inside).tolist() and not len(fast.inside), (p, q)
                fast.inside = np.zeros(len(vocab_rs), dtype=bool)
                fast.inside[ids] = True
                assert _canon(fast, vocab_rs) == _canon(flat, vocab_rs), (p, q)
                yield p, q, dfa, found, follow, tm, vocab_rs


@pytest.mark.parametrize("seed", range(3))
def test_literal_walks_equal_the_flat_walk(seed: int) -> None:
    splitter = regex_to_byte_dfa(r"(?:[ab]|\xff|\x00)")  # one byte then ends: every token splits after it
    checked = 0
    for p, q, dfa, lit, follow, tm, vocab_rs in _vocabulary_walks(seed, LITERALS, literal_at):
        ids, fast = literal_vocabulary_ids(lit, vocab_rs, tm, follow)  # the one-literal entry point
        assert ids.tolist() == words_vocabulary_ids((lit,), vocab_rs, tm, follow)[0].tolist()
        # rest sets: the leftovers of tokens split after their first byte
        rests = walk(splitter.trans, splitter.final, 0, vocab_rs, tm, None).cross
        assert rests is not None
        flat_r = walk(dfa.trans, dfa.final, q, rests, tm, follow)
        fast_r = walk_literal_rests(lit, rests, tm, follow)
        assert fast_r is not None
        assert _canon(fast_r, rests) == _canon(flat_r, rests), (p, q)
        checked += 1
    assert checked >= 20



ENUMS = [r'"(?:ab|a\\b|abc)"', r"(?:a|ab|ab c)", r"(?:a|ab|ac)", r"a(?:bc)*d", r'(?:\xff\xff|\xffa|\x00)', r'"(?:ab c|ab|"a)",', r"[ab](?:c|\x00)",
         # counted classes: many paths over few shared prefixes, final at every length or not
         r"\n[ \t]{0,4}", r"[ a]{1,3}b", r"[ab]{2}[ \t]{0,2}"]


@pytest.mark.parametrize("seed", range(3))
def test_finite_sub_automata_walk_path_by_path_as_the_flat_walk(seed: int) -> None:
    """A state whose sub-automaton is a finite language (a string enum) is walked path by path
    (``words_at`` + ``words_vocabulary_ids``): the same tokens inside and crossings as the flat
    walk, with and without follow sets, including paths that are prefixes of others."""
    checked = sum(len(words) > 1 for _, _, _, words, *_ in _vocabulary_walks(seed, ENUMS, words_at))
    assert checked >= 10
    assert words_at(regex_to_byte_dfa(r"(?:ab)+"), 0) is None  # loops
    assert words_at(regex_to_byte_dfa(r"a(?:bc)*d"), 0) is None  # a loop beside a finite path
    assert words_at(regex_to_byte_dfa(r"[a-z]{3}"), 0) is None  # 26^3 paths: past MAX_WORDS
    assert words_at(regex_to_byte_dfa(r"(?:ab|ac)d"), 0) == (Literal(b"abd", (3,)), Literal(b"acd", (3,)))


@pytest.mark.parametrize("seed", range(6))
def test_prefix_bounds_in_c_equal_the_bisections(seed: int) -> None:
    """``SortedVocab.prefix_bounds`` (C, where ``_walkc`` is built) equals its bisect form on
    texts that are prefixes, extensions and near misses of the vocabulary's tokens (NUL, 0xff,
    byte-equal twins), and the triples say what they claim about the sorted keys."""
    from trellis.constrain.vocab.literal_walk import SortedVocab
    from trellis.constrain.vocab.walks import walkc

    if walkc is None:
        pytest.skip("the C kernel is not built")
    sv = SortedVocab.of(TokenMatrix.of(_vocab(seed)))
    rng = random.Random(seed)
    texts = [k + bytes(rng.choice(ALPHA) for _ in range(rng.randint(0, 3))) for k in rng.sample(sv.keys, 200)]
    texts += [bytes(rng.choice(ALPHA) for _ in range(rng.randint(1, 8))) for _ in range(200)] + [b"\xff" * 7, b"\x00"]
    for text in texts:
        got = sv.prefix_bounds(text)
        assert got == sv.prefix_bounds_py(text), text
        for k, (lo, eq, hi) in enumerate(got, 1):
            p = text[:k]
            assert all(x == p for x in sv.keys[lo:eq]) and all(x.startswith(p) for x in sv.keys[lo:hi])
            assert (lo == 0 or sv.keys[lo - 1] < p) and (hi == len(sv.keys) or not sv.keys[hi].startswith(p))
        assert len(got) == len(text) or not any(x.startswith(text[:len(got) + 1]) for x in sv.keys)
