"""Terminals that are not a plain regex over text: token elements and lazy terminals.

And their reserved Lark names.

**Token elements** match ONE token by its id, not by its text. xgrammar's EBNF has ``Token(id,
...)`` (one token among these ids), ``ExcludeToken(id, ...)`` (one token not among them) and
``TokenTagDispatch`` (built from the two, ``gbnf_reader.py``); llama.cpp's GBNF spells the same
``<[id]>``, ``!<[id]>`` and ``<text>``. They name tokens a model emits as control symbols
(``<think>``, a tool-call marker), which have no text a language of bytes could state, so they are
terminals of their own kind: ``grammar_ir.Terminal.token`` holds a ``TokenRef``, and the
terminal's byte DFA takes no byte at all.

Meaning, exactly (``scannerless.py``): at a token boundary where the chart expects a token
element, the mask allows the element's ids (after it completes the chart goes on at the next
boundary); a token element never matches part of a token, and text never matches part of a
token element. ``advance`` follows both readings of a token at once: its bytes through the text
terminals and, where an element expects it, its id. So ``Token(2) | "aa"`` allows token 2 by
either route. An element's ids are resolved per vocabulary (``allowed``):

* ``Token``: the listed ids, special tokens included (that is what it is for); an id outside the
  vocabulary, or one of its end-of-sequence ids (the output ends there: nothing can follow it)
  is a ``GrammarError``.
* ``ExcludeToken``: every token of the vocabulary that is not listed, special tokens included
  (as in xgrammar, whose vocabulary gives a special token its text), except the end-of-sequence
  ids and the ids the tokenizer lacks. xgrammar lets the stop token match ``ExcludeToken``;
  trellis does not: EOS ends the output, and it is allowed exactly where the grammar can end.

**Lazy terminals** are xgrammar's ``name[lazy] ::= body`` (committed-shortest matching): the
strings of the regular body that no shorter string of it begins (``dfa_minimise.shortest``).
**Character-budgeted terminals** are xgrammar's ``name[max_chars=N] ::= body``: the body's strings
of at most N code points, and longer ones only where the body could not end at N and they end
at its first way to end after (``dfa_minimise.char_budget``).

In Lark text (what the GBNF writer hands the engine) a token element is a ``%declare``d terminal
with a reserved name (``_TRELLIS_TOKEN_2_4``, ``_TRELLIS_NOT_TOKEN_3``; ``TokenRef.name`` and
``TokenRef.from_name`` are the one spelling), a lazy terminal a terminal named ``_TRELLIS_LAZY_<k>``
and a budgeted one ``_TRELLIS_CHARS_<N>_<k>``. Only the Earley engine reads them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from trellis.constrain.errors import GrammarError

# _TRELLIS_[NOT_]TOKEN, then _<id> per id and _T<hex of UTF-8> per token text (llama.cpp's <text>)
_NAME = re.compile(r"_TRELLIS_(NOT_)?TOKEN((?:_\d+)*)((?:_T[0-9A-F]+)*)")
RESERVED = "_TRELLIS_"  # the prefix of every reserved terminal name
LAZY = RESERVED + "LAZY_"  # a lazy terminal's name: this and a number
CHARS = RESERVED + "CHARS_"  # a character-budgeted terminal's name: this, the budget, "_", a number


def option_terminal_name(k: int, max_chars: int | None) -> str:
    """The reserved name of the ``k``-th terminal made by a rule option: lazy (``max_chars`` None)
    or character-budgeted (``budget_of`` reads the budget back)."""
    return f"{LAZY}{k}" if max_chars is None else f"{CHARS}{max_chars}_{k}"


def budget_of(name: str) -> int:
    """The budget N of a character-budgeted terminal's name (``_TRELLIS_CHARS_<N>_<k>``)."""
    return int(name[len(CHARS):].split("_")[0])


@dataclass(frozen=True)
class TokenRef:
    """One token whose id is in ``ids`` or whose text is one of ``texts`` (``exclude``: one token
    that is neither). ``texts`` are llama.cpp's ``<text>``: each must be the text of exactly one
    token of the vocabulary."""

    ids: tuple[int, ...] = ()  # sorted, distinct
    texts: tuple[str, ...] = ()  # sorted, distinct
    exclude: bool = False

    @classmethod
    def of(cls, ids=(), texts=(), exclude: bool = False) -> "TokenRef":
        return cls(tuple(sorted(set(int(i) for i in ids))), tuple(sorted(set(texts))), exclude)

    @property
    def name(self) -> str:
        """The reserved Lark terminal name of this element."""
        return (f"{RESERVED}{'NOT_' if self.exclude else ''}TOKEN" + "".join(f"_{i}" for i in self.ids)
                + "".join("_T" + t.encode("utf-8").hex().upper() for t in self.texts))

    @classmethod
    def from_name(cls, name: str) -> "TokenRef | None":
        m = _NAME.fullmatch(name)
        if m is None:
            return None
        ids = [int(x) for x in m.group(2).split("_")[1:]]
        texts = [bytes.fromhex(x[1:]).decode("utf-8") for x in m.group(3).split("_")[1:]]
        return cls.of(ids, texts, exclude=bool(m.group(1)))

    def __str__(self) -> str:
        if self.texts:  # llama.cpp's spelling
            parts = [f"<[{i}]>" for i in self.ids] + [f"<{t}>" for t in self.texts]
            return ("!" if self.exclude else "") + " ".join(parts)
        return f"{'ExcludeToken' if self.exclude else 'Token'}({', '.join(map(str, self.ids))})"

    def allowed(self, tokens: tuple[bytes, ...], valid: np.ndarray, eos: frozenset[int],
                special: frozenset[int]) -> np.ndarray:
        """[V] bool: the token ids this element matches in a vocabulary of ``tokens`` (their bytes),
        whose tokens with text are ``valid`` ([V] bool), whose end-of-sequence ids are ``eos`` and
        whose special (control) ids are ``special``."""
        size = len(tokens)
        bad = [i for i in self.ids if not 0 <= i < size]
        if bad:
            raise GrammarError(f"{self}: token id {bad[0]} is outside the vocabulary (ids 0..{size - 1})")
        ids = list(self.ids)
        for text in self.texts:
            data = text.encode("utf-8")
            found = [i for i in np.flatnonzero(valid).tolist() if tokens[i] == data]
            if len(found) != 1:
                why = ("no token of this vocabulary has this text (special tokens have no text here: "
                       "name them by id, <[id]>)" if not found else
                       f"{len(found)} tokens have this text (ids {found[:4]}): name one by id, <[id]>")
                raise GrammarError(f"<{text}>: {why}")
            ids += found
        if self.exclude:
            out = valid.copy()
            out[[i for i in special if i not in eos]] = True
            out[ids] = False
        else:
            stop = [i for i in ids if i in eos]
            if stop:
                raise GrammarError(f"{self}: token id {stop[0]} is an end-of-sequence token of this vocabulary: "
                                   "the output ends there, nothing can follow it (the grammar's end allows it)")
            out = np.zeros(size, dtype=bool)
            out[ids] = True
        if not out.any():
            raise GrammarError(f"{self} matches no token of this vocabulary")
        return out
