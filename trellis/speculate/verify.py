"""Verifiers: decide which drafted nodes the target accepts, from ONE tree forward's distributions.

Every verifier reads ``target`` [N+1, V] — the masked, warped target log-probs (``Decoder``), row 0
after the committed prefix and row i+1 after node i — and returns ``(path, next_token)``: the
accepted chain of node indices (root child first) and the token that follows it (the bonus token
when the whole path was accepted, a residual sample otherwise). Masked tokens have probability 0
under the target, so a grammar-forbidden node is never accepted.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from trellis.errors import UsageError
from trellis.sampling import draw
from trellis.speculate.base import Draft


def _children(draft: Draft) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for i, p in enumerate(draft.tree.parents.tolist()):
        kids.setdefault(p, []).append(i)
    return kids


@dataclass(frozen=True)
class GreedyVerifier:
    """Longest path whose every token equals the target's argmax, plus the argmax after it.

    Token-for-token identical to greedy decoding (up to fp32 ties between two forward shapes)."""

    def __call__(self, target: Tensor, draft: Draft, generator: torch.Generator | None = None) -> tuple[list[int], int]:
        kids = _children(draft)
        toks = draft.tree.tokens.tolist()
        best = target.argmax(-1).tolist()  # [N+1]
        path: list[int] = []
        node = -1
        while True:
            want = best[node + 1]
            nxt = next((c for c in kids.get(node, []) if toks[c] == want), None)
            if nxt is None:
                return path, want
            path.append(nxt)
            node = nxt


def _draft_q(draft: Draft, row: int, width: int) -> Tensor | None:
    """The draft distribution of ``row`` on the target's width (a draft model may be narrower or wider;
    tokens the target cannot produce have p = 0, so trimming them leaves max(0, p - q) unchanged)."""
    if draft.probs is None:
        return None
    q = draft.probs[row].float()
    if q.shape[-1] < width:
        return torch.nn.functional.pad(q, (0, width - q.shape[-1]))
    return q[:width].clone()


def _uniform(generator: torch.Generator | None) -> float:
    return float(torch.rand((), generator=generator))


def _sample(p: Tensor, generator: torch.Generator | None) -> int:
    return int(draw(p, generator)[0])


def _normalise(p: Tensor) -> Tensor | None:
    s = p.sum()
    return p / s if s > 0 else None


@dataclass(frozen=True)
class ChainRejectionSampler:
    """Speculative sampling for a single chain (Leviathan, Kalman & Matias 2023, Algorithm 1).

    Token x_i drafted from q_i is accepted with probability min(1, p_i(x_i) / q_i(x_i)); on the first
    rejection the next token is drawn from norm(max(0, p_i - q_i)); if all are accepted, the bonus
    token comes from p_{n+1}. Deterministic drafts use q_i = one-hot(x_i). Lossless: outputs are
    distributed exactly as sampling from p token by token.
    """

    def __call__(self, target: Tensor, draft: Draft, generator: torch.Generator | None = None) -> tuple[list[int], int]:
        parents = draft.tree.parents.tolist()
        if any(p != i - 1 for i, p in enumerate(parents)):
            raise UsageError("ChainRejectionSampler needs a chain draft; use TreeRejectionSampler for trees")
        p_all = target.float().exp()  # [N+1, V]
        toks = draft.tree.tokens.tolist()
        path: list[int] = []
        for i, x in enumerate(toks):
            p = p_all[i]
            q = _draft_q(draft, i, p.shape[-1])
            qx = float(q[x]) if q is not None else 1.0
            if qx > 0 and _uniform(generator) < min(1.0, float(p[x]) / qx):
                path.append(i)
                continue
            residual = (p - q).clamp_min(0) if q is not None else p.clone().index_fill_(0, torch.tensor([x], device=p.device), 0.0)
            r = _normalise(residual)
            return path, _sample(r if r is not None else p, generator)
        return path, _sample(p_all[len(toks)], generator)


@dataclass(frozen=True)
class TreeRejectionSampler:
    """Multi-draft speculative sampling over a token tree: recursive rejection sampling.

    At a node with target distribution p and children x_1..x_k: child x_j is accepted with
    probability min(1, p(x_j) / q(x_j)); after a rejection, p <- norm(max(0, p - q)) and, for drafts
    sampled without replacement, q <- norm(q with x_j removed) (SpecInfer, Miao et al. 2024; RSD,
    Jeon et al. 2024). Deterministic children (``probs is None``) use q = one-hot(x_j), i.e. p <- p
    without x_j. When no child survives, the next token is drawn from the residual p. Lossless.
    """

    def __call__(self, target: Tensor, draft: Draft, generator: torch.Generator | None = None) -> tuple[list[int], int]:
        kids = _children(draft)
        toks = draft.tree.tokens.tolist()
        p_all = target.float().exp()  # [N+1, V]
        path: list[int] = []
        node = -1
        while True:
            p = p_all[node + 1].clone()
            q = _draft_q(draft, node + 1, p.shape[-1])
            chosen = None
            for c in kids.get(node, []):
                x = toks[c]
                qx = float(q[x]) if q is not None else 1.0
                if qx > 0 and _uniform(generator) < min(1.0, float(p[x]) / qx):
                    chosen = c
                    break
                if q is not None:
                    r = _normalise((p - q).clamp_min(0))
                    if r is None:  # p == q exactly: the residual is empty, p itself stays exact
                        r = p
                    p = r
                    q[x] = 0.0
                    q = _normalise(q)
                    if q is None:
                        q = torch.zeros_like(p)
                else:
                    p[x] = 0.0
                    r = _normalise(p)
                    if r is None:
                        raise RuntimeError("target puts all mass on rejected draft tokens")
                    p = r
            if chosen is None:
                return path, _sample(p, generator)
            path.append(chosen)
            node = chosen
