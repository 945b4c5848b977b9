"""Tests of the brute-force scannerless prefix-viability oracle (tests/constrain/lark_oracle.py).

Hand-computed tables first (each entry: viable, accepts), then cross-checks against an independent
implementation built on Lark's own Earley parser (``lark_accepts`` / ``lark_viable``), exhaustive
over short strings, and a sweep over the shared Lark / Outlines grammars with random sentences and
mutations. Where Lark's ``dynamic_complete`` parser is known to differ from the scannerless
semantics (leftmost-first alternation, greedy ``%ignore``) the tests pin both answers; trailing
guards (lookaheads past the end of a match, lark.lark's OP) and lazy terminals (first-match
language, lark.lark's REGEXP) are checked against Lark's own parser, which agrees there.
"""

from __future__ import annotations

import glob
import itertools
import os
import random
import re
import zlib

import lark
import pytest
import regex

from tests.constrain.lark_oracle import (
    LarkOracle,
    _utf8_ranges,
    find_completion,
    greedy_pattern,
    mutations,
    random_sentences,
    re_classes,
    trailing_guards,
)

GRAMMAR_DIRS = ("/work/shared/data/grammars/lark", "/work/shared/data/grammars/outlines")


def check_table(o: LarkOracle, table: dict[str, tuple[bool, bool]], *, lark_agrees: bool = True) -> None:
    for s, (v, a) in table.items():
        assert o.viable(s) is v, ("viable", s)
        assert o.accepts(s) is a, ("accepts", s)
        if lark_agrees:
            assert o.lark_accepts(s) is a, ("lark_accepts", s)
            assert o.lark_viable(s) is v, ("lark_viable", s)


def exhaustive_crosscheck(o: LarkOracle, alphabet: str, max_len: int) -> int:
    """viable/accepts == Lark-based split-point algorithm on every string up to max_len."""
    n = 0
    for k in range(max_len + 1):
        for t in itertools.product(alphabet, repeat=k):
            s = "".join(t)
            assert o.viable(s) == o.lark_viable(s), s
            assert o.accepts(s) == o.lark_accepts(s), s
            if o.viable(s):
                assert o.viable(s[:-1]), s  # prefix-closed
            n += 1
    return n


# ----------------------------------------------------------------------------- hand-computed


def test_class_escapes_judged_as_stdlib_re_judges_them():
    # Lark matches terminals with `re`, where \s takes \x1c-\x1f and \w takes combining marks and
    # superscripts; the `regex` module does not (it first called trellis wrong 12 times on these)
    o = LarkOracle(r"""
start: "a" /\s+/ "b" | "w" /\w+/ | "n" /[^\W\d]+/
""")
    # (document, in the language): `regex` says the opposite of each
    for doc, member in (("a\x1cb", True), ("a \x1f b", True), ("wx\u00b2", True), ("w\u0301", False),
                        ("nx\u00b2", True), ("n\u0301", False)):
        assert o.accepts(doc) is o.lark_accepts(doc) is member, doc
        assert o.viable(doc) is o.lark_viable(doc) is member, doc
    for letter, top in (("s", 0x110000), ("d", 0x110000), ("w", 0x110000), ("S", 0x3000), ("D", 0x3000),
                        ("W", 0x3000)):  # the rewrite is re's class, code point for code point
        mine, want = regex.compile(re_classes("[" + "\\" + letter + "]")), re.compile("\\" + letter)
        assert all(bool(mine.match(chr(c))) == bool(want.match(chr(c)))
                   for c in range(top) if not 0xD800 <= c < 0xE000), letter
    assert re_classes(r"\s", re.ASCII) == r"\s"

KW_ID = r"""
start: kw | ID
kw: "select"
ID: /[a-z]+/
"""


def test_keyword_vs_identifier():
    o = LarkOracle(KW_ID)
    check_table(o, {
        "": (True, False),
        "s": (True, True),  # ID
        "sel": (True, True),
        "select": (True, True),  # kw and ID
        "selects": (True, True),
        "Select": (False, False),
        "selecT": (False, False),
        "sel ect": (False, False),  # no %ignore
        "1": (False, False),
    })
    exhaustive_crosscheck(o, "seS ", 4)


def test_keyword_then_number():
    o = LarkOracle(r"""
start: kw NUM | ID
kw: "select"
ID: /[a-z]+/
NUM: /[0-9]+/
""")
    check_table(o, {
        "select": (True, True),  # as ID; kw NUM still possible
        "select1": (True, True),
        "selectx": (True, True),
        "sel1": (False, False),
        "selectx1": (False, False),
        "1": (False, False),
    })


IGNORE_SPACE = r"""
start: "a" "b"+
%ignore " "
"""


def test_ignore_spaces_everywhere():
    o = LarkOracle(IGNORE_SPACE)
    check_table(o, {
        "": (True, False),
        " ": (True, False),
        "  a": (True, False),
        "a": (True, False),
        "ab": (True, True),
        "a b": (True, True),
        " a b ": (True, True),
        "a  b  b  ": (True, True),
        "   ab   ": (True, True),
        "a c": (False, False),
        "b": (False, False),
        "a b a": (False, False),
        "aa": (False, False),
    })
    exhaustive_crosscheck(o, "ab c", 5)


def test_greedy_ignore_differs_from_lark():
    """Lark matches an %ignore terminal once, greedily; the scannerless semantics allows any
    split of the ignored run, so a terminal starting with a space may take one of them."""
    o = LarkOracle(r"""
start: "a" B
B: " b"
%ignore /[ ]+/
""")
    check_table(o, {"a b": (True, True), " a b ": (True, True), "a": (True, False), "ab": (False, False)})
    for s in ("a  b", "a   b", " a  b"):
        assert o.accepts(s) and o.viable(s)
        assert not o.lark_accepts(s)  # Lark's greedy ignore swallows the space B needs


ARITH = r"""
start: expr
expr: term (WS? ADDOP WS? term)*
term: term WS? "*" WS? factor | factor
factor: NUMBER | "(" WS? expr WS? ")" | "(" empty ")" | "-" factor
empty:
ADDOP: "+" | "-"
NUMBER: /[0-9]+/
WS: / +/
"""


def test_arithmetic_left_recursion_ambiguity_empty_rules():
    o = LarkOracle(ARITH)
    check_table(o, {
        "": (True, False),
        "1+2": (True, True),
        "1 + 2": (True, True),
        "1  +   2": (True, True),  # WS? WS? around ADDOP: ambiguous split of spaces
        "1 +": (True, False),
        "1 ": (True, False),
        " 1": (False, False),  # WS only inside
        "1 + * 2": (False, False),
        "1+*2": (False, False),
        "(1+2)*3": (True, True),
        "1*2*3": (True, True),  # left recursion
        "1 * (2 - -3)": (True, True),
        "1--2": (True, True),
        "1---2": (True, True),  # 1 - (-(-2))
        "()": (True, True),  # empty rule
        "()*()": (True, True),
        "( ": (True, False),
        "( )": (False, False),  # "(" WS? expr ...: expr needed; "(" empty ")" has no WS
        "12 34": (False, False),
        "-": (True, False),
        "(((": (True, False),
        "1)": (False, False),
    })
    exhaustive_crosscheck(o, "1+*( )-", 4)


def test_nullable_nonterminal_expected_twice_in_one_column():
    o = LarkOracle(r"""
start: e e "a" | e "c" e
e: | "b"
""")
    check_table(o, {
        "": (True, False), "a": (True, True), "ba": (True, True), "bba": (True, True), "bbba": (False, False),
        "c": (True, True), "bc": (True, True), "cb": (True, True), "bcb": (True, True), "bbc": (False, False),
        "ab": (False, False), "cbb": (False, False),
    })
    exhaustive_crosscheck(o, "abc", 4)


def test_non_productive_rules_are_dead_ends():
    o = LarkOracle(r"""
start: "a" x | "b" | "a" "d"
x: "c" x
""")
    check_table(o, {"": (True, False), "a": (True, False), "ad": (True, True), "ac": (False, False),
                    "acc": (False, False), "b": (True, True)}, lark_agrees=False)
    # The split-point algorithm on Lark's parser only sees that Lark expects "c" after "a":
    assert o.lark_viable("ac") and not o.lark_accepts("acc")


def test_utf8_ranges():
    assert _utf8_ranges(b"\xc3") == [(0xC0, 0xFF)]
    assert _utf8_ranges(b"\xed") == [(0xD000, 0xD7FF)]  # surrogates excluded
    assert _utf8_ranges(b"\xed\xa0") == []
    assert _utf8_ranges(b"\xe0") == [(0x800, 0xFFF)]  # no overlong forms
    assert _utf8_ranges(b"\xe0\x80") == []
    assert _utf8_ranges(b"\xf0\x9f\x98") == [(0x1F600, 0x1F63F)]
    assert _utf8_ranges(b"\xf4") == [(0x100000, 0x10FFFF)]
    assert _utf8_ranges(b"\xf4\x90") == [] and _utf8_ranges(b"\xf5") == [] and _utf8_ranges(b"\xc1") == []
    assert _utf8_ranges(b"\xe4\x41") == [] and _utf8_ranges(b"\xc3\xa9") == []


LAZY_COMMENT = r"""
start: item+
item: STRING | NAME
STRING: /".*?"/
NAME: /[a-z]+/
%import common.C_COMMENT
%ignore C_COMMENT
%ignore " "
"""


def test_lazy_string_and_c_comments():
    o = LarkOracle(LAZY_COMMENT)
    table = {
        "": (True, False),
        "x /* c */ a": (True, True),
        "x /* c": (True, False),
        "x /* c *": (True, False),
        "x /* c */": (True, True),
        "x/**/a": (True, True),
        "x /* c \n */ y": (True, True),
        "x /": (True, False),
        "x /x": (False, False),
        "x/*/": (True, False),  # "/*/" is not a closed comment
        "/**/": (True, False),  # only ignored text: item+ still needed
        "/**/x": (True, True),
        "*/": (False, False),
        '"ab': (True, False),
        '"a"b': (True, True),  # STRING "a" then NAME b
        '"a" "b"': (True, True),
        '"a\n': (False, False),  # "." excludes "\n" (regex's partial matching of ".*?" gets this wrong)
        '"a\n"': (False, False),
    }
    check_table(o, table)
    # The regular language of /".*?"/ is that of /".*"/, but Lark's lexer only ever finds the
    # shortest match, and so does the oracle (and trellis: regex.terminal_dfa).
    for s in ('"a"b"', 'x /* c */ a */'):
        assert not o.accepts(s) and not o.lark_accepts(s)
    assert o.viable('"a"b"') and not o.viable("x /* c */ a */")


def test_leftmost_first_alternation_differs_from_lark():
    o = LarkOracle("start: X\nX: /a|ab/")
    check_table(o, {"a": (True, True), "ab": (True, True), "abb": (False, False), "b": (False, False)},
                lark_agrees=False)
    assert o.lark_accepts("a") and not o.lark_accepts("ab")  # Lark only tries the first match "a"


def test_random_sentences_of_hand_grammars():
    rng = random.Random(3)
    for text in (KW_ID, IGNORE_SPACE, ARITH, LAZY_COMMENT, UTF8):
        o = LarkOracle(text)
        sents = random_sentences(o, 6, rng, 20)
        assert len(sents) == 6, text
        for s in sents:
            assert o.accepts(s) and len(s) <= 20
            b = s.encode()
            assert all(o.viable(s[:i]) for i in range(len(s) + 1))
            assert all(o.viable_bytes(b[:i]) for i in range(len(b) + 1))
    assert random_sentences(o, 3, random.Random(5), 20) == random_sentences(o, 3, random.Random(5), 20)


class _LongestStandaloneMatch:
    """A term matcher for Lark's dynamic Earley: the longest prefix of text[index:] that the
    terminal's regex fullmatches on its own. With complete_lex Lark then re-matches every
    truncation, so it finds *every* match length: Lark's parser with this matcher implements the
    scannerless semantics for terminals (not for %ignore, still matched once, here longest)."""

    class _M:
        def __init__(self, s: str, end: int) -> None:
            self.s, self.e = s, end

        def group(self, _k: int = 0) -> str:
            return self.s

        def end(self) -> int:
            return self.e

    def __init__(self, pats: dict) -> None:
        self.pats = pats

    def __call__(self, term, text: str, index: int = 0):
        pat = self.pats[term.name]
        for e in range(len(text), index, -1):
            if pat.fullmatch(text[index:e]) is not None:
                return self._M(text[index:e], e)
        return None


def exact_lark(o: LarkOracle) -> lark.Lark:
    lk = lark.Lark(o.grammar_text, parser="earley", lexer="dynamic_complete", start=o.start)
    lk.parser.parser.term_matcher = _LongestStandaloneMatch(o._pat)
    return lk


def lark_parses(lk: lark.Lark, s: str) -> bool:
    try:
        lk.parse(s)
        return True
    except lark.exceptions.UnexpectedInput:
        return False


def test_divergences_are_lark_terminal_matching():
    """Lazy terminals follow Lark's own first-match reading (FM(T)), and trailing guards see the
    document as Lark's in-context match does, so Lark itself agrees with the oracle there; with an
    every-length terminal matcher, Lark's Earley parser agrees on the alternation case (but not on
    greedy %ignore)."""
    o = LarkOracle(LAZY_COMMENT)
    for s in ('"a"b"', 'x /* c */ a */', "x /* c */ a", '"a"b', "x /* c", '"a\n"', "/**/x"):
        assert o.lark_accepts(s) == o.accepts(s), s
    o = LarkOracle("start: X\nX: /a|ab/")
    assert lark_parses(exact_lark(o), "ab") and o.accepts("ab")
    # a trailing guard sees the document, as Lark's in-context match does (the standalone matcher
    # of exact_lark does not)
    o = LarkOracle('start: A "b"\nA: /a(?!b)/\n%ignore " "')
    assert not o.accepts("ab") and not o.lark_accepts("ab") and lark_parses(exact_lark(o), "ab")
    assert o.accepts("a b") and o.lark_accepts("a b")
    o = LarkOracle('start: "a" B\nB: " b"\n%ignore /[ ]+/')
    assert not lark_parses(exact_lark(o), "a  b") and o.accepts("a  b")
    # exhaustively, on a lazy-string grammar without %ignore
    o = LarkOracle(r"""
start: item+
item: STRING | NAME
STRING: /".*?"/
NAME: /[a-z]+/
""")
    for k in range(6):
        for t in itertools.product('a"b', repeat=k):
            s = "".join(t)
            assert o.lark_accepts(s) == o.accepts(s), s


def test_greedy_pattern_rewrite():
    cases = {
        r"a.*?b": r"a.*b",
        r'"(?:[^"\\]|\\.)*?"': r'"(?:[^"\\]|\\.)*"',
        r"a{1,3}?b??c+?": r"a{1,3}b?c+",
        r"[*?]+?\*?": r"[*?]+\*?",
        r"(?i:a*?)": r"(?i:a*)",
        r"\{1,2}?x": r"\{1,2}?x",
        r"(?#x*?)a*?": r"(?#x*?)a*",
        r"[]*?]*?": r"[]*?]*",
        r"\\*?": r"\\*",
    }
    for src, want in cases.items():
        assert greedy_pattern(src) == want, src
    for s in ("a\n", "ab", "a\nb", "axb"):
        assert (regex.fullmatch(r"a.*?b", s) is None) == (regex.fullmatch(greedy_pattern(r"a.*?b"), s) is None)


def test_lookarounds():
    o = LarkOracle(r"""
start: A "b" | WORD | LB | LA
A: /a(?!b)/
WORD: /c(?!d)[a-z]*/
LB: /x[a-z]*(?<!q)/
LA: /y(?=z)z/
%ignore " "
""")
    assert o.escape == {"A": " ", "WORD": " "}  # (?!d) may see past "c": a trailing guard too
    table = {
        "a": (True, False),  # A, if the next character is not "b"
        "ab": (False, False),  # the guard of A sees the "b" of the document
        "a b": (True, True),
        "a  b ": (True, True),
        "c": (True, True),
        "cd": (False, False),  # neither "cd" (lookahead inside the token) nor "c" before "d"
        "c d": (False, False),
        "ce": (True, True),
        "ced": (True, True),
        "x": (True, True),
        "xq": (True, False),  # lookbehind fails at the end, but "xqa" matches
        "xqa": (True, True),
        "xqq": (True, False),
        "y": (True, False),  # lookahead at the end of a partial match: "yz" completes it
        "yz": (True, True),
        "yx": (False, False),
    }
    check_table(o, table, lark_agrees=False)
    for s in table:
        assert o.lark_accepts(s) == o.accepts(s), s


UTF8 = r"""
start: "caf" ("é" | "e") "!"? | "x" CJK | "y" EMOJI
CJK: /[一-龥]/
EMOJI: "😀"
"""


def test_utf8_bytes():
    o = LarkOracle(UTF8)
    table = {
        b"": True, b"caf": True,
        b"caf\xc3": True,  # first byte of é
        b"caf\xc3\xa9": True, b"caf\xc3\xa9!": True,
        b"caf\xc3\xa8": False,  # è
        b"caf\xc4": False,  # U+0100..U+013F
        b"cafe\xc3": False,
        b"x\xe4": True,  # 一 = e4 b8 80
        b"x\xe3": False,
        b"x\xe9\xbe": True,  # U+9F80..U+9FBF meets ..U+9FA5
        b"x\xe9\xbf": False,
        b"y\xf0": True, b"y\xf0\x9f": True, b"y\xf0\x9f\x98": True, b"y\xf0\x9f\x98\x80": True,
        b"y\xf0\x90": False,
        b"y\xf0\x9f\x98\x81": False,
        b"\xff": False, b"caf\xc3(": False, b"\xc3": False,
        b"\xed\xa0": False, b"\xe0\x80": False, b"\xf4\x90": False, b"\xc0": False,  # never valid
        b"caf\x80": False,
    }
    for b, want in table.items():
        assert o.viable_bytes(b) is want, b
    assert o.viable("café") and o.accepts("café") and o.lark_accepts("café")


def brute_viable_bytes(o: LarkOracle, b: bytes) -> bool:
    """All code points whose encoding starts with the trailing bytes, tried one by one."""
    for k in range(4):
        try:
            head = b[:len(b) - k].decode("utf-8")
        except UnicodeDecodeError:
            continue
        tail = b[len(b) - k:]
        if not tail:
            return o.viable(head)
        width = {0xC: 2, 0xD: 2, 0xE: 3, 0xF: 4}.get(tail[0] >> 4)
        if width is None or width <= k:
            return False
        cands = []
        fill = width - k
        for rest in itertools.product(range(0x80, 0xC0), repeat=fill) if fill <= 2 else ():
            try:
                cands.append((tail + bytes(rest)).decode("utf-8"))
            except UnicodeDecodeError:
                pass
        return o.viable(head) and any(o.viable(head + c) for c in cands)
    return False


def test_utf8_representatives_match_brute_force():
    o = LarkOracle(r"""
start: "x" U+ | "y" W | "z" NW | "q" K
U: /[a-zØ-öø-ÿ]/
W: /\w\w/
NW: /[^\w\s]+/
K: /(?i:k|ß|é|[ά-ώ])/
""")
    for head in ("x", "y", "z", "q", "xa", "y\u00e9"):
        for lead in range(0xC2, 0xE0):
            b = head.encode() + bytes([lead])
            assert o.viable_bytes(b) == brute_viable_bytes(o, b), b
        for b3 in (b"\xe2", b"\xe2\x84", b"\xe1\xbd", b"\xe4\xb8", b"\xef\xbf"):
            b = head.encode() + b3
            assert o.viable_bytes(b) == brute_viable_bytes(o, b), b


def test_memoisation_cost_per_token():
    o = LarkOracle(open("/work/shared/data/grammars/outlines/json.lark").read(),
                   import_paths=["/work/shared/data/grammars/outlines"])
    s0 = '{"a": [1, 2.5e-3, true, {"b": null}], "c": "x\\u00e9'
    assert o.viable(s0) and not o.accepts(s0)
    toks = ['"', '"}', '", ', "y", '\\"', "\\", "}", "1", ' "', '"]', '", "d": [', "é"]
    before = o.steps
    for t in toks:
        o.viable(s0 + t)
    assert o.steps - before <= sum(len(t) for t in toks)
    assert o.accepts(s0 + '"}') and o.lark_accepts(s0 + '"}')
    assert not o.viable(s0 + '"]') and not o.lark_viable(s0 + '"]')


# ----------------------------------------------------------------------------- trailing guards

GUARD = r"""
start: x+
x: OP | NAME
OP: /[+*]|[?](?![a-z])/
NAME: /[a-z]+/
%ignore " "
"""


def words(alphabet: str, max_len: int):
    for k in range(max_len + 1):
        for t in itertools.product(alphabet, repeat=k):
            yield "".join(t)


def test_trailing_guard_sees_the_next_character():
    """lark.lark's OP: "?" is a token iff the next character of the document is not in [a-z]."""
    o = LarkOracle(GUARD)
    assert o.escape == {"OP": " "}
    table = {
        "": (True, False),
        "?": (True, True),  # at the end of the document the negative lookahead passes
        "?a": (False, False),  # ... but not before "a" (the old oracle matched "?" standalone)
        "? a": (True, True),
        "?+": (True, True),
        "?*?": (True, True),
        "??": (True, True),
        "a?": (True, True),
        "a?b": (False, False),
        "a? b": (True, True),
        "+a": (True, True),  # the [+*] branch has no guard
        "?\t": (False, False),
        "? ": (True, True),
    }
    check_table(o, table, lark_agrees=False)
    # Lark's in-context match agrees on every sentence; viability is "some completion exists"
    for s in words("?a+ ", 5):
        assert o.accepts(s) == o.lark_accepts(s), s
        assert o.viable(s) == any(o.accepts(s + w) for w in words("?a+ ", 2)), s
    # the split-point algorithm on Lark parses "?" as a whole document, so it keeps "?a" viable
    assert o.lark_viable("?a") and not o.viable("?a")


def test_trailing_guard_literal_and_positive_lookahead():
    # a literal "?" has no guard
    o = LarkOracle('start: "?" NAME\nNAME: /[a-z]+/')
    assert o.escape == {} and o.accepts("?a") and o.lark_accepts("?a")
    # a positive guard fails at the end of the document
    o = LarkOracle('start: N+\nN: /[0-9]+(?=\\s)/\n%ignore /[ \\n]/')
    assert o.escape["N"] in " \n"
    check_table(o, {
        "1": (True, False),  # "1" is an N only before whitespace
        "12": (True, False),
        "12 ": (True, True),
        "12\n": (True, True),
        "1 2 ": (True, True),
        "1 2": (True, False),
        "1a": (False, False),
    }, lark_agrees=False)
    for s in words("1 a\n", 4):
        assert o.accepts(s) == o.lark_accepts(s), s
        assert o.viable(s) == any(o.accepts(s + w) for w in words("1 a", 2)), s


def test_trailing_guard_in_a_repeat_and_guarded_ignore():
    o = LarkOracle('start: W+\nW: /(?:[a-z](?![0-9]))+/\n%ignore /#(?![a-z])/\n%ignore " "')
    assert set(o.escape.values()) == {" "} and len(o.escape) == 2  # W and the "#" ignore terminal
    check_table(o, {
        "ab": (True, True), "a1": (False, False), "ab #": (True, True), "ab#b": (False, False),
        "ab# b": (True, True), "#": (True, False),
    }, lark_agrees=False)
    for s in words("a1# ", 4):
        assert o.accepts(s) == o.lark_accepts(s), s


@pytest.mark.parametrize("grammar, what", [
    ('start: A\nA: /a(?=bc)/\n%ignore " "', "2 characters"),  # inspects two characters past the end
    ('start: A\nA: /a\\b/\n%ignore " "', "one-character lookaheads"),
    ('start: A\nA: /a$/\n%ignore " "', "2 characters"),
    ('start: A\nA: /".*?"(?!x)/\n%ignore " "', "lazy"),
])
def test_unsupported_guards_are_refused_by_name(grammar, what):
    with pytest.raises(NotImplementedError, match=r"terminal A .*" + re.escape(what)):
        LarkOracle(grammar)


def test_guard_without_escape_uses_the_analysis():
    """No %ignore token passes F's guard: completability comes from _GuardAnalysis."""
    o = LarkOracle('start: (F | N)+\nF: /[a-z]+(?=\\()/\nN: /[a-z(]/\n')
    assert o.escape == {} and o._ga is not None
    with pytest.raises(NotImplementedError, match="terminal F"):
        LarkOracle(o.grammar_text, guard_analysis=False)
    check_table(o, {
        "ab": (True, True),  # N N (F needs a "(" after it)
        "ab(": (True, True),  # F N or N N N
        "a(": (True, True),
        "((": (True, True),
    }, lark_agrees=False)
    for s in words("ab(", 6):
        assert o.accepts(s) == o.lark_accepts(s), s
        assert o.viable(s) == any(o.accepts(s + w) for w in words("ab(", 2)), s
    # a guard that empties the language, and one only a longer token satisfies
    o = LarkOracle('start: A "b"\nA: /a(?!b)/')
    assert not o.viable("") and not o.viable("a") and not o.accepts("ab")
    o = LarkOracle('start: A "c"\nA: /y(?=z)z?/\n%ignore " "')
    assert o._ga is not None
    check_table(o, {"": (True, False), "y": (True, False), "yz": (True, False), "yz c": (True, True),
                    "y c": (False, False), "y z": (False, False), "yzc": (True, True)}, lark_agrees=False)
    for s in words("yzc ", 5):
        assert o.accepts(s) == o.lark_accepts(s), s
        assert o.viable(s) == any(o.accepts(s + w) for w in words("yzc", 3)), s


def test_guard_analysis_agrees_with_the_escape():
    """Where a guard has an escape both ways of deciding viability must agree."""
    a, b = LarkOracle(GUARD), LarkOracle(GUARD, guard_analysis=True)
    assert a._ga is None and b._ga is not None
    for s in words("?a+ ", 6):
        assert a.viable(s) == b.viable(s) and a.accepts(s) == b.accepts(s), s
    path = os.path.join(LARK_DIR, "lark.lark")
    if not os.path.exists(path):
        return
    text = open(path).read()
    a = LarkOracle(text, import_paths=[LARK_DIR])
    b = LarkOracle(text, import_paths=[LARK_DIR], guard_analysis=True)
    rng = random.Random(11)
    sents = random_sentences(a, 8, rng, 30) + ["start: a? b*\n", "X: /a/i | \"b\"i\n?x: y+ -> z\n"]
    for s in sents:
        for m in [s[:i] for i in range(len(s) + 1)] + mutations(s, rng, a.alphabet(), 12):
            assert a.viable(m) == b.viable(m) and a.accepts(m) == b.accepts(m), m


@pytest.mark.parametrize("grammar", [
    GUARD,
    'start: (F | N)+\nF: /[a-z]+(?=\\()/\nN: /[a-z(]/\n',
    'start: A "c"\nA: /y(?=z)z?/\n%ignore " "',
    'start: D+\nD: /[1-9](_?[0-9])*|0(_?0)*(?![1-9])/\n%ignore " "',
])
def test_guard_analysis_bounds_are_enough(grammar, monkeypatch):
    """The token enumeration bounds of _GuardAnalysis give the same (first class, state) pairs
    and alive-scan extension states as deeper ones."""
    import tests.constrain.lark_oracle as lo

    a = LarkOracle(grammar, guard_analysis=True)
    monkeypatch.setattr(lo, "GUARD_LEN", lo.GUARD_LEN + 2)
    monkeypatch.setattr(lo, "GUARD_DEPTH", lo.GUARD_DEPTH + 2)
    b = LarkOracle(grammar, guard_analysis=True)
    assert a._ga.iface == b._ga.iface
    for name in a._ctx_pat:
        for u in words(a._ga.K[0] + "a0z_(?", 2):
            if u and a._live(name, u):
                assert a._ga.extensions(name, u) <= b._ga.extensions(name, u) == a._ga.extensions(name, u), u


def test_trailing_guards_analysis():
    assert len(trailing_guards(r"[+*]|[?](?![a-z])")) == 1
    assert trailing_guards(r"/(?!/)(\\/|\\\\|[^/])*?/[imslux]*") == []  # lookahead inside the match
    assert trailing_guards(r"a(?!b)[a-z]+") == [] and trailing_guards(r"[a-z]+(?<!x)") == []
    assert trailing_guards(r"\ba") == []  # looks before the start only (out of scope)
    (pred,) = trailing_guards(r"(?i:x(?![a-z]))")
    assert not pred("Q") and pred("1")  # the scoped IGNORECASE flag applies to the guard
    (pred,) = trailing_guards(r"x(?=\s)")
    assert pred(" ") and not pred("y")


# ----------------------------------------------------------------------------- lazy terminals

REGEXP_G = r"""
start: R
R: /\/(?!\/)(\\\/|\\\\|[^\/])*?\/[imslux]*/
"""


def test_lazy_first_match_language_regexp():
    """lark.lark's REGEXP: its tokens are FM(T) = {w : re.match(T, w).end() == len(w)}."""
    o = LarkOracle(REGEXP_G)
    table = {
        "/ab/i": (True, True),  # the greedy flag suffix belongs to the first match
        "/ab/imx": (True, True),
        "/a\\/b/": (True, True),  # an escaped slash
        "/a\\/": (True, True),  # backtracking: the backslash as [^\/], then the closing slash
        "/ab/": (True, True),
        "/": (True, False),
        "/a": (True, False),
        "/a\\": (True, False),
        "//": (False, False),  # (?!\/)
        "/ab/c": (False, False),  # the first match ends at "/ab/"
        "/ab/i/": (False, False),
        "/a/b/": (False, False),
    }
    check_table(o, table, lark_agrees=False)
    for s, (_, a) in table.items():
        assert o.lark_accepts(s) is a, s
        m = re.match(o.patterns["R"], s)
        assert (m is not None and m.end() == len(s)) is a, s
    # the old "stop at the first full match" reading was wrong here:
    assert re.fullmatch(o.patterns["R"], "/a\\/") and o.viable("/a\\/b") and o.accepts("/a\\/b/")
    for s in words("/\\ai", 5):
        assert o.accepts(s) == o.lark_accepts(s), s
    for s in words("/\\ai", 4):  # every live prefix has a completion of <= 3 characters
        assert o.viable(s) == any(o.accepts(s + w) for w in words("/\\ai", 3)), s


def test_lazy_first_match_language_lark_string():
    o = LarkOracle('start: S+\nS: _STRING "i"?\n%import common.ESCAPED_STRING -> _STRING\n%ignore " "')
    assert "S" in o._lazy
    check_table(o, {
        '"ab"i': (True, True), '"ab"': (True, True), '"a\\"b"': (True, True), '"a\\\\"': (True, True),
        '"a\\\\"b"': (False, False), '"a\\\\" "b"': (True, True), '"a"x': (False, False),
        '"ab"i"c"': (True, True), '"a" "b"i': (True, True),
    }, lark_agrees=False)
    for s in words('"\\ai ', 5):
        assert o.accepts(s) == o.lark_accepts(s), s


def test_c_comment_unchanged():
    o = LarkOracle("start: C+\n%import common.C_COMMENT -> C\n%ignore \" \"")
    table = {
        "/* a */": (True, True),
        "/* a */ */": (False, False),  # not one comment: its first match ends at the first "*/"
        "/* a */ /**/": (True, True),
        "/*/": (True, False),
        "/**/": (True, True),
        "/* a *": (True, False),
    }
    check_table(o, table, lark_agrees=False)
    for s in table:
        assert o.lark_accepts(s) == o.accepts(s), s
    # lark_viable tests the tail against the regular language, where "/* a */ */" is a comment
    assert o.lark_viable("/* a */ */")


LARK_DIR = "/work/shared/data/grammars/lark"
LAZY_TERMINALS = {
    # id: (grammar, terminal, alphabet); the corpus's lazy terminals
    "C_COMMENT": ("start: C\n%import common.C_COMMENT -> C", "C", "/*a\n"),
    "STRING_DOTS": ('start: S\nS: /".*?"/', "S", '"a\n'),
    "ESCAPED_STRING": ("start: S\n%import common.ESCAPED_STRING -> S", "S", '"\\a'),
    "lark.STRING": (f"{LARK_DIR}/lark.lark", "STRING", '"\\i'),
    "lark.REGEXP": (f"{LARK_DIR}/lark.lark", "REGEXP", "/\\ai"),
    "template.REGEXP": (f"{LARK_DIR}/advanced_template_lark.lark", "REGEXP", "/\\i\n"),
}


@pytest.mark.parametrize("name", sorted(LAZY_TERMINALS))
def test_first_match_search_depth_is_enough(name):
    """The bounded first-match liveness (depth FM_DEPTH) equals the one with a deeper bound on
    every string up to length 5 over a small alphabet, for the corpus's lazy terminals."""
    grammar, t, alphabet = LAZY_TERMINALS[name]
    if grammar.endswith(".lark"):
        if not os.path.exists(grammar):
            pytest.skip("corpus not present")
        grammar = open(grammar).read()
    o = LarkOracle(grammar, import_paths=[LARK_DIR])
    assert t in o._lazy
    depth = o._fm_depth[t]
    n_dead = 0
    for u in words(alphabet, 5):
        if not u or o._pat[t].fullmatch(u, partial=True) is None:
            continue
        if o._fm_search(t, u, depth) is None:
            n_dead += 1
            assert o._fm_search(t, u, depth + 1) is None, u
        else:
            assert o._live(t, u)
    assert n_dead  # some prefixes of the regular language are first-match dead


# ----------------------------------------------------------------------------- shared grammars

def _rule_names(text: str) -> list[str]:
    names = re.findall(r"^[?!]?([a-z_][a-z0-9_]*)\s*(?:\.-?\d+)?\s*:", text, flags=re.M)
    return sorted(dict.fromkeys(names), key=lambda n: n.startswith("_"))


def load_shared(path: str) -> tuple[LarkOracle | None, str]:
    """The oracle with start="start", else the first rule that Lark accepts as start."""
    text = open(path).read()
    errors = []
    for start in ["start"] + [n for n in _rule_names(text) if n != "start"]:
        try:
            return LarkOracle(text, start=start, import_paths=[os.path.dirname(path)]), start
        except lark.exceptions.LarkError as e:
            errors.append(f"{start}: {e}".splitlines()[0])
    return None, "; ".join(errors)


SHARED = sorted(glob.glob(os.path.join(GRAMMAR_DIRS[0], "tests_*.lark"))
                + glob.glob(os.path.join(GRAMMAR_DIRS[1], "*.lark")))


@pytest.mark.parametrize("path", SHARED, ids=[os.path.relpath(p, "/work/shared/data/grammars") for p in SHARED])
def test_shared_grammar(path):
    o, start = load_shared(path)
    if o is None:
        pytest.skip(f"Lark refuses {os.path.basename(path)}: {start}")
    rng = random.Random(zlib.crc32(os.path.basename(path).encode()))
    sents = random_sentences(o, 5, rng, 28)
    assert sents, "no sentence generated"
    small = "".join(dict.fromkeys("".join(sents) + o.pattern_chars()[:30] + " x0{\"é"))
    n_dead = n_witness = 0
    for s in sents:
        assert o.accepts(s) and o.lark_accepts(s), s
        for i in range(len(s) + 1):
            assert o.viable(s[:i]), (s, i)
            assert o.lark_viable(s[:i]), (s, i)
        b = s.encode()
        assert all(o.viable_bytes(b[:i]) for i in range(len(b) + 1)), s
        for m in mutations(s, rng, o.alphabet(), 8):
            v = o.viable(m)
            assert v == o.lark_viable(m), m
            assert o.accepts(m) == o.lark_accepts(m), m
            if v:
                w = find_completion(o, m, rng)
                assert w is not None, m
                assert o.lark_accepts(m + w), (m, w)  # a witness Lark itself accepts proves viability
                n_witness += 1
            else:
                n_dead += 1
                # no one-character completion over a small alphabet is accepted by Lark
                assert not o.lark_accepts(m)
                for c in small:
                    assert not o.lark_accepts(m + c) and not o.viable(m + c), (m, c)
    print(f"{os.path.basename(path)} start={start}: {sents!r} witnesses={n_witness} dead={n_dead}")


def test_shared_grammars_random_strings():
    """viable == Lark-based split-point algorithm on random short strings of each shared grammar."""
    rng = random.Random(7)
    checked = 0
    for path in SHARED:
        o, _ = load_shared(path)
        if o is None:
            continue
        alpha = "".join(dict.fromkeys(o.pattern_chars() + ' 1a"\n'))
        for _ in range(150):
            s = "".join(rng.choice(alpha) for _ in range(rng.randint(0, 6)))
            assert o.viable(s) == o.lark_viable(s), (path, s)
            checked += 1
    assert checked >= 600


LARK_FILES = sorted(glob.glob(os.path.join(GRAMMAR_DIRS[0], "*.lark"))
                    + glob.glob(os.path.join(GRAMMAR_DIRS[1], "*.lark"))
                    + glob.glob(os.path.join(os.path.dirname(__file__), "..", "..", "trellis", "grammars", "*.lark")))


@pytest.fixture(scope="module")
def lark_lark():
    path = os.path.join(LARK_DIR, "lark.lark")
    if not os.path.exists(path):
        pytest.skip("corpus not present")
    text = open(path).read()
    return (LarkOracle(text, import_paths=[LARK_DIR]),
            lark.Lark(text, parser="earley", lexer="dynamic_complete", import_paths=[LARK_DIR]))


@pytest.mark.parametrize("path", LARK_FILES, ids=lambda p: "/".join(os.path.normpath(p).split(os.sep)[-2:]))
def test_grammar_files_are_sentences_of_lark_lark(lark_lark, path):
    """Every .lark file of the corpus and of trellis/grammars is a sentence of Lark's grammar of
    grammars (guarded OP, first-match REGEXP and STRING: "/a\\/b/", "/x/i", '"x"i'), as Lark's own
    parser with lark.lark says too."""
    o, ref = lark_lark
    text = open(path, encoding="utf-8").read()
    ref.parse(text)
    assert o.accepts(text)
    o.clear_cache()
