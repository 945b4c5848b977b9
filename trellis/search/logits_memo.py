"""``LogitsMemo``: a language-model wrapper that remembers the next-token logits row of every
prefix it served (least recently used rows dropped beyond ``max_bytes``), so a search that comes
back to a prefix pays no forward for it. MCTS keeps one per search (its tree cache); SMC keeps one
per model across runs (``LogitsMemo.shared``: repeated runs on one prompt, the way its posterior
is pooled, share their first steps). Only prefixes it has not seen are forwarded; strategies still
never touch the KV cache (row re-indexing is passed on for the rows the model forwarded).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Sequence

import torch
from torch import Tensor

from trellis.lm import LanguageModel
from trellis.lm_proxy import LMProxy
from trellis.tokens import TokenTree


_SHARED: "weakref.WeakKeyDictionary[object, OrderedDict[tuple[int, ...], Tensor]]" = weakref.WeakKeyDictionary()
_SHARED_LSE: "weakref.WeakKeyDictionary[object, dict[tuple[int, ...], float]]" = weakref.WeakKeyDictionary()


class LogitsMemo(LMProxy):
    """Logits rows by prefix, in front of ``lm``; also meters what it passed on (``LMProxy.spent``).
    A speculative rollout's tree rows are remembered for the chain it commits: exactly the
    prefixes a one-token-at-a-time decode would have left here."""

    def __init__(self, lm: LanguageModel, max_bytes: int,
                 rows: "OrderedDict[tuple[int, ...], Tensor] | None" = None,
                 lse: "dict[tuple[int, ...], float] | None" = None) -> None:
        super().__init__(lm)
        self.max_bytes = max_bytes
        self.rows: OrderedDict[tuple[int, ...], Tensor] = rows if rows is not None else OrderedDict()
        # each remembered row's log-sum-exp, computed when first asked for (Normalises)
        self.lse: dict[tuple[int, ...], float] = lse if lse is not None else {}
        self._tree: tuple[tuple[int, ...], TokenTree, Tensor] | None = None  # last tree_logits, until commit
        self._forwarded: list[int | None] = []  # per prefix of the last request: its row in the model's batch

    @classmethod
    def shared(cls, lm: LanguageModel, max_bytes: int) -> "LogitsMemo":
        """A memo whose rows are kept with ``lm`` (the model under any wrappers) across calls,
        until ``lm`` is gone."""
        base: object = lm
        while isinstance(base, LMProxy):
            base = base.lm
        rows = _SHARED.get(base)
        if rows is None:
            rows = _SHARED[base] = OrderedDict()
            _SHARED_LSE[base] = {}
        return cls(lm, max_bytes, rows, _SHARED_LSE[base])

    def _remember(self, key: tuple[int, ...], row: Tensor) -> None:
        self.rows[key] = row.clone()
        self.rows.move_to_end(key)
        limit = max(1, self.max_bytes // max(1, row.shape[-1] * row.element_size()))
        self.lse.pop(key, None)  # a new row for this prefix: its normaliser is computed again
        while len(self.rows) > limit:
            old, _ = self.rows.popitem(last=False)
            self.lse.pop(old, None)

    def logits(self, prefixes: Sequence[Sequence[int]]) -> Tensor:
        return torch.stack(self._rows([tuple(int(t) for t in p) for p in prefixes]))  # [B, V]: copies, writable

    def _rows(self, keys: list[tuple[int, ...]]) -> list[Tensor]:
        """One [V] row per prefix key (the memo's own tensors or views of the model's batch: read only)."""
        self._tree = None
        # the rows served from here are taken first: remembering the missing ones may evict them
        got = {k: self.rows[k] for k in keys if k in self.rows}
        for k in got:
            self.rows.move_to_end(k)
        missing = list(dict.fromkeys(k for k in keys if k not in got))
        if missing:
            out = super().logits(missing)  # [M, V]
            for i, (k, row) in enumerate(zip(missing, out)):
                self._remember(k, row)
                got[k] = out[i]
        where = {k: i for i, k in enumerate(missing)}
        self._forwarded = [where.get(k) for k in keys]
        return [got[k] for k in keys]

    def logits_and_normalisers(self, prefixes: Sequence[Sequence[int]]) -> tuple[list[Tensor], Tensor]:
        """One read-only [V] logits row per prefix (not copied: a [B, V] copy per SMC step cost ~60
        us, bench_smc.py peer --task yesno, line-profiled 2026-11-29) and each row's log-sum-exp,
        remembered with the row: SMC's steps come back to the same prefixes run after run, and a
        pass over Gemma's 262,144 logits per row was a third of a memo-served run (same bench,
        profiled 2026-11-29: 1.26 of 4.0 ms)."""
        keys = [tuple(int(t) for t in p) for p in prefixes]
        rows = self._rows(keys)
        lse: list[float] = []
        for k, row in zip(keys, rows):
            v = self.lse.get(k)
            if v is None:
                v = float(torch.logsumexp(row.float(), -1))
                if k in self.rows:  # a row this memo could not keep (over max_bytes) keeps no normaliser
                    self.lse[k] = v
            lse.append(v)
        return rows, torch.tensor(lse, dtype=torch.float32)

    def reindex_rows(self, rows: Sequence[int]) -> None:
        """Passed on for the prefixes the model forwarded in the last request (a remembered one has
        no row there: the model finds its cache row by prefix when it next needs one)."""
        mapped = [self._forwarded[r] for r in rows if 0 <= r < len(self._forwarded)]
        mapped = [m for m in mapped if m is not None]
        if mapped:
            super().reindex_rows(mapped)

    def tree_logits(self, prefix: Sequence[int], tree: TokenTree) -> Tensor:
        out = super().tree_logits(prefix, tree)  # [N+1, V]
        self._tree = (tuple(int(t) for t in prefix), tree, out)
        return out

    def commit(self, path: Sequence[int]) -> None:
        if self._tree is not None:
            prefix, tree, out = self._tree
            toks = tree.tokens.tolist()
            key = prefix
            self._remember(key, out[0])
            for i in path:
                key = key + (toks[i],)
                self._remember(key, out[i + 1])
            self._tree = None
        super().commit(path)
