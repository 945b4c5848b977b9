"""The Constraint protocol over llguidance (optional dependency), for cross-checks and benchmarks.

    c = compile_llguidance(lark_for_llguidance(text), vocab)     # Lark text (llguidance dialect)
    c = compile_llguidance({"type": "object"}, vocab, syntax="json_schema")

States are tuples of consumed token ids; one ``LLMatcher`` is rolled back and replayed to the
state asked about (cost: ``trellis/integrations/replay.py``). The tokenizer view is either
trellis' own token bytes (default, so both engines see the same bytes) or, with ``tokenizer=``,
``llguidance.hf.from_tokenizer`` (llguidance's own view: it treats every added token, e.g.
Gemma 3's ``<table>``, as special).

llguidance's Lark dialect differs from Lark's where trellis follows Lark: ``%ignore`` applies
only *between* lexemes (not before the first or after the last one), terminal priorities are not
supported, and lexing is Earley-driven rather than greedy-contextual. ``lark_for_llguidance``
fixes the first point.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, Mapping

from torch import Tensor

from trellis.constrain.errors import GrammarError
from trellis.errors import UsageError
from trellis.integrations import optional_package
from trellis.integrations.replay import ReplayConstraint
from trellis.tokens import Vocabulary

__all__ = ["LLGuidanceConstraint", "compile_llguidance", "lark_for_llguidance", "lltokenizer"]

Syntax = Literal["lark", "json_schema", "regex", "llguidance"]


def _llg() -> Any:
    return optional_package("llguidance")


class _BytesTokenizer:
    """What ``llguidance.TokenizerWrapper`` needs from a tokenizer, over trellis' token bytes.

    Encoding (used by llguidance only to tokenise forced text) is greedy longest-match."""

    def __init__(self, vocab: Vocabulary) -> None:
        self.tokens = list(vocab.tokens)
        self.eos_token_id = min(vocab.eos) if vocab.eos else len(vocab) - 1
        self.bos_token_id = None
        self.special_token_ids = sorted(vocab.special | vocab.eos)
        skip = vocab.special | vocab.eos
        self._ids = {t: i for i, t in enumerate(vocab.tokens) if t and i not in skip}
        self._longest = max((len(t) for t in self._ids), default=1)

    def __call__(self, text: bytes | str) -> list[int]:
        data = text.encode() if isinstance(text, str) else text
        out, i = [], 0
        while i < len(data):
            for n in range(min(self._longest, len(data) - i), 0, -1):
                t = self._ids.get(data[i:i + n])
                if t is not None:
                    out.append(t)
                    i += n
                    break
            else:
                i += 1  # a byte no token spells: skipped (never happens with byte-fallback vocabularies)
        return out


_TOKENIZERS: dict[tuple[str, int], Any] = {}


def lltokenizer(vocab: Vocabulary, tokenizer: Any | None = None) -> Any:
    """llguidance's ``LLTokenizer`` for ``vocab`` (cached per vocabulary and tokenizer; building
    one from a 262k HF tokenizer takes seconds). EOS ids are ``vocab.eos``."""
    key = (vocab.fingerprint(), id(tokenizer) if tokenizer is not None else 0)
    lt = _TOKENIZERS.get(key)
    if lt is None:
        llg = _llg()
        eos = sorted(vocab.eos)
        if tokenizer is None:
            lt = llg.LLTokenizer(llg.TokenizerWrapper(_BytesTokenizer(vocab)), n_vocab=len(vocab), eos_token=eos)
        else:
            import llguidance.hf

            lt = llguidance.hf.from_tokenizer(tokenizer, n_vocab=len(vocab), eos_token=eos)
        _TOKENIZERS[key] = lt
    return lt


_IGNORE = re.compile(r"^[ \t]*%ignore[ \t]+(.+?)[ \t]*$", re.M)
_START = re.compile(r"^([ \t]*)([?!]?)start([ \t]*(?:\.[-\d]+)?[ \t]*:)", re.M)


def lark_for_llguidance(text: str) -> str:
    """Lark text whose language under llguidance equals Lark's for ``%ignore`` at the edges.

    llguidance skips ``%ignore`` terminals only between lexemes; Lark (and trellis) also before
    the first and after the last. The ``start`` rule is renamed and wrapped in optional ignored
    terminals. Grammars without ``%ignore`` are returned unchanged.
    """
    ignores = _IGNORE.findall(text)
    if not ignores or not _START.search(text):
        return text
    names = []
    extra = []
    for i, ign in enumerate(ignores):
        if re.fullmatch(r"[A-Z_][A-Z_0-9]*", ign):
            names.append(ign)
        else:  # an inline regex or string: name it
            extra.append(f"TRELLIS_IGNORE_{i}: {ign}")
            names.append(f"TRELLIS_IGNORE_{i}")
    edge = f"{names[0]}?" if len(names) == 1 else "(" + " | ".join(names) + ")*"
    body = _START.sub(lambda m: f"{m.group(1)}{m.group(2)}trellis_start{m.group(3)}", text, count=1)
    return "\n".join([f"start: {edge} trellis_start {edge}", body, *extra]) + "\n"


class LLGuidanceConstraint(ReplayConstraint):
    """An llguidance grammar as a trellis ``Constraint`` (states: consumed token tuples)."""

    def __init__(self, grammar: str, vocab: Vocabulary, *, tokenizer: Any | None = None) -> None:
        super().__init__(vocab)
        llg = _llg()
        self.tokenizer = lltokenizer(vocab, tokenizer)
        self.grammar = grammar
        self.matcher = llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if self.matcher.is_error():
            raise GrammarError(f"llguidance: {self.matcher.get_error()}", source="<llguidance>")

    def _accept(self, token: int) -> bool:
        # A rejected consume_token leaves an LLMatcher in a permanent error state: check first.
        if self.matcher.validate_tokens([token]) != 1:
            return False
        return bool(self.matcher.consume_token(token))

    def _rollback(self, n: int) -> None:
        if not self.matcher.rollback(n):
            raise RuntimeError(f"llguidance: rollback({n}) failed: {self.matcher.get_error()}")

    def _reset(self) -> None:
        self.matcher.reset()

    def _fill(self, out: Tensor) -> None:
        if not out.is_contiguous() or out.dtype.itemsize != 4:
            raise UsageError("fill_mask needs a contiguous int32 row")
        self.matcher.unsafe_compute_mask_ptr(out.data_ptr(), out.numel() * 4)

    def _accepting(self) -> bool:
        return bool(self.matcher.is_accepting())

    def __repr__(self) -> str:
        return f"LLGuidanceConstraint(vocab={len(self.vocab)})"


def compile_llguidance(grammar: str | Mapping[str, Any], vocab: Vocabulary, *, syntax: Syntax = "lark",
                       tokenizer: Any | None = None) -> LLGuidanceConstraint:
    """Compile ``grammar`` with llguidance for ``vocab``.

    ``syntax``: ``"lark"`` (llguidance's dialect: see ``lark_for_llguidance``), ``"json_schema"``
    (a dict or JSON text), ``"regex"``, or ``"llguidance"`` (its serialised grammar JSON).
    Errors become ``GrammarError``.
    """
    llg = _llg()
    m = llg.LLMatcher
    if syntax == "lark":
        g = m.grammar_from_lark(str(grammar))
    elif syntax == "json_schema":
        g = m.grammar_from_json_schema(grammar if isinstance(grammar, str) else json.dumps(dict(grammar)))
    elif syntax == "regex":
        g = m.grammar_from_regex(str(grammar))
    elif syntax == "llguidance":
        g = str(grammar)
    else:
        raise UsageError(f"unknown syntax {syntax!r} (lark, json_schema, regex, llguidance)")
    is_error, messages = m.validate_grammar_with_warnings(g, lltokenizer(vocab, tokenizer))
    if is_error:
        raise GrammarError(f"llguidance: {messages[0] if messages else 'invalid grammar'}",
                           source=f"<llguidance {syntax}>")
    return LLGuidanceConstraint(g, vocab, tokenizer=tokenizer)
