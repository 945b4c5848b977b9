"""``counted_walk``: every position of a length-bounded terminal walked by thresholding one
counting walk equals the position's full walk (the same tokens inside, the same crossings), on
random bodies (ASCII and multi-byte classes, escapes), bounds and prefixes; terminals that are not
such chains are refused; and the masks of a schema's constraint are the same with it and without."""

from __future__ import annotations

import random

import numpy as np
import pytest

from trellis.constrain.automata.regex import regex_to_byte_dfa
from trellis.constrain.vocab import counted_walk
from trellis.constrain.vocab.rest_walk import RestSet, walk
from trellis.constrain.vocab.walks import TokenMatrix, walkc
from trellis.tokens import Vocabulary

from tests.constrain.test_alike_patch import _tokens
from tests.constrain.test_trie_walk import _canon

pytestmark = pytest.mark.skipif(walkc is None, reason="counting walks run in C (without it: ordinary walks)")

ALPHA = [b"a", b"b", b"c", b"x", b" ", b'"', b"\\", b"u", b"0", b"\xc3\xa9", b"\xe2\x82\xac", b",", b"}"]
BODIES = [
    r"[a-c]",
    r"[^\u0022\\]",
    r"[a-c x\u00e9]",
    r"(?:[a-cx ]|\\[\u0022\\])",
    r"(?:[^\u0000-\u001f\u0022\\]|\\(?:[\u0022\\\/btnfr]|u00[01][0-9a-fA-F]))",
    r"[0-9a-f]",
    r"(?:[abc]|\u20ac)",
]


def _vocab(seed: int) -> Vocabulary:
    rng = random.Random(seed)
    toks = {b"".join(rng.choice(ALPHA) for _ in range(rng.randint(1, 9))) for _ in range(1500)}
    toks |= {t[:i] for t in list(toks)[:100] for i in range(1, len(t))}
    toks |= {bytes([b]) for b in range(256)}  # byte fallback: a token may end inside a character
    lst = sorted(toks)
    rng.shuffle(lst)
    return Vocabulary(tuple([b"</s>"] + lst), eos=frozenset({0}), special=frozenset({0}))


def _pattern(rng: random.Random) -> str:
    lo = rng.randint(0, 12)
    hi = lo if rng.random() < 0.3 and lo else lo + rng.randint(1, 12)  # ({0}: the empty string, not a chain)
    bound = f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}"
    pre = rng.choice(["", r"\u0022", '"'])
    return f"{pre}{rng.choice(BODIES)}{bound}" + rng.choice([r"\u0022", '"'])


@pytest.mark.parametrize("seed", range(4))
def test_every_position_equals_its_full_walk(seed: int) -> None:
    tm = TokenMatrix.of(_vocab(seed))
    rng = random.Random(seed)
    positions = 0
    for _ in range(12):
        p = _pattern(rng)
        dfa = regex_to_byte_dfa(p)
        ch = counted_walk.chain_of(dfa, p)
        assert ch is not None, p  # every such terminal is a chain
        mapped = [q for q in range(dfa.num_states) if ch.where[q] >= 0]
        assert mapped, p
        for q in range(dfa.num_states):
            got = counted_walk.walk(ch, q, tm)
            if q not in mapped:
                assert got is None  # the opening quote, the closing one: walked the ordinary way
                continue
            assert_full_walk(got, dfa, q, tm, (p, q))
            positions += 1
    assert positions > 200


def assert_full_walk(got: tuple, dfa, q: int, tm: TokenMatrix, what: object) -> None:  # type: ignore[no-untyped-def]
    """A position's counted walk ``got`` keeps the tokens and crossings of its full walk."""
    rs = RestSet.vocabulary(tm)
    inside, cross = _canon(walk(dfa.trans, dfa.final, q, rs, tm), rs)
    assert _tokens(got[0], tm) == sorted(rs.tid[inside].tolist()), what
    w = got[1]
    w.inside = np.zeros(len(rs), dtype=bool)
    assert _canon(w, rs)[1] == cross, what


@pytest.mark.parametrize("pattern", [
    r'ab{3}"',  # the guessed body "ab" is not what {3} repeats
    r'(?:a|ab){2,4}"',  # the body goes on after a character: counts are not read off one walk
    r'[ab"]{3}"',  # the body starts like the tail
    r'[ab]{3,}"',  # no upper bound
    r"[ab]{3}",  # no closing tail
    r'[ab]{3}(?:"|x)',
])
def test_other_terminals_are_not_chains(pattern: str) -> None:
    assert counted_walk.chain_of(regex_to_byte_dfa(pattern), pattern) is None


def test_a_pattern_text_that_lies_is_caught_by_the_pairing() -> None:
    """The regex text is only a guess: a DFA that is not the text's (here, another bound's) pairs
    with nothing, so no walk is read off the wrong chain."""
    dfa = regex_to_byte_dfa(r'[a-c]{4,9}"')
    assert counted_walk._analyse(dfa, r'[a-c]{4,8}"') is None
    assert counted_walk._analyse(dfa, r'[a-c]{4,9}"') is not None


@pytest.mark.parametrize("seed", range(3))
def test_schema_masks_are_the_same_with_and_without(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A schema's bounded strings and counted patterns, masks along random documents: the
    constraint that reads positions off counting walks and one that walks each position agree."""
    from trellis.constrain import JsonSchema
    from trellis.constrain.compile import clear_caches, compile

    vocab = _vocab(seed)
    schema = {"type": "object", "properties": {
        "a": {"type": "string", "minLength": 2, "maxLength": 9},
        "b": {"type": "string", "pattern": "^[a-c]{5}$"},
        "c": {"type": "array", "items": {"type": "string", "maxLength": 4}}},
        "required": ["a", "b", "c"]}
    taken = []
    real = counted_walk.walk

    def spy(*a, **k):  # type: ignore[no-untyped-def]
        r = real(*a, **k)
        taken.append(r is not None)
        return r

    monkeypatch.setattr(counted_walk, "walk", spy)
    clear_caches()
    on = compile(JsonSchema(schema, closed_objects=False), vocab, cache=False)
    on.share = True  # shared walks, counted ones among them (cache=False: no disk)
    clear_caches()  # (a second constraint object, not the memoised one)
    off = compile(JsonSchema(schema, closed_objects=False), vocab, cache=False)
    assert off is not on and not off.share  # every position walked on its own
    rng = random.Random(seed)
    chars = ["a", "b", "c", "x", " ", "\\u001f", "\u20ac", '\\"', "\\\\"]  # one character each
    for _ in range(8):
        a = "".join(rng.choice(chars) for _ in range(rng.randint(2, 9)))
        c = ",".join('"' + "".join(rng.choice(chars) for _ in range(rng.randint(0, 4))) + '"' for _ in range(3))
        doc = ('{"a":"%s","b":"%s","c":[%s]}' % (a, "".join(rng.choice("abc") for _ in range(5)), c)).encode()
        masks_agree(on, off, doc, rng)
    assert sum(taken) >= 10  # positions were read off counting walks


def two_constraints(schema: dict, vocab: Vocabulary):  # type: ignore[no-untyped-def]
    """Two constraint objects of one schema (``compile``'s memo cleared between), no disk cache."""
    from trellis.constrain import JsonSchema
    from trellis.constrain.compile import clear_caches, compile

    clear_caches()
    on = compile(JsonSchema(schema), vocab, cache=False)
    clear_caches()
    off = compile(JsonSchema(schema), vocab, cache=False)
    assert off is not on
    return on, off


def flag_off(monkeypatch, module, name: str, c):  # type: ignore[no-untyped-def]
    """``c.mask_array`` with ``module.name`` False while it runs (True after): a ``mask_off``
    for ``masks_agree`` that reads one constraint's masks with a path of the engine turned off."""
    def read(state):  # type: ignore[no-untyped-def]
        monkeypatch.setattr(module, name, False)
        try:
            return c.mask_array(state)
        finally:
            monkeypatch.setattr(module, name, True)

    return read


def masks_agree(on, off, doc: bytes, rng: random.Random, mask_off=None) -> None:  # type: ignore[no-untyped-def]
    """Both constraints' masks are equal at every prefix of ``doc`` (a document of their language),
    read along a random tokenization of it drawn from the allowed tokens (``mask_off``: how
    ``off``'s mask is read, by default ``off.mask_array``)."""
    vocab = on.vocab
    s1, s2 = on.start(), off.start()
    while True:
        m1, m2 = on.mask_array(s1), (mask_off or off.mask_array)(s2)
        assert np.array_equal(m1, m2), doc
        if not doc:
            break
        fits = [t for t in _tokens(m1, on.tm) if t and doc.startswith(vocab.tokens[t])]
        assert fits, doc  # the document is in the language
        t = rng.choice(fits)
        doc = doc[len(vocab.tokens[t]):]
        s1, s2 = on.advance(s1, t), off.advance(s2, t)


def test_clear_caches_forgets_the_counting_walks() -> None:
    from trellis.constrain.compile import clear_caches

    tm = TokenMatrix.of(_vocab(0))
    p = r'[a-c]{3,7}"'
    dfa = regex_to_byte_dfa(p)
    assert counted_walk.walk(counted_walk.chain_of(dfa, p), 0, tm) is not None and counted_walk.MEMO
    clear_caches()
    assert not counted_walk.MEMO


def test_the_prebuilt_json_string_walk_is_taken_and_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """``prebuild`` (the per-vocabulary tables) makes the counting walk of a JSON string's
    character as the schema translator writes it: a bounded string's positions read it (no new
    counting walk from a character's start) and still equal their full walks."""
    import re

    from trellis.constrain import JsonSchema

    tm = TokenMatrix.of(_vocab(7))
    counted_walk.prebuild(tm)
    assert len(tm._counted_units) == 1
    lark = JsonSchema({"type": "string", "minLength": 2, "maxLength": 7}).to_lark("earley")
    p = next(m.group(1) for m in re.finditer(r"^T\d+: /(.*)/$", lark, re.M) if "{2,7}" in m.group(1))
    dfa = regex_to_byte_dfa(p)
    ch = counted_walk.chain_of(dfa, p)
    assert ch is not None
    built = []
    real = counted_walk._counting_walk
    monkeypatch.setattr(counted_walk, "_counting_walk", lambda *a: built.append(a[4]) or real(*a))
    starts = 0
    for q in range(dfa.num_states):
        got = counted_walk.walk(ch, q, tm)
        if got is None:
            continue
        starts += int(ch.where[q]) // (ch.hi + 1) == 0
        assert_full_walk(got, dfa, q, tm, q)
    assert starts == 8 and 0 not in built  # 8 positions at a character's start, none built anew
