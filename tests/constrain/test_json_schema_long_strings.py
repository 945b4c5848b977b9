"""``maxLength`` above MAX_STRING (8192) compiled exactly (issue 27): 49 of maskbench's real-world
schemas were refused for ``maxLength: 32767`` or ``65535`` alone. The length is counted in levels
(json_schema/scalars.py ``ScalarRules._level_rules``): units of 16, 256, 4096, ... characters, so the rules
grow with the number of levels, not with the bound. Judged against the ``jsonschema`` validator
at every boundary of the units, in compact and flexible whitespace, and checked to be LALR(1).
"""

from __future__ import annotations

import lark
import pytest

from tests.constrain.test_json_schema_negation import judge
from trellis.constrain import JsonSchema, SchemaError

LENGTHS = [0, 1, 15, 16, 17, 255, 256, 257, 4095, 4096, 4097, 8192, 8193, 32766, 32767, 32768, 65535, 65536, 65537]


def _strings(lo: int, hi: int) -> tuple[list, list]:
    # "é" is two UTF-8 bytes: lengths count characters, and chunks are characters, not bytes
    texts = [("aé" * n)[:n] for n in LENGTHS + [lo - 1, lo, hi, hi + 1] if n >= 0]
    return [t for t in texts if lo <= len(t) <= hi], [t for t in texts if not lo <= len(t) <= hi]


@pytest.mark.parametrize("lo,hi", [(0, 32767), (1, 65535), (5000, 40000), (0, 8193)])
def test_long_max_length_is_exact(lo: int, hi: int) -> None:
    valid, invalid = _strings(lo, hi)
    judge({"type": "object", "properties": {"s": {"type": "string", "minLength": lo, "maxLength": hi}},
           "required": ["s"]}, [{"s": t} for t in valid], [{"s": t} for t in invalid])


def test_long_max_length_grammar_is_small_and_lalr() -> None:
    text = JsonSchema({"type": "string", "maxLength": 10 ** 9}).to_lark()
    assert len(text.splitlines()) < 400
    parser = lark.Lark(text, parser="lalr", lexer="contextual", strict=True)
    parser.parse('"' + "x" * 70000 + '"')


def test_long_bounds_that_stay_refused_by_name() -> None:
    """A bound with a pattern is counted in chunk rules over the pattern's states up to 16,384
    characters (test_json_schema_pattern_lengths.py), and a long minLength is counted linearly:
    past those both are refused where they are written."""
    for schema, pointer in [({"properties": {"s": {"type": "string", "pattern": "^a", "maxLength": 32767}}},
                             "/properties/s/maxLength"),
                            ({"type": "string", "minLength": 10000}, "/minLength")]:
        with pytest.raises(SchemaError) as e:
            JsonSchema(schema, closed_objects=False).to_lark()
        assert e.value.pointer == pointer, str(e.value)
