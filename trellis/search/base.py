"""The Strategy protocol: a search over the token tree rooted at a hypothesis."""

from __future__ import annotations

from typing import Iterator, Protocol, runtime_checkable

from trellis.decoder import Decoder, Hypothesis


@runtime_checkable
class Strategy(Protocol):
    """Returns finished (or budget-exhausted) hypotheses, best first."""

    def __call__(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int) -> list[Hypothesis]: ...


@runtime_checkable
class StepwiseStrategy(Strategy, Protocol):
    """A strategy that grows one hypothesis and can report it after every step (for streaming)."""

    def steps(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int) -> Iterator[Hypothesis]: ...


def run_steps(strategy: StepwiseStrategy, decoder: Decoder, root: Hypothesis, max_new_tokens: int) -> list[Hypothesis]:
    """Drive ``steps`` to the end and return the last hypothesis as the only result."""
    last = root
    for last in strategy.steps(decoder, root, max_new_tokens=max_new_tokens):
        pass
    return [last]
