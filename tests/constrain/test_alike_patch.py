"""``alike_patch``: a vocabulary walk patched from the walk of a state that walks alike on most
tokens equals the state's full walk (the same tokens inside, the same crossings), on length-bounded strings and
other chains walked position by position, with and without follow sets, and the patch is taken."""

from __future__ import annotations

import random

import numpy as np
import pytest

from trellis.constrain.automata.regex import regex_to_byte_dfa
from trellis.constrain.vocab import alike_patch, vocab_walk
from trellis.constrain.vocab.walks import walkc
from trellis.constrain.vocab.rest_walk import RestSet, walk
from trellis.constrain.vocab.walks import TokenMatrix
from trellis.tokens import Vocabulary

from tests.constrain.test_trie_walk import _canon

ALPHA = b'abc "x\\-\xc3\xa9'
# Chains of a broad class with a length bound (a schema's minLength/maxLength), and some that
# are not chains (nothing to patch from, or alike only shallowly).
PATTERNS = [
    r'[^"\\]{12}"',
    r'[^"\\]{3,14}"',
    r'(?:[^"\\]|\\"){0,9}"',
    r'[a-c x\-]{10}(?:"|x")',
    r'[^x]{2,11}x[^"]{4}"',
    r'(?:ab|[^a"]){0,8}"',
    r'[^"]*"',
]


def _vocab(seed: int) -> Vocabulary:
    rng = random.Random(seed)
    toks = {bytes(rng.choice(ALPHA) for _ in range(rng.randint(1, 12))) for _ in range(900)}
    toks |= {t[:i] for t in list(toks)[:80] for i in range(1, len(t))}
    lst = sorted(toks)
    rng.shuffle(lst)
    lst += lst[:10]  # byte-equal twins
    return Vocabulary(tuple([b"</s>", b""] + lst), eos=frozenset({0}), special=frozenset({0}))


def _tokens(packed: np.ndarray, tm: TokenMatrix) -> list[int]:
    bits = np.unpackbits(packed.view(np.uint8), bitorder="little")[: tm.size]
    return np.flatnonzero(bits).tolist()


@pytest.mark.skipif(walkc is None, reason="the pairs are walked in C")
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("max_bytes", [0, 8])
def test_patched_walks_equal_full_walks(seed: int, max_bytes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(alike_patch, "MAX_SHARE", 0.9)  # a small vocabulary: most tokens hold the quote
    monkeypatch.setattr(alike_patch, "MAX_BYTES", max_bytes)  # 0: narrowed by the first divergence's depth only
    monkeypatch.setattr(vocab_walk, "TRIE_MIN_SHARE", 0.0)  # every state is "broad" here
    hits = []
    patch = alike_patch.patched

    def counted(*a, **k):  # type: ignore[no-untyped-def]
        r = patch(*a, **k)
        hits.append(r is not None)
        return r

    monkeypatch.setattr(alike_patch, "patched", counted)
    tm = TokenMatrix.of(_vocab(seed))
    rs = RestSet.vocabulary(tm)
    rng = np.random.default_rng(seed)
    for p in PATTERNS:
        for follow in (None, rng.random(256) < 0.6):
            dfa = regex_to_byte_dfa(p)
            dfa.__dict__.pop("_alike_refs", None)  # (a memoised DFA: no references from another case)
            # the states along a value, as a document meets them, then the others in any order
            order, q, text = [], 0, "ab\u00e9c x-" * 3
            for ch in text.encode():
                q = int(dfa.trans[q, ch])
                if q < 0:
                    break
                if q not in order:
                    order.append(q)
            rest = [s for s in range(dfa.num_states) if s not in order]
            random.Random(seed).shuffle(rest)
            order += rest
            for q in order:
                packed, w = vocab_walk.walk(dfa, q, tm, follow, ("test", p, q))
                full = walk(dfa.trans, dfa.final, q, rs, tm, follow)
                want_inside, want_cross = _canon(full, rs)
                assert _tokens(packed, tm) == sorted(rs.tid[want_inside].tolist()), (p, q)
                w.inside = np.zeros(len(rs), dtype=bool)
                assert _canon(w, rs)[1] == want_cross, (p, q)
    assert sum(hits) >= 100  # the patch was taken, not only the full walks compared


@pytest.mark.skipif(walkc is None, reason="the pairs are walked in C")
def test_divergence_names_the_bytes_two_states_part_on() -> None:
    """Two positions of a length-bounded string part only on the closing quote, first where the
    nearer end is; two of a fixed-length one on every character too; a state and itself never."""
    from trellis.constrain.vocab.rest_walk import c_bool, c_table

    for pattern, want in ((r'[a-c]{3,}"', {ord('"')}), (r'[a-c]{9}"', {ord(c) for c in 'abc"'})):
        dfa = regex_to_byte_dfa(pattern)
        t, f = c_table(dfa.trans), c_bool(dfa.final)
        q2 = int(dfa.trans[int(dfa.trans[0, ord("a")]), ord("a")])  # after two characters
        got, first = walkc.divergence(t, f, 0, q2, 48)
        assert set(np.flatnonzero(np.frombuffer(got, dtype=np.uint8)).tolist()) == want, pattern
        assert first == (2 if pattern.endswith(',}"') else 8), (pattern, first)  # the nearer end
        got, first = walkc.divergence(t, f, q2, q2, 48)
        assert not any(got) and first == 49
    with pytest.raises(ValueError):
        walkc.divergence(t, f, 0, dfa.num_states, 48)


@pytest.mark.skipif(walkc is None, reason="references are kept only with the C kernel")
def test_references_are_held_by_a_bounded_number_of_dfas(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process meeting one new DFA after another keeps references on the latest ``MAX_HOLDERS``
    only (each holds packed rows and crossings)."""
    from collections import OrderedDict

    monkeypatch.setattr(alike_patch, "MAX_HOLDERS", 3)
    monkeypatch.setattr(alike_patch, "_HOLDERS", OrderedDict())
    tm = TokenMatrix.of(_vocab(0))
    rs = RestSet.vocabulary(tm)
    dfas = [regex_to_byte_dfa(f'[^"]{{{n}}}"') for n in range(40, 45)]
    for dfa in dfas:
        w = walk(dfa.trans, dfa.final, 0, rs, tm)
        alike_patch.remember(dfa, 0, tm, None, tm.pack_ids(rs.tid[w.inside]), w)
    assert [("_alike_refs" in d.__dict__) for d in dfas] == [False, False, True, True, True]
    state = alike_patch.saved()  # what a benchmark puts back between inputs
    alike_patch.remember(dfas[0], 0, tm, None, tm.pack_ids(rs.tid), walk(dfas[0].trans, dfas[0].final, 0, rs, tm))
    alike_patch.restore(state)
    assert [("_alike_refs" in d.__dict__) for d in dfas] == [False, False, True, True, True]
    from trellis.constrain.compile import clear_caches

    clear_caches()  # what a new process starts from: no references
    assert not any("_alike_refs" in d.__dict__ for d in dfas) and not alike_patch._HOLDERS


@pytest.mark.skipif(walkc is None, reason="references are kept only with the C kernel")
def test_references_belong_to_their_token_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reference is found only by the very token matrix it was walked over: references are kept
    on memoised DFAs, which outlive a vocabulary, and a freed matrix's id is reused by the next."""
    from collections import OrderedDict

    monkeypatch.setattr(alike_patch, "_HOLDERS", OrderedDict())
    tm = TokenMatrix.of(_vocab(0))
    rs = RestSet.vocabulary(tm)
    dfa = regex_to_byte_dfa(r'[^"\\]{0,20}"')
    dfa.__dict__.pop("_alike_refs", None)
    w = walk(dfa.trans, dfa.final, 0, rs, tm)
    alike_patch.remember(dfa, 0, tm, None, tm.pack_ids(rs.tid[w.inside]), w)
    q = int(dfa.trans[0, ord("a")])
    assert alike_patch.patched(dfa, q, tm, None) is not None
    other = TokenMatrix.of(_vocab(1))
    key = next(iter(dfa.__dict__["_alike_refs"]))
    # the other matrix under the first one's id (as when the first is freed and its id reused)
    dfa.__dict__["_alike_refs"] = {(id(other), key[1]): dfa.__dict__["_alike_refs"][key]}
    assert alike_patch.patched(dfa, q, other, None) is None
    dfa.__dict__.pop("_alike_refs", None)
