"""The chart walks of ``EarleyConstraint`` agree: where ``_statec`` is built, one C call over the
rest set's arrays grouped by chart state (``Earley.take_rests``, ``CHART_WALK_C``); otherwise
``_chart_walk`` steps a set of token rests through the Earley chart grouped by chart state, one
numpy pass per byte, ``_chart_walk_small`` (sets up to ``scannerless.CHART_WALK_SMALL``) steps them
one at a time, and the grouped walk finishes groups of up to ``CHART_GROUP_SMALL`` rests the same
way. All must return exactly the rests the chart takes whole, which ``Earley.walk`` decides byte by
byte."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tests.constrain.test_earley import random_vocab
from trellis.constrain import compile
from trellis.constrain.earley import scannerless
from trellis.constrain.compile import load_grammar_text
from trellis.constrain.vocab.rest_walk import RestSet


def _rests(c, rng: random.Random, n: int) -> RestSet:
    """``n`` random suffixes of random tokens (some repeated, some equal as bytes)."""
    tm = c.tm
    ids = [t for t in range(tm.size) if tm.valid[t]]
    tid, base, length = [], [], []
    for _ in range(n):
        t = rng.choice(ids)
        off = rng.randrange(len(c.vocab.tokens[t]))
        tid.append(t)
        base.append(off * tm.mat_t.shape[1] + int(tm.rank[t]))
        length.append(len(c.vocab.tokens[t]) - off)
    rs, _ = RestSet.of(tm, np.array(tid, dtype=np.int64), np.array(base, dtype=np.int64),
                       np.array(length, dtype=np.int32))
    return rs


def _brute(c, state, rs: RestSet) -> list[int]:
    toks = c.vocab.tokens
    out = []
    for i, (t, n) in enumerate(zip(rs.tid.tolist(), rs.length.tolist())):
        if c.earley.walk(state, toks[t][len(toks[t]) - n:]) is not None:
            out.append(i)
    return out


@pytest.mark.parametrize("name", ["json.lark", "sql_select.lark", "arithmetic.lark", "csv.lark"])
def test_small_and_grouped_chart_walks_equal_the_recogniser(name: str, monkeypatch) -> None:
    text, _ = load_grammar_text(name)
    rng = random.Random(5)
    alphabet = bytes(sorted(set(text.encode()) - {ord("/"), ord("%")} | set(b" \n0123456789abcxyz\"")))
    c = compile(name, random_vocab(alphabet, rng), cache=False)
    checked = nonempty = 0
    for _ in range(6):
        s = c.start()
        for _ in range(12):
            for n in (0, 1, 5, 40, 200):
                rs = _rests(c, rng, n)
                want = _brute(c, s, rs)
                native = c._chart_walk(s, rs)  # (where _statec is built: take_rests, any size)
                monkeypatch.setattr(scannerless, "CHART_WALK_C", False)
                small = c._chart_walk_small(s, rs)  # rest by rest (_take)
                monkeypatch.setattr(scannerless, "CHART_WALK_SMALL", -1)  # the grouped walk, any size
                hybrid = c._chart_walk(s, rs)  # small groups finished in Python
                monkeypatch.setattr(scannerless, "CHART_GROUP_SMALL", 0)
                grouped = c._chart_walk(s, rs)  # every group by numpy
                monkeypatch.setattr(scannerless, "CHART_WALK_SMALL", 64)
                monkeypatch.setattr(scannerless, "CHART_GROUP_SMALL", 4)
                monkeypatch.setattr(scannerless, "CHART_WALK_C", True)
                assert native.dtype == small.dtype == grouped.dtype == hybrid.dtype == np.int64
                assert native.tolist() == small.tolist() == grouped.tolist() == hybrid.tolist() == want
                checked += 1
                nonempty += bool(want)
            allowed = [t for t in range(c.tm.size) if c.tm.valid[t] and c.advance(s, t) is not None]
            if not allowed:
                break
            s = c.advance(s, rng.choice(allowed))
    assert checked > 100 and nonempty > 20, (checked, nonempty)


@pytest.mark.parametrize("name", ["json.lark", "sql_select.lark", "csv.lark", "schema"])
def test_masks_equal_with_every_rest_set_split_per_scan(name: str, monkeypatch) -> None:
    """``_rests_allowed`` steps sets of up to ``CHART_WALK_SMALL`` rests through the chart where
    the grammar has no %ignore (``_chart_first``); on a small vocabulary that is almost every
    set, so both routes are checked against each other on every grammar: small sets through the
    chart vs per-scan splitting at every size, equal masks along random walks (the default
    route is the one the Lark oracle tests check)."""
    from trellis.constrain.frontends.json_schema import JsonSchema

    rng = random.Random(11)
    if name == "schema":
        spec = JsonSchema({"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 20}, "tags": {"type": "array", "items": {"enum": ["a", "b c"]}},
            "n": {"type": "integer", "minimum": -5}, "ok": {"type": "boolean"}}}, closed_objects=False)
        alphabet = b'{}[]":,abcnmeo tl-0123456789\\'
    else:
        spec = name
        text, _ = load_grammar_text(name)
        alphabet = bytes(sorted(set(text.encode()) - {ord("/"), ord("%")} | set(b" \n0123456789abcxyz\"")))
    vocab = random_vocab(alphabet, rng)
    ir = compile(spec, vocab, cache=False).ir
    chart = scannerless.EarleyConstraint(ir, vocab, share=False)  # each its own memos
    split = scannerless.EarleyConstraint(ir, vocab, share=False)
    monkeypatch.setattr(chart, "_chart_first", lambda rs: len(rs) <= 64)
    monkeypatch.setattr(split, "_chart_first", lambda rs: False)
    steps = 0
    for _ in range(8):
        s1, s2 = chart.start(), split.start()
        for _ in range(25):
            m1 = chart.mask_array(s1)
            m2 = split.mask_array(s2)
            assert np.array_equal(m1, m2), (name, steps)
            steps += 1
            allowed = [t for t in range(chart.tm.size) if (int(m1[t >> 5]) >> (t & 31)) & 1 and t not in chart.tm.eos]
            if not allowed:
                break
            t = rng.choice(allowed)
            s1, s2 = chart.advance(s1, t), split.advance(s2, t)
    assert steps > 60
