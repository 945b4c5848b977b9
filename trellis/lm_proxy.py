"""Declared capabilities of a language model, and the one base for wrappers that sit in front of it.

A ``LanguageModel`` only promises ``logits`` and ``tree_logits``. Two more capabilities are
optional, and callers must know whether a model has them without probing for attributes:

- ``Committing``: after ``tree_logits`` the model can keep the accepted chain of the tree in its
  KV cache (``commit(path)``); speculative decoding calls it after every verification, so the next
  round does not re-forward the tokens it just accepted.
- ``Metered``: the model counts the compute it spends (``stats: LMStats``); search budgets in
  forward tokens read it.
- ``ReindexesRows``: the rows of the last ``logits`` batch can be copied and re-ordered in the KV
  cache (``reindex_rows(rows)``); sequential Monte Carlo calls it after resampling, so a copied
  particle continues from its ancestor's cache row instead of being matched to it by prefix.

Search strategies wrap the model for one search (MCTS's logits memo, codegen's test-guided proxy).
A wrapper that forgot ``commit`` made every speculative rollout inside it re-forward its accepted
path (issue 25). ``LMProxy`` forwards both capabilities and meters what passed through it, so a
wrapper only writes what it changes.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from torch import Tensor

from trellis.lm import LanguageModel, LMStats
from trellis.tokens import TokenTree


@runtime_checkable
class Committing(Protocol):
    """A model that can keep the accepted chain of its last ``tree_logits`` tree in its cache."""

    def commit(self, path: Sequence[int]) -> None:
        """Keep the root-to-node chain ``path`` (tree node indices) of the last tree; ``[]`` keeps
        just its prefix."""
        ...


@runtime_checkable
class Metered(Protocol):
    """A model that counts its compute. ``stats`` is ``None`` when a wrapper's model has none."""

    @property
    def stats(self) -> LMStats | None: ...


@runtime_checkable
class ReindexesRows(Protocol):
    """A model whose cache rows (one per prefix of the last ``logits`` call) can be re-ordered."""

    def reindex_rows(self, rows: Sequence[int]) -> None:
        """Make row ``j`` of the cache a copy of row ``rows[j]`` of the last ``logits`` batch (rows
        may repeat or be left out): the next batch's ``j``-th prefix continues that row."""
        ...


@runtime_checkable
class Normalises(Protocol):
    """A model that serves, with each logits row, the row's log-sum-exp (its softmax normaliser),
    computed once per row it remembers (``LogitsMemo``): a proposal at temperature 1 reads it
    instead of a pass over the whole vocabulary per row and step."""

    def logits_and_normalisers(self, prefixes: Sequence[Sequence[int]]) -> tuple[Sequence[Tensor], Tensor]:
        """(one [V] logits row per prefix, [B] float32 their log-sum-exp), as ``logits`` and
        ``torch.logsumexp``. The rows may be the model's own tensors: the caller only reads them."""
        ...


def lm_stats(lm: object) -> LMStats | None:
    """The counters of ``lm`` (through any wrappers), or ``None`` when it keeps none."""
    return lm.stats if isinstance(lm, Metered) else None


class LMProxy:
    """Base of language-model wrappers: forwards ``logits``, ``tree_logits``, ``commit``,
    ``reindex_rows`` and ``stats`` to ``lm``, and meters what it passed on (``spent``).

    ``commit`` and ``reindex_rows`` are always present: on a model without the capability they do
    nothing, which is what such a model needs (it keeps no tree to cut, no rows to copy)."""

    def __init__(self, lm: LanguageModel) -> None:
        self.lm = lm
        self.vocab_size = lm.vocab_size
        self.rows_forwarded = 0  # prefixes (or tree rows) sent to ``lm`` through this proxy
        stats = lm_stats(lm)
        self._tokens0 = stats.tokens_forwarded if stats is not None else None

    @property
    def stats(self) -> LMStats | None:
        return lm_stats(self.lm)

    def spent(self) -> int:
        """Forward tokens since this proxy was made: the model's ``stats.tokens_forwarded`` delta
        when it is metered, else the prefixes (and tree rows) sent through this proxy."""
        stats = self.stats
        if stats is not None and self._tokens0 is not None:
            return stats.tokens_forwarded - self._tokens0
        return self.rows_forwarded

    def logits(self, prefixes: Sequence[Sequence[int]]) -> Tensor:
        self.rows_forwarded += len(prefixes)
        return self.lm.logits(prefixes)

    def tree_logits(self, prefix: Sequence[int], tree: TokenTree) -> Tensor:
        self.rows_forwarded += len(tree) + 1
        return self.lm.tree_logits(prefix, tree)

    def commit(self, path: Sequence[int]) -> None:
        if isinstance(self.lm, Committing):
            self.lm.commit(path)

    def reindex_rows(self, rows: Sequence[int]) -> None:
        if isinstance(self.lm, ReindexesRows):
            self.lm.reindex_rows(rows)
