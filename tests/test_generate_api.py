"""generate() tells the truth and has what users reach for (issue 22): honest budget endings,
stop strings, seeds with strategy objects, batches, n, logprobs, strategies by name, banned tokens,
chat prompts without a double BOS, and a CLI that checks its arguments before loading a model."""

from __future__ import annotations

import json
import math

import pytest
import torch
from scipy.stats import chisquare

from fakes import HashLM, ScriptedLM, tiny_gemma3, tiny_llama
from trellis import generate
from trellis.cli import main
from trellis.constrain import compile
from trellis.decoder import Decoder
from trellis.models import ModelHandle
from trellis.search import Beam, BestOfN, Greedy, Sample
from trellis.tokens import Vocabulary

# A 97-token byte-ish vocabulary for real tiny HF models: 0 pad, 1 bos, 2 eos, then printable ASCII.
PIECES = [b"", b"", b""] + [bytes([b]) for b in range(32, 126)]
VOCAB = Vocabulary(tuple(PIECES), eos=frozenset({2}), special=frozenset({0, 1, 2}))
JSON = compile("json.lark", VOCAB, cache=False)


def handle(model=None, vocab=VOCAB) -> ModelHandle:
    return ModelHandle(model=model if model is not None else tiny_llama(), tokenizer=None, vocab=vocab, name="tiny")


def ids(text: str) -> list[int]:
    return [1] + [PIECES.index(bytes([c])) for c in text.encode()]


# ------------------------------------------------------------------ budget endings
def test_a_cut_output_is_returned_as_it_stands_and_says_length() -> None:
    """Default: no steering. An output that runs out of budget is the unsteered greedy prefix,
    ``finished=False``, ``stop_reason="length"`` (it used to be steered and marked finished)."""
    cut = 0
    for seed in range(12):
        h = handle(HashLM(len(PIECES), seed=seed, scale=2.0))
        res = generate(h, ids('{"a'), grammar=JSON, max_new_tokens=6)
        ref = Greedy()(Decoder(h.model, JSON, temperature=0.0, vocab=VOCAB),
                       Decoder(h.model, JSON, vocab=VOCAB).start(ids('{"a')), max_new_tokens=6)[0]
        assert res.tokens == ref.new_tokens, seed
        if not res.finished:
            cut += 1
            assert res.stop_reason == "length"
        else:
            assert res.stop_reason == "eos"
    assert cut >= 3, cut


def test_steering_is_opt_in_and_says_so() -> None:
    steered = 0
    for seed in range(12):
        h = handle(HashLM(len(PIECES), seed=seed, scale=2.0))
        plain = generate(h, ids(":"), grammar=JSON, max_new_tokens=8)
        res = generate(h, ids(":"), grammar=JSON, max_new_tokens=8, finish_in_budget=True)
        assert res.finished
        json.loads(res.text)
        if res.tokens != plain.tokens:
            assert res.stop_reason == "steered", seed
            steered += 1
    assert steered >= 3, steered


def test_default_sampling_near_the_end_is_the_locally_masked_distribution() -> None:
    """Chi-square: the last token under the default (max_new_tokens=1, one token left) is drawn from
    the masked softmax, not a budget-shaped one (which allowed only EOS there)."""
    lm = HashLM(len(PIECES), seed=7, scale=1.0)
    h = handle(lm)
    prompt = ids('{"k": 1')
    dec = Decoder(lm, JSON, temperature=1.0, vocab=VOCAB)
    p = dec.log_probs([dec.start(prompt)])[0].exp()
    allowed = torch.nonzero(p > 0).squeeze(-1).tolist()
    assert len(allowed) >= 5  # digits, '.', 'e', ',', '}', whitespace...
    draws = generate(h, prompt, grammar=JSON, max_new_tokens=1, temperature=1.0, n=4000, seed=0)
    counts = {t: 0 for t in allowed}
    for r in draws:
        counts[r.tokens[0]] += 1  # KeyError = a token outside the mask
    probs = [float(p[t]) for t in allowed]
    expected = [4000 * q / sum(probs) for q in probs]  # renormalised in float64 for scipy's sum check
    assert chisquare([counts[t] for t in allowed], expected).pvalue > 1e-3


# ------------------------------------------------------------------ bugs of issue 22 (3)
def scripted(script: list[bytes]) -> ModelHandle:
    return ModelHandle(model=ScriptedLM(len(PIECES), [PIECES.index(s) for s in script], prompt_len=1),
                       tokenizer=None, vocab=VOCAB, name="scripted")


def test_a_stop_string_is_one_string_not_its_characters() -> None:
    h = scripted([b"P", b"a", b"r", b"i", b"s", b".", b" ", b"x"])
    res = generate(h, [1], max_new_tokens=8, stop="s.")
    assert res.text == "Pari" and res.stop_reason == "stop"
    assert generate(h, [1], max_new_tokens=8, stop="Px").text == "Paris. x"  # 'P' alone must not stop it


def test_seed_applies_to_a_strategy_object() -> None:
    h = handle()
    runs = [generate(h, [5, 6], max_new_tokens=8, temperature=1.0, strategy=Sample(), seed=s).tokens for s in (3, 3, 4)]
    assert runs[0] == runs[1] != runs[2]
    bon = [generate(h, [5, 6], max_new_tokens=6, temperature=1.0, strategy=BestOfN(n=3), seed=9).tokens for _ in range(2)]
    assert bon[0] == bon[1]
    with pytest.raises(ValueError, match="own generator"):
        generate(h, [5], max_new_tokens=2, temperature=1.0, strategy=Sample(generator=torch.Generator()), seed=1)


@pytest.mark.parametrize("bad", [0, -5, 2.5, True])
def test_max_new_tokens_must_be_positive(bad) -> None:
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(handle(), [5], max_new_tokens=bad)


def test_shipped_json_grammars_end_at_the_value() -> None:
    """After the closing token only EOS is allowed: no trailing blanks to fill a budget with (a
    leading space stays allowed: after 'as JSON:' models write ' {')."""
    for name, doc in (("json.lark", ' {"a": [1, 2]}'), ("json_object.lark", ' {"a": {"b": null}}')):
        c = compile(name, VOCAB, cache=False)
        s = c.start()
        for b in doc.encode():
            s = c.advance(s, PIECES.index(bytes([b])))
            assert s is not None, (name, doc)
        assert c.is_accepting(s)
        row = torch.zeros((len(PIECES) + 31) // 32, dtype=torch.int32)
        c.fill_mask(s, row)
        allowed = [i for i in range(len(PIECES)) if (int(row[i >> 5]) >> (i & 31)) & 1]
        assert allowed == [2], (name, allowed)


# ------------------------------------------------------------------ everyday API (4)
def test_a_list_of_prompts_is_a_batch_identical_to_one_by_one_in_fewer_forwards() -> None:
    for make in (tiny_llama, tiny_gemma3):
        h = handle(make(vocab_size=97))
        prompts = [[1, 5, 6], [1] + list(range(10, 30)), [1, 7], [1, 8, 9, 10, 11, 12]]
        one = [generate(h, p, max_new_tokens=12) for p in prompts]
        fw = sum(r.stats.forward_calls for r in one)
        both = generate(h, prompts, max_new_tokens=12)
        assert isinstance(both, list) and len(both) == 4
        assert [r.tokens for r in both] == [r.tokens for r in one]
        assert both[0].stats.forward_calls <= 12 < fw  # one forward per step for the whole batch


def test_n_samples_per_prompt_and_n_needs_sampling() -> None:
    h = handle()
    out = generate(h, [[1, 5], [1, 6, 7]], n=3, temperature=1.0, seed=0, max_new_tokens=5)
    assert [len(o) for o in out] == [3, 3]
    assert len({r.tokens for r in out[0]}) > 1
    with pytest.raises(ValueError, match="sampling"):
        generate(h, [1, 5], n=2, max_new_tokens=3)


def test_logprobs_are_the_decoders_per_step_distribution() -> None:
    h = handle(HashLM(len(PIECES), seed=3, scale=2.0))
    res = generate(h, ids("{"), grammar=JSON, max_new_tokens=10, logprobs=3)
    assert [lp.token for lp in res.logprobs] == list(res.tokens)
    assert math.isclose(sum(lp.logprob for lp in res.logprobs), res.hypotheses[0].logprob, abs_tol=1e-4)
    for lp in res.logprobs:
        assert lp.top[0][0] == lp.token  # greedy: the chosen token is the best one
        assert [v for _, v in lp.top] == sorted((v for _, v in lp.top), reverse=True)
        assert all(math.isfinite(v) for _, v in lp.top)  # never a token the grammar forbids


def test_strategy_by_name_equals_the_object() -> None:
    h = handle()
    assert generate(h, [1, 5, 6], strategy="beam", max_new_tokens=6).tokens == \
        generate(h, [1, 5, 6], strategy=Beam(), max_new_tokens=6).tokens
    with pytest.raises(ValueError, match="unknown strategy"):
        generate(h, [1, 5], strategy="bream", max_new_tokens=2)


def test_suppressed_tokens_and_bad_words_are_never_generated() -> None:
    h = scripted([b"a", b"b", b"c", b"a", b"b", b"c"])
    res = generate(h, [1], max_new_tokens=6, suppress_tokens=[PIECES.index(b"b")])
    assert b"b" not in bytes(VOCAB.decode(res.tokens))
    # bad word "b c": 'c' is banned right after 'b' only
    res = generate(h, [1], max_new_tokens=6, bad_words=[[PIECES.index(b"b"), PIECES.index(b"c")]])
    assert "bc" not in res.text and res.text.startswith("ab")


def test_multimodal_placeholders_of_a_text_only_model_are_suppressed_by_default() -> None:
    """Gemma 3's GGUF tokenizer lists ``<start_of_image>`` as text and unconstrained sampling drew
    it (issue 57): by default a text-only model never emits its multimodal placeholders;
    ``suppress_tokens=None`` turns that off, and a multimodal model keeps them."""
    pieces = PIECES + [b"<start_of_image>", b"<end_of_image>"]
    vocab = Vocabulary(tuple(pieces), eos=frozenset({2}), special=frozenset({0, 1, 2}))
    img = pieces.index(b"<start_of_image>")
    lm = ScriptedLM(len(pieces), [img, img, pieces.index(b"a")], prompt_len=1)
    h = ModelHandle(model=lm, tokenizer=None, vocab=vocab, name="scripted")
    res = generate(h, [1], max_new_tokens=3)
    assert img not in res.tokens and "<start_of_image>" not in res.text
    assert generate(h, [1], max_new_tokens=3, suppress_tokens=None).tokens[:2] == (img, img)
    assert generate(h, [1], max_new_tokens=3, suppress_tokens=[pieces.index(b"a")]).tokens[:2] == (img, img)
    assert img not in generate(h, [1], max_new_tokens=3, suppress_tokens="special").tokens

    class Vision:  # a model whose config has a vision part: its placeholders are its input format
        config = type("C", (), {"vision_config": object()})()
    from trellis.generate import multimodal, suppressed_ids
    assert multimodal(Vision()) and not multimodal(lm)
    assert suppressed_ids("placeholders", vocab, None, text_only=False) == frozenset()
    assert suppressed_ids("placeholders", vocab, None) == {img, pieces.index(b"<end_of_image>")}


@pytest.mark.model
def test_a_reply_to_messages_ends_where_a_turn_does(gemma) -> None:
    """A base model asked through the chat template may open the next turn instead of closing its
    own (issue 57): under ``messages=``, ``<start_of_turn>`` ends the reply like ``<end_of_turn>``.
    (Scripted logits over Gemma's tokenizer and vocabulary: no forward pass.)"""
    from trellis.chat import TURN_MARKERS, chat_prompt, encode
    from trellis.generate import token_ids

    tok = gemma.tokenizer
    sot, eot = tok.convert_tokens_to_ids("<start_of_turn>"), tok.convert_tokens_to_ids("<end_of_turn>")
    assert token_ids(TURN_MARKERS, gemma.vocab, tok) == {sot, eot} and eot in gemma.vocab.eos
    msgs = [{"role": "user", "content": "Hi!"}]
    prompt_ids = encode(tok, chat_prompt(tok, msgs))
    n = len(prompt_ids)
    hi, user = tok.convert_tokens_to_ids("Hi"), tok.convert_tokens_to_ids("user")
    lm = ScriptedLM(gemma.vocab_size, [hi, sot, user, hi], prompt_len=n)
    h = ModelHandle(model=lm, tokenizer=tok, vocab=gemma.vocab, name="scripted")
    res = generate(h, messages=msgs, max_new_tokens=4)
    assert res.tokens == (hi, sot) and res.text == "Hi" and res.stop_reason == "eos"
    plain = generate(h, prompt_ids, max_new_tokens=4)  # the same ids as a plain prompt: no turns to end
    assert plain.tokens == (hi, sot, user, hi) and plain.stop_reason == "length"


def test_stream_rejects_batches() -> None:
    with pytest.raises(ValueError, match="stream"):
        generate(handle(), [[1, 5], [1, 6]], stream=True, max_new_tokens=2)


# ------------------------------------------------------------------ CLI: arguments before the model
@pytest.mark.parametrize("argv, message", [
    (["generate", "--max-new-tokens", "-5", "hi"], "--max-new-tokens must be >= 1"),
    (["generate", "--schema", "/nonexistent/s.json", "hi"], "no such file"),
    (["generate", "--grammar", "jsn.lark", "hi"], "no such grammar file"),
    (["generate", "--grammar", "start: foo", "hi"], "used but not defined"),
    (["generate", "--schema", '{"type": "strin"}', "hi"], "/type"),
    (["generate", "--top-p", "0", "hi"], "--top-p"),
    (["generate", "--strategy", "bream", "hi"], "invalid choice"),
    (["generate", "--device", "gpu", "hi"], "--device"),
    (["generate", "--device", "cuda:99", "hi"], "--device cuda:99"),
    (["generate", "--dtype", "fp8", "hi"], "invalid choice"),
])
def test_cli_checks_arguments_before_loading_the_model(monkeypatch, capsys, argv, message) -> None:
    import trellis.models

    def no_load(*a, **k):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr(trellis.models, "load", no_load)
    code = None
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert len(err.strip().splitlines()) == 1, err  # one line, no traceback, no usage block


# ------------------------------------------------------------------ chat prompts (Gemma's tokenizer)
@pytest.mark.model
def test_messages_use_the_chat_template_with_one_bos(gemma) -> None:
    from trellis.chat import chat_prompt, encode

    tok = gemma.tokenizer
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}]
    text = chat_prompt(tok, msgs)
    assert text.startswith("<bos><start_of_turn>user\nBe brief.\n\nCapital of France?<end_of_turn>\n")
    assert text.endswith("<start_of_turn>model\n")
    ids_ = encode(tok, text)
    assert ids_.count(tok.bos_token_id) == 1 and ids_[0] == tok.bos_token_id
    pasted = encode(tok, "<bos>Hello")  # a pasted transcript that starts with BOS gets no second one
    assert pasted.count(tok.bos_token_id) == 1
    res = generate(gemma, messages=msgs, max_new_tokens=4, logprobs=2)
    assert res.tokens and len(res.logprobs) == len(res.tokens)
    from trellis.generate import suppressed_ids

    img = tok.convert_tokens_to_ids("<start_of_image>")
    assert img != tok.unk_token_id and suppressed_ids(["<start_of_image>"], gemma.vocab, tok) == {img}
    special = suppressed_ids("special", gemma.vocab, tok)
    assert tok.convert_tokens_to_ids("<start_of_turn>") in special and not special & gemma.vocab.eos
    with pytest.raises(ValueError, match="not a token"):
        generate(gemma, "x", max_new_tokens=1, suppress_tokens=["<no_such_token>"])
