"""The KV-cache layer ``HFLanguageModel`` keeps: transformers' ``DynamicLayer`` over a preallocated,
growable buffer, so appends, crops and tree-path commits do not copy the whole cache."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor


@functools.cache
def growable_layer_class() -> type:
    """A transformers ``DynamicLayer`` over a preallocated buffer (defined on first use, so importing
    trellis does not import transformers).

    ``DynamicLayer`` appends by ``torch.cat``, copying the whole cache in every layer at every
    forward, and trellis' commits gathered it once more. Here an append writes the new rows in place
    (the buffer doubles when full, so growth is amortised), a crop only moves the length, and
    committing a tree path copies just the accepted rows down. On Gemma 3 270M with a 700-token
    context (2-core AMD EPYC, 2026-11-24) a 6-node verification plus a 3-node commit took 0.91-0.94x
    the time of the cat-and-gather cache; a one-token decode step was unchanged (1.00x). ``keys``/``values`` are views of the first ``length``
    positions, which is all attention reads.
    """
    from transformers.cache_utils import DynamicLayer

    class GrowableLayer(DynamicLayer):
        def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
            super().lazy_initialization(key_states, value_states)
            self._kbuf: Tensor | None = None
            self._vbuf: Tensor | None = None
            self._length = 0

        def _expose(self) -> None:
            assert self._kbuf is not None and self._vbuf is not None
            self.keys = self._kbuf[..., : self._length, :]
            self.values = self._vbuf[..., : self._length, :]

        def update(self, key_states: Tensor, value_states: Tensor, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n, q = self._length, key_states.shape[-2]
            kb, vb = self._kbuf, self._vbuf
            if kb is None or vb is None or n + q > kb.shape[-2] or kb.shape[:-2] != key_states.shape[:-2] \
                    or vb.shape[:-2] != value_states.shape[:-2]:
                if kb is not None and n and kb.shape[:-2] != key_states.shape[:-2]:
                    raise ValueError(f"cache rows {tuple(kb.shape[:-2])} do not match the new states' "
                                     f"{tuple(key_states.shape[:-2])}")
                cap = max(n + q, 2 * n, 64)
                new_k = key_states.new_empty((*key_states.shape[:-2], cap, key_states.shape[-1]))
                new_v = value_states.new_empty((*value_states.shape[:-2], cap, value_states.shape[-1]))
                if n:
                    new_k[..., :n, :].copy_(kb[..., :n, :])  # type: ignore[index]
                    new_v[..., :n, :].copy_(vb[..., :n, :])  # type: ignore[index]
                self._kbuf, self._vbuf = kb, vb = new_k, new_v
            kb[..., n : n + q, :].copy_(key_states)
            vb[..., n : n + q, :].copy_(value_states)
            self._length = n + q
            self._expose()
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self._length if self.is_initialized else 0

        def truncate(self, length: int) -> None:
            """Keep the first ``length`` positions."""
            if self.is_initialized and self._kbuf is not None:
                self._length = min(self._length, length)
                self._expose()

        def crop(self, tokens_to_remove: int) -> None:  # transformers' API: a negative count
            if tokens_to_remove > 0:
                raise ValueError("crop() takes a negative number of tokens to remove")
            self.truncate(self._length + tokens_to_remove if self.is_initialized else 0)

        def keep_tail(self, start: int, tail: Tensor) -> None:
            """Keep positions ``[0, start)`` followed by ``tail`` (ascending positions >= ``start``)."""
            if not self.is_initialized or self._kbuf is None or self._vbuf is None:
                return
            k = len(tail)
            if k and not bool((tail == torch.arange(start, start + k, device=tail.device)).all()):
                # index_select copies first, so overlapping source and destination rows are safe
                self._kbuf[..., start : start + k, :] = self._kbuf.index_select(-2, tail)
                self._vbuf[..., start : start + k, :] = self._vbuf.index_select(-2, tail)
            self._length = start + k
            self._expose()

        def batch_select_indices(self, indices: Tensor) -> None:
            if self.is_initialized and self._kbuf is not None and self._vbuf is not None:
                self._kbuf, self._vbuf = self._kbuf[indices], self._vbuf[indices]
                self._expose()

        def batch_repeat_interleave(self, repeats: int) -> None:
            if self.is_initialized and self._kbuf is not None and self._vbuf is not None:
                self._kbuf = self._kbuf.repeat_interleave(repeats, dim=0)
                self._vbuf = self._vbuf.repeat_interleave(repeats, dim=0)
                self._expose()

        def reset(self) -> None:
            self._kbuf = self._vbuf = None
            self._length = 0
            super().reset()

    GrowableLayer.__qualname__ = GrowableLayer.__name__ = "GrowableLayer"
    return GrowableLayer
