"""Monte Carlo tree search over tokens, as in Planning-Guided Transformer Decoding (PG-TD; Zhang et
al. 2023, "Planning with Large Language Models for Code Generation").

Each iteration: *select* from the root by P-UCB

    P-UCB(s, a) = Q(s, a) + beta(s) * P(a | s) * sqrt(log N(s)) / (1 + N(s')),
    beta(s) = log((N(s) + c_base + 1) / c_base) + c,

where P(a | s) is the masked next-token probability, N visit counts and s' the child; *expand* the
selected node with the top-k tokens of P(. | s); *evaluate* it by a rollout (any ``Strategy``,
``Greedy`` by default) to a complete hypothesis and the user ``reward``; *back up* Q along the path
(the max of the rewards seen below, as PG-TD does, or their mean). Returns every distinct rollout
result, highest reward first.

Caches, so no rollout is recomputed: a *tree cache* (next-token logits per prefix, so expanding a
node on an earlier rollout's path costs no forward) and a *sequence cache* (with a greedy rollout
the rollout from any prefix of an earlier rollout result is that result). Both live in a wrapper
around the LM for one search; strategies still never touch the KV cache.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Literal, Sequence

import torch

from trellis.decoder import Decoder, Hypothesis
from trellis.errors import UsageError
from trellis.search.base import Strategy
from trellis.search.base import lockstep as advance_in_lockstep
from trellis.search.greedy import Greedy
from trellis.search.logits_memo import LogitsMemo
from trellis.search.sample import Sample
from trellis.search.tree import Searching, SearchResult, TreeRecorder


class _Node:
    """A search-tree node (mutable bookkeeping, private to one search)."""

    __slots__ = ("hyp", "prior", "children", "visits", "q", "total", "exhausted")

    def __init__(self, hyp: Hypothesis, prior: float) -> None:
        self.hyp, self.prior = hyp, prior
        self.children: list[_Node] | None = None  # None = not expanded yet
        self.visits, self.q, self.total = 0, 0.0, 0.0
        self.exhausted = False  # every leaf below has been evaluated exactly: nothing left to learn


@dataclass(frozen=True)
class MCTS(Searching):
    """PG-TD Monte Carlo tree search (see the module docstring) with a user ``reward``.

    ``reward`` is called on each rollout's final hypothesis (``finished`` is False when the token
    budget cut it). Budgets: at most ``max_rollouts`` iterations, ``budget_tokens`` forward tokens
    (``lm.stats.tokens_forwarded`` when the LM has counters, else prefixes evaluated) and
    ``max_seconds`` of wall time — whichever ends first (checked between iterations). ``k``:
    children per expansion; ``c``, ``c_base``: P-UCB constants (PG-TD's defaults). ``backup``:
    "max" (PG-TD) or "mean". ``sequence_cache``: reuse rollouts along earlier results (None = on
    for greedy rollouts, for which it is exact). ``memo_bytes``: size of the logits tree cache.
    ``SearchResult.scores`` are the rewards.

    ``lockstep``: with argmax rollouts (``Greedy``, or ``Sample`` at temperature 0), a rollout that
    has to be computed is advanced together with up to ``lockstep - 1`` rollouts the search is
    likely to ask for next (the expanded node's other children, then its unvisited siblings), one
    batched forward per step; those results wait until a later iteration evaluates that node. The
    tree and the programs are those of one-at-a-time rollouts (a greedy rollout depends only on its
    start), and so is every budget check, but a token budget also pays for rollouts prefetched and
    never asked for: on Gemma 3 270M code search (2-core CPU, 800-token budgets, 2026-11-26) lockstep
    4 ran 1.78x the forward tokens per second of one-at-a-time rollouts but finished 5 distinct
    programs where they finished 17, fewer per token and per second, because most prefetched
    siblings were never visited (benchmarks/bench_codesearch.py --throughput). Hence the default 1
    (one rollout at a time); speculative rollouts (``rollout=Speculative(...)`` with a greedy
    verifier and ``sequence_cache=True``) pay where this does not.
    """

    reward: Callable[[Hypothesis], float]
    rollout: Strategy = field(default_factory=Greedy)
    k: int = 3
    c: float = 4.0
    c_base: float = 10.0
    max_rollouts: int = 64
    budget_tokens: int | None = None
    max_seconds: float | None = None
    backup: Literal["max", "mean"] = "max"
    sequence_cache: bool | None = None
    memo_bytes: int = 256 << 20
    lockstep: int = 1

    def __post_init__(self) -> None:
        if self.k < 1 or self.max_rollouts < 1 or self.lockstep < 1:
            raise UsageError("k, max_rollouts and lockstep must be >= 1")
        if self.backup not in ("max", "mean"):
            raise UsageError(f"backup must be 'max' or 'mean', got {self.backup!r}")

    def _greedy_rollout(self, decoder: Decoder) -> bool:
        if self.sequence_cache is not None:
            return self.sequence_cache
        return isinstance(self.rollout, Greedy) or (isinstance(self.rollout, Sample) and decoder.temperature == 0)

    def _argmax_rollout(self, decoder: Decoder) -> bool:
        return isinstance(self.rollout, Greedy) or (isinstance(self.rollout, Sample) and decoder.temperature == 0)

    def _p_ucb(self, parent: _Node, child: _Node) -> float:
        beta = math.log((parent.visits + self.c_base + 1) / self.c_base) + self.c
        return child.q + beta * child.prior * math.sqrt(math.log(max(parent.visits, 1))) / (1 + child.visits)

    def search(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int,
               recorder: TreeRecorder | None = None) -> SearchResult:
        rec = recorder if recorder is not None else TreeRecorder(decoder, root)
        memo = LogitsMemo(decoder.lm, self.memo_bytes)
        dec = replace(decoder, lm=memo)
        base = len(root.tokens)
        greedy_cache = self._greedy_rollout(decoder)
        batching = self.lockstep > 1 and greedy_cache and self._argmax_rollout(decoder)
        seq_cache: dict[tuple[int, ...], Hypothesis] = {}
        prefetched: dict[tuple[int, ...], Hypothesis] = {}  # rollouts computed ahead, by start prefix
        rewards: dict[tuple[int, ...], tuple[float, Hypothesis]] = {}
        t0 = time.monotonic()

        def terminal(h: Hypothesis) -> bool:
            return h.finished or len(h.tokens) - base >= max_new_tokens

        def roll(h: Hypothesis, peers: Sequence[Hypothesis]) -> Hypothesis:
            y = prefetched.pop(h.tokens, None)
            if y is not None:
                return y
            if not batching:
                return self.rollout(dec, h, max_new_tokens=max_new_tokens - (len(h.tokens) - base))[0]
            starts = [h]
            for p in peers:
                if len(starts) >= self.lockstep:
                    break
                if not terminal(p) and p.tokens not in seq_cache and p.tokens not in prefetched \
                        and all(p.tokens != s.tokens for s in starts):
                    starts.append(p)
            ys = advance_in_lockstep(dec, starts, [max_new_tokens - (len(s.tokens) - base) for s in starts],
                          lambda lp: lp.argmax(-1).tolist())
            for s, y in zip(starts[1:], ys[1:]):
                prefetched[s.tokens] = y
            return ys[0]

        def evaluate(h: Hypothesis, peers: Sequence[Hypothesis] = ()) -> float:
            if terminal(h):
                y = h
            else:
                y = seq_cache.get(h.tokens)
                if y is None:
                    y = roll(h, peers)
                    if greedy_cache:
                        for n in range(len(h.tokens), len(y.tokens)):
                            seq_cache.setdefault(y.tokens[:n], y)
                    else:
                        seq_cache[h.tokens] = y
                    rec.mark(y, rollout=True)
            if y.tokens not in rewards:
                rewards[y.tokens] = (float(self.reward(y)), y)
            return rewards[y.tokens][0]

        top = _Node(root, 1.0)
        for _ in range(self.max_rollouts):
            if top.exhausted:
                break
            if self.budget_tokens is not None and memo.spent() >= self.budget_tokens:
                break
            if self.max_seconds is not None and time.monotonic() - t0 >= self.max_seconds:
                break
            # selection
            path = [top]
            node = top
            while node.children is not None and not terminal(node.hyp):
                options = [ch for ch in node.children if not ch.exhausted]
                node = max(options, key=lambda ch: (self._p_ucb(path[-1], ch), ch.prior))
                path.append(node)
            # expansion
            if not terminal(node.hyp):
                lp = dec.log_probs([node.hyp])[0]  # [V]
                rec.pruned([node.hyp])
                k = min(self.k, int(torch.isfinite(lp).sum()))
                vals, toks = torch.topk(lp, k) if k else (lp[:0], lp[:0].long())
                node.children = []
                for v, t in zip(vals.tolist(), toks.tolist()):
                    child = dec.extend(node.hyp, t, v)
                    node.children.append(_Node(child, math.exp(v)))
                    rec.add(child, logprob=v, prior=math.exp(v))
            # evaluation and backup; the rollouts likeliest to be asked for next may share its forwards:
            # the node's other children (its first child's rollout is a suffix of its own), then its
            # unvisited siblings
            peers: list[Hypothesis] = []
            if batching:
                peers = [ch.hyp for ch in (node.children or [])[1:]]
                if len(path) > 1:
                    peers += [ch.hyp for ch in path[-2].children or [] if ch is not node and ch.visits == 0
                              and ch.children is None]
            r = evaluate(node.hyp, peers)
            for n in path:
                n.visits += 1
                n.total += r
                n.q = max(n.q, r) if self.backup == "max" and n.visits > 1 else (
                    r if self.backup == "max" else n.total / n.visits)
                rec.visit(n.hyp, value=n.q)
            for n in reversed(path):
                n.exhausted = terminal(n.hyp) or (n.children is not None and all(ch.exhausted for ch in n.children))
                if not n.exhausted:
                    break
        ranked = sorted(rewards.values(), key=lambda x: (-x[0], -x[1].logprob))
        if not ranked:
            return rec.result([root], [float("-inf")])
        for r, y in ranked:
            rec.mark(y, value=r)
        return rec.result([y for _, y in ranked], [r for r, _ in ranked])
