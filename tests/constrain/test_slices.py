"""Token slices (``slices.py``): a state that contains a slice is walked over the slice's
complement only, and that must be exactly the whole-vocabulary walk: the same tokens inside, the
same crossings. ``contains`` must never claim a slice a state does not keep alive whole."""

from __future__ import annotations

import importlib
import random

import numpy as np
import pytest

from tests.constrain.test_trie_walk import _canon
from tests.constrain.test_trie_walk import _vocab as trie_vocab
from trellis.constrain import JsonSchema, compile
from trellis.constrain.vocab import slices
from trellis.constrain.automata.regex import regex_to_byte_dfa
from trellis.constrain.vocab.rest_walk import RestSet
from trellis.constrain.vocab.slices import contains, slice_for, walk_sliced
from trellis.constrain.vocab.trie_walk import TokenTrie, walk_vocabulary
from trellis.constrain.vocab.walks import TokenMatrix
from trellis.tokens import Vocabulary

COMPILED = importlib.import_module("trellis.constrain.compile").COMPILED  # (the module, not the function)

PATTERNS = [
    r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"',  # a JSON string
    r'"[^"\n]*"',
    r"//[^\n]*",
    r"#[^\r\n]*\n",
    r"(?s:.)*",
    r'"[a-z]{0,3}"',  # bounded: contains no slice
    r"[a-z_]\w*",
    r"/\*(?:\*(?!/)|[^*])*\*/",
    r'[^"]{2,}',
    r'"https?://[^"\\\x00-\x1f\u2028\u2029]+"',  # a JSON Schema pattern's ".+" in a JSON string
]


def _vocab(seed: int) -> Vocabulary:
    """test_trie_walk's random vocabulary, plus tokens with tabs, '#', DEL, a whole and a cut
    euro sign, and every single byte (so any text can be spelled)."""
    base = trie_vocab(seed)
    rng = random.Random(seed + 100)
    extra = [bytes(rng.choice(b'a "\\\t#\x7f\xe2\x82\xac') for _ in range(rng.randint(1, 6))) for _ in range(150)]
    extra += ["é€ab".encode(), "€".encode()[:2], b"\x82\xac", b"plain words", b" more text"]
    extra += ["a\u2028b".encode(), "\u2029".encode(), "\u2028".encode()[:2]]  # line terminators ``.`` refuses
    extra += [bytes([b]) for b in range(256)]
    toks = list(dict.fromkeys(list(base.tokens) + extra))
    return Vocabulary(tuple(toks), eos=base.eos, special=base.special)


def _alive(dfa_trans: np.ndarray, q: int, data: bytes) -> bool:
    for b in data:
        q = int(dfa_trans[q, b])
        if q < 0:
            return False
    return True


def _covered_walks_equal_whole_walks(seed: int, patterns: list[str], cover) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """Every state of ``patterns``' DFAs that ``cover(tm, dfa, q)`` covers, walked over the cover's
    rest with and without a follow set, equals the whole walk; (states covered, by bounded covers)."""
    tm = TokenMatrix.of(_vocab(seed))
    rs = RestSet.vocabulary(tm)
    rng = np.random.default_rng(seed)
    used = bounded = 0
    for pat in patterns:
        dfa = regex_to_byte_dfa(pat)
        for q in range(dfa.num_states):
            cov = cover(tm, dfa, q)
            if cov is None:
                continue
            used += 1
            bounded += not isinstance(cov, slices.Slice)
            for follow in (None, rng.random(256) < 0.5):
                packed, w = walk_sliced(cov, dfa.trans, dfa.final, q, tm, follow)
                whole = walk_vocabulary(dfa.trans, dfa.final, q, rs, tm, follow)
                assert _canon(w, rs) == _canon(whole, rs), (pat, q, cov.pattern)
                assert (packed == tm.pack_ids(rs.tid[whole.inside])).all(), (pat, q)
    return used, bounded


@pytest.mark.parametrize("seed", range(3))
def test_sliced_walks_equal_the_whole_walk(seed: int) -> None:
    used, _ = _covered_walks_equal_whole_walks(seed, PATTERNS, lambda tm, dfa, q: slice_for(tm, dfa.trans, q))
    assert used >= 5  # string, comment and free-text interiors took the sliced path


@pytest.mark.parametrize("seed", range(3))
def test_contains_only_what_the_state_keeps_alive(seed: int) -> None:
    tm = TokenMatrix.of(_vocab(seed))
    toks = tm.tokens
    claimed = refused = 0
    for pat in PATTERNS:
        dfa = regex_to_byte_dfa(pat)
        for q in range(dfa.num_states):
            for sl in slices.slices(tm):
                members = [toks[t] for t in RestSet.vocabulary(tm).tid[sl.inside].tolist()]
                if contains(sl, dfa.trans, q):
                    claimed += 1
                    assert all(_alive(dfa.trans, q, m) for m in members), (pat, q, sl.pattern)
                else:
                    refused += 1
    assert claimed and refused


def test_which_states_contain_which_slice() -> None:
    tm = TokenMatrix.of(_vocab(0))
    printable, json_body, dot, single, words, lower = slices.slices(tm)
    string = regex_to_byte_dfa(PATTERNS[0])
    inner = int(string.trans[0, ord('"')])
    assert not contains(printable, string.trans, inner)  # a quote ends it
    assert contains(json_body, string.trans, inner)
    assert not contains(json_body, string.trans, 0)  # before the opening quote
    assert not contains(single, string.trans, inner)  # it keeps '"' alive, which ends a JSON string
    dotted = regex_to_byte_dfa(PATTERNS[-1])  # a pattern's ``.+``: every JSON character but U+2028/9
    after = int(dotted.trans[0, ord('"')])
    for b in b"https://":
        after = int(dotted.trans[after, b])
    assert not contains(json_body, dotted.trans, after) and contains(dot, dotted.trans, after)
    assert slice_for(tm, dotted.trans, after) is dot and slice_for(tm, string.trans, inner) is json_body
    assert not np.array_equal(dot.inside, json_body.inside)  # this vocabulary has tokens with U+2028/9
    plain = TokenMatrix.of(trie_vocab(0))  # without them the very members: shared, not copied
    assert slices.slices(plain)[2].inside is slices.slices(plain)[1].inside
    assert slices.slices(plain)[2].bounded is slices.slices(plain)[1].bounded
    sql = regex_to_byte_dfa(r"'[^']*'")
    assert slice_for(tm, sql.trans, int(sql.trans[0, ord("'")])) is single
    comment = regex_to_byte_dfa(PATTERNS[2])
    after = int(comment.trans[int(comment.trans[0, ord("/")]), ord("/")])
    assert slice_for(tm, comment.trans, after) is printable
    ident = regex_to_byte_dfa(r"[\-0-9A-Z_a-z]+(?:\.[\-0-9A-Z_a-z]+)*")  # a hostname's loop: letters and digits
    assert slice_for(tm, ident.trans, int(ident.trans[0, ord("a")])) is words
    assert contains(words, ident.trans, 0) and not contains(json_body, ident.trans, 0)  # from its start too
    host = regex_to_byte_dfa(r"[a-z0-9-]+")  # lowercase only: the lowercase slice, not the words'
    assert slice_for(tm, host.trans, int(host.trans[0, ord("a")])) is lower
    assert slice_for(tm, regex_to_byte_dfa(r"[0-9]+").trans, 0) is None
    bounded = regex_to_byte_dfa(PATTERNS[5])
    assert slice_for(tm, bounded.trans, int(bounded.trans[0, ord('"')])) is None
    # a partial UTF-8 character is a member (it stays alive) and the slices' DFAs keep UTF-8 whole
    assert printable.inside[RestSet.vocabulary(tm).tid.tolist().index(tm.tokens.index("€".encode()[:2]))]
    assert not contains(printable, regex_to_byte_dfa(r"[\x00-\x7f]*").trans, 0)


def test_masks_on_a_grammar_are_unchanged_by_slices(monkeypatch) -> None:
    """Whole masks with and without slices, along a JSON document and inside a comment."""
    vocab = _vocab(1)
    grammar = r'''
start: value
?value: object | STRING | NUMBER
object: "{" [pair ("," pair)*] "}"
pair: STRING ":" value
STRING: /"(?:[^"\\\x00-\x1f]|\\["\\\/bfnrt])*"/
NUMBER: /-?[0-9]+/
COMMENT: /\/\/[^\n]*/
%ignore COMMENT
%ignore /[ \t\n]+/
'''
    text = b'{"a b": // note\n {"x\\"": -12}, "\xc3\xa9": 3}'
    _masks_equal_without(monkeypatch, _answering_none(monkeypatch, "cover_for"), grammar, vocab, text)


def test_masks_of_a_dotted_pattern_are_unchanged_by_its_slice(monkeypatch) -> None:
    """Whole masks of a schema string with a ``.+`` pattern, with the ``.`` slice and without it."""
    schema = JsonSchema({"type": "object", "properties": {"u": {"type": "string", "pattern": "^https?://.+$"}}})
    text = '{"u":"http://a b\u00e9/x?q=1"}'.encode()
    _masks_equal_without(monkeypatch, lambda: monkeypatch.setattr(slices, "DOT_SLICE", False), schema, _vocab(2), text)


def _answering_none(monkeypatch, name: str):  # type: ignore[no-untyped-def]
    """What turns ``vocab_walk``'s ``name`` off: it answers None."""
    return lambda: monkeypatch.setattr(f"trellis.constrain.vocab.vocab_walk.{name}", lambda *a: None)


def _masks_equal_without(monkeypatch, turn_off, grammar, vocab: Vocabulary, text: bytes) -> None:  # type: ignore[no-untyped-def]
    """Every mask along ``text`` (one byte a token), as it is and after ``turn_off()``, equal;
    the text is a sentence."""
    masks = {}
    for on in (True, False):
        if not on:
            turn_off()
        COMPILED.clear()  # a new constraint: no mask from the other run (compile memoises them)
        c = compile(grammar, vocab, cache=False)
        assert not c.share  # no walk from the other run
        s, out = c.start(), []
        for b in text:
            out.append(c.mask_array(s).copy())
            s = c.advance(s, vocab.tokens.index(bytes([b])))
            assert s is not None, (on, b)
        assert c.is_accepting(s)
        masks[on] = out
    assert all((a == b).all() for a, b in zip(masks[True], masks[False]))


BOUNDED = [
    r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){0,9}"',  # a JSON string, maxLength 9
    r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]){7}',  # a length-bounded string's chunk (crosses at its end)
    r"//[^\n]{2,8}\n",
    r"[^']{0,6}'x",
    r"(?:ab|[^a]){0,5}",
    r"[a-z ]{3,7}",
]


def _reach_brute(sl: slices.Slice, trans: np.ndarray, q: int) -> int:
    """Breadth-first over the product of the slice DFA and ``trans`` from (0, q), one level of
    byte strings at a time: the length of the shortest string the slice keeps alive that dies
    from q, minus one (capped at the longest member)."""
    level, seen, depth = {(0, q)}, {(0, q)}, 0
    while level and depth < sl.longest:
        nxt = set()
        for s, p in level:
            for b, t in zip(*sl.moves[s]):
                tp = int(trans[p, int(b)])
                if tp < 0:
                    return depth
                if (int(t), tp) not in seen:
                    seen.add((int(t), tp))
                    nxt.add((int(t), tp))
        level, depth = nxt, depth + 1
    return sl.longest


@pytest.mark.parametrize("seed", range(2))
def test_reach_is_the_depth_every_slice_string_stays_alive(seed: int) -> None:
    tm = TokenMatrix.of(_vocab(seed))
    toks = tm.tokens
    for pat in PATTERNS + BOUNDED:
        dfa = regex_to_byte_dfa(pat)
        for sl in slices.slices(tm):
            r = slices.reach(sl, dfa)
            members = [toks[t] for t in RestSet.vocabulary(tm).tid[sl.inside].tolist()]
            for q in range(dfa.num_states):
                d = int(r[q])
                assert d == _reach_brute(sl, dfa.trans, q), (pat, sl.pattern, q)
                # the claim a cover rests on: every member of at most d bytes stays alive
                assert all(_alive(dfa.trans, q, m) for m in members if len(m) <= d), (pat, q)


@pytest.mark.parametrize("seed", range(3))
def test_bounded_covers_walk_equal_the_whole_walk(seed: int, monkeypatch) -> None:
    """States of length-bounded terminals reach a few bytes (the test vocabulary's members are
    short, so the levels are lowered to match): walking the rest of a bounded cover gives the
    whole walk, crossings included."""
    monkeypatch.setattr(slices, "DEPTHS", (2, 3, 5))
    _, bounded = _covered_walks_equal_whole_walks(seed, BOUNDED, slices.cover_for)
    assert bounded >= 5


def test_reach_counts_the_characters_a_bounded_string_has_left() -> None:
    tm = TokenMatrix.of(_vocab(0))
    string = regex_to_byte_dfa(BOUNDED[0].replace("{0,9}", "{0,60}"))
    json_body = slices.slices(tm)[1]
    r = slices.reach(json_body, string)
    path = [int(string.trans[0, ord('"')])]
    for _ in range(60):
        path.append(int(string.trans[path[-1], ord("a")]))
    assert 5 < json_body.longest < 60
    assert [int(r[p]) for p in path] == [min(60 - k, json_body.longest) for k in range(61)]
    assert int(r[0]) == 0  # before the opening quote: 'a' dies


@pytest.mark.skipif(slices.walkc is None, reason="the C kernel is not built")
def test_reach_in_c_equals_the_numpy_table() -> None:
    tm = TokenMatrix.of(_vocab(2))
    for pat in PATTERNS + BOUNDED:
        dfa = regex_to_byte_dfa(pat)
        for sl in slices.slices(tm):
            table = slices.reach(sl, dfa)
            assert [slices.reach_at(sl, dfa, q) for q in range(dfa.num_states)] == table.tolist(), (pat, sl.pattern)


@pytest.mark.skipif(slices.walkc is None, reason="the C kernel is not built")
@pytest.mark.parametrize("seed", range(3))
def test_trie_cuts_walk_equal_the_uncut_walk(seed: int, monkeypatch) -> None:
    """A trie walk that jumps over the subtrees a cut marks (members the state's reach keeps
    inside) is the uncut walk element for element: the same inside flags and the same crossings
    in the same order (the leftovers' order is part of their cache key). The test vocabulary's
    members are short, so the levels are lowered to match."""
    monkeypatch.setattr(slices, "CUT_LEVELS", (1, 2, 3, 4))
    tm = TokenMatrix.of(_vocab(seed))
    rs = RestSet.vocabulary(tm)
    rng = np.random.default_rng(seed)
    cut_nodes = 0
    for pat in BOUNDED + PATTERNS:
        dfa = regex_to_byte_dfa(pat)
        for q in range(dfa.num_states):
            cut = slices.trie_cut_for(tm, dfa, q)
            if cut is None:
                continue
            cut_nodes += int(cut.nodes.sum())
            for follow in (None, rng.random(256) < 0.5):
                a = walk_vocabulary(dfa.trans, dfa.final, q, rs, tm, follow, cut)
                b = walk_vocabulary(dfa.trans, dfa.final, q, rs, tm, follow)
                assert (a.inside == b.inside).all(), (pat, q)
                assert a.src.tolist() == b.src.tolist() and a.inv.tolist() == b.inv.tolist(), (pat, q)
                assert (a.cross is None) == (b.cross is None)
                if a.cross is not None:
                    for f in ("tid", "base", "length", "lo"):
                        assert getattr(a.cross, f).tolist() == getattr(b.cross, f).tolist(), (pat, q, f)
    assert cut_nodes > 100  # subtrees were jumped over


def test_a_trie_cut_marks_exactly_the_subtrees_of_short_members() -> None:
    tm = TokenMatrix.of(_vocab(0))
    toks = tm.tokens
    rs = RestSet.vocabulary(tm)
    trie = TokenTrie.of(tm)
    _, _, _, tlo, thi, _, _, _ = trie.preorder()
    json_body = slices.slices(tm)[1]
    for level in (1, 2, 3):
        cut = slices.trie_cut(tm, json_body, level)
        known = [bool(json_body.inside[i]) and len(toks[t]) <= level for i, t in enumerate(rs.tid.tolist())]
        assert cut.known.tolist() == known
        for i in range(len(tlo)):
            below = trie.lex[tlo[i]:thi[i]].tolist()
            assert bool(cut.nodes[i]) == all(known[r] for r in below), (level, i)
        assert 0 < cut.nodes.sum() < len(tlo)


def test_masks_along_a_bounded_string_are_unchanged_by_trie_cuts(monkeypatch) -> None:
    """Whole masks of a schema's length-bounded strings (their last characters are where a cut
    applies) with and without trie cuts."""
    monkeypatch.setattr(slices, "CUT_LEVELS", (1, 2, 3))
    vocab = _vocab(2)
    schema = JsonSchema({"type": "object", "properties": {"a": {"type": "string", "maxLength": 6},
                                                          "b": {"type": "string", "minLength": 2, "maxLength": 9}}})
    text = '{"a":"x y\\"z","b":"\u00e9t\u00e9 ok"}'.encode()
    _masks_equal_without(monkeypatch, _answering_none(monkeypatch, "trie_cut_for"), schema, vocab, text)
