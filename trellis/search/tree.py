"""The explored search tree: a recorder strategies write into, and the ``SearchResult`` they return.

Strategies stay frozen dataclasses: the mutable record of one search lives in a ``TreeRecorder``
made per call. ``strategy.search(...)`` returns the hypotheses *and* the tree as a
``networkx.DiGraph``; ``strategy(...)`` runs the same search with recording switched off.

Nodes are integers (the root is ``0``); a node stands for the token sequence that leads to it from
the root. Node attributes (``None`` where a strategy has nothing to say):

- ``token`` (int, ``None`` at the root), ``text`` (the token's text), ``depth``
- ``logprob``: the token's masked, renormalised log-prob under its parent (raw LM log-prob for a
  grammar-pruned node); ``score``: the hypothesis' summed log-prob
- ``visits``, ``value``: how often a search visited the node and the value it backed up (MCTS, samples)
- ``pruned``: True for a token the LM ranked high but the grammar forbids (never expanded)
- ``finished``, ``kept`` (survived selection), ``returned`` (rank in the result, 0 = best), plus
  strategy-specific ones (``prior``, ``rollout``, ``entropy``, ``paused``, ``heuristic``)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

import torch

from trellis.decoder import Decoder, Hypothesis
from trellis.sampling import log_softmax
from trellis.search.base import StepwiseStrategy

if TYPE_CHECKING:  # networkx is imported when a tree is first made (``import trellis`` stays light)
    import networkx as nx


@dataclass(frozen=True)
class SearchResult:
    """Hypotheses best first, the strategy's ranking score of each (same order) and the explored tree."""

    hypotheses: tuple[Hypothesis, ...]
    scores: tuple[float, ...]
    tree: nx.DiGraph


@runtime_checkable
class TreeSearch(Protocol):
    """A strategy that returns its explored tree with its hypotheses (every built-in strategy)."""

    def search(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int,
               recorder: "TreeRecorder | None" = None) -> SearchResult: ...


class Searching:
    """Mixin for strategies with ``search(...) -> SearchResult``: ``__call__`` runs the same search
    with tree recording off and returns its hypotheses, best first."""

    def search(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int,
               recorder: "TreeRecorder | None" = None) -> SearchResult:
        raise NotImplementedError

    def __call__(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int) -> list[Hypothesis]:
        return list(self.search(decoder, root, max_new_tokens=max_new_tokens,
                                recorder=TreeRecorder.off(decoder, root)).hypotheses)


class TreeRecorder:
    """Builds the explored tree of one search; every method is a no-op when ``enabled`` is False.

    ``pruned_top_k`` > 0 also records, for every expanded node, those of the LM's ``pruned_top_k``
    most likely raw tokens that the grammar forbids (it re-reads the LM's logits for the same
    prefixes, which ``HFLanguageModel`` answers from its cache without a forward).
    """

    def __init__(self, decoder: Decoder, root: Hypothesis, *, enabled: bool = True, pruned_top_k: int = 0) -> None:
        self.decoder, self.root, self.enabled, self.pruned_top_k = decoder, root, enabled, pruned_top_k
        self._base = len(root.tokens)
        self._ids: dict[tuple[int, ...], int] = {}
        self._graph: "nx.DiGraph | None" = None
        if enabled:
            self._ids[()] = 0
            self.graph.add_node(0, token=None, text="", depth=0, logprob=None, score=root.logprob,
                                visits=0, value=None, pruned=False, finished=root.finished)

    @property
    def graph(self) -> "nx.DiGraph":
        """The tree so far (an empty graph when recording is off), made when first asked for: a
        search that returns no tree (``SMC.weighted``) never imports networkx, which cost the first
        SMC run of a process 0.14 s (bench_smc.py peer --task yesno, profiled 2026-11-29)."""
        if self._graph is None:
            import networkx as nx

            self._graph = nx.DiGraph()
        return self._graph

    @classmethod
    def off(cls, decoder: Decoder, root: Hypothesis) -> "TreeRecorder":
        return cls(decoder, root, enabled=False)

    # ------------------------------------------------------------------ writing
    def _key(self, hyp: Hypothesis) -> tuple[int, ...]:
        return hyp.tokens[self._base:]

    def _text(self, token: int) -> str:
        vocab = self.decoder.vocab
        if vocab is None or token >= len(vocab.tokens):
            return str(token)
        return vocab.tokens[token].decode("utf-8", errors="replace")

    def _ensure(self, key: tuple[int, ...], logprob: float | None = None) -> int:
        node = self._ids.get(key)
        if node is not None:
            return node
        parent = self._ensure(key[:-1])
        node = self._ids[key] = len(self._ids)
        self.graph.add_node(node, token=key[-1], text=self._text(key[-1]), depth=len(key), logprob=logprob,
                            score=None, visits=0, value=None, pruned=False, finished=False)
        self.graph.add_edge(parent, node)
        return node

    def add(self, child: Hypothesis, *, logprob: float | None = None, **attrs: Any) -> None:
        """Record ``child`` (and any missing ancestors); ``logprob`` is its last token's log-prob."""
        if not self.enabled:
            return
        node = self._ensure(self._key(child), logprob)
        data = self.graph.nodes[node]
        if logprob is not None:
            data["logprob"] = logprob
        data["score"], data["finished"] = child.logprob, child.finished
        data.update(attrs)

    def mark(self, hyp: Hypothesis, **attrs: Any) -> None:
        """Set attributes on ``hyp``'s node (created, with its ancestors, if missing)."""
        if not self.enabled:
            return
        node = self._ensure(self._key(hyp))
        if hyp.tokens[self._base:] and self.graph.nodes[node]["score"] is None:
            self.graph.nodes[node]["score"] = hyp.logprob
            self.graph.nodes[node]["finished"] = hyp.finished
        self.graph.nodes[node].update(attrs)

    def visit(self, hyp: Hypothesis, *, value: float | None = None) -> None:
        """Count one visit of ``hyp``'s node and store its current value."""
        if not self.enabled:
            return
        node = self._ensure(self._key(hyp))
        data = self.graph.nodes[node]
        data["visits"] += 1
        if value is not None:
            data["value"] = value

    def pruned(self, hyps: Sequence[Hypothesis]) -> None:
        """Record grammar-pruned children of ``hyps`` (see ``pruned_top_k``)."""
        if not self.enabled or self.pruned_top_k <= 0 or not self.decoder.constrained or not hyps:
            return
        dec = self.decoder
        raw = log_softmax(dec.lm.logits([h.tokens for h in hyps]))  # [B, V] unmasked log-probs
        k = min(self.pruned_top_k, raw.shape[-1])
        top = torch.topk(raw, k, dim=-1)
        for h, vals, toks in zip(hyps, top.values.tolist(), top.indices.tolist()):
            for lp, t in zip(vals, toks):
                allowed = dec.constraint.is_accepting(h.state) if t in dec.eos else (
                    dec.constraint.advance(h.state, t) is not None)
                if not allowed:
                    node = self._ensure(self._key(h) + (t,), lp)
                    self.graph.nodes[node]["pruned"] = True

    def result(self, hyps: Sequence[Hypothesis], scores: Sequence[float]) -> SearchResult:
        """Mark the returned hypotheses (``returned`` = rank) and package the result."""
        for rank, h in enumerate(hyps):
            self.mark(h, returned=rank)
        return SearchResult(tuple(hyps), tuple(float(s) for s in scores), self.graph)


def path_tree(decoder: Decoder, root: Hypothesis, hyps: Sequence[Hypothesis]) -> nx.DiGraph:
    """The tree of the paths to ``hyps``: the tree of a strategy that is not a ``TreeSearch``."""
    rec = TreeRecorder(decoder, root)
    return rec.result(list(hyps), [h.logprob for h in hyps]).tree


def stepwise_search(strategy: StepwiseStrategy, decoder: Decoder, root: Hypothesis, max_new_tokens: int,
                    recorder: TreeRecorder | None = None) -> SearchResult:
    """``search`` of a one-path strategy (``Greedy``, ``Sample``): the path its ``steps`` took, each
    node with its token's log-prob; the last hypothesis is the result."""
    rec = recorder if recorder is not None else TreeRecorder(decoder, root)
    last = root
    for hyp in strategy.steps(decoder, root, max_new_tokens=max_new_tokens):
        rec.add(hyp, logprob=hyp.logprob - last.logprob)
        last = hyp
    return rec.result([last], [last.logprob])
