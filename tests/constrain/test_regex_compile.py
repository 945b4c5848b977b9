"""``regex_compile``: Python regexes -> byte DFAs, checked against ``re.fullmatch`` itself.

Random regexes over a small alphabet full of case-folding traps (Kelvin sign, long s, final sigma,
dotted and dotless i), Unicode shorthand classes, negated classes, every flag; both directions:
strings drawn from the DFA must match ``re``, and random strings ``re`` matches must be in the DFA.
"""

from __future__ import annotations

import itertools
import random
import re

import pytest

from trellis.constrain.errors import GrammarError
from trellis.constrain.automata.regex import strip_lazy, regex_to_byte_dfa, terminal_parts

ALPHA = "aAbkKsS\u017f\u212a\u03c3\u03c2\u03a3\u0130i\u0131\u00e9\u00c9\u20ac\U0001f600 09_\n-."


def _atom(rng: random.Random, depth: int) -> str:
    r = rng.random()
    if depth > 0 and r < 0.25:
        inner = "|".join(_seq(rng, depth - 1) for _ in range(rng.randint(1, 3)))
        flag = rng.choice(["?:", "?:", "?i:", "?s:", "?a:", "?-i:"])
        return f"({flag}{inner})"
    if r < 0.45:
        return rng.choice([r"\d", r"\w", r"\s", r"\D", r"\W", r"\S", "."])
    if r < 0.7:
        items = [re.escape(rng.choice(ALPHA)) for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.3:
            items.append(rng.choice([r"\w", r"\d", r"\s", "a-z", "A-Z", "\u03b1-\u03c9", "\\x00-\\x7f"]))
        return "[" + ("^" if rng.random() < 0.3 else "") + "".join(items) + "]"
    return re.escape(rng.choice(ALPHA))


def _seq(rng: random.Random, depth: int) -> str:
    out = []
    for _ in range(rng.randint(1, 3)):
        a = _atom(rng, depth)
        q = rng.choice(["", "", "", "?", "*", "+", "{2}", "{0,2}", "{1,3}", "*?", "+?"])
        out.append(a + q)
    return "".join(out)


def _pattern(rng: random.Random) -> str:
    p = _seq(rng, 2)
    if rng.random() < 0.2:
        p = rng.choice(["(?i)", "(?s)", "(?a)", "(?is)", "(?m)"]) + p
    return p


def _draw(dfa, rng: random.Random, limit: int = 24) -> bytes | None:  # type: ignore[no-untyped-def]
    """A random string of the DFA's language (None if the walk gives up)."""
    q, out = 0, bytearray()
    for _ in range(limit):
        if dfa.final[q] and rng.random() < 0.3:
            return bytes(out)
        nxt = [b for b in range(256) if dfa.trans[q, b] >= 0]
        if not nxt:
            return bytes(out) if dfa.final[q] else None
        b = rng.choice(nxt)
        out.append(b)
        q = int(dfa.trans[q, b])
    return bytes(out) if dfa.final[q] else None


@pytest.mark.parametrize("seed", range(4))
def test_random_regexes_mean_what_re_means(seed: int) -> None:
    rng = random.Random(seed)
    refused = 0
    for _ in range(25):
        p = _pattern(rng)
        rx = re.compile(p)
        try:
            dfa = regex_to_byte_dfa(p)
        except GrammarError as e:  # nested overlapping Unicode classes can pass the size cap
            assert "regex too large" in str(e), (p, e)
            refused += 1
            continue
        for _ in range(30):  # the DFA's strings are re's
            s = _draw(dfa, rng)
            if s is not None:
                assert rx.fullmatch(s.decode("utf-8")), (p, s)
        for _ in range(300):  # re's strings (random ones) are the DFA's
            s = "".join(rng.choice(ALPHA) for _ in range(rng.randint(0, 4)))
            assert dfa.matches(s.encode()) == (rx.fullmatch(s) is not None), (p, s)
    # (seed 2 draws three whose subset constructions pass dfa_minimise.COMPILE_WORK: 1-6 s each
    # unbounded, one of them over MAX_DFA_STATES too)
    assert refused <= 3, refused


def test_a_regex_whose_dfa_explodes_is_refused_by_name_not_compiled_for_minutes() -> None:
    p = r"(?:k*\w?\w+|x)(?:\w.+\s+|[0Kk]\S{2}[^9x]{2})|K{1,3}\S(?a:\.\s{1,3})*?|[^k ]+?[^A]"
    with pytest.raises(GrammarError, match="regex too large"):
        regex_to_byte_dfa("(?:" + p + ")+")
    with pytest.raises(GrammarError, match="regex too large"):  # inside a lookaround too
        regex_to_byte_dfa("(?=(?:" + p + ")+)abc")


def _lookaround(rng: random.Random) -> str:
    if rng.random() < 0.5:  # lookahead: any small pattern
        return "(?" + rng.choice("=!") + _seq(rng, 0) + ")"
    width = rng.choice([1, 1, 2])  # lookbehind: fixed width, as re requires
    body = "".join(rng.choice([re.escape(rng.choice(ALPHA)), r"\w", r"\d", "[^a]", "."]) for _ in range(width))
    return "(?<" + rng.choice("=!") + body + ")"


@pytest.mark.parametrize("seed", range(4))
def test_random_lookarounds_mean_what_re_means_or_are_refused_by_name(seed: int) -> None:
    """Lookarounds that see only the match compile exactly; the ones that could see past either
    end are refused, naming which (the text around a terminal would decide them)."""
    rng = random.Random(100 + seed)
    compiled = 0
    for _ in range(25):
        parts = [_seq(rng, 0) for _ in range(3)]
        parts.insert(rng.randint(0, 3), _lookaround(rng))
        if rng.random() < 0.5:
            parts.insert(rng.randint(0, 4), _lookaround(rng))
        p = "".join(parts)
        if rng.random() < 0.3:  # a lookaround inside a repetition (a block comment's shape)
            p = f"(?:{p})+" + _seq(rng, 0)
        rx = re.compile(p)
        try:
            dfa = regex_to_byte_dfa(p)
        except GrammarError as e:
            if "matches nothing" in str(e):  # e.g. ...É(?<!\w): then re matches nothing either
                assert not any(rx.fullmatch("".join(rng.choice(ALPHA) for _ in range(rng.randint(0, 6))))
                               for _ in range(300)), p
                continue
            assert re.search(r"(lookahead|lookbehind) that can see (more than one character )?(past the end|before the start)|too large",
                             str(e)), (p, e)
            continue
        compiled += 1
        for _ in range(30):
            s = _draw(dfa, rng)
            if s is not None:
                assert rx.fullmatch(s.decode("utf-8")), (p, s)
        for _ in range(300):
            s = "".join(rng.choice(ALPHA) for _ in range(rng.randint(0, 6)))
            assert dfa.matches(s.encode()) == (rx.fullmatch(s) is not None), (p, s)
    assert compiled >= 5, compiled


@pytest.mark.parametrize("pattern, yes, no", [
    (r"\/\*(\*(?!\/)|[^*])*\*\/", ["/**/", "/* a * b */", "/* ** */"], ["/* a */ b */", "/*/"]),
    (r'"(?:[^"\\]|\\.)*(?<!\\)"', ['"a"', '"a\\"b"', '""'], ['"a\\"']),
    (r"\/(?!\/)(?:\\\/|\\\\|[^\/\n])*\/[imslux]*", ["/a/", "/a\\/b/i"], ["//", "//i"]),
])
def test_lookarounds_inside_the_match_compile_exactly(pattern: str, yes: list, no: list) -> None:
    dfa = regex_to_byte_dfa(pattern)
    for s in yes:
        assert dfa.matches(s.encode()) and re.fullmatch(pattern, s), s
    for s in no:
        assert not dfa.matches(s.encode()) and not re.fullmatch(pattern, s), s


@pytest.mark.parametrize("pattern, text, ok", [
    (r"(?i:k)", "\u212a", True),  # Kelvin sign lower-cases to k
    (r"(?i:s)", "\u017f", True),  # long s: one of re's extra folds
    (r"(?i:\u03c3)", "\u03c2", True),  # final sigma
    (r"(?i:[a-z])", "\u0130", True),  # dotted capital I lower-cases to i
    (r"(?i:[^k])", "\u212a", False),
    (r"\w+", "\u00e9t\u00e9_\u0661", True),  # Unicode word characters and digits
    (r"(?a:\w+)", "\u00e9", False),
    (r"\d", "\u0661", True),  # ARABIC-INDIC DIGIT ONE
    (r"\s", "\u2003", True),  # EM SPACE
    (r".", "\n", False),
    (r"(?s:.)", "\n", True),
    ("(?x: a b \\  c # comment\n)", "ab c", True),
    (r"(?m:a)", "a", True),
    (r"\U0001F600+", "\U0001f600\U0001f600", True),
    (r"[\u00e0-\u00ff]", "\u00c9", False),
    (r"(?i)[\u00e0-\u00ff]", "\u00c9", True),
])
def test_flags_and_unicode_classes(pattern: str, text: str, ok: bool) -> None:
    assert bool(re.fullmatch(pattern, text)) == ok  # the oracle first
    assert regex_to_byte_dfa(pattern).matches(text.encode()) == ok


@pytest.mark.parametrize("pattern", [r"a(?!b)", r"a$", r"a\Z", r"(?m)[ab]+$", r"[ab]+$", r"a$\n", r"(a|b$)c?",
                                     r"\d+(?:\.\d+)?$", r"a(?![a-z])b?", r"[a-c]+(?=\n)\n?"])
def test_trailing_lookaheads_and_end_anchors_mean_what_fullmatch_says(pattern: str) -> None:
    """A regex on its own is matched whole (re.fullmatch): a lookahead or end anchor at the end of
    a match sees the end of the text (issue 58). Every string of up to 5 characters over an
    alphabet that exercises them."""
    dfa = regex_to_byte_dfa(pattern)
    for n in range(6):
        for chars in itertools.product("ab1.\nc", repeat=n):
            text = "".join(chars)
            assert dfa.matches(text.encode()) == bool(re.fullmatch(pattern, text)), (pattern, text)


def test_a_lookahead_the_end_of_the_text_fails_matches_nothing() -> None:
    for pattern in (r"a(?=b)", r"a$b", r"a\Zb"):
        assert not any(re.fullmatch(pattern, "".join(c)) for n in range(4) for c in itertools.product("ab", repeat=n))
        with pytest.raises(GrammarError, match="matches nothing"):
            regex_to_byte_dfa(pattern)


@pytest.mark.parametrize("pattern, feature", [
    (r"(?<=a)b", "lookbehind that can see before the start"),
    (r"(?<!a)b", "negative lookbehind that can see before the start"), (r"(?=(?=a))a", "lookahead inside a lookaround"),
    (r"^a", "anchor ^"), (r"\bfoo", r"word boundary \b"), (r"(?=a$)a", "anchor $ inside a lookaround"),
    (r"(a)\1", "backreference"), (r"(a)?(?(1)b|c)", "conditional group"),
])
def test_unsupported_constructs_are_refused_by_name(pattern: str, feature: str) -> None:
    with pytest.raises(GrammarError, match=re.escape(f"({feature}")):
        regex_to_byte_dfa(pattern)


def test_invalid_regex_is_a_grammar_error() -> None:
    with pytest.raises(GrammarError, match="invalid regex"):
        regex_to_byte_dfa("a(b")


def test_case_table_bound_holds_for_this_unicode_version() -> None:
    """``_cased`` scans code points below U+20000 only: no case mapping may start above."""
    import _sre

    assert not [c for c in range(0x20000, 0x110000) if _sre.unicode_iscased(c) or _sre.unicode_tolower(c) != c]


@pytest.mark.parametrize("seed", range(4))
def test_lazy_terminals_mean_the_first_match_lark_reads(seed: int) -> None:
    """A terminal with a lazy quantifier means ``{w : re.match(p, w) matches all of w}``: the
    tokens Lark's ``dynamic_complete`` matcher produces (``re.match`` and its truncations)."""
    rng = random.Random(200 + seed)
    done = 0
    while done < 25:
        p = _pattern(rng)
        if strip_lazy(p) == p:
            continue
        rx = re.compile(p)
        try:
            [(dfa, guard)] = terminal_parts(p, name="T")
        except GrammarError as e:
            assert re.search("too large|matches nothing|body can match the empty string", str(e)), (p, e)
            continue
        assert guard is None
        done += 1
        for _ in range(30):
            s = _draw(dfa, rng)
            if s is not None:
                m = rx.match(s.decode("utf-8"))
                assert m is not None and m.end() == len(s.decode("utf-8")), (p, s)
        for _ in range(300):
            s = "".join(rng.choice(ALPHA) for _ in range(rng.randint(0, 5)))
            m = rx.match(s)
            assert dfa.matches(s.encode()) == (m is not None and m.end() == len(s)), (p, s)


def test_lark_regexp_terminal_keeps_its_flags() -> None:
    """Lark's own REGEXP terminal: the lazy body stops at the first unescaped ``/``, flags follow."""
    [(dfa, _)] = terminal_parts(r"\/(?!\/)(\\\/|\\\\|[^\/])*?\/[imslux]*", name="REGEXP")
    for s, ok in [("/ab/", True), ("/ab/i", True), ("/ab/imx", True), ("/a\\/b/", True), ("/a\\/", True),
                  ("//", False), ("/ab/c", False), ("/a/b/", False), ("/a", False)]:
        assert dfa.matches(s.encode()) == ok, s


@pytest.mark.parametrize("seed", range(4))
def test_trailing_lookaheads_become_follow_guards(seed: int) -> None:
    """A one-character lookahead past the end of the match sees the next character of the
    document: ``w`` followed by ``c`` is a match iff ``re.fullmatch(p + '(?s:.)', w + c)``, and ``w``
    at the end of the text iff ``re.fullmatch(p, w)``."""
    rng = random.Random(300 + seed)
    checked = 0
    for _ in range(30):
        look = rng.choice(["(?!", "(?="]) + rng.choice([r"\w", r"\d", "[a-k]", "[^s]", re.escape(rng.choice(ALPHA)),
                                                        "(?:a|K)", "."]) + ")"
        # no lazy quantifier: beside a trailing lookahead it is refused (tested below)
        body, other = strip_lazy(_seq(rng, 1)), strip_lazy(_seq(rng, 0))
        p = rng.choice([f"{body}{look}", f"(?:{body}{look}|{other})", f"{other}{look}|{body}"])
        try:
            parts = terminal_parts(p, name="T")
        except GrammarError as e:
            assert re.search("too large|matches nothing", str(e)), (p, e)
            continue
        checked += 1
        for _ in range(200):
            w = "".join(rng.choice(ALPHA) for _ in range(rng.randint(0, 4)))
            c = rng.choice(ALPHA)
            ends = [g for d, g in parts if d.matches(w.encode())]
            at_end = any(g is None or g.at_end for g in ends)
            assert at_end == (re.fullmatch(p, w) is not None), (p, w)
            then_c = any(g is None or any(lo <= ord(c) <= hi for lo, hi in g.allowed) for g in ends)
            assert then_c == (re.fullmatch(f"(?:{p})(?s:.)", w + c) is not None), (p, w, c)
    assert checked >= 15, checked


@pytest.mark.parametrize("pattern, feature", [
    (r"a(?!bc)", "more than one character past the end"),
    (r"a*?(?!b)", "past the end of a match with a lazy quantifier"),
    (r"(?<!x)a", "before the start"),
    (r"(?:a?b?)+?c", "body can match the empty string"),
])
def test_lookarounds_the_document_cannot_decide_are_refused(pattern: str, feature: str) -> None:
    with pytest.raises(GrammarError, match=feature):
        terminal_parts(pattern, name="T")


@pytest.mark.parametrize("seed", range(3))
def test_string_enums_take_the_trie_path_and_keep_the_regex_language(seed: int) -> None:
    """A JSON Schema string ``enum`` is written ``"(?:v1|v2)"`` with ``re.escape``d values: it is
    built as the values' trie (``literal_alternatives``), not through the NFA; the DFA is the
    same language as the NFA path's and as ``re.fullmatch``'s."""
    from trellis.constrain.automata.byte_dfa import difference
    from trellis.constrain.automata.dfa_minimise import already_deterministic, minimal, subset_construction
    from trellis.constrain.automata.regex import literal_alternatives
    from trellis.constrain.automata.regex_compile import regex_nfa

    rng = random.Random(seed)
    alpha = list('ab .-"\\/|()*+?[]{}^$é') + ["\U0001F600", "\u2028", "\t"]
    taken = 0
    for _ in range(200):
        values = ["".join(rng.choice(alpha) for _ in range(rng.randint(0, 5))) for _ in range(rng.randint(1, 5))]
        q = rng.choice(['"', ""])
        p = q + "(?:" + "|".join(re.escape(v) for v in values) + ")" + q
        words = literal_alternatives(p)
        assert words is not None, p  # re.escape backslashes ASCII punctuation and whitespace only
        taken += 1
        assert sorted(set(words)) == sorted({(q + v + q).encode() for v in values}), p
        edges, finals = regex_nfa(p)
        det = already_deterministic(edges, finals, 0)
        via_nfa = minimal(*(det if det is not None else subset_construction(edges, finals, 0)), name="t", pattern=p)
        dfa = regex_to_byte_dfa(p)
        assert difference(dfa, [via_nfa]) is None and difference(via_nfa, [dfa]) is None, p
        rx = re.compile(p)
        for s in [q + v + q for v in values] + ["".join(rng.choice(alpha) for _ in range(rng.randint(0, 7)))
                                                for _ in range(50)]:
            assert dfa.matches(s.encode("utf-8", "surrogatepass")) == (rx.fullmatch(s) is not None), (p, s)
    assert taken >= 100, taken
    for p in ['(?:[0-9]|a)', '"(?:a\\d)"', '(?:a|b)*', '"(?:a)"x', '(?:a)|(?:b)', '(?:a.b)', '"(?:a|b)', '(?:\\x41)']:
        assert literal_alternatives(p) is None, p


def test_lark_regex_bodies_escape_what_lark_unescapes() -> None:
    """``emit.lark_regex`` (one ``re.sub``) writes what its per-character definition writes."""
    from trellis.constrain.frontends.json_schema.emit import lark_regex

    def by_char(rx: str) -> str:
        out = []
        for c in rx:
            o = ord(c)
            out.append("\\/" if c == "/" else "\\u0022" if c == '"' else c if 32 <= o < 127 else
                       f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}")
        return "".join(out)

    rng = random.Random(0)
    pool = [chr(i) for i in range(160)] + ["é", "\u2028", "\U0001F600", "\ud800"]
    for _ in range(3000):
        s = "".join(rng.choice(pool) for _ in range(rng.randint(0, 12)))
        assert lark_regex(s) == by_char(s), s
