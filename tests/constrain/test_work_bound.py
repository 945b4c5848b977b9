"""Work bounds of the Earley engine (issue 58): no grammar may hold its caller.

A mask or an advance that needs more chart work than its bound raises ``GrammarBudgetError``
(typed, naming the terminal that filled the chart), deterministically (work is counted, not
timed), and the constraint stays usable and exact afterwards.
"""

from __future__ import annotations

import random

import pytest

from tests.constrain.test_earley import random_vocab
from trellis.constrain import GrammarBudgetError, GrammarError, compile
from trellis.constrain.earley.earley import UNBOUNDED
from trellis.constrain.earley.scannerless import EarleyConstraint

# Ambiguous by construction (the shape of a real Lua grammar that stalled masks for seconds):
# words split into words at every byte, a nullable starred group, and empty arguments that let a
# prefix expression call itself.
AMBIGUOUS = r"""
start: (stat ";"? WS)+
stat: var "=" exp | call
var: NAME | prefix "." NAME
prefix: var | call | "(" exp ")"
call: prefix args
args: "(" exp? ")" | table | STRING
table: (fields WS?)*
fields: exp ("," exp)*
exp: NAME | STRING | table | prefix | exp OP exp
NAME: ALNUM+
STRING: WORD (" " WORD+)?
WORD: ALNUM+
ALNUM: /[a-z][a-z0-9]*/
OP: "+" | "-" | ".."
WS: " "+
"""

DOC = b"ab=cd.ef(gh ij)+kl mn "  # a sentence (Lark agrees); masks along it take 10-85k units


def _masks(c, text: bytes) -> list[bytes]:
    out, s = [], c.start()
    for b in text:
        out.append(c.mask_array(s).tobytes())
        s = c.advance(s, b)
        assert s is not None
    return out


def _first_error(c, text: bytes):
    s = c.start()
    for i, b in enumerate(text):
        try:
            c.mask_array(s)
        except GrammarBudgetError as e:
            return i, e
        s = c.advance(s, b)
    return None, None


def test_a_mask_over_its_bound_is_a_typed_error_naming_the_culprit():
    v = random_vocab(b"abcdefghijklmnop .=(),+", random.Random(1), 200)
    unbounded = compile(AMBIGUOUS, v, cache=False, mask_work=UNBOUNDED)
    want = _masks(unbounded, DOC)
    c = compile(AMBIGUOUS, v, cache=False, mask_work=20_000)
    i, e = _first_error(c, DOC)
    assert e is not None, "a bound of 20,000 units never triggered"
    assert isinstance(e, GrammarError) and e.what == "mask" and e.budget == 20_000
    assert e.culprit in {"NAME", "WORD", "ALNUM", "STRING", "WS"} and e.culprit in str(e)
    assert "mask_work" in str(e) and "TRELLIS_MASK_WORK" in str(e)
    # deterministic: counted work, the same position on a fresh constraint (a used one answers
    # part of the work from its memos, finished work only)
    again = EarleyConstraint(c.ir, v, share=False, mask_work=20_000)
    assert _first_error(again, DOC)[0] == i
    # the same constraint, bound lifted: still exact (nothing half-done was memoised)
    c.mask_work = UNBOUNDED
    assert _masks(c, DOC) == want


def test_an_advance_over_its_bound_is_a_typed_error():
    v = random_vocab(b"abcdefghijklmnop .=(),+", random.Random(2), 50)
    long_token = len(v.tokens) - 1  # a token that spells a whole statement: many chart steps at once
    v2 = type(v)(v.tokens[:-1] + (DOC, b""), eos=frozenset([long_token + 1]))
    c = compile(AMBIGUOUS, v2, cache=False, advance_work=50)
    with pytest.raises(GrammarBudgetError) as ei:
        c.advance(c.start(), long_token)
    assert ei.value.what == "advance" and "advance_work" in str(ei.value)
    c.advance_work = UNBOUNDED
    assert c.advance(c.start(), long_token) is not None


def test_default_bounds_and_overrides():
    from trellis.constrain.earley import work_bound

    v = random_vocab(b"ab", random.Random(3), 20)
    c = compile("start: /a+/ \"b\"", v, cache=False)
    assert isinstance(c, EarleyConstraint)
    assert c.mask_work == work_bound.MASK_WORK and c.advance_work == work_bound.ADVANCE_WORK
    assert compile("start: /a+/ \"b\"", v, cache=False, mask_work=7).mask_work == 7


@pytest.mark.parametrize("grammar, words", [
    ("start: /(ab){2,50000}c/i", "bounded repeat {2,50000}"),  # 150k NFA states: refused while building
    ("start: /(a?){2,300}b/i", "TRELLIS_COMPILE_WORK"),  # 302 subsets of ~300 members: the work bound
])
def test_a_terminal_too_costly_to_build_is_refused_by_name(grammar, words):
    v = random_vocab(b"ab", random.Random(4), 20)
    with pytest.raises(GrammarError) as ei:
        compile(grammar, v, cache=False)
    assert words in str(ei.value) and "terminal" in str(ei.value) and ei.value.line == 1


def test_the_start_mask_gets_the_bound_times_start_factor(monkeypatch):
    """The start state's mask is computed once per grammar (every rule predicted at once), like a
    compile: it may take ``START_FACTOR`` times the mask bound, later masks only the bound."""
    from trellis.constrain.earley import work_bound

    v = random_vocab(b"abcdefghijklmnop .=(),+", random.Random(1), 200)
    c = EarleyConstraint(compile(AMBIGUOUS, v, cache=False).ir, v, share=False, mask_work=UNBOUNDED)
    c.mask_array(c.start())  # a fresh constraint: no memo answers part of it
    start_work = c.earley.work
    bound = start_work // 2  # the start mask needs twice this
    assert start_work < bound * work_bound.START_FACTOR
    i, e = _first_error(EarleyConstraint(c.ir, v, share=False, mask_work=bound), DOC)
    assert e is not None and i >= 1
    monkeypatch.setattr(work_bound, "START_FACTOR", 1)
    i, e = _first_error(EarleyConstraint(c.ir, v, share=False, mask_work=bound), DOC)
    assert e is not None and i == 0
