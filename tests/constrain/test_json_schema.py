"""JSON Schema -> grammar (trellis.constrain.frontends.json_schema): exact or refused with a JSON pointer.

Instances are serialised (``json.dumps``, compact, ``ensure_ascii=False``; ``indent=2`` for
flexible whitespace) and walked through the compiled constraint token by token on a small
vocabulary: every single byte plus multi-byte JSON pieces, so tokens straddle lexeme boundaries.
Soundness is also checked generatively: random walks through the masks, completed by a search,
must be valid for the ``jsonschema`` reference validator. The official JSON-Schema-Test-Suite
(json-schema-org/JSON-Schema-Test-Suite, MIT; /work/shared/data) is run over every draft 2020-12
schema: each one is refused, or every valid instance is accepted and every invalid one rejected.
"""

from __future__ import annotations

import glob
import json
import os
import random
from typing import Any

import pytest

from tests.constrain.test_oracle import engine_witness
from trellis.constrain import JsonSchema, SchemaError, compile
from trellis.constrain.frontends.json_schema import order_keys, schema_to_lark
from trellis.mask import allocate_bitmask, allowed_ids
from trellis.tokens import Vocabulary

SUITE = "/work/shared/data/JSON-Schema-Test-Suite/tests/draft2020-12"
D4 = "http://json-schema.org/draft-04/schema#"
D6 = "http://json-schema.org/draft-06/schema#"
D7 = "http://json-schema.org/draft-07/schema#"
D2019 = "https://json-schema.org/draft/2019-09/schema"
PIECES = ['{"', '":', '",', '"}', '":"', '","', '},{', '[{', '}]', '],', 'true', 'false', 'null', 'name',
          'age', '12', '0.', '-1', '\\n', '\\"', '\\u00', 'é', '€', '  ', '\n  ', '\n    ', ': ', ', ', '"a',
          'ab', '2024-', '-02-', 'T12:', '@ex', '.com', 'abc', 'foo', 'bar', 'http', '://']


def _vocab() -> Vocabulary:
    toks = [bytes([b]) for b in range(256)] + list(dict.fromkeys(p.encode() for p in PIECES))
    toks += ["é".encode()[:1] + b"x", b"<eos>", b"<special>"]
    return Vocabulary(tuple(toks), eos=frozenset([len(toks) - 2]), special=frozenset([len(toks) - 1]))


VOCAB = _vocab()
BY_BYTES = {t: i for i, t in enumerate(VOCAB.tokens) if i not in VOCAB.eos | VOCAB.special}
LONGEST = max(map(len, BY_BYTES))


class Raw(str):
    """An instance given as exact JSON text (e.g. ``1.0``, which json.dumps would not write)."""


def text_of(x: Any, flexible: bool = False) -> bytes:
    if isinstance(x, Raw):
        return str(x).encode()
    if flexible:
        return json.dumps(x, indent=2, ensure_ascii=False).encode()
    return json.dumps(x, separators=(",", ":"), ensure_ascii=False).encode()


def tokens_of(data: bytes, longest: bool) -> list[int]:
    """Greedy longest-piece tokenisation (``longest``) or byte by byte."""
    out, i = [], 0
    while i < len(data):
        n = min(LONGEST, len(data) - i) if longest else 1
        while data[i:i + n] not in BY_BYTES:
            n -= 1
        out.append(BY_BYTES[data[i:i + n]])
        i += n
    return out


def accepts(c: Any, data: bytes) -> bool:
    """Walks ``data`` through ``c`` two ways (pieces, bytes); both must agree."""
    answers = []
    for longest in (True, False):
        s = c.start()
        for t in tokens_of(data, longest):
            s = c.advance(s, t)
            if s is None:
                break
        answers.append(s is not None and c.is_accepting(s))
    assert answers[0] == answers[1], data
    return answers[0]


def make(schema: Any, **kw: Any) -> Any:
    """The schema's own language: objects open as the spec reads them (``closed_objects=False``;
    the default closes them, a narrowing tested on its own)."""
    kw.setdefault("closed_objects", False)
    return compile(JsonSchema(schema, **kw), VOCAB, cache=False, precompute=False)


def check(schema: Any, valid: list, invalid: list, **kw: Any) -> None:
    c = make(schema, **kw)
    flexible = kw.get("whitespace") == "flexible"
    for x in valid:
        x = x if isinstance(x, Raw) else order_keys(schema, x)
        for fx in ((False, True) if flexible and not isinstance(x, Raw) else (False,)):
            assert accepts(c, text_of(x, fx)), (schema, text_of(x, fx))
    for x in invalid:
        assert not accepts(c, text_of(x)), (schema, text_of(x))


# ----------------------------------------------------------------------------- keywords

CASES: list[tuple[str, Any, list, list]] = [
    ("type-integer", {"type": "integer"}, [0, -5, 12, Raw("1.0"), Raw("-0")], [1.5, "1", True, None, Raw("01")]),
    ("type-number", {"type": "number"}, [0, -1.25, 3e8, Raw("1E-5"), Raw("-0.0")], ["1", Raw("1."), Raw(".5")]),
    ("type-array-of-types", {"type": ["string", "null"]}, ["x", None], [1, [], {}]),
    ("type-boolean", {"type": "boolean"}, [True, False], [0, "true", None]),
    ("nullable", {"type": "string", "nullable": True}, ["a", None], [1]),
    ("integer-range", {"type": "integer", "minimum": -3, "maximum": 120},
     [-3, 0, 9, 99, 120, Raw("120.00")], [-4, 121, 1000, 2.5]),
    ("integer-exclusive", {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}, [1, 9], [0, 10]),
    ("number-range", {"type": "number", "minimum": -1.5, "maximum": 2.25},
     [-1.5, -1, 0, 2.25, Raw("2.2500"), Raw("-0")], [-1.51, 2.26, 3, Raw("2.250001")]),
    ("number-exclusive", {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
     [0.5, 0.001, Raw("0.999")], [0, 1, Raw("0.000"), Raw("1.0")]),
    ("draft4-exclusive", {"$schema": "http://json-schema.org/draft-04/schema#", "type": "number",
                          "minimum": 1, "exclusiveMinimum": True}, [1.5, 2], [1, 0]),
    ("multipleOf-0.01", {"type": "number", "multipleOf": 0.01, "minimum": 0}, [1.25, 0, Raw("3.100")],
     [1.255, -1]),
    ("multipleOf-5", {"type": "integer", "multipleOf": 5}, [0, 5, -15, 100], [1, 12, 7.5]),
    ("multipleOf-3-bounded", {"type": "integer", "multipleOf": 3, "minimum": 0, "maximum": 30}, [0, 3, 30], [1, 33]),
    ("int32", {"type": "integer", "format": "int32"}, [2**31 - 1, -(2**31)], [2**31]),
    ("string-length", {"type": "string", "minLength": 2, "maxLength": 3},
     ["ab", "abc", "é€", "\U0001F600\U0001F600", "a\n"], ["a", "abcd", "", "\U0001F600"]),
    ("string-long-length", {"type": "string", "minLength": 20, "maxLength": 100},
     ["x" * 20, "é" * 100, "ab\"" * 33], ["x" * 19, "y" * 101, 5]),
    ("string-unbounded-min", {"type": "string", "minLength": 40}, ["q" * 40, "q" * 300], ["q" * 39]),
    ("pattern-anchored", {"type": "string", "pattern": "^[a-z]+-[0-9]{2}$"}, ["ab-12"], ["ab-1", "Ab-12", "xab-12x"]),
    ("pattern-search", {"type": "string", "pattern": "b[0-9]"}, ["b1", "xxb2yy"], ["b", "a1"]),
    ("pattern-ecma", {"type": "string", "pattern": "^\\d\\s.$"}, ["1 x", "2\u00a0y"], ["\u0663 x", "1 \n", "1x y"]),
    ("pattern-and-length", {"type": "string", "pattern": "^[a-z]+$", "maxLength": 4}, ["abcd"], ["abcde", "ab1"]),
    ("format-date", {"type": "string", "format": "date"}, ["2024-02-29", "1999-12-31"],
     ["2023-02-29", "2024-13-01", "2024-1-01", "2024-04-31"]),
    ("format-date-time", {"type": "string", "format": "date-time"},
     ["2024-05-06T07:08:09Z", "2024-05-06t07:08:09.123+05:30", "1998-12-31T23:59:60Z"],
     ["2024-05-06 07:08:09Z", "2024-05-06T24:00:00Z", "2024-05-06T07:08:09", "2024-05-06T12:00:60Z"]),
    ("format-email", {"type": "string", "format": "email"}, ["a.b@ex.com", "\"a b\"@x.org", "x@[1.2.3.4]"],
     ["a..b@ex.com", "a@", "@x.com", "a b@x.com"]),
    ("format-uuid", {"format": "uuid"}, ["2EB8AA08-AA98-11EA-B4AA-73B441D16380", 5],
     ["2eb8aa08-aa98-11ea-b4aa-73b441d1638", "2eb8aa08aa9811eab4aa73b441d16380"]),
    ("format-ipv4", {"type": "string", "format": "ipv4"}, ["192.168.0.1", "0.0.0.0"], ["256.1.1.1", "01.1.1.1"]),
    ("format-ipv6", {"type": "string", "format": "ipv6"}, ["::1", "fe80::1:2", "1:2:3:4:5:6:7:8", "::ffff:1.2.3.4"],
     ["1:2:3:4:5:6:7:8:9", ":::1", "fe80::1%eth0"]),
    ("format-hostname", {"type": "string", "format": "hostname"}, ["example.com", "a-b.c", "x"],
     ["-a.com", "a_b.com", "a" * 64, "xn--bad"]),
    ("format-uri", {"type": "string", "format": "uri"}, ["http://a.b/c?d#e", "urn:isbn:123", "mailto:x@y.z"],
     ["/relative", "http://a b", "//host"]),
    ("enum-mixed", {"enum": ["a", 1, None, [1, "b"], {"k": True}]},
     ["a", 1, Raw("1.0"), None, [1, "b"], {"k": True}], ["b", 2, True, [1], {"k": False}, {}]),
    ("const-number", {"const": 2.5}, [2.5, Raw("2.50")], [2, Raw("25e-1")]),
    ("const-bool-not-1", {"const": True}, [True], [1]),
    ("properties", {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                    "required": ["name"]},
     [{"name": "x"}, {"name": "x", "age": 3}, {"name": "x", "age": 3, "extra": [1]}, {"name": "x", "zz": 1}],
     [{"age": 3}, {"name": 1}, {"name": "x", "age": "3"}, {}, []]),
    ("additional-false", {"properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                          "additionalProperties": False},
     [{}, {"a": 1}, {"b": "x"}, {"a": 1, "b": "x"}], [{"c": 1}, {"a": 1, "a2": 2}, Raw('{"a":1,"a":2}')]),
    ("additional-schema", {"properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
     [{"a": 1, "b": "x"}, {"b": "x", "c": "y"}], [{"b": 1}, {"a": "x"}, {"a": 1, "b": 2}]),
    ("additional-escaped-key", {"properties": {"a/b": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
     [{"a/b": 1}, {"x": "s"}], [{"a/b": "s"}, Raw('{"a\\/b":"s"}'), Raw('{"\\u0061/b":"s"}')]),
    ("forbidden-key", {"properties": {"foo": False}}, [{"bar": 1}, {}], [{"foo": 1}, {"bar": 1, "foo": 2}]),
    ("patternProperties", {"patternProperties": {"^x-": {"type": "integer"}, "id$": {"type": "string"}},
                           "additionalProperties": False},
     [{"x-a": 1, "uid": "s"}, {}], [{"x-a": "s"}, {"other": 1}, {"x-id": 1}, {"x-id": "s"}]),
    ("propertyNames", {"propertyNames": {"maxLength": 3}}, [{"abc": 1}, {}], [{"abcd": 1}]),
    ("min-max-properties", {"type": "object", "minProperties": 1, "maxProperties": 2},
     [{"a": 1}, {"a": 1, "b": 2}], [{}, {"a": 1, "b": 2, "c": 3}]),
    ("min-properties-declared", {"properties": {"a": {}, "b": {}, "c": {}}, "minProperties": 2,
                                 "additionalProperties": False},
     [{"a": 1, "b": 2}, {"b": 1, "c": 2}, {"a": 1, "b": 2, "c": 3}], [{"a": 1}, {}, {"c": 1}]),
    ("min-properties-one-other", {"properties": {"a": {}}, "minProperties": 1},
     [{"a": 1}, {"z": 3}, {"y": 1, "z": 2}], [{}]),
    ("required-undeclared", {"required": ["z"], "properties": {"a": {}}}, [{"a": 1, "z": 2}, {"z": 0}], [{"a": 1}]),
    ("property-order", {"properties": {"a": {}, "b": {}}, "additionalProperties": False},
     [{"a": 1, "b": 2}], [Raw('{"b":2,"a":1}')]),
    ("items", {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
     [[1], [1, 2, 3]], [[], [1, 2, 3, 4], ["x"], [1.5]]),
    ("prefixItems", {"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
     [[], ["a"], ["a", 1]], [[1], ["a", "b"], ["a", 1, 2]]),
    ("draft4-items-array", {"$schema": "http://json-schema.org/draft-04/schema#",
                            "items": [{"type": "string"}], "additionalItems": {"type": "integer"}},
     [["a", 1, 2], ["a"]], [["a", "b"], [1]]),
    ("anyOf-scalars", {"anyOf": [{"type": "string", "maxLength": 2}, {"type": "string", "pattern": "^z"},
                                 {"type": "integer"}]},
     ["ab", "zzzz", 4], ["abc", 4.5, None]),
    ("anyOf-discriminated", {"anyOf": [
        {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
         "required": ["kind", "r"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "integer"}},
         "required": ["kind", "side"], "additionalProperties": False}]},
     [{"kind": "circle", "r": 1.5}, {"kind": "square", "side": 2}],
     [{"kind": "circle", "side": 2}, {"kind": "square", "r": 1.5}, {"kind": "tri"}]),
    ("anyOf-overlapping-values", {"anyOf": [
        {"properties": {"v": {"type": "string"}, "a": {"type": "integer"}}, "required": ["v", "a"],
         "additionalProperties": False},
        {"properties": {"v": {"type": "string", "maxLength": 1}, "b": {"type": "integer"}}, "required": ["v", "b"],
         "additionalProperties": False}]},
     [{"v": "xyz", "a": 1}, {"v": "x", "a": 1}, {"v": "x", "b": 1}], [{"v": "xyz", "b": 1}, {"v": 1, "a": 1}]),
    ("anyOf-arrays", {"anyOf": [{"type": "array", "items": {"type": "string"}},
                                {"type": "array", "items": {"type": "integer"}}]},
     [[], ["a", "b"], [1, 2]], [["a", 1], [1, "a"]]),
    ("oneOf-disjoint", {"oneOf": [{"type": "integer"}, {"type": "string"}]}, [1, "a"], [1.5, None]),
    ("allOf-merge", {"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                               {"properties": {"a": {"minimum": 0}, "b": {"type": "string"}}}]},
     [{"a": 1}, {"a": 0, "b": "x"}], [{"a": -1}, {"b": "x"}, {"a": 1, "b": 2}]),
    ("ref-defs", {"$defs": {"pos": {"type": "integer", "minimum": 1}}, "type": "array",
                  "items": {"$ref": "#/$defs/pos"}}, [[1, 2]], [[0]]),
    ("ref-recursive", {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["v"], "additionalProperties": False}}, "$ref": "#/$defs/node"},
     [{"v": 1}, {"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}, {"v": 4}]}], [{"v": 1, "kids": [{"w": 2}]}]),
    ("ref-root", {"type": ["integer", "array"], "items": {"$ref": "#"}}, [1, [1, [2, []]]], [[1, "a"]]),
    ("ref-pointer-escapes", {"definitions": {"a/b": {"type": "integer"}, "c~d": {"type": "string"}},
                             "properties": {"x": {"$ref": "#/definitions/a~1b"}, "y": {"$ref": "#/definitions/c~0d"}}},
     [{"x": 1, "y": "s"}], [{"x": "s"}, {"y": 1}]),
    ("ref-anchor-and-id", {"$id": "https://example.com/root.json", "$defs": {
        "a": {"$anchor": "named", "type": "integer"}, "b": {"$id": "b.json", "type": "string"}},
        "properties": {"x": {"$ref": "#named"}, "y": {"$ref": "b.json"}}}, [{"x": 1, "y": "s"}], [{"x": "s"}, {"y": 1}]),
    ("draft7-ref-siblings-ignored", {"$schema": "http://json-schema.org/draft-07/schema#",
                                     "definitions": {"i": {"type": "integer"}}, "$ref": "#/definitions/i",
                                     "maximum": 1}, [5], ["x"]),
    # draft-04's integer is a spelling ("without a fraction or exponent part"); later drafts: a value
    ("draft4-integer-spelling", {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"},
     [1, -3, 0, 10**20], [1.0, Raw("1e2"), Raw("-0.0"), 1.5, "1"]),
    ("draft4-integer-bounds-enum-multiple", {"$schema": "http://json-schema.org/draft-04/schema#",
                                             "type": "array", "items": [
         {"type": "integer", "minimum": 0, "maximum": 100}, {"type": "integer", "enum": [1, 2.0, 3.5]},
         {"type": "integer", "multipleOf": 5}]},
     [[0, 1, 10], [100, 2, 0]], [[0.0], [1, 1.0], [1, 2.0], [1, 3.5], [1, 1, 5.0], [1, 1, Raw("1e1")]]),
    ("draft4-number-keeps-fractions", {"$schema": "http://json-schema.org/draft-04/schema#",
                                       "type": "number", "multipleOf": 1}, [1, 1.0, 20], [1.5]),
    ("draft7-integer-value", {"$schema": "http://json-schema.org/draft-07/schema#", "type": "integer"},
     [1, 1.0, -0.0], [1.5, "1"]),
    # oneOf branches that overlap alone but not under the sibling keywords (issue 27): the common
    # discriminated union
    ("oneOf-disjoint-through-siblings", {"type": "object", "required": ["t"], "oneOf": [
        {"properties": {"t": {"const": "a"}, "n": {"type": "integer"}}},
        {"properties": {"t": {"const": "b"}, "s": {"type": "string"}}}]},
     [{"t": "a"}, {"t": "b"}, {"t": "a", "n": 1}, {"t": "b", "s": "x"}, {"t": "a", "s": 5}],
     [{}, {"t": "c"}, {"n": 1}, {"t": "a", "n": "x"}, {"t": "b", "s": 1}, []]),
    # an enum with no value of the allowed type is an empty schema: an optional key with it is
    # forbidden, a required one makes objects impossible (issue 27: both were refused)
    ("enum-without-an-allowed-value-optional", {"type": "object", "properties": {
        "x": {"type": "string", "enum": [1, 2]}, "y": {"type": "integer"}}},
     [{}, {"y": 1}], [{"x": 1}, {"x": "1"}, {"y": 1, "x": 2}]),
    ("enum-without-an-allowed-value-required", {"properties": {"x": {"type": "string", "enum": [1]}},
                                                "required": ["x"]}, [1, "s", []], [{}, {"x": 1}, {"x": "1"}]),
    ("not-type", {"not": {"type": ["string", "null"]}}, [1, [], {}, True], ["a", None]),
    ("not-enum", {"type": "string", "not": {"enum": ["a", "b"]}}, ["c", "ab", ""], ["a", "b"]),
    ("if-constant", {"if": True, "then": {"type": "integer"}, "else": {"type": "string"}}, [1], ["a"]),
    ("annotations", {"title": "t", "description": "d", "default": 1, "examples": [1], "$comment": "c",
                     "deprecated": True, "x-vendor": {"type": "string"}, "type": "integer"}, [1], ["a"]),
    # Draft-exact keywords (issue 27): a keyword a draft does not define is unknown there, and
    # unknown keywords are ignored, as every draft says
    ("draft4-no-const-propertyNames-contains-if", {"$schema": D4, "const": 1, "propertyNames": {"maxLength": 1},
                                                   "contains": {"type": "string"}, "if": {"type": "integer"},
                                                   "then": {"minimum": 5}},
     [2, "x", {"long": 1}, [1], 3], []),
    ("draft6-no-if", {"$schema": D6, "if": {"type": "string"}, "then": {"minLength": 3}, "const": "a"}, ["a"],
     ["b", "abc"]),
    ("draft7-no-prefixItems-dependentRequired", {"$schema": D7, "prefixItems": [{"type": "string"}],
                                                 "dependentRequired": {"a": ["b"]},
                                                 "unevaluatedProperties": False},
     [[1], {"a": 1}, {"a": 1, "z": 2}], []),
    ("draft2019-items-array", {"$schema": D2019, "items": [{"type": "string"}], "additionalItems": False,
                               "prefixItems": [{"type": "integer"}]},
     [[], ["a"]], [["a", 1], [1], [1, 2]]),
    ("draft2020-no-dependencies-additionalItems", {"dependencies": {"bar": ["foo"]},
                                                   "prefixItems": [{"type": "integer"}], "additionalItems": False},
     [{"bar": 2}, [1, "x"]], [["x"]]),
    ("draft7-exclusive-number", {"$schema": D7, "type": "integer", "exclusiveMinimum": 1, "minimum": 0},
     [2], [1, 0]),
    ("draft4-exclusive-without-minimum", {"$schema": D4, "type": "integer", "exclusiveMaximum": True}, [5], []),
    # dependentRequired / dependencies / dependentSchemas: (key absent) | (key present and D)
    ("dependentRequired", {"properties": {"a": {}, "b": {"type": "integer"}, "c": {}},
                           "dependentRequired": {"a": ["b"], "c": ["a", "b"]}},
     [{}, {"b": 1}, {"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}, {"a": 1, "b": 2, "z": 0}, "a", 1, ["a"]],
     [{"a": 1}, {"c": 1}, {"a": 1, "c": 3}, {"b": 1, "c": 2}, {"a": 1, "b": "x"}]),
    ("dependentRequired-undeclared-keys", {"dependentRequired": {"bar": ["foo", "baz"], "qux": []}},
     [{}, {"foo": 1}, {"bar": 1, "foo": 2, "baz": 3}, {"qux": 1}, {"bar": 1, "foo": 2, "baz": 3, "zz": 4}],
     [{"bar": 1}, {"bar": 1, "foo": 2}, {"bar": 1, "baz": 2}]),
    ("draft7-dependencies-array-and-schema", {"$schema": D7, "properties": {"kind": {"type": "string"}, "n": {},
                                                                           "m": {}},
                                              "dependencies": {"n": ["m"], "m": {"properties": {
                                                  "kind": {"enum": ["pair"]}}, "required": ["kind"]}}},
     [{}, {"kind": "x"}, {"kind": "pair", "n": 1, "m": 2}, {"kind": "pair", "m": 2}],
     [{"n": 1}, {"m": 2}, {"kind": "x", "m": 2}, {"kind": "pair", "n": 1}, {"kind": "x", "n": 1, "m": 2}]),
    ("dependentSchemas-value-before-trigger", {"properties": {"type": {"type": "string"}, "foo": {}},
                                               "dependentSchemas": {"foo": {"properties": {
                                                   "type": {"enum": ["section"]}}}}},
     [{"type": "x"}, {"type": "section", "foo": 1}, {"foo": 1}], [{"type": "x", "foo": 1}, {"type": 1}]),
    ("dependentSchemas-false-and-type", {"properties": {"a": {}, "b": {}},
                                         "dependentSchemas": {"a": False, "b": {"type": "string"}}},
     [{}, {"c": 1}, 5], [{"a": 1}, {"b": 1}]),
    ("dependentSchemas-forbids-a-key", {"properties": {"a": {}, "b": {}},
                                        "dependentSchemas": {"a": {"not": {"required": ["b"]}}}},
     [{}, {"a": 1}, {"b": 1}], [{"a": 1, "b": 2}]),
    # not of presence conditions, double negation
    ("not-required", {"not": {"required": ["a", "b"]}}, [{}, {"a": 1}, {"b": 1}, {"c": 1}],
     [{"a": 1, "b": 2}, 1, "x", [], None]),
    ("not-forbidden-key", {"not": {"properties": {"a": False}}}, [{"a": 1}, {"a": 2, "b": 1}], [{}, {"b": 1}, 1]),
    ("not-counts", {"type": "object", "not": {"minProperties": 2}}, [{}, {"a": 1}], [{"a": 1, "b": 2}]),
    ("not-anyOf-required", {"type": "object", "properties": {"a": {}, "b": {}},
                            "not": {"anyOf": [{"required": ["a"]}, {"required": ["b"]}]}},
     [{}, {"c": 1}], [{"a": 1}, {"b": 1}, {"a": 1, "b": 2}]),
    ("not-not", {"not": {"not": {"type": "string", "minLength": 2}}}, ["ab"], ["a", 1, None]),
    ("not-required-object", {"not": {"type": "object", "required": ["a"]}}, [1, "x", {}, {"b": 1}], [{"a": 1}]),
    ("unicode", {"type": "string", "enum": ["日本", "a\"b\\c", "tab\t", "\u0001"]},
     ["日本", "a\"b\\c", "tab\t", "\u0001"], ["日", "tab"]),
]


@pytest.mark.parametrize("name,schema,valid,invalid", CASES, ids=[c[0] for c in CASES])
def test_keyword(name: str, schema: Any, valid: list, invalid: list) -> None:
    check(schema, valid, invalid)


@pytest.mark.parametrize("name,schema,valid,invalid", CASES[::4], ids=[c[0] for c in CASES[::4]])
def test_keyword_flexible(name: str, schema: Any, valid: list, invalid: list) -> None:
    check(schema, valid, invalid, whitespace="flexible")


def test_whitespace_modes() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}}
    compact, flexible = make(schema), make(schema, whitespace="flexible", max_whitespace=8)
    doc = {"a": [1, 2], "b": {"c": None}}
    assert accepts(compact, text_of(doc)) and not accepts(compact, json.dumps(doc).encode())
    for text in (json.dumps(doc), json.dumps(doc, indent=2), json.dumps(doc, indent="\t"), '{ "a" : [ ] }'):
        assert accepts(flexible, text.encode()), text
    # runs are bounded (a weak model cannot loop on spaces) and never around the whole value
    assert not accepts(flexible, b'{"a"' + b" " * 9 + b":[]}")
    assert not accepts(flexible, b' {"a":[]}') and not accepts(flexible, b'{"a":[]}\n')


def test_closed_objects_option() -> None:
    schema = {"properties": {"a": {"type": "integer"}}}
    assert accepts(make(schema), b'{"a":1,"b":2}')
    assert not accepts(make(schema, closed_objects=True), b'{"a":1,"b":2}')
    # the default closes them (issue 22's measurement), generate's and the CLI's too
    default = compile(JsonSchema(schema), VOCAB, cache=False)
    assert JsonSchema(schema).closed_objects and not accepts(default, b'{"a":1,"b":2}') and accepts(default, b'{"a":1}')
    # A wrapper around object branches, and a free-form object, stay open: closing the wrapper's
    # empty property list would intersect every branch down to {}.
    union = {"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                       {"type": "object", "properties": {"b": {"type": "string"}}}]}
    closed = make(union, closed_objects=True)
    assert accepts(closed, b'{"a":1}') and accepts(closed, b'{"b":"x"}') and accepts(closed, b'{}')
    assert not accepts(closed, b'{"a":1,"c":2}') and not accepts(closed, b'{"b":"x","c":2}')
    free = make({"type": "object", "properties": {"d": {"type": "object"}}}, closed_objects=True)
    assert accepts(free, b'{"d":{"any":[1]}}') and not accepts(free, b'{"e":1}')


def test_mask_matches_advance() -> None:
    """A mask row allows exactly the tokens ``advance`` accepts (and EOS exactly when accepting)."""
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "tags": {"type": "array", "items": {"enum": ["ab", "abc"]}}},
              "required": ["name"], "additionalProperties": {"type": "integer", "minimum": 10}}
    c = make(schema)
    row = allocate_bitmask(1, len(VOCAB))[0]
    eos = next(iter(VOCAB.eos))
    for doc in ({"name": "é\"x", "tags": ["ab", "abc"], "zz": 12},):
        s = c.start()
        for t in tokens_of(text_of(doc), True):
            c.fill_mask(s, row)
            got = set(allowed_ids(row, len(VOCAB)))
            assert (eos in got) == c.is_accepting(s)
            want = {u for u in range(len(VOCAB)) if u not in VOCAB.eos and c.advance(s, u) is not None}
            assert got - {eos} == want
            s = c.advance(s, t)
        assert c.is_accepting(s)


# ----------------------------------------------------------------------------- generated documents are valid

_CLOSERS = list(b'"}],:0a1 ') + list(range(32, 127))


def _complete(c: Any, state: Any, rng: random.Random, budget: int = 4000) -> bytes | None:
    """A byte string completing ``state`` (depth-first, closing bytes first, a little shuffled)."""
    order = _CLOSERS[:9] + rng.sample(_CLOSERS[9:], len(_CLOSERS) - 9)
    return engine_witness(c, state, max_nodes=budget, order=order, depth=300)


GENERATIVE = [
    {"type": "object", "properties": {"id": {"type": "integer", "minimum": -5, "maximum": 500},
                                      "name": {"type": "string", "pattern": "^[A-Z][a-z]+$", "maxLength": 8},
                                      "tags": {"type": "array", "items": {"enum": ["x", "yz", 3]}, "maxItems": 3},
                                      "when": {"format": "date-time"}},
     "required": ["id", "name"], "additionalProperties": {"type": "number", "exclusiveMaximum": 1.5}},
    {"anyOf": [{"type": "object", "properties": {"t": {"const": "a"}, "v": {"type": "string", "minLength": 2}},
                "required": ["t"]},
               {"type": "object", "properties": {"t": {"const": "b"}, "v": {"type": "boolean"}},
                "required": ["t", "v"], "additionalProperties": False},
               {"type": "array", "prefixItems": [{"type": "null"}], "minItems": 1}]},
    {"patternProperties": {"^n_": {"type": "number", "multipleOf": 0.5}, "_s$": {"type": "string"}},
     "propertyNames": {"maxLength": 5}, "maxProperties": 3},
]


@pytest.mark.parametrize("k", range(len(GENERATIVE)))
def test_generated_documents_validate(k: int) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = GENERATIVE[k]
    c = make(schema)
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    rng = random.Random(k)
    row = allocate_bitmask(1, len(VOCAB))[0]
    eos = next(iter(VOCAB.eos))
    for _ in range(12):
        s, out = c.start(), b""
        for _ in range(rng.randint(0, 25)):
            c.fill_mask(s, row)
            ids = [t for t in allowed_ids(row, len(VOCAB)) if t != eos]
            if not ids:
                break
            t = rng.choice(ids)
            s, out = c.advance(s, t), out + VOCAB.tokens[t]
            assert s is not None
        tail = _complete(c, s, rng)
        if tail is None:  # the bounded search gave up; the mask is still checked elsewhere
            continue
        doc = json.loads((out + tail).decode())
        assert not list(validator.iter_errors(doc)), (out + tail, schema)


# ----------------------------------------------------------------------------- errors and honesty

REFUSED = [
    ("not json", "{not json", ""),
    ({"type": "strng"}, None, "/type"),
    ({"enum": []}, None, "/enum"),
    ({"type": "string", "enum": [1, 2]}, None, ""),  # an empty root: no document at all
    ({"allOf": [{"type": "string"}, {"type": "integer"}]}, None, "/allOf"),
    ({"properties": {"a": {"$ref": "#/$defs/missing"}}}, None, "/properties/a/$ref"),
    ({"$ref": "https://example.com/other.json"}, None, "/$ref"),
    ({"properties": {"tags": {"type": "array", "uniqueItems": True}}}, None, "/properties/tags/uniqueItems"),
    ({"type": "integer", "multipleOf": 3}, None, "/multipleOf"),
    ({"type": "number", "multipleOf": 0.3}, None, "/multipleOf"),
    # an if whose condition has no exact complement (a number range; if/then/else of other
    # conditions compiles: tests/constrain/test_json_schema_negation.py)
    ({"if": {"type": "number", "minimum": 3}, "then": {"multipleOf": 1}}, None, "/if"),
    ({"properties": {"o": {"type": "object"}, "a": {}},  # D constrains an earlier object value
      "dependentSchemas": {"a": {"properties": {"o": {"required": ["x"]}}}}}, None, "/dependentSchemas"),
    ({"$schema": D4, "type": "number", "minimum": 1, "exclusiveMinimum": 1}, None, "/exclusiveMinimum"),
    ({"$schema": D7, "type": "number", "minimum": 1, "exclusiveMinimum": True}, None, "/exclusiveMinimum"),
    ({"type": "number", "exclusiveMaximum": False}, None, "/exclusiveMaximum"),
    # a union under items/anyOf: the pointer names it there (it said /anyOf)
    ({"type": "array", "items": {"anyOf": [
        {"type": "object", "properties": {"a": {"type": "object"}}},
        {"type": "object", "properties": {"a": {"type": "object", "required": ["x"]}, "b": {}}, "required": ["b"]}]}},
     None, "/items/anyOf"),
    # minProperties inside a dependentSchemas entry: named there, not at the root
    ({"dependentSchemas": {"a": {"minProperties": 4}}}, None, "/dependentSchemas/a/minProperties"),
    # two other keys may be one name twice, which a grammar cannot rule out: {"x":1,"y":2} would be
    # rejected though valid (benchmarks/fuzz_schemas.py found it), so the count is refused
    ({"properties": {"a": {}, "b": {}, "c": {}}, "minProperties": 2, "additionalProperties": True}, None,
     "/minProperties"),
    ({"$dynamicRef": "#x"}, None, "/$dynamicRef"),
    ({"type": "string", "format": "duration"}, None, "/format"),
    ({"type": "string", "pattern": "^(?!x)"}, None, "/pattern"),
    ({"type": "string", "pattern": "(a)\\1"}, None, "/pattern"),
    ({"not": {"type": "object", "additionalProperties": {"type": "string"}}}, None, "/not"),  # keys not named
    ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, None, "/oneOf"),
    ({"type": "array", "contains": {"type": "integer"}}, None, "/contains"),
    ({"unevaluatedProperties": False}, None, "/unevaluatedProperties"),
    ({"type": "string", "pattern": "^a", "maxLength": 100000}, None, "/maxLength"),  # alone it compiles
    ({"$schema": "https://example.com/my-dialect", "type": "integer"}, None, "/$schema"),
    ({"type": "object", "minProperties": 2}, None, "/minProperties"),
    (False, None, ""),
    ({"type": "object", "properties": {"a": {"not": {}}}, "required": ["a"]}, None, ""),
]


@pytest.mark.parametrize("schema,text,pointer", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_refused_with_pointer(schema: Any, text: str | None, pointer: str) -> None:
    with pytest.raises(SchemaError) as e:
        JsonSchema(text if text is not None else schema).to_lark()
    assert e.value.pointer == pointer, str(e.value)
    assert str(e.value).startswith(pointer or "#")


def test_unknown_formats_are_annotations_and_defined_ones_are_asserted_or_refused() -> None:
    """A format no draft defines ("url", "byte") constrains nothing (every draft says so), so the
    schema compiles to its exact language; a defined format trellis cannot assert is refused by
    name, and ``unknown_formats="refuse"`` refuses unknown ones too (issue 27)."""
    c = make({"type": "string", "format": "url"})
    assert accepts(c, b'"not a url at all"') and accepts(c, b'""') and not accepts(c, b'1')
    assert accepts(make({"type": "string", "maxLength": 3, "format": "semver"}), b'"abc"')
    with pytest.raises(SchemaError) as e:
        JsonSchema({"properties": {"r": {"type": "string", "format": "regex"}}}).to_lark()
    assert e.value.pointer == "/properties/r/format"
    with pytest.raises(SchemaError, match="not defined by JSON Schema") as e:
        JsonSchema({"type": "string", "format": "url"}, unknown_formats="refuse").to_lark()
    assert e.value.pointer == "/format"
    assert accepts(make({"type": "string", "format": "email"}), b'"a@b.co"')
    assert not accepts(make({"type": "string", "format": "email"}), b'"nope"')


def test_pattern_with_a_long_length_bound_compiles() -> None:
    """maxLength 1024 beside a pattern (seen in real schemas) raised RecursionError from the regex
    compressor; it compiles, exactly."""
    c = make({"type": "string", "pattern": "^a+$", "maxLength": 1024})
    assert accepts(c, b'"' + b"a" * 1024 + b'"') and not accepts(c, b'"' + b"a" * 1025 + b'"')
    assert not accepts(c, b'""') and not accepts(c, b'"ab"')


def test_lenient_ignores_and_lists() -> None:
    schema = {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "code": {"type": "string", "pattern": "^(?=x)x+$", "maxLength": 3}}}
    with pytest.raises(SchemaError):
        JsonSchema(schema).to_lark()
    js = JsonSchema(schema, lenient=True)
    assert {(k.keyword, k.pointer) for k in js.ignored_keywords} == {
        ("uniqueItems", "/properties/tags/uniqueItems"), ("pattern", "/properties/code/pattern")}
    c = compile(js, VOCAB, cache=False, precompute=False)
    assert c.ignored_keywords == js.ignored_keywords
    assert accepts(c, b'{"tags":["a","a"],"code":"yy"}')  # ignored: accepted although invalid
    assert not accepts(c, b'{"code":"yyyy"}')  # maxLength still enforced
    assert make({"type": "integer"}).ignored_keywords == ()


def test_grammar_is_strict_lalr_and_deterministic() -> None:
    import lark

    schema = GENERATIVE[1]
    text, ignored = schema_to_lark(schema)
    assert ignored == ()
    assert text == JsonSchema(schema).to_lark()
    lark.Lark(text, parser="lalr", lexer="contextual", strict=True)


def test_grammar_text_does_not_depend_on_the_hash_seed() -> None:
    """Regexes rebuilt from FSMs (here: keys limited by ``propertyNames``) once followed
    interegular's string-hash order, so the grammar text, and with it the disk cache key, changed
    per process."""
    import subprocess
    import sys

    words = ["maxLength", "minLength", "maximum", "minimum", "anyOf", "allOf", "oneOf", "exclusiveMaximum",
             "exclusiveMinimum", "maxItems", "minItems", "maxProperties", "minProperties"]
    schema = {"type": "object", "propertyNames": {"enum": words}, "additionalProperties": {"type": "integer"}}
    code = "import json,sys; from trellis.constrain.frontends.json_schema import schema_to_lark; " \
           "print(schema_to_lark(json.loads(sys.argv[1]))[0])"
    texts = {subprocess.run([sys.executable, "-c", code, json.dumps(schema)], capture_output=True, text=True,
                            check=True, env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout
             for seed in range(6)}
    assert len(texts) == 1


def test_pydantic_model() -> None:
    pydantic = pytest.importorskip("pydantic")
    from typing import Literal, Optional

    class Address(pydantic.BaseModel):
        city: str
        zip: str = pydantic.Field(pattern=r"^\d{5}$")

    class Person(pydantic.BaseModel):
        name: str = pydantic.Field(max_length=10)
        age: Optional[int] = None
        role: Literal["admin", "user"] = "user"
        address: Address
        nicknames: list[str] = []

    c = make(Person)
    ok = Person(name="Ann", age=3, role="admin", address=Address(city="X", zip="12345"), nicknames=["a"])
    assert accepts(c, ok.model_dump_json().encode())
    assert accepts(c, b'{"name":"Bo","age":null,"address":{"city":"Y","zip":"00000"}}')
    for bad in (b'{"name":"Bo","address":{"city":"Y","zip":"1234"}}', b'{"name":"Bo"}',
                b'{"name":"Bo","role":"root","address":{"city":"Y","zip":"12345"}}',
                b'{"name":"abcdefghijk","address":{"city":"Y","zip":"12345"}}'):
        assert not accepts(c, bad), bad


def test_generate_and_compile_accept_schema_objects() -> None:
    import inspect

    from trellis.generate import generate

    assert "schema" in inspect.signature(generate).parameters
    c1 = compile(JsonSchema({"type": "integer"}), VOCAB, cache=False, precompute=False)
    c2 = compile(JsonSchema('{"type": "integer"}'), VOCAB, cache=False, precompute=False)
    assert c1 is c2  # the same grammar text: one constraint per process


# ----------------------------------------------------------------------------- JSON-Schema-Test-Suite


# Valid instances outside the documented language (see the docstring of json_schema/__init__.py).
NARROWINGS = {
    ("date-time.json", "a valid date-time with a leap second, with minus offset"),
    ("time.json", "valid leap second, positive time-offset"),
    ("time.json", "valid leap second, large positive time-offset"),
    ("time.json", "valid leap second, negative time-offset"),
    ("time.json", "valid leap second, large negative time-offset"),
    ("float-overflow.json", "valid if optional overflow handling is implemented"),  # 1e308: exponent
    # draft-04's hostname is RFC 1123 only; the format never produces "--" in label positions 3-4
    # (RFC 5891 reserves them: formats.py), in every draft
    ("hostname.json", "hostname with consecutive hyphens (RFC1123)"),
}


def run_suite(files: list[str], whitespace: str = "compact", dialect: str | None = None) -> dict:
    """``dialect``: a ``$schema`` URI given to every root schema that names none (the suite's draft
    folders leave it implicit)."""
    from trellis.constrain.lalr.cfg import LalrRuntime, compile_lark

    stats = {"schemas": 0, "refused": 0, "instances": 0}
    wrong = []
    for fn in files:
        base = os.path.basename(fn)
        for case in json.load(open(fn, encoding="utf-8")):
            stats["schemas"] += 1
            # 2020-12 treats format as an annotation unless format-assertion is on; format.json
            # tests exactly that default, optional/format/* the assertion.
            fa = base != "format.json" or "/optional/" in fn
            schema = case["schema"]
            if dialect is not None and isinstance(schema, dict) and "$schema" not in schema:
                schema = {"$schema": dialect, **schema}
            try:
                text = JsonSchema(schema, whitespace=whitespace, format_assertion=fa, closed_objects=False).to_lark()
            except SchemaError:
                stats["refused"] += 1
                continue
            g = compile_lark(text)
            rt = LalrRuntime(g)
            for t in case["tests"]:
                inst = order_keys(schema, t["data"])
                for flex in ((False, True) if whitespace == "flexible" else (False,)):
                    data = text_of(inst, flex)
                    st = rt.walk((g.start_state,), 0, data)
                    ok = st is not None and rt.is_accepting(st)
                    stats["instances"] += 1
                    if ok != t["valid"] and not (t["valid"] and (base, t["description"]) in NARROWINGS) and not (
                            t["valid"] and base == "hostname.json" and "xn--" in str(t["data"])):
                        wrong.append((base, case["description"], t["description"], data[:120]))
    stats["wrong"] = wrong
    return stats


def _suite_files(pattern: str, suite: str = SUITE) -> list[str]:
    if not os.path.isdir(suite):
        pytest.skip("JSON-Schema-Test-Suite not available")
    return sorted(glob.glob(os.path.join(suite, pattern), recursive=True))


@pytest.mark.slow
def test_json_schema_test_suite_draft4() -> None:
    """Draft-04 read as draft-04 (its integer is a spelling: optional/zeroTerminatedFloats), optional
    files included; 0 wrong besides the documented narrowings."""
    stats = run_suite(_suite_files("**/*.json", os.path.join(os.path.dirname(SUITE), "draft4")),
                      dialect="http://json-schema.org/draft-04/schema#")
    assert stats["wrong"] == []
    assert stats["schemas"] - stats["refused"] >= 150, stats


@pytest.mark.slow
def test_json_schema_test_suite_draft7() -> None:
    """Draft-07 read as draft-07 (dependencies, items arrays + additionalItems, if/then/else, no
    prefixItems), optional files included but content.json (draft-07 lets contentMediaType /
    contentEncoding be annotations, as trellis reads them); 0 wrong besides the documented narrowings."""
    files = _suite_files("**/*.json", os.path.join(os.path.dirname(SUITE), "draft7"))
    stats = run_suite([f for f in files if not f.endswith("optional/content.json")], dialect=D7)
    assert stats["wrong"] == []
    assert stats["schemas"] - stats["refused"] >= 200, stats


@pytest.mark.slow
def test_json_schema_test_suite_compact() -> None:
    stats = run_suite(_suite_files("*.json"))
    assert stats["wrong"] == []
    assert stats["schemas"] - stats["refused"] >= 200, stats  # most of the suite compiles


@pytest.mark.slow
def test_json_schema_test_suite_flexible_sample() -> None:
    files = [f for f in _suite_files("*.json") if os.path.basename(f) in (
        "properties.json", "items.json", "anyOf.json", "enum.json", "ref.json", "additionalProperties.json")]
    assert run_suite(files, "flexible")["wrong"] == []


@pytest.mark.exhaustive
@pytest.mark.parametrize("whitespace", ["compact", "flexible"])
def test_json_schema_test_suite_full(whitespace: str) -> None:
    """Every draft 2020-12 file, optional/ (formats asserted, ECMA regexes, bignums) included, but
    optional/dependencies-compatibility.json: draft-07's ``dependencies`` is an unknown keyword in
    2020-12, ignored as the spec (and the jsonschema reference validator) says, where that optional
    file asks for the old meaning."""
    files = [f for f in _suite_files("**/*.json") if not f.endswith("dependencies-compatibility.json")]
    assert run_suite(files, whitespace)["wrong"] == []


def test_order_keys_follows_the_anyof_branch_the_instance_matches():
    """Each anyOf branch fixes its own key order; order_keys must use the branch that fits
    (closed properties, required keys, enum/const discriminators), as the grammar does."""
    schema = {"type": "array", "items": {"anyOf": [
        {"type": "object", "additionalProperties": False,
         "properties": {"context": {"type": "string"}, "image": {"type": "string"}}},
        {"type": "object", "additionalProperties": False,
         "properties": {"context": {"type": "string"}, "docker": {"type": "object"}, "image": {"type": "string"}}},
        {"type": "object", "required": ["kind", "z"],
         "properties": {"kind": {"enum": ["grid"]}, "z": {"type": "number"}, "a": {"type": "number"}}},
        {"type": "object", "properties": {"kind": {"const": "mesh"}, "a": {"type": "number"}, "z": {"type": "number"}}},
    ]}}
    inst = [{"image": "x", "docker": {}, "context": "."}, {"a": 1, "z": 2, "kind": "grid"},
            {"z": 2, "a": 1, "kind": "mesh"}]
    ordered = order_keys(schema, inst)
    assert [list(o) for o in ordered] == [["context", "docker", "image"], ["kind", "z", "a"], ["kind", "a", "z"]]
    c = compile(JsonSchema(schema), VOCAB, cache=False, precompute=False)
    text = json.dumps(ordered, separators=(",", ":")).encode()
    s = c.start()
    for b in text:
        s = c.advance(s, b)
        assert s is not None
    assert c.is_accepting(s)


def test_compiler_fuzz_no_crash_and_no_wrong_answer() -> None:
    """benchmarks/fuzz_schemas.py's loop on 600 random schemas (the acceptance run is 10,000):
    only SchemaError escapes, and compiled schemas agree with the jsonschema validator."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "fuzz_schemas.py"
    spec = importlib.util.spec_from_file_location("fuzz_schemas", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    r = mod.fuzz(600, 4, seed=7, log=lambda *_: None)
    assert r["crashes"] == [] and r["wrong"] == [], (r["crashes"][:3], r["wrong"][:3])
    assert r["compiled"] >= 200 and r["checks"] >= 500, r


def test_huge_numeric_bounds_are_exact_or_refused_by_name() -> None:
    """Found by the fuzz: an integer bound past Decimal's 28 digits raised DivisionImpossible, and
    {"minimum": 1e300} took 57 s to determinise."""
    check({"type": "integer", "minimum": 1e40}, [10 ** 40, 10 ** 41], [10 ** 40 - 1, 5])
    check({"type": "integer", "maximum": -1e35, "exclusiveMaximum": True,
           "$schema": "http://json-schema.org/draft-04/schema#"}, [-10 ** 35 - 1], [-10 ** 35, 0])
    with pytest.raises(SchemaError, match="magnitude 1e300") as e:
        make({"type": "number", "minimum": 1e300})
    assert e.value.pointer == "/minimum"


def test_plain_integer_ranges_equal_the_fsm_difference() -> None:
    """Draft-04's integers (``NumSpec.plain``): an integer range's regex is written without its
    ``(?:\\.0+)?`` suffix, which must be the language the general path computes, the spelled
    regex minus every text with a . e or E (an FSM difference)."""
    from decimal import Decimal

    from trellis.constrain.frontends.ranges import NOT_PLAIN, NumSpec
    from trellis.constrain.automata.regex_ir import fsm_sub, regex_fsm

    rng = random.Random(4)
    bounds = [None, Decimal(0), Decimal(-1), Decimal(7), Decimal("2.5"), Decimal(-30), Decimal(1000), Decimal(10) ** 9]
    checked = 0
    for _ in range(60):
        lo, hi = rng.choice(bounds), rng.choice(bounds)
        spec = NumSpec(integer=True, lo=lo, lo_x=rng.random() < 0.3, hi=hi, hi_x=rng.random() < 0.3, plain=True)
        direct = spec.regex()
        spelled = spec._spelled()
        if spelled is None:
            assert direct is None
            continue
        general = fsm_sub(regex_fsm(spelled), regex_fsm(NOT_PLAIN))
        if direct is None:
            assert general.empty()
            continue
        d = regex_fsm(direct)
        assert fsm_sub(d, general).empty() and fsm_sub(general, d).empty(), (lo, hi, direct)
        checked += 1
    assert checked >= 30
