"""Vocabulary.from_hf: the exact bytes of every token id, checked against ``tokenizer.decode``.

Tokenizers are built offline here (GPT-2 byte level, and three SentencePiece-style decoders);
the same checks run on Gemma 3's real tokenizer under the ``model`` marker.

How a decode is compared (``expected_text``): where the vocabulary's bytes for a sequence are
valid UTF-8 they must equal ``decode(...).encode()`` exactly. Where they are not (a split
multi-byte character), tokenizers substitutes U+FFFD, and we apply its rule to our bytes:
byte-level decoding is ``String::from_utf8_lossy`` (the same maximal-subpart rule as Python's
``errors="replace"``); ``ByteFallback`` turns a run of ``<0xNN>`` tokens that is not valid UTF-8
into one U+FFFD *per token* (so ``<0x41><0xE2>`` decodes to two U+FFFD, losing the "A").
Sequences start with a fixed one-letter anchor token, because decoders strip a leading space at
the start of a sequence (``Strip`` after ``Fuse``, ``Metaspace``); a token's bytes do not.
"""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from trellis.hf_vocab import bytes_to_unicode, decoder_steps, token_scheme
from trellis.tokens import Vocabulary

CORPUS = [
    "The quick brown fox jumps over the lazy dog. 0123456789",
    "def f(x):\n    return {\"key\": [1, 2.5, null, true]}\n\ttabbed  double  spaces",
    "Ça va? Très bien, merci. Über straße, naïve café, ñandú.",
    "日本語のテキストと中文文本，还有한국어 텍스트.",
    "Emoji 🙂🚀👍🏽 and math ∑∫√ and arrows → ← ↑.",
    "Привет, мир! Γειά σου κόσμε. مرحبا بالعالم. שלום עולם",
] * 20

BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")


# --- offline tokenizers ----------------------------------------------------------------------------


def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    """A GPT-2-style byte-level BPE trained on CORPUS, with special and non-special added tokens."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, min_frequency=1, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer=trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    # "Ġhi!" is all table characters, so the ByteLevel decoder turns it into " hi!"; "<a b>" has a
    # real space (not in the table), so it stays as it is.
    hf.add_tokens(["<tool>", "Ġhi!", "<a b>"])
    hf.add_tokens(["<|im_start|>"], special_tokens=True)
    return hf


def sentencepiece_tokenizer(style: str) -> PreTrainedTokenizerFast:
    """A SentencePiece-style BPE with byte fallback, trained on CORPUS.

    ``style``: ``"gemma"`` (no dummy prefix; decoder Replace ▁, ByteFallback, Fuse), ``"llama"``
    (Prepend ▁ normaliser; decoder + Strip of the first space) or ``"metaspace"`` (Metaspace
    pre-tokenizer and decoder, ByteFallback first).
    """
    special = ["<pad>", "<eos>", "<bos>", "<unk>"]
    base = Tokenizer(models.BPE(unk_token="<unk>"))
    base.normalizer = normalizers.Replace(" ", "\u2581")
    base.pre_tokenizer = pre_tokenizers.Split(" ", "merged_with_previous")  # Gemma's: a no-op after the normaliser
    base.train_from_iterator(CORPUS, trainer=trainers.BpeTrainer(vocab_size=500, min_frequency=1,
                                                                 special_tokens=special, show_progress=False))
    trained = base.get_vocab()
    vocab = {s: i for i, s in enumerate(special)}
    for b in range(256):  # byte-fallback pieces, as in Llama/Gemma vocabularies
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece in sorted(trained, key=trained.__getitem__):
        vocab.setdefault(piece, len(vocab))
    merges = _merges(base)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    replace_then_bytes = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    if style == "gemma":
        tok.normalizer = normalizers.Replace(" ", "\u2581")
        tok.pre_tokenizer = pre_tokenizers.Split(" ", "merged_with_previous")
        tok.decoder = decoders.Sequence(replace_then_bytes)
    elif style == "llama":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        tok.decoder = decoders.Sequence(replace_then_bytes + [decoders.Strip(" ", 1, 0)])
    elif style == "metaspace":
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
        tok.decoder = decoders.Sequence([decoders.ByteFallback(),
                                         decoders.Metaspace(replacement="\u2581", prepend_scheme="first"),
                                         decoders.Fuse()])
    else:
        raise ValueError(style)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
                                 pad_token="<pad>")
    for s in special:  # flag them special in the added vocabulary, as converted SentencePiece tokenizers do
        hf.add_tokens([s], special_tokens=True)
    # A non-special added token with a ▁: the decoder's Replace applies to it too ("<tool call>").
    hf.add_tokens(["<tool\u2581call>", "\n\n"])
    hf.add_tokens(["<start_of_turn>", "<end_of_turn>"], special_tokens=True)
    return hf


def _merges(tok: Tokenizer) -> list[tuple[str, str]]:
    import json

    raw = json.loads(tok.to_str())["model"]["merges"]
    return [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in raw]  # type: ignore[misc]


TOKENIZERS = {
    "byte_level": byte_level_tokenizer,
    "sp_gemma": lambda: sentencepiece_tokenizer("gemma"),
    "sp_llama": lambda: sentencepiece_tokenizer("llama"),
    "sp_metaspace": lambda: sentencepiece_tokenizer("metaspace"),
}


@pytest.fixture(scope="module", params=sorted(TOKENIZERS))
def offline(request: pytest.FixtureRequest) -> tuple[str, PreTrainedTokenizerFast]:
    return request.param, TOKENIZERS[request.param]()


# --- the comparison --------------------------------------------------------------------------------


def decode(tok: Any, ids: list[int], *, skip_special: bool = False) -> str:
    return tok.decode(ids, skip_special_tokens=skip_special, clean_up_tokenization_spaces=False)


def fallback_ids(tok: Any) -> set[int]:
    """Ids whose piece is ``<0xNN>`` (from the tokenizer's own pieces, not from the Vocabulary)."""
    vocab = tok.backend_tokenizer.get_vocab(with_added_tokens=False)
    return {i for piece, i in vocab.items() if BYTE_TOKEN.fullmatch(piece)}


def expected_text(vocab: Vocabulary, ids: list[int], *, scheme: str, byte_ids: set[int]) -> tuple[str, bool]:
    """What ``decode`` must return given our bytes, and whether those bytes were valid UTF-8."""
    data = vocab.decode(ids)
    try:
        return data.decode("utf-8"), True
    except UnicodeDecodeError:
        pass
    if scheme == "byte_level":
        return data.decode("utf-8", errors="replace"), False
    ids = [i for i in ids if i not in vocab.special]  # skipped before the decoder: byte runs join across them
    parts: list[str] = []
    run: list[bytes] = []

    def flush() -> None:
        joined = b"".join(run)
        try:
            parts.append(joined.decode("utf-8"))
        except UnicodeDecodeError:
            parts.append("\ufffd" * len(run))  # tokenizers' ByteFallback: one U+FFFD per byte token
        run.clear()

    for i in ids:
        if i in byte_ids:
            run.append(vocab.tokens[i])
        else:
            flush()
            parts.append(vocab.tokens[i].decode("utf-8"))
    flush()
    return "".join(parts), False


def anchor_id(vocab: Vocabulary) -> int:
    """A token that is one ASCII letter: sequences start with it so no leading-space quirk applies."""
    return next(i for i, t in enumerate(vocab.tokens) if len(t) == 1 and t.isalpha() and i not in vocab.special)


def check_random_sequences(tok: Any, vocab: Vocabulary, *, n: int, seed: int,
                           pool: list[int] | None = None) -> tuple[int, int]:
    """Decode ``n`` random sequences (lengths 1-20) both ways; returns (valid UTF-8, invalid) counts."""
    rng = random.Random(seed)
    scheme = token_scheme(tok)
    byte_ids = fallback_ids(tok)
    ids = pool if pool is not None else [i for i in range(len(vocab)) if i not in vocab.special]
    anchor = anchor_id(vocab)
    counts = [0, 0]
    for _ in range(n):
        seq = [anchor] + [rng.choice(ids) for _ in range(rng.randint(1, 20))]
        want, valid = expected_text(vocab, seq, scheme=scheme, byte_ids=byte_ids)
        got = decode(tok, seq)
        assert got == want, (seq, got, want)
        counts[0 if valid else 1] += 1
    return counts[0], counts[1]


# --- offline tokenizers: both schemes --------------------------------------------------------------


def test_scheme_is_read_from_the_decoder(offline: tuple[str, PreTrainedTokenizerFast]) -> None:
    name, tok = offline
    assert token_scheme(tok) == ("byte_level" if name == "byte_level" else "sentencepiece")


def test_random_sequences_decode_to_the_vocabulary_bytes(offline: tuple[str, PreTrainedTokenizerFast]) -> None:
    _, tok = offline
    vocab = Vocabulary.from_hf(tok)
    valid, invalid = check_random_sequences(tok, vocab, n=10_000, seed=0)
    assert valid + invalid == 10_000 and valid > 500  # byte-level: most random sequences split a character
    # Sequences rich in byte tokens: split characters, both valid and invalid UTF-8 runs.
    single = [i for i, t in enumerate(vocab.tokens) if len(t) == 1 and i not in vocab.special]
    valid, invalid = check_random_sequences(tok, vocab, n=2_000, seed=1, pool=single)
    assert valid > 50 and invalid > 50


def test_split_characters_reassemble(offline: tuple[str, PreTrainedTokenizerFast]) -> None:
    _, tok = offline
    vocab = Vocabulary.from_hf(tok)
    by_bytes = {t: i for i, t in reversed(list(enumerate(vocab.tokens))) if len(t) == 1 and i not in vocab.special}
    for ch in ["€", "🙂", "ß", "é"]:
        ids = [by_bytes[bytes([b])] for b in ch.encode()]
        assert vocab.decode(ids) == ch.encode()
        assert decode(tok, ids) == ch
    assert any(len(vocab.tokens[i]) == 1 and vocab.tokens[i][0] >= 0x80 for i in by_bytes.values())


def test_encode_decode_roundtrip(offline: tuple[str, PreTrainedTokenizerFast]) -> None:
    name, tok = offline
    vocab = Vocabulary.from_hf(tok)
    for line in set(CORPUS) | {"unseen: ß½ 🦀 ζ", "  two  spaces\n\nand tabs\t\t"}:
        ids = tok(line, add_special_tokens=False).input_ids
        got = vocab.decode(ids)
        # Llama's Prepend normaliser always adds a ▁; Metaspace only to text not starting with one.
        if name == "sp_llama" or (name == "sp_metaspace" and not line.startswith(" ")):
            assert got == b" " + line.encode()  # the dummy prefix is a real token byte ...
            assert decode(tok, ids) == line  # ... that decode strips at the start of a sequence
        else:
            assert got == line.encode()


def test_special_and_added_tokens(offline: tuple[str, PreTrainedTokenizerFast]) -> None:
    name, tok = offline
    vocab = Vocabulary.from_hf(tok)
    added = tok.added_tokens_decoder
    specials = {i for i, t in added.items() if t.special}
    assert specials and specials <= vocab.special
    assert set(tok.all_special_ids) <= vocab.special
    assert vocab.eos == {tok.eos_token_id}
    assert all(vocab.tokens[i] == b"" for i in vocab.special)
    by_content = {t.content: i for i, t in added.items()}
    if name == "byte_level":
        assert vocab.tokens[by_content["<tool>"]] == b"<tool>"
        assert vocab.tokens[by_content["Ġhi!"]] == b" hi!"
        assert vocab.tokens[by_content["<a b>"]] == b"<a b>"
    else:
        # Non-special added tokens are `normalized`: stored (and decoded) after the normaliser, which
        # for Llama's prepends a ▁.
        prefix = b" " if name == "sp_llama" else b""
        assert vocab.tokens[by_content["<tool\u2581call>"]] == prefix + b"<tool call>"
        assert vocab.tokens[by_content["\n\n"]] == prefix + b"\n\n"
        assert by_content["<end_of_turn>"] in vocab.special
    # Special tokens contribute nothing: the same as decode(skip_special_tokens=True).
    rng = random.Random(3)
    ordinary = [i for i in range(len(vocab)) if i not in vocab.special]
    anchor = anchor_id(vocab)
    byte_ids = fallback_ids(tok)
    for _ in range(500):
        seq = [anchor] + [rng.choice(ordinary if rng.random() < 0.7 else sorted(specials)) for _ in range(12)]
        want, _ = expected_text(vocab, seq, scheme=token_scheme(tok), byte_ids=byte_ids)
        assert decode(tok, seq, skip_special=True) == want


def test_width_padding_and_extra_eos() -> None:
    tok = sentencepiece_tokenizer("gemma")
    n = len(tok)
    plain = Vocabulary.from_hf(tok)
    assert len(plain) == n == max(tok.get_vocab().values()) + 1
    wide = Vocabulary.from_hf(tok, n + 13, extra_eos=[tok.convert_tokens_to_ids("<end_of_turn>")])
    assert len(wide) == n + 13
    assert wide.tokens[:n] == plain.tokens and wide.tokens[n:] == (b"",) * 13
    assert set(range(n, n + 13)) <= wide.special  # padding ids are never text
    assert wide.eos == {tok.eos_token_id, tok.convert_tokens_to_ids("<end_of_turn>")} and wide.eos <= wide.special
    narrow = Vocabulary.from_hf(tok, n - 3)  # the added tokens at the end do not fit the logits
    assert narrow.tokens == plain.tokens[: n - 3]
    with pytest.raises(ValueError, match="outside vocabulary"):
        Vocabulary.from_hf(tok, n, extra_eos=[n + 5])


def test_fingerprint_is_stable_and_distinguishes() -> None:
    a = Vocabulary.from_hf(sentencepiece_tokenizer("gemma"))
    b = Vocabulary.from_hf(sentencepiece_tokenizer("gemma"))
    c = Vocabulary.from_hf(sentencepiece_tokenizer("gemma"), len(a) + 1)
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


def test_raw_tokenizers_object_is_accepted() -> None:
    hf = byte_level_tokenizer()
    raw = Vocabulary.from_hf(hf.backend_tokenizer)
    full = Vocabulary.from_hf(hf)
    assert raw.tokens == full.tokens
    assert raw.eos == frozenset()  # a bare tokenizers.Tokenizer names no EOS ...
    assert full.eos == {hf.eos_token_id}


def test_byte_level_table_is_gpt2s() -> None:
    table = bytes_to_unicode()
    assert len(set(table.values())) == 256
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("a")] == "a"


def test_unsupported_tokenizers_raise() -> None:
    with pytest.raises(TypeError, match="fast"):
        Vocabulary.from_hf(object())
    with pytest.raises(ValueError, match="WordPiece"):
        decoder_steps({"type": "WordPiece", "prefix": "##", "cleanup": True})
    with pytest.raises(ValueError, match="no decoder"):
        decoder_steps(None)
    tok = Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>"))
    with pytest.raises(ValueError, match="no decoder"):
        Vocabulary.from_hf(tok)


def test_per_token_strip_before_fuse() -> None:
    steps, scheme = decoder_steps({"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "Strip", "content": " ", "start": 1, "stop": 1},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 5, "stop": 5}]})
    assert scheme == "sentencepiece"
    out: Any = "\u2581\u2581ab\u2581"
    for step in steps:
        out = step(out)
    assert out == " ab"  # one space stripped at each end; the Strip after Fuse acts on whole texts only


# --- Gemma 3's real tokenizer ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def gemma_vocab(gemma: Any) -> Vocabulary:
    assert gemma.vocab is not None
    return gemma.vocab


@pytest.mark.model
def test_gemma_facts(gemma: Any, gemma_vocab: Vocabulary) -> None:
    tok = gemma.tokenizer
    assert token_scheme(tok) == "sentencepiece"
    assert len(gemma_vocab) == gemma.vocab_size == 262_144 == len(tok)
    assert gemma_vocab.eos == {1, 106}  # <eos>, and <end_of_turn> from the generation config
    assert tok.convert_ids_to_tokens([1, 105, 106]) == ["<eos>", "<start_of_turn>", "<end_of_turn>"]
    assert {0, 1, 2, 3, 4, 105, 106} <= gemma_vocab.special
    assert len(gemma_vocab.special) == 6_249 == sum(t.special for t in tok.added_tokens_decoder.values())
    assert gemma_vocab.tokens[tok.convert_tokens_to_ids("<0xE2>")] == b"\xe2"
    assert gemma_vocab.tokens[tok.convert_tokens_to_ids("\u2581world")] == b" world"
    assert gemma_vocab.tokens[107] == b"\n"  # a non-special added token
    # No dummy prefix on encode, and decode keeps a leading space (no Strip / Metaspace).
    assert tok("Hello", add_special_tokens=False).input_ids == [tok.convert_tokens_to_ids("Hello")]
    assert tok("Hello").input_ids[0] == tok.bos_token_id == 2
    assert decode(tok, [tok.convert_tokens_to_ids("\u2581Hello")]) == " Hello"


@pytest.mark.model
def test_gemma_random_sequences(gemma: Any, gemma_vocab: Vocabulary) -> None:
    tok = gemma.tokenizer
    valid, invalid = check_random_sequences(tok, gemma_vocab, n=10_000, seed=0)
    assert valid + invalid == 10_000 and valid > 9_000
    byte_tokens = sorted(fallback_ids(tok))
    words = [tok.convert_tokens_to_ids(w) for w in ["Hello", "\u2581world", "\u2581the", "."]]
    valid, invalid = check_random_sequences(tok, gemma_vocab, n=2_000, seed=1, pool=byte_tokens + words)
    assert valid > 50 and invalid > 50


@pytest.mark.model
def test_gemma_special_tokens_decode_to_nothing(gemma: Any, gemma_vocab: Vocabulary) -> None:
    tok = gemma.tokenizer
    rng = random.Random(5)
    ordinary = [i for i in range(len(gemma_vocab)) if i not in gemma_vocab.special]
    specials = sorted(gemma_vocab.special)
    byte_ids = fallback_ids(tok)
    for _ in range(1_000):
        seq = [anchor_id(gemma_vocab)] + [rng.choice(ordinary if rng.random() < 0.7 else specials)
                                          for _ in range(12)]
        want, _ = expected_text(gemma_vocab, seq, scheme="sentencepiece", byte_ids=byte_ids)
        assert decode(tok, seq, skip_special=True) == want


@pytest.mark.model
def test_gemma_roundtrip(gemma: Any, gemma_vocab: Vocabulary) -> None:
    tok = gemma.tokenizer
    for line in set(CORPUS) | {"unseen: ß½ 🦀 ζ \U0001fae8", "  two  spaces\n\nand tabs\t\t"}:
        ids = tok(line, add_special_tokens=False).input_ids
        assert gemma_vocab.decode(ids) == line.encode()
