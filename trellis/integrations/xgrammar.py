"""The Constraint protocol over xgrammar (optional dependency), for cross-checks and benchmarks.

    c = compile_xgrammar(JSON_EBNF, vocab)                       # EBNF (xgrammar's native syntax)
    c = compile_xgrammar(lark_text, vocab, syntax="lark")         # xgrammar's Lark converter
    c = compile_xgrammar({"type": "object"}, vocab, syntax="json_schema")

States are tuples of consumed token ids; one ``GrammarMatcher`` is rolled back and replayed to
the state asked about (cost: ``trellis/integrations/replay.py``). The tokenizer view is either
trellis' own token bytes (default: ``VocabType.RAW`` from ``vocab.tokens``, so both engines see
the same bytes and any mask difference is a grammar-engine difference) or, with
``tokenizer=``, xgrammar's ``TokenizerInfo.from_huggingface`` (its own decoding of the tokens).
"""

from __future__ import annotations

from typing import Any, Literal, Mapping

from torch import Tensor

from trellis.constrain.errors import GrammarError
from trellis.errors import UsageError
from trellis.integrations import optional_package
from trellis.integrations.replay import ReplayConstraint
from trellis.tokens import Vocabulary

__all__ = ["JSON_EBNF", "XGrammarConstraint", "compile_xgrammar", "tokenizer_info"]

Syntax = Literal["ebnf", "lark", "json_schema", "regex", "builtin_json"]

# trellis/grammars/json.lark in xgrammar's EBNF: the same language (RFC 8259 value, optional
# whitespace around every token, including before and after the whole document). Strings are
# written as character-class stars, not `char*` over a `char` rule: on Gemma 3's vocabulary that
# took xgrammar's mask along 4 JSON documents from 1.38 ms median / 531 ms max to 0.28 / 25 ms.
JSON_EBNF = r"""
root ::= ws value ws
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws "}" | "{" ws pair (ws "," ws pair)* ws "}"
pair ::= string ws ":" ws value
array ::= "[" ws "]" | "[" ws value (ws "," ws value)* ws "]"
string ::= "\"" [^"\\\x00-\x1f]* ("\\" escape [^"\\\x00-\x1f]*)* "\""
escape ::= ["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F]
number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [+-]? [0-9]+)?
ws ::= [ \t\n\r]*
"""


def _xgr() -> Any:
    return optional_package("xgrammar")


_INFOS: dict[tuple[str, int], Any] = {}


def tokenizer_info(vocab: Vocabulary, tokenizer: Any | None = None) -> Any:
    """xgrammar's ``TokenizerInfo`` for ``vocab`` (cached per vocabulary and tokenizer).

    Without ``tokenizer``: trellis' token bytes as a RAW vocabulary (special tokens are ``b""``,
    which xgrammar treats as special). With one: ``TokenizerInfo.from_huggingface``. Stop tokens
    are ``vocab.eos`` either way."""
    key = (vocab.fingerprint(), id(tokenizer) if tokenizer is not None else 0)
    info = _INFOS.get(key)
    if info is None:
        xgr = _xgr()
        eos = sorted(vocab.eos)
        if tokenizer is None:
            info = xgr.TokenizerInfo(list(vocab.tokens), xgr.VocabType.RAW, vocab_size=len(vocab), stop_token_ids=eos)
        else:
            info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(vocab), stop_token_ids=eos)
        _INFOS[key] = info
    return info


class XGrammarConstraint(ReplayConstraint):
    """A compiled xgrammar grammar as a trellis ``Constraint`` (states: consumed token tuples)."""

    def __init__(self, compiled: Any, vocab: Vocabulary) -> None:
        super().__init__(vocab)
        self.compiled = compiled
        self.matcher = _xgr().GrammarMatcher(compiled)

    def _accept(self, token: int) -> bool:
        return bool(self.matcher.accept_token(token))

    def _rollback(self, n: int) -> None:
        self.matcher.rollback(n)

    def _reset(self) -> None:
        self.matcher.reset()

    def _fill(self, out: Tensor) -> None:
        self.matcher.fill_next_token_bitmask(out.view(1, -1), 0)

    def _accepting(self) -> bool:
        return bool(self.matcher.is_completed())

    def __repr__(self) -> str:
        return f"XGrammarConstraint(vocab={len(self.vocab)})"


def compile_xgrammar(grammar: str | Mapping[str, Any], vocab: Vocabulary, *, syntax: Syntax = "ebnf",
                     tokenizer: Any | None = None, compiler: Any | None = None,
                     threads: int = 1) -> XGrammarConstraint:
    """Compile ``grammar`` with xgrammar for ``vocab``.

    ``syntax``: ``"ebnf"`` (root rule ``root``), ``"lark"`` (xgrammar's converter: ``%ignore``
    becomes optional whitespace after each terminal, not before the first one), ``"json_schema"``
    (a dict or JSON text), ``"regex"`` or ``"builtin_json"`` (``grammar`` ignored). ``compiler``:
    reuse a ``GrammarCompiler`` (it caches compiled grammars); by default a fresh one without a
    cache, with ``threads`` worker threads. Errors become ``GrammarError``.
    """
    xgr = _xgr()
    if compiler is None:
        compiler = xgr.GrammarCompiler(tokenizer_info(vocab, tokenizer), max_threads=threads, cache_enabled=False)
    try:
        if syntax == "ebnf":
            compiled = compiler.compile_grammar(str(grammar))
        elif syntax == "lark":
            compiled = compiler.compile_lark(str(grammar))
        elif syntax == "json_schema":
            compiled = compiler.compile_json_schema(grammar if isinstance(grammar, str) else dict(grammar))
        elif syntax == "regex":
            compiled = compiler.compile_regex(str(grammar))
        elif syntax == "builtin_json":
            compiled = compiler.compile_builtin_json_grammar()
        else:
            raise UsageError(f"unknown syntax {syntax!r} (ebnf, lark, json_schema, regex, builtin_json)")
    except (RuntimeError, ValueError) as e:
        if isinstance(e, ValueError) and str(e).startswith("unknown syntax"):
            raise
        raise GrammarError(f"xgrammar: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}",
                           source=f"<xgrammar {syntax}>") from e
    return XGrammarConstraint(compiled, vocab)
