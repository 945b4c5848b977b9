"""Decoder, Greedy and Sample: equal to transformers' own greedy decoding; constraint, EOS, stop."""

from __future__ import annotations

import pytest
import torch

from fakes import HashLM, assert_greedy_equal_up_to_ties, tiny_gemma3, tiny_llama
from trellis.constrain.base import Unconstrained
from trellis.decoder import Decoder
from trellis.hf_lm import HFLanguageModel
from trellis.search import Greedy, Sample
from trellis.tokens import Vocabulary


class OnlyTokens:
    """A tiny constraint for tests: tokens from ``allowed`` only, accepting after ``n`` tokens."""

    def __init__(self, vocab: Vocabulary, allowed: set[int], n: int) -> None:
        self.vocab, self.allowed, self.n = vocab, allowed, n
        self._rows: dict[bool, torch.Tensor] = {}

    def start(self):
        return 0

    def advance(self, state, token):
        return state + 1 if token in self.allowed else None

    def fill_mask(self, state, out):
        from trellis.mask import bool_to_bitmask

        accepting = state >= self.n
        if accepting not in self._rows:
            ok = torch.zeros(len(self.vocab), dtype=torch.bool)
            ok[list(self.allowed)] = True
            if accepting:
                ok[list(self.vocab.eos)] = True
            self._rows[accepting] = bool_to_bitmask(ok)[0]
        out.copy_(self._rows[accepting])

    def is_accepting(self, state):
        return state >= self.n


def toy_vocab(n: int) -> Vocabulary:
    toks = [b"<pad>", b"", b""] + [bytes([97 + (i % 26)]) * (1 + i // 26) for i in range(n - 3)]
    toks[0] = b""
    return Vocabulary(tuple(toks), eos=frozenset({2}), special=frozenset({0, 1, 2}))


@pytest.mark.parametrize("make", [tiny_llama, tiny_gemma3])
def test_greedy_equals_transformers_generate(make):
    model = make()
    dec = Decoder(HFLanguageModel(model))
    for prompt in ([5, 9, 13], [7] * 9, list(range(3, 40))):
        ours = Greedy()(dec, dec.start(prompt), max_new_tokens=40)[0].new_tokens
        with torch.inference_mode():
            ref = model.generate(torch.tensor([prompt], device=model.device), max_new_tokens=40, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
        assert_greedy_equal_up_to_ties(model, prompt, ours, ref)


def test_constraint_is_applied_and_eos_waits_for_acceptance():
    vocab = toy_vocab(40)
    lm = HashLM(40, seed=3)
    con = OnlyTokens(vocab, {5, 6, 7}, n=4)
    dec = Decoder(lm, con)
    for seed in range(20):
        hyp = Sample(generator=torch.Generator().manual_seed(seed))(dec, dec.start([3]), max_new_tokens=30)[0]
        body = [t for t in hyp.new_tokens if t != 2]
        assert set(body) <= {5, 6, 7}
        if hyp.finished:
            assert hyp.new_tokens[-1] == 2 and len(body) >= 4


def test_logprob_is_the_sum_of_masked_renormalised_logprobs():
    vocab = toy_vocab(30)
    lm = HashLM(30, seed=1)
    dec = Decoder(lm, OnlyTokens(vocab, {4, 8, 9}, n=100))
    hyp = Greedy()(dec, dec.start([3]), max_new_tokens=5)[0]
    total, h = 0.0, dec.start([3])
    for t in hyp.new_tokens:
        logits = lm.logits([h.tokens])[0]
        allowed = torch.full_like(logits, float("-inf"))
        allowed[[4, 8, 9]] = logits[[4, 8, 9]]
        total += float(torch.log_softmax(allowed, -1)[t])
        h = dec.extend(h, t)
    assert abs(total - hyp.logprob) < 1e-5


def test_extend_rejects_forbidden_tokens_and_early_eos():
    vocab = toy_vocab(30)
    dec = Decoder(HashLM(30), OnlyTokens(vocab, {4}, n=2))
    root = dec.start([3])
    with pytest.raises(ValueError):
        dec.extend(root, 5)
    with pytest.raises(ValueError):
        dec.extend(root, 2)  # EOS before acceptance


def test_stop_strings_finish_and_are_cut():
    vocab = toy_vocab(30)
    lm = HashLM(30, seed=2)
    free = Greedy()(Decoder(lm, vocab=vocab), Decoder(lm, vocab=vocab).start([3]), max_new_tokens=12)[0]
    text = Decoder(lm, vocab=vocab).text(free)
    stop = text[4:6]
    dec = Decoder(lm, vocab=vocab, stop=(stop.encode(),))
    hyp = Greedy()(dec, dec.start([3]), max_new_tokens=12)[0]
    assert hyp.finished and stop not in dec.text(hyp)
    assert text.startswith(dec.text(hyp))


def test_sample_is_reproducible_with_a_seeded_generator():
    lm = HashLM(50, seed=5)
    dec = Decoder(lm, temperature=0.8, top_p=0.9)
    a = Sample(generator=torch.Generator().manual_seed(7))(dec, dec.start([1]), max_new_tokens=20)[0]
    b = Sample(generator=torch.Generator().manual_seed(7))(dec, dec.start([1]), max_new_tokens=20)[0]
    c = Sample(generator=torch.Generator().manual_seed(8))(dec, dec.start([1]), max_new_tokens=20)[0]
    assert a == b and a != c


def test_sample_first_token_distribution_chi_square():
    from scipy.stats import chisquare

    lm = HashLM(12, seed=9, scale=1.0)
    dec = Decoder(lm, Unconstrained(), temperature=0.9, top_k=8)
    g = torch.Generator().manual_seed(0)
    n = 4000
    counts = torch.zeros(12)
    root = dec.start([1])
    strat = Sample(generator=g)
    for _ in range(n):
        counts[strat(dec, root, max_new_tokens=1)[0].new_tokens[0]] += 1
    p = dec.log_probs([root])[0].exp()
    keep = p > 0
    assert counts[~keep].sum() == 0
    assert chisquare(counts[keep].numpy(), (p[keep] / p[keep].sum() * n).numpy()).pvalue > 1e-3


GEMMA_PROMPTS = [
    "The three most important inventions of the nineteenth century were",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Ingredients for a simple pancake recipe:\n1.",
]


@pytest.mark.model
@pytest.mark.parametrize("prompt", GEMMA_PROMPTS)
def test_gemma_greedy_equals_transformers_greedy(gemma, prompt):
    ids = gemma.tokenizer(prompt).input_ids
    dec = Decoder(HFLanguageModel(gemma.model), vocab=gemma.vocab)
    ours = Greedy()(dec, dec.start(ids), max_new_tokens=64)[0].new_tokens
    with torch.inference_mode():
        ref = gemma.model.generate(torch.tensor([ids]), max_new_tokens=64, do_sample=False)[0, len(ids):].tolist()
    assert_greedy_equal_up_to_ties(gemma.model, ids, ours, ref)
