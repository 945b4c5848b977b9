"""Search strategies over token trees; each is a frozen dataclass implementing ``Strategy``.

Every built-in strategy is also a ``TreeSearch``: ``search(...) -> SearchResult`` returns the
hypotheses with their ranking scores and the explored tree (``networkx.DiGraph``; see ``tree``;
for ``Greedy``/``Sample`` the one path they took).
"""

from trellis.search.base import StepwiseStrategy, Strategy
from trellis.search.beam import Beam, DiverseBeam
from trellis.search.best_of_n import BestOfN, ngram_f1
from trellis.search.entropy import EntropyGate
from trellis.search.greedy import Greedy
from trellis.search.lookahead import Lookahead, must_include
from trellis.search.mcts import MCTS
from trellis.search.names import STRATEGIES, strategy_from_name
from trellis.search.sample import Sample
from trellis.search.tree import SearchResult, TreeRecorder, TreeSearch, path_tree

__all__ = [
    "MCTS", "STRATEGIES", "Beam", "BestOfN", "DiverseBeam", "EntropyGate", "Greedy", "Lookahead", "Sample",
    "SearchResult", "StepwiseStrategy", "Strategy", "TreeRecorder", "TreeSearch", "must_include", "ngram_f1", "path_tree",
    "strategy_from_name",
]
