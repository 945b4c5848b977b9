"""trellis: constrained and search-based decoding for language models.

    >>> from trellis import generate
    >>> generate(None, "The capital of France is", max_new_tokens=8).text   # embedded Gemma 3 270M
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

from trellis.constrain.base import Constraint, Unconstrained
from trellis.decoder import Decoder, Hypothesis
from trellis.generate import GenerationResult, GenerationStream, generate
from trellis.lm import HFLanguageModel, LanguageModel
from trellis.search import Greedy, Sample, Strategy
from trellis.tokens import TokenTree, Vocabulary


def load(model: Any = None, **options: Any) -> Any:
    """``trellis.models.load`` (imported lazily so ``import trellis`` stays light)."""
    from trellis.models import load as _load

    return _load(model, **options)


__all__ = [
    "Constraint", "Decoder", "GenerationResult", "GenerationStream", "Greedy", "HFLanguageModel",
    "Hypothesis", "LanguageModel", "Sample", "Strategy", "TokenTree", "Unconstrained", "Vocabulary",
    "__version__", "generate", "load",
]
