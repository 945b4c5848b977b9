"""``pattern`` anchors anywhere (issue 27): ``^$|^...$`` (which Python's parser reads as
``^(?:$|...$)``), ``(,|$)`` inside a repetition, ``^`` after a consumed character (a pattern that
matches nothing). These were refused ("anchors are supported only at the start/end"); now each
sub-pattern is a union of pieces that must start at 0 and/or end at the end (pattern.py).

Judged against Python's ``re.search`` (the same as ECMA-262 for these patterns: no newline in
the strings, so ``$`` means the end for both) on every short string over a small alphabet, and
schema by schema against the ``jsonschema`` validator through a compiled grammar.
"""

from __future__ import annotations

import itertools
import re

import pytest

from tests.constrain.test_json_schema_negation import judge
from trellis.constrain.frontends.pattern import pattern_matches

PATTERNS = ["^$|^a+$", "^(\\d+)?$|^$", "^\\d+-\\d+|^\\d+$", "^([^,]+(,|$)){3,}$", "^(\\/?((\\.{2})|([a-z]*))($|\\/))*$",
            "/^a$/", "(x|^)y", "a(^|b)", "(a$|b)c", "(a|$)*", "(^a|b)*c", "(^|,)a(,|$)", "^(ab|$){2,3}", "(a$)+",
            "(^)*a", "^mqtt:a$|^mqtt:b$", "(^a)?(b$)?", "a^", "$a", "(^a|$)+", "(^a|b$){0,3}", "x(^|$)*y", "(^$)",
            "(a|^b|c$)*d?", "(^a*|b$)*", "(^|a)(b|$)", "((^a)|a)*b"]
STRINGS = [""] + ["".join(t) for n in range(1, 5) for t in itertools.product("ab,/.1xy", repeat=n)]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_anchors_anywhere_match_as_re_search(pattern: str) -> None:
    rx = re.compile(pattern)
    wrong = [s for s in STRINGS if pattern_matches(pattern, s) != (rx.search(s) is not None)]
    assert not wrong, wrong[:10]


@pytest.mark.parametrize("schema,valid,invalid", [
    # maskbench (Github_*) patterns that were refused
    ({"type": "string", "pattern": "^$|^((25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}"
                                   "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(/[0-9][0-9])?$"},
     ["", "10.0.0.1", "192.168.1.0/24"], ["x", "10.0.0", "256.0.0.1", " 10.0.0.1"]),
    ({"type": "string", "pattern": "^([^,]+(,|$)){3,}$"}, ["a,b,c", "a,b,c,", "a,b,c,d"], ["a,b", "a,,b,c", ""]),
    ({"type": "string", "pattern": "^\\d+-\\d+|^\\d+$"}, ["1-2", "12", "1-2x"], ["x1", "1-", "1x"]),
    ({"type": "string", "pattern": "/^[0-9]{4}$/"}, [], ["/2024/", "2024", ""]),  # matches no string
    ({"type": ["string", "null"], "pattern": "/^[0-9]{4}$/"}, [None], ["2024"]),
])
def test_anchored_patterns_in_schemas(schema, valid, invalid) -> None:
    if not valid:  # a string-only schema whose pattern matches nothing has no instance at all
        schema = {"anyOf": [schema, {"type": "integer"}]}
        valid = [1]
    judge(schema, valid, invalid)
