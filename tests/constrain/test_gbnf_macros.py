"""xgrammar's EBNF macros ``Regex``, ``Substring`` and ``TagDispatch`` and its capture rule options
(issue 58: GBNF as vLLM users write it): the language xgrammar's matcher gives them, checked on
strings (xgrammar's matcher, the engine and Lark agree) and on masks along walks (xgrammar's own
masks), and the dialect's refusals."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from tests.constrain.test_gbnf import (assert_masks_equal_xgrammar, assert_strings_agree_with_xgrammar,
                                       language)
from trellis.constrain.errors import GrammarError
from trellis.constrain.frontends.gbnf import Gbnf
from trellis.constrain.frontends.xgrammar_regex import MAXC, NOTHING, RegexDialectError, translate
from trellis.constrain.frontends.xgrammar_tags import automaton, languages


def to_python(node) -> str:
    """Python's spelling of an ``xgrammar_regex`` AST (the checks' oracle: Python's ``re`` reads it)."""
    kind = node[0]
    if kind == "set":
        if node[1] == ((0, MAXC),):
            return "(?s:.)"
        return "[" + "".join(re.escape(chr(lo)) + ("" if lo == hi else "-" + re.escape(chr(hi)))
                             for lo, hi in node[1]) + "]"
    if kind == "rep":
        hi = "" if node[3] is None else node[3]
        return f"(?:{to_python(node[1])}){{{node[2]},{hi}}}"
    parts = [f"(?:{to_python(x)})" for x in node[1]]
    return "".join(parts) if kind == "cat" else "|".join(parts)


def strings(alphabet: str, max_len: int):
    for n in range(max_len + 1):
        for t in itertools.product(alphabet, repeat=n):
            yield "".join(t)


# --- Regex ---------------------------------------------------------------------------------------

REGEXES = [
    ('Regex("[0-9]{2}$", json_string=true)', "09a", 3),
    (r'Regex("\\d+\\.\\d+")', "1.a", 4),
    (r'Regex("\\w\\s\\S")', "a_ \t\n!", 3),
    ('Regex("(?i)a[b-c]+")', "aAbBcCd", 3),
    ('Regex("(?i)[^k]")', "kKa", 1),
    ('Regex("a.b")', "a\nb", 3),
    ('Regex("a.b", flags="")', "a\nb", 3),
    ('Regex("a.b", flags="s")', "a\nb", 3),
    ('Regex("a.b", flags="i")', "aAbB\n", 3),
    ('Regex("^ab$")', "ab$^", 3),
    ('Regex("a(?=b)c")', "abc", 3),
    ('Regex("a(?!b)c")', "abc", 3),
    ('Regex("(?<name>ab)+c?")', "abc", 5),
    ('Regex("a+?b|b{2,3}?")', "ab", 4),
    ('Regex("(a|)b")', "ab", 3),
    ('Regex("a|")', "ab", 2),
    ('Regex("a**b")', "ab", 3),
    ('Regex("[^a-c]x", json_string=true)', 'ab"\\x\n', 2),
    (r'Regex("x\\cAy\\x41\\u0042\\u{43}")', "xyABC\x01", 6),
    ('Regex("a{2,}")', "ab", 4),
]


@pytest.mark.parametrize("macro,alphabet,max_len", REGEXES, ids=[r[0] for r in REGEXES])
def test_regex_macro_agrees_with_xgrammar_on_strings(macro, alphabet, max_len):
    """Every string up to ``max_len`` over ``alphabet``: xgrammar's matcher, the engine and Lark agree."""
    g = f'root ::= "<" {macro} ">"'
    got = assert_strings_agree_with_xgrammar(g, ["<" + s + ">" for s in strings(alphabet, max_len)])
    assert got  # the language is not empty


@pytest.mark.parametrize("macro", [
    'Regex("([^\\\\x00\\"&<>]|&amp;|&lt;|&gt;|&quot;)+")',
    'Regex("\\\\S+", json_string=true) "!" Regex("[a-f]{2,3}", flags="i")',
    'Regex("(ab){2,4000}c")',
])
def test_regex_macro_masks_equal_xgrammar(macro):
    assert assert_masks_equal_xgrammar(f'root ::= "<" {macro} ">"') >= 5


def test_regex_dialect_differs_from_python_where_xgrammar_says():
    """The translation spells xgrammar's meaning out: ASCII \\d \\w \\s, ASCII-only case folding, and
    '.' with newline unless ``flags`` is given."""
    def lang(pattern, **kw):
        return re.compile(to_python(translate(pattern, **kw)))

    assert lang(r"\d").fullmatch("7") and not lang(r"\d").fullmatch("٣")  # Arabic-Indic 3: Python's \d has it
    assert lang(r"\w").fullmatch("_") and not lang(r"\w").fullmatch("é")
    assert lang(r"\s").fullmatch("\x0b") and not lang(r"\s").fullmatch("\u00a0")
    assert lang("(?i)k").fullmatch("K") and not lang("(?i)k").fullmatch("\u212a")  # Kelvin sign: re.I folds it
    assert lang("a.b").fullmatch("a\nb") and not lang("a.b", flags="").fullmatch("a\nb")
    assert lang(".", json_string=True).fullmatch("x") and not lang(".", json_string=True).fullmatch('"')
    assert translate('"', json_string=True) == NOTHING


def test_nullable_patterns_keep_their_language():
    """Lark refuses terminals that match "": a nullable macro is written as its non-empty part, made
    optional (``gbnf_fusion``); the engine's language is the pattern's, the empty string included."""
    for pattern in ["a*", "(a|)b?", "a**", "(ab)?c?", "((a)?)*"]:
        full = re.compile(to_python(translate(pattern)))
        assert full.fullmatch("")
        docs = ["<" + s + ">" for s in strings("abc", 4)]
        assert language(f'root ::= "<" Regex("{pattern}") ">"', docs) == {d for d in docs if full.fullmatch(d[1:-1])}


@pytest.mark.parametrize("pattern,words", [
    (r"a\b", "Word boundary"), (r"\p{L}", "Unicode property"), (r"(a)\1", "Backreference"),
    ("(?<=a)b", "Lookbehind"), ("[]", "Empty character class"), ("[^]", "Empty character class"),
    (r"\uZZ", "four hexadecimal"), (r"\x4", "two hexadecimal"), (r"\u{110000}", "beyond the Unicode range"),
    ("+a", "nothing to repeat"), ("a{2,1}", "larger than the upper bound"), ("(a", "not closed"),
    ("a)", "Unmatched ')'"), ("(?x)a", "Unsupported group modifier"),
])
def test_regex_refusals_are_xgrammars(pattern, words):
    with pytest.raises(RegexDialectError, match=re.escape(words)):
        translate(pattern)
    with pytest.raises(GrammarError, match=re.escape(words)):
        Gbnf(f'root ::= Regex("{pattern.replace(chr(92), chr(92) * 2)}")').rules()


# --- Substring -----------------------------------------------------------------------------------

@pytest.mark.parametrize("chunks", [("abc", "de", "fg"), ("a", "", "b", "a", "b"), ("ab", "a", "b", "ba"), ()])
def test_substring_macro(chunks):
    """Every run of consecutive whole chunks, the empty one included (xgrammar's docs' example:
    ``"abcde"`` yes, ``"cde"`` no)."""
    args = ", ".join(f'"{c}"' for c in chunks)
    g = f'root ::= "<" Substring({args}) ">"'
    want = {"".join(chunks[i:j]) for i in range(len(chunks) + 1) for j in range(i, len(chunks) + 1)}
    got = assert_strings_agree_with_xgrammar(g, ["<" + s + ">" for s in strings("abcdefg", 4)])
    assert got == {"<" + s + ">" for s in want if len(s) <= 4}
    if chunks:
        assert assert_masks_equal_xgrammar(g) >= 3


# --- TagDispatch ---------------------------------------------------------------------------------

def _walk(edges, tags, excludes, s):
    alphabet = set("".join([*tags, *excludes]))
    u = 0
    for ch in s:
        v = edges[u].get(ord(ch)) if ch in alphabet else edges[u].get(None)
        if v is None:
            return None
        u = v
    return u


def test_tag_dispatch_languages_are_the_automatons():
    """``free`` and ``lead`` (read off by state elimination) are exactly the automaton's languages,
    on random tags and excludes over a small alphabet (overlapping tags, tags inside tags)."""
    rng = random.Random(0)
    for _ in range(60):
        tags = ["".join(rng.choice("ab<") for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
        excludes = ["".join(rng.choice("ab<") for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(0, 2))]
        excludes = [x for x in excludes if not any(t.startswith(x) for t in tags)]
        edges, _, tag_end, dead = automaton(tags, excludes)
        free, lead = languages(tags, excludes)
        free_re = None if free == NOTHING else re.compile(to_python(free))
        lead_re = {i: None if lead[i] == NOTHING else re.compile(to_python(lead[i])) for i in lead}
        ends = set(tag_end.values()) | dead
        for s in strings("ab<x", 5):
            u = _walk(edges, tags, excludes, s)
            assert bool(free_re and free_re.fullmatch(s)) == (u is not None and u not in ends), (tags, excludes, s)
            for i, e in tag_end.items():
                assert bool(lead_re[i] and lead_re[i].fullmatch(s)) == (u == e), (tags, excludes, s, i)


TAG_DISPATCH = [
    # xgrammar's docs: free text, dispatches, free text again
    'root ::= TagDispatch(("<tool>", tool), ("<code>", code))\ntool ::= "{" [^}]* "}"\ncode ::= "`" [^`]* "`"',
    # no loop; an outer stop tag kept out of the free text
    'root ::= body "</a>"\nbody ::= TagDispatch(("<t>", t), loop_after_dispatch=false, excludes=("</a>",))\n'
    't ::= [0-9]+',
    # tags inside tags: "b" is never seen inside "abc"; "ab" and "abd" share a prefix
    'root ::= TagDispatch(("b", x), ("abc", y), ("ab", x), ("abd", y))\nx ::= "1"\ny ::= "2"',
    # no tags at all: text without the excludes
    'root ::= TagDispatch(excludes=("ab", "ba"))',
]


@pytest.mark.parametrize("g", TAG_DISPATCH)
def test_tag_dispatch_agrees_with_xgrammar(g):
    alphabet = sorted(set("".join(re.findall(r'"([^"\\]*)"', g))) - set("^[]") | {"x"})
    docs = list(strings("".join(alphabet[:5]), 3))
    rng = random.Random(g)
    quoted = [q for q in re.findall(r'"([^"\\]*)"', g) if len(q) > 1]
    docs += ["".join(rng.choice(quoted + alphabet) for _ in range(rng.randint(1, 6))) for _ in range(200)]
    got = assert_strings_agree_with_xgrammar(g, docs)
    assert got
    # masks over text tokens (xgrammar's free text also admits bytes that are not UTF-8: trellis'
    # languages are text, so tokens that make non-UTF-8 text are left out of this comparison)
    assert assert_masks_equal_xgrammar(g, lone_bytes=False) >= 5


def test_tag_dispatch_excludes_need_not_be_trigger_prefixes():
    with pytest.raises(GrammarError, match="must not be a prefix of trigger"):
        Gbnf('root ::= TagDispatch(("<tool>", t), excludes=("<to",))\nt ::= "x"').rules()


# --- rule options ----------------------------------------------------------------------------------

def test_capture_options_are_accepted_and_the_others_refused_by_name():
    g = 'root ::= item ("," item)*\nitem[capture="number"] ::= [0-9]+'
    assert assert_strings_agree_with_xgrammar(g, ["1,22", "1,", "a"]) == {"1,22"}
    assert language('root ::= a\na[capture, capture_hidden_stop_bytes=2, stop_capture="s"] ::= "x"', ["x"]) == {"x"}
    for option in ("max_tokens=4", "temperature=0.5"):
        with pytest.raises(GrammarError, match=f"{option.split('=')[0]} is"):
            Gbnf(f'root ::= a\na[capture, {option}] ::= "x"').rules()


# --- rule options: lazy and max_chars ----------------------------------------------------------

MAX_CHARS = [
    ('root ::= value ">"\nvalue[max_chars=2] ::= [^]*', "a\u4e2d>", 4),  # xgrammar's tests' form
    ('root ::= s\ns[max_chars=2] ::= Substring("a", "b", "c")', "abc", 4),
    ('root[max_chars=0] ::= [a]*', "ab", 3),
    ('root ::= v ">"\nv[max_chars=1] ::= "ab" | "a" "bc"* "d"', "abcd>", 6),  # spent where it cannot end
    ('root ::= v v\nv[max_chars=3] ::= [a-c]+', "ab.", 7),
]


def _random_body(rng: random.Random, atoms: list[str]) -> str:
    """A random regular rule body: one to three atoms (sometimes a choice of two), each repeated
    or not."""
    parts = []
    for _ in range(rng.randint(1, 3)):
        a = rng.choice(atoms)
        if rng.random() < 0.3:
            a = f"({a} | {rng.choice(atoms)})"
        parts.append(a + rng.choice(["", "", "*", "+", "?", "{1,2}"]))
    return " ".join(parts)


LAZY = [
    ('root ::= "<" r ">"\nr[lazy] ::= [a-z] [a-z]*', "ab<>", 5),  # xgrammar's docs: one letter
    ('root ::= "<" r rest\nr[lazy] ::= [a-z]+\nrest ::= [a-z]+', "ab<", 5),
    ('root ::= r "z"\nr[lazy] ::= Substring("ab")', "abz", 4),  # can match "": commits to it
    ('root ::= "a" value "z"\nvalue[lazy] ::= "x"+', "axz", 5),
    ('root ::= r "z"\nr[capture="i", lazy] ::= Regex("[a-z]*!")', "ab!z", 5),
    ('root ::= "<" r ">"\nr[lazy] ::= ((x))\nx ::= (([a-z] x) | ([a-z]))', "ab<>", 5),  # a repeat
    ('root ::= r "-" r\nr[lazy] ::= "a" "b"* "c" | "ab"', "abc-", 7),
]


@pytest.mark.parametrize("g, alphabet, max_len", LAZY + MAX_CHARS)
def test_rule_options_agree_with_xgrammar(g, alphabet, max_len):
    """xgrammar's ``lazy`` (committed-shortest: the occurrence ends at the first point its body can)
    and ``max_chars=N`` (at most N code points, unless the body cannot end there): every string up
    to ``max_len``, xgrammar's matcher and the engine agree, and so do the masks."""
    from tests.constrain.test_gbnf import engine_compile, xgrammar_acceptor
    from tests.constrain.test_grammars import accepts, byte_vocab

    xg, c = xgrammar_acceptor(g), engine_compile(g, byte_vocab())
    got = {s for s in strings(alphabet, max_len) if accepts(c, s.encode())}
    assert got == {s for s in strings(alphabet, max_len) if xg(s)}
    assert got
    assert assert_masks_equal_xgrammar(g) >= 3


def test_a_lazy_rule_keeps_the_matches_no_shorter_match_begins():
    """Random regular bodies: the lazy rule's language is exactly the body's strings (Python's
    ``re`` on the body's regex) that have no proper prefix in it."""
    from tests.constrain.test_grammars import accepts, byte_vocab
    from trellis.constrain import compile
    from trellis.constrain.frontends.gbnf_fusion import regex_text

    rng = random.Random(5)
    atoms = ['"a"', '"b"', '"ab"', "[ab]", '"ba"']
    for _ in range(40):
        body = _random_body(rng, atoms)
        g = f'root ::= "<" r ">"\nr[lazy] ::= {body}'
        body = Gbnf(g.replace("[lazy]", "")).rules()["r"]
        rx = re.compile(regex_text(body))
        c = compile(Gbnf(g), byte_vocab(), cache=False)
        for w in strings("ab", 5):
            first = bool(rx.fullmatch(w)) and not any(rx.fullmatch(w[:k]) for k in range(len(w)))
            if rx.fullmatch(""):
                first = w == ""  # a body that matches "" commits to it
            assert accepts(c, f"<{w}>".encode()) == first, (g, w)


# --- max_chars: its definition, and where xgrammar is best-effort ----------------------------------



def test_max_chars_keeps_what_its_definition_keeps():
    """Random regular bodies and budgets: the rule's language is exactly the body's strings
    (Python's ``re``) of at most N code points, and the longer ones no prefix of N or more code
    points of which is in the body's language (xgrammar's "earliest valid boundary")."""
    from tests.constrain.test_grammars import accepts, byte_vocab
    from trellis.constrain import compile
    from trellis.constrain.frontends.gbnf_fusion import regex_text

    rng = random.Random(7)
    atoms = ['"a"', '"b"', '"ab"', "[ab]", '"\u00e9"', '"ba"']
    for _ in range(40):
        body = _random_body(rng, atoms)
        n = rng.randint(0, 4)
        g = f'root ::= "<" r ">"\nr[max_chars={n}] ::= {body}'
        rx = re.compile(regex_text(Gbnf(g.replace(f"[max_chars={n}]", "")).rules()["r"]))
        c = compile(Gbnf(g), byte_vocab(), cache=False)
        for w in strings("ab\u00e9", 6):
            want = bool(rx.fullmatch(w)) and (len(w) <= n or not any(rx.fullmatch(w[:k]) for k in range(n, len(w))))
            assert accepts(c, f"<{w}>".encode()) == want, (g, w)


def test_max_chars_where_xgrammar_is_best_effort():
    """``v v`` with ``v[max_chars=3] ::= [a-c]+ "."?``: each ``v`` can end after 3 characters, so
    it must (xgrammar's docs: the budget forces the end where the body can end), and no sentence
    has more than 6 characters. xgrammar 0.2.9's matcher accepts ``aaaaaaa`` and longer (its budget
    is best-effort for this body: alone, ``v`` refuses ``aaaa`` as it should); trellis keeps the
    definition."""
    from tests.constrain.test_gbnf import engine_compile, xgrammar_acceptor
    from tests.constrain.test_grammars import accepts, byte_vocab

    g = 'root ::= v v\nv[max_chars=3] ::= [a-c]+ "."?'
    c = engine_compile(g, byte_vocab())
    assert accepts(c, b"aa.aa.") and accepts(c, b"aaaaaa") and not accepts(c, b"aaaaaaa")
    assert not accepts(c, b"aaa.a")  # "aaa" could end: its budget is spent
    xg = xgrammar_acceptor(g)
    assert xg("aaaaaaa") and not xg("aaa|")  # (pinned: change this if xgrammar changes)


def test_max_chars_refusals():
    with pytest.raises(GrammarError, match="max_chars must be an integer"):
        Gbnf('root ::= a\na[max_chars=-1] ::= "x"').rules()
    with pytest.raises(GrammarError, match="must be regular"):
        Gbnf('root ::= a\na[max_chars=3] ::= "x" a | "y" a "z" | ""').rules()
    from tests.constrain.test_grammars import byte_vocab
    from trellis.constrain import compile

    with pytest.raises(GrammarError, match="max_chars=2147483647 over a body"):
        compile(Gbnf("root[max_chars=2147483647] ::= [a]*"), byte_vocab(), cache=False)


# --- fuzzing against the installed xgrammar ---------------------------------------------------------
#
# Random macros, random strings, xgrammar's matcher as the judge: these found that xgrammar 0.2.9
# kills text where an exclude ends inside a longer trie path (the snapshot's builder does not).

def _fuzz(make, alphabet: str, grammars: int, strings: int, seed: int) -> tuple[int, int]:
    from tests.constrain.test_gbnf import engine_compile, xgrammar_acceptor
    from tests.constrain.test_grammars import accepts as c_accepts, byte_vocab

    rng = random.Random(seed)
    checked = accepted = 0
    for _ in range(grammars):
        g = make(rng)
        try:
            xg = xgrammar_acceptor(g)
        except Exception:  # noqa: BLE001 - xgrammar refuses it: nothing to compare
            continue
        c = engine_compile(g, byte_vocab())
        for _ in range(strings):
            doc = "<" + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))) + ">"
            want = xg(doc)
            assert c_accepts(c, doc.encode()) == want, (g, doc, want)
            checked += 1
            accepted += want
    return checked, accepted


_ATOMS = ["a", "b", "\\\\d", "\\\\w", "\\\\s", "\\\\S", ".", "[ab]", "[^a]", "[a-c]", "\\\\.", "\\\\x41", "é",
          "[\\\\d_]", "[^\\\\s]"]


def _random_regex(rng: random.Random, depth: int = 0) -> str:
    r = rng.random()
    if depth > 3 or r < 0.35:
        return rng.choice(_ATOMS)
    if r < 0.55:
        return _random_regex(rng, depth + 1) + _random_regex(rng, depth + 1)
    if r < 0.7:
        return f"({_random_regex(rng, depth + 1)}|{_random_regex(rng, depth + 1)})"
    if r < 0.85:
        return f"({_random_regex(rng, depth + 1)})" + rng.choice(["*", "+", "?", "{2}", "{1,3}", "{0,2}", "*?", "{2,}"])
    return f"(?:{_random_regex(rng, depth + 1)})"


def test_random_regex_macros_agree_with_xgrammar():
    def make(rng):
        flags = rng.choice([None, "", "i", "s", "is"])
        args = f'"{_random_regex(rng)}"' + (f', flags="{flags}"' if flags is not None else "")
        return f'root ::= "<" Regex({args + (", json_string=true" if rng.random() < 0.2 else "")}) ">"'

    checked, accepted = _fuzz(make, "abA1_ \n.éx\t", grammars=60, strings=80, seed=0)
    assert checked >= 4000 and accepted >= 200, (checked, accepted)


def test_random_tag_dispatches_agree_with_xgrammar():
    def make(rng):
        tags = ["".join(rng.choice("ab<>") for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(0, 3))]
        excludes = ["".join(rng.choice("ab<>") for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(0, 2))]
        excludes = [x for x in excludes if not any(t.startswith(x) for t in tags)]
        args = [", ".join(f'("{t}", r{i % 2})' for i, t in enumerate(tags)),
                f"loop_after_dispatch={rng.choice(['true', 'false'])}",
                "excludes=(" + ", ".join(f'"{x}"' for x in excludes) + ",)" if excludes else ""]
        return (f'root ::= "<" TagDispatch({", ".join(a for a in args if a)}) ">"\n'
                'r0 ::= "1"\nr1 ::= "2" [ab]?')

    checked, accepted = _fuzz(make, "ab<>12x", grammars=80, strings=100, seed=1)
    assert checked >= 6000 and accepted >= 1000, (checked, accepted)
