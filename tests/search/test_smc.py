"""Sequential Monte Carlo (issue 54): SMC's outputs follow p(x | x in L) exactly in the limit, where
the locally masked sampler does not; its log Z^ estimates log P(x in L); it decodes its particles in
lockstep, copies KV rows through the model's declared capability, and says how each particle ended.

The oracle is ``exact_posterior``: a walk of the whole token tree of a tiny config-built Llama under
a Lark grammar whose language has 56 strings (``WORD ("-" WORD)?``, WORD one of a, b, aa, ab, ba,
bb, c) spelled by a vocabulary with several tokenizations of most strings."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from fakes import tiny_llama
from trellis import generate
from trellis.constrain import compile
from trellis.constrain.finish import Budgeted
from trellis.decoder import Decoder
from trellis.errors import UsageError
from trellis.hf_lm import HFLanguageModel
from trellis.lm_proxy import LMProxy, ReindexesRows
from trellis.models import ModelHandle
from trellis.search import SMC, Check, Sample, Score, exact_posterior, pooled_posterior, total_variation
from trellis.search.resampling import log_ess, multinomial, systematic
from trellis.tokens import Vocabulary

PIECES = [b"a", b"b", b"c", b"-", b"ab", b"ba", b"ca", b"bc", b"a-", b"-c", b"cc", b"d", b"e", b" ", b"z", b"-a",
          b"aa", b"b-"]
VOCAB = Vocabulary((b"", b"", b"") + tuple(PIECES), eos=frozenset({2}), special=frozenset({0, 1, 2}))
GRAMMAR = 'start: WORD ("-" WORD)?\nWORD: /[ab]{1,2}/ | "c"\n'
PROMPT = [1, 5, 6]
MAX = 6  # the longest tokenization ("a-b-a..." one character a token) is 5 tokens + EOS


class PlainLM:
    """The same model without the ``ReindexesRows`` capability (a LanguageModel only)."""

    def __init__(self, lm: HFLanguageModel) -> None:
        self.lm, self.vocab_size = lm, lm.vocab_size

    def logits(self, prefixes):
        return self.lm.logits(prefixes)

    def tree_logits(self, prefix, tree):
        return self.lm.tree_logits(prefix, tree)


def model(seed: int = 3, scale: float = 5.0):
    """A tiny Llama whose LM head is sharpened, so its next-token distributions are peaked and put
    much of their mass outside the grammar: there the masked sampler is far from the posterior."""
    m = tiny_llama(vocab_size=len(VOCAB), seed=seed)
    with torch.no_grad():
        m.lm_head.weight.mul_(scale)
    return m


def decoder(lm=None, **kw) -> Decoder:
    return Decoder(lm if lm is not None else HFLanguageModel(model()), compile(GRAMMAR, VOCAB, cache=False),
                   temperature=1.0, vocab=VOCAB, **kw)


def smc_runs(dec: Decoder, runs: int, particles: int, seed: int, **kw):
    gen = torch.Generator().manual_seed(seed)
    root = dec.start(PROMPT)
    return [SMC(particles=particles, generator=gen, **kw).weighted(dec, root, max_new_tokens=MAX) for _ in range(runs)]


def masked_samples(dec: Decoder, n: int, seed: int) -> dict[str, float]:
    gen, root, counts = torch.Generator().manual_seed(seed), dec.start(PROMPT), Counter()
    for _ in range(n // 1000):
        counts.update(dec.text(h) for h in Sample(generator=gen).batch(dec, [root] * 1000, max_new_tokens=MAX)
                      if h.finished)
    total = sum(counts.values())
    return {k: v / total for k, v in counts.items()}


# ------------------------------------------------------------------ exactness (the acceptance test)
@pytest.mark.slow
@pytest.mark.parametrize("seed,ess_threshold", [(3, 0.5), (4, 0.9)])
def test_smc_matches_the_exact_posterior_where_masked_sampling_does_not(seed, ess_threshold) -> None:
    """60,000 weighted particles (60 runs of 1,000, pooled by Z^) are within TV 0.02 of the exact
    p(x | x in L) over the language's 56 strings; 20,000 masked samples are far from it; log Z^ is
    within 5% of log P(L). The default threshold and one that resamples at most steps."""
    dec = decoder(HFLanguageModel(model(seed)))
    exact = exact_posterior(dec, dec.start(PROMPT), max_new_tokens=MAX)
    assert len(exact.by_text) == 56 and exact.outputs > 150  # every string, in many tokenizations
    runs = smc_runs(dec, 60, 1000, seed=seed, ess_threshold=ess_threshold)
    post, log_z = pooled_posterior(runs)
    tv_smc = total_variation(post, exact.by_text)
    sampled = masked_samples(dec, 20_000, seed)
    assert total_variation(sampled, exact.masked) <= 0.03  # the walk's masked distribution is the sampler's
    tv_masked = total_variation(sampled, exact.by_text)
    print(f"seed {seed}: TV(SMC, exact) {tv_smc:.4f}, TV(masked, exact) {tv_masked:.4f}, "
          f"log Z^ {log_z:.4f} vs log P(L) {exact.log_z:.4f}")
    assert tv_smc <= 0.02
    assert tv_masked >= 0.2 and tv_masked >= 5 * tv_smc
    assert abs(log_z - exact.log_z) <= 0.05 * abs(exact.log_z)
    if ess_threshold > 0.5:
        assert sum(r.resamples for r in runs) >= 60  # the threshold was crossed: resampling is exercised
    one = runs[0]  # one run alone: its own estimate is usable too
    assert abs(one.log_z - exact.log_z) <= 0.05 * abs(exact.log_z)


@pytest.mark.slow
def test_multinomial_resampling_and_every_step_resampling_are_exact_too() -> None:
    dec = decoder()
    exact = exact_posterior(dec, dec.start(PROMPT), max_new_tokens=MAX)
    post, log_z = pooled_posterior(smc_runs(dec, 30, 1000, seed=11, resampler="multinomial", ess_threshold=1.0))
    assert total_variation(post, exact.by_text) <= 0.03
    assert abs(log_z - exact.log_z) <= 0.05 * abs(exact.log_z)


@pytest.mark.slow
def test_potentials_change_the_target_and_twists_do_not() -> None:
    """A hard potential (two words only) and a soft one (log phi = 0.7 per character) against the
    exact p(x) 1_L(x) phi(x) / Z; the soft one also twists prefixes by a different amount, which
    must change nothing but the variance."""
    two_words = Check(lambda t: "-" in t)
    longer = Score(lambda t: 0.7 * len(t), prefix_fn=lambda t: 0.4 * len(t))
    dec = decoder()
    exact = exact_posterior(dec, dec.start(PROMPT), max_new_tokens=MAX, potentials=(two_words, longer))
    assert exact.by_text and all("-" in t for t in exact.by_text)
    runs = smc_runs(dec, 30, 1000, seed=5, potentials=(two_words, longer))
    post, log_z = pooled_posterior(runs)
    assert total_variation(post, exact.by_text) <= 0.03
    assert abs(log_z - exact.log_z) <= 0.05 * abs(exact.log_z)
    assert all(p.ending == "rejected" for r in runs for p in r.particles if "-" not in p.text and p.text)


def test_exact_posterior_sums_to_one_and_matches_brute_force_scoring() -> None:
    """The tree walk's probability of one tokenization equals the product of the model's
    (unmasked) next-token probabilities, computed directly."""
    dec = decoder()
    ex = exact_posterior(dec, dec.start(PROMPT), max_new_tokens=MAX)
    assert math.isclose(sum(ex.by_text.values()), 1.0, rel_tol=1e-9)
    toks, p = next(iter(ex.by_tokens.items()))
    seq, lp = list(PROMPT), 0.0
    for t in toks:
        row = torch.log_softmax(dec.lm.logits([seq])[0].double(), -1)
        lp += float(row[t])
        seq.append(t)
    assert math.isclose(lp - ex.log_z, math.log(p), rel_tol=1e-4, abs_tol=1e-4)


# ------------------------------------------------------------------ mechanics
def test_particles_decode_in_lockstep_and_resampled_rows_are_copied_not_recomputed() -> None:
    """One forward per step; after the shared prompt, each step forwards exactly one token per
    distinct live prefix even though every step resamples (the copies continue their ancestors' KV
    rows; copies that drew the same token share one row)."""
    lm = HFLanguageModel(model())
    dec = decoder(lm)
    lm.reset_stats()
    res = SMC(particles=16, ess_threshold=1.0, generator=torch.Generator().manual_seed(0)).weighted(
        dec, dec.start(PROMPT), max_new_tokens=MAX)
    assert res.resamples >= 2  # ess_threshold=1: whenever the weights are unequal
    assert res.live[0] == 16 and res.rows[0] == 1 and len(res.live) == len(res.rows) == len(res.ess)
    assert all(1 <= r <= n for r, n in zip(res.rows, res.live)) and sum(res.rows) < sum(res.live)
    assert lm.stats.forward_calls == len(res.live)
    assert lm.stats.tokens_forwarded == len(PROMPT) + sum(res.rows[1:])


def test_the_row_copy_capability_is_declared_and_changes_no_result() -> None:
    lm = HFLanguageModel(model())
    assert isinstance(lm, ReindexesRows) and isinstance(LMProxy(lm), ReindexesRows)
    assert not isinstance(PlainLM(lm), ReindexesRows)
    runs = []
    for wrapped in (lm, PlainLM(HFLanguageModel(model()))):
        dec = decoder(wrapped)
        res = SMC(particles=12, ess_threshold=1.0, generator=torch.Generator().manual_seed(7)).weighted(
            dec, dec.start(PROMPT), max_new_tokens=MAX)
        runs.append(([p.hypothesis.tokens for p in res.particles], [round(p.log_weight, 4) for p in res.particles]))
    assert runs[0] == runs[1]


def test_repeated_runs_reuse_the_logits_of_prefixes_already_seen() -> None:
    """The memo is kept with the model across runs: a second run on the same prompt forwards only
    what the first did not reach, and a run with the memo off draws the same particles."""
    lm = HFLanguageModel(model())
    dec = decoder(lm)

    def run(seed: int, **kw):
        return SMC(particles=32, generator=torch.Generator().manual_seed(seed), **kw).weighted(
            dec, dec.start(PROMPT), max_new_tokens=MAX)

    first_calls = lm.stats.forward_calls
    a = run(0)
    first_calls = lm.stats.forward_calls - first_calls
    before = lm.stats.forward_calls
    b = run(0)
    assert lm.stats.forward_calls - before < first_calls  # the first steps come from the memo
    off = run(0, memo_bytes=0)
    assert [p.hypothesis.tokens for p in a.particles] == [p.hypothesis.tokens for p in b.particles] \
        == [p.hypothesis.tokens for p in off.particles]


def test_the_memos_normalisers_give_the_proposal_the_plain_model_gives() -> None:
    """At temperature 1 the proposal reads each row's log-sum-exp from the memo (``Normalises``),
    computed once per remembered row: the same log q and log mass as the model without a memo,
    whether the row was just forwarded, served again, or evicted (a memo too small for its batch)."""
    from trellis.search.logits_memo import LogitsMemo

    lm = HFLanguageModel(model())
    plain = decoder(PlainLM(lm))
    root = plain.start(PROMPT)
    hyps = [root, plain.extend(root, 3), plain.extend(plain.extend(root, 3), 6), plain.extend(root, 4)]
    want = plain.proposal(hyps)
    for max_bytes in (64 << 20, 1):
        memo = LogitsMemo(lm, max_bytes)
        dec = decoder(memo)
        for _ in range(2):  # forwarded, then from the memo
            got = dec.proposal(hyps)
            assert torch.allclose(got.log_mass, want.log_mass, atol=1e-5)
            assert torch.equal(torch.isfinite(got.log_q), torch.isfinite(want.log_q))
            fin = torch.isfinite(want.log_q)
            assert torch.allclose(got.log_q[fin], want.log_q[fin], atol=1e-5)
        assert set(memo.lse) <= set(memo.rows) and len(memo.lse) == (4 if max_bytes > 1 else 1)
        for k, v in memo.lse.items():
            assert math.isclose(v, float(torch.logsumexp(memo.rows[k], -1)), rel_tol=1e-6)


def test_endings_are_said_per_particle_and_a_budget_too_small_is_weight_zero() -> None:
    dec = decoder()
    gen = torch.Generator().manual_seed(1)
    res = SMC(particles=8, generator=gen).weighted(dec, dec.start(PROMPT), max_new_tokens=1)
    assert {p.ending for p in res.particles} == {"length"}  # one token cannot be a word and EOS
    assert res.posterior == {} and res.log_z == float("-inf")
    res = SMC(particles=8, generator=gen).weighted(dec, dec.start(PROMPT), max_new_tokens=MAX)
    assert all(p.ending == "eos" and p.hypothesis.finished for p in res.particles)
    assert math.isclose(sum(res.posterior.values()), 1.0, rel_tol=1e-9)
    nothing = SMC(particles=4, generator=gen, potentials=(Check(lambda t: False),)).weighted(
        dec, dec.start(PROMPT), max_new_tokens=MAX)
    assert {p.ending for p in nothing.particles} == {"rejected"} and nothing.posterior == {}


def test_unconstrained_smc_without_potentials_is_plain_sampling() -> None:
    """No grammar, no potential: every weight stays 1 (allowed mass 1) until the last step of the
    budget, where only EOS may end the output (weight p(EOS)), so nothing is resampled before it."""
    lm = HFLanguageModel(model(scale=1.0))
    dec = Decoder(lm, temperature=1.0, vocab=VOCAB)
    res = SMC(particles=64, generator=torch.Generator().manual_seed(2)).weighted(dec, dec.start(PROMPT),
                                                                                max_new_tokens=3)
    early = [p for p in res.particles if p.hypothesis.num_new < 3]
    assert res.resamples == 0 and early and len(early) < 64
    assert all(abs(p.log_weight) < 1e-5 for p in early)
    assert all(p.log_weight < -1e-3 for p in res.particles if p.hypothesis.num_new == 3)


def test_the_output_is_a_posterior_draw_or_the_map() -> None:
    dec = decoder()
    gen = torch.Generator().manual_seed(3)
    draws = Counter(SMC(particles=64, generator=gen).weighted(dec, dec.start(PROMPT), max_new_tokens=MAX).output.text
                    for _ in range(30))
    assert len(draws) > 1  # a draw, not always the mode
    res = SMC(particles=64, output="map", generator=gen).weighted(dec, dec.start(PROMPT), max_new_tokens=MAX)
    assert res.output.text == next(iter(res.posterior))
    assert res.hypotheses()[0] is res.output.hypothesis and len(res.hypotheses()) == 64


# ------------------------------------------------------------------ resampling
def test_systematic_resampling_gives_floor_or_ceil_copies_and_multinomial_is_unbiased() -> None:
    w = torch.tensor([0.5, 0.25, 0.125, 0.0, 0.125], dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        counts = Counter(systematic(w, 10, gen))
        for i, wi in enumerate(w.tolist()):
            assert math.floor(10 * wi) <= counts.get(i, 0) <= math.ceil(10 * wi)
    total = Counter()
    for _ in range(400):
        total.update(multinomial(w, 10, gen))
    assert total.get(3, 0) == 0
    for i, wi in enumerate(w.tolist()):
        assert abs(total.get(i, 0) / 4000 - wi) < 0.03


def test_ess() -> None:
    assert math.isclose(math.exp(log_ess([0.0] * 5)), 5.0)
    assert math.isclose(math.exp(log_ess([0.0, float("-inf"), float("-inf")])), 1.0)
    assert log_ess([float("-inf")] * 3) == float("-inf")


# ------------------------------------------------------------------ API
def test_generate_with_strategy_smc_returns_one_result_with_the_posterior() -> None:
    h = ModelHandle(model=model(), tokenizer=None, vocab=VOCAB, name="tiny")
    res = generate(h, PROMPT, grammar=GRAMMAR, strategy="smc", n=16, seed=0, max_new_tokens=MAX)
    assert res.smc is not None and len(res.smc.particles) == 16
    assert res.text in res.smc.posterior and res.stop_reason == "eos" and res.finished
    assert res.smc.log_z < 0 and len(res.smc.ess) >= 2
    again = generate(h, PROMPT, grammar=GRAMMAR, strategy=SMC(particles=16), seed=0, max_new_tokens=MAX)
    assert again.smc.posterior == pytest.approx(res.smc.posterior, rel=1e-5)  # the name and the object, one seed
    cut = generate(h, PROMPT, grammar=GRAMMAR, strategy="smc", n=4, seed=0, max_new_tokens=1)
    assert cut.stop_reason == "length" and not cut.finished and cut.smc.posterior == {}
    with pytest.raises(UsageError, match="temperature"):
        generate(h, PROMPT, grammar=GRAMMAR, strategy="smc", temperature=0.0, max_new_tokens=MAX)
    with pytest.raises(UsageError, match="particle"):
        generate(h, PROMPT, grammar=GRAMMAR, strategy=SMC(particles=4), n=8, max_new_tokens=MAX)
    with pytest.raises(UsageError, match="stop strings"):
        generate(h, PROMPT, grammar=GRAMMAR, strategy="smc", stop="-", max_new_tokens=MAX)


def test_smc_refuses_what_would_bias_its_weights() -> None:
    dec = decoder()
    steered = Decoder(dec.lm, Budgeted(dec.constraint, MAX), temperature=1.0, vocab=VOCAB)
    with pytest.raises(UsageError, match="Refines"):
        SMC(particles=2).weighted(steered, steered.start(PROMPT), max_new_tokens=MAX)
    with pytest.raises(UsageError):
        SMC(particles=0)
    with pytest.raises(UsageError):
        SMC(resampler="stratified")
    with pytest.raises(UsageError, match="finite or -inf"):
        SMC(particles=2, potentials=(Score(lambda t: float("nan")),)).weighted(dec, dec.start(PROMPT),
                                                                              max_new_tokens=MAX)
