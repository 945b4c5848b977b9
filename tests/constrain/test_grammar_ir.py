"""The grammar readers of the scannerless engine (``grammar_ir``): the plain-BNF reader's literal
parsing is Lark's, exactly."""

from __future__ import annotations

import random
import warnings

import pytest
from lark import Token
from lark.exceptions import GrammarError as LarkGrammarError
from lark.load_grammar import _literal_to_pattern

from trellis.constrain.grammar_ir import literal_pattern

PIECES = ["\\", "\\\\", '\\"', "'", '"', "/", "\\/", "a", "Z", "0", "7", "é", "日", "\U0001F600", "\\n", "\\t",
          "\\r", "\\f", "\\x41", "\\x4", "\\u0022", "\\u00e9", "\\U0001F600", "\\d", "\\w", "\\N", "\\0", "\\12",
          "[", "]", "(", ")", "*", "?", "{2}", "\\.", "\\-", " ", "\\ ", "\\'", "\\b"]


def _lark(literal: str):
    kind = "STRING" if literal[0] == '"' else "REGEXP"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _literal_to_pattern(Token(kind, literal))
    except (LarkGrammarError, SyntaxError, ValueError) as e:
        return type(e)


def _mine(literal: str):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return literal_pattern(literal)
    except (LarkGrammarError, SyntaxError, ValueError) as e:
        return type(e)


@pytest.mark.parametrize("seed", range(4))
def test_literal_pattern_equals_larks_on_random_literals(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(1500):
        body = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 8)))
        if rng.random() < 0.5:
            lit = '"' + body.replace('"', '\\"') + '"' + rng.choice(["", "i"])
        else:
            lit = "/" + body.replace("/", "\\/") + "/" + rng.choice(["", "i", "s", "ix"])
        want, got = _lark(lit), _mine(lit)
        if isinstance(want, type):
            assert got == want, (lit, got)
        else:
            assert (type(got), got.value, got.flags, got.raw) == (type(want), want.value, want.flags, want.raw), lit


def test_schema_regexes_read_as_lark_reads_them() -> None:
    lit = r'/\u0022(?:[^\u0022\\\x00-\x1f]|\\[\u0022\\\/bfnrt]|\\u[0-9a-fA-F]{4})*\u0022/'
    assert literal_pattern(lit).value == _lark(lit).value
    assert literal_pattern('"\\"id\\""').value == '"id"'


def _reference_follow(ir) -> list[frozenset]:
    """FOLLOW sets of terminals by the textbook fixpoint over every suffix (slow, obvious)."""
    n, m = len(ir.nonterminals), len(ir.terminals)
    first = [set() for _ in range(n)]

    def first_of(seq):
        out = set()
        for s in seq:
            if s < 0:
                return out | {-1 - s}, False
            out |= first[s]
            if not ir.nullable[s]:
                return out, False
        return out, True

    for _ in range(n + 1):
        for lhs, rhs in ir.rules:
            first[lhs] |= first_of(rhs)[0]
    fnt, ft = [set() for _ in range(n)], [set() for _ in range(m)]
    for _ in range(n + m + 1):
        for lhs, rhs in ir.rules:
            for k, s in enumerate(rhs):
                f, rest_null = first_of(rhs[k + 1:])
                (ft[-1 - s] if s < 0 else fnt[s]).update(f | (fnt[lhs] if rest_null else set()))
    ign = set(ir.ignore)
    return [frozenset(range(m)) if t in ign else frozenset(ft[t] | ign) for t in range(m)]


@pytest.mark.parametrize("name", ["json.lark", "arithmetic.lark", "python_call.lark", "sql_select.lark", "csv.lark",
                                  "yaml_flat.lark", "json_object.lark", "schema"])
def test_follow_bytes_are_the_first_bytes_of_the_follow_sets(name: str) -> None:
    import numpy as np

    from trellis.constrain.compile import load_grammar_text
    from trellis.constrain.grammar_ir import bits_to_bool, follow_bytes, load_bnf, load_lark
    from trellis.constrain.json_schema import JsonSchema

    if name == "schema":
        schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}},
                                                   "b": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
                  "required": ["a"]}
        ir = load_bnf(JsonSchema(schema, whitespace="flexible").to_lark(), lexical_priority=True)
    else:
        ir = load_lark(load_grammar_text(name)[0])
    want = _reference_follow(ir)
    got = follow_bytes(ir)
    for t in range(len(ir.terminals)):
        ref = np.zeros(256, dtype=bool)
        for u in want[t]:
            ref |= ir.terminals[u].dfa.trans[0] >= 0
        assert (bits_to_bool(got[t]) == ref).all(), (name, ir.terminals[t].name)
