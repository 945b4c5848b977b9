"""Stage 1 of the pipeline: what users write -> Lark grammar text.

In: a JSON Schema (``json_schema``: the schema's language as plain BNF in Lark syntax, refusals
located by JSON pointer), a llama.cpp GBNF or xgrammar EBNF grammar (``gbnf`` with its reader and
fusion stages, ``xgrammar_regex`` / ``xgrammar_tags`` for xgrammar's macros), ECMA-262 patterns,
string formats and numeric ranges (``pattern``, ``formats``, ``ranges``).
Out: Lark grammar text (and, for schemas, the keywords lenient mode ignored) for ``grammar/`` to
read. Lark grammars themselves need no front end: ``grammar/lark_reader`` reads them.
Imports ``automata/`` (character sets, the regex IR) and the floor modules; never the engines.
Errors: ``SchemaError`` with a JSON pointer, ``GrammarError`` with file:line:col.
"""
