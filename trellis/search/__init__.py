"""Search strategies over token trees; each is a frozen dataclass implementing ``Strategy``.

Every built-in strategy is also a ``TreeSearch``: ``search(...) -> SearchResult`` returns the
hypotheses with their ranking scores and the explored tree (``networkx.DiGraph``; see ``tree``;
for ``Greedy``/``Sample`` the one path they took).
"""

from trellis.search.base import StepwiseStrategy, Strategy, WeightedStrategy
from trellis.search.beam import Beam, DiverseBeam
from trellis.search.best_of_n import BestOfN, ngram_f1
from trellis.search.entropy import EntropyGate
from trellis.search.greedy import Greedy
from trellis.search.lookahead import Lookahead, must_include
from trellis.search.mcts import MCTS
from trellis.search.names import STRATEGIES, strategy_from_name
from trellis.search.exact import ExactPosterior, exact_posterior, total_variation
from trellis.search.potentials import Check, JsonSchemaValid, Potential, PythonSyntax, Score
from trellis.search.sample import Sample
from trellis.search.smc import SMC, Particle, SMCResult, pooled_posterior
from trellis.search.tree import SearchResult, TreeRecorder, TreeSearch, path_tree

__all__ = [
    "MCTS", "SMC", "STRATEGIES", "Beam", "BestOfN", "Check", "DiverseBeam", "EntropyGate", "ExactPosterior", "Greedy",
    "JsonSchemaValid", "Lookahead", "Particle", "Potential", "PythonSyntax", "SMCResult", "Sample", "Score",
    "SearchResult", "StepwiseStrategy", "Strategy", "TreeRecorder", "TreeSearch", "WeightedStrategy",
    "exact_posterior", "must_include", "ngram_f1", "path_tree", "pooled_posterior", "strategy_from_name",
    "total_variation",
]
