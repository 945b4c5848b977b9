"""Stage 5, the opt-in engine (``compile(..., engine="lalr")``): Lark's LALR(1) language.

In: Lark grammar text (compiled by Lark itself with ``parser="lalr"``, ``strict=True``) and a
``Vocabulary``. Out: ``CFGConstraint``, masks exact for the language Lark's LALR parser with its
contextual lexer accepts (greedy lexing: it can be smaller than the CFG's, e.g. a keyword is never
an identifier), which is what a user who parses the output with ``Lark(parser="lalr")`` needs.
Inside: ``lalr_tables`` (Lark's table -> ``GrammarTables``), ``lexer`` (one byte DFA per
contextual terminal set), ``lalr_runtime`` (the stack, greedy lexing, viability), ``lalr_walks``
(per-lexer-state vocabulary tables, XGrammar's split), ``cfg`` (the constraint).
Imports ``vocab/walks`` (the token matrix), ``automata/`` and the floor modules; refuses grammars
with LALR conflicts or colliding terminals.
"""
