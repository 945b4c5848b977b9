"""The tests' functions called by the program (issue 55, item 3): a lambda argument, a bound method,
a mock, ``input()`` and ``sys.stdin`` run in the judge, where the tests' code belongs; the worker
waits for their answer and serves the judge's requests meanwhile. What must hold besides the honest
idioms (``idioms.py``): a call that never ends, or ends the case, unblocks the program and costs
one case; a program cannot call a function the tests never passed, nor turn the end of a case into
a pass; calls nest in both directions."""

from __future__ import annotations

from trellis.codegen import run_tests

LATER = "assert g(1) == 2"
TAIL = "def g(x):\n    return x + 1\n"


def test_a_tests_function_that_never_returns_costs_its_case_only():
    prog = "def f(fn):\n    return fn()\n" + TAIL
    tests = ["import time\nassert f(lambda: time.sleep(60)) is None", LATER]
    rep = run_tests(prog, tests, timeout=20, case_timeout=1.0)
    assert [c.passed for c in rep.cases] == [False, True], rep.cases
    assert "longer than" in (rep.cases[0].error or ""), rep.cases[0]


def test_the_program_cannot_turn_an_abandoned_call_into_a_pass():
    # The program swallows whatever ends the call (the judge's abort, its own timer) and answers
    # what the test wants: the case has already failed, and the late answer is dropped.
    prog = ("def f(fn):\n    for _ in range(3):\n        try:\n            fn()\n        except BaseException:\n"
            "            pass\n    return 1\n" + TAIL)
    tests = ["import time\nassert f(lambda: time.sleep(60)) == 1", LATER]
    rep = run_tests(prog, tests, timeout=20, case_timeout=1.0)
    assert not rep.cases[0].passed, rep.cases
    assert rep.cases[1].passed, rep.cases


def test_a_call_of_a_function_the_tests_never_passed_fails_the_run():
    # The program builds its own handle to a function id the tests never passed.
    prog = ("def f(fn):\n    return type(fn)(12345, 'x')()\n" + TAIL)
    rep = run_tests(prog, ["assert f(lambda: 1) == 1", LATER], timeout=20)
    assert not rep.cases[0].passed, rep
    assert not rep.all_passed, rep


def test_an_argument_the_tests_cannot_receive_fails_that_case():
    prog = ("class K:\n    pass\ndef f(fn):\n    return fn({K(): 1})\n" + TAIL)
    rep = run_tests(prog, ["assert f(lambda d: 1) == 1", LATER], timeout=20)
    assert [c.passed for c in rep.cases] == [False, True], rep.cases
    assert "cannot receive" in (rep.cases[0].error or ""), rep.cases[0]


def test_calls_nest_in_both_directions():
    # f calls the tests' fn, which calls f again: 40 levels through both processes.
    prog = "def f(fn, n):\n    return 0 if n == 0 else 1 + fn(n - 1)\n" + TAIL
    tests = ["def fn(n):\n    return f(fn, n)\nassert f(fn, 40) == 40", LATER]
    rep = run_tests(prog, tests, timeout=20)
    assert rep.all_passed, rep


def test_input_at_load_time_reads_eof_as_before():
    prog = "try:\n    FIRST = input()\nexcept EOFError:\n    FIRST = 'eof'\n" + TAIL
    rep = run_tests(prog, ["assert FIRST == 'eof'", LATER], timeout=20)
    assert rep.all_passed, rep


def test_unpatched_input_in_a_case_is_eof():
    prog = "def f():\n    try:\n        return input()\n    except EOFError:\n        return 'eof'\n" + TAIL
    rep = run_tests(prog, ["assert f() == 'eof'", LATER], timeout=20)
    assert rep.all_passed, rep


def test_a_function_kept_by_the_program_is_called_after_its_case():
    # Natively a program may keep a callback and call it later; the tests' closure still answers.
    prog = "KEPT = []\ndef keep(fn):\n    KEPT.append(fn)\ndef later():\n    return KEPT[0](2)\n" + TAIL
    tests = ["keep(lambda x: x * 21)", "assert later() == 42", LATER]
    rep = run_tests(prog, tests, timeout=20)
    assert rep.all_passed, rep


def test_stdin_buffer_reads_the_tests_bytes():
    prog = "import sys\ndef f():\n    return sys.stdin.buffer.readline().split()\n" + TAIL
    tests = ["import io, sys\nfrom unittest import mock\nwith mock.patch('sys.stdin', io.TextIOWrapper(io.BytesIO(b'1 2\\n'))):\n"
             "    assert f() == [b'1', b'2']", LATER]
    rep = run_tests(prog, tests, timeout=20)
    assert rep.all_passed, rep
