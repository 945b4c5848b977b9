"""GrammarLogitsProcessor inside transformers' ``model.generate``: greedy (token for token equal to
trellis' own constrained greedy), sampling, left-padded batches, beam search, finished rows."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import LogitsProcessorList

from fakes import tiny_llama
from trellis.constrain import compile
from trellis.decoder import Decoder
from trellis.integrations import GrammarLogitsProcessor
from trellis.integrations.hf import DEAD, FINISHED
from trellis.hf_lm import HFLanguageModel
from trellis.mask import allocate_bitmask, allowed_ids
from trellis.search.greedy import Greedy
from trellis.tokens import Vocabulary

PAD, BOS, EOS = 0, 1, 2  # tiny_llama's config
V = 97

PARENS = r"""
start: "(" DIGITS ")"
DIGITS: /[0-9]{1,3}/
"""


def tiny_vocab() -> Vocabulary:
    """97 tokens (tiny_llama's width): JSON characters and pieces, a split UTF-8 character."""
    pieces = list('{}[],:"0123456789-.eE+ \nabcdefghijklmnopqrstuvwxyz()') + [
        "true", "false", "null", '{"', '":', '",', ' "', '": ', '"a"', "12", "0.5", '"}', "]}", "[{", ", ",
        "é", "\\n", "\\", "/", "ab", "le", "ru", "al", "se", "nu", "ll", "1e5", "-0", '"x": 1', "[]", "{}"]
    toks = [b"", b"", b""] + [p.encode() for p in pieces] + ["é".encode()[:1], "é".encode()[1:]]
    toks = list(dict.fromkeys(toks[3:]))
    toks = [b"", b"", b""] + toks
    while len(toks) < V:
        toks.append(f"q{len(toks)}".encode())
    assert len(toks) == V, len(toks)
    return Vocabulary(tuple(toks), eos=frozenset([EOS]), special=frozenset([PAD, BOS]))


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return tiny_vocab()


@pytest.fixture(scope="module")
def model():
    m = tiny_llama(vocab_size=V, seed=3)
    with torch.no_grad():  # sharper distributions: greedy paths far from float ties
        m.lm_head.weight.mul_(40.0)
    return m


def run(model, prompts: list[list[int]], proc: GrammarLogitsProcessor, **kw) -> list[list[int]]:
    """Left-pad ``prompts``, generate with ``proc``; the generated part of every returned row."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts], device=model.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)
    out = model.generate(ids, attention_mask=mask, logits_processor=LogitsProcessorList([proc]),
                         pad_token_id=PAD, eos_token_id=EOS, **kw)
    return out[:, width:].tolist()


def check(constraint, gen: list[int], *, complete: bool = False) -> bytes:
    """Assert ``gen`` obeys ``constraint`` (EOS only when accepting, then padding); its bytes."""
    state = constraint.start()
    for i, t in enumerate(gen):
        if t == EOS:
            assert constraint.is_accepting(state), f"EOS at {i} before the grammar accepts"
            assert all(x in (PAD, EOS) for x in gen[i + 1:]), "tokens after EOS are not padding"
            return constraint.vocab.decode(gen[:i])
        state = constraint.advance(state, t)
        assert state is not None, f"token {t} ({constraint.vocab.tokens[t]!r}) at {i} is not allowed"
    assert not complete, "did not finish"
    return constraint.vocab.decode(gen)


def trellis_greedy(model, constraint, prompt: list[int], n: int) -> list[int]:
    dec = Decoder(HFLanguageModel(model), constraint)
    hyp = Greedy()(dec, dec.start(prompt), max_new_tokens=n)[0]
    return list(hyp.new_tokens)


def strip(gen: list[int]) -> list[int]:
    """Generated tokens up to and including the first EOS (transformers pads after it)."""
    return gen[: gen.index(EOS) + 1] if EOS in gen else gen


PROMPTS = [[BOS, 40, 41, 42], [BOS, 7, 8, 9, 10, 11, 12, 13]]


@pytest.mark.parametrize("grammar", ["json.lark", PARENS])
def test_greedy_equals_trellis_greedy(model, vocab, grammar):
    c = compile(grammar, vocab)
    for prompt in PROMPTS:
        hf = run(model, [prompt], GrammarLogitsProcessor(c), do_sample=False, max_new_tokens=20)[0]
        check(c, hf)
        assert strip(hf) == trellis_greedy(model, c, prompt, 20)


@pytest.mark.parametrize("grammar", ["json.lark", PARENS])
def test_batched_left_padded_prompts(model, vocab, grammar):
    c = compile(grammar, vocab)
    rows = run(model, PROMPTS, GrammarLogitsProcessor(c), do_sample=False, max_new_tokens=20)
    for prompt, gen in zip(PROMPTS, rows):
        check(c, gen)
        assert strip(gen) == trellis_greedy(model, c, prompt, 20)


def test_sampling_obeys_the_grammar(model, vocab):
    c = compile("json.lark", vocab)
    finished = 0
    for seed in range(6):
        torch.manual_seed(seed)
        for gen in run(model, PROMPTS, GrammarLogitsProcessor(c), do_sample=True, max_new_tokens=24,
                       temperature=1.5):
            data = check(c, gen)
            if EOS in gen:
                json.loads(data)
                finished += 1
    p = compile(PARENS, vocab)
    for seed in range(4):
        torch.manual_seed(seed)
        for gen in run(model, PROMPTS, GrammarLogitsProcessor(p), do_sample=True, max_new_tokens=8):
            data = check(p, gen, complete=True)
            assert data.startswith(b"(") and data.endswith(b")")


@pytest.mark.parametrize("grammar", ["json.lark", PARENS])
def test_beam_search_obeys_the_grammar(model, vocab, grammar):
    c = compile(grammar, vocab)
    rows = run(model, PROMPTS, GrammarLogitsProcessor(c), num_beams=3, num_return_sequences=3,
               do_sample=False, max_new_tokens=12)
    assert len(rows) == 6
    for gen in rows:
        data = check(c, gen, complete=grammar == PARENS)
        if EOS in gen and grammar != PARENS:
            json.loads(data)


def test_renormalized_beam_search(model, vocab):
    c = compile(PARENS, vocab)
    rows = run(model, PROMPTS[:1], GrammarLogitsProcessor(c), num_beams=4, num_return_sequences=4,
               do_sample=False, max_new_tokens=8, renormalize_logits=True)
    assert len({tuple(r) for r in rows}) == 4
    for gen in rows:
        check(c, gen, complete=True)


def test_processor_restarts_on_a_new_prompt(model, vocab):
    c = compile("json.lark", vocab)
    proc = GrammarLogitsProcessor(c)
    run(model, PROMPTS[:1], proc, do_sample=False, max_new_tokens=6)
    assert proc.prompt_len == len(PROMPTS[0])
    again = run(model, PROMPTS[1:], proc, do_sample=False, max_new_tokens=10)[0]
    assert proc.prompt_len == len(PROMPTS[1])
    assert again == run(model, PROMPTS[1:], GrammarLogitsProcessor(c), do_sample=False, max_new_tokens=10)[0]


def test_finished_and_dead_rows_are_masked_to_eos(vocab):
    c = compile(PARENS, vocab)
    proc = GrammarLogitsProcessor(c)
    tok = {t: i for i, t in enumerate(vocab.tokens)}
    ok = [tok[b"("], tok[b"1"], tok[b")"]]
    assert proc.state_of(ok + [EOS, PAD, PAD]) is FINISHED
    assert proc.state_of([tok[b")"]]) is DEAD
    assert proc.state_of(ok[:2] + [EOS]) is DEAD  # EOS before the grammar accepts
    prompt = torch.tensor([[BOS, 5], [BOS, 5], [BOS, 5]])
    proc(prompt, torch.zeros(3, V))
    ids = torch.tensor([[BOS, 5] + ok + [EOS], [BOS, 5, tok[b")"], PAD, PAD, PAD],
                        [BOS, 5, tok[b"("], tok[b"1"], tok[b"2"], tok[b"3"]]])
    scores = proc(ids, torch.zeros(3, V))
    allowed = [torch.isfinite(r).nonzero().flatten().tolist() for r in scores]
    assert allowed[0] == [EOS] and allowed[1] == [EOS]
    assert allowed[2] == [tok[b")"]]
    st = c.start()
    for t in ids[2, 2:].tolist():
        st = c.advance(st, t)
    bm = allocate_bitmask(1, V)
    c.fill_mask(st, bm[0])
    assert allowed[2] == allowed_ids(bm[0], V)


@pytest.mark.model
def test_gemma_generate_equals_trellis_greedy(gemma):
    torch.set_num_threads(2)
    c = compile("json.lark", gemma.vocab)
    prompt = gemma.tokenizer('A person as JSON: {"name": "Ada", "born": 1815}\nAnother one:').input_ids
    proc = GrammarLogitsProcessor(c)
    out = gemma.model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                               logits_processor=LogitsProcessorList([proc]), do_sample=False, max_new_tokens=8)
    gen = out[0, len(prompt):].tolist()
    eos = sorted(gemma.vocab.eos)
    if gen and gen[-1] in eos:
        gen = gen[:-1]
    state = c.start()
    for t in gen:
        state = c.advance(state, t)
        assert state is not None
    dec = Decoder(HFLanguageModel(gemma.model), c)
    ref = Greedy()(dec, dec.start(prompt), max_new_tokens=8)[0]
    assert out[0, len(prompt):].tolist() == list(ref.new_tokens)
