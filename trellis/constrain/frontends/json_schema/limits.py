"""Bounds on what one JSON Schema may expand into (items, string lengths, automaton states,
rules, object alternatives, numeric bound exponents), the default whitespace run and the string
chunk size. Beyond a bound the schema is refused (``SchemaError``), never silently loosened."""

MAX_WHITESPACE = 64
# Bounds on what one schema may expand into; beyond them the schema is refused (SchemaError),
# never silently loosened. The regex bounds (MAX_REPEAT, MAX_REGEX_CHARS, MAX_REGEX) are in regex_ir.py.
MAX_ITEMS = 1024  # largest minItems/maxItems (one automaton state per count; Lark's LALR
# construction is superlinear: 2048 items took 34 s)
MAX_STRING = 8192  # longest string length bound (chunks of CHUNK characters; Lark's LALR
# construction is superlinear: 40 000 took 110 s)
MAX_PATTERN_STRING = 16_384  # longest length bound on a pattern (chunk rules over the pattern's
# states, json_schema/pattern_chunks.py: 1,024 chunks; at 100,000 the LALR table build recursed too deep)
MAX_AUTOMATON = 4096  # states of one object/array automaton
MAX_RULES = 40_000
MAX_DEP_BRANCHES = 64  # object alternatives that dependencies/dependentRequired/dependentSchemas may create
MAX_BOUND_EXPONENT = 100  # numeric bounds up to 1e100 in magnitude (and down to 1e-100): compile < 1 s
CHUNK = 16  # length-bounded strings longer than this are split into CHUNK-character lexemes
# The Earley engine's chunk for those strings (``ScalarRules._chunk_rules``): a string of up to
# EARLEY_CHUNK characters is one terminal, longer ones EARLEY_CHUNK-character chunks. Each chunk
# boundary cuts the tokens that cross it: a state with r < 12 characters left in a 16-character
# chunk walked the whole vocabulary and split ~100-230k tokens there (4-17 ms a first visit,
# sp_120's maxLength strings), while a state of a long chunk with 48 or more characters left is
# walked over a slice's complement only, and one with 12-47 left over the complement and the
# members longer than that (``slices.cover_for``). LALR keeps CHUNK: it is what its tests and
# greedy-lexing argument were written for, and its table build grows with the terminals.
EARLEY_CHUNK = 128
