"""trellis: constrained and search-based decoding for language models.

    >>> from trellis import generate
    >>> generate(None, "The capital of France is", max_new_tokens=8).text   # embedded Gemma 3 270M
"""

from __future__ import annotations

from typing import Any

import torch

__version__ = "0.1.0"

from trellis.constrain.base import Constraint, Unconstrained
from trellis.decoder import Decoder, Hypothesis
from trellis.errors import TrellisError, UsageError
from trellis.generate import GenerationResult, GenerationStream, generate
from trellis.hf_lm import HFLanguageModel
from trellis.lm import LanguageModel
from trellis.search import Greedy, Sample, Strategy
from trellis.tokens import TokenTree, Vocabulary


def load(model: Any = None, *, tokenizer: Any = None, dtype: torch.dtype | None = torch.float32,
         device: str | torch.device | None = None, attn_implementation: str | None = "sdpa") -> Any:
    """``trellis.models.load`` (imported lazily so ``import trellis`` stays light; see it for the
    arguments and the returned ``ModelHandle``)."""
    from trellis.models import load as load_model

    return load_model(model, tokenizer=tokenizer, dtype=dtype, device=device, attn_implementation=attn_implementation)


__all__ = [
    "Constraint", "Decoder", "GenerationResult", "GenerationStream", "Greedy", "HFLanguageModel",
    "Hypothesis", "LanguageModel", "Sample", "Strategy", "TokenTree", "TrellisError", "Unconstrained", "UsageError",
    "Vocabulary",
    "__version__", "generate", "load",
]
