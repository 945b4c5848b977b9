"""The grammar analyses in C (``_cfgc``) return what their Python forms return (``analysis.py``):
productivity with the rules kept, nullability, FOLLOW bytes and the Earley item tables, on every
corpus grammar, 300 maskbench schema grammars and random grammars; and bad rule lists get a typed
error, not a crash."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from trellis.constrain.errors import GrammarError, SchemaError
from trellis.constrain.grammar import analysis
from trellis.constrain.grammar.grammar_ir import GrammarIR, load_bnf, load_lark
from tests.constrain.test_fuzz import CORPUS, corpus_grammars

MASKBENCH = Path(__file__).resolve().parents[3] / "shared" / "data" / "maskbench"

needs_c = pytest.mark.skipif(analysis.cfgc is None, reason="_cfgc is not built (no C compiler at install)")


def _ok_t(ir: GrammarIR) -> bytes:
    return bytes(bool(t.dfa.literal) or t.token is not None or bool(t.dfa.final.any() and (t.dfa.trans >= 0).any())
                 for t in ir.terminals)


def _same_analyses(ir: GrammarIR, monkeypatch: pytest.MonkeyPatch) -> None:
    n, rules = len(ir.nonterminals), ir.rules
    c = analysis.cfgc
    ok_t = _ok_t(ir)
    assert c.derives(rules, n, ok_t) == analysis.derives_py(rules, n, ok_t)
    assert c.derives(rules, n, None) == analysis.derives_py(rules, n, None) == ir.nullable
    prod, kept = c.productive(rules, n, ok_t)
    want = analysis.derives_py(rules, n, ok_t)
    assert prod == want
    assert kept == [(lhs, rhs) for lhs, rhs in rules if want[lhs] and all(want[s] if s >= 0 else ok_t[-1 - s] for s in rhs)]
    got_items = analysis.item_tables(rules, n, ir.start)
    want_items = analysis.item_tables_py(rules, n, ir.start)
    assert got_items[:4] == want_items[:4]
    assert got_items[4] == want_items[4] and got_items[5] == want_items[5]
    got_follow = analysis.follow_bytes(ir)
    monkeypatch.setattr(analysis, "cfgc", None)
    assert got_follow == analysis.follow_bytes(ir) == analysis.follow_bytes_py(ir)
    monkeypatch.setattr(analysis, "cfgc", c)


def _corpus_ir(gid: str) -> GrammarIR:
    from trellis.constrain.frontends.gbnf import Gbnf

    path = CORPUS / gid
    if path.suffix == ".gbnf":
        return load_lark(Gbnf.from_file(path).to_lark(fuse=True), source=str(path))
    return load_lark(path.read_text(encoding="utf-8"), source=str(path), path=str(path))


@needs_c
@pytest.mark.parametrize("gid", corpus_grammars())
def test_corpus_grammars_same_analyses(gid: str, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        ir = _corpus_ir(gid)
    except GrammarError:
        pytest.skip(f"{gid} is refused by the reader")
    _same_analyses(ir, monkeypatch)


@needs_c
def test_maskbench_schema_grammars_same_analyses(monkeypatch: pytest.MonkeyPatch) -> None:
    from trellis.constrain.frontends.json_schema import JsonSchema

    files = sorted(MASKBENCH.glob("*.json"))
    done = 0
    for f in files[:: max(1, len(files) // 375)]:  # spread over the whole split: all its sources
        if done == 300:
            break
        try:
            schema = json.loads(f.read_text(encoding="utf-8"))["schema"]
            text = JsonSchema(schema, closed_objects=False).to_lark("earley")
        except (SchemaError, GrammarError, KeyError):
            continue
        ir = load_bnf(text, source="<json schema>", lexical_priority=True)
        if ir is None:
            continue
        _same_analyses(ir, monkeypatch)
        done += 1
    if done < 300:
        pytest.skip(f"maskbench data not found at {MASKBENCH} (or too few schemas: {done})")


def _random_ir(rng: random.Random) -> GrammarIR:
    """A random grammar straight in the IR: nullable, unproductive and recursive rules, chains in
    both orders, ignored terminals, terminals that match nothing."""
    from trellis.constrain.automata.byte_dfa import literal_dfa
    from trellis.constrain.grammar.grammar_ir import NO_BYTES, Terminal

    n, m = rng.randint(2, 30), rng.randint(1, 8)
    terms = [Terminal(f"T{t}", NO_BYTES if rng.random() < 0.15 else literal_dfa(bytes([rng.randrange(256)]) * rng.randint(1, 3)),
                      "x") for t in range(m)]
    rules = [(0, (1,))]
    for _ in range(rng.randint(1, 4 * n)):
        lhs = rng.randrange(1, n)
        rhs = tuple(rng.randrange(1, n) if rng.random() < 0.5 else -1 - rng.randrange(m) for _ in range(rng.randint(0, 4)))
        rules.append((lhs, rhs))
    rng.shuffle(rules)
    ign = tuple(sorted(rng.sample(range(m), rng.randint(0, min(2, m)))))
    ir = GrammarIR("<random>", [f"n{i}" for i in range(n)], terms, rules, ign, 0)
    ir.nullable = analysis.derives_py(rules, n, None)
    return ir


@needs_c
@pytest.mark.parametrize("seed", range(40))
def test_random_grammars_same_analyses(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    _same_analyses(_random_ir(random.Random(seed)), monkeypatch)


@needs_c
def test_productivity_really_drops_rules() -> None:
    """The case the filter exists for is exercised: a rule over an unproductive nonterminal and one
    over a terminal that matches nothing are dropped, in order, by both forms."""
    rules = [(0, (1,)), (1, (2, -1)), (1, (-2,)), (2, (2,)), (1, (-1, -1))]
    ok_t = b"\x01\x00"
    prod, kept = analysis.cfgc.productive(rules, 3, ok_t)
    assert prod == [True, True, False]
    assert kept == [(0, (1,)), (1, (-1, -1))]
    assert kept[1] is rules[4]  # the IR's own tuples, not copies


@needs_c
@pytest.mark.parametrize("rules, n, err", [
    ("not a list", 2, TypeError), ([(0,)], 2, TypeError), ([(0, [1])], 2, TypeError), ([(0, (5,))], 2, ValueError),
    ([(3, ())], 2, ValueError), ([(0, ("a",))], 2, TypeError), ([(0, (-9,))], 2, ValueError),
])
def test_bad_rules_get_a_typed_error(rules: object, n: int, err: type) -> None:
    with pytest.raises(err):
        analysis.cfgc.productive(rules, n, b"\x01")
    with pytest.raises(err):
        analysis.cfgc.follow(rules, n, bytes(32), bytes(n), b"\x00")


def _ir_key(ir: GrammarIR | None) -> object:
    if ir is None:
        return None
    return (ir.nonterminals, ir.rules, [(t.name, t.pattern, t.priority, t.dfa.num_states, t.guard) for t in ir.terminals],
            ir.ignore, ir.start, ir.nullable, ir.lexical_priority)


def _both_readers(text: str, start: str = "start") -> tuple[object, object]:
    from trellis.constrain.grammar import grammar_ir

    def read(f):
        try:
            return _ir_key(f(text, source="<t>", start=start, lexical_priority=True))
        except GrammarError as e:
            return ("error", e.message)

    return read(grammar_ir.load_bnf), read(grammar_ir._load_bnf_py)


@needs_c
def test_load_bnf_reads_schema_grammars_as_the_python_reader() -> None:
    """The C reading of the rule lines gives the very IR of the line-by-line Python reader (the
    numbering of every name, the rules in order, the terminals), on 150 maskbench schemas in both
    forms (the Earley form's union chains; the flexible-whitespace default)."""
    from trellis.constrain.frontends.json_schema import JsonSchema

    files = sorted(MASKBENCH.glob("*.json"))
    done = 0
    for f in files[:: max(1, len(files) // 200)]:
        if done == 150:
            break
        try:
            schema = json.loads(f.read_text(encoding="utf-8"))["schema"]
            texts = [JsonSchema(schema, closed_objects=False).to_lark("earley"), JsonSchema(schema).to_lark()]
        except (SchemaError, GrammarError, KeyError):
            continue
        for text in texts:
            got, want = _both_readers(text)
            assert got == want and got is not None, f.name
        done += 1
    if done < 150:
        pytest.skip(f"maskbench data not found at {MASKBENCH}")


_PIECES = ["a", "b", "_c", "B", "_D", "E9", "9", "A", "x_1", "Q"]


def _random_bnf(rng: random.Random) -> str:
    """Rule and terminal lines in any order, with what either reader must refuse or take alike:
    empty alternatives, runs of spaces, undefined terminals, a missing start, lines of neither
    kind, odd line breaks inside a literal, priorities, regex terminals."""
    lines = [f"start: {rng.choice(_PIECES)} {rng.choice(_PIECES)}"] if rng.random() < 0.9 else []
    for _ in range(rng.randint(1, 12)):
        alts = [" ".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 3))) + " " * rng.randint(0, 2)
                for _ in range(rng.randint(1, 3))]
        lines.append(f"{rng.choice(['start', 'a', 'b', '_c', 'x_1', '9'])}: " + "|".join(alts))
    terms = ["B", "_D", "E9", "A", "Q"]
    for name in terms if rng.random() < 0.8 else rng.sample(terms, rng.randint(2, 5)):
        prio = rng.choice(["", "", ".2", ".-1"])
        lit = rng.choice(['"x"', '"yz"', "/[0-9]+/", '"a\\"b"', '"\u00e9"', "/a|b/i", '"q"'] +
                         (['"p\rq"', '"p\u2028q"', '"\x1cz"'] if rng.random() < 0.1 else []))
        lines.append(f"{name}{prio}: {lit}")
    if rng.random() < 0.1:
        lines.append(rng.choice(["start : a", "Start: a", "a: b c;", "%ignore WS", "a: 'x'", "B: x"]))
    rng.shuffle(lines)
    return (rng.choice(["\n", "\n\n"])).join(lines) + rng.choice(["", "\n"])


@needs_c
@pytest.mark.parametrize("seed", range(300))
def test_load_bnf_random_texts_as_the_python_reader(seed: int) -> None:
    text = _random_bnf(random.Random(seed))
    got, want = _both_readers(text)
    assert got == want, text


def test_load_bnf_takes_the_python_reader_for_other_line_breaks() -> None:
    """A literal holding a character that ``str.splitlines`` breaks at is left to the Python
    reader (which splits there and so refuses the text): the C reader splits at "\\n" only."""
    from trellis.constrain.grammar import grammar_ir

    for brk in ["\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]:
        text = f'start: A\nA: "p{brk}q"\n'
        if analysis.cfgc is not None:
            assert analysis.bnf_parse(text) is None
        assert grammar_ir.load_bnf(text) is None
    assert grammar_ir.load_bnf('start: A\nA: "pq"\n') is not None
