"""The exact bytes of every token id of a transformers tokenizer (backs ``Vocabulary.from_hf``).

The byte string of a token is what it contributes to ``tokenizer.decode``'s output, computed by
replaying the backend tokenizer's decoder chain (its JSON, not the model's name) on each token in
isolation. Two schemes cover causal LMs:

* SentencePiece style (Llama, Gemma, Mistral): ``Replace("▁", " ")`` or ``Metaspace`` turns ``▁``
  into a space, ``ByteFallback`` turns ``<0xNN>`` into the single byte ``NN`` (possibly half a
  UTF-8 character), and everything else is the UTF-8 of the piece.
* GPT-2 byte level (GPT-2, Llama 3, Qwen): every character of a piece stands for one byte through
  the ``bytes_to_unicode`` table, which is inverted here.

What the decoder does only at the start of a whole sequence (``Strip`` after ``Fuse``, the first
token's ``▁`` under ``Metaspace``) is left out: a token's bytes do not depend on its position.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from trellis.errors import UsageError

if TYPE_CHECKING:
    from trellis.tokens import Vocabulary

__all__ = ["Scheme", "bytes_to_unicode", "decoder_steps", "token_scheme", "vocabulary_from_hf"]

logger = logging.getLogger(__name__)

V = TypeVar("V", bound="Vocabulary")
Scheme = Literal["byte_level", "sentencepiece", "plain"]
# One step of a decoder chain applied to one token; bytes once a step has produced raw bytes.
_Step = Callable[[str | bytes], str | bytes]

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table from each byte to the printable character that stands for it in the vocabulary."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    table = {b: chr(b) for b in printable}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


def _byte_level_table() -> dict[int, int]:
    """A ``str.translate`` table: each GPT-2 character -> the Latin-1 character of its byte.

    The 68 characters below U+0100 that are not in the table (space, controls, ...) map to
    U+FFFF so that ``encode("latin-1")`` fails on them, exactly when tokenizers' ByteLevel
    decoder would fall back to the token's own UTF-8.
    """
    table = {ord(c): b for b, c in bytes_to_unicode().items()}
    for c in range(256):
        table.setdefault(c, 0xFFFF)
    return table


_BYTE_LEVEL = _byte_level_table()


def _byte_level(token: str | bytes) -> bytes:
    if isinstance(token, bytes):
        return token
    try:
        return token.translate(_BYTE_LEVEL).encode("latin-1")
    except UnicodeEncodeError:
        # tokenizers keeps a token with any character outside the table as its own UTF-8.
        return token.encode()


def _byte_fallback(token: str | bytes) -> str | bytes:
    if isinstance(token, str) and len(token) == 6 and (m := _BYTE_TOKEN.fullmatch(token)):
        return bytes([int(m.group(1), 16)])
    return token


def _replace(pattern: dict[str, str], content: str) -> _Step:
    if "String" in pattern:
        old = pattern["String"]

        def step(token: str | bytes) -> str | bytes:
            if isinstance(token, bytes):
                return token.replace(old.encode(), content.encode())
            return token.replace(old, content)

        return step
    regex = re.compile(pattern["Regex"])

    def regex_step(token: str | bytes) -> str | bytes:
        if isinstance(token, bytes):
            return token  # a lone fallback byte never matches a text pattern
        return regex.sub(content, token)

    return regex_step


def _strip(content: str, start: int, stop: int) -> _Step:
    def step(token: str | bytes) -> str | bytes:
        if isinstance(token, bytes):
            return token
        lo, hi = 0, len(token)
        while lo < min(start, hi) and token[lo] == content:
            lo += 1
        while len(token) - hi < stop and hi > lo and token[hi - 1] == content:
            hi -= 1
        return token[lo:hi]

    return step


def decoder_steps(decoder: dict[str, Any] | None) -> tuple[tuple[_Step, ...], Scheme]:
    """Compile a tokenizers decoder (its JSON) into per-token steps, and name its scheme.

    Raises ``ValueError`` for decoders that do not map tokens to text one by one (WordPiece,
    BPEDecoder, CTC) or for a tokenizer without a decoder.
    """
    if decoder is None:
        raise UsageError("the tokenizer has no decoder; trellis needs one to know the bytes of each token")
    flat = list(_flatten(decoder))
    steps: list[_Step] = []
    scheme: Scheme = "plain"
    fused = False  # after Fuse (or ByteLevel) the chain sees one string: later steps act on the whole text
    for d in flat:
        kind = d["type"]
        if kind == "ByteLevel":
            steps.append(_byte_level)
            scheme, fused = "byte_level", True
        elif kind == "ByteFallback":
            steps.append(_byte_fallback)
            scheme = "sentencepiece" if scheme == "plain" else scheme
        elif kind == "Metaspace":
            # The first token loses its ▁ (prepend_scheme != never): a sequence-start quirk, left out.
            steps.append(_replace({"String": d.get("replacement", "\u2581")}, " "))
            scheme = "sentencepiece" if scheme == "plain" else scheme
        elif kind == "Replace":
            if fused:
                raise UsageError(f"unsupported decoder: Replace after Fuse/ByteLevel in {flat}")
            steps.append(_replace(d["pattern"], d["content"]))
            if d["pattern"].get("String") == "\u2581" and scheme == "plain":
                scheme = "sentencepiece"
        elif kind == "Fuse":
            fused = True
        elif kind == "Strip":
            if not fused:  # before Fuse, Strip acts on every token; after it, only on the text's ends
                steps.append(_strip(d["content"], d["start"], d["stop"]))
        else:
            raise UsageError(f"unsupported tokenizer decoder {kind!r}: trellis handles ByteLevel, "
                             "ByteFallback, Metaspace, Replace, Fuse and Strip")
    return tuple(steps), scheme


def _flatten(decoder: dict[str, Any]) -> Iterable[dict[str, Any]]:
    if decoder["type"] == "Sequence":
        for d in decoder["decoders"]:
            yield from _flatten(d)
    else:
        yield decoder


def _token_bytes(token: str, steps: tuple[_Step, ...]) -> bytes:
    out: str | bytes = token
    for step in steps:
        out = step(out)
    return out if isinstance(out, bytes) else out.encode()


def _backend(tokenizer: Any) -> Any:
    """The ``tokenizers.Tokenizer`` behind ``tokenizer`` (which may itself be one)."""
    from tokenizers import Tokenizer

    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if not isinstance(backend, Tokenizer):
        raise TypeError(
            f"Vocabulary.from_hf needs a tokenizers-backed (fast) tokenizer or a tokenizers.Tokenizer; "
            f"got {type(tokenizer).__name__}, which has no backend_tokenizer"
        )
    return backend


def token_scheme(tokenizer: Any) -> Scheme:
    """How the tokenizer spells bytes: ``"byte_level"`` (GPT-2), ``"sentencepiece"``, or ``"plain"``."""
    return decoder_steps(_decoder_json(_backend(tokenizer)))[1]


def _decoder_json(backend: Any) -> dict[str, Any] | None:
    if backend.decoder is None:
        return None
    # A decoder pickles as its JSON: much cheaper than backend.to_str() (12 MB, 0.5 s for Gemma).
    return json.loads(backend.decoder.__getstate__())


def vocabulary_from_hf(cls: type[V], tokenizer: Any, vocab_size: int | None,
                       *, extra_eos: Iterable[int] = ()) -> V:
    """Build a ``Vocabulary`` of width ``vocab_size`` (the logits width; default max id + 1).

    ``tokenizer``: a transformers fast tokenizer or a ``tokenizers.Tokenizer``. Special tokens
    (added tokens flagged ``special``, ``all_special_ids``), EOS ids (``eos_token_id`` plus
    ``extra_eos``, e.g. the generation config's) and ids the tokenizer lacks map to ``b""`` and are
    in ``special``. Non-special added tokens map to what decode makes of them (their content,
    normalised if the added token is ``normalized``).
    """
    backend = _backend(tokenizer)
    steps, _ = decoder_steps(_decoder_json(backend))
    pieces: dict[str, int] = backend.get_vocab(with_added_tokens=False)
    added = getattr(tokenizer, "added_tokens_decoder", None)
    if added is None:
        added = backend.get_added_tokens_decoder()

    special = {i for i, t in added.items() if t.special}
    special.update(int(i) for i in getattr(tokenizer, "all_special_ids", ()))
    eos = {int(i) for i in extra_eos}
    eos_id = getattr(tokenizer, "eos_token_id", None)
    if eos_id is not None:
        eos.add(int(eos_id))

    known = max(max(pieces.values(), default=-1), max(added, default=-1)) + 1
    width = known if vocab_size is None else int(vocab_size)
    if width < known:
        logger.debug("tokenizer has ids up to %d beyond the logits width %d: dropped", known - 1, width)
    tokens = [b""] * width
    for piece, i in pieces.items():
        if i < width:
            tokens[i] = _token_bytes(piece, steps)
    # Added tokens win over model pieces with the same id, as in tokenizers' own decode. Their
    # decoded string is id_to_token's, not AddedToken.content: a `normalized` added token is stored
    # normalised (under Llama's Prepend("▁") normaliser "<tool>" decodes as " <tool>").
    for i in added:
        if i < width:
            tokens[i] = _token_bytes(backend.id_to_token(i), steps)

    have = set(pieces.values()) | set(added)
    special.update(i for i in range(width) if i not in have)  # padding ids: never text
    # Special ids beyond the width cannot be sampled; an EOS id there is an error (Vocabulary raises).
    special = {i for i in special | eos if i < width}
    for i in special:
        tokens[i] = b""
    return cls(tokens=tuple(tokens), eos=frozenset(eos), special=frozenset(special))
