"""Narrow walks: a state few tokens start from is keyed by its DFA's digest (``vocab_walk.narrow``,
``narrow_key``, ``scannerless.EarleyConstraint._shape``) and walked flat. Its packed row and crossings
equal those of the walk under a canonical-shape key (``vocab_walk.walk``), with and without followers, and a constraint's masks are the same with the
narrow path on and off along random documents of a schema whose values are dates, numbers and
enums (digits and quotes: states few tokens start from)."""

from __future__ import annotations

import random

import numpy as np
import pytest

import trellis.constrain.earley.scannerless as scannerless
from trellis.constrain.automata.regex import regex_to_byte_dfa
from trellis.constrain.vocab import vocab_walk
from trellis.constrain.vocab.rest_walk import RestSet
from trellis.constrain.vocab.walks import TokenMatrix

from tests.constrain.test_counted_walk import _vocab, flag_off, masks_agree, two_constraints
from tests.constrain.test_trie_walk import _canon

PATTERNS = [r'"[0-9]{4}-[0-9]{2}-[0-9]{2}"', r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?",
            r'"(?:[^"\\]|\\.)*"', r'"(?:red|green|blue|cyan)"', r"[a-c]+[0-9]?"]


@pytest.mark.parametrize("seed", range(3))
def test_narrow_walk_equals_the_canonical_walk(seed: int) -> None:
    tm = TokenMatrix.of(_vocab(seed))
    rs = RestSet.vocabulary(tm)
    rng = np.random.default_rng(seed)
    walked = 0
    for p in PATTERNS:
        dfa = regex_to_byte_dfa(p)
        for q in range(dfa.num_states):
            for follow in (None, rng.random(256) < 0.5):
                key = (vocab_walk.narrow_key(dfa, q), b"" if follow is None else follow.tobytes())
                pa, wa = vocab_walk.walk(dfa, q, tm, follow, key)
                pb, wb = vocab_walk.walk(dfa, q, tm, follow, ("shape", p, q))
                assert np.array_equal(pa, pb), (p, q)
                wa.inside = wb.inside = np.zeros(len(rs), dtype=bool)  # (only the packed rows are kept)
                assert _canon(wa, rs) == _canon(wb, rs), (p, q)
                assert wa.cross is None or wa.cross.key != getattr(wb.cross, "key", None)
                walked += 1
    assert walked > 50


def test_starting_counts_the_tokens_a_state_can_begin() -> None:
    tm = TokenMatrix.of(_vocab(1))
    dfa = regex_to_byte_dfa(r"[0-9]+|x")
    first = [tm.tokens[i][0] for i in range(tm.size) if tm.tokens[i] and bool(tm.valid[i])]
    assert vocab_walk.starting(dfa, 0, tm) == sum(1 for b in first if b in b"0123456789x")
    assert vocab_walk.starting(dfa, 1, tm) == sum(1 for b in first if b in b"0123456789")  # after a digit
    for p in PATTERNS:  # every state, in any order (counted per state on first use, then read)
        dfa = regex_to_byte_dfa(p)
        for q in [*range(dfa.num_states - 1, -1, -1), *range(dfa.num_states)]:
            assert vocab_walk.starting(dfa, q, tm) == sum(1 for b in first if dfa.trans[q, b] >= 0), (p, q)


@pytest.mark.parametrize("seed", range(3))
def test_masks_are_the_same_with_the_narrow_path_on_and_off(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    vocab = _vocab(seed)
    schema = {"type": "object", "properties": {
        "when": {"type": "string", "format": "date"}, "n": {"type": "number"}, "k": {"type": "integer"},
        "c": {"enum": ["red", "green", "blue", "cyan", 7, None]}, "s": {"type": "string"}},
        "additionalProperties": False}
    taken = []
    narrow = vocab_walk.narrow

    def spy(*a, **k):  # type: ignore[no-untyped-def]
        r = narrow(*a, **k)
        taken.append(r)
        return r

    monkeypatch.setattr(vocab_walk, "narrow", spy)
    monkeypatch.setattr(vocab_walk, "NARROW_SHARE", 0.2)  # (a small vocabulary: more states are narrow)
    on, off = two_constraints(schema, vocab)

    rng = random.Random(seed)
    for _ in range(6):
        vals = {"when": f'"20{rng.randint(10, 99)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}"',
                "n": rng.choice(["-0.5e+3", "12", "3.25"]), "k": str(rng.randint(-99, 999)),
                "c": rng.choice(['"red"', '"cyan"', "7", "null"]), "s": rng.choice(['"ab"', '""', '"0-1"'])}
        keys = [k for k in vals if rng.random() < 0.8]
        doc = ("{" + ",".join(f'"{k}":{vals[k]}' for k in keys) + "}").encode()
        masks_agree(on, off, doc, rng, mask_off=flag_off(monkeypatch, scannerless, "NARROW_WALKS", off))
    assert any(taken)  # the narrow path was taken
