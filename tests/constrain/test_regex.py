"""Regex -> byte DFA -> Regex constraint: exact against Python's re on a small vocabulary."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings, strategies as st

from trellis.constrain import GrammarError, Regex, compile, regex_to_byte_dfa
from trellis.constrain.automata.utf8 import codepoint_ranges_to_utf8
from trellis.mask import allocate_bitmask, allowed_ids
from trellis.tokens import Vocabulary

PATTERNS = [r"[0-9]{3}-[0-9]{4}", r"(ab|a)c*", r"[a-zé€]+@x\.(com|org)", r"-?(0|[1-9][0-9]*)(\.[0-9]+)?",
            r"(?i:yes|no)", r'"([^"\\]|\\.)*"', r"[^a]*", r"\w+\s\d"]


def test_utf8_ranges_cover_exactly() -> None:
    import random

    rng = random.Random(0)
    for _ in range(50):
        lo = rng.randint(0, 0x10FFFF)
        hi = min(0x10FFFF, lo + rng.choice([0, 1, 100, 5000, 200000]))
        seqs = codepoint_ranges_to_utf8([(lo, hi)])
        for cp in {lo, hi, (lo + hi) // 2, max(lo, hi - 1)}:
            if 0xD800 <= cp <= 0xDFFF:
                continue
            b = chr(cp).encode()
            assert any(len(s) == len(b) and all(a <= x <= z for x, (a, z) in zip(b, s)) for s in seqs)
        for s in seqs:  # every sequence decodes to a codepoint inside the range
            x = bytes(a for a, _ in s).decode()
            y = bytes(z for _, z in s).decode()
            assert lo <= ord(x) <= ord(y) <= hi


@pytest.mark.parametrize("pattern", PATTERNS)
def test_byte_dfa_matches_re(pattern: str) -> None:
    dfa = regex_to_byte_dfa(pattern)
    rx = re.compile(pattern, re.ASCII if "\\w" in pattern else 0)
    samples = ["123-4567", "12-345", "abccc", "ac", "b", "é@x.com", "ab@x.org", "-0.5", "01", "YeS", "no", "nO",
               '"a\\"b"', '"', "", "bbb", "a", "x1 2", "x_ 3", "€€@x.com"]
    for s in samples:
        assert dfa.matches(s.encode()) == bool(rx.fullmatch(s)), (pattern, s)


@given(st.text(alphabet="abc0129-.é€@x\"\\ ", max_size=12))
@settings(max_examples=300, deadline=None)
def test_regex_dfa_property(s: str) -> None:
    for pattern in PATTERNS[:6]:
        assert regex_to_byte_dfa(pattern).matches(s.encode()) == bool(re.fullmatch(pattern, s))


# a(?=b) refuses as "matches nothing" (fullmatch never matches it); a(?!b) and a$ now compile,
# as re.fullmatch reads them (test_regex_compile.py checks them against it)
@pytest.mark.parametrize("pattern", [r"(a)\1", r"a(?=b)", r"(?<=a)b", r"^a", r"\bfoo"])
def test_unsupported_features_refused(pattern: str) -> None:
    with pytest.raises(GrammarError):
        regex_to_byte_dfa(pattern)


def _vocab() -> Vocabulary:
    alpha = "0123456789-.abé"
    toks = [c.encode() for c in alpha] + [a.encode() + b.encode() for a in alpha for b in alpha[:8]]
    toks += ["é".encode()[:1], "é".encode()[1:], b""]
    return Vocabulary(tuple(toks), eos=frozenset([len(toks) - 1]))


def _prefix_ok(pattern: str, s: bytes, alphabet: str) -> bool:
    """Brute force: is s a prefix of some match (bounded search over the alphabet)?"""
    import regex

    try:
        text = s.decode()
    except UnicodeDecodeError:
        try:
            text = (s + "é".encode()[1:]).decode()  # the only split character in the vocab
        except UnicodeDecodeError:
            return False
        return regex.fullmatch(pattern, text, partial=True) is not None
    return regex.fullmatch(pattern, text, partial=True) is not None


@pytest.mark.parametrize("pattern", [r"-?(0|[1-9][0-9]*)(\.[0-9]+)?", r"(ab|é)+-[0-9]{2}", r"a[^b]*b"])
def test_regex_constraint_masks_exact(pattern: str) -> None:
    v = _vocab()
    c = compile(Regex(pattern), v)
    row = allocate_bitmask(1, len(v))[0]
    eos = len(v) - 1
    import random

    rng = random.Random(0)
    for _ in range(30):
        s, text = c.start(), b""
        for _step in range(8):
            c.fill_mask(s, row)
            got = set(allowed_ids(row, len(v)))
            exp = {t for t, tb in enumerate(v.tokens) if tb and _prefix_ok(pattern, text + tb, "")}
            assert got - {eos} == exp, (pattern, text)
            assert (eos in got) == bool(re.fullmatch(pattern, text.decode(errors="replace"))), (pattern, text)
            opts = sorted(got - {eos})
            if not opts:
                break
            t = rng.choice(opts)
            s, text = c.advance(s, t), text + v.tokens[t]
            assert s is not None


def test_regex_forced_tokens() -> None:
    v = Vocabulary((b"a", b"b", b"c", b"bc", b"abc", b""), eos=frozenset([5]))
    c = compile(Regex("abc(d)?|abcd"), v)
    s = c.start()
    assert [v.tokens[t] for t in c.forced_tokens(s)] == [b"abc"]


def _unminimised(pattern: str):
    """The trimmed DFA of ``pattern`` as determinised, before minimisation."""
    from trellis.constrain.automata.byte_dfa import trim

    from .test_dfa_kernel import determinised

    return trim(*determinised(pattern))


def test_minimised_byte_dfas_keep_the_language_and_merge_utf8_copies() -> None:
    """``regex_to_byte_dfa`` minimises (Moore): same accepted strings as the unminimised DFA,
    on random byte strings including split UTF-8, and JSON's STRING interior is one state."""
    import random

    import trellis.constrain.automata.regex as R

    pats = [r'"(?:[^"\\\x00-\x1f]|\\["\\\/bfnrt]|\\u[0-9a-fA-F]{4})*"', r"(ab|ac)*d?", r"\w+é|x.{2,5}y",
            r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?", r"[0-9]{4}-[0-9]{2}"]
    rng = random.Random(0)
    for p in pats:
        small = R.build_byte_dfa(p, name="t")
        big = _unminimised(p)
        assert small.num_states <= big.num_states
        assert R.minimise(small).num_states == small.num_states  # idempotent: already minimal
        alpha = sorted(set(p.encode()) | set(b'a0"\\ x\xc3\xa9y-.e'))
        for _ in range(4000):
            s = bytes(rng.choice(alpha) for _ in range(rng.randint(0, 9)))
            assert big.matches(s) == small.matches(s), (p, s)
    string = R.build_byte_dfa(pats[0], name="STRING")
    assert string.num_states == 15  # 83 unminimised: every way into the interior was a copy


def test_hashed_refinement_equals_exact_refinement() -> None:
    """``minimise`` refines partitions by hashed row signatures; the partition must be the exact
    one (``refine_exact``, rows compared whole) on the shipped grammars' terminals and on the
    long chains of flexible-whitespace schema terminals, and a degenerate hash (successors
    ignored) must fail the bisimulation check so that the exact refinement is used instead."""
    import lark
    import numpy as np

    import trellis.constrain.automata.dfa_minimise as M
    from trellis.constrain.compile import load_grammar_text
    from trellis.constrain.frontends.json_schema import schema_to_lark
    from trellis.constrain import shipped_grammars

    texts = [load_grammar_text(n)[0] for n in shipped_grammars()]
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer", "minimum": -5}},
                                               "b": {"type": "string", "format": "date"}}}
    texts.append(schema_to_lark(schema, whitespace="flexible", max_whitespace=20)[0])
    pats = {t.pattern.to_regexp() for text in texts for t in lark.Lark(text, parser="lalr").terminals}

    def canon(cls):  # each state -> the first state of its class
        return np.unique(cls, return_index=True, return_inverse=True)[1][cls]

    merged = 0
    for p in sorted(pats):
        raw = _unminimised(p)
        _, first = np.unique(np.ascontiguousarray(raw.trans.T), axis=0, return_index=True)
        tc = raw.trans[:, np.sort(first)]
        exact, hashed = M.refine_exact(tc, raw.final, 200), M.refine_hashed(tc, raw.final, 200)
        assert exact is not None and hashed is not None, p
        assert np.array_equal(canon(exact), canon(hashed)), p
        merged += int(exact.max()) + 1 < len(raw.final)
        blind = np.zeros(tc.shape[1] + 1, dtype=np.uint64)
        blind[0] = 1  # hashes finality only
        if int(exact.max()) + 1 > 2:
            assert M.refine_hashed(tc, raw.final, 200, weights=blind) is None, p
    assert merged  # some terminal DFAs do shrink


def _same_language(a, b) -> bool:
    """Two trimmed byte DFAs accept the same strings (breadth-first over the product)."""
    seen, todo = {(0, 0)}, [(0, 0)]
    while todo:
        s, t = todo.pop()
        if bool(a.final[s]) != bool(b.final[t]):
            return False
        for x in range(256):
            u, v = int(a.trans[s, x]), int(b.trans[t, x])
            if (u < 0) != (v < 0):
                return False
            if u >= 0 and (u, v) not in seen:
                seen.add((u, v))
                todo.append((u, v))
    return True


def test_compiled_dfas_equal_interegulars_on_patterns_both_read() -> None:
    """``regex_compile`` (Python's parser, Thompson NFA) replaced interegular for terminals: on
    patterns both read alike (no Unicode shorthand classes, no flags: interegular's \\w is ASCII)
    the two DFAs must accept the same language, and ``re.fullmatch`` agrees on samples."""
    import random
    import re

    import interegular

    import trellis.constrain.automata.dfa_minimise as M
    import trellis.constrain.automata.regex as R

    ws = "[ \t\n\r]"  # real characters, as lark hands schema terminals over
    pats = [rf"{ws}{{0,64}},{ws}{{0,64}}", rf"\{{{ws}{{0,8}}", rf"{ws}{{0,3}}\]", "null", r"\"name\"", "ab*c+d?",
            r"[a-z_][a-z0-9_]*", r"x{3}y{0,2}z", r"[-a]+[b-]?\-", r"a{0}b", r"[\t\\\]x]", r"\x41B?", "a?a?a",
            "a|b", "(ab)*", "[^a]", "a{2,}", "é", "[^\"\\\\]*", "(?:é|€)+x?", ".b", *PATTERNS]
    rng = random.Random(0)
    alpha = sorted(set(" \t\n\r,{}]abcdxyz_-\\AB\"nulé€"))
    for p in pats:
        if "\\w" in p or "\\d" in p or "\\s" in p or "(?i" in p:  # ſ matches s under re's i
            continue
        new = R.build_byte_dfa(p, name="t")
        old = M.determinise(*_interegular_nfa(interegular.parse_pattern(p).to_fsm()), name="t", pattern=p)
        assert _same_language(new, old), p
        rx = re.compile(p)
        for _ in range(300):
            s = "".join(rng.choice(alpha) for _ in range(rng.randint(0, 7)))
            assert new.matches(s.encode()) == (rx.fullmatch(s) is not None), (p, s)


def _interegular_nfa(fsm):  # type: ignore[no-untyped-def]
    """interegular FSM -> (byte edges, finals, start) as the old path expanded it (an oracle)."""
    from trellis.constrain.automata.charsets import alphabet_ranges
    from trellis.constrain.automata.utf8 import codepoint_ranges_to_utf8

    seqs = {cls: codepoint_ranges_to_utf8(list(r)) for cls, r in alphabet_ranges(fsm.alphabet).items()}
    states = sorted(fsm.states)
    index = {s: i for i, s in enumerate(states)}
    edges: list = [[] for _ in states]
    for s, row in fsm.map.items():
        for cls, t in row.items():
            for seq in seqs.get(cls, []):
                cur = index[s]
                for k, (lo, hi) in enumerate(seq):
                    if k == len(seq) - 1:
                        dst = index[t]
                    else:
                        edges.append([])
                        dst = len(edges) - 1
                    edges[cur].append((lo, hi, dst))
                    cur = dst
    return edges, {index[s] for s in fsm.finals}, index[fsm.initial]


def test_fast_determinise_and_minimise_paths_equal_the_general_ones() -> None:
    """Two shortcuts must build the very DFA (same numbering) the general path builds:
    ``already_deterministic`` (an NFA with no byte on two edges of one state is its own DFA) vs
    the subset construction, and ``minimal_acyclic`` (bottom-up minimisation of a DFA without
    cycles) vs ``minimise(trim(...))``. Patterns: linear ones (both shortcuts apply to chains
    such as flexible whitespace) and random ones with alternation and loops."""
    import random

    import numpy as np

    import trellis.constrain.automata.dfa_minimise as M
    import trellis.constrain.automata.regex as R
    from trellis.constrain.automata.regex_compile import regex_nfa

    rng = random.Random(7)
    ws = "[ \t\n\r]"
    pats = [rf"{ws}{{0,64}},{ws}{{0,64}}", rf"\{{{ws}{{0,64}}", rf"{ws}{{0,64}}\}}", rf"{ws}{{0,3}}{ws}{{1,2}}",
            "a?a?a", "ab*c+d?", r"[a-z_][a-z0-9_]*", "x{3}y{0,2}z", *PATTERNS]
    for _ in range(200):
        items = [rng.choice(["a", "b", "[ab]", "[a-c]", ",", ws]) + rng.choice(["", "?", "*", "+", "{2}", "{0,3}", "{1,4}"])
                 for _ in range(rng.randint(1, 5))]
        pats += ["".join(items), "(?:" + "|".join(items[:2]) + ")" + "".join(items[2:])]
    shortcuts = {"deterministic": 0, "acyclic": 0}
    for p in pats:
        edges, finals = regex_nfa(p)
        det = M.already_deterministic(edges, finals, 0)
        if det is not None:
            sub = R.subset_construction(edges, finals, 0)
            assert np.array_equal(det[0], sub[0]) and np.array_equal(det[1], sub[1]), p
            shortcuts["deterministic"] += 1
        trans, final = R.subset_construction(edges, finals, 0)
        fast = M.minimal_acyclic(trans, final, name="t", pattern=p)
        if fast is not None:
            slow = R.minimise(R.trim(trans, final))
            assert np.array_equal(fast.trans, slow.trans) and np.array_equal(fast.final, slow.final), p
            shortcuts["acyclic"] += 1
    assert min(shortcuts.values()) >= 20, shortcuts


@pytest.mark.parametrize("seed", range(6))
def test_difference_by_literals_equals_the_language_difference(seed: int) -> None:
    """``difference`` with literal subtrahends (the trie product) against brute force on every
    string up to length 5, and against the general product where the subtrahends are not literals."""
    import itertools
    import random

    from trellis.constrain.automata.regex import difference, literal_dfa, regex_to_byte_dfa

    rng = random.Random(seed)
    alpha = "abc"
    atoms = ["a", "b", "c", "[ab]", "[^a]", "."]
    for _ in range(25):
        pat = "".join(rng.choice(atoms) + rng.choice(["", "*", "+", "?"]) for _ in range(rng.randint(1, 4)))
        a = regex_to_byte_dfa(pat)
        words = sorted({"".join(rng.choice(alpha) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 6))})
        d = difference(a, [literal_dfa(w.encode()) for w in words])
        # the same subtrahends as non-chain DFAs ("w|w" minimises to the chain; (w)(x)? with x never
        # matching is not available, so use the union as one regex: not a chain when words branch)
        general = difference(a, [regex_to_byte_dfa("|".join(words))])
        for n in range(6):
            for chars in itertools.product(alpha, repeat=n):
                s = "".join(chars)
                want = re.fullmatch(pat, s) is not None and s not in words
                got = d is not None and d.matches(s.encode())
                assert got == want, (pat, words, s)
                assert (general is not None and general.matches(s.encode())) == want, (pat, words, s)
