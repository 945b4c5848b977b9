"""Token-level data: the byte string of every token id, and drafted token trees."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from trellis.errors import UsageError


@dataclass(frozen=True)
class Vocabulary:
    """The exact bytes of every token id of a model.

    ``tokens[i]`` is what token ``i`` contributes to the decoded UTF-8 byte stream; its length
    equals the width of the model's logits (ids the tokenizer lacks map to ``b""``). Special and
    EOS tokens also map to ``b""`` (they are control symbols, not text).
    """

    tokens: tuple[bytes, ...]
    eos: frozenset[int]
    special: frozenset[int] = frozenset()
    _fingerprint: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        bad = [i for i in self.eos | self.special if not 0 <= i < len(self.tokens)]
        if bad:
            raise UsageError(f"special/eos ids {sorted(bad)[:5]} outside vocabulary of {len(self.tokens)}")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def size(self) -> int:
        return len(self.tokens)

    def fingerprint(self) -> str:
        """A stable hash of the token bytes and special ids: the cache key for compiled grammars."""
        if not self._fingerprint:
            h = hashlib.sha256()
            for t in self.tokens:
                h.update(len(t).to_bytes(4, "little"))
                h.update(t)
            h.update(repr(sorted(self.eos)).encode())
            h.update(repr(sorted(self.special)).encode())
            object.__setattr__(self, "_fingerprint", h.hexdigest()[:32])
        return self._fingerprint

    def ending_at(self, text: bytes) -> "Vocabulary":
        """This vocabulary with every token whose bytes start with ``text`` as its only EOS (control
        symbols, no bytes); the old EOS tokens stay special. A base model ends a line with
        ``"\n"`` or ``"\n\n"``, almost never with its EOS token, so ``ending_at(b"\n")`` makes "the
        output is one line" an ending the model actually writes: under a grammar, a locally
        masked sampler and SMC's weights (p(EOS | x)) then see the model's own end of output."""
        ids = frozenset(i for i, t in enumerate(self.tokens) if text and t.startswith(text))
        if not ids:
            raise UsageError(f"no token of this vocabulary starts with {text!r}")
        toks = tuple(b"" if i in ids else t for i, t in enumerate(self.tokens))
        return Vocabulary(toks, eos=ids, special=self.special | self.eos | ids)

    def decode(self, ids: Any) -> bytes:
        """Concatenate the bytes of ``ids`` (special tokens contribute nothing)."""
        return b"".join(self.tokens[int(i)] for i in ids)

    @classmethod
    def from_hf(cls, tokenizer: Any, vocab_size: int | None = None, *,
                extra_eos: Iterable[int] = ()) -> "Vocabulary":
        """Build from a transformers tokenizer; ``vocab_size`` is the model's logits width.

        ``extra_eos``: EOS ids besides ``tokenizer.eos_token_id`` (a generation config's).
        """
        from trellis.hf_vocab import vocabulary_from_hf

        return vocabulary_from_hf(cls, tokenizer, vocab_size, extra_eos=extra_eos)


@dataclass(frozen=True)
class TokenTree:
    """Drafted tokens in topological order.

    ``parents[i] < i`` is the index of node ``i``'s parent; ``-1`` means a child of the committed
    prefix. Row ``i + 1`` of a ``tree_logits`` result belongs to node ``i``; row 0 to the prefix.
    """

    tokens: Tensor  # [N] int64
    parents: Tensor  # [N] int64

    def __post_init__(self) -> None:
        if self.tokens.ndim != 1 or self.parents.shape != self.tokens.shape:
            raise UsageError("TokenTree: tokens and parents must be 1-D tensors of equal length")
        idx = torch.arange(len(self.parents))
        if bool(((self.parents >= idx) | (self.parents < -1)).any()):
            raise UsageError("TokenTree: every parent index must satisfy -1 <= parents[i] < i")

    @classmethod
    def chain(cls, tokens: list[int] | tuple[int, ...]) -> "TokenTree":
        """A linear draft: each token the child of the previous one."""
        n = len(tokens)
        return cls(torch.tensor(list(tokens), dtype=torch.long).reshape(n), torch.arange(-1, n - 1, dtype=torch.long))

    @classmethod
    def from_paths(cls, paths: list[list[int]]) -> "TokenTree":
        """Merge token paths into a prefix tree (shared prefixes become shared nodes)."""
        toks: list[int] = []
        pars: list[int] = []
        index: dict[tuple[int, int], int] = {}
        for path in paths:
            parent = -1
            for t in path:
                key = (parent, int(t))
                if key not in index:
                    index[key] = len(toks)
                    toks.append(int(t))
                    pars.append(parent)
                parent = index[key]
        return cls(torch.tensor(toks, dtype=torch.long), torch.tensor(pars, dtype=torch.long))

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def depths(self) -> Tensor:
        """[N] int64: 0 for children of the prefix, parent depth + 1 otherwise."""
        d = torch.zeros(len(self), dtype=torch.long)
        par = self.parents.tolist()
        for i, p in enumerate(par):
            d[i] = 0 if p < 0 else d[p] + 1
        return d

    def ancestor_mask(self) -> Tensor:
        """[N, N] bool: row i is True at i and at each of its ancestors."""
        n = len(self)
        m = torch.eye(n, dtype=torch.bool)
        par = self.parents.tolist()
        for i, p in enumerate(par):
            if p >= 0:
                m[i] |= m[p]
        return m

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root's child down to ``node`` (inclusive)."""
        path = []
        par = self.parents.tolist()
        while node >= 0:
            path.append(node)
            node = par[node]
        return path[::-1]

    def children(self, node: int) -> list[int]:
        """Indices of the children of ``node`` (``-1`` for the prefix)."""
        return [i for i, p in enumerate(self.parents.tolist()) if p == node]
