"""How many draft nodes to verify per round: a discounted-UCB bandit on measured throughput.

Drafting pays only when the tokens it saves outweigh what the bigger verification forward costs, and
both sides move: acceptance changes from copy spans to free text within one output, and the cost
curve depends on the hardware (on 2 CPU cores with the tuned GEMMs of ``trellis.kernels``, up to 8
rows cost ~1.1x a decode step on one machine and 16 rows 1.6-2.3x; on a GPU it stays flat far
longer). So instead of modelling either, each arm is a node budget and its reward is what the round
actually delivered: tokens emitted per second of drafting plus verification. Discounting (Garivier
& Moulines 2011) forgets old rounds, so the choice follows the text. Arm 0 is plain decoding, which
keeps a bad drafter from making decoding slower for long. The choice affects speed only: every
verifier is lossless whatever the draft.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from trellis.errors import UsageError


@dataclass
class DraftBudget:
    """Node budget per round, chosen among ``arms`` by discounted UCB on tokens per second.

    ``arms=(n,)`` is a fixed budget (deterministic; use it when a seeded sampled run must be
    reproducible, since the budget decides how many random draws a round makes). ``clock`` is
    injectable for tests."""

    arms: Sequence[int] = (0, 2, 6, 15)
    discount: float = 0.95
    exploration: float = 0.25
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False)
    _count: list[float] = field(init=False, repr=False)
    _sum: list[float] = field(init=False, repr=False)
    _arm: int = field(init=False, repr=False, default=-1)
    _t0: float = field(init=False, repr=False, default=0.0)
    pulls: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.arms = tuple(sorted({int(a) for a in self.arms}))
        if not self.arms or self.arms[0] < 0:
            raise UsageError(f"arms must be non-negative node counts, got {self.arms}")
        if not 0 < self.discount <= 1:
            raise UsageError("discount must be in (0, 1]")
        self._count = [0.0] * len(self.arms)
        self._sum = [0.0] * len(self.arms)
        self.pulls = [0] * len(self.arms)

    def choose(self, cap: int) -> int:
        """Start a round: the node budget to draft (at most ``cap``); starts the round's clock."""
        # Arms above the cap act as the cap itself (the smallest of them stands for all).
        usable = [i for i, a in enumerate(self.arms) if a <= cap]
        usable += [i for i, a in enumerate(self.arms) if a > cap][:1]
        untried = [i for i in usable if self._count[i] == 0]
        if untried:
            # Largest first: a drafter with nothing to propose costs one plain step anyway.
            i = untried[-1]
        else:
            means = {i: self._sum[i] / self._count[i] for i in usable}
            scale = max(means.values()) or 1.0
            total = sum(self._count[i] for i in usable)
            i = max(usable, key=lambda j: means[j] + self.exploration * scale
                    * math.sqrt(math.log(max(total, 1.0 + 1e-9)) / self._count[j]))
        self._arm = i
        self._t0 = self.clock()
        return min(self.arms[i], cap)

    def update(self, emitted: int) -> None:
        """End the round started by ``choose``: ``emitted`` tokens in the time since."""
        if self._arm < 0:
            return
        seconds = max(self.clock() - self._t0, 1e-9)
        self._count = [c * self.discount for c in self._count]
        self._sum = [s * self.discount for s in self._sum]
        self._count[self._arm] += 1.0
        self._sum[self._arm] += emitted / seconds
        self.pulls[self._arm] += 1
        self._arm = -1

    @property
    def favourite(self) -> int:
        """The node budget pulled most so far."""
        return self.arms[max(range(len(self.arms)), key=self.pulls.__getitem__)]
