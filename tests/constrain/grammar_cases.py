"""Per-grammar test material: terminal samplers for random sentences, accepted/rejected examples."""

from __future__ import annotations

import random


def _pick(*xs: str):
    return lambda rng: rng.choice(xs)


SAMPLERS: dict[str, dict] = {
    "json.lark": {
        "STRING": _pick('""', '"a"', '"x y"', '"\\n"', '"\\u00e9"', '"é"', '"a\\"b"', '"€1"'),
        "NUMBER": _pick("0", "-1", "12", "3.5", "1e5", "-0.25E-3", "10"),
        "_WS": _pick(" ", "\n", "\t ", "\r\n"),
    },
    "arithmetic.lark": {
        "NAME": _pick("x", "y1", "foo", "_a", "max"),
        "NUMBER": _pick("1", "23", "4.5", "0.0", "7"),
    },
    "csv.lark": {
        "TEXT": _pick("a", "b c", "12", "x y z", "é", " pad "),
        "QUOTED": _pick('""', '"a,b"', '"he said ""hi"""', '"line\nbreak"', '"q"'),
        "NEWLINE": _pick("\n", "\r\n"),
    },
    "python_call.lark": {
        "NAME": _pick("f", "g", "x", "foo_bar", "os", "Nonez"),
        "NUMBER": _pick("0", "1", "-2", "3.25", "1e3"),
        "STRING": _pick('"a"', "'b'", '"x\\"y"', "''", '"é"'),
    },
    "yaml_flat.lark": {
        "KEY": _pick("a", "name", "x.y", "k-1", "_z"),
        "PLAIN": _pick("hello", "a b", "1.5", "true", "v", "x: y"),
        "DQ_STRING": _pick('"q"', '"a\\"b"', '""'),
        "SQ_STRING": _pick("'s'", "'it''s'"),
        "COMMENT": _pick("# c", "#", "# a: b"),
        "_SP": _pick(" ", "  "),
        "_NL": _pick("\n", "\r\n"),
    },
    "sql_select.lark": {
        "NAME": _pick("a", "b", "t", "users", '"Col"', "x1"),
        "INT": _pick("1", "10", "0"),
        "DECIMAL": _pick("1.5", "0.25"),
        "STRING": _pick("'x'", "'it''s'", "''"),
        "COMPARE": _pick("=", "<>", "<=", ">", "!="),
        "ADD_OP": _pick("+", "-"),
        "MUL_OP": _pick("*", "/", "%"),
    },
}
SAMPLERS["json_object.lark"] = SAMPLERS["json.lark"]

# whitespace inserted between terminals by the generator ("" = adjacent)
SEPARATORS: dict[str, tuple[str, ...]] = {
    "json.lark": ("", " ", "\n"),
    "json_object.lark": ("", " ", "\n  "),
    "arithmetic.lark": ("", " "),
    "csv.lark": (),
    "python_call.lark": ("", " "),
    "yaml_flat.lark": (),
    "sql_select.lark": (" ", "  ", "\n"),
}

ACCEPTED: dict[str, list[str]] = {
    "json.lark": ['{"a": [1, 2.5e-3, true, false, null, "x\\u00e9"]}', "[]", "0", '"é"', ' {"k" : {}}',
                  "-0.5E+10", '[[[]], {"": ""}]'],
    "json_object.lark": ['{"a": 1}', "{}", '{"x": [1, {"y": null}], "z": "w"}'],
    "arithmetic.lark": ["1 + 2 * 3", "-(x - 4.5) ^ 2 ^ y", "max(a, b) / sqrt(2)", "f()", "--1"],
    "csv.lark": ["a,b,c\n1,2,3\n", 'x,"y,z",""\r\n', "", "one", ",,", '"a ""q"" b"'],
    "python_call.lark": ['f(1, "a", x=[1, 2], y={"k": None})', "os.path.join('a', 'b')", "g()",
                         "f(x,)", "f((1,), (), (1, 2))", "a.b.c(d=e.f(g=True))"],
    "yaml_flat.lark": ["a: 1\nb: hello world\n", "name: 'it''s'\n# comment\n\nk: \"q\"", "x:", "x: y # c"],
    "sql_select.lark": ["SELECT * FROM t", "select a, b AS c from users as u where a > 1 and b like 'x%' order by a desc limit 10;",
                        "SELECT count(*) FROM t GROUP BY a HAVING count(*) > 2",
                        "SELECT t.a FROM t LEFT JOIN u ON t.id = u.id WHERE u.x IS NOT NULL",
                        "SELECT DISTINCT a FROM t WHERE a NOT IN (1, 2, 3) OR NOT (b = 'y')"],
}

REJECTED: dict[str, list[str]] = {
    "json.lark": ['{"a" 1}', "[1,]", "01", '{"a": tru}', "[1 2]", '"\\x"', "{'a': 1}", "", "1.", "nul",
                  '{"a": 1} ', "0\n"],  # the shipped JSON grammars end at the value: no trailing blanks
    "json_object.lark": ["[]", "1", '{"a": 1', '"x"', "{} "],
    "arithmetic.lark": ["1 +", "(1", "1 2", "* 3", "f(,)", ""],
    "csv.lark": ['a"b', '"unterminated', 'x,"y"z'],
    "python_call.lark": ["f(", "f(x=1, 2)", "1(2)", "f(,)", "f(x y)", "f"],
    "yaml_flat.lark": ["a 1", ": x", "a: [1]", "  a: 1", "a: 'x"],
    "sql_select.lark": ["SELECT FROM t", "SELECT a", "SELECT a FROM", "SELECT a FROM t WHERE", "select a from t limit x",
                        "SELECT a FROM t ORDER a"],
}


def generator_for(name: str, lark_obj, max_depth: int = 5):
    from tests.constrain.reference import Generator

    return Generator(lark_obj, SAMPLERS[name], max_depth=max_depth, ws=SEPARATORS[name])


def sentences(name: str, lark_obj, n: int, seed: int = 0, max_depth: int = 5) -> list[str]:
    rng = random.Random(seed)
    gen = generator_for(name, lark_obj, max_depth)
    return [gen.sentence(rng) for _ in range(n)]
