"""Random JSON Schemas for fuzzing the schema compiler (issue 27: no exception but ``SchemaError``
from any schema, and no wrong answer from a schema that compiles).

``random_schema(rng)`` draws a schema from every keyword family the compiler reads (types, numeric
and length bounds, enums/const, patterns, formats, objects with properties/required/
additionalProperties/patternProperties/propertyNames/dependencies, arrays with items/prefixItems/
contains/uniqueItems, anyOf/oneOf/allOf/not/if-then-else, $ref/$defs, each draft's ``$schema``),
nested a few levels deep, and with a small chance a keyword gets a value of the wrong type or an
out-of-range number: the generator aims at the compiler's corners, not at realistic schemas.
``random_instance(rng)`` draws JSON values over the same small alphabet of keys and strings, so
instances often meet the schema's keywords.

Used by ``tests/constrain/test_json_schema.py`` (a few hundred schemas, every CI run) and by
``benchmarks/fuzz_schemas.py`` (the 10,000-schema acceptance run).
"""

from __future__ import annotations

import random
from typing import Any

DRAFTS = [None, "http://json-schema.org/draft-04/schema#", "http://json-schema.org/draft-06/schema#",
          "http://json-schema.org/draft-07/schema#", "https://json-schema.org/draft/2019-09/schema",
          "https://json-schema.org/draft/2020-12/schema"]
KEYS = ["a", "b", "c", "id", "name", "x-y", "é", "a/b", "~t", ""]
STRINGS = ["", "a", "ab", "abc", "A1", "2024-01-02", "x@y.z", "http://e.x", "é", "a b", "\n", '"', "12"]
PATTERNS = ["^a", "b$", "^[a-z]+$", "^\\d{2,3}$", "a|b", "^(ab)*$", ".", "^$|^x$", "[", "^\\w+@\\w+$",
            "(?!a)", "\\p{L}"]
FORMATS = ["date", "date-time", "time", "email", "uri", "uuid", "ipv4", "ipv6", "hostname", "byte",
           "duration", "regex", "unknown-format"]
TYPES = ["null", "boolean", "integer", "number", "string", "array", "object"]


def random_instance(rng: random.Random, depth: int = 0) -> Any:
    k = rng.randrange(9 if depth < 3 else 6)
    if k == 0:
        return None
    if k == 1:
        return rng.random() < 0.5
    if k == 2:
        return rng.choice([0, 1, -1, 2, 3, 5, 10, 100, 2 ** 40, -7])
    if k == 3:
        return rng.choice([0.5, 1.0, -2.5, 3.25, 1e3, 0.1])
    if k in (4, 5):
        return rng.choice(STRINGS)
    if k in (6, 7):
        return {rng.choice(KEYS): random_instance(rng, depth + 1) for _ in range(rng.randrange(4))}
    return [random_instance(rng, depth + 1) for _ in range(rng.randrange(4))]


def _num(rng: random.Random) -> Any:
    return rng.choice([0, 1, 2, 3, -1, 10, 0.5, 2.5, 100, -3.5, 1e300])


def _junk(rng: random.Random) -> Any:
    return rng.choice([None, "x", -1, 1.5, [], {}, True, [1, "a"], {"type": 3}])


def random_schema(rng: random.Random, depth: int = 0, defs: bool = True) -> Any:
    if depth > 3 or rng.random() < 0.08:
        return rng.choice([True, False, {}, {"type": rng.choice(TYPES)}])
    s: dict[str, Any] = {}
    if depth == 0:
        d = rng.choice(DRAFTS)
        if d:
            s["$schema"] = d
    kind = rng.choice(TYPES + ["multi", "none", "combo", "combo"])
    if kind == "multi":
        s["type"] = rng.sample(TYPES, rng.randint(1, 3))
    elif kind in TYPES:
        s["type"] = kind
    t = s.get("type")
    types = set(t if isinstance(t, list) else [t] if t else TYPES)
    if types & {"integer", "number"}:
        for kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
            if rng.random() < 0.25:
                s[kw] = rng.choice([True, False]) if kw.startswith("exclusive") and rng.random() < 0.3 else _num(rng)
    if "string" in types:
        for kw in ("minLength", "maxLength"):
            if rng.random() < 0.3:
                s[kw] = rng.choice([0, 1, 2, 3, 5, 40])
        if rng.random() < 0.2:
            s["pattern"] = rng.choice(PATTERNS)
        if rng.random() < 0.15:
            s["format"] = rng.choice(FORMATS)
    if "array" in types:
        r = rng.random()
        if r < 0.5:
            s["items"] = random_schema(rng, depth + 1)
        elif r < 0.7:
            s["prefixItems"] = [random_schema(rng, depth + 1) for _ in range(rng.randint(1, 3))]
            if rng.random() < 0.5:
                s["items"] = rng.choice([False, True, random_schema(rng, depth + 1)])
        elif r < 0.8:
            s["items"] = [random_schema(rng, depth + 1) for _ in range(rng.randint(1, 2))]
            if rng.random() < 0.5:
                s["additionalItems"] = rng.choice([False, random_schema(rng, depth + 1)])
        for kw in ("minItems", "maxItems"):
            if rng.random() < 0.25:
                s[kw] = rng.choice([0, 1, 2, 3])
        if rng.random() < 0.1:
            s["uniqueItems"] = rng.choice([True, False])
        if rng.random() < 0.1:
            s["contains"] = random_schema(rng, depth + 1)
    if "object" in types:
        if rng.random() < 0.7:
            s["properties"] = {k: random_schema(rng, depth + 1) for k in rng.sample(KEYS, rng.randint(1, 4))}
        if rng.random() < 0.4:
            s["required"] = rng.sample(KEYS, rng.randint(1, 3))
        if rng.random() < 0.3:
            s["additionalProperties"] = rng.choice([False, True, random_schema(rng, depth + 1)])
        if rng.random() < 0.12:
            s["patternProperties"] = {rng.choice(PATTERNS[:6]): random_schema(rng, depth + 1)}
        if rng.random() < 0.08:
            s["propertyNames"] = rng.choice([{"maxLength": 2}, {"pattern": "^[a-c]+$"}, {"enum": ["a", "b"]}])
        for kw in ("minProperties", "maxProperties"):
            if rng.random() < 0.15:
                s[kw] = rng.choice([0, 1, 2, 4])
        if rng.random() < 0.12:
            kw = rng.choice(["dependencies", "dependentRequired", "dependentSchemas"])
            s[kw] = {rng.choice(KEYS): (rng.sample(KEYS, rng.randint(0, 2)) if rng.random() < 0.5
                                        else random_schema(rng, depth + 1))}
    if rng.random() < 0.15:
        pool = [None, True, False, 0, 1, 2.5, "a", "ab", "", [1], {"a": 1}, [], {}]
        s["enum"] = rng.sample(pool, rng.randint(1, 4))
    elif rng.random() < 0.06:
        s["const"] = random_instance(rng, 2)
    if kind == "combo" or rng.random() < 0.1:
        kw = rng.choice(["anyOf", "oneOf", "allOf", "not", "if"])
        if kw == "not":
            s["not"] = random_schema(rng, depth + 1)
        elif kw == "if":
            s["if"] = random_schema(rng, depth + 1)
            for b in ("then", "else"):
                if rng.random() < 0.7:
                    s[b] = random_schema(rng, depth + 1)
        else:
            s[kw] = [random_schema(rng, depth + 1) for _ in range(rng.randint(1, 3))]
    if defs and depth == 0 and rng.random() < 0.2:
        s["$defs"] = {"d": random_schema(rng, 2, defs=False)}
        s.setdefault("properties", {})["r"] = {"$ref": "#/$defs/d"}
        if rng.random() < 0.3:  # recursion through a reference
            s["$defs"]["d"] = {"type": "array", "items": {"$ref": "#/$defs/d"}, "maxItems": 2}
    if rng.random() < 0.05:  # a keyword with a value of the wrong type
        s[rng.choice(["type", "minimum", "maxLength", "properties", "items", "required", "enum", "pattern",
                      "anyOf", "$ref", "format", "additionalProperties"])] = _junk(rng)
    return s
