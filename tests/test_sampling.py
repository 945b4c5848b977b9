"""Warpers match transformers' logits processors; sampling matches its distribution."""

from __future__ import annotations

import pytest
import torch

from trellis.sampling import entropy, log_softmax, repetition_penalty, sample, warp


@pytest.fixture
def logits():
    torch.manual_seed(0)
    return torch.randn(4, 50) * 2


def test_warpers_match_transformers(logits):
    from transformers.generation.logits_process import (MinPLogitsWarper, RepetitionPenaltyLogitsProcessor,
                                                        TemperatureLogitsWarper, TopKLogitsWarper,
                                                        TopPLogitsWarper)

    ids = torch.randint(0, 50, (4, 7))
    assert torch.allclose(repetition_penalty(logits, ids.tolist(), 1.3),
                          RepetitionPenaltyLogitsProcessor(1.3)(ids, logits.clone()))
    assert torch.allclose(warp(logits, temperature=0.7), TemperatureLogitsWarper(0.7)(ids, logits.clone()))
    assert torch.equal(warp(logits, top_k=5), TopKLogitsWarper(5)(ids, logits.clone()))
    for p in (0.1, 0.5, 0.9):
        ours = torch.isfinite(warp(logits, top_p=p))
        theirs = torch.isfinite(TopPLogitsWarper(p)(ids, logits.clone()))
        assert torch.equal(ours, theirs), p
    for p in (0.05, 0.3):
        assert torch.equal(torch.isfinite(warp(logits, min_p=p)),
                           torch.isfinite(MinPLogitsWarper(p)(ids, logits.clone())))


def test_warp_keeps_the_argmax_and_masked_entries(logits):
    masked = logits.clone()
    masked[:, ::2] = float("-inf")
    out = warp(masked, temperature=0.5, top_k=3, top_p=0.5, min_p=0.2)
    assert torch.equal(out.argmax(-1), masked.argmax(-1))
    assert torch.isinf(out[:, ::2]).all()


def test_invalid_parameters_raise(logits):
    for kw in ({"temperature": -1.0}, {"top_p": 0.0}, {"min_p": 1.0}):
        with pytest.raises(ValueError):
            warp(logits, **kw)


def test_log_softmax_keeps_masked_entries_at_minus_infinity():
    row = torch.full((1, 5), float("-inf"))
    assert torch.isneginf(log_softmax(row)).all()  # all masked: -inf, not NaN
    part = torch.tensor([[0.0, float("-inf"), 1.0]])
    assert torch.isneginf(log_softmax(part)[0, 1]) and torch.isfinite(log_softmax(part)[0, [0, 2]]).all()


def test_sampling_distribution_chi_square():
    from scipy.stats import chisquare

    lp = log_softmax(torch.tensor([[0.0, 1.0, 2.0, -1.0, 0.5, float("-inf")]]))
    g = torch.Generator().manual_seed(1)
    n = 20000
    draws = sample(lp.expand(n, -1), g)
    counts = torch.bincount(draws, minlength=6).double()
    assert counts[5] == 0
    p = lp[0, :5].exp().double()
    expected = p / p.sum() * counts[:5].sum()
    assert chisquare(counts[:5].numpy(), expected.numpy()).pvalue > 1e-3


def test_entropy():
    uniform = torch.log(torch.full((1, 8), 1 / 8))
    assert torch.allclose(entropy(uniform), torch.tensor([torch.log(torch.tensor(8.0))]))
    onehot = log_softmax(torch.tensor([[0.0, float("-inf")]]))
    assert entropy(onehot).item() == 0.0


def test_draw_never_draws_a_zero_weight_and_keeps_a_wide_rows_tail():
    """The inverse transform on a Gemma-sized row: zero weights are never drawn (also at the row's
    ends, where a uniform of 0 or one rounded up to the total would land), [V] gives [1] like
    torch.multinomial, and 50,000 tokens of 1e-6 weight beside one of weight 1 keep their 4.8%."""
    from trellis.sampling import draw

    g = torch.Generator().manual_seed(0)
    w = torch.zeros(4, 262144)
    w[:, 7] = 1.0
    w[:, -2] = 1.0  # the last column stays 0
    got = draw(w, g).squeeze(-1)
    assert set(got.tolist()) <= {7, 262142}
    assert draw(w[0], g).shape == (1,)
    tail = torch.zeros(200, 262144 // 4)  # drawn 100 times: 20,000 rows at once took 20+ GiB (float64 sums)
    tail[:, 0] = 1.0
    tail[:, 1:50001] = 1e-6
    share = torch.cat([draw(tail, g).squeeze(-1) > 0 for _ in range(100)]).double().mean().item()
    expected = 0.05 / 1.05
    assert abs(share - expected) < 5 * (expected * (1 - expected) / 20000) ** 0.5, share
    with pytest.raises(ValueError):
        draw(torch.zeros(1, 5), g)


def test_draw_few_draws_what_draw_draws_from_the_same_uniforms():
    """SMC's short rows and resampling draw in Python floats: the same indices as ``draw`` on k
    copies of the row from the same generator state (zero weights included, never drawn), and the
    same refusals."""
    from trellis.errors import UsageError
    from trellis.sampling import draw, draw_few

    for seed in range(300):
        g = torch.Generator().manual_seed(seed)
        n, k = int(torch.randint(1, 9, (1,), generator=g)), int(torch.randint(1, 7, (1,), generator=g))
        w = torch.rand(n, generator=g, dtype=torch.float64) ** 3
        w[torch.rand(n, generator=g) < 0.3] = 0.0
        if float(w.sum()) == 0.0:
            w[n - 1] = 0.5
        want = draw(w.expand(k, -1), torch.Generator().manual_seed(seed)).flatten().tolist()
        got = draw_few(w.tolist(), k, torch.Generator().manual_seed(seed))
        assert got == want
        assert all(w[i] > 0 for i in got)
    for bad in ([0.0, 0.0], [1.0, -0.5], [float("nan"), 1.0], [float("inf")], []):
        with pytest.raises(UsageError):
            draw_few(bad, 1, torch.Generator().manual_seed(0))


def test_logsumexp_floats_is_torchs_logsumexp():
    from trellis.sampling import logsumexp_floats

    g = torch.Generator().manual_seed(0)
    for n in (1, 2, 5, 40):
        x = torch.randn(n, generator=g, dtype=torch.float64) * 30
        x[0] = float("-inf")
        assert logsumexp_floats(x.tolist()) == pytest.approx(float(torch.logsumexp(x, 0)), rel=1e-12, abs=1e-12)
    assert logsumexp_floats([]) == float("-inf") == logsumexp_floats([float("-inf")] * 3)
