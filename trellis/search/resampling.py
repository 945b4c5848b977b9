"""Resampling for sequential Monte Carlo: the effective sample size and two schemes that draw
ancestor indices from normalised particle weights.

Both are unbiased (particle ``i`` gets ``N * W_i`` copies in expectation). Systematic resampling
(Kitagawa 1996; Douc, Cappé & Moulines 2005, "Comparison of Resampling Schemes for Particle
Filtering") uses ONE uniform: each particle gets ``floor(N W_i)`` or ``ceil(N W_i)`` copies, so it
adds less noise than multinomial resampling (N independent draws), which is the textbook scheme.
"""

from __future__ import annotations

import math
from typing import Callable, Literal, Sequence

import torch

from trellis.errors import UsageError
from trellis.sampling import NEG_INF, draw_few, logsumexp_floats

Resampler = Literal["systematic", "multinomial"]


def log_ess(log_w: Sequence[float]) -> float:
    """log of the effective sample size (sum w)^2 / sum w^2 of log-weights (-inf if all are -inf)."""
    if not any(math.isfinite(x) for x in log_w):
        return NEG_INF
    return 2 * logsumexp_floats(log_w) - logsumexp_floats([2 * x for x in log_w])


def normalised(log_w: Sequence[float]) -> torch.Tensor:
    """[N] float64 weights W_i = w_i / sum w (needs one finite log-weight)."""
    if not any(math.isfinite(x) for x in log_w):
        raise UsageError("every particle has weight zero: nothing to resample")
    m = max(log_w)
    e = [math.exp(x - m) for x in log_w]
    s = math.fsum(e)
    return torch.tensor([x / s for x in e], dtype=torch.float64)


def systematic(weights: torch.Tensor, n: int, generator: torch.Generator | None = None) -> list[int]:
    """``n`` ancestor indices: the points (u + k) / n, k = 0..n-1, for one u ~ U[0, 1), through the
    inverse CDF of ``weights`` ([N], summing to 1)."""
    cum = torch.cumsum(weights.double().cpu(), 0)
    cum[-1] = 1.0  # round-off must not leave the last point past the end
    u = float(torch.rand(1, generator=generator, dtype=torch.float64))
    points = (u + torch.arange(n, dtype=torch.float64)) / n
    idx = torch.searchsorted(cum, points, right=True).clamp_(max=len(cum) - 1)
    # a point can only land on a zero-weight index through round-off at its left edge: move it on
    zero = weights.cpu()[idx] <= 0
    if bool(zero.any()):
        positive = torch.nonzero(weights.cpu() > 0).flatten()
        nxt = torch.searchsorted(positive, idx[zero]).clamp_(max=len(positive) - 1)
        idx[zero] = positive[nxt]
    return idx.tolist()


def multinomial(weights: torch.Tensor, n: int, generator: torch.Generator | None = None) -> list[int]:
    """``n`` independent draws from ``weights`` ([N], summing to 1)."""
    return draw_few(weights.tolist(), n, generator)


RESAMPLERS: dict[str, Callable[[torch.Tensor, int, torch.Generator | None], list[int]]] = {
    "systematic": systematic, "multinomial": multinomial,
}


def resampler(name: str) -> Callable[[torch.Tensor, int, torch.Generator | None], list[int]]:
    fn = RESAMPLERS.get(name)
    if fn is None:
        raise UsageError(f"unknown resampler {name!r}; choose one of {', '.join(RESAMPLERS)}")
    return fn


def mean_log_weight(log_w: Sequence[float]) -> float:
    """log((1/N) sum w): every particle's log-weight after resampling (it keeps the estimate of the
    normalising constant unbiased)."""
    return logsumexp_floats(log_w) - math.log(len(log_w))
