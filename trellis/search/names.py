"""Strategies by name: the names ``trellis generate --strategy`` takes, for ``generate(strategy="beam")``."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from trellis.decoder import Hypothesis
from trellis.errors import UsageError
from trellis.search.base import Strategy
from trellis.search.beam import Beam, DiverseBeam
from trellis.search.best_of_n import BestOfN
from trellis.search.entropy import EntropyGate
from trellis.search.greedy import Greedy
from trellis.search.lookahead import Lookahead
from trellis.search.mcts import MCTS
from trellis.search.sample import Sample
from trellis.search.smc import SMC

STRATEGIES: dict[str, type] = {
    "greedy": Greedy, "sample": Sample, "beam": Beam, "diverse-beam": DiverseBeam, "lookahead": Lookahead,
    "mcts": MCTS, "best-of-n": BestOfN, "entropy-gate": EntropyGate,
    "smc": SMC,
}


def mean_logprob(h: Hypothesis) -> float:
    """MCTS's reward when none is given: the rollout's mean log-prob per generated token."""
    return h.logprob / max(1, h.num_new)


def canonical_name(name: str) -> str:
    """``name`` as ``STRATEGIES`` spells it (hyphens, lower case)."""
    return name.strip().lower().replace("_", "-")


def strategy_from_name(name: str, *, generator: torch.Generator | None = None, **params: Any) -> Strategy:
    """The strategy called ``name`` (``"beam"``, ``"best_of_n"``: hyphens or underscores, any case)
    built with ``params`` (its dataclass fields, e.g. ``width=8``). ``generator`` seeds the strategies
    that sample (``sample``, ``best-of-n``, ``lookahead``, ``smc``); ``mcts`` without a ``reward`` ranks
    rollouts by mean log-prob per token."""
    key = canonical_name(name)
    cls = STRATEGIES.get(key)
    if cls is None:
        raise UsageError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(params) - names)
    if unknown:
        raise UsageError(f"strategy {key!r} has no parameter(s) {', '.join(unknown)}; it takes {', '.join(sorted(names))}")
    if generator is not None and "generator" in names:
        params.setdefault("generator", generator)
    if cls is MCTS:
        params.setdefault("reward", mean_logprob)
    return cls(**params)
