"""``LMHead``: a growable subset of a model's output embedding, for draft views that score only the
tokens a draft can propose."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from trellis.errors import UsageError


class LMHead:
    """A growable subset of an LM head: token ids and their rows of the output embedding.

    ``grow`` gathers only the new rows, into spare capacity: re-gathering the whole ~36k-row head
    of Gemma 3 270M took 0.19 s a call (cProfile, one writing prompt), once per new token and
    draft view. Draft views of one model can share one head (``HFLanguageModel.set_head``)."""

    def __init__(self, weight: Tensor, ids: Sequence[int]) -> None:
        """``weight`` [V, H]: the model's output embedding (read, never copied whole)."""
        self._weight = weight.detach()
        self.vocab_size = int(weight.shape[0])
        self._ids = torch.zeros(0, dtype=torch.long)  # [capacity]
        self._rows = torch.zeros(0, weight.shape[1], dtype=weight.dtype, device=weight.device)  # [capacity, H]
        self._in = torch.zeros(self.vocab_size, dtype=torch.bool)  # [V]
        self._n = 0
        if not self.grow(ids):
            raise UsageError("head ids must be non-empty")

    @property
    def ids(self) -> Tensor:
        """[K] token ids, in the order they were added."""
        return self._ids[: self._n]

    @property
    def rows(self) -> Tensor:
        """[K, H] their output-embedding rows (a view: valid until the next ``grow``)."""
        return self._rows[: self._n]

    def reads(self, weight: Tensor) -> bool:
        """Whether this head's rows come from ``weight``."""
        return self._weight.data_ptr() == weight.data_ptr() and self._weight.shape == weight.shape

    def grow(self, ids: Sequence[int]) -> int:
        """Add the ``ids`` not yet in the head; returns how many were new."""
        new = torch.tensor(sorted({int(i) for i in ids}), dtype=torch.long)
        if len(new) and (int(new[-1]) >= self.vocab_size or int(new[0]) < 0):
            raise UsageError(f"head ids must lie in [0, {self.vocab_size})")
        new = new[~self._in[new]]
        n, need = self._n, self._n + len(new)
        if need > len(self._ids):
            cap = need + max(need // 4, 1024)  # headroom: a generation adds tokens a few at a time
            ids_buf = torch.empty(cap, dtype=torch.long)
            rows_buf = torch.empty(cap, self._rows.shape[1], dtype=self._rows.dtype, device=self._rows.device)
            ids_buf[:n], rows_buf[:n] = self._ids[:n], self._rows[:n]
            self._ids, self._rows = ids_buf, rows_buf
        self._ids[n:need] = new
        # index_select into the buffer: 0.05 s for 35k Gemma rows, against 0.12-0.47 s for
        # `rows[n:need] = weight[new]` (a temporary, then a copy into fresh pages)
        torch.index_select(self._weight, 0, new.to(self._weight.device), out=self._rows[n:need])
        self._in[new] = True
        self._n = need
        return len(new)
