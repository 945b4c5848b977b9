"""``counted_repeat``: a bounded repeat between literals built by counting units gives the minimal
DFA the general path (NFA, subsets) gives, on random units, bounds and literals; the regexes it
leaves to the general path are the ones its conditions exclude; and a terminal takes it."""

from __future__ import annotations

import random
import re

import pytest

from trellis.constrain.automata import counted_repeat as cr
from trellis.constrain.automata import regex as regex_mod
from trellis.constrain.automata.dfa_minimise import determinised, minimal
from trellis.constrain.automata.regex_compile import regex_nfa

JSON_CHAR = '(?:[^\\x00-\\x1f"\\\\]|\\\\(?:["\\\\/btnfr]|u00[01][0-9a-fA-F]))'
# prefix-free units (taken) and others (a unit that may go on past an end, or match nothing)
UNITS = [JSON_CHAR, "[a-c]", "(?:ab|c)", "(?:é|[0-9])", "[😀-😂]x", "(?:x[0-9]{2}|yy)", "(?:[ab]|\\\\[nt])", ".",
         "(?:a|ab)", "(?:a?b?)", "a*"]


def isomorphic(a, b) -> bool:
    """Two trimmed minimal DFAs (start 0) are the same automaton up to the names of states."""
    if a.trans.shape != b.trans.shape:
        return False
    m, todo = {0: 0}, [0]
    while todo:
        q = todo.pop()
        r = m[q]
        if a.final[q] != b.final[r]:
            return False
        for x, y in zip(a.trans[q].tolist(), b.trans[r].tolist()):
            if (x < 0) != (y < 0):
                return False
            if x < 0:
                continue
            if x in m:
                if m[x] != y:
                    return False
            else:
                m[x] = y
                todo.append(x)
    return len(set(m.values())) == len(m)


def _general(pattern: str):
    edges, finals = regex_nfa(pattern)
    return minimal(*determinised(edges, finals, 0), name="t", pattern=pattern)


def _random_pattern(rng: random.Random) -> str:
    lo = rng.choice([0, 0, 1, 3, 20])
    hi = lo + rng.choice([1, 5, 40, 100, 200])
    pre = rng.choice(["", '"', "ab", "é"])
    post = rng.choice(["", '"', "z", '"!', "a", "é"])
    return f"{re.escape(pre)}{rng.choice(UNITS)}{{{lo},{hi}}}{re.escape(post)}"


def test_counted_dfa_equals_the_general_path() -> None:
    rng = random.Random(7)
    taken = 0
    for _ in range(500):
        p = _random_pattern(rng)
        fast = cr.counted_repeat(p)
        if fast is None:
            continue
        taken += 1
        assert isomorphic(minimal(*fast, name="t", pattern=p), _general(p)), p
    assert taken > 80


def test_what_the_general_path_keeps() -> None:
    """A unit that can go on past an end, one that matches the empty string, a suffix whose first
    byte can begin a unit, an unbounded or small repeat, case folding, two repeats, a lookahead:
    all None (the general path builds them)."""
    for p in ["(?:a|ab){0,200}", "(?:a?b?){0,200}", "[a-c]{0,200}b", "[a-c]{3,}", "[a-c]{0,5}", "(?i)[a-c]{0,200}",
              "[a-c]{0,200}[0-9]{0,200}", "(?:a(?=b)|b){0,200}", "a{0,100}"]:
        assert cr.counted_repeat(p) is None, p
    assert cr.counted_repeat('"' + JSON_CHAR + '{0,128}"') is not None


def test_a_length_bounded_string_terminal_takes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """``regex_to_byte_dfa`` (what a terminal's DFA is built with) takes the counted path for a
    JSON string of at most 100 characters and gives the DFA it gave before."""
    p = JSON_CHAR + '{0,100}"'
    calls = []
    real = cr.counted_repeat

    def spy(pattern: str):
        out = real(pattern)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(regex_mod, "counted_repeat", spy)
    dfa = regex_mod.build_byte_dfa(p, name="S")
    assert calls == [True]
    assert isomorphic(dfa, _general(p))


def test_a_repeat_the_general_path_refuses_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A JSON string of at most 6,000 characters is past the NFA bound (``MAX_NFA_STATES``) of the
    general path, which refuses it by name; the counted path declines it by the same bound even
    when its own size limit would let it through, so the refusal stands."""
    from trellis.constrain.errors import GrammarError

    big = JSON_CHAR + '{0,6000}"'
    with pytest.raises(GrammarError, match="too large"):
        regex_mod.build_byte_dfa(big, name="S")
    monkeypatch.setattr(cr, "MAX_STATES", 10**9)
    assert cr.counted_repeat(big) is None
    assert cr.counted_repeat(JSON_CHAR + '{0,3000}"') is not None  # under the bound: counted
