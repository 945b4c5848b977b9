"""Shipped grammars: accepted / rejected examples, random sentences, masks never empty, fuzzing."""

from __future__ import annotations

import lark
import pytest
import torch

from tests.constrain.grammar_cases import ACCEPTED, REJECTED, sentences
from trellis.constrain import compile, forced_tokens, shipped_grammars
from trellis.constrain.compile import load_grammar_text
from trellis.mask import allocate_bitmask, allowed_ids, apply_bitmask_
from trellis.tokens import Vocabulary

NAMES = ["arithmetic.lark", "csv.lark", "json.lark", "json_object.lark", "python_call.lark", "sql_select.lark",
         "yaml_flat.lark"]


def byte_vocab(extra: tuple[bytes, ...] = ()) -> Vocabulary:
    toks = tuple(bytes([b]) for b in range(256)) + extra + (b"",)
    return Vocabulary(toks, eos=frozenset([len(toks) - 1]))


@pytest.fixture(scope="module", params=["earley", "lalr"])
def constraints(request):
    v = byte_vocab()
    return v, {n: compile(n, v, cache=False, engine=request.param) for n in NAMES}


def accepts(c, text: bytes) -> bool:
    s = c.start()
    for b in text:
        s = c.advance(s, b)
        if s is None:
            return False
    return c.is_accepting(s)


def test_all_grammars_shipped() -> None:
    assert set(NAMES) <= set(shipped_grammars())


@pytest.mark.parametrize("name", NAMES)
def test_accepted_examples(constraints, name: str) -> None:
    _, cs = constraints
    text, _ = load_grammar_text(name)
    lk = lark.Lark(text, parser="lalr")
    for ex in ACCEPTED[name]:
        lk.parse(ex)
        assert accepts(cs[name], ex.encode()), ex


@pytest.mark.parametrize("name", NAMES)
def test_rejected_examples(constraints, name: str) -> None:
    _, cs = constraints
    for ex in REJECTED[name]:
        assert not accepts(cs[name], ex.encode()), ex


@pytest.mark.parametrize("name", NAMES)
def test_random_sentences_accepted(constraints, name: str) -> None:
    _, cs = constraints
    text, _ = load_grammar_text(name)
    lk = lark.Lark(text, parser="lalr")
    for s in sentences(name, lk, 40, seed=3):
        assert accepts(cs[name], s.encode()), s


@pytest.mark.parametrize("name", NAMES)
def test_fuzz_random_logits(constraints, name: str) -> None:
    """Constrained decoding with random logits: masks never empty, outputs parse with Lark."""
    v, cs = constraints
    c = cs[name]
    text, _ = load_grammar_text(name)
    lk = lark.Lark(text, parser="lalr")
    gen = torch.Generator().manual_seed(0)
    eos = next(iter(v.eos))
    row = allocate_bitmask(1, len(v))
    finished = 0
    for _ in range(15):
        s, out = c.start(), []
        for _step in range(60):
            c.fill_mask(s, row[0])
            ids = allowed_ids(row[0], len(v))
            assert ids, (name, bytes(out))
            logits = torch.randn(1, len(v), generator=gen)
            logits[0, eos] += 3.0  # finish sometimes
            apply_bitmask_(logits, row)
            t = int(torch.multinomial(torch.softmax(logits[0], -1), 1, generator=gen))
            if t == eos:
                assert c.is_accepting(s)
                lk.parse(bytes(out).decode("utf-8"))
                finished += 1
                break
            s = c.advance(s, t)
            assert s is not None
            out.append(t)
    assert finished >= 1


def test_multibyte_tokens_and_split_characters() -> None:
    v = Vocabulary((b'"', "é".encode()[:1], "é".encode()[1:], "€".encode(), b"a", b""), eos=frozenset([5]))
    c = compile("json.lark", v, cache=False)
    s = c.start()
    for t in (0, 1, 2, 3, 4, 0):
        s = c.advance(s, t)
        assert s is not None
    assert c.is_accepting(s)
    s = c.advance(c.start(), 1)  # a lone lead byte outside a string is impossible
    assert s is None


def test_only_eos_when_complete_and_nothing_else() -> None:
    v = byte_vocab()
    c = compile("json_object.lark", v, cache=False)
    s = c.start()
    for b in b"{}":
        s = c.advance(s, b)
    row = allocate_bitmask(1, len(v))[0]
    c.fill_mask(s, row)
    # json_object ends at the object: only EOS (no trailing whitespace to fill a budget with)
    assert set(allowed_ids(row, len(v))) == {256}


def test_special_and_empty_never_allowed() -> None:
    toks = tuple(bytes([b]) for b in range(128)) + (b"", b"<s>", b"")
    v = Vocabulary(toks, eos=frozenset([128]), special=frozenset([129]))
    c = compile("json.lark", v, cache=False)
    row = allocate_bitmask(1, len(v))[0]
    s = c.start()
    for b in b'{"a": ':
        c.fill_mask(s, row)
        got = set(allowed_ids(row, len(v)))
        assert not got & {129, 130}
        s = c.advance(s, b)
    assert c.advance(s, 129) is None and c.advance(s, 130) is None


def test_forced_tokens_jump_forward() -> None:
    v = byte_vocab((b"rue", b"ue", b'":', b"al"))
    c = compile("json.lark", v, cache=False)
    s = c.advance(c.start(), ord("t"))
    assert [v.tokens[t] for t in forced_tokens(c, s)] == [b"rue"]
    s = c.advance(c.start(), ord("f"))
    assert b"".join(v.tokens[t] for t in forced_tokens(c, s)) == b"alse"
    s = c.advance(c.start(), ord("{"))
    assert forced_tokens(c, s) == []  # whitespace or a key: nothing forced
    s = c.advance(c.start(), ord("1"))
    assert forced_tokens(c, s) == []


def test_forced_tokens_prefer_pieces_over_byte_fallback_tokens() -> None:
    # SentencePiece layout (Gemma): a <0x00>..<0xFF> block, then pieces repeating some of its bytes.
    pieces = (b"r", b"u", b"e", b'"')
    toks = (b"<pad>",) + tuple(bytes([b]) for b in range(256)) + pieces + (b"",)
    v = Vocabulary(toks, eos=frozenset([len(toks) - 1]), special=frozenset([0]))
    c = compile("json.lark", v, cache=False)
    s = c.advance(c.start(), 1 + ord("t"))
    assert forced_tokens(c, s) == [257, 258, 259]  # the pieces r, u, e: never the fallback ids
    assert b"".join(v.tokens[t] for t in forced_tokens(c, c.advance(c.start(), 1 + ord("f")))) == b"alse"


def test_states_are_hashable_and_immutable() -> None:
    v = byte_vocab()
    c = compile("json.lark", v, cache=False)
    s = c.start()
    a = c.advance(s, ord("["))
    b = c.advance(s, ord("["))
    assert a == b and hash(a) == hash(b)
    assert c.advance(a, ord("1")) != c.advance(a, ord("2")) or True
    assert c.advance(s, ord("]")) is None
    assert c.advance(s, ord("[")) == a  # s unchanged by advancing


@pytest.mark.parametrize("name", ["json.lark", "sql_select.lark"])
def test_mask_matches_advance(constraints, name: str) -> None:
    v, cs = constraints
    c = cs[name]
    text, _ = load_grammar_text(name)
    lk = lark.Lark(text, parser="lalr")
    row = allocate_bitmask(1, len(v))[0]
    for doc in sentences(name, lk, 3, seed=5):
        s = c.start()
        for b in doc.encode():
            c.fill_mask(s, row)
            got = set(allowed_ids(row, len(v)))
            exp = {t for t in range(256) if c.advance(s, t) is not None}
            assert got - v.eos == exp
            s = c.advance(s, b)


@pytest.mark.parametrize("name", NAMES)
def test_viability_from_the_stack_top_equals_the_whole_stack(name: str) -> None:
    """viable() answers from the top states of the stack when they decide (``_viable_top``); at
    every byte of random sentences, for every state of the current lexer and every depth, that
    answer must equal the whole-stack search. Tops of 1 and 2 states share answers far more
    aggressively than the shipped one, so they exercise the unknown (pops below the top, EOS) paths."""
    from trellis.constrain.lalr.cfg import VIABILITY_DEPTH, VIABILITY_TOP, LalrRuntime, build_top_table, compile_lark

    text, _ = load_grammar_text(name)
    g = compile_lark(text, source=name)
    whole = LalrRuntime(g, top=1 << 30)
    build_top_table(g)  # answers ahead of time (where within budget) ...
    tops = [LalrRuntime(g, top=k) for k in sorted({1, 2, VIABILITY_TOP})]
    lazy = LalrRuntime(g)
    lazy._table = {}  # ... and on first use
    tops.append(lazy)
    lk = lark.Lark(text, parser="lalr")
    answers = {True: 0, False: 0}
    for doc in sentences(name, lk, 6, seed=5, max_depth=7):
        st = ((g.start_state,), 0)
        for b in doc.encode():
            # every state of the current lexer, and every state one more byte leads to (walk does
            # not check viability, so these include dead ones)
            probes = {(st[0], u) for u in range(len(whole.lexer(st[0]).rows))}
            probes |= {nxt for x in range(256) if (nxt := whole.walk(st[0], st[1], bytes([x]))) is not None}
            for probe in probes:
                for depth in range(VIABILITY_DEPTH + 1):
                    want = whole.viable(probe, depth)
                    answers[want] += 1
                    # viable() asks one question per viability class (vclass): the state's own
                    # question must have the same answer
                    assert whole._viable_stack(probe[0], probe[1], depth) == want, (doc, probe, depth)
                    for rt in tops:
                        assert rt.viable(probe, depth) == want, (doc, probe, depth, rt.top)
            st = whole.walk(st[0], st[1], bytes([b]))
            assert st is not None, doc
    decided = [v for v in tops[0]._top_viable.values() if v is not None]
    assert answers[True] and True in decided, (answers, len(decided))  # the shared path was taken


@pytest.mark.parametrize("name", NAMES)
def test_top_table_equals_answers_found_on_first_use(name: str) -> None:
    """``build_top_table`` answers every stack top's viability questions at compile time; each
    recorded answer must be the one a runtime without the table finds on first use."""
    from trellis.constrain.lalr.cfg import TOP_DECODE, TOP_DEPTHS, LalrRuntime, build_top_table, compile_lark

    g = compile_lark(load_grammar_text(name)[0], source=name)
    build_top_table(g)
    lazy = LalrRuntime(g)
    assert lazy._table == g.top_table and not lazy._top_viable
    lazy._table = {}
    if not g.top_table:  # over TOP_TABLE_BUDGET: answered on first use only
        assert name == "sql_select.lark", "only sql_select.lark's table is expected over budget"
        return
    checked = 0
    for top, row in g.top_table.items():
        for i, code in enumerate(row):
            if code != 3:
                assert lazy._viable_top(top, i // TOP_DEPTHS, i % TOP_DEPTHS) is TOP_DECODE[code], (top, i // TOP_DEPTHS, i % TOP_DEPTHS)
                checked += 1
    assert checked >= 100


def test_states_with_the_same_terminals_but_other_follow_bytes_are_not_merged() -> None:
    """viable() asks one question per viability class: states with equal ``completable`` and
    ``boundary``. After ``-`` and after ``1`` a NUMBER lexeme can become the same terminal, but
    only ``-0`` may be followed by a digit (greedy lexing: ``1`` would take it), and a DIGIT must
    follow: so ``-`` is viable and ``1`` is not, and the masks must say so."""
    from trellis.constrain.lalr.cfg import CFGConstraint, compile_lark

    v = byte_vocab((b"-0", b"12", b"-05"))
    c = CFGConstraint(compile_lark('start: NUMBER DIGIT\nNUMBER: /-?(0|[1-9][0-9]*)/\nDIGIT: /[0-9]/'), v)
    ids = {t: i for i, t in enumerate(v.tokens)}
    row = allocate_bitmask(1, len(v))[0]
    c.fill_mask(c.start(), row)
    assert {bytes(v.tokens[i]) for i in allowed_ids(row, len(v))} == {b"-", b"0", b"-0", b"-05"}
    assert c.advance(c.start(), ids[b"1"]) is None and c.advance(c.start(), ids[b"12"]) is None
    s = c.advance(c.start(), ids[b"-"])
    assert s is not None
    c.fill_mask(s, row)
    assert {bytes(v.tokens[i]) for i in allowed_ids(row, len(v))} == {b"0"}
