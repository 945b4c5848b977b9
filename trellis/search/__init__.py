"""Search strategies over token trees; each is a frozen dataclass implementing ``Strategy``."""

from trellis.search.base import StepwiseStrategy, Strategy
from trellis.search.greedy import Greedy
from trellis.search.sample import Sample

__all__ = ["Greedy", "Sample", "Strategy", "StepwiseStrategy"]
