"""Best-of-N: draw N samples together, then rank them by a scorer — summed log-prob, length-normalised
log-prob, a user reward, or Minimum Bayes Risk (sampling-based MBR, Eikema & Aziz 2020, "Is MAP
Decoding All You Need? The Inadequacy of the Mode in Neural Machine Translation"):
pick the y_i that maximises (1/(N-1)) * sum_{j != i} u(y_i, y_j), the samples serving as both
candidates and pseudo-references for a utility u."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence

import torch

from trellis.decoder import Decoder, Hypothesis
from trellis.errors import UsageError
from trellis.sampling import sample
from trellis.search.tree import Searching, SearchResult, TreeRecorder

Scorer = Literal["logprob", "mean_logprob", "mbr"] | Callable[[Hypothesis], float]


def ngram_f1(a: Sequence[int], b: Sequence[int], *, max_n: int = 2) -> float:
    """Mean over n = 1..max_n of the n-gram F1 between two token sequences (a BLEU/chrF-like
    utility in [0, 1]; 1 for equal non-empty sequences, 0 when nothing is shared)."""
    scores = []
    for n in range(1, max_n + 1):
        ca = Counter(tuple(a[i:i + n]) for i in range(len(a) - n + 1))
        cb = Counter(tuple(b[i:i + n]) for i in range(len(b) - n + 1))
        total = sum(ca.values()) + sum(cb.values())
        if total == 0:
            continue
        scores.append(2.0 * sum((ca & cb).values()) / total)
    return sum(scores) / len(scores) if scores else 1.0


@dataclass(frozen=True)
class BestOfN(Searching):
    """``n`` samples from the masked, warped distribution, advanced together (ONE batched
    ``decoder.log_probs`` call per step for all unfinished samples), returned best first.

    ``scorer``: "logprob" (sum of masked, renormalised log-probs), "mean_logprob" (per token),
    "mbr" (expected ``utility`` against the other samples; ``utility`` takes two generated token
    sequences, default ``ngram_f1``) or a callable reward on a hypothesis. Finished hypotheses rank
    before budget-cut ones. With ``early_stop`` and the "logprob" scorer, whose score can only fall
    as tokens are added, a sample stops as soon as its log-prob is no better than the best finished
    one's (it can no longer win); it is returned unfinished, ranked after the finished ones.
    """

    n: int = 8
    scorer: Scorer = "logprob"
    utility: Callable[[Sequence[int], Sequence[int]], float] = ngram_f1
    early_stop: bool = True
    generator: torch.Generator | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise UsageError(f"n must be >= 1, got {self.n}")
        if not callable(self.scorer) and self.scorer not in ("logprob", "mean_logprob", "mbr"):
            raise UsageError(f"unknown scorer {self.scorer!r}")

    def search(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int,
               recorder: TreeRecorder | None = None) -> SearchResult:
        rec = recorder if recorder is not None else TreeRecorder(decoder, root)
        samples = [root] * self.n
        open_ = [not root.finished] * self.n  # still being extended
        prune = self.early_stop and self.scorer == "logprob"
        best_finished = float("-inf")
        for _ in range(max_new_tokens):
            idx = [i for i in range(self.n) if open_[i]]
            if not idx:
                break
            lp = decoder.log_probs([samples[i] for i in idx])  # [B, V]
            rec.pruned([samples[i] for i in idx])
            alive = torch.isfinite(lp).any(-1)  # [B] rows where the constraint allows something
            if decoder.temperature == 0:
                toks = lp.argmax(-1)
            else:
                toks = sample(lp.masked_fill(~alive[:, None], 0.0), self.generator)  # [B]
            for row, i in enumerate(idx):
                if not alive[row]:
                    open_[i] = False
                    continue
                t = int(toks[row])
                samples[i] = decoder.extend(samples[i], t, float(lp[row, t]))
                rec.add(samples[i], logprob=float(lp[row, t]))
                rec.visit(samples[i])
                if samples[i].finished:
                    open_[i] = False
                    best_finished = max(best_finished, samples[i].logprob)
            if prune:
                for i in range(self.n):
                    if open_[i] and samples[i].logprob <= best_finished:
                        open_[i] = False
                        rec.mark(samples[i], stopped_early=True)
        ranked, scores = self.rank(samples)
        return rec.result(ranked, scores)

    def rank(self, samples: Sequence[Hypothesis]) -> tuple[list[Hypothesis], list[float]]:
        """``samples`` best first (finished before budget-cut, then by score) and their scores:
        the ranking of ``search``, also applied to samples drawn elsewhere (a vLLM engine:
        ``trellis.integrations.vllm_search``)."""
        samples = list(samples)
        scores = self._scores(samples)
        order = sorted(range(len(samples)), key=lambda i: (not samples[i].finished, -scores[i]))
        return [samples[i] for i in order], [scores[i] for i in order]

    def _scores(self, hyps: list[Hypothesis]) -> list[float]:
        if callable(self.scorer):
            return [float(self.scorer(h)) for h in hyps]
        if self.scorer == "logprob":
            return [h.logprob for h in hyps]
        if self.scorer == "mean_logprob":
            return [h.logprob / max(1, h.num_new) for h in hyps]
        seqs = [h.new_tokens for h in hyps]
        n = len(seqs)
        if n == 1:
            return [0.0]
        # u(candidate, pseudo-reference) need not be symmetric: evaluate every ordered pair
        return [sum(self.utility(seqs[i], seqs[j]) for j in range(n) if j != i) / (n - 1) for i in range(n)]
