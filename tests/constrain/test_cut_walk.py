"""``cut_walk.patch`` returns exactly the vocabulary walk of a cut DFA (the tokens that stay
inside, as packed bits, and the crossings), or declines: from every state of cut DFAs made by
``regex.difference`` (key tries, regex subtrahends) and ``regex.restrict_first_char``, with and
without follow sets, on random vocabularies full of key-spelling tokens. And the engine takes the
patch on a real schema, with masks equal to those of full walks."""

from __future__ import annotations

import random

import numpy as np
import pytest

from trellis.constrain.automata.byte_dfa import ByteDFA
from trellis.constrain.vocab.cut_walk import Simulation, patch
from trellis.constrain.automata.regex import difference, regex_to_byte_dfa, restrict_first_char
from trellis.constrain.vocab.rest_walk import RestSet, walk
from trellis.constrain.vocab.walks import TokenMatrix
from trellis.tokens import Vocabulary

from tests.constrain.test_trie_walk import _canon

ALPHA = b'ab"\\:,}x\xc3\xa9'
STRING = r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt])*"'
KEYS = [b'"a"', b'"ab"', b'"ba"', b'"a\\"b"', b'"\xc3\xa9"']


def _vocab(seed: int) -> Vocabulary:
    rng = random.Random(seed)
    toks = {bytes(rng.choice(ALPHA) for _ in range(rng.randint(1, 6))) for _ in range(600)}
    for k in KEYS:  # every piece of every key, and each key followed by more
        toks |= {k[i:j] for i in range(len(k)) for j in range(i + 1, len(k) + 1)}
        toks |= {k + bytes([c]) for c in b",:}"}
    lst = sorted(toks)
    rng.shuffle(lst)
    return Vocabulary(tuple([b"</s>"] + lst), eos=frozenset({0}), special=frozenset({0}))


def _cuts():
    string = regex_to_byte_dfa(STRING)
    word = regex_to_byte_dfa(r"[ab]+")
    yield "string minus keys", string, difference(string, [_lit(k) for k in KEYS])
    yield "string minus a regex", string, difference(string, [regex_to_byte_dfa(r'"a[ab]*"')])
    yield "word minus words", word, difference(word, [_lit(b"ab"), _lit(b"ba"), _lit(b"a")])
    yield "short word minus its long form", regex_to_byte_dfa(r"ab?"), difference(regex_to_byte_dfa(r"ab?"), [_lit(b"ab")])
    yield "first character restricted", string, restrict_first_char(string, ((ord('"'), ord('"')),))
    yield "first character restricted away", word, restrict_first_char(word, ((ord("b"), ord("b")),))


def _lit(b: bytes):
    return regex_to_byte_dfa("".join(f"\\x{c:02x}" for c in b))


def _full(dfa, q, tm, follow):
    rs = RestSet.vocabulary(tm)
    w = walk(dfa.trans, dfa.final, q, rs, tm, follow)
    return tm.pack_ids(rs.tid[w.inside]), w


def _same(entry, full, tm) -> bool:
    rs = RestSet.vocabulary(tm)
    packed, w = entry
    fpacked, fw = full
    if not np.array_equal(packed, fpacked):
        return False
    fw.inside = np.zeros(len(rs), dtype=bool)  # compare crossings only (inside is in the bits)
    w2 = type(w)(np.zeros(len(rs), dtype=bool), w.cross, w.src, w.inv)
    return _canon(w2, rs)[1] == _canon(fw, rs)[1]


@pytest.mark.parametrize("seed", range(3))
def test_patched_walks_equal_full_walks_of_the_cut_dfa(seed: int) -> None:
    tm = TokenMatrix.of(_vocab(seed))
    rng = np.random.default_rng(seed)
    patched = declined = 0
    for name, base, cut in _cuts():
        assert cut is not None, name
        sim = Simulation.of(cut, base)
        assert sim is not None, name
        for follow in (None, rng.random(256) < 0.5):
            for q in range(cut.num_states):
                if sim.origin[q] < 0:  # unreachable from the start: never scanned
                    assert patch(sim, q, _full(base, 0, tm, follow), tm, follow) is None
                    continue
                got = patch(sim, q, _full(base, int(sim.origin[q]), tm, follow), tm, follow)
                if got is None:
                    declined += 1
                    continue
                patched += sim.tainted[q]
                assert _same(got, _full(cut, q, tm, follow), tm), (name, q, follow is None)
    assert patched > 20 and declined >= 1  # both branches taken: the test is not vacuous


@pytest.mark.parametrize("seed", range(3))
def test_a_trie_cut_is_simulated_from_its_construction_as_by_search(seed: int) -> None:
    # ``Simulation.of`` takes what ``difference`` recorded for a cut by words (byte_dfa.Cut)
    # instead of searching: it must equal the search on the same tables (origins, special
    # places, taint and every tainted state's special paths), over random key sets that
    # prefix one another, share prefixes, spell the empty string or the whole language.
    rng = random.Random(seed)
    bases = [regex_to_byte_dfa(STRING), regex_to_byte_dfa(r"[ab]+"), regex_to_byte_dfa(r"ab?"),
             regex_to_byte_dfa(r'"(?:a|b\\")*"?')]
    checked = 0
    for _ in range(40):
        base = rng.choice(bases)
        words = set()
        for _ in range(rng.randint(1, 8)):
            w = bytes(rng.choice(b'ab"\\') for _ in range(rng.randint(0, 6)))
            words.add(b'"' + w + b'"' if rng.random() < 0.6 else w)
        cut = difference(base, [_lit(w) if w else regex_to_byte_dfa("(?:)") for w in sorted(words)])
        if cut is None:
            continue
        if cut.cut is None:  # an empty word is no chain: the general product was taken
            continue
        searched = Simulation.of(ByteDFA(cut.trans, cut.final), base)  # the same tables, no record
        fast = Simulation.of(cut, base)
        assert searched is not None and fast is not None
        for f in ("origin", "special_final", "removed", "tainted"):
            assert np.array_equal(getattr(fast, f), getattr(searched, f)), (words, f)
        for q in np.flatnonzero(fast.tainted).tolist():
            for max_len in (2, 64):
                assert fast.special_paths(q, max_len) == searched.special_paths(q, max_len)
        checked += 1
    assert checked >= 20


@pytest.mark.parametrize("seed", range(3))
def test_c_special_paths_equal_the_python_search(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Simulation.special_paths`` in C (``_walkc.special_paths``) returns the Python search's
    list, path for path and in order, from every tainted state of random cuts (key tries and
    regex subtrahends), at several depths, and refuses (None) at the same bounds."""
    from trellis.constrain.vocab import cut_walk

    if cut_walk.walkc is None:
        pytest.skip("the C walk kernel is not built")
    rng = random.Random(seed)
    string, word = regex_to_byte_dfa(STRING), regex_to_byte_dfa(r"[ab]+")
    sims = [Simulation.of(cut, base) for _, base, cut in _cuts()]
    for _ in range(30):
        words = {b'"' + bytes(rng.choice(b'ab"\\:') for _ in range(rng.randint(0, 7))) + b'"'
                 for _ in range(rng.randint(1, 12))}
        cut = difference(string, [_lit(w) for w in sorted(words)])
        if cut is not None:
            sims.append(Simulation.of(cut, string))
    sims.append(Simulation.of(difference(word, [regex_to_byte_dfa(r"a[ab]b")]), word))
    compared = refused = 0
    for bounds in ((cut_walk.MAX_PATHS, cut_walk.MAX_NODES), (6, 9)):
        monkeypatch.setattr(cut_walk, "MAX_PATHS", bounds[0])
        monkeypatch.setattr(cut_walk, "MAX_NODES", bounds[1])
        for sim in sims:
            assert sim is not None
            for q in np.flatnonzero(sim.tainted).tolist():
                for max_len in (1, 3, 64):
                    fast = sim.special_paths(q, max_len)
                    with monkeypatch.context() as m:
                        m.setattr(cut_walk, "walkc", None)
                        slow = sim.special_paths(q, max_len)
                    assert fast == slow, (q, max_len, bounds)
                    compared += 1
                    refused += slow is None
    assert compared > 500 and refused > 20


@pytest.mark.parametrize("seed", range(3))
def test_c_affected_rests_equal_the_python_ones(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``affected_rests`` in C (``_walkc.prefix_ranges``, one call for every path) picks the same
    tokens as a bisection per path: paths that spell a token, prefix many, prefix none, go past
    every token, the empty path, and none at all."""
    from trellis.constrain.vocab import cut_walk

    if cut_walk.walkc is None:
        pytest.skip("the C walk kernel is not built")
    tm = TokenMatrix.of(_vocab(seed))
    rng = random.Random(seed)
    sets = [[], [b""], [b"\xff\xff"], [b"a" * 9]]
    for _ in range(40):
        sets.append([bytes(rng.choice(ALPHA) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 30))])
    hits = 0
    for paths in sets:
        fast = cut_walk.affected_rests(paths, tm)
        with monkeypatch.context() as m:
            m.setattr(cut_walk, "walkc", None)
            slow = cut_walk.affected_rests(paths, tm)
        assert fast.dtype == slow.dtype and np.array_equal(fast, slow), paths
        hits += len(slow) > 0
    assert hits > 20


@pytest.mark.parametrize("seed", range(3))
def test_patches_memoised_on_a_shared_base_walk_equal_full_walks(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # The walk cache hands one base entry (a string's interior) to every open object's key cut, in
    # every schema: ``patch`` memoises its result on that walk where every special path ends in a
    # removed byte (``_removal_key``). Many cuts (random key sets, and word cuts whose paths end at
    # a state that is no longer final, which must not be memoised) share base entries here; every
    # answer, memoised or not, must equal the full walk of its own cut DFA.
    from trellis.constrain.vocab import cut_walk

    tm = TokenMatrix.of(_vocab(seed))
    rng = random.Random(seed)
    follows = [None, np.random.default_rng(seed).random(256) < 0.5]
    bases = {"string": regex_to_byte_dfa(STRING), "word": regex_to_byte_dfa(r"[ab]+")}
    entries: dict = {}
    computed = []
    real = cut_walk._patch
    monkeypatch.setattr(cut_walk, "_patch", lambda *a: computed.append(1) or real(*a))
    calls = unmemoisable = 0
    for _ in range(16):
        kind = rng.choice(list(bases))
        base = bases[kind]
        if kind == "string":
            words = {b'"' + bytes(rng.choice(b'ab\\x') for _ in range(rng.randint(1, 4))) + b'"'
                     for _ in range(rng.randint(1, 5))}
        else:
            words = {bytes(rng.choice(b"ab") for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(1, 3))}
        cut = difference(base, [_lit(w) for w in sorted(words)])
        if cut is None:
            continue
        sim = Simulation.of(cut, base)
        assert sim is not None
        for fi, follow in enumerate(follows):
            for q in range(cut.num_states):
                if sim.origin[q] < 0 or not sim.tainted[q]:
                    continue
                o = int(sim.origin[q])
                entry = entries.setdefault((kind, o, fi), _full(base, o, tm, follow))
                paths = sim.special_paths(q, tm.max_len)
                unmemoisable += paths is not None and cut_walk._removal_key(sim, q, paths, follow) is None
                calls += 1
                got = patch(sim, q, entry, tm, follow)
                if got is not None:
                    assert _same(got, _full(cut, q, tm, follow), tm), (kind, sorted(words), q, fi)
    # memo hits across cuts, and paths the memo must leave to the computation: not vacuous
    assert calls - len(computed) > 20 and unmemoisable > 5, (calls, len(computed), unmemoisable)


def test_a_dfa_that_does_not_simulate_is_refused() -> None:
    a, b = regex_to_byte_dfa(r"ab"), regex_to_byte_dfa(r"ac")
    assert Simulation.of(a, b) is None  # a transition the base lacks
    assert Simulation.of(regex_to_byte_dfa(r"a"), regex_to_byte_dfa(r"a|b")) is not None


@pytest.mark.model
def test_the_engine_patches_open_objects_on_gemma_with_unchanged_masks() -> None:
    from trellis.constrain import compile
    from trellis.constrain.frontends.json_schema import JsonSchema
    from trellis.constrain.earley.scannerless import EarleyConstraint
    from trellis.models import load

    h = load()
    schema = {"type": "object", "properties": {"hidden": {"type": "boolean"}, "extra": {"type": "string"},
                                               "list": {"type": "array", "items": {"type": "integer"}}},
              "additionalProperties": True}
    doc = '{"hidden":true,"extra":"list","list":[1,2],"hid":"x","listing":{},"hidden2":null}'
    a = compile(JsonSchema(schema), h.vocab)
    b = EarleyConstraint(a.ir, h.vocab)  # (compile would return ``a`` itself, memoised)
    b._cut_inside = lambda d, q, t: None  # full walks only
    sa, sb = a.start(), b.start()
    for tok in h.tokenizer(doc, add_special_tokens=False).input_ids:
        assert np.array_equal(a.mask_array(sa), b.mask_array(sb))
        sa, sb = a.advance(sa, tok), b.advance(sb, tok)
        assert sa is not None and sb is not None
    assert any(v is not None for v in a._cut_entries.values())


def test_member_is_isin_for_a_sorted_pool() -> None:
    from trellis.constrain.vocab.rest_walk import member

    rng = np.random.default_rng(0)
    for n, m in [(0, 5), (5, 0), (1, 1), (50, 7), (300, 300)]:
        pool = np.unique(rng.integers(0, 40, m))
        x = rng.integers(-2, 45, n)
        assert member(x, pool).tolist() == np.isin(x, pool).tolist()
