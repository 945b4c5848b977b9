"""GBNF -> Lark (trellis.constrain.gbnf): llama.cpp's grammar files convert, and the Lark text
has the same language as the GBNF grammar read by XGrammar (random sentences and mutants), plus
unit tests of the syntax and of the errors.

Lark is run the way a scannerless engine reads the output: Earley with ``dynamic_complete``.
"""

from __future__ import annotations

import functools
import random
import re
import time
from pathlib import Path

import lark
import pytest

from trellis.constrain.errors import GrammarError
from trellis.constrain.gbnf import Alt, Chars, Gbnf, Lit, Ref, Repeat, Seq, lark_name

CORPUS_DIR = Path("/work/shared/data/grammars/llama.cpp")
CORPUS = sorted(p.stem for p in CORPUS_DIR.glob("*.gbnf"))
EXPECTED = {"arithmetic", "c", "chess", "english", "japanese", "json", "json_arr", "list"}


@functools.lru_cache(maxsize=None)
def lark_parser(text: str) -> lark.Lark:
    return lark.Lark(text, parser="earley", lexer="dynamic_complete", start="start")


def lark_accepts(parser: lark.Lark, s: str) -> bool:
    try:
        parser.parse(s)
    except lark.exceptions.UnexpectedInput:
        return False
    return True


def accepts(gbnf: str, s: str) -> bool:
    return lark_accepts(lark_parser(Gbnf(gbnf).to_lark()), s)


def language(gbnf: str, candidates) -> set[str]:
    return {s for s in candidates if accepts(gbnf, s)}


def corpus_text(name: str) -> str:
    if not CORPUS_DIR.is_dir():
        pytest.skip(f"needs {CORPUS_DIR}")
    return (CORPUS_DIR / f"{name}.gbnf").read_text(encoding="utf-8")


# --- random sentences over the parsed GBNF ------------------------------------------------------

POOL = [chr(c) for c in range(0x20, 0x7F)] + list("\t\n\r\x00\x7f\x85é中ぁァ、😀\u2028")


def least_height(rules: dict[str, Alt]):
    """``height(node)``: least derivation height of ``node`` (rule references deep), by fixpoint."""
    h = {name: float("inf") for name in rules}

    def height(n) -> float:
        if isinstance(n, Ref):
            return 1 + h[n.name]
        if isinstance(n, Repeat):
            return height(n.item) if n.min else 0
        if isinstance(n, Seq):
            return max(map(height, n.items), default=0)
        if isinstance(n, Alt):
            return min(map(height, n.options))
        return 0

    changed = True
    while changed:
        changed = False
        for name, body in rules.items():
            if height(body) < h[name]:
                h[name], changed = height(body), True
    return height


def random_char(node: Chars, rng: random.Random) -> str:
    if node.negated:
        return rng.choice([c for c in POOL if not any(lo <= ord(c) <= hi for lo, hi in node.ranges)])
    lo, hi = rng.choice(node.ranges)
    while True:
        cp = rng.randint(lo, hi)
        if not 0xD800 <= cp <= 0xDFFF:
            return chr(cp)


def random_sentence(rules: dict[str, Alt], rng: random.Random, max_depth: int = 6) -> str:
    height = least_height(rules)
    out: list[str] = []

    def gen(n, depth: int) -> None:
        deep = depth > max_depth
        if isinstance(n, Lit):
            out.append(n.text)
        elif isinstance(n, Chars):
            out.append(random_char(n, rng))
        elif isinstance(n, Ref):
            gen(rules[n.name], depth + 1)
        elif isinstance(n, Seq):
            for item in n.items:
                gen(item, depth)
        elif isinstance(n, Alt):
            options = n.options
            if deep:  # head for the exit: only the options that finish soonest
                best = min(map(height, options))
                options = tuple(o for o in options if height(o) == best)
            gen(rng.choice(options), depth)
        elif isinstance(n, Repeat):
            hi = n.min if deep else min(n.max if n.max is not None else n.min + 3, n.min + 3)
            for _ in range(rng.randint(n.min, hi)):
                gen(n.item, depth + 1)
        else:
            raise AssertionError(n)

    gen(rules["root"], 0)
    return "".join(out)


def sentences(name: str, n: int = 30, max_len: int = 160) -> list[str]:
    rules = Gbnf(corpus_text(name), source=name).rules()
    rng = random.Random(f"gbnf-{name}")
    found: dict[str, None] = {}  # distinct, in order
    for _ in range(100 * n):
        s = random_sentence(rules, rng)
        if len(s) <= max_len:
            found[s] = None
        if len(found) == n:
            break
    assert len(found) == n, f"{name}: only {len(found)} distinct short sentences"
    return list(found)


def mutants(s: str, rng: random.Random, alphabet: str) -> list[str]:
    """Delete, insert and replace one random character."""
    i = rng.randrange(len(s) + 1)
    j = rng.randrange(len(s)) if s else 0
    out = [s[:i] + rng.choice(alphabet) + s[i:]]
    if s:
        out += [s[:j] + s[j + 1:], s[:j] + rng.choice(alphabet) + s[j + 1:]]
    return out


# --- XGrammar as the reference reader of GBNF ---------------------------------------------------

def xgrammar_acceptor(text: str):
    """``accepts(s)`` of the GBNF grammar ``text`` read by XGrammar."""
    xgrammar = pytest.importorskip("xgrammar")
    # XGrammar's EBNF reader rejects an empty alternative (llama.cpp's json.gbnf: `ws ::= | " " ...`):
    # spell it as "" for XGrammar only.
    text = re.sub(r"::=(\s*)\|", r'::=\1"" |', text)
    grammar = xgrammar.Grammar.from_ebnf(text, root_rule_name="root")
    compiled = xgrammar.GrammarCompiler(xgrammar.TokenizerInfo([]), cache_enabled=False).compile_grammar(grammar)

    def accepts(s: str) -> bool:
        matcher = xgrammar.GrammarMatcher(compiled, terminate_without_stop_token=True)
        return matcher.accept_string(s) and matcher.is_terminated()

    return accepts


# --- corpus -------------------------------------------------------------------------------------

def test_corpus_is_complete():
    if not CORPUS_DIR.is_dir():
        pytest.skip(f"needs {CORPUS_DIR}")
    assert set(CORPUS) == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_converts_and_compiles(name):
    text = Gbnf(corpus_text(name), source=f"{name}.gbnf").to_lark()
    assert text.startswith("start: r_root\n") and text.isascii()
    lark_parser(text)  # compiles


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_agrees_with_xgrammar(name):
    """Random sentences are accepted by both; one-character mutants get the same answer from both."""
    text = corpus_text(name)
    parser = lark_parser(Gbnf(text, source=f"{name}.gbnf").to_lark())
    xg_accepts = xgrammar_acceptor(text)
    rng = random.Random(f"mutate-{name}")
    alphabet = "".join(sorted(set(text) - {"\n"} | set(" \n\t\"\\é中ぁ")))
    disagreements, rejected, rejected_mutants = [], [], 0
    for s in sentences(name):
        if not (lark_accepts(parser, s) and xg_accepts(s)):
            rejected.append((s, lark_accepts(parser, s), xg_accepts(s)))
        for m in mutants(s, rng, alphabet):
            a, b = lark_accepts(parser, m), xg_accepts(m)
            rejected_mutants += not a
            if a != b:
                disagreements.append((m, f"lark={a}", f"xgrammar={b}"))
    assert not rejected, f"generated sentences rejected (sentence, lark, xgrammar): {rejected[:5]}"
    assert not disagreements, f"lark vs xgrammar on mutants: {disagreements[:5]}"
    assert rejected_mutants  # the mutants do exercise rejection


# --- unit tests ---------------------------------------------------------------------------------

def test_string_escapes():
    g = r'root ::= "\x41\u00e9\U0001F600\n\t\r\\\"\[\]\-" "é/#' + "'" + '"'
    lark_text = Gbnf(g).to_lark()
    assert lark_text.isascii()
    assert accepts(g, "Aé😀\n\t\r\\\"[]-é/#'")
    assert not accepts(g, "Aé😀\n\t\r\\\"[]-é/#")
    assert accepts('root ::= "a\nb"', "a\nb")  # a raw newline inside a literal is a character (llama.cpp)


def test_class_escapes_and_specials():
    g = r'root ::= [\]\\\-^a/"' + "'" + r'\x00-\x08\[]+'
    assert language(g, ["]", "\\", "-", "^", "a", "/", '"', "'", "\x00", "\x05", "[", "b", "\t"]) == \
        {"]", "\\", "-", "^", "a", "/", '"', "'", "\x00", "\x05", "["}
    assert language("root ::= [a-]", ["a", "-", "b"]) == {"a", "-"}  # "-]" is a literal '-'
    assert language("root ::= [ぁ-ゟ]", ["ぁ", "ゟ", "ァ"]) == {"ぁ", "ゟ"}


def test_negated_classes_and_dot():
    g = r"root ::= [^a-c\n]"
    assert language(g, ["d", "\t", "é", "😀", "]", "a", "c", "\n", "", "dd"]) == {"d", "\t", "é", "😀", "]"}
    assert language("root ::= .", ["x", "\n", "😀", "", "xy"]) == {"x", "\n", "😀"}
    assert language("root ::= [^^]", ["^", "a"]) == {"a"}


@pytest.mark.parametrize("rep, counts", [
    ("{3}", {3}), ("{2,}", {2, 3, 4, 5, 6}), ("{2,4}", {2, 3, 4}), ("{,2}", {0, 1, 2}),
    ("{0}", {0}), ("{0,0}", {0}), ("{1,1}", {1}), ("{0,1}", {0, 1}), ("{ 1 , 3 }", {1, 2, 3}),
    ("*", {0, 1, 2, 3, 4, 5, 6}), ("+", {1, 2, 3, 4, 5, 6}), ("?", {0, 1}),
    ("+?", {0, 1, 2, 3, 4, 5, 6}), ("{2}{2}", {4}), ("{1,2}{2}", {2, 3, 4}),
])
def test_repetitions(rep, counts):
    assert {n for n in range(7) if accepts(f'root ::= "a"{rep}', "a" * n)} == counts
    # a group: counted copies of an alternation (lifted into a helper rule)
    g = f'root ::= ("b" | "cd"){rep} "."'
    assert {n for n in range(7) if accepts(g, "bcd" * (n // 2) + "b" * (n % 2) + ".")} == counts


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 33, 50])
def test_bounded_repetition_counts(k):
    """x{0,k} and x{2,k+2} are written in binary-digit helper rules: every count, and only those."""
    g = f'root ::= "a"{{0,{k}}} "b"{{2,{k + 2}}}'
    for a in range(k + 2):
        assert accepts(g, "a" * a + "bb") == (a <= k), a
    for b in range(k + 4):
        assert accepts(g, "b" * b) == (2 <= b <= k + 2), b


def test_large_repetitions_stay_small():
    t0 = time.perf_counter()
    text = Gbnf('root ::= "a"{0,100} "b"{1000} [0-9]{3,2000}').to_lark()
    assert text.count("\n") < 60  # O(log n) helper rules, not n rules or n^2 symbols
    parser = lark_parser(text)
    assert time.perf_counter() - t0 < 5  # a chain of 2000 optional rules took Lark 40 s
    assert lark_accepts(parser, "a" * 100 + "b" * 1000 + "123")
    assert not lark_accepts(parser, "a" * 101 + "b" * 1000 + "123")
    assert not lark_accepts(parser, "b" * 999 + "123")


def test_comments():
    g = '# leading\nroot ::= "a" # trailing "b"\n  # indented full line\n\nx ::= "#" [#] # c\n'
    assert language(g, ["a", "ab", "a#"]) == {"a"}
    assert accepts('root ::= x\nx ::= "#" [#]', "##")


def test_multi_line_rules():
    g = 'root ::=\n  "a" |\n  "b" (\n    "c"\n    | "d"\n  )\nnext ::= "x"\n'
    assert language(g, ["a", "bc", "bd", "b", "x"]) == {"a", "bc", "bd"}
    assert language('root ::= "a"\r\nx ::= "b"\r\n', ["a", "b"]) == {"a"}  # CRLF files


def test_epsilon():
    assert language('root ::= "" | "a"', ["", "a", "aa"]) == {"", "a"}
    assert language('root ::= "a" "" "b"', ["ab", "a"]) == {"ab"}
    assert language('root ::= "x" ws "y"\nws ::= | " " | "\\n" [ \\t]{0,2}', ["xy", "x y", "x\n\t y", "x\n   y"]) \
        == {"xy", "x y", "x\n\t y"}
    assert language("root ::= e\ne ::= ", ["", "a"]) == {""}
    assert language('root ::= () "a" ("" | "")*', ["a"]) == {"a"}


def test_rule_names():
    g = 'root ::= My-Rule my-rule 0x A\nMy-Rule ::= "x"\nmy-rule ::= "y"\n0x ::= "z"\nA ::= "w"'
    assert accepts(g, "xyzw")
    assert accepts('root ::= fac(("*")fac)*\nfac ::= "f"', "f*f")  # a name runs up to the '('
    names = ["a-b", "aB", "a--b", "A", "-a", "a-B", "AB", "a-b-", "ab", "Ab", "a", "-", "--", "-A", "A-", "a0", "0",
             "a_b", "a__b", "_a", "a_", "_", "A_b", "a_B", "a-_b", "a_-b", "a_0", "a__0", "A_0", "_A"]
    rng = random.Random(5)  # and random names over the whole alphabet, underscores included
    names += list({"".join(rng.choice("aB0_-") for _ in range(rng.randint(1, 5))) for _ in range(3000)})
    names = list(dict.fromkeys(names))
    mapped = [lark_name(n) for n in names]
    assert len(set(mapped)) == len(names)
    assert all(re.fullmatch(r"[a-z][_a-z0-9]*", m) and m != "start" for m in mapped)


def test_underscores_in_rule_names():
    # llama.cpp refuses them; xgrammar (vLLM's and SGLang's default backend) and llguidance accept
    # them, and grammars written for vLLM use them (its own SQL example: select_statement)
    g = ('root ::= select_statement\nselect_statement ::= "SELECT " column_name (", " column_name)*\n'
         'column_name ::= [a-z_]+ | _private\n_private ::= "_" Col_Name\nCol_Name ::= "x"')
    assert accepts(g, "SELECT a_b, __x")
    assert not accepts(g, "SELECT _Y")
    xg = xgrammar_acceptor(g)
    for s in ("SELECT a_b, __x", "SELECT _Y", "SELECT _x", "SELECT a", "SELECT a,b"):
        assert accepts(g, s) == xg(s), s


def test_rules_ast():
    rules = Gbnf('root ::= | "a" [^b-c] x{1,2}\nx ::= .').rules()
    assert list(rules) == ["root", "x"]
    assert rules["root"] == Alt((Seq(()), Seq((Lit("a"), Chars(((98, 99),), True), Repeat(Ref("x"), 1, 2)))))
    assert rules["x"] == Alt((Seq((Chars((), True),)),))


ERRORS = {
    "undefined": ('root ::= "a" foo\nfoo2 ::= bar', 1, 14, "undefined rule 'foo'"),
    "undefined_lists_all": ('root ::= foo\nx ::= bar', 1, 10, "also undefined: bar"),
    "unterminated_string": ('root ::= "a"\nx ::= "abc\n', 2, 7, "unterminated string literal"),
    "unterminated_class": ("root ::= [abc", 1, 10, "unterminated character class"),
    "token_id": ('root ::= "a" <[1234]>', 1, 14, "token references"),
    "token_text": ("root ::= x\nx ::= !<think>", 2, 7, "token references"),
    "missing_root": ('\n\nstart ::= "a"', 3, 1, "'root'"),
    "bad_escape": (r'root ::= "\q"', 1, 11, "unknown escape"),
    "short_hex": (r'root ::= "\x4"', 1, 11, "hex digits"),
    "unclosed_paren": ('root ::= ("a" | "b"', 1, 10, "unclosed '('"),
    "extra_paren": ('root ::= "a")', 1, 13, "')'"),
    "line_starts_with_bar": ('root ::= "a"\n  | "b"', 2, 3, "newline ends a rule"),
    "no_assign": ('root = "a"', 1, 6, "'::='"),
    "max_below_min": ('root ::= "a"{3,1}', 1, 13, "max < min"),
    "too_many": ('root ::= "a"{2001}', 1, 13, "limit"),
    "empty_class": ('root ::= []', 1, 10, "empty character class"),
    "reversed_range": ('root ::= [z-a]', 1, 11, "reversed range"),
    "nothing_to_repeat": ('root ::= "" *', 1, 13, "nothing before '*'"),
    "leading_postfix": ('root ::= + "a"', 1, 10, "nothing before '+'"),
    "defined_twice": ('root ::= "a"\nroot ::= "b"', 2, 1, "defined twice"),
    "brace": ('root ::= "a"{x}', 1, 14, "integer"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors(case):
    text, line, column, words = ERRORS[case]
    with pytest.raises(GrammarError) as ei:
        Gbnf(text, source="bad.gbnf").to_lark()
    e = ei.value
    assert words in e.message, str(e)
    assert (e.line, e.column) == (line, column), str(e)
    assert str(e).startswith(f"bad.gbnf:{line}:{column}: ") and "^" in str(e)
    assert e.__cause__ is None and e.__context__ is None


# --- regular fusion (to_lark(fuse=True), what compile() reads) ------------------------------------

def engine_accepts(gbnf: str, s: str) -> bool:
    from tests.constrain.test_grammars import accepts as c_accepts, byte_vocab
    from trellis.constrain import compile

    return c_accepts(compile(Gbnf(gbnf), byte_vocab(), cache=False), s.encode())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fused_grammar_agrees_with_xgrammar_on_the_engine(name):
    """The engine reads the fused text (each rule-free part one regex terminal): random sentences
    are accepted and one-character mutants get xgrammar's answer."""
    from tests.constrain.test_grammars import accepts as c_accepts, byte_vocab
    from trellis.constrain import compile

    text = corpus_text(name)
    c = compile(Gbnf(text, source=f"{name}.gbnf"), byte_vocab(), cache=False)
    xg_accepts = xgrammar_acceptor(text)
    rng = random.Random(f"fused-{name}")
    alphabet = "".join(sorted(set(text) - {"\n"} | set(" \n\t\"\\é中ぁ")))
    for s in sentences(name, 12):
        assert c_accepts(c, s.encode()) and xg_accepts(s), s
        for m in mutants(s, rng, alphabet):
            assert c_accepts(c, m.encode()) == xg_accepts(m), m


@pytest.mark.parametrize("rep, counts", [
    ("{3}", {3}), ("{2,}", {2, 3, 4, 5, 6}), ("{2,4}", {2, 3, 4}), ("{,2}", {0, 1, 2}), ("{0}", {0}),
    ("{1,1}", {1}), ("{0,1}", {0, 1}), ("*", {0, 1, 2, 3, 4, 5, 6}), ("+", {1, 2, 3, 4, 5, 6}), ("?", {0, 1}),
    ("+?", {0, 1, 2, 3, 4, 5, 6}), ("{2}{2}", {4}), ("{1,2}{2}", {2, 3, 4}),
])
def test_fused_repetitions(rep, counts):
    assert {n for n in range(7) if engine_accepts(f'root ::= "x" "a"{rep}', "x" + "a" * n)} == counts
    g = f'root ::= ("b" | "cd"){rep} "."'
    assert {n for n in range(7) if engine_accepts(g, "bcd" * (n // 2) + "b" * (n % 2) + ".")} == counts
    assert "/" in Gbnf(g).to_lark(fuse=True)  # written as one regex terminal


def test_fusion_keeps_rules_and_nullable_parts_apart():
    g = 'root ::= "(" ws item ")" ws\nitem ::= [a-z]+ ("," ws [a-z]+)*\nws ::= [ \\t]*'
    # nullable: X? with X non-empty (Lark refuses zero-width)
    assert "r_root: /(?:[ \\t])+/?" in Gbnf('root ::= [ \\t]*').to_lark(fuse=True)
    for s, ok in [("(a)", True), ("( a, bc) ", True), ("( a, bc ) ", False), ("()", False), ("(a,)", False), ("(a b)", False)]:
        assert engine_accepts(g, s) == ok, s


def test_rules_without_recursion_are_inlined_and_recursive_ones_stay():
    """A rule that reaches no recursive rule is a regular language: its uses are replaced by its
    body and fused (english.gbnf's one-character rules become one terminal); a recursive rule
    stays a rule, with its regular references inlined."""
    g = 'root ::= word (" " word)*\nword ::= letter+\nletter ::= [a-z] | [A-Z]'
    text = Gbnf(g).to_lark(fuse=True)
    assert len(text.splitlines()) == 2 and "r_word" not in text and "r_letter" not in text, text
    for s, ok in [("ab Cd", True), ("ab", True), ("ab  cd", False), (" ab", False), ("a1", False)]:
        assert engine_accepts(g, s) == ok, s
    g = 'root ::= list\nlist ::= "[" ws (list ws)* "]"\nws ::= " "?'
    text = Gbnf(g).to_lark(fuse=True)
    assert "r_list:" in text and "r_ws" not in text, text
    for s, ok in [("[ [ ] ]", True), ("[[][]]", True), ("[ [ ]", False), ("[  ]", False)]:
        assert engine_accepts(g, s) == ok, s
