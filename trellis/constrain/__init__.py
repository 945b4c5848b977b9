"""Grammars -> token masks: exact, precomputed, cached.

``compile(grammar, vocab)`` turns a Lark grammar (shipped name, path or text), a ``Regex`` or a
``JsonSchema`` into a ``Constraint`` whose masks allow exactly the tokens that keep the output
completable.
"""

from trellis.constrain.base import (Constraint, State, Unconstrained, advance_many, fill_masks, forced_tokens,
                                    is_unconstrained, tree_masks)
from trellis.constrain.cfg import CFGConstraint, CompiledGrammar, compile_lark
from trellis.constrain.compile import compile, load_grammar_text, shipped_grammars
from trellis.constrain.errors import ConstraintError, ConstraintUsageError, GrammarError, SchemaError
from trellis.constrain.json_schema import IgnoredKeyword, JsonSchema
from trellis.constrain.regex import ByteDFA, Regex, RegexConstraint, regex_to_byte_dfa

__all__ = [
    "ByteDFA", "CFGConstraint", "CompiledGrammar", "Constraint", "ConstraintError", "ConstraintUsageError",
    "GrammarError", "IgnoredKeyword", "JsonSchema", "Regex", "RegexConstraint", "SchemaError", "State", "Unconstrained", "advance_many",
    "compile", "compile_lark", "fill_masks", "forced_tokens", "is_unconstrained", "load_grammar_text",
    "regex_to_byte_dfa", "shipped_grammars", "tree_masks",
]
