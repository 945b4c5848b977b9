"""Entropy-gated decoding, after AdaDec (He et al. 2025, "Towards Better Code Generation: Adaptive
Decoding with Uncertainty Guidance"): decode greedily, but where the next-token distribution is
uncertain — Shannon entropy H_t of the masked, warped distribution above a threshold tau — pause
and rerank the top-k candidate tokens by lookahead: each candidate is extended greedily by L
tokens and scored by the mean log-prob of the candidate and its lookahead; the best one is kept.

Beyond AdaDec, a pause can also weigh what the lookahead achieves, as NeuroLogic A*esque does
(``search/lookahead.py``): with lexical ``clauses`` or a ``value`` function the score becomes
mean log-prob + ``lam`` * (clauses satisfied + value) of the lookahead. Without them (the default)
it is AdaDec's likelihood-only rerank.

AdaDec learns tau per model from where greedy decoding goes wrong; ``EntropyGate.calibrate`` instead
picks tau so that a requested fraction of greedy steps on held-out prompts would pause.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from trellis.decoder import Decoder, Hypothesis
from trellis.errors import UsageError
from trellis.sampling import entropy
from trellis.search.base import lockstep, run_steps
from trellis.search.lookahead import Clause, heuristic_bonus
from trellis.search.tree import SearchResult, TreeRecorder


@dataclass(frozen=True)
class EntropyGate:
    """Greedy decoding that pauses where H_t > ``threshold`` (nats) and then reranks the top ``k``
    tokens by ``depth``-token greedy lookaheads (ONE batched ``decoder.log_probs`` call per
    lookahead token for all k). ``logprob`` stays the sum of masked, renormalised log-probs of the
    chosen tokens. ``clauses``/``value``/``lam``: the optional lookahead heuristic (module
    docstring). Stepwise: ``steps`` yields the hypothesis after every token."""

    threshold: float = 1.0
    k: int = 3
    depth: int = 4
    clauses: tuple[Clause, ...] = ()
    value: Callable[[Hypothesis], float] | None = None
    lam: float = 1.0

    def __post_init__(self) -> None:
        if self.k < 1 or self.depth < 0:
            raise UsageError("k must be >= 1 and depth >= 0")

    def steps(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int) -> Iterator[Hypothesis]:
        return self._steps(decoder, root, max_new_tokens, TreeRecorder.off(decoder, root))

    def __call__(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int) -> list[Hypothesis]:
        return run_steps(self, decoder, root, max_new_tokens)

    def search(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int,
               recorder: TreeRecorder | None = None) -> SearchResult:
        """One hypothesis; the tree holds every step's ``entropy`` and ``paused`` flag (on the node
        the step starts from) and the lookahead candidates of each pause."""
        rec = recorder if recorder is not None else TreeRecorder(decoder, root)
        last = root
        for last in self._steps(decoder, root, max_new_tokens, rec):
            pass
        return rec.result([last], [last.logprob])

    def _lookahead_scores(self, decoder: Decoder, parent: Hypothesis, cands: list[Hypothesis],
                          steps: int) -> list[float]:
        """Mean log-prob of each candidate token plus its greedy lookahead (all advanced together)."""
        looks = lockstep(decoder, cands, steps, lambda lp: lp.argmax(-1).tolist())
        return [(h.logprob - parent.logprob) / (len(h.tokens) - len(parent.tokens))
                + self.lam * heuristic_bonus(decoder, h, self.clauses, self.value) for h in looks]

    def _steps(self, decoder: Decoder, root: Hypothesis, max_new_tokens: int,
               rec: TreeRecorder) -> Iterator[Hypothesis]:
        hyp = root
        for step in range(max_new_tokens):
            if hyp.finished:
                return
            lp = decoder.log_probs([hyp])[0]  # [V]
            rec.pruned([hyp])
            if not torch.isfinite(lp).any():
                return
            h_t = float(entropy(lp.unsqueeze(0))[0])
            paused = h_t > self.threshold
            rec.mark(hyp, entropy=h_t, paused=paused)
            if paused:
                k = min(self.k, int(torch.isfinite(lp).sum()))
                vals, toks = torch.topk(lp, k)
                cands = [decoder.extend(hyp, t, v) for v, t in zip(vals.tolist(), toks.tolist())]
                depth = min(self.depth, max_new_tokens - step - 1)
                scores = self._lookahead_scores(decoder, hyp, cands, depth)
                for c, s in zip(cands, scores):
                    rec.add(c, logprob=c.logprob - hyp.logprob, lookahead=s)
                hyp = cands[int(np.argmax(scores))]
            else:
                t = int(lp.argmax())
                hyp = decoder.extend(hyp, t, float(lp[t]))
                rec.add(hyp, logprob=float(lp[t]))
            yield hyp

    @classmethod
    def calibrate(cls, decoder: Decoder, prompts: Sequence[Sequence[int]], *, pause_rate: float,
                  max_new_tokens: int, k: int = 3, depth: int = 4, iterations: int = 12,
                  clauses: tuple[Clause, ...] = (), value: Callable[[Hypothesis], float] | None = None,
                  lam: float = 1.0) -> "EntropyGate":
        """An ``EntropyGate`` that pauses on about ``pause_rate`` of its steps on held-out ``prompts``.

        The rate is measured on the gate's *own* trajectories: reranking steers towards confident
        continuations, so a quantile of greedy-decoding entropies would overshoot the threshold
        (measured: 0.19 instead of 0.30 on a fake LM). Starting from that quantile, tau is bisected
        (``iterations`` runs over the prompts) until the gate's pause fraction is ``pause_rate``.
        ``clauses``, ``value`` and ``lam`` go to the gate, for calibration and the result.
        """
        if not 0.0 <= pause_rate <= 1.0:
            raise UsageError(f"pause_rate must be in [0, 1], got {pause_rate}")

        def make(tau: float) -> "EntropyGate":
            return cls(threshold=tau, k=k, depth=depth, clauses=clauses, value=value, lam=lam)

        def run(tau: float) -> tuple[float, list[float]]:
            gate = make(tau)
            seen, paused = [], 0
            for p in prompts:
                root = decoder.start(p)
                rec = TreeRecorder(decoder, root)
                gate.search(decoder, root, max_new_tokens=max_new_tokens, recorder=rec)
                for _, d in rec.graph.nodes(data=True):
                    if "entropy" in d:
                        seen.append(d["entropy"])
                        paused += d["paused"]
            if not seen:
                raise UsageError("calibration saw no decoding steps")
            return paused / len(seen), seen

        _, greedy = run(float("inf"))
        if pause_rate == 0.0:
            return make(float("inf"))
        if pause_rate == 1.0:
            return make(float("-inf"))
        lo, hi = min(greedy) - 1e-6, max(greedy)  # rate(lo) ~ 1, rate(hi) = 0
        tau = float(np.quantile(np.asarray(greedy), 1.0 - pause_rate))
        best = (float("inf"), tau)
        for _ in range(iterations):
            rate, _ = run(tau)
            best = min(best, (abs(rate - pause_rate), tau))
            if rate > pause_rate:
                lo = tau
            else:
                hi = tau
            tau = (lo + hi) / 2
        return make(best[1])
