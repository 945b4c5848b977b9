"""Stage 3 of the pipeline: Lark grammar text -> grammar IR.

In: Lark text (a user's grammar, or what a front end wrote). Out: ``GrammarIR``: a context-free
grammar over byte-level terminals, each terminal a ``ByteDFA`` (with follow guards for
lookarounds), plus the FOLLOW sets and bytes the engine needs.
Inside: ``lark_reader`` (a fast reader of the Lark syntax people usually write: literals, terminal
definitions, templates), ``plain_patterns`` (the terminal patterns both readers make, twins of
Lark's, so that neither imports Lark) and ``grammar_ir`` (``load_lark``: Lark's own loader where the
fast reader bails; ``load_bnf``: the plain BNF a JSON Schema translates to).
Imports ``automata/`` (terminal DFAs) and the floor modules; knows nothing of vocabularies.
Errors: ``GrammarError`` located at file:line:col (``errors.lark_error``).
"""
