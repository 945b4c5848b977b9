"""Grammars -> token masks: exact, lazily built, cached.

``compile(grammar, vocab)`` turns a Lark grammar (shipped name, path or text), a GBNF grammar
(``Gbnf``, or a ``.gbnf`` file), a ``Regex`` or a ``JsonSchema`` into a ``Constraint`` whose masks
allow exactly the tokens that keep the output completable. Grammars and schemas compile onto the
scannerless Earley engine (``EarleyConstraint``: any context-free grammar, tables built lazily);
``engine="lalr"`` selects the LALR + contextual-lexer engine (``CFGConstraint``).
"""

from trellis.constrain.base import (Constraint, State, Unconstrained, advance_many, fill_masks, forced_tokens,
                                    is_unconstrained, tree_masks)
from trellis.constrain.lalr.cfg import CFGConstraint, GrammarTables, compile_lark
from trellis.constrain.compile import compile, load_grammar_text, prepare_vocabulary, shipped_grammars
from trellis.constrain.frontends.gbnf import Gbnf
from trellis.constrain.earley.scannerless import EarleyConstraint
from trellis.constrain.errors import ConstraintError, ConstraintUsageError, GrammarBudgetError, GrammarError, SchemaError
from trellis.constrain.frontends.json_schema import IgnoredKeyword, JsonSchema
from trellis.constrain.automata.regex import ByteDFA, regex_to_byte_dfa
from trellis.constrain.regex_constraint import Regex, RegexConstraint

__all__ = [
    "ByteDFA", "CFGConstraint", "GrammarTables", "Constraint", "ConstraintError", "ConstraintUsageError",
    "EarleyConstraint", "Gbnf",
    "GrammarBudgetError", "GrammarError", "IgnoredKeyword", "JsonSchema", "Regex", "RegexConstraint", "SchemaError", "State", "Unconstrained", "advance_many",
    "compile", "compile_lark", "fill_masks", "forced_tokens", "is_unconstrained", "load_grammar_text",
    "prepare_vocabulary", "regex_to_byte_dfa", "shipped_grammars", "tree_masks",
]
