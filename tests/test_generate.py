"""generate(): result objects, streaming across multi-byte characters, stop strings, the CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fakes import ScriptedLM, tiny_llama
from trellis import generate
from trellis.cli import main
from trellis.models import ModelHandle
from trellis.tokens import Vocabulary

PIECES = [b"<pad>", b"<eos>", b"h", b"\xc3", b"\xa9", b" ", b"\xe2", b"\x82", b"\xac", b"!", b"STOP", b"x"]


def scripted(script: list[str]) -> ModelHandle:
    toks = tuple(b"" if i < 2 else p for i, p in enumerate(PIECES))
    vocab = Vocabulary(toks, eos=frozenset({1}), special=frozenset({0, 1}))
    ids = [PIECES.index(s.encode("latin-1")) for s in script]
    return ModelHandle(model=ScriptedLM(len(toks), ids, prompt_len=1), tokenizer=None, vocab=vocab, name="scripted")


def test_result_carries_text_tokens_and_stats():
    h = scripted(["h", "!", "<eos>"])
    res = generate(h, [0], max_new_tokens=10)
    assert res.text == "h!" and res.finished and res.tokens == (2, 9, 1)
    assert res.stats.new_tokens == 3 and res.stats.tokens_per_s > 0


def test_budget_stops_unfinished():
    res = generate(scripted(["x"]), [0], max_new_tokens=4)
    assert res.text == "xxxx" and not res.finished


def test_stream_emits_whole_characters():
    # é and € arrive as single bytes, one token each: the stream must never show half a character
    h = scripted(["h", "\xc3", "\xa9", " ", "\xe2", "\x82", "\xac", "!", "<eos>"])
    stream = generate(h, [0], max_new_tokens=20, stream=True)
    pieces = list(stream)
    assert "".join(pieces) == "hé €!" == stream.result.text
    assert all("\ufffd" not in p for p in pieces)
    assert pieces == ["h", "é", " ", "€", "!"]


def test_stream_and_result_cut_at_stop_string():
    h = scripted(["h", "!", "STOP", "x", "x"])
    stream = generate(h, [0], max_new_tokens=20, stop=["ST"], stream=True)
    assert "".join(stream) == "h!" and stream.result.text == "h!" and stream.result.finished
    assert generate(h, [0], max_new_tokens=20, stop=["!S"]).text == "h"


def test_tokenizer_less_model_returns_ids_without_text():
    model = tiny_llama()
    res = generate(model, [5, 6, 7], max_new_tokens=5)
    assert res.text is None and len(res.tokens) == 5 and res.stats.forward_calls >= 1
    with pytest.raises(ValueError, match="tokenizer"):
        generate(model, "text needs a tokenizer", max_new_tokens=2)


def test_sampling_is_seeded():
    model = tiny_llama()
    a = generate(model, [5, 6], max_new_tokens=8, temperature=1.0, seed=3).tokens
    b = generate(model, [5, 6], max_new_tokens=8, temperature=1.0, seed=3).tokens
    c = generate(model, [5, 6], max_new_tokens=8, temperature=1.0, seed=4).tokens
    assert a == b and a != c


def test_cli_reports_bad_model_path_clearly(capsys):
    assert main(["generate", "--model", "/nonexistent/model", "hi"]) == 2
    assert "no such model path" in capsys.readouterr().err


@pytest.mark.model
def test_gemma_generate_is_coherent_text(gemma):
    res = generate(gemma, "The capital of France is Paris. The capital of Germany is", max_new_tokens=8)
    assert "Berlin" in res.text
    assert res.stats.forward_calls == len(res.tokens)  # prefill + one forward per further token


@pytest.mark.model
def test_cli_generate_and_info_on_gemma():
    out = subprocess.run([sys.executable, "-m", "trellis", "generate", "--max-new-tokens", "6", "-q",
                          "The capital of France is Paris. The capital of Germany is"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "Berlin" in out.stdout
    info = subprocess.run([sys.executable, "-m", "trellis", "info"], capture_output=True, text=True, timeout=600)
    assert info.returncode == 0 and "default model dir" in info.stdout and "ready" in info.stdout
    assert "C kernels" in info.stdout and "int8-block linears" in info.stdout


def test_cli_stop_strings_accept_backslash_escapes():
    from trellis.cli import unescape

    assert unescape(r"\n") == "\n" and unescape(r"é\t}") == "é\t}" and unescape("plain") == "plain"
