"""Speculative decoding: drafters propose token trees, the target verifies them in one forward."""

from trellis.speculate.base import Draft, Drafter, LearningDrafter, NamedDrafter, SpecStats, Speculative, drafter_name
from trellis.speculate.node_budget import DraftBudget
from trellis.speculate.draft_exit import AdaptiveDraftExit
from trellis.speculate.drafters import Composite, GrammarForced, LayerSkip, ModelDrafter, PromptLookup, TokenRecycling
from trellis.speculate.verify import ChainRejectionSampler, GreedyVerifier, TreeRejectionSampler

__all__ = [
    "AdaptiveDraftExit", "ChainRejectionSampler", "Composite", "Draft", "DraftBudget", "Drafter", "GrammarForced",
    "GreedyVerifier", "LayerSkip", "LearningDrafter", "ModelDrafter", "NamedDrafter", "PromptLookup", "SpecStats", "Speculative", "TokenRecycling", "TreeRejectionSampler",
    "drafter_name",
]
