"""Under a constraint every strategy returns only what the constraint accepts: 1,000 randomised runs
(random fake LM, constraint, strategy and parameters) in total."""

from __future__ import annotations

import random

import pytest
import torch

from fakes import HashLM
from tests.search.tasks import Brackets, OnlyTokens, accepted, letters_vocab
from trellis.decoder import Decoder
from trellis.search import MCTS, Beam, BestOfN, DiverseBeam, EntropyGate, Lookahead, must_include

RUNS = 1000
V = 12


def make_strategy(rng: random.Random, gen: torch.Generator):
    kind = rng.choice(["beam", "diverse", "best_of_n", "mcts", "lookahead", "entropy"])
    if kind == "beam":
        w = rng.randint(1, 4)
        return kind, Beam(width=w, n_best=rng.randint(1, w), length_penalty=rng.choice([0.0, 1.0, 2.0]),
                          early_stopping=rng.choice([True, False, "never"]))
    if kind == "diverse":
        return kind, DiverseBeam(width=4, groups=rng.choice([1, 2, 4]), diversity_penalty=rng.uniform(0, 3))
    if kind == "best_of_n":
        return kind, BestOfN(n=rng.randint(1, 6), scorer=rng.choice(["logprob", "mean_logprob", "mbr"]), generator=gen)
    if kind == "mcts":
        return kind, MCTS(reward=lambda h: float(len(set(h.new_tokens))), k=rng.randint(1, 3),
                          max_rollouts=rng.randint(1, 8))
    if kind == "lookahead":
        return kind, Lookahead(width=rng.randint(1, 3), depth=rng.randint(0, 3), rollouts=rng.randint(1, 2),
                               clauses=must_include((rng.randrange(3, V),)), generator=gen)
    return kind, EntropyGate(threshold=rng.uniform(0.0, 2.0), k=rng.randint(1, 3), depth=rng.randint(0, 3))


def test_every_strategy_stays_inside_the_constraint():
    rng = random.Random(0)
    vocab = letters_vocab(V)
    seen: dict[str, int] = {}
    finished = 0
    for run in range(RUNS):
        if rng.random() < 0.5:
            con = Brackets(vocab, max_depth=rng.randint(1, 3))
        else:
            con = OnlyTokens(vocab, set(rng.sample(range(3, V), rng.randint(1, 4))), n=rng.randint(0, 4))
        gen = torch.Generator().manual_seed(run)
        dec = Decoder(HashLM(V, seed=run, scale=rng.choice([1.0, 3.0])), con,
                      temperature=rng.choice([1.0, 0.7]))
        kind, strategy = make_strategy(rng, gen)
        seen[kind] = seen.get(kind, 0) + 1
        hyps = strategy(dec, dec.start([1]), max_new_tokens=rng.randint(1, 7))
        assert hyps, (run, kind)
        for h in hyps:
            assert accepted(con, h, dec.eos), (run, kind, h.new_tokens)
            finished += h.finished
    assert min(seen.values()) >= 100, seen  # every strategy was exercised
    assert finished >= 200  # and EOS-in-accepting-state endings happened, not only budget cuts


def test_accepted_helper_rejects_violations():
    vocab = letters_vocab(V)
    con = Brackets(vocab, max_depth=2)
    from trellis.decoder import Hypothesis

    def hyp(toks, finished=False):
        return Hypothesis(tokens=(1,) + tuple(toks), prompt_len=1, state=None, finished=finished)

    assert accepted(con, hyp([3, 5, 4, 2], True), vocab.eos)
    assert not accepted(con, hyp([4]), vocab.eos)  # close before open
    assert not accepted(con, hyp([3, 2], True), vocab.eos)  # EOS while unbalanced
    assert not accepted(con, hyp([3, 3, 3]), vocab.eos)  # deeper than max_depth
    assert not accepted(con, hyp([5]), vocab.eos)  # atom outside brackets


@pytest.mark.model
@pytest.mark.slow  # ~1 s per Gemma forward on the shared CPU
def test_strategies_under_the_real_json_grammar_on_gemma(gemma):
    compile_mod = pytest.importorskip("trellis.constrain.compile")
    from trellis.hf_lm import HFLanguageModel

    con = compile_mod.compile("json.lark", gemma.vocab)
    dec = Decoder(HFLanguageModel(gemma.model), con, vocab=gemma.vocab)
    root = dec.start(gemma.tokenizer("A JSON object describing a cat:").input_ids)
    runs = [Beam(width=2, n_best=2), BestOfN(n=3, generator=torch.Generator().manual_seed(0)),
            Lookahead(width=2, depth=2, candidates=2), EntropyGate(threshold=1.0, k=2, depth=2)]
    for strategy in runs:
        for h in strategy(dec, root, max_new_tokens=6):
            assert accepted(con, h, dec.eos), (strategy, h.new_tokens)
