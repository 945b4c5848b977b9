"""Negation in JSON Schema compiled exactly (issue 27): ``if``/``then``/``else``, ``oneOf`` with
branches that may overlap, ``not`` of patterns and of object value conditions.

Each case is judged twice: the ``jsonschema`` validator of the schema's draft must agree with the
case's expectation (so the expectations are the spec's, not the compiler's), and the compiled
grammar must accept exactly the valid instances, in compact and in flexible whitespace. Before
these encodings every schema here was refused with a SchemaError.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from tests.constrain.test_json_schema import D7, accepts, make, text_of
from trellis.constrain import JsonSchema, SchemaError
from trellis.constrain.frontends.json_schema import order_keys


def judge(schema: Any, valid: list, invalid: list) -> None:
    validator = jsonschema.validators.validator_for(schema)(schema)
    for x in valid:
        assert validator.is_valid(x), ("the validator rejects a 'valid' case", x)
    for x in invalid:
        assert not validator.is_valid(x), ("the validator accepts an 'invalid' case", x)
    for ws in ("compact", "flexible"):
        c = make(schema, whitespace=ws)
        for x in valid:
            for flexible in (False, True) if ws == "flexible" else (False,):
                text = text_of(order_keys(schema, x), flexible)
                assert accepts(c, text), (ws, schema, text)
        for x in invalid:
            for flexible in (False, True) if ws == "flexible" else (False,):
                text = text_of(order_keys(schema, x), flexible)
                assert not accepts(c, text), (ws, schema, text)


KIND_A = {"properties": {"kind": {"const": "a"}}, "required": ["kind"]}

CASES: list[tuple[str, Any, list, list]] = [
    # the issue's example: a const-discriminated condition, (if and then) or (not if and else)
    ("if-const-discriminated", {"type": "object", "properties": {"kind": {"type": "string"}, "x": {}, "y": {}},
                                "if": KIND_A, "then": {"required": ["x"]}, "else": {"required": ["y"]}},
     [{"kind": "a", "x": 1}, {"kind": "b", "y": 1}, {"y": 2}, {"kind": "a", "x": 1, "y": 2}, {"kind": "", "y": 0}],
     [{"kind": "a"}, {"kind": "a", "y": 1}, {"kind": "b", "x": 1}, {}, {"x": 1}, "a"]),
    # without required in the condition an object lacking the key meets it (then applies), and a
    # non-object meets it too
    ("if-properties-only", {"if": {"properties": {"mode": {"enum": ["fast", "slow"]}}},
                            "then": {"properties": {"n": {"type": "integer"}}},
                            "else": {"properties": {"n": {"type": "string"}}}},
     [{"mode": "fast", "n": 1}, {"n": 2}, {"mode": "x", "n": "s"}, {"mode": 3, "n": "s"}, 5, "s", None, []],
     [{"mode": "fast", "n": "s"}, {"n": "s"}, {"mode": "x", "n": 1}, {"mode": None, "n": 1}]),
    # then/else read open: the keys they do not declare are not forbidden (closed_objects aside)
    ("if-then-only", {"type": "object", "properties": {"isMember": {"type": "boolean"}, "number": {"type": "string"}},
                      "required": ["isMember"], "if": {"properties": {"isMember": {"const": True}}},
                      "then": {"properties": {"number": {"minLength": 3, "maxLength": 3}}},
                      "else": {"properties": {"number": {"minLength": 5}}}},
     [{"isMember": True, "number": "abc"}, {"isMember": False, "number": "abcdef"}, {"isMember": True}],
     [{"isMember": True, "number": "abcdef"}, {"isMember": False, "number": "abc"}, {"number": "abc"}]),
    ("if-type-and-pattern", {"if": {"type": "string", "pattern": "^x"}, "then": {"maxLength": 3},
                             "else": {"type": "integer"}},
     ["x", "xyz", 5, -1], ["xyzw", "abc", 1.5, None, {}]),
    ("if-only-else", {"if": {"required": ["a"]}, "else": {"required": ["b"]}},
     [{"a": 1}, {"b": 1}, {"a": 1, "b": 2}, 3], [{}, {"c": 1}]),
    ("draft7-if-enum", {"$schema": D7, "properties": {"t": {"enum": ["RECORD", "INT"]}, "fields": {"type": "array"}},
                        "required": ["t"], "if": {"properties": {"t": {"enum": ["RECORD"]}}},
                        "then": {"required": ["fields"]}},
     [{"t": "RECORD", "fields": []}, {"t": "INT"}, {"t": "INT", "fields": [1]}],
     [{"t": "RECORD"}, {"t": "RECORD", "fields": 1}, {"t": "X"}]),
    # oneOf "exactly one of these keys"
    ("oneOf-exactly-one-key", {"type": "object", "properties": {"name": {"type": "string"}, "ssn": {}, "ein": {},
                                                              "itin": {}},
                               "required": ["name"], "additionalProperties": False,
                               "oneOf": [{"required": ["ssn"]}, {"required": ["ein"]}, {"required": ["itin"]}]},
     [{"name": "n", "ssn": 1}, {"name": "n", "ein": 1}, {"name": "n", "itin": 1}],
     [{"name": "n"}, {"name": "n", "ssn": 1, "ein": 2}, {"name": "n", "ein": 1, "itin": 2},
      {"name": "n", "ssn": 1, "ein": 2, "itin": 3}, {"ssn": 1}]),
    ("oneOf-key-pairs", {"properties": {"mode": {"enum": ["picker", "slider"]}, "stops": {"type": "number"},
                                        "interval": {"type": "number"}},
                         "additionalProperties": False,
                         "oneOf": [{"required": ["mode", "stops"]}, {"required": ["mode", "interval"]}]},
     [{"mode": "picker", "stops": 3}, {"mode": "slider", "interval": 1}],
     [{"mode": "picker"}, {"mode": "picker", "stops": 3, "interval": 1}, {"stops": 3}, {}]),
    # oneOf of enumerations that share a value: the shared one matches both, so it is invalid
    ("oneOf-overlapping-enums", {"oneOf": [{"enum": ["red", "blue", 6]}, {"enum": ["blue", "orange", 6, 3]}]},
     ["red", "orange", 3], ["blue", 6, "green", 4]),
    # oneOf of string patterns: exactly one must match
    ("oneOf-patterns", {"type": "string", "oneOf": [{"pattern": "customer"}, {"pattern": "admin"}]},
     ["customer", "x-admin-y"], ["customer-admin", "nobody", 1]),
    ("oneOf-specific-and-general", {"oneOf": [{"type": "string", "pattern": "^[a-f0-9]{4}$"}, {"type": "string"}]},
     ["zzzz", "abc", ""], ["abcd", "0f0f", 5]),
    # oneOf of objects told apart by a value, without required: the branches overlap on objects
    # without the key, which match both and are invalid
    ("oneOf-value-condition", {"type": "object", "oneOf": [{"properties": {"t": {"const": "a"}}},
                                                          {"properties": {"t": {"const": "b"}}}]},
     [{"t": "a"}, {"t": "b"}, {"t": "a", "z": 1}], [{}, {"z": 1}, {"t": "c"}]),
    # not of a pattern, and of an object value condition (both were refused)
    ("not-pattern", {"type": "string", "minLength": 1, "not": {"pattern": "^[.,*\\-\\s]+$"}},
     ["a", "a.", " x "], ["", ".", "--", " , "]),
    ("not-pattern-and-own-pattern", {"type": "string", "pattern": "^[a-z]+$", "not": {"pattern": "ghlint|plugin"}},
     ["abc", "ghlin"], ["ghlint", "myplugin", "ABC"]),
    ("not-value-condition", {"type": "object", "not": {"properties": {"type": {"enum": ["group"]}}}},
     [{"type": "x"}, {"type": 1}], [{}, {"type": "group"}, {"other": 1}]),
    ("not-nested-value-condition", {"not": {"properties": {"a": {"properties": {"b": {"const": 1}},
                                                                "required": ["b"]}}}},
     [{"a": {}}, {"a": {"b": 2}}], [{}, {"a": 5}, {"a": {"b": 1}}, {"a": {"b": 1, "c": 0}}, 1, "x"]),
]


@pytest.mark.parametrize("name,schema,valid,invalid", CASES, ids=[c[0] for c in CASES])
def test_negation_is_exact(name: str, schema: Any, valid: list, invalid: list) -> None:
    judge(schema, valid, invalid)


def test_if_condition_is_open_under_closed_objects() -> None:
    """The default closes objects that declare keys; a condition, then and else still are read
    as the spec reads them, so closing the object does not make kind=a objects fail ``if``."""
    schema = {"type": "object", "properties": {"kind": {"type": "string"}, "x": {}, "y": {}},
              "if": KIND_A, "then": {"required": ["x"]}, "else": {"required": ["y"]}}
    c = make(schema, closed_objects=True)
    assert accepts(c, b'{"kind":"a","x":1}') and accepts(c, b'{"kind":"b","y":1}')
    assert not accepts(c, b'{"kind":"a","y":1}') and not accepts(c, b'{"kind":"a","x":1,"z":2}')


REFUSED = [
    # a condition on keys not named has no exact complement in an object automaton
    ({"if": {"additionalProperties": {"type": "string"}}, "then": {"minProperties": 1}}, "/if"),
    ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, "/oneOf"),  # a bounded number is not negated
    ({"properties": {"a": {"not": {"type": "array", "items": {"type": "string"}}}}}, "/properties/a/not"),
    ({"not": {"patternProperties": {"^x": {"type": "string"}}}}, "/not"),
]


@pytest.mark.parametrize("schema,pointer", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_inexpressible_negations_are_refused_by_name(schema: Any, pointer: str) -> None:
    with pytest.raises(SchemaError) as e:
        JsonSchema(schema, closed_objects=False).to_lark()
    assert e.value.pointer == pointer, str(e.value)


def test_many_ifs_on_one_discriminator_stay_small() -> None:
    """An allOf of if/then on one key (JsonSchemaStore's jfrog-pipelines has 28): each if is two
    object alternatives, and without pruning those requiring two constants at once the allOf
    kept 2^n of them (the compile ran past a minute)."""
    kinds = [f"k{i}" for i in range(12)]
    schema = {"type": "object", "properties": {"type": {"enum": kinds}, "n": {}},
              "allOf": [{"if": {"properties": {"type": {"const": k}}},
                         "then": {"properties": {"n": {"type": "integer", "minimum": i}}}}
                        for i, k in enumerate(kinds)]}
    judge(schema, [{"type": "k3", "n": 3}, {"type": "k0", "n": 0}, {"type": "k11"}],
          [{"type": "k3", "n": 2}, {"type": "k11", "n": 10}, {"type": "k1", "n": "x"}, {"type": "z"}])


def test_a_nested_refusal_names_its_keyword_once() -> None:
    """The pointer ends in the keyword and the message starts with it; a reason raised further in
    that already starts with the keyword is not prefixed again ("/not: not: not: ...")."""
    with pytest.raises(SchemaError) as e:
        JsonSchema({"not": {"type": "array", "items": {"type": "string"}, "minItems": 2}}).to_lark()
    assert e.value.pointer == "/not" and str(e.value).startswith("/not: not: ") and "not: not: not" not in str(e.value)
    assert not e.value.message.startswith("not: not:")
