"""Finite languages enumerated (``automata/finite_words.py``) and the JSON Schema shortcuts built on
them: ``oneOf`` disjointness of string sets by their strings and Venn regions of a few strings,
each checked against brute force or against the automata path it short-cuts."""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import subprocess
import sys

import pytest

from trellis.constrain.automata.finite_words import fsm_words, ir_words, plain_words, venn_words
from trellis.constrain.automata.regex_ir import dec_regex, ir_len, fsm_and, fsm_regex, fsm_sub, regex_fsm, to_regex
from trellis.constrain.frontends.json_schema import nodes as nodes_mod
from trellis.constrain.frontends.json_schema.scalars import venn_regions
from trellis.constrain.frontends.json_schema.specs import StrSpec
from trellis.constrain.frontends.pattern import pattern_ir, pattern_words

ALPHABET = "abc"
MAX_LEN = 8


def _random_regex(rng: random.Random, depth: int = 0) -> str:
    """A small ECMA regex over ``ALPHABET``: literals, classes, groups, alternations and
    quantifiers, bounded and unbounded (so some languages are infinite)."""
    k = rng.randrange(7 if depth < 3 else 2)
    if k == 0:
        return rng.choice(ALPHABET)
    if k == 1:
        return "[" + "".join(sorted(set(rng.sample(ALPHABET, rng.randint(1, 3))))) + "]"
    if k == 2:
        return "".join(_random_regex(rng, depth + 1) for _ in range(rng.randint(2, 3)))
    if k == 3:
        return "(?:" + "|".join(_random_regex(rng, depth + 1) for _ in range(rng.randint(2, 3))) + ")"
    if k == 4:
        lo = rng.randint(0, 2)
        return "(?:" + _random_regex(rng, depth + 1) + "){%d,%d}" % (lo, lo + rng.randint(0, 2))
    if k == 5:
        return "(?:" + _random_regex(rng, depth + 1) + ")" + rng.choice("*+?")
    return "(?:" + _random_regex(rng, depth + 1) + "){%d}" % rng.randint(0, 2)


def _brute(rx: str) -> set[str]:
    """The strings of ``rx`` up to ``MAX_LEN`` characters."""
    m = re.compile(rx)
    return {w for n in range(MAX_LEN + 1) for w in map("".join, itertools.product(ALPHABET, repeat=n))
            if m.fullmatch(w)}


def test_ir_and_fsm_words_equal_brute_force() -> None:
    rng = random.Random(7)
    seen_finite = seen_none = 0
    for _ in range(400):
        rx = _random_regex(rng)
        ir = pattern_ir(f"^{rx}$")
        longest = ir_len(ir)[1]
        complete = longest is not None and longest <= MAX_LEN  # brute force sees every string
        brute = _brute(rx)
        m = re.compile(rx)
        for limit in (8, 256):
            for got in (ir_words(ir, limit), fsm_words(regex_fsm(dec_regex(ir)), limit)):
                if got is None:  # infinite, or more strings than the limit
                    assert longest is None or not complete or len(brute) > limit, rx
                    seen_none += 1
                else:
                    assert len(got) == len(set(got)) <= limit, rx
                    assert all(m.fullmatch(w) for w in got), rx
                    assert {w for w in got if len(w) <= MAX_LEN} == brute, rx
                    assert longest is not None, rx
                    seen_finite += 1
    assert seen_finite > 200 and seen_none > 200  # both outcomes exercised


def test_pattern_words_is_search_semantics() -> None:
    assert sorted(pattern_words("^(Abs|Add)$")) == ["Abs", "Add"]
    assert pattern_words("Abs") is None  # unanchored: any string containing it
    assert pattern_words("^a{2,3}$") == ["aa", "aaa"]
    assert pattern_words("^x") is None


def test_the_pattern_memo_replaces_its_entries() -> None:
    """What ``pattern_matches`` and ``pattern_words`` derive goes into a new memo entry, so a copy
    of the memo taken before (bench_fresh.py restores one between runs) is not changed by them."""
    from trellis.constrain.frontends import pattern as pattern_mod

    p = "^(Tag|Other)$"
    pattern_ir(p)
    before = dict(pattern_mod._IR_MEMO)
    entry = before[p]
    assert pattern_mod.pattern_matches(p, "Tag") and not pattern_mod.pattern_matches(p, "Tags")
    assert sorted(pattern_words(p)) == ["Other", "Tag"]
    assert before[p] is entry and entry == (pattern_ir(p), pattern_mod._UNSET, pattern_mod._UNSET)
    assert pattern_mod._IR_MEMO[p] != entry  # the derived parts are in the new entry


def _random_spec(rng: random.Random) -> StrSpec:
    finite = ["^a$", "^(ab|b)$", "^[ab]c?$", "^(a|b|c){2}$"]
    infinite = ["^a", "b$", "^[ab]*$", "c", "^a+b?$"]
    kw: dict = {}
    if rng.random() < 0.7:
        kw["patterns"] = tuple(rng.sample(finite + infinite, rng.randint(1, 2)))
    if rng.random() < 0.2:
        kw["values"] = frozenset(rng.sample(["a", "ab", "b", "bc", "cc", "abc"], rng.randint(1, 3)))
    if rng.random() < 0.3:
        kw["min_len"] = rng.randint(0, 2)
    if rng.random() < 0.3:
        kw["max_len"] = rng.randint(1, 3)
    if rng.random() < 0.2:
        kw["exclude"] = frozenset(rng.sample(["a", "b", "ab", "cc"], 1))
    return StrSpec(**kw)


def _disjoint_by_automata(x: StrSpec, y: StrSpec) -> bool:
    return (x & y).empty() or fsm_and(x.fsm(), y.fsm()).empty()


def test_str_disjoint_by_strings_equals_automata() -> None:
    rng = random.Random(11)
    shortcut = 0
    for _ in range(600):
        x, y = _random_spec(rng), _random_spec(rng)
        want = _disjoint_by_automata(x, y)
        assert nodes_mod._str_disjoint(x, y) == want, (x, y)
        shortcut += x.words() is not None or y.words() is not None
        # the strings a finite spec lists are exactly its members
        ws = x.words()
        if ws is not None:
            assert all(x.contains(w) for w in ws)
            assert {w for w in ws if len(w) <= 3} == {w for w in _brute("[abc]{0,3}") if x.contains(w)}
    assert shortcut > 200


def _region_words(rx: str) -> frozenset:
    ws = fsm_words(regex_fsm(rx), 10_000)
    assert ws is not None
    return frozenset(ws)


def test_venn_of_few_strings_equals_automata() -> None:
    rng = random.Random(3)
    pool = ["Abs", "Add", "Abs|Add", "x[ab]", "xa|y", "(?:a|b){2}", "ab?", "q"]
    for _ in range(150):
        items = [(rng.choice(pool), {i}) for i in range(rng.randint(2, 6))]
        fast = venn_words(items)
        assert fast is not None
        slow = venn_regions(items)
        assert {(_region_words(r), frozenset(t)) for r, t in fast} == \
            {(_region_words(r), frozenset(t)) for r, t in slow}, items
        assert len(fast) == len(slow)
    assert venn_words([("a+", {0}), ("b", {1})]) is None  # an infinite item: the automata decide


def test_plain_words_equal_the_automaton_words() -> None:
    """``plain_words`` (a tag's or an enum's regex read off its text) gives the automaton's strings
    for every regex it answers, and answers the plain ones: random strings over letters, spaces,
    punctuation and regex specials, alone or as a group of alternatives, and the random regexes
    above."""
    rng = random.Random(11)
    pool = "ab -#/:,é" * 3 + "\\.^$|?*+()[]{}"
    answered = 0
    for i in range(600):
        words = ["".join(rng.choice(pool) for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(1, 3))]
        rx = (words[0] if i % 3 == 0 else "(?:" + "|".join(words) + ")" if i % 3 == 1 else _random_regex(rng))
        try:
            slow = fsm_words(regex_fsm(rx))
        except Exception:  # noqa: BLE001 - not a regex interegular reads: plain_words must not claim it
            slow = "error"
        fast = plain_words(rx)
        if fast is not None:
            answered += 1
            assert fast == slow, rx
    assert answered > 150


@pytest.mark.parametrize("n", [41])
def test_one_of_over_many_tags_translates(n: int) -> None:
    """The shape that motivated the shortcut (maskbench Github_ultra---o17072): a oneOf over n
    objects told apart by a ``"type"`` pattern tag; the grammar accepts each branch's object and
    refuses a tag no branch has."""
    from trellis.constrain.frontends.json_schema import JsonSchema

    tags = [f"T{i}x" for i in range(n)]
    schema = {"type": "object", "additionalProperties": {"oneOf": [
        {"type": "object", "additionalProperties": False, "required": ["type"],
         "properties": {"type": {"type": "string", "pattern": f"^{t}$"}, "v": {"type": "integer"}}}
        for t in tags]}}
    g = JsonSchema(schema, closed_objects=False)
    lark = g.to_lark("earley")
    from lark import Lark

    parser = Lark(lark, parser="earley", lexer="dynamic")
    parser.parse('{"m":{"type":"T3x","v":1}}')
    with pytest.raises(Exception):
        parser.parse('{"m":{"type":"T99x","v":1}}')


def test_the_grammar_text_does_not_depend_on_string_hashing() -> None:
    """A schema whose alternatives are told apart by Venn regions of enums (``venn_words``) gives
    the same Lark text in processes with different ``PYTHONHASHSEED``: the text keys the compiled-
    grammar memo and the disk cache (the FSM's transition order follows string hashes, so the
    strings are sorted)."""
    code = (
        "from trellis.constrain import JsonSchema; import json;"
        "print(JsonSchema(json.loads(input())).to_lark('earley'))")
    schema = {"type": "array", "anyOf": [
        {"prefixItems": [{"enum": ["alpha", "beta", "gamma", "delta", "eps"]}, {"type": "integer"}], "items": False},
        {"prefixItems": [{"enum": ["gamma", "delta", "zeta", "eta", "theta"]}, {"type": "string"}], "items": False}]}
    texts = {subprocess.run([sys.executable, "-c", code], input=json.dumps(schema), capture_output=True, text=True,
                            check=True, env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout
             for seed in range(4)}
    assert len(texts) == 1 and "gamm" in next(iter(texts))


def _tagged_union(rng: random.Random) -> dict:
    """A ``oneOf`` of objects, most told apart by a required ``"kind"`` whose values are a const,
    an enum or a finite pattern; some tags overlap, some branches do not require ``kind``, allow
    more than strings there, or are not objects."""
    pool = ["a", "b", "c", "ab", "ba"]
    branches = []
    for _ in range(rng.randint(2, 7)):
        k = rng.randrange(6)
        alts = "^(?:" + "|".join(rng.sample(pool, rng.randint(1, 2))) + ")$"
        tag = ({"const": rng.choice(pool)} if k == 0 else
               {"enum": rng.sample(pool, rng.randint(1, 3))} if k == 1 else
               {"type": "string", "pattern": alts} if k == 2 else
               {"type": ["string", "boolean"]} if k == 3 else {"type": "string", "pattern": "^a"} if k == 4 else
               {"const": rng.choice(pool)})
        branch = {"type": "object", "properties": {"kind": tag, "v": {"type": "boolean"}},
                  "required": ["kind"] if k != 5 else ["v"]}
        branches.append(branch if rng.random() < 0.9 else {"type": "null"})
    return {"oneOf": branches}


def test_tags_prove_the_same_pairs_apart_as_the_pair_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """``NodeTable.apart_by_tag`` (one pass over a ``oneOf``'s branches instead of ``disjoint``
    per pair) leaves every translation as the pair tests make it: a pair it claimed apart while
    both branches may hold would lose that pair's complements, and the grammar would change.
    The tags must also prove pairs (else the comparison is vacuous)."""
    from trellis.constrain.frontends.json_schema import JsonSchema

    rng = random.Random(5)
    schemas = [_tagged_union(rng) for _ in range(150)]
    proven = []
    real = nodes_mod.NodeTable.apart_by_tag

    def counting(self, subs, keys=4):
        out = real(self, subs, keys)
        proven.append(len(out))
        return out

    def text(s: dict) -> str:
        try:
            return JsonSchema(s, closed_objects=False).to_lark("earley")
        except Exception as e:  # noqa: BLE001 - a refusal must be the same refusal
            return f"{type(e).__name__}: {e}"

    monkeypatch.setattr(nodes_mod.NodeTable, "apart_by_tag", counting)
    fast = [text(s) for s in schemas]
    monkeypatch.setattr(nodes_mod.NodeTable, "apart_by_tag", lambda self, subs, keys=4: set())
    slow = [text(s) for s in schemas]
    assert sum(proven) > 100 and sum(a != b for a, b in zip(fast, slow)) == 0
    assert sum("Error" in t for t in fast) < len(fast) // 2
