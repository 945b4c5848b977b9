"""Beam / DiverseBeam: unconstrained Beam equals transformers' beam search token for token and score
for score; one batched forward per step with the prompt served from the KV cache."""

from __future__ import annotations

import warnings

import pytest
import torch

from fakes import HashLM, tiny_gemma3, tiny_llama
from tests.search.tasks import letters_vocab
from trellis.decoder import Decoder
from trellis.hf_lm import HFLanguageModel
from trellis.search import Beam, DiverseBeam

SCORE_TOL = 1e-4


def hf_beam(model, prompt, *, width, n, max_new, eos, length_penalty, early_stopping):
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model.generate(torch.tensor([prompt], device=model.device), num_beams=width, do_sample=False, num_return_sequences=n,
                             output_scores=True, return_dict_in_generate=True, max_new_tokens=max_new,
                             eos_token_id=list(eos), pad_token_id=0, length_penalty=length_penalty,
                             early_stopping=early_stopping)
    seqs = []
    for i in range(n):
        gen = int((out.beam_indices[i] != -1).sum())  # generated length (sequences are padded)
        seqs.append(out.sequences[i, len(prompt):len(prompt) + gen].tolist())
    return seqs, out.sequences_scores.tolist()


def compare(model, dec, prompt, *, width=4, n=3, max_new=10, length_penalty=1.0, early_stopping=False):
    res = Beam(width=width, n_best=n, length_penalty=length_penalty, early_stopping=early_stopping).search(
        dec, dec.start(prompt), max_new_tokens=max_new)
    ref_seqs, ref_scores = hf_beam(model, prompt, width=width, n=n, max_new=max_new, eos=sorted(dec.eos),
                                   length_penalty=length_penalty, early_stopping=early_stopping)
    assert [list(h.new_tokens) for h in res.hypotheses] == ref_seqs
    diff = max(abs(a - b) for a, b in zip(res.scores, ref_scores))
    assert diff < SCORE_TOL, diff
    return res


# many EOS ids make beams finish at different lengths, exercising the finished-set bookkeeping
EOS_SETS = {"one eos": lambda e: [e], "six eos": lambda e: [e, 5, 7, 11, 13, 17]}
SETTINGS = [(1.0, False), (0.5, True), (2.0, "never"), (-1.0, False)]


@pytest.mark.parametrize("make,eos", [(tiny_llama, 2), (tiny_gemma3, 1)], ids=["llama", "gemma3"])
@pytest.mark.parametrize("eos_set", list(EOS_SETS))
def test_beam_equals_transformers_beam_search(make, eos, eos_set):
    model = make()
    eoss = EOS_SETS[eos_set](eos)
    finished = 0
    for lp, es in SETTINGS[:2] if eos_set == "one eos" else SETTINGS:
        for prompt in ([5, 9, 13], list(range(3, 24))):
            dec = Decoder(HFLanguageModel(model), vocab=letters_vocab(model.config.vocab_size, eoss))
            res = compare(model, dec, prompt, length_penalty=lp, early_stopping=es)
            finished += sum(h.finished for h in res.hypotheses)
    if eos_set == "six eos":
        assert finished > 0  # EOS handling was exercised, not just the budget


def test_beam_is_one_batched_forward_per_step_and_never_recomputes_the_prompt():
    model = tiny_llama()
    lm = HFLanguageModel(model)
    dec = Decoder(lm)  # no EOS: every step runs
    prompt = list(range(3, 40))
    width, steps = 4, 12
    Beam(width=width)(dec, dec.start(prompt), max_new_tokens=steps)
    st = lm.stats
    assert st.forward_calls == steps
    # the prompt is forwarded once; afterwards each beam costs one new token per step
    assert st.tokens_forwarded <= len(prompt) + (steps - 1) * width
    assert st.tokens_reused >= (steps - 1) * len(prompt)


def test_beam_finds_a_likelier_sequence_than_greedy_and_scores_are_logprob_sums():
    from trellis.search import Greedy

    wins = 0
    for seed in range(20):
        dec = Decoder(HashLM(12, seed=seed, scale=2.0))
        root = dec.start([1])
        g = Greedy()(dec, root, max_new_tokens=6)[0]
        res = Beam(width=4, length_penalty=0.0, n_best=4).search(dec, root, max_new_tokens=6)
        b = res.hypotheses[0]
        assert b.logprob >= g.logprob - 1e-5
        wins += b.logprob > g.logprob + 1e-4
        assert res.scores == tuple(sorted(res.scores, reverse=True))
        for h, s in zip(res.hypotheses, res.scores):
            assert abs(h.logprob - s) < 1e-4  # length_penalty 0: the score is the plain sum
            assert len(set(h.tokens for h in res.hypotheses)) == len(res.hypotheses)
    assert wins >= 5  # beam search is not just greedy here


def test_diverse_beam_groups_differ_and_penalty_zero_matches_independent_groups():
    dec = Decoder(HashLM(30, seed=4, scale=2.0))
    root = dec.start([1])
    plain = DiverseBeam(width=4, groups=2, diversity_penalty=0.0, length_penalty=0.0).search(dec, root, max_new_tokens=6)
    # without a penalty every group runs the same beam search: each result appears in both groups
    firsts = [h.new_tokens for h in plain.hypotheses]
    assert len(set(firsts)) == 2
    div = DiverseBeam(width=4, groups=2, diversity_penalty=5.0, length_penalty=0.0).search(dec, root, max_new_tokens=6)
    assert len(set(h.new_tokens for h in div.hypotheses)) == 4
    # a huge penalty forces the second group's first token away from the first group's tokens
    g = nx_groups(div.tree)
    assert g[0] and g[1] and not (g[0] & g[1])
    for h in div.hypotheses:  # logprob stays the plain masked log-prob sum
        total, cur = 0.0, root
        for t in h.new_tokens:
            lp = dec.log_probs([cur])[0, t].item()
            total += lp
            cur = dec.extend(cur, t, lp)
        assert abs(total - h.logprob) < 1e-4


def nx_groups(tree):
    """First tokens kept by each group at depth 1."""
    out: dict[int, set[int]] = {0: set(), 1: set()}
    for _, d in tree.nodes(data=True):
        if d.get("depth") == 1 and d.get("kept"):
            out[d["group"]].add(d["token"])
    return out


def test_beam_validates_arguments():
    with pytest.raises(ValueError):
        Beam(width=2, n_best=3)
    with pytest.raises(ValueError):
        Beam(early_stopping="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        DiverseBeam(width=4, groups=3)


@pytest.mark.model
@pytest.mark.slow  # ~1 s per Gemma forward on a shared 2-core CPU: ~3 min
def test_beam_equals_transformers_on_gemma(gemma):
    model, tok = gemma.model, gemma.tokenizer
    dec = Decoder(HFLanguageModel(model), vocab=gemma.vocab)
    for text in ("The capital of France is", "def fibonacci(n):", "Once upon a time"):
        prompt = tok(text).input_ids
        compare(model, dec, prompt, width=4, n=2, max_new=16)
