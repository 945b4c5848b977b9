"""Stage 2 of the pipeline: regular expressions -> byte automata.

In: a terminal's regex text (Python ``re`` syntax, as Lark hands it over) or a regex IR built by a
front end. Out: a trimmed, minimal ``ByteDFA`` over UTF-8 bytes (every live state can still reach
an accepting one), and the algebra on finished DFAs (difference, intersection, first-character
restriction, the literal left from a state).
Inside: ``regex_compile`` (Python's own regex parser -> byte NFA), ``dfa_minimise`` (subset
construction and minimisation, in C where ``_dfac.c`` is built), ``lookaround`` (lookarounds that
stay inside the match), ``regex`` (the entry points), ``regex_ir`` / ``fsm_product`` (the regex IR
the JSON Schema translation reasons with), ``charsets``, ``utf8``.
Imports only the floor modules (``errors``); no vocabulary, grammar or torch.
"""
