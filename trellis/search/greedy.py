"""Greedy decoding: the argmax of the masked, warped distribution at every step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

from trellis.decoder import Decoder, Hypothesis
from trellis.sampling import log_softmax
from trellis.search.base import lockstep, run_steps
from trellis.search.tree import SearchResult, TreeRecorder, stepwise_search


@dataclass(frozen=True)
class Greedy:
    """Take the most likely allowed token until EOS (in an accepting state), a stop string or the
    budget. ``logprob`` accumulates the masked, renormalised log-probs of the chosen tokens."""

    def steps(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int) -> Iterator[Hypothesis]:
        hyp = root
        for _ in range(max_new_tokens):
            if hyp.finished:
                return
            scores = decoder.scores([hyp])[0]  # [V]
            token = int(scores.argmax())
            if scores[token] == float("-inf"):
                return  # nothing allowed: the constraint is exhausted (dead end cannot happen with exact masks)
            lp = float(log_softmax(scores.unsqueeze(0))[0, token])
            hyp = decoder.extend(hyp, token, lp)
            yield hyp

    def __call__(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int) -> list[Hypothesis]:
        return run_steps(self, decoder, root, max_new_tokens)

    def search(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int,
               recorder: TreeRecorder | None = None) -> SearchResult:
        """The same path as ``__call__``, with its tree (``TreeSearch``)."""
        return stepwise_search(self, decoder, root, max_new_tokens, recorder)

    def batch(self, decoder: Decoder, roots: Sequence[Hypothesis], *, max_new_tokens: int) -> list[Hypothesis]:
        """Greedy for every root at once, one batched forward per step (``BatchStrategy``)."""
        return lockstep(decoder, roots, max_new_tokens, lambda lp: lp.argmax(-1).tolist())
