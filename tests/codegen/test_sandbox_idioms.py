"""The honest test idioms of ``idioms.py`` (issue 55, item 3), each a pair: the correct program
passes and the wrong one fails, natively (checked here, one process) and in the sandbox. Idioms the
sandbox does not support yet are strict xfails, named in NOT_YET: one that starts to pass fails
the suite until it is taken off the list."""

from __future__ import annotations

import contextlib
import io

import pytest

from tests.codegen.idioms import IDIOMS
from trellis.codegen import run_tests

# Idioms not supported yet (strict xfails): none since the worker calls the tests' functions back.
NOT_YET: set[str] = set()
# Cases that rest on the program's own comparisons, containment or arithmetic (reported per case).
PROGRAM_DECIDED = {"objects-sorted", "object-contains", "object-add"}


def _native(program: str, tests: list[str]) -> list[bool]:
    out = []
    for t in tests:
        g: dict = {"__name__": "__main__"}
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(program, "<program>", "exec"), g)
                exec(compile(t, "<test>", "exec"), g)
            out.append(True)
        except Exception:  # noqa: BLE001 - a failed case, natively
            out.append(False)
    return out


def test_the_battery_is_large_enough():
    assert len(IDIOMS) >= 40


@pytest.mark.parametrize("name", sorted(IDIOMS))
def test_idiom_natively(name):
    good, wrong, tests = IDIOMS[name]
    assert all(_native(good, tests)), "the correct program must pass natively"
    assert not all(_native(wrong, tests)), "the wrong program must fail natively"


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason="issue 55: not yet"))
                                  if n in NOT_YET else n for n in sorted(IDIOMS)])
def test_idiom_in_the_sandbox(name):
    good, wrong, tests = IDIOMS[name]
    rep = run_tests(good, tests, timeout=20)
    assert rep.all_passed, rep
    assert all(c.program_decided == (name in PROGRAM_DECIDED) for c in rep.cases), rep.cases
    bad = run_tests(wrong, tests, timeout=20)
    assert not bad.all_passed, bad
