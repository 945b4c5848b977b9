"""Ancestral sampling from the masked, warped distribution (temperature/top-k/top-p/min-p live in
the Decoder, so sampler, drafter and verifier all see the same distribution)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Sequence

import torch

from trellis.decoder import Decoder, Hypothesis
from trellis.sampling import sample
from trellis.search.base import lockstep, run_steps
from trellis.search.tree import SearchResult, TreeRecorder, stepwise_search


@dataclass(frozen=True)
class Sample:
    """Draw each token from ``decoder.log_probs``; ``generator`` makes runs reproducible.

    With ``decoder.temperature == 0`` sampling degenerates to greedy (argmax).
    """

    generator: torch.Generator | None = field(default=None, compare=False)

    def steps(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int) -> Iterator[Hypothesis]:
        hyp = root
        for _ in range(max_new_tokens):
            if hyp.finished:
                return
            lp = decoder.log_probs([hyp])  # [1, V]
            if not torch.isfinite(lp).any():
                return
            token = int(lp[0].argmax()) if decoder.temperature == 0 else int(sample(lp, self.generator)[0])
            hyp = decoder.extend(hyp, token, float(lp[0, token]))
            yield hyp

    def __call__(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int) -> list[Hypothesis]:
        return run_steps(self, decoder, root, max_new_tokens)

    def search(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int,
               recorder: TreeRecorder | None = None) -> SearchResult:
        """The same path as ``__call__``, with its tree (``TreeSearch``)."""
        return stepwise_search(self, decoder, root, max_new_tokens, recorder)

    def batch(self, decoder: Decoder, roots: Sequence[Hypothesis], *, max_new_tokens: int) -> list[Hypothesis]:
        """Ancestral sampling for every root at once, one batched forward per step
        (``BatchStrategy``); rows draw from the same distributions as one-by-one calls, in a
        different order from the generator."""
        if decoder.temperature == 0:
            return lockstep(decoder, roots, max_new_tokens, lambda lp: lp.argmax(-1).tolist())
        return lockstep(decoder, roots, max_new_tokens, lambda lp: sample(lp, self.generator).tolist())
