"""The one token-bitmask format: int32 [rows, ceil(V/32)], bit ``t % 32`` of word ``t // 32`` set
means token ``t`` is allowed. The same layout xgrammar and llguidance use, so their masks can be
applied with these functions and ours with theirs."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

_BIT = torch.tensor([1 << i for i in range(31)] + [-(1 << 31)], dtype=torch.int32)  # [32]


def bitmask_width(vocab_size: int) -> int:
    return (vocab_size + 31) // 32


def allocate_bitmask(rows: int, vocab_size: int) -> Tensor:
    """A fresh all-allowed int32 bitmask [rows, ceil(V/32)]."""
    return torch.full((rows, bitmask_width(vocab_size)), -1, dtype=torch.int32)


# The numpy view of the CPU row written last, by what identifies its memory: (data_ptr, dtype,
# shape, strides). Callers pass a new tensor object per call (``bitmask[i]``), so ``out.numpy()``
# ran for every mask: 6.8 -> 3.7 us a ``write_row`` (bench_fresh's 100 schemas, ~11.5k fills a
# pass, in-process A/B, arms alternating over 8 passes; ~4% of a fresh document's mask time). The
# view keeps that tensor's storage alive, so no other allocation can take its address while it is
# cached: a tensor with the same key is the same memory, laid out the same way.
_LAST_VIEW: tuple = (None, None)


def write_row(out: Tensor, row: np.ndarray) -> None:
    """Copy the packed mask ``row`` ([W] int32) into the bitmask row ``out`` in place. A CPU row is
    written through its numpy view: ``torch.from_numpy`` + ``copy_`` cost ~9.5 us a mask against
    ~7.5 (bench_fresh's 94 schemas, ~11k fills, in-process A/B), ~10% of a fresh document's mask
    time by a sampling profile. Other devices (CUDA) take torch's copy."""
    global _LAST_VIEW
    key = (out.data_ptr(), out.dtype, out.shape, out.stride())
    last, view = _LAST_VIEW  # (one tuple read: another thread may replace it, never half of it)
    if last == key:
        np.copyto(view, row)
    elif out.is_cpu and out.dtype == torch.int32 and not out.requires_grad:
        view = out.numpy()
        np.copyto(view, row)
        _LAST_VIEW = (key, view)
    else:
        out.copy_(torch.from_numpy(row))


def bitmask_to_bool(bitmask: Tensor, vocab_size: int) -> Tensor:
    """[rows, W] int32 -> [rows, V] bool (True = allowed)."""
    if bitmask.device.type == "cpu":
        # numpy's unpackbits: 0.02 ms per 262,144-token row vs 0.16 ms for the [rows, W, 32]
        # AND below (2-core AMD EPYC VM, 1 thread); the mask is applied at every decoding step.
        m = np.ascontiguousarray(bitmask.to(torch.int32).numpy())
        bits = np.unpackbits(m.view(np.uint8), axis=-1, bitorder="little")[:, :vocab_size]
        return torch.from_numpy(bits.view(np.bool_))
    b = bitmask.to(torch.int32).unsqueeze(-1) & _BIT.to(bitmask.device)  # [rows, W, 32]
    return (b != 0).reshape(bitmask.shape[0], -1)[:, :vocab_size]


def bool_to_bitmask(allowed: Tensor | np.ndarray) -> Tensor:
    """[rows, V] (or [V]) bool -> int32 bitmask [rows, ceil(V/32)]."""
    a = torch.as_tensor(allowed, dtype=torch.bool)
    if a.ndim == 1:
        a = a.unsqueeze(0)
    rows, v = a.shape
    pad = bitmask_width(v) * 32 - v
    if pad:
        a = torch.nn.functional.pad(a, (0, pad))
    bits = np.packbits(a.numpy().reshape(rows, -1, 32), axis=-1, bitorder="little")  # [rows, W, 4] uint8
    return torch.from_numpy(np.ascontiguousarray(bits).view(np.int32).reshape(rows, -1).copy())


def apply_bitmask_(logits: Tensor, bitmask: Tensor, indices: Tensor | None = None) -> Tensor:
    """Set disallowed logits to -inf, in place; returns ``logits``.

    ``logits`` is [rows, V'] (V' may exceed the mask's vocabulary: extra columns are disallowed);
    ``bitmask`` is [rows, W] int32, or [R, W] with ``indices`` [rows] picking a mask row per logit row.
    """
    if indices is not None:
        bitmask = bitmask[indices]
    if logits.ndim == 1:
        return apply_bitmask_(logits.unsqueeze(0), bitmask.reshape(1, -1)).squeeze(0)
    v = logits.shape[-1]
    allowed = bitmask_to_bool(bitmask.to(logits.device), min(v, bitmask.shape[-1] * 32))  # [rows, V]
    if allowed.shape[-1] < v:
        allowed = torch.nn.functional.pad(allowed, (0, v - allowed.shape[-1]))
    logits.masked_fill_(~allowed, float("-inf"))
    return logits


def set_bit_ids(bitmask_row: Tensor, vocab_size: int) -> Tensor:
    """The allowed token ids of one bitmask row [W], ascending, as int64 (on the host): only its
    nonzero words are expanded, in numpy (~15 us for a sparse 262,144-token row, where the same
    in torch ops took 0.13 ms and unpacking the whole row to booleans 0.42 ms; 2026-11-29,
    2-core AMD EPYC, bench_smc.py peer --task yesno profiled)."""
    words = _words(bitmask_row)
    return _expand(words, np.flatnonzero(words), vocab_size)


def few_set_bit_ids(bitmask_row: Tensor, vocab_size: int, limit: int) -> Tensor | None:
    """``set_bit_ids`` when the row allows at most ``limit`` tokens, else None, decided before
    expanding: a row with more nonzero words than ``limit`` is not expanded at all (a string's
    interior allows ~50k of Gemma's tokens: expanding them took ~1.5 ms a row, 12 ms of an 8-particle
    SMC step; bench_smc.py step-cost --long, cProfile, 2026-11-29)."""
    words = _words(bitmask_row)
    nz = np.flatnonzero(words)
    if len(nz) > limit:
        return None
    ids = _expand(words, nz, vocab_size)
    return ids if len(ids) <= limit else None


def _words(bitmask_row: Tensor) -> np.ndarray:
    return np.ascontiguousarray(bitmask_row.cpu().numpy()).view(np.uint32)


def _expand(words: np.ndarray, nz: np.ndarray, vocab_size: int) -> Tensor:
    """The ids of the set bits of ``words[nz]`` (the row's nonzero words), ascending."""
    # each word's bytes least significant first, each byte's bits least significant first: bit i of
    # the word is column i
    bits = np.unpackbits(words[nz].astype("<u4").view(np.uint8).reshape(-1, 4), axis=1, bitorder="little")
    ids = (nz[:, None].astype(np.int64) * 32 + _BITS_NP)[bits.astype(bool)]
    return torch.from_numpy(ids[ids < vocab_size])


_BITS_NP = np.arange(32, dtype=np.int64)


def bits_at(bitmask_row: Tensor, ids: Tensor) -> Tensor:
    """Whether each token of ``ids`` (int64, each < the row's width x 32) is allowed by one bitmask
    row [W]: a bool tensor shaped like ``ids``."""
    words = bitmask_row.to(torch.int64)[ids // 32]
    return ((words >> (ids % 32)) & 1) == 1


def allowed_ids(bitmask_row: Tensor, vocab_size: int) -> list[int]:
    """Token ids allowed by one bitmask row (for tests and debugging)."""
    return set_bit_ids(bitmask_row.reshape(-1), vocab_size).tolist()
