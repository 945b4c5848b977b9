"""Adapters at the edges: a transformers ``LogitsProcessor`` and ``Constraint`` wrappers over
xgrammar and llguidance (optional dependencies, imported only when used).

``GrammarLogitsProcessor`` (transformers), ``XGrammarConstraint`` / ``compile_xgrammar`` and
``LLGuidanceConstraint`` / ``compile_llguidance`` are loaded on first attribute access, so
``import trellis.integrations`` costs nothing and never needs the optional packages.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "GrammarLogitsProcessor": "trellis.integrations.hf",
    "XGrammarConstraint": "trellis.integrations.xgrammar",
    "compile_xgrammar": "trellis.integrations.xgrammar",
    "LLGuidanceConstraint": "trellis.integrations.llguidance",
    "compile_llguidance": "trellis.integrations.llguidance",
}

__all__ = sorted(_LAZY)


def optional_package(package: str) -> Any:
    """Import an optional peer package for ``trellis.integrations.<package>``, or an ImportError
    that says how to install it."""
    try:
        return import_module(package)
    except ImportError as e:
        raise ImportError(f"trellis.integrations.{package} needs the optional package {package!r} "
                          f"(pip install {package}, or pip install 'trellis-decoding[dev]')") from e


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'trellis.integrations' has no attribute {name!r}")
    return getattr(import_module(mod), name)
