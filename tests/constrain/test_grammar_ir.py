"""The grammar readers of the scannerless engine (``grammar_ir``): the plain-BNF reader's literal
parsing is Lark's, exactly."""

from __future__ import annotations

import random
import warnings

import pytest
from lark import Token
from lark.exceptions import GrammarError as LarkGrammarError
from lark.load_grammar import _literal_to_pattern

from trellis.constrain.grammar.plain_patterns import alternatives, plain_pattern, repeat, sequence

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


def _widths(p):
    try:
        return p.min_width, p.max_width
    except Exception as e:  # a regex Lark's width reader refuses: the same refusal
        return type(e)


@pytest.mark.parametrize("seed", range(4))
def test_plain_patterns_are_larks_without_lark(seed: int) -> None:
    """The plain-BNF reader's patterns (no Lark import) read every literal as Lark does: the same
    kind, value, flags, raw text and regex text, and the same exception where Lark refuses."""
    rng = random.Random(100 + seed)
    for _ in range(1500):
        body = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 8)))
        if rng.random() < 0.5:
            lit = '"' + body.replace('"', '\\"') + '"' + rng.choice(["", "i"])
        else:
            lit = "/" + body.replace("/", "\\/") + "/" + rng.choice(["", "i", "s", "ix"])
        want = _lark(lit)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = plain_pattern(lit)
        except (LarkGrammarError, SyntaxError, ValueError) as e:
            got = type(e)
        if isinstance(want, type):
            assert got == want, (lit, got)
            continue
        assert (got.type, got.value, got.flags, got.raw) == (want.type, want.value, want.flags, want.raw), lit
        assert got.to_regexp() == want.to_regexp(), lit
        assert _widths(got) == _widths(want), lit


def _lark_imported_after(body: str) -> bool:
    """Run ``body`` in a fresh Python process (a tiny 258-token vocabulary ``v`` and a mask row
    ``row`` made first) and say whether it imported Lark."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from trellis.constrain import compile\n"
        "from trellis.mask import allocate_bitmask\n"
        "from trellis.tokens import Vocabulary\n"
        "toks = tuple(bytes([b]) for b in range(256)) + (b'ab', b'',)\n"
        "v = Vocabulary(toks, eos=frozenset([len(toks) - 1]))\n"
        "row = allocate_bitmask(1, len(toks))[0]\n"
        "def walk(c, text):\n"
        "    st = c.start()\n"
        "    for b in text:\n"
        "        c.fill_mask(st, row)\n"
        "        st = c.advance(st, b)\n"
        "        assert st is not None, (text, b)\n"
        "    return st\n"
        + body
        + "print('lark' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    said = out.stdout.strip().splitlines()[-1:]
    assert said in (["True"], ["False"]), out.stdout
    return said == ["True"]


def test_a_schema_compiles_without_importing_lark() -> None:
    """A JSON Schema's path (translation, the plain-BNF reader, the engine, a mask) never imports
    Lark: its import was most of a new process's first schema compile (plain_patterns.py)."""
    assert not _lark_imported_after(
        "from trellis.constrain import JsonSchema\n"
        "s = {'type': 'object', 'properties': {'id': {'type': 'string', 'pattern': '^[a-z]+\\\\.x$'},"
        " 'n': {'enum': ['p', 'q\\\\\"r', 3]}}, 'required': ['id']}\n"
        "walk(compile(JsonSchema(s), v), b'{\"id\":\"ab.x\"')\n"
    )


def test_schema_regexes_read_as_lark_reads_them() -> None:
    lit = r'/\u0022(?:[^\u0022\\\x00-\x1f]|\\[\u0022\\\/bfnrt]|\\u[0-9a-fA-F]{4})*\u0022/'
    assert plain_pattern(lit).value == _lark(lit).value
    assert plain_pattern('"\\"id\\""').value == '"id"'


def _same(mine, larks) -> None:
    assert (mine.type, mine.value, mine.flags, mine.to_regexp()) == (larks.type, larks.value, larks.flags,
                                                                     larks.to_regexp())


@pytest.mark.parametrize("seed", range(3))
def test_joined_patterns_are_larks(seed: int) -> None:
    """Terminal trees joined by ``plain_patterns`` (sequence, alternatives, repeats) are Lark's
    ``TerminalTreeToPattern``'s joins of Lark's own patterns: the same kind, value, flags and regex
    text, alternation order included (Lark sorts alternatives by width)."""
    from lark.lexer import PatternRE as LarkRE
    from lark.load_grammar import TerminalTreeToPattern

    from trellis.constrain.grammar.plain_patterns import PatternRE

    tt = TerminalTreeToPattern()
    rng = random.Random(200 + seed)
    literals = ['"a"', '"bc"', '"x"i', '/[0-9]+/', '/a|bb/', '/(?:ab)?/', '/\\d{2,3}/', '"日本"', '/[^"]*/s', '""']

    def both(depth: int):
        k = rng.randrange(5 if depth < 3 else 2)
        if k == 0:
            lit = rng.choice(literals)
            if lit == '""':
                return plain_pattern('"a"'), _lark('"a"')
            return plain_pattern(lit), _lark(lit)
        if k == 1:
            a, b = rng.choice("abc"), rng.choice("xyz")
            return PatternRE("[%s-%s]" % (a, b)), LarkRE("[%s-%s]" % (a, b))
        kids = [both(depth + 1) for _ in range(rng.randint(0 if k == 2 else 1, 3))]
        if k == 2:
            return sequence([m for m, _ in kids]), tt.expansion([w for _, w in kids])
        if k == 3:
            return alternatives([m for m, _ in kids]), tt.expansions([w for _, w in kids])
        (m, w), op = kids[0], rng.choice(["?", "*", "+", "~"])
        args = [op] + ([str(rng.randint(0, 3))] if op == "~" else [])
        if op == "~" and rng.random() < 0.5:
            args.append(str(rng.randint(0, 4)))
        try:
            want = tt.expr([w, *args])
        except Exception:
            with pytest.raises(ValueError):
                repeat([m, *args])
            return m, w
        return repeat([m, *args]), want

    for _ in range(400):
        mine, larks = both(0)
        _same(mine, larks)


def test_grammars_compile_without_importing_lark() -> None:
    """A GBNF grammar and a Lark grammar with ``%import common`` that trellis' own reader takes are
    compiled and masked in a fresh process without importing Lark (plain_patterns.py)."""
    assert not _lark_imported_after(
        "from trellis.constrain.frontends.gbnf import Gbnf\n"
        "g1 = Gbnf('root ::= \"a\" [0-9]+ (\"b\" | \"cd\")*')\n"
        "g2 = 'start: WORD (\",\" NUMBER)*\\n%import common.WORD\\n%import common (NUMBER, WS)\\n%ignore WS\\n'\n"
        "for g, text in ((g1, b'a12bcd'), (g2, b'ab, 3.5')):\n"
        "    c = compile(g, v)\n"
        "    assert c.is_accepting(walk(c, text))\n"
    )


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
                                  "yaml_flat.lark", "json_object.lark", "schema", "schema-earley", "random"])
def test_follow_bytes_are_the_first_bytes_of_the_follow_sets(name: str) -> None:
    import numpy as np

    from trellis.constrain.compile import load_grammar_text
    from trellis.constrain.grammar.analysis import bits_to_bool, follow_bytes
    from trellis.constrain.grammar.grammar_ir import load_bnf, load_lark
    from trellis.constrain.frontends.json_schema import JsonSchema

    if name == "schema":
        schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}},
                                                   "b": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
                  "required": ["a"]}
        ir = load_bnf(JsonSchema(schema, whitespace="flexible").to_lark(), lexical_priority=True)
    elif name == "schema-earley":  # union chains (JsonSchema's Earley form), open: other keys too
        schema = {"type": "object", "properties": {f"p{i}": {"type": ["integer", "null"]} for i in range(12)},
                  "required": ["p5"]}
        ir = load_bnf(JsonSchema(schema, closed_objects=False).to_lark("earley"), lexical_priority=True)
    elif name == "random":  # rules in random order, chains both ways, nullable and recursive rules
        rng = random.Random(7)
        lines = [f"start: r0 {rng.choice('ABCD')}"]
        for i in range(40):
            for _ in range(rng.randint(1, 3)):
                syms = [rng.choice([f"r{rng.randrange(40)}", rng.choice("ABCD")]) for _ in range(rng.randint(0, 3))]
                lines.append(f"r{i}: " + " ".join(syms))
        rng.shuffle(lines)
        lines += [f'{t}: "{t.lower()}"' for t in "ABCD"]
        ir = load_bnf("\n".join(lines) + "\n")
        assert ir is not None
    else:
        ir = load_lark(load_grammar_text(name)[0])
    want = _reference_follow(ir)
    got = follow_bytes(ir)
    for t in range(len(ir.terminals)):
        ref = np.zeros(256, dtype=bool)
        for u in want[t]:
            ref |= ir.terminals[u].dfa.trans[0] >= 0
        assert (bits_to_bool(got[t]) == ref).all(), (name, ir.terminals[t].name)


def test_import_memo_keys_on_the_file_its_text_and_the_statement(tmp_path) -> None:
    """Imports are parsed once per (file, text, statement): a changed file, another alias or a
    folder with its own common.lark each give what Lark itself gives."""
    from tests.constrain.test_grammars import accepts, byte_vocab
    from trellis.constrain import compile
    from trellis.constrain.grammar.grammar_ir import IMPORTS_MEMO

    v = byte_vocab()
    a = compile('start: WS_INLINE "a"\n%import common.WS_INLINE\n', v, cache=False)
    b = compile('start: SP "b"\n%import common.WS_INLINE -> SP\n', v, cache=False)
    assert accepts(a, b" a") and accepts(b, b"  b") and not accepts(b, b" a")
    # (compile reads these with lark_reader, which imports common itself: Lark's loader, which the
    # memo wraps, is asked directly, so the check does not depend on an earlier test's imports)
    from trellis.constrain.grammar.grammar_ir import load_lark

    IMPORTS_MEMO.clear()
    load_lark('start: WS_INLINE "a"\n%import common.WS_INLINE\n', fast=False)
    assert any(k[2] == ("common",) for k in IMPORTS_MEMO)
    (tmp_path / "lib.lark").write_text('X: "x"\n')
    main = tmp_path / "main.lark"
    main.write_text('start: X\n%import .lib.X\n')
    assert accepts(compile(str(main), v, cache=False), b"x")
    (tmp_path / "lib.lark").write_text('X: "y"\n')  # same path, new text: not the memo's old definition
    from trellis.constrain.compile import COMPILED
    COMPILED.clear()
    c = compile(str(main), v, cache=False)
    assert accepts(c, b"y") and not accepts(c, b"x")
    # a folder with a common.lark of its own: whichever file Lark itself reads, trellis reads
    import lark

    (tmp_path / "common.lark").write_text('WS_INLINE: "~"\n')
    for stmt in ("%import common.WS_INLINE", "%import .common.WS_INLINE"):
        own = tmp_path / "own.lark"
        own.write_text(f'start: WS_INLINE "a"\n{stmt}\n')
        COMPILED.clear()
        c = compile(str(own), v, cache=False)
        lk = lark.Lark(own.read_text(), parser="earley", lexer="dynamic_complete", source_path=str(own))
        for s in ("~a", " a"):
            try:
                lk.parse(s)
                want = True
            except lark.exceptions.LarkError:
                want = False
            assert accepts(c, s.encode()) == want, (stmt, s)
