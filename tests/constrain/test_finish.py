"""Budgeted: constrained outputs finish (and parse) within max_new_tokens; an output that finishes
on its own is unchanged under greedy; speculative decoding stays token-for-token greedy."""

from __future__ import annotations

import json

import pytest
import torch

from fakes import HashLM
from trellis.constrain import compile
from trellis.constrain.finish import Budgeted
from trellis.decoder import Decoder
from trellis.mask import allocate_bitmask
from trellis.search import Greedy, Sample
from trellis.speculate import PromptLookup, Speculative, TokenRecycling
from trellis.tokens import Vocabulary

BYTES = tuple(bytes([b]) for b in range(32, 127)) + (b"\n",)
PIECES = (b'{"', b'":', b'",', b'"}', b"[[", b"[{", b"12", b"3.", b"true", b"null", b'": [', b"}}", b"]]")
VOCAB = Vocabulary((b"",) + BYTES + PIECES, eos=frozenset({0}), special=frozenset({0}))
JSON = compile("json.lark", VOCAB, cache=False)
SEEDS = range(30)


def run(seed: int, budget: int, *, budgeted: bool, strategy=None, temperature: float = 0.0):
    lm = HashLM(len(VOCAB), seed=seed, scale=2.0)
    con = Budgeted(JSON, budget) if budgeted else JSON
    dec = Decoder(lm, con, temperature=temperature, vocab=VOCAB)
    strategy = strategy or Greedy()
    return dec, strategy(dec, dec.start([1 + BYTES.index(b"\n")]), max_new_tokens=budget)[0]


@pytest.mark.parametrize("budget", [3, 8, 16, 40])
def test_every_output_finishes_and_parses(budget: int) -> None:
    cut = 0
    for seed in SEEDS:
        dec, ref = run(seed, budget, budgeted=False)
        cut += not ref.finished
        dec, hyp = run(seed, budget, budgeted=True)
        assert hyp.finished and hyp.num_new <= budget, (seed, dec.text(hyp))
        json.loads(dec.text(hyp))
    assert cut >= 3, cut  # the random LM does run past the budget unsteered (measured: 3-30 of 30)


def test_outputs_that_finish_on_their_own_are_unchanged() -> None:
    same = 0
    for seed in SEEDS:
        for budget in (16, 40):
            _, ref = run(seed, budget, budgeted=False)
            if ref.finished:
                _, hyp = run(seed, budget, budgeted=True)
                assert hyp.tokens == ref.tokens  # (log-probs differ: near the end they are renormalised
                # over the tokens that can still finish)
                same += 1
    assert same >= 5


def test_sampled_outputs_finish_too() -> None:
    for seed in SEEDS:
        dec, hyp = run(seed, 24, budgeted=True, temperature=1.0,
                       strategy=Sample(generator=torch.Generator().manual_seed(seed)))
        assert hyp.finished
        json.loads(dec.text(hyp))


def test_speculative_greedy_equals_budgeted_greedy() -> None:
    for seed in range(12):
        _, ref = run(seed, 20, budgeted=True)
        for drafter in (PromptLookup(), TokenRecycling(len(VOCAB))):
            _, out = run(seed, 20, budgeted=True, strategy=Speculative(drafter, max_nodes=8))
            assert out.tokens == ref.tokens, (seed, drafter)


def test_last_token_is_eos_only_and_completion_is_shortest() -> None:
    b = Budgeted(JSON, 5)
    s = JSON.start()
    for t in b'{"a": [1':
        s = JSON.advance(s, 1 + BYTES.index(bytes([t])))
    row = allocate_bitmask(1, len(VOCAB))[0]
    b.fill_mask((s, 1, False), row)
    assert not row.any()  # not accepting: nothing fits in one token
    plan = b.completion(s)
    assert VOCAB.decode(plan) == b"]}"
    s2 = JSON.advance(JSON.start(), 1 + BYTES.index(b"7"))
    b.fill_mask((s2, 1, False), row)
    assert [i for i in range(len(VOCAB)) if (int(row[i >> 5]) >> (i & 31)) & 1] == [0]  # EOS only
    assert b.advance((s2, 1, False), 1 + BYTES.index(b"7")) is None
    with pytest.raises(ValueError):
        Budgeted(JSON, 0)


def test_following_a_plan_never_lengthens_it() -> None:
    """The steering's fallback takes plan[0]; the next state's plan must then be at most one shorter,
    or a model could be led past the budget (seen on Gemma before plans were memoised by suffix)."""
    b = Budgeted(JSON, 64)
    for seed in range(10):
        _, ref = run(seed, 40, budgeted=False)
        s = JSON.start()
        for t in ref.new_tokens:
            if t == 0:
                break
            plan = b.completion(s)
            assert plan is not None
            if plan:
                nxt = JSON.advance(s, plan[0])
                assert len(b.completion(nxt)) <= len(plan) - 1
            s = JSON.advance(s, t)


def test_steered_outputs_are_marked_and_untouched_ones_are_not() -> None:
    """An output the budget had to shorten says so (``was_steered``); one that finished on its own
    far from the end does not (issue 22: steering must never be silent)."""
    marked = unmarked = 0
    for seed in SEEDS:
        _, ref = run(seed, 16, budgeted=False)
        b = Budgeted(JSON, 16)
        dec = Decoder(HashLM(len(VOCAB), seed=seed, scale=2.0), b, vocab=VOCAB)
        hyp = Greedy()(dec, dec.start([1 + BYTES.index(b"\n")]), max_new_tokens=16)[0]
        if hyp.tokens != ref.tokens:  # the budget changed the output: it must be marked
            assert b.was_steered(hyp.state), seed
            marked += 1
        if ref.finished and ref.num_new <= 4:  # far from the end: nothing to steer
            assert not b.was_steered(hyp.state), seed
            unmarked += 1
    assert marked >= 3 and unmarked >= 1, (marked, unmarked)
