"""Prepacked CPU GEMMs for short multi-row forwards (draft-tree verification, small batches).

On CPU, MKL's plain sgemm is fast for 1-3 input rows (a GEMV-like, memory-bound path) but several
times slower from 4 rows on: Gemma 3 270M's 262,144 x 640 LM head took 40 ms for 3 rows, 113 ms
for 4 and 209 ms for 16 (2 cores, 2026-11-22). The same product against a weight prepacked once
with ``cblas_sgemm_pack`` (``torch.ops.mkl._mkl_reorder_linear_weight``, the op inductor's CPU
freezing uses) takes ~52 ms for 16 rows. So a tree of up to ``rows - 1`` draft nodes is verified for
about 1.5x the cost of one token instead of 4x, which is what makes deep drafts pay off on CPU.

A pack is built for exactly ``rows`` input rows (MKL's packed layout is tied to the row count), so
inputs of 4..``rows`` rows are zero-padded to ``rows``; other inputs take the plain ``F.linear``.
Packs are built lazily on the first multi-row forward, checked once against ``F.linear`` (a
mismatch disables packing: never a silently different model), and assume frozen weights.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor

MIN_ROWS = 4  # below this the plain sgemm is already memory-bound and exact-as-usual


def _pack(weight: Tensor, rows: int) -> Tensor:
    return torch.ops.mkl._mkl_reorder_linear_weight(weight, rows)


def _packed_linear(x: Tensor, packed: Tensor, weight: Tensor, bias: Tensor | None, rows: int) -> Tensor:
    return torch.ops.mkl._mkl_linear(x, packed, weight, bias, rows)


def available() -> bool:
    """Whether this torch build has MKL's packed sgemm ops."""
    return bool(getattr(torch._C, "has_mkl", False)) and hasattr(torch.ops.mkl, "_mkl_linear") \
        and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")


class PackedLinears:
    """Packed copies of every ``nn.Linear`` (LM head included) of a float32 CPU model, swapped in for
    the duration of ``with packs.active():``. Costs about 1.8x the packed weights' memory."""

    def __init__(self, modules: list[torch.nn.Linear], rows: int = 16) -> None:
        if rows < MIN_ROWS:
            raise ValueError(f"rows must be >= {MIN_ROWS}, got {rows}")
        self.rows = rows
        self._modules = modules
        self._packed: list[Tensor] | None = None
        self.enabled = available() and all(
            m.weight.device.type == "cpu" and m.weight.dtype == torch.float32 for m in modules)

    @classmethod
    def for_model(cls, model: Any, rows: int = 16) -> "PackedLinears":
        """Every ``nn.Linear`` of ``model``, the LM head included (a submodule like the others)."""
        return cls([m for m in model.modules() if isinstance(m, torch.nn.Linear)], rows)

    def _build(self) -> None:
        with torch.no_grad():
            self._packed = [_pack(m.weight.detach(), self.rows) for m in self._modules]
            # One check per model: the packed product must agree with F.linear to float32 rounding.
            m, w = self._modules[-1], self._packed[-1]
            x = torch.randn(self.rows, m.in_features, generator=torch.Generator().manual_seed(0))
            ref = F.linear(x, m.weight, m.bias)
            got = _packed_linear(x, w, m.weight, m.bias, self.rows)
            if got.shape != ref.shape or not torch.allclose(got, ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max())):
                self.enabled, self._packed = False, None

    def _forward(self, m: torch.nn.Linear, packed: Tensor) -> Callable[[Tensor], Tensor]:
        rows, weight, bias = self.rows, m.weight, m.bias

        def forward(x: Tensor) -> Tensor:
            flat = x.reshape(-1, x.shape[-1])
            n = flat.shape[0]
            if not MIN_ROWS <= n <= rows:
                return F.linear(x, weight, bias)
            pad = flat.new_zeros(rows, flat.shape[1])
            pad[:n] = flat
            out = _packed_linear(pad, packed, weight, bias, rows)[:n]
            return out.reshape(*x.shape[:-1], out.shape[-1])

        return forward

    def applies(self, rows: int) -> bool:
        """Whether a forward over ``rows`` input rows would use the packs."""
        return self.enabled and MIN_ROWS <= rows <= self.rows

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Route every covered linear through its pack inside the block (instance attributes shadow
        the class ``forward`` and are deleted afterwards, so the model is untouched outside)."""
        if not self.enabled:
            yield
            return
        if self._packed is None:
            self._build()
            if not self.enabled:
                yield
                return
        assert self._packed is not None
        for m, p in zip(self._modules, self._packed):
            m.forward = self._forward(m, p)  # type: ignore[method-assign]
        try:
            yield
        finally:
            for m in self._modules:
                del m.forward
