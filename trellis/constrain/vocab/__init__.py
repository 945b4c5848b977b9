"""Stage 4 of the pipeline: a vocabulary walked through byte automata.

In: a ``Vocabulary`` and a DFA state (with the bytes that may follow its terminal). Out: which
tokens stay inside the terminal, and where the others cross its end (``Walk``: token, offset, the
rest of the token), shared across grammars and runs by the DFA's shape (``walk_cache``, on disk).
Inside: ``walks`` (the token matrix and numpy walks), ``rest_walk`` (sets of token suffixes, in C
where ``_walkc.c`` is built), ``literal_walk`` / ``trie_walk`` / ``slices`` / ``cut_walk`` (the
cheaper exact walks for literals, whole-vocabulary states, slices and cut terminals),
``vocab_walk`` (picks the cheapest), ``dfa_shapes`` (what a walk depends on), ``tables``
(the per-vocabulary tables, prepared by ``trellis.load`` and kept on disk).
Imports ``automata/`` and the floor modules; no grammar, no parser.
"""
