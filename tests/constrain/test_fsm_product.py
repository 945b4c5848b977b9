"""``fsm_product.product`` (the JSON Schema translation's FSM intersection and difference) against
interegular's own ``&`` and ``-``: the same language on random regex pairs, compared by
interegular's equivalence test and on every string up to a length, and never more states."""

from __future__ import annotations

import itertools
import random

import pytest

interegular = pytest.importorskip("interegular")

from trellis.constrain.automata.fsm_product import product  # noqa: E402

ATOMS = ["a", "b", "c", "[ab]", "[^a]", ".", "ab", "ba", "(?:a|bc)", "x", ""]


def _regex(rng: random.Random, depth: int = 0) -> str:
    k = rng.random()
    if depth > 2 or k < 0.35:
        return rng.choice(ATOMS)
    if k < 0.55:
        return _regex(rng, depth + 1) + _regex(rng, depth + 1)
    if k < 0.75:
        return f"(?:{_regex(rng, depth + 1)}|{_regex(rng, depth + 1)})"
    return f"(?:{_regex(rng, depth + 1)}){rng.choice(['*', '+', '?', '{1,3}', '{2}'])}"


def _fsm(rx: str):
    return interegular.parse_pattern(rx).to_fsm()


@pytest.mark.parametrize("seed", range(150))
def test_product_is_interegulars_intersection_and_difference(seed: int) -> None:
    rng = random.Random(seed)
    ra, rb = _regex(rng), _regex(rng)
    a, b = _fsm(ra), _fsm(rb)
    for difference in (False, True):
        mine = product(a, b, difference)
        theirs = (a - b) if difference else (a & b)
        assert mine.equivalent(theirs), (ra, rb, difference)
        assert len(mine.states) <= len(theirs.states)
        assert mine.empty() == theirs.empty()
        for n in range(4):
            for s in itertools.product("abcx", repeat=n):
                w = "".join(s)
                assert mine.accepts(w) == theirs.accepts(w) == (a.accepts(w) and b.accepts(w) != difference), \
                    (ra, rb, difference, w)


def test_product_of_disjoint_alphabets_and_empty_languages() -> None:
    a, b = _fsm("[a-c]+"), _fsm("[x-z]+")
    assert product(a, b, False).empty()
    assert product(a, b, True).equivalent(a)
    none = product(a, a, True)
    assert none.empty() and product(none, b, False).empty() and product(b, none, True).equivalent(b)


@pytest.mark.parametrize("seed", range(100))
def test_minimal_is_interegulars_reduce(seed: int) -> None:
    """Brzozowski's minimisation with dict-indexed subsets == interegular's ``reduce``: the same
    language and the same number of states (a minimal DFA is unique up to renaming)."""
    from trellis.constrain.automata.fsm_product import minimal

    rng = random.Random(1000 + seed)
    f = _fsm(_regex(rng))
    if rng.random() < 0.5:
        f = product(f, _fsm(_regex(rng)), rng.random() < 0.5)
    mine, theirs = minimal(f), f.reduce()
    assert mine.equivalent(theirs) and len(mine.states) == len(theirs.states)


@pytest.mark.parametrize("seed", range(40))
def test_alphabet_union_memo_either_order(seed: int) -> None:
    """Products of the same two FSMs asked in both orders (the memo keeps one union per pair of
    alphabets and swaps the transition pairs for the other order) == interegular's."""
    rng = random.Random(5000 + seed)
    a, b = _fsm(_regex(rng)), _fsm(_regex(rng))
    for x, y in ((a, b), (b, a), (a, b), (b, a)):
        for difference in (False, True):
            assert product(x, y, difference).equivalent((x - y) if difference else (x & y))


CLASSES = ["a", "b", "[ab]", "[a-f]", "[^a]", "[^ab]", ".", "[b-d]", "x", "[xyz]", "[0-9]", "é", "[^é]"]


@pytest.mark.parametrize("seed", range(200))
def test_alphabet_union_is_interegulars_partition(seed: int) -> None:
    """``alphabet_union`` partitions the symbols exactly as interegular's ``Alphabet.union``: every
    symbol of either alphabet maps to the same (a's, b's) transition pair, two symbols share a new
    transition iff they share one there, and ``by_transition`` lists each class's symbols. The
    alphabets cover the cases of ``anything_else`` on one side, both or neither."""
    from interegular.fsm import Alphabet

    from trellis.constrain.automata.fsm_product import alphabet_union

    rng = random.Random(7000 + seed)

    def alphabet():
        rx = "".join(rng.choice(CLASSES) for _ in range(rng.randint(1, 4)))
        return _fsm(rx if rng.random() < 0.8 else f"(?:{rx})+").alphabet

    a, b = alphabet(), alphabet()
    mine, (ma, mb) = alphabet_union(a, b)
    theirs, (ta, tb) = Alphabet.union(a, b)
    symbols = set(a) | set(b)
    assert set(mine) == set(theirs) == symbols
    for s in symbols:
        assert (ma[mine[s]], mb[mine[s]]) == (ta[theirs[s]], tb[theirs[s]]) == (a[s], b[s]), s
    for s, t in itertools.product(symbols, repeat=2):
        assert (mine[s] == mine[t]) == (theirs[s] == theirs[t])
    assert {k: set(v) for k, v in mine.by_transition.items()} == \
        {k: {s for s in symbols if mine[s] == k} for k in mine.by_transition}


def test_union_memo_lives_for_one_translation() -> None:
    """``_UNIONS`` pins every alphabet it saw (its keys are ids): it fills inside a translation and
    is empty once the outermost ``translation_scope`` ends, also when the translation raises, so
    a process serving schemas one after another keeps none of them (bench_gc.py)."""
    from trellis.constrain.automata import fsm_product
    from trellis.constrain.automata.fsm_product import translation_scope
    from trellis.constrain.errors import SchemaError
    from trellis.constrain.frontends.json_schema import schema_to_lark

    a, b = _fsm("(?:ab|c)*x"), _fsm("[ab]+x?")
    fsm_product._UNIONS.clear()
    with translation_scope():
        with translation_scope():
            product(a, b, False)
        assert fsm_product._UNIONS, "an inner scope's end keeps the outer translation's memo"
    assert not fsm_product._UNIONS
    with pytest.raises(ValueError), translation_scope():
        product(a, b, True)
        raise ValueError
    assert not fsm_product._UNIONS
    # a schema whose string Venn regions take products (patterns in properties and anyOf), and one refused
    schema = {"type": "object", "patternProperties": {"^a[0-9]+$": {"type": "string", "pattern": "^[a-f]+$"},
                                                      "^[a-z]+$": {"type": "integer"}},
              "properties": {"a1": {"type": "string"}, "bee": {"anyOf": [{"type": "string", "pattern": "^x"},
                                                                         {"type": "string", "pattern": "y$"}]}}}
    seen = []
    real = fsm_product._union

    def spy(x, y):
        seen.append(len(fsm_product._UNIONS))
        return real(x, y)

    fsm_product._union = spy
    try:
        text, _ = schema_to_lark(schema)
        with pytest.raises(SchemaError):
            schema_to_lark({"allOf": [schema, {"type": "array"}]})
    finally:
        fsm_product._union = real
    assert "start" in text and seen, "the translation took products (the memo was used)"
    assert not fsm_product._UNIONS
