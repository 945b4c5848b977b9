"""One case, one verdict (issue 55, item 2): a value the judge cannot rebuild, or an exception the
worker cannot describe, fails at most the case that produced it. Before, each of these broke the
protocol and every later case read "not run: the process died" (status crashed, 0/4 passed, where
all 4 pass natively). Each program is checked natively first, in this process."""

from __future__ import annotations

import pytest

from trellis.codegen import run_tests

TAIL = "def g(x):\n    return x + 1\n"
LATER = ["assert g(1) == 2", "assert g(2) == 3", "assert g(3) == 4"]

# name: (program, its first test, whether that case can pass in the sandbox)
VALUES = {
    # the program's own objects as dict keys / set members: handles, which the judge cannot hash
    "dict-keyed-by-enum": ("import enum\nclass C(enum.Enum):\n    A = 1\ndef f(x):\n    return {C.A: x}\n",
                           "assert len(f(1)) == 1", False),
    "set-of-own-objects": ("class P:\n    pass\ndef f(x):\n    return {P(), P()}\n", "assert len(f(1)) == 2", False),
    "namedtuple-rename": ("from collections import namedtuple\nT = namedtuple('T', ['a', 'def', 'a'], rename=True)\n"
                          "def f(x):\n    return T(x, 2, 3)\n",
                          "r = f(1)\nassert r[0] == 1 and r._1 == 2 and r._2 == 3 and type(r).__name__ == 'T'", True),
    "decimal-over-64k-digits": ("from decimal import Decimal, getcontext\ngetcontext().prec = 70000\n"
                                "def f(x):\n    return Decimal(7) ** 80000 / Decimal(3)\n",
                                "from decimal import Decimal\nr = f(1)\nassert r > 0 and len(str(r)) > 65536", True),
    "exception-whose-str-raises": ("class E(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\n"
                                   "def f(x):\n    raise E(x)\n",
                                   "try:\n    f(1)\nexcept Exception:\n    pass\nelse:\n    assert False", True),
}


def _native(program: str, tests: list[str]) -> None:
    g: dict = {"__name__": "__native__"}
    exec(compile(program, "<program>", "exec"), g)
    for t in tests:
        exec(compile(t, "<test>", "exec"), dict(g))


@pytest.mark.parametrize("name", sorted(VALUES))
def test_a_value_that_cannot_be_sent_fails_one_case_not_the_run(name):
    program, first, can_pass = VALUES[name]
    program += TAIL
    tests = [first, *LATER]
    _native(program, tests)  # all 4 pass natively
    rep = run_tests(program, tests, timeout=20)
    assert rep.status == "ok", rep
    assert [c.passed for c in rep.cases[1:]] == [True, True, True], rep
    if can_pass:
        assert rep.cases[0].passed, rep.cases[0]
    else:
        assert not rep.cases[0].passed and "cannot receive" in rep.cases[0].error, rep.cases[0]


def test_an_unreceivable_value_is_not_swallowed_by_the_tests_except():
    """The tests' ``except Exception`` must not turn a value the judge could not rebuild into a pass."""
    program = "class P:\n    pass\ndef f(x):\n    return {P()}\n"
    rep = run_tests(program, ["try:\n    f(1)\nexcept Exception:\n    pass\n"], timeout=20)
    assert rep.status == "ok" and not rep.cases[0].passed, rep
