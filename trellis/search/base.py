"""The Strategy protocol: a search over the token tree rooted at a hypothesis."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor

from trellis.decoder import Decoder, Hypothesis
from trellis.errors import UsageError

if TYPE_CHECKING:
    from trellis.search.smc import SMCResult


@runtime_checkable
class Strategy(Protocol):
    """Returns finished (or budget-exhausted) hypotheses, best first."""

    def __call__(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int) -> list[Hypothesis]: ...


@runtime_checkable
class StepwiseStrategy(Strategy, Protocol):
    """A strategy that grows one hypothesis and can report it after every step (for streaming)."""

    def steps(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int) -> Iterator[Hypothesis]: ...


@runtime_checkable
class BatchStrategy(Strategy, Protocol):
    """A strategy that can grow many independent hypotheses (prompts of different lengths, or
    samples of one prompt) in lockstep: one batched forward per step for all of them."""

    def batch(self, decoder: Decoder, roots: Sequence[Hypothesis], *, max_new_tokens: int) -> list[Hypothesis]:
        """One final hypothesis per root, in order; each equals ``self(decoder, root)[0]`` in
        distribution (and token for token under greedy decoding)."""
        ...


@runtime_checkable
class WeightedStrategy(Strategy, Protocol):
    """A strategy that returns weighted particles and its estimate of the posterior over outputs
    (``SMC``): ``generate`` passes its ``n`` as ``particles`` and puts the ``SMCResult`` in the
    result (``GenerationResult.smc``)."""

    particles: int

    def weighted(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int,
                 recorder: Any = None) -> "SMCResult": ...


def lockstep(decoder: Decoder, roots: Sequence[Hypothesis], max_new_tokens: int | Sequence[int],
             choose: Callable[[Tensor], list[int]]) -> list[Hypothesis]:
    """Grow every root until it finishes, dead-ends or spends ``max_new_tokens`` (one count for all
    roots, or one per root): each step is one ``decoder.log_probs`` over the live rows (one
    forward); ``choose`` maps their [B, V] log-probs to one token per row."""
    hyps = list(roots)
    limits = [max_new_tokens] * len(hyps) if isinstance(max_new_tokens, int) else [int(m) for m in max_new_tokens]
    if len(limits) != len(hyps):
        raise UsageError(f"{len(limits)} token limits for {len(hyps)} roots")
    live = [i for i, h in enumerate(hyps) if not h.finished and limits[i] > 0]
    for step in range(max(limits, default=0)):
        live = [i for i in live if step < limits[i]]
        if not live:
            break
        lp = decoder.log_probs([hyps[i] for i in live])  # [B, V]
        rows = torch.isfinite(lp).any(-1).nonzero().squeeze(-1)  # a row with nothing allowed: dead end
        nxt = []
        for row, tok in zip(rows.tolist(), choose(lp[rows]) if len(rows) else []):
            i = live[row]
            hyps[i] = decoder.extend(hyps[i], tok, float(lp[row, tok]))
            if not hyps[i].finished:
                nxt.append(i)
        live = nxt
    return hyps


def run_steps(strategy: StepwiseStrategy, decoder: Decoder, root: Hypothesis, max_new_tokens: int) -> list[Hypothesis]:
    """Drive ``steps`` to the end and return the last hypothesis as the only result."""
    last = root
    for last in strategy.steps(decoder, root, max_new_tokens=max_new_tokens):
        pass
    return [last]
