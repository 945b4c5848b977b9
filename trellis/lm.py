"""The language-model protocol: token prefixes in, next-token logits out.

Everything above the model (decoder, search, speculation, constraints) talks to this protocol
only. The transformers implementation is ``trellis.hf_lm.HFLanguageModel``; wrappers that sit in
front of a model, and its optional capabilities (``commit``, ``stats``), are in ``trellis.lm_proxy``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

from torch import Tensor

from trellis.tokens import TokenTree


@runtime_checkable
class LanguageModel(Protocol):
    """Tokens in, logits out; how (and whether) a KV cache is reused is the implementation's business."""

    vocab_size: int

    def logits(self, prefixes: Sequence[Sequence[int]]) -> Tensor:
        """[B, V] next-token logits after each prefix."""
        ...

    def tree_logits(self, prefix: Sequence[int], tree: TokenTree) -> Tensor:
        """[N+1, V]: row 0 after ``prefix``, row i+1 after ``prefix`` + the path to node i."""
        ...


@dataclass
class LMStats:
    """Counters tests and benchmarks read; reset with ``HFLanguageModel.reset_stats()``."""

    forward_calls: int = 0
    tokens_forwarded: int = 0  # tokens fed through the network (the compute actually spent)
    cache_hits: int = 0  # rows answered with no forward at all
    tokens_reused: int = 0  # prefix tokens served from the KV cache instead of recomputed
    cache_resets: int = 0  # requests that shared nothing with the cache

    def snapshot(self) -> dict[str, int]:
        return dict(self.__dict__)
