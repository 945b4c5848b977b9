"""The two grammar forms of a JSON Schema (``JsonSchema.to_lark(engine=...)``): the plain form
(one alternative per object/array automaton edge, what Lark's LALR parser takes) and the Earley
form (edges into a state with one label share the union of their sources,
``LarkEmitter._edge_rules``) must have the same language. Checked on the Earley engine, which
reads both: every instance of the JSON-Schema-Test-Suite files that exercise objects and arrays
and of ``test_json_schema.CASES`` is accepted by both or by neither, and the masks along each
instance and along random walks are equal token for token. The plain form's own exactness is the
suite run in ``test_json_schema.py``."""

from __future__ import annotations

import json
import os
import random
import re
from typing import Any

import numpy as np
import pytest

from tests.constrain.test_json_schema import CASES, SUITE, VOCAB, Raw, text_of, tokens_of
from trellis.constrain import JsonSchema, SchemaError, compile
from trellis.constrain.compile import SchemaGrammar
from trellis.constrain.frontends.json_schema import order_keys

SUITE_FILES = ("properties.json", "additionalProperties.json", "required.json", "patternProperties.json",
               "minProperties.json", "maxProperties.json", "dependentRequired.json", "dependentSchemas.json",
               "unevaluatedProperties.json", "propertyNames.json", "items.json", "prefixItems.json",
               "minItems.json", "maxItems.json", "contains.json", "anyOf.json", "oneOf.json", "allOf.json",
               "not.json", "if-then-else.json", "ref.json", "defs.json", "enum.json", "const.json",
               "unevaluatedItems.json", "dynamicRef.json", "refRemote.json")


def _pair(schema: Any, **kw: Any) -> tuple[Any, Any] | None:
    kw.setdefault("closed_objects", False)
    try:
        plain = JsonSchema(schema, **kw).to_lark()
    except SchemaError:
        return None
    shared = JsonSchema(schema, **kw)
    return (compile(SchemaGrammar(plain), VOCAB, cache=False), compile(shared, VOCAB, cache=False))


def _walk_equal(a: Any, b: Any, ids: list[int]) -> bool:
    """Masks of ``a`` and ``b`` equal at every prefix of ``ids`` (up to where both reject);
    whether ``a`` accepts ``ids``."""
    sa, sb = a.start(), b.start()
    for t in ids + [None]:
        assert (a.mask_array(sa) == b.mask_array(sb)).all()
        assert a.is_accepting(sa) == b.is_accepting(sb)
        if t is None:
            return a.is_accepting(sa)
        sa, sb = a.advance(sa, t), b.advance(sb, t)
        assert (sa is None) == (sb is None)
        if sa is None:
            return False
    raise AssertionError("unreachable")


def _random_walk(c: Any, rng: random.Random, steps: int) -> list[int]:
    s, out = c.start(), []
    for _ in range(steps):
        allowed = np.flatnonzero(np.unpackbits(c.mask_array(s).view(np.uint8), bitorder="little"))
        allowed = [int(t) for t in allowed if t < len(VOCAB.tokens) and t not in VOCAB.eos]
        if not allowed:
            break
        t = rng.choice(allowed)
        out.append(t)
        s = c.advance(s, t)
    return out


def test_earley_form_is_linear_in_optional_properties() -> None:
    n = 40
    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(n)}}
    alts = {}
    for engine in ("lalr", "earley"):
        text = JsonSchema(schema).to_lark(engine)
        alts[engine] = sum(len(line.split(" | ")) for line in text.splitlines() if re.match(r"o\d+_", line))
    assert alts["lalr"] >= n * n / 2
    assert alts["earley"] <= 4 * n, alts


@pytest.mark.parametrize("name,schema,valid,invalid", CASES[::3], ids=[c[0] for c in CASES[::3]])
def test_same_language_on_keyword_cases(name: str, schema: Any, valid: list, invalid: list) -> None:
    pair = _pair(schema)
    assert pair is not None
    rng = random.Random(name)
    for x in valid:
        x = x if isinstance(x, Raw) else order_keys(schema, x)
        assert _walk_equal(*pair, tokens_of(text_of(x), True))
    for x in invalid:
        assert not _walk_equal(*pair, tokens_of(text_of(x), False))
    for _ in range(3):
        _walk_equal(*pair, _random_walk(pair[1], rng, 40))


@pytest.mark.slow
def test_same_language_on_the_suite() -> None:
    if not os.path.isdir(SUITE):
        pytest.skip("JSON-Schema-Test-Suite not available")
    rng = random.Random(0)
    schemas = instances = 0
    for fn in SUITE_FILES:
        for case in json.load(open(os.path.join(SUITE, fn), encoding="utf-8")):
            pair = _pair(case["schema"])
            if pair is None:
                continue
            schemas += 1
            for t in case["tests"]:
                inst = order_keys(case["schema"], t["data"])
                _walk_equal(*pair, tokens_of(text_of(inst), rng.random() < 0.5))
                instances += 1
            _walk_equal(*pair, _random_walk(pair[1], rng, 30))
    assert schemas >= 150 and instances >= 450, (schemas, instances)
