"""The command line's view of a running search: a progress bar over LM calls (or SMC steps) and
the explored tree kept for ``--tree-out``. Imported only when a search runs, so that parsing the
command line needs no torch."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from trellis.lm_proxy import LMProxy
from trellis.search.tree import TreeRecorder


class _ProgressLM(LMProxy):
    """A LanguageModel proxy that ticks a tqdm bar once per LM call (bar appears after 1 s); as an
    ``LMProxy`` it forwards the model's declared capabilities (commit, row re-indexing, stats)."""

    def __init__(self, lm, bar) -> None:
        super().__init__(lm)
        self.bar = bar

    def logits(self, prefixes):
        self.bar.update(1)
        return super().logits(prefixes)

    def tree_logits(self, prefix, tree):
        self.bar.update(1)
        return super().tree_logits(prefix, tree)


class RolloutTicks(TreeRecorder):
    """MCTS's tree recorder, ticking the bar once per iteration: every iteration backs its reward up
    a path that starts at the root, so the root's visits count the iterations."""

    def __init__(self, decoder: Any, root: Any, bar: Any) -> None:
        super().__init__(decoder, root)
        self._root, self._bar = root, bar

    def visit(self, hyp: Any, *, value: float | None = None) -> None:
        if hyp is self._root:
            self._bar.update(1)
        super().visit(hyp, value=value)


@dataclass(frozen=True)
class ObservedSearch:
    """Runs a strategy with a progress bar and keeps its explored tree (in ``holder``) for --tree-out."""

    strategy: Any
    holder: dict

    def __call__(self, decoder, root, *, max_new_tokens: int):
        from dataclasses import replace

        from tqdm import tqdm

        from trellis.search.tree import TreeSearch, path_tree

        from trellis.search.mcts import MCTS

        self.holder["vocab"] = decoder.vocab
        if isinstance(self.strategy, MCTS):
            # MCTS: a bar over its iterations, with their number as the total (it may stop sooner, at
            # --budget-tokens or --max-seconds); an LM-call count has no total to read progress from
            with tqdm(desc="MCTS", unit=" rollouts", total=self.strategy.max_rollouts, delay=1.0, file=sys.stderr,
                      leave=False) as bar:
                res = self.strategy.search(decoder, root, max_new_tokens=max_new_tokens,
                                           recorder=RolloutTicks(decoder, root, bar))
            self.holder["tree"] = res.tree
            return list(res.hypotheses)
        with tqdm(desc=type(self.strategy).__name__, unit=" LM calls", delay=1.0, file=sys.stderr,
                  leave=False) as bar:
            dec = replace(decoder, lm=_ProgressLM(decoder.lm, bar))
            if isinstance(self.strategy, TreeSearch):
                res = self.strategy.search(dec, root, max_new_tokens=max_new_tokens)
                hyps, tree = list(res.hypotheses), res.tree
            else:
                hyps = self.strategy(dec, root, max_new_tokens=max_new_tokens)
                tree = path_tree(decoder, root, hyps)
        self.holder["tree"] = tree
        return hyps


@dataclass(frozen=True)
class ObservedSMC:
    """SMC with a progress bar over its steps (one batched forward each, at most --max-new-tokens)
    and, with --tree-out, its explored tree; ``generate`` still gets its weighted result."""

    strategy: Any
    holder: dict
    record: bool

    @property
    def particles(self) -> int:
        return self.strategy.particles

    def weighted(self, decoder, root, *, max_new_tokens: int, recorder=None):
        from dataclasses import replace

        from tqdm import tqdm

        from trellis.search.tree import TreeRecorder

        rec = TreeRecorder(decoder, root) if self.record else recorder
        with tqdm(desc=f"SMC ({self.strategy.particles} particles)", unit=" steps", total=max_new_tokens, delay=1.0,
                  file=sys.stderr, leave=False) as bar:
            res = self.strategy.weighted(replace(decoder, lm=_ProgressLM(decoder.lm, bar)), root,
                                         max_new_tokens=max_new_tokens, recorder=rec)
        if rec is not None and self.record:
            self.holder["tree"] = rec.graph
        return res

    def __call__(self, decoder, root, *, max_new_tokens: int):
        return self.weighted(decoder, root, max_new_tokens=max_new_tokens).hypotheses()
