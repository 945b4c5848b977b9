"""The CUDA path: masks, constrained greedy, sampling with a seed, speculation, beam search and the
transformers logits processor with the model on a GPU. Each test compares against the same run on
the CPU (or against the GPU's own plain greedy), so a device mix-up (a CPU generator for CUDA
probabilities, a bitmask left on the host, a CPU index into a CUDA tensor) fails here.

Marked ``gpu``: skipped where ``torch.cuda.is_available()`` is false (CI has no GPU). Run them on a
GPU machine with ``python -m pytest -q -m gpu tests/test_cuda.py``."""

from __future__ import annotations

import copy
import json
import os

import pytest
import torch

from fakes import assert_greedy_equal_up_to_ties, tiny_gemma3, tiny_llama
from trellis import generate
from trellis.constrain import compile
from trellis.decoder import Decoder
from trellis.hf_lm import HFLanguageModel
from trellis.mask import apply_bitmask_, bitmask_to_bool
from trellis.models import ModelHandle
from trellis.search import Beam, Greedy
from trellis.speculate import ModelDrafter, PromptLookup, Speculative, TokenRecycling
from trellis.speculate.node_budget import DraftBudget
from trellis.tokens import Vocabulary

# TRELLIS_TEST_DEVICE=cpu runs the same logic on the host (a dry run of this file without a GPU).
DEV = os.environ.get("TRELLIS_TEST_DEVICE", "cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(DEV == "cuda" and not torch.cuda.is_available(),
                                                  reason="needs a CUDA device")]

PIECES = [b"", b"", b""] + [bytes([b]) for b in range(32, 126)]  # 97 tokens: pad, bos, eos, ASCII
VOCAB = Vocabulary(tuple(PIECES), eos=frozenset({2}), special=frozenset({0, 1, 2}))


@pytest.fixture(autouse=True)
def _exact_float32():
    """TF32 matmuls differ from the CPU in the 3rd decimal: comparisons with the CPU need fp32."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@pytest.fixture(scope="module")
def json_grammar():
    return compile("json.lark", VOCAB, cache=False)


def sharp(model):
    """Sharper distributions, so greedy paths are far from float ties between CPU and GPU kernels."""
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)
    return model


def ids(text: str) -> list[int]:
    return [1] + [PIECES.index(bytes([c])) for c in text.encode()]


def assert_obeys(grammar, tokens, ends=None) -> None:
    """``tokens`` is a prefix of the grammar's language, and where one of ``ends`` (default: the
    grammar's EOS ids) appears the grammar accepts there."""
    ends = grammar.vocab.eos if ends is None else ends
    state = grammar.start()
    for t in tokens:
        if t in ends:
            assert grammar.is_accepting(state)
            return
        state = grammar.advance(state, t)
        assert state is not None


def test_bitmask_to_bool_on_cuda_equals_the_cpu():
    g = torch.Generator().manual_seed(0)
    for v in (97, 262_144, 262_145):
        words = (v + 31) // 32
        bm = torch.randint(-(1 << 31), (1 << 31) - 1, (3, words), generator=g, dtype=torch.int64).to(torch.int32)
        cpu = bitmask_to_bool(bm, v)
        gpu = bitmask_to_bool(bm.to(DEV), v)
        assert gpu.device.type == torch.device(DEV).type
        assert torch.equal(gpu.cpu(), cpu)
        logits = torch.randn(3, v + 5, generator=g)
        want = apply_bitmask_(logits.clone(), bm)
        got = apply_bitmask_(logits.to(DEV), bm)  # a host bitmask on device logits
        assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("make", [tiny_llama, tiny_gemma3], ids=["llama", "gemma3"])
def test_constrained_greedy_on_cuda_equals_the_cpu(make, json_grammar):
    cpu = sharp(make(vocab_size=97, seed=4))
    gpu = copy.deepcopy(cpu).to(DEV)
    for prompt in ('{"a', "[1, ", ":"):
        want = generate(ModelHandle(cpu, None, VOCAB, "cpu"), ids(prompt), grammar=json_grammar, max_new_tokens=40)
        got = generate(ModelHandle(gpu, None, VOCAB, "gpu"), ids(prompt), grammar=json_grammar, max_new_tokens=40)
        assert_greedy_equal_up_to_ties(cpu, ids(prompt), got.tokens, want.tokens)
        assert_obeys(json_grammar, got.tokens)


def test_seeded_sampling_on_cuda_is_reproducible_and_obeys_the_grammar(json_grammar):
    gpu = tiny_llama(vocab_size=97, seed=5).to(DEV)
    h = ModelHandle(gpu, None, VOCAB, "gpu")
    a = generate(h, ids("["), grammar=json_grammar, temperature=1.0, seed=7, max_new_tokens=30, n=3)
    b = generate(h, ids("["), grammar=json_grammar, temperature=1.0, seed=7, max_new_tokens=30, n=3)
    assert [r.tokens for r in a] == [r.tokens for r in b]
    for r in a:
        if r.finished:
            json.loads(r.text)  # the grammar covers the generated text, not the prompt


@pytest.mark.parametrize("constrained", [False, True])
def test_speculation_on_cuda_is_greedy(constrained, json_grammar):
    target = sharp(tiny_gemma3(vocab_size=97, seed=6)).to(DEV)
    lm = HFLanguageModel(target)
    dec = Decoder(lm, json_grammar, temperature=0.0, vocab=VOCAB) if constrained else \
        Decoder(lm, temperature=0.0, vocab=VOCAB)
    prompt = ids('{"ab": [1, 2], "ab": [1, ')
    ref = Greedy()(dec, dec.start(prompt), max_new_tokens=32)[0]
    for drafter in (PromptLookup(), TokenRecycling(97), ModelDrafter(tiny_llama(vocab_size=97, seed=11).to(DEV), width=2)):
        out = Speculative(drafter, max_nodes=10)(dec, dec.start(prompt), max_new_tokens=32)[0]
        assert out.tokens == ref.tokens, type(drafter).__name__
        assert abs(out.logprob - ref.logprob) < 1e-3


def test_beam_on_cuda_equals_transformers_on_cuda():
    model = tiny_llama(vocab_size=97, seed=2).to(DEV)
    prompt = [1, 40, 41, 42]
    dec = Decoder(HFLanguageModel(model), temperature=0.0, vocab=VOCAB)
    res = Beam(width=4, n_best=2).search(dec, dec.start(prompt), max_new_tokens=8)
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt], device=DEV), num_beams=4, num_return_sequences=2,
                             do_sample=False, max_new_tokens=8, eos_token_id=2, pad_token_id=0,
                             output_scores=True, return_dict_in_generate=True)
    for i, hyp in enumerate(res.hypotheses):
        gen = int((out.beam_indices[i] != -1).sum())
        assert list(hyp.new_tokens) == out.sequences[i, len(prompt):len(prompt) + gen].tolist()
    assert max(abs(a - b) for a, b in zip(res.scores, out.sequences_scores.tolist())) < 1e-4


def test_logits_processor_on_cuda(json_grammar):
    from transformers import LogitsProcessorList

    from trellis.integrations import GrammarLogitsProcessor

    model = sharp(tiny_llama(vocab_size=97, seed=3)).to(DEV)
    prompts = [ids("["), ids('{"a": ')]
    width = max(map(len, prompts))
    inp = torch.tensor([[0] * (width - len(p)) + p for p in prompts], device=DEV)
    att = (inp != 0).long()
    proc = GrammarLogitsProcessor(json_grammar)
    out = model.generate(inp, attention_mask=att, logits_processor=LogitsProcessorList([proc]),
                         max_new_tokens=30, do_sample=False, pad_token_id=0, eos_token_id=2)
    for row in out[:, width:].tolist():
        assert_obeys(json_grammar, row, ends={0, 2})  # EOS, then padding


def test_a_262k_vocabulary_on_cuda(json_grammar):
    """Gemma's vocabulary width: the bitmask crosses to the device every step."""
    rng = torch.Generator().manual_seed(0)
    alphabet = b'{}[],:"0123456789.-+eE abcdefghijklmnopqrstuvwxyz\n\\'
    toks = {bytes([c]) for c in range(32, 127)}
    while len(toks) < 262_144 - 3:
        n = int(torch.randint(1, 7, (1,), generator=rng))
        toks.add(bytes(alphabet[int(i)] for i in torch.randint(0, len(alphabet), (n,), generator=rng)))
    vocab = Vocabulary((b"", b"", b"") + tuple(sorted(toks)), eos=frozenset({2}), special=frozenset({0, 1, 2}))
    grammar = compile("json.lark", vocab, cache=False)
    model = tiny_gemma3(vocab_size=len(vocab.tokens), seed=1).to(DEV)
    prompt = [1] + [vocab.tokens.index(b"[")]
    res = generate(ModelHandle(model, None, vocab, "gpu"), prompt, grammar=grammar, max_new_tokens=24)
    assert_obeys(grammar, res.tokens)


@pytest.mark.parametrize("name", ["greedy", "sample", "beam", "diverse-beam", "lookahead", "mcts", "best-of-n",
                                  "entropy-gate"])
def test_every_strategy_by_name_runs_on_cuda_and_obeys_the_grammar(name, json_grammar):
    h = ModelHandle(tiny_llama(vocab_size=97, seed=8).to(DEV), None, VOCAB, "gpu")
    a = generate(h, ids("["), grammar=json_grammar, strategy=name, temperature=1.0, seed=3, max_new_tokens=10)
    b = generate(h, ids("["), grammar=json_grammar, strategy=name, temperature=1.0, seed=3, max_new_tokens=10)
    assert a.tokens == b.tokens  # seeded: reproducible on the device too
    assert_obeys(json_grammar, a.tokens)


@pytest.mark.parametrize("tree", [False, True])
def test_speculative_sampling_on_cuda_follows_the_seed_and_the_grammar(tree, json_grammar):
    """Rejection sampling draws through a CPU generator from CUDA distributions."""
    target = tiny_gemma3(vocab_size=97, seed=6).to(DEV)
    small = tiny_llama(vocab_size=97, seed=11).to(DEV)
    outs = []
    for _ in range(2):  # a new drafter each time: its stopping threshold adapts over a run
        dec = Decoder(HFLanguageModel(target), json_grammar, temperature=1.0, vocab=VOCAB)
        drafter = ModelDrafter(small, width=2 if tree else 1, generator=torch.Generator().manual_seed(1))
        spec = Speculative(drafter, max_nodes=8, generator=torch.Generator().manual_seed(5),
                           budget=DraftBudget(arms=(6,)))  # fixed: the default budget follows the clock
        outs.append(spec(dec, dec.start(ids("[")), max_new_tokens=24)[0])
    assert outs[0].tokens == outs[1].tokens
    assert_obeys(json_grammar, outs[0].new_tokens)


@pytest.mark.parametrize("n", [64, 65, 129, 130])
def test_forward_on_cuda_equals_the_cpu_at_every_length(n):
    """At lengths of 1 mod 64, torch 2.11+cu130's memory-efficient attention kernel was wrong for
    Gemma 3's grouped-query attention with a mask (logits off by 0.3-0.4): trellis.attention_guard
    probes for it and routes around it."""
    cpu = tiny_gemma3(vocab_size=97, seed=2)
    gpu = copy.deepcopy(cpu).to(DEV)
    seq = [3 + (7 * i) % 90 for i in range(n)]
    want = HFLanguageModel(cpu).logits([seq])[0]
    got = HFLanguageModel(gpu).logits([seq])[0].cpu()
    assert float((got - want).abs().max()) < 1e-4
