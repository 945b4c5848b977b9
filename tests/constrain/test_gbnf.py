"""GBNF -> Lark (trellis.constrain.frontends.gbnf): llama.cpp's grammar files convert, and the Lark text
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
from trellis.constrain.frontends.gbnf import Alt, Chars, Gbnf, Lit, Ref, Repeat, Seq, Tok, lark_name
from trellis.constrain.terminal_kinds import TokenRef

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

def xgrammar_acceptor(text: str, root: str = "root"):
    """``accepts(s)`` of the GBNF grammar ``text`` read by XGrammar (its matcher, not its masks)."""
    xgrammar = pytest.importorskip("xgrammar")
    # XGrammar's EBNF reader rejects an empty alternative (llama.cpp's json.gbnf: `ws ::= | " " ...`):
    # spell it as "" for XGrammar only.
    text = re.sub(r"::=(\s*)\|", r'::=\1"" |', text)
    grammar = xgrammar.Grammar.from_ebnf(text, root_rule_name=root)
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
    "token_unclosed": ('root ::= "a" <[12', 1, 14, "unclosed '<' of a token reference"),
    "token_bad_id": ("root ::= x\nx ::= <[1a]>", 2, 7, "expecting a token id in <[...]>"),
    "token_bang": ('root ::= !"a"', 1, 11, "expecting '<' after '!'"),
    "token_empty": ("root ::= <>", 1, 10, "empty token reference"),
    "missing_root": ('\n\nstart ::= "a"', 3, 1, "'root'"),
    "bad_escape": (r'root ::= "\q"', 1, 11, "unknown escape"),
    "short_hex": (r'root ::= "\x4"', 1, 11, "hex digits"),
    "unclosed_paren": ('root ::= ("a" | "b"', 1, 10, "unclosed '('"),
    "extra_paren": ('root ::= "a")', 1, 13, "')'"),
    "bar_first": ('| "a"\nroot ::= "b"', 1, 1, "expecting a rule name"),
    "no_assign": ('root = "a"', 1, 6, "'::='"),
    "max_below_min": ('root ::= "a"{3,1}', 1, 13, "max < min"),
    "too_many": ('root ::= "a"{2001}', 1, 13, "limit"),
    "empty_class": ('root ::= []', 1, 10, "empty character class"),
    "reversed_range": ('root ::= [z-a]', 1, 11, "reversed range"),
    "nothing_to_repeat": ('root ::= "" *', 1, 13, "nothing before '*'"),
    "leading_postfix": ('root ::= + "a"', 1, 10, "nothing before '+'"),
    "defined_twice": ('root ::= "a"\nroot ::= "b"', 2, 1, "defined twice"),
    "brace": ('root ::= "a"{x}', 1, 14, "integer"),
    # xgrammar's extensions: malformed, or with no GBNF meaning
    "minus_two": ('root ::= "a"{2,-2}', 1, 16, "expecting '}'"),
    "minus_one_lower": ('root ::= "a"{-1}', 1, 14, "integer"),
    "minus_one_alone": ('root ::= "a"{,-1}', 1, 15, "expecting '}'"),  # -1 only as a maximum, as in xgrammar
    "lookahead_then_more": ('root ::= x "c"\nx ::= "a" (= "b") "c"', 2, 19, "after the lookahead"),
    "lookahead_then_bar": ('root ::= x "c"\nx ::= "a" (= "b") | "c"', 2, 19, "after the lookahead"),
    "lookahead_next_line": ('root ::= x "c"\nx ::= "a" (= "b")\n  "d"', 3, 3, "after the lookahead"),
    "lookahead_twice": ('root ::= x "c"\nx ::= "a" (= "b") (= "c")', 2, 19, "second lookahead"),
    "lookahead_in_group": ('root ::= x "c"\nx ::= ("a" (= "b"))', 2, 12, "may only end a rule"),
    "lookahead_nested": ('root ::= x "c"\nx ::= "a" (= "b" (= "c"))', 2, 18, "may only end a rule"),
    "lookahead_empty": ('root ::= x "c"\nx ::= "a" (=)', 2, 11, "empty lookahead"),
    "lookahead_epsilon": ('root ::= x "c"\nx ::= "a" (= "")', 2, 11, "empty lookahead"),
    "lookahead_choices": ('root ::= x "c"\nx ::= "a" (= "b" | "c")', 2, 11, "choices in a lookahead"),
    "lookahead_unclosed": ('root ::= "a" (= "b"', 1, 14, "unclosed '(='"),
    "lookahead_undefined": ('root ::= x "c"\nx ::= "a" (= y)', 2, 14, "undefined rule 'y'"),
    "macro_tag_dispatch_exclude": ('root ::= "<" TagDispatch(("ab", b), excludes=("a",))\nb ::= "x"', 1, 47,
                                   "Exclude string must not be a prefix of trigger string: a"),
    "macro_tag_dispatch_pair": ('root ::= TagDispatch(("a", b, c))\nb ::= "x"', 1, 22, "must be a pair (tag, rule)"),
    "macro_tag_dispatch_rule": ('root ::= TagDispatch(("a", b))', 1, 28, "undefined rule 'b'"),
    "macro_tag_dispatch_named": ('root ::= TagDispatch(("a", b), loop=true)\nb ::= "x"', 1, 37,
                                 "Unknown named argument for TagDispatch: loop"),
    "macro_regex_word_boundary": ('root ::= Regex("a\\\\b")', 1, 16, "Word boundary assertion"),
    "macro_regex_args": ('root ::= Regex("a", "b")', 1, 10, "Regex expects exactly one string argument"),
    "macro_regex_flag": ('root ::= Regex("a", flags="x")', 1, 16, "flag 'x' is not supported"),
    "macro_regex_unclosed": ('root ::= Regex("a"', 1, 15, "unclosed '(' of a macro call"),
    "macro_token_empty": ('root ::= "a"\n  Token()', 2, 3, "Token() needs at least one token id"),
    "macro_exclude_token": ('root ::= ExcludeToken("a")', 1, 23, "must be non-negative integer token ids"),
    "macro_token_named": ("root ::= Token(1, x=2)", 1, 21, "does not accept named arguments"),
    "macro_token_tag_dispatch": ('root ::= TokenTagDispatch(("a", b))\nb ::= "x"', 1, 28,
                                 "A trigger must be a non-negative integer token id"),
    "macro_token_tag_dispatch_excludes": ('root ::= TokenTagDispatch(excludes=("a",))', 1, 36,
                                          "excludes must be a tuple of token ids"),
    "macro_substring_named": ('root ::= ("x" Substring("abc", a=true))', 1, 15, "does not accept named arguments"),
    "attributes": ('root ::= r\nr[max_tokens=4, lazy] ::= "a"+', 2, 3, "max_tokens is a budget of tokens"),
    "attributes_lazy": ('root ::= r\nr[capture, lazy] ::= "a"+ r', 2, 12, "rule 'r' with lazy must be regular"),
    "attributes_lazy_token": ('root ::= r\nr[lazy] ::= "a" Token(1)', 2, 3, "rule 'r' with lazy must be regular text"),
    "attributes_temperature": ('root[temperature=0.5] ::= "a"', 1, 6, "temperature is a per-rule sampling"),
    "root_rule_name": ('start ::= "a"', 1, 1, "no 'root' rule"),
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


# --- xgrammar's EBNF extensions (issue 58: GBNF as vLLM users write it) ---------------------------
#
# Each is text llama.cpp refuses; trellis gives it the language of xgrammar's matcher. Checked on
# strings (xgrammar_acceptor) and on masks along walks over a small vocabulary (xgrammar's own
# masks, as in test_earley.py::test_gbnf_masks_equal_xgrammar).

def engine_compile(gbnf: str, vocab, root: str = "root"):
    from trellis.constrain import compile

    return compile(Gbnf(gbnf, root=root), vocab, cache=False)


def small_vocab(gbnf: str, rng: random.Random, extra=(), n: int = 150, lone_bytes: bool = True):
    """Bytes 0x20-0x7e, \\n, \\t, ``extra``, random 2-4 byte tokens over the grammar's characters and
    some punctuation, a few non-ASCII tokens (``lone_bytes``: also a lone lead and a lone
    continuation byte) and EOS (last)."""
    from trellis.tokens import Vocabulary

    quoted = re.findall(r'"((?:[^"\\]|\\.)*)"', gbnf)
    alphabet = sorted(set("".join(quoted)) | set(' ()[]{},:"\n'))
    toks = [bytes([b]) for b in range(0x20, 0x7F)] + [b"\n", b"\t"] + list(extra)
    toks += ["".join(rng.choice(alphabet) for _ in range(rng.randint(2, 4))).encode() for _ in range(n)]
    toks += ["é".encode(), "日本".encode()] + ([b"\xc3", b"\xa9"] if lone_bytes else [])
    toks = list(dict.fromkeys(toks)) + [b""]
    return Vocabulary(tuple(toks), eos=frozenset([len(toks) - 1]))


def assert_masks_equal_xgrammar(gbnf: str, extra=(), walks: int = 5, steps: int = 20, root: str = "root",
                                lone_bytes: bool = True) -> int:
    """Along random walks (tokens from trellis' masks), every mask of trellis equals xgrammar's for
    the same text; returns the number of masks compared. ``lone_bytes=False`` leaves out tokens
    that can make text that is not UTF-8 (xgrammar's TagDispatch free text admits those bytes)."""
    import numpy as np

    xgrammar = pytest.importorskip("xgrammar")
    from trellis.integrations.xgrammar import XGrammarConstraint, tokenizer_info
    from trellis.mask import allocate_bitmask, bitmask_to_bool

    rng = random.Random(gbnf)
    v = small_vocab(gbnf, rng, extra, lone_bytes=lone_bytes)
    n, eos = len(v.tokens), len(v.tokens) - 1
    c = engine_compile(gbnf, v, root)
    compiler = xgrammar.GrammarCompiler(tokenizer_info(v), max_threads=1, cache_enabled=False)
    x = XGrammarConstraint(compiler.compile_grammar(xgrammar.Grammar.from_ebnf(gbnf, root_rule_name=root)), v)
    row = allocate_bitmask(1, n)
    checked = 0
    for _ in range(walks):
        s, xs, doc = c.start(), x.start(), b""
        for _ in range(steps):
            mine = np.unpackbits(c.mask_array(s).view(np.uint8), bitorder="little")[:n].astype(bool)
            x.fill_mask(xs, row[0])
            theirs = bitmask_to_bool(row, n)[0].numpy()
            wrong = np.flatnonzero(mine != theirs)
            assert not len(wrong), (gbnf, doc, [(v.tokens[i], bool(mine[i])) for i in wrong[:8]])
            checked += 1
            t = int(rng.choice(np.flatnonzero(mine)))
            if t == eos:
                break
            s, xs, doc = c.advance(s, t), x.advance(xs, t), doc + v.tokens[t]
    return checked


def assert_strings_agree_with_xgrammar(gbnf: str, strings, root: str = "root") -> set[str]:
    """Every string gets xgrammar's matcher's answer from the engine (compiled for single bytes)
    and from Lark; returns the accepted ones."""
    from tests.constrain.test_grammars import accepts as c_accepts, byte_vocab

    xg = xgrammar_acceptor(gbnf, root)
    c = engine_compile(gbnf, byte_vocab(), root)
    parser = lark_parser(Gbnf(gbnf, root=root).to_lark())
    got = set()
    for s in strings:
        want = xg(s)
        assert c_accepts(c, s.encode()) == want, (gbnf, s, want)
        assert lark_accepts(parser, s) == want, (gbnf, s, want)
        if want:
            got.add(s)
    return got


XGRAMMAR_ESCAPES = r'root ::= "\/\?\'\a\b\f\v\0\e" [\/\?\'\a\b\f\v\0\e]+ [\^\$\.\*\+\(\)\{\}\|]* "\01"'


def test_xgrammar_escapes():
    """xgrammar's escapes that llama.cpp refuses: ``\\/ \\? \\' \\a \\b \\f \\v \\0 \\e`` in literals and
    classes, the regex escapes ``\\^ \\$ \\. \\* \\+ \\( \\) \\{ \\} \\|`` in classes; ``\\0`` is one NUL."""
    head = "/?'\a\b\f\v\0\x1b"
    got = assert_strings_agree_with_xgrammar(XGRAMMAR_ESCAPES, [
        head + "/\x001", head + "\x1b\a^$.*+(){}|\x001", head + "?'\b\f\v\x001", head + "/\x01", head + "\x001",
        head + "/x\x001", head + "/0\x001", head + "/\\\x001", head + "/e\x001", head + "/\x00" + "\x01"])
    assert got == {head + "/\x001", head + "\x1b\a^$.*+(){}|\x001", head + "?'\b\f\v\x001"}
    with pytest.raises(GrammarError, match="unknown escape"):  # the regex escapes are for classes only
        Gbnf(r'root ::= "\^"').rules()


def test_xgrammar_escapes_masks_equal_xgrammar():
    controls = tuple(bytes([b]) for b in (0x07, 0x08, 0x0C, 0x0B, 0x00, 0x1B))
    assert assert_masks_equal_xgrammar(XGRAMMAR_ESCAPES, controls) >= 20


def test_hex_escape_stays_llama_cpp():
    """``\\x`` reads exactly two hex digits, as in llama.cpp (xgrammar reads them greedily: there
    ``"\\x41B"`` is U+041B)."""
    assert language(r'root ::= "\x41B"', ["AB", "\u041b"]) == {"AB"}
    assert not xgrammar_acceptor(r'root ::= "\x41B"')("AB")  # the documented difference


LOOKAHEAD = ('root ::= "[" item ("," item)* "]"\n'
             'item ::= num | str\n'
             'num ::= [0-9]+ (= [,\\]])\n'  # true: a number is always followed by , or ]
             'str ::= "\\"" [a-z]* "\\"" (= sep)\n'  # true too (a choice: through a rule, as xgrammar wants)
             'sep ::= "," | "]"\n')


def test_lookahead_assertion_is_parsed_and_deleted():
    """``(= ...)`` at the end of a rule, after all its alternatives, asserts what follows the rule.
    xgrammar's matcher never reads it: the language is the grammar's without it."""
    without = re.sub(r" \(= .*\)$", "", LOOKAHEAD, flags=re.M)
    assert "(=" not in without and Gbnf(LOOKAHEAD).rules() == Gbnf(without).rules()
    assert Gbnf(LOOKAHEAD).to_lark(fuse=True) == Gbnf(without).to_lark(fuse=True)
    assert language('root ::= x "c"\nx ::= "a" | "b" (= "c")', ["ac", "bc", "a", "c"]) == {"ac", "bc"}
    got = assert_strings_agree_with_xgrammar(LOOKAHEAD, ["[1]", '[1,"ab",22]', '["a"]', "[1", "[]", '[1,]', '["A"]'])
    assert got == {"[1]", '[1,"ab",22]', '["a"]'}
    # layout: a comment after it, the next rule on the next line, no blank after (=
    g = 'root ::= x "b"\nx ::= "a" (="b") # asserted\n\n# c\ny ::= "q"'
    assert assert_strings_agree_with_xgrammar(g, ["ab", "a", "q"]) == {"ab"}


def test_lookahead_masks_equal_xgrammar():
    """With true assertions xgrammar's masks agree with its matcher, and with trellis'."""
    assert assert_masks_equal_xgrammar(LOOKAHEAD) >= 20


def test_false_lookahead_gives_the_lookahead_free_language():
    """A false assertion (``r`` is always followed by ``c``, never ``b``): trellis' language and masks
    are the grammar's without the lookahead, which is what xgrammar's matcher accepts. (xgrammar's
    masks trust the assertion and disagree with its own matcher: DIALECT.md section 6.)"""
    import numpy as np

    xgrammar = pytest.importorskip("xgrammar")
    from trellis.tokens import Vocabulary

    for g in ('root ::= "x" r "c"\nr ::= "a" | "a" r (= "b")', 'root ::= "x" r "c"\nr ::= "a" | "a" r (= "bz")'):
        plain = re.sub(r" \(= .*\)", "", g)
        strings = ["xac", "xaac", "xab", "xa", "xabz", "xc"]
        assert assert_strings_agree_with_xgrammar(g, strings) == language(plain, strings) == {"xac", "xaac"}
        toks = (b"x", b"a", b"b", b"c", b"ab", b"ac", b"aa", b"")
        v = Vocabulary(toks, eos=frozenset([len(toks) - 1]))
        c = engine_compile(g, v)
        s = c.advance(c.start(), 0)
        mine = np.unpackbits(c.mask_array(s).view(np.uint8), bitorder="little")[:len(toks)].astype(bool)
        compiled = xgrammar.GrammarCompiler(xgrammar.TokenizerInfo([]), cache_enabled=False).compile_grammar(
            xgrammar.Grammar.from_ebnf(g))

        def matcher_allows(tok: bytes) -> bool:  # xgrammar's matcher alone, no mask
            m = xgrammar.GrammarMatcher(compiled, terminate_without_stop_token=True)
            return m.accept_string("x") and bool(tok) and m.accept_string(tok)

        assert [t for t, ok in zip(toks, mine) if ok] == [t for t in toks if matcher_allows(t)] == [b"a", b"ac", b"aa"]


def test_rules_continue_across_lines():
    """A newline followed by anything but the next rule (``name ::=``) or the end continues the rule,
    as in xgrammar (llama.cpp refuses it); a newline before the next rule still ends it."""
    cases = [
        ('root ::= "a"\n  | "b"', ["a", "b", "ab"], {"a", "b"}),
        ('root ::= "a"\n  "b"\n\n  "c"', ["abc", "a", "ab"], {"abc"}),
        ('root ::= "a" | "b"\n| "c"\nx ::= "d"', ["a", "b", "c", "d"], {"a", "b", "c"}),
        ('root ::= "a" # first\n  # a comment line\n  | x\nx ::= "b"\n  "c"', ["a", "bc", "b"], {"a", "bc"}),
        ('root ::= "a"\n*', ["", "aaa"], {"", "aaa"}),
        ('root ::= "a"\n  {2}\n  "b"{1,\n -1}', ["aab", "aabbb", "ab"], {"aab", "aabbb"}),
        ('root ::= "a"\nb\n::= "c"', ["a", "ac", "c"], {"a"}),  # a name alone on its line, then ::=
        ('root ::= x\n  x\nx ::= "a"', ["aa", "a"], {"aa"}),
    ]
    for g, strings, want in cases:
        assert assert_strings_agree_with_xgrammar(g, strings) == want, g
    assert assert_masks_equal_xgrammar('root ::= "[" item\n  ("," item)*\n  "]"\nitem ::= "a"\n  | "bc"', walks=3) >= 10


def test_any_char_class_and_minus_one_bound():
    """xgrammar's ``[^]`` (any character, newline included) and ``{n,-1}`` (``{n,}``)."""
    got = assert_strings_agree_with_xgrammar('root ::= [^] "."', ["a.", "\n.", "😀.", ".", "ab."])
    assert got == {"a.", "\n.", "😀."}
    assert assert_strings_agree_with_xgrammar('root ::= "<" [^]* ">"', ["<>", "<a\n>>", "<"]) == {"<>", "<a\n>>"}
    for rep, counts in [("{2,-1}", {2, 3, 4, 5}), ("{ 0 , -1 }", {0, 1, 2, 3, 4, 5}), ("{1, -1}", {1, 2, 3, 4, 5})]:
        g = f'root ::= ("a" | "bc"){rep}'
        assert {n for n in range(6) if accepts(g, "a" * n)} == counts
        assert_strings_agree_with_xgrammar(g, ["a" * n for n in range(6)] + ["bca", "abcbc"])
    with pytest.raises(GrammarError, match="empty character class"):  # xgrammar: no character; llama.cpp: ""
        Gbnf("root ::= []").rules()


def test_root_rule_name():
    """``Gbnf(text, root=name)``: xgrammar's ``root_rule_name``; a rule named root is then an
    ordinary rule."""
    g = 'start ::= "a" root | "b"\nroot ::= "c" start?'
    assert assert_strings_agree_with_xgrammar(g, ["b", "ac", "acb", "acac", "c", "cb"], root="start") == \
        {"b", "ac", "acb", "acac"}
    assert Gbnf(g, root="start").to_lark(fuse=True).startswith("start: r_start\n")
    assert assert_masks_equal_xgrammar(g, root="start") >= 5


def test_macro_names_defined_as_rules_keep_llama_cpp_meaning():
    """A grammar that defines a rule named like an xgrammar macro means what llama.cpp reads: a
    reference (xgrammar would read ``Regex("a")`` as its macro); undefined, the name is refused as
    the macro."""
    assert language('root ::= Regex ("a")\nRegex ::= "x"', ["xa", "a"]) == {"xa"}
    assert language('root ::= Regex ("a")', ["xa", "a"]) == {"a"}  # undefined: xgrammar's macro
    assert Gbnf('root ::= Token (1)').rules()["root"] == Alt((Seq((Tok(TokenRef.of([1])),)),))


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


def test_linear_recursion_and_single_use_rules_fuse_into_one_terminal():
    """Issue 58: ``characters ::= "" | character characters`` (JSON strings as GBNF users write
    them) is ``character*``; a regular rule used once is inlined whatever its size; so the string
    is one terminal (a mask inside it took ~270 ms stepping token rests through the chart byte by
    byte), with the same language as xgrammar's reading of the grammar text."""
    g = ('root ::= "[" string ("," string)* "]" tail\n'
         'string ::= "\\"" characters "\\""\n'
         'characters ::= "" | character characters\n'
         'character ::= [^"\\\\] | "\\\\" escape\n'
         'escape ::= ["\\\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F]\n'
         'tail ::= tail "!" | "."\n')
    lark_text = Gbnf(g).to_lark(fuse=True)
    assert "character" not in lark_text and "escape" not in lark_text and "tail" not in lark_text, lark_text
    assert re.search(r"^r_string: /[^ ]*/$", lark_text, re.M), lark_text  # one terminal
    _engine_lark_and_xgrammar_agree(g, ['["a"].', '["a\\\\n","\\\\u00e9x"].!!', '[""].', '["\\\\q"].', '["a].', '["a"]!',
                                        '["a","b"].!'], '"\\\\[],.!aun0', seed=58)


def _engine_lark_and_xgrammar_agree(g: str, docs: list[str], alphabet: str, *, seed: int) -> None:
    """The engine (fused text), Lark (plain text) and xgrammar give each document and its
    one-character mutants the same answer."""
    xg = xgrammar_acceptor(g)
    rng = random.Random(seed)
    for d in list(docs):
        docs = docs + mutants(d, rng, alphabet)
    for d in docs:
        assert engine_accepts(g, d) == accepts(g, d) == xg(d), d


def test_a_loop_whose_references_are_regular_fuses_into_one_terminal():
    """Issue 58: ``Name ::= NameStartChar (NameChar)*`` with 14-alternative classes (XML 1.0 as GBNF):
    left as rules, every character of a name was a terminal and masks inside names or attribute
    values ran past the work bound; a loop that becomes rule-free when its references are inlined
    (up to ``_INLINE_IN_LOOP`` positions) is one terminal. A loop that keeps a rule is left alone."""
    classes = " | ".join(f"[{chr(a)}-{chr(a + 2)}]" for a in range(ord("a"), ord("a") + 30, 3))
    g = (f'root ::= "<" name attr* ">"\nname ::= start-char name-char*\nstart-char ::= {classes}\n'
         f'name-char ::= start-char | [0-9] | "-"\nattr ::= " " name "=\\"" ([^<&"] | ref)* "\\""\n'
         f'ref ::= "&" name ";"\n')
    lark_text = Gbnf(g).to_lark(fuse=True)
    assert "r_name_char" not in lark_text and "r_ref" not in lark_text, lark_text
    kept = Gbnf('root ::= "[" (item ("," item)*)? "]"\nitem ::= "x" | root\n').to_lark(fuse=True)
    assert '("," r_item)*' in kept, kept  # its loop keeps a recursive rule: no inlining into it
    _engine_lark_and_xgrammar_agree(g, ['<ab>', '<a1-b c="x&ab;y">', '<a c="&;">', '<a c="<">', '<1a>',
                                        '<a c="x" d="">', '<a-->'], '<>="&;a1- z', seed=5)
