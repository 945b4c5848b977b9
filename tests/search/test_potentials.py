"""SMC's building blocks: the proposal's weight is the allowed mass, potentials say what they
promise, and ``Vocabulary.ending_at`` turns a line end into the EOS."""

from __future__ import annotations

import math

import pytest
import torch

from fakes import HashLM
from trellis.constrain import compile
from trellis.decoder import Decoder
from trellis.errors import UsageError
from trellis.search import Check, JsonSchemaValid, PythonSyntax, Score
from trellis.search.potentials import prefix_text
from trellis.tokens import Vocabulary


def test_the_proposal_is_the_masked_model_and_its_weight_the_allowed_mass() -> None:
    vocab = Vocabulary((b"", b"", b"", b"a", b"b", b"ab", b"c"), eos=frozenset({2}), special=frozenset({0, 1, 2}))
    con = compile('start: "ab" | "b"', vocab, cache=False)
    for temperature in (1.0, 0.7):
        dec = Decoder(HashLM(len(vocab), seed=4), con, temperature=temperature, vocab=vocab)
        h = dec.start([1])
        prop = dec.proposal([h])
        log_q, log_mass, listed = prop.log_q, prop.log_mass, prop.allowed
        assert listed[0].tolist() == [3, 4, 5]
        assert torch.equal(prop.row(0)[listed[0]], prop.sparse_log_q[0])
        raw = torch.log_softmax(dec.lm.logits([h.tokens])[0] / temperature, -1)
        allowed = [3, 4, 5]  # "a", "b", "ab": each keeps the text a prefix of the language
        assert torch.isfinite(log_q[0]).nonzero().flatten().tolist() == allowed
        assert math.isclose(float(log_mass[0]), float(torch.logsumexp(raw[allowed], 0)), rel_tol=1e-5)
        assert torch.allclose(log_q[0, allowed], raw[allowed] - log_mass[0], atol=1e-5)
        done = dec.extend(h, 5)  # "ab": complete, only EOS may follow
        prop = dec.proposal([done], eos_only=True)
        log_q, log_mass = prop.log_q, prop.log_mass
        assert torch.isfinite(log_q[0]).nonzero().flatten().tolist() == [2]
        assert math.isclose(float(log_mass[0]), float(torch.log_softmax(
            dec.lm.logits([done.tokens])[0] / temperature, -1)[2]), rel_tol=1e-5)
        half = dec.extend(h, 3)  # "a": not complete, so EOS-only allows nothing
        assert float(dec.proposal([half], eos_only=True).log_mass[0]) == float("-inf")
    with pytest.raises(UsageError, match="temperature"):
        Decoder(HashLM(len(vocab)), con, temperature=0.0, vocab=vocab).proposal([h])


def test_potentials_score_what_they_say() -> None:
    schema = {"type": "object", "properties": {"ids": {"type": "array", "uniqueItems": True},
                                               "at": {"type": "string", "format": "date"}}}
    js = JsonSchemaValid(schema)
    assert js.complete('{"ids": [1, 2], "at": "2026-11-28"}') == 0.0
    assert js.complete('{"ids": [1, 1]}') == float("-inf")  # uniqueItems: what a grammar cannot say
    assert js.complete('{"at": "2026-13-40"}') == float("-inf")  # the format is checked
    assert js.complete('{"ids": [') == float("-inf") and js.prefix('{"ids": [') == 0.0
    py = PythonSyntax()
    assert py.prefix("def f(x):\n    return (x +") == 0.0
    assert py.prefix("def f(x):\n    return x)\n") == float("-inf")  # can no longer compile
    assert py.complete("def f(x):\n    return x\n") == 0.0 and py.complete("def f(:\n") == float("-inf")
    assert Check(lambda t: t.endswith("!")).complete("hi!") == 0.0
    assert Check(lambda t: True, prefix_fn=lambda t: "x" not in t).prefix("axe") == float("-inf")
    assert Score(lambda t: 0.5 * len(t)).complete("abcd") == 2.0
    with pytest.raises(UsageError):
        Score(lambda t: float("inf")).complete("a")


def test_prefix_text_drops_a_character_cut_at_the_end() -> None:
    e = "é".encode()  # 2 bytes
    assert prefix_text(b"caf" + e) == "café"
    assert prefix_text(b"caf" + e[:1]) == "caf"
    snow = "☃".encode()  # 3 bytes
    assert prefix_text(b"a" + snow[:2]) == "a" and prefix_text(b"a" + snow) == "a☃"


def test_ending_at_makes_line_ends_the_eos() -> None:
    vocab = Vocabulary((b"", b"", b"", b"a", b"\n", b"\n\n", b"b\n"), eos=frozenset({2}), special=frozenset({0, 1, 2}))
    lines = vocab.ending_at(b"\n")
    assert lines.eos == frozenset({4, 5})  # tokens that start with a newline; "b\n" writes "b" first
    assert lines.tokens[4] == lines.tokens[5] == b"" and lines.tokens[6] == b"b\n"
    assert 2 in lines.special and 2 not in lines.eos
    with pytest.raises(UsageError):
        vocab.ending_at(b"zz")
    con = compile('start: "a"+', lines, cache=False)
    dec = Decoder(HashLM(len(lines), seed=1), con, temperature=1.0, vocab=lines)
    h = dec.extend(dec.start([1]), 3)
    assert dec.extend(h, 5).finished and dec.text(dec.extend(h, 5)) == "a"
