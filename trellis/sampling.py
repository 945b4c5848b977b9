"""Pure functions over logits: warping (temperature, top-k, top-p, min-p, repetition penalty),
sampling with an explicit generator, and entropy. None of them modify their inputs."""

from __future__ import annotations

import bisect
import math
from typing import Sequence

import torch
from torch import Tensor

from trellis.errors import UsageError

NEG_INF = float("-inf")


def repetition_penalty(logits: Tensor, previous: Sequence[Sequence[int]], penalty: float) -> Tensor:
    """CTRL-style penalty (Keskar et al. 2019) as transformers applies it: logits of tokens already in
    row b's sequence are divided by ``penalty`` when positive, multiplied when negative. [B, V] -> [B, V]."""
    if penalty == 1.0:
        return logits
    out = logits.clone()
    for b, seq in enumerate(previous):
        if not seq:
            continue
        idx = torch.tensor(sorted(set(seq)), dtype=torch.long, device=logits.device)
        idx = idx[idx < logits.shape[-1]]
        vals = out[b, idx]
        out[b, idx] = torch.where(vals < 0, vals * penalty, vals / penalty)
    return out


def check_warp(*, temperature: float = 1.0, top_p: float = 1.0, min_p: float = 0.0) -> None:
    """``UsageError`` for warping parameters ``warp`` refuses (a ``Decoder`` checks them when built)."""
    if temperature < 0:
        raise UsageError(f"temperature must be >= 0, got {temperature}")
    if not 0.0 < top_p <= 1.0:
        raise UsageError(f"top_p must be in (0, 1], got {top_p}")
    if not 0.0 <= min_p < 1.0:
        raise UsageError(f"min_p must be in [0, 1), got {min_p}")


def warp(logits: Tensor, *, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
         min_p: float = 0.0) -> Tensor:
    """Temperature, then top-k, top-p (nucleus) and min-p filtering; removed entries become -inf.

    ``logits`` is [B, V] (already masked: -inf entries stay -inf). ``temperature == 0`` leaves the
    scale alone (greedy takes the argmax, which no filter removes).
    """
    check_warp(temperature=temperature, top_p=top_p, min_p=min_p)
    out = logits / temperature if temperature not in (0.0, 1.0) else logits
    if top_k and top_k < out.shape[-1]:
        kth = torch.topk(out, top_k, dim=-1).values[..., -1:]  # [B, 1]
        out = out.masked_fill(out < kth, NEG_INF)
    if top_p < 1.0:
        sorted_logits, order = torch.sort(out, dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # keep the smallest prefix whose mass reaches top_p: drop a token when the mass before it does
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        out = out.masked_fill(drop, NEG_INF)
    if min_p > 0.0:
        probs = out.softmax(-1)
        thresh = probs.max(-1, keepdim=True).values * min_p
        out = out.masked_fill(probs < thresh, NEG_INF)
    return out


def log_softmax(scores: Tensor) -> Tensor:
    """log-probabilities in float32 ([B, V] -> [B, V]); all -inf rows stay all -inf instead of NaN."""
    lp = torch.log_softmax(scores.float(), dim=-1)
    return torch.nan_to_num(lp, nan=NEG_INF, neginf=NEG_INF)  # neginf: the default would make -inf finite


def logsumexp_floats(xs: Sequence[float]) -> float:
    """log(sum(exp(x))) of Python floats, in float64 (-inf for none or all -inf).

    Why not ``torch.logsumexp``: SMC takes it over a few log-weights or a row's few allowed tokens
    several times a step, ~25-40 us a call as tensors where this takes ~2 us; those calls were a
    fifth of a memo-served run (bench_smc.py peer --task yesno, line-profiled 2026-11-29, 2-core
    AMD EPYC)."""
    m = max(xs, default=NEG_INF)
    if m == NEG_INF or m == math.inf:
        return m
    return m + math.log(math.fsum(math.exp(x - m) for x in xs))


def draw(probs: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One index per row of [B, V] non-negative weights, P(i) = w_i / sum(w) -> [B, 1] int64 ([V] -> [1]; on
    ``probs``'s device): inverse transform sampling, one uniform per row against the row's running
    sum (float64, so a 262k-token row's tail keeps its mass; a zero weight is never drawn).

    Why not ``torch.multinomial``: on a [8, 262144] row block it took 41 ms per draw on the 2-core
    CPU, a quarter of a best-of-8 decode step; this takes ~6 ms (2026-11-26, Gemma 3's vocabulary,
    1 thread alone). trellis' seeded generators are CPU generators (``generate(seed=...)``), and
    CUDA refuses a CPU generator: the weights then cross to the host (one [B, V] copy per draw), so
    a seed gives the same draws from the same weights on any device."""
    if probs.dim() == 1:  # [V] -> [1], as torch.multinomial
        return draw(probs.unsqueeze(0), generator)[0]
    dev = generator.device if generator is not None else probs.device
    w = probs.to(dev)
    if w.dim() != 2:
        raise UsageError(f"draw() takes [B, V] or [V] weights, got shape {tuple(w.shape)}")
    cum = w.double().cumsum(-1)  # [B, V]
    total = cum[:, -1:]  # [B, 1]
    if not bool(((total > 0) & torch.isfinite(total)).all()) or bool((w < 0).any()):
        raise UsageError("draw() needs non-negative, finite weights with a positive sum in every row")
    u = torch.rand(w.shape[0], 1, generator=generator, device=dev, dtype=torch.float64) * total
    idx = torch.searchsorted(cum, u, right=True).clamp_(max=w.shape[-1] - 1)  # first i with cum_i > u
    bad = w.gather(-1, idx) <= 0  # u rounded up to the total: take the row's last positive weight
    if bool(bad.any()):
        last = (w > 0).long() * torch.arange(w.shape[-1], device=dev)
        idx = torch.where(bad, last.max(-1, keepdim=True).values, idx)
    return idx.to(probs.device)


def draw_few(weights: Sequence[float], k: int = 1, generator: torch.Generator | None = None) -> list[int]:
    """``k`` independent indices drawn from a short list of non-negative weights, P(i) = w_i / sum(w):
    ``draw`` on ``k`` copies of one row, in Python floats (float64, running sum, one uniform per
    draw from ``generator``: the same uniforms and the same indices ``draw`` gives).

    Why: a sequential Monte Carlo step draws from rows of a few allowed tokens, and resamples a
    few particles; ``draw``'s dozen tensor ops cost ~90 us per call there, a fifth of a
    memo-served run (bench_smc.py peer --task yesno, line-profiled 2026-11-29, 2-core AMD EPYC)."""
    cum: list[float] = []
    total = 0.0
    for w in weights:
        if not w >= 0.0:  # negative or NaN
            raise UsageError("draw_few() needs non-negative, finite weights with a positive sum")
        total += w
        cum.append(total)
    if not (total > 0.0 and math.isfinite(total)):
        raise UsageError("draw_few() needs non-negative, finite weights with a positive sum")
    out = []
    dev = generator.device if generator is not None else "cpu"
    for u in torch.rand(k, generator=generator, device=dev, dtype=torch.float64).tolist():
        i = min(bisect.bisect_right(cum, u * total), len(cum) - 1)  # first i with cum_i > u
        if weights[i] <= 0:  # u rounded up to the total: the last positive weight, as ``draw``
            i = max(j for j, w in enumerate(weights) if w > 0)
        out.append(i)
    return out


def sample(log_probs: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One token per row from [B, V] log-probabilities -> [B] int64 (on ``log_probs``'s device)."""
    return draw(log_probs.float().exp(), generator).squeeze(-1)


def entropy(log_probs: Tensor) -> Tensor:
    """Shannon entropy in nats of each row of [B, V] log-probabilities -> [B]."""
    p = log_probs.exp()
    return -(p * log_probs.masked_fill(p == 0, 0.0)).sum(-1)
