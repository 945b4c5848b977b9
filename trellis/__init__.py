"""trellis: constrained and search-based decoding for language models.

    >>> from trellis import generate
    >>> generate(None, "The capital of France is", max_new_tokens=8).text   # embedded Gemma 3 270M

The names below are imported on first use (PEP 562), so ``import trellis`` and the command line's
argument parsing do not import torch (whose import took 20-120 s on a loaded machine: a usage error
should cost milliseconds).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> the module that defines it
_LAZY = {
    "Constraint": "trellis.constrain.base", "Unconstrained": "trellis.constrain.base",
    "Decoder": "trellis.decoder", "Hypothesis": "trellis.decoder",
    "TrellisError": "trellis.errors", "UsageError": "trellis.errors",
    "GenerationResult": "trellis.generate", "GenerationStream": "trellis.generate", "generate": "trellis.generate",
    "HFLanguageModel": "trellis.hf_lm", "LanguageModel": "trellis.lm",
    "Greedy": "trellis.search", "Sample": "trellis.search", "Strategy": "trellis.search",
    "TokenTree": "trellis.tokens", "Vocabulary": "trellis.tokens",
}

if TYPE_CHECKING:
    from trellis.constrain.base import Constraint, Unconstrained
    from trellis.decoder import Decoder, Hypothesis
    from trellis.errors import TrellisError, UsageError
    from trellis.generate import GenerationResult, GenerationStream, generate
    from trellis.hf_lm import HFLanguageModel
    from trellis.lm import LanguageModel
    from trellis.search import Greedy, Sample, Strategy
    from trellis.tokens import TokenTree, Vocabulary


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # the next access is a plain module attribute
        return value
    raise AttributeError(f"module 'trellis' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


class _Package(types.ModuleType):
    """The package's module type: importing a submodule binds it as an attribute of its package, so
    ``from trellis.generate import X`` (trellis' own ``codegen`` does it) before any use of
    ``trellis.generate`` left the *module* where ``from trellis import generate`` expects the
    function (``'module' object is not callable``). A lazily exported name keeps its object."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and name in _LAZY and value.__name__ == f"{__name__}.{name}":
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


_FLOAT32: Any = "float32"  # load()'s default dtype, named without importing torch


def load(model: Any = None, *, tokenizer: Any = None, dtype: Any = _FLOAT32, device: Any = None,
         attn_implementation: str | None = "sdpa") -> Any:
    """``trellis.models.load`` (imported lazily so ``import trellis`` stays light; see it for the
    arguments and the returned ``ModelHandle``). ``dtype`` defaults to ``torch.float32``."""
    from trellis.models import load as load_model

    if dtype is _FLOAT32:
        import torch

        dtype = torch.float32
    return load_model(model, tokenizer=tokenizer, dtype=dtype, device=device, attn_implementation=attn_implementation)


__all__ = [
    "Constraint", "Decoder", "GenerationResult", "GenerationStream", "Greedy", "HFLanguageModel",
    "Hypothesis", "LanguageModel", "Sample", "Strategy", "TokenTree", "TrellisError", "Unconstrained", "UsageError",
    "Vocabulary",
    "__version__", "generate", "load",
]
