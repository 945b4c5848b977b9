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


# ------------------------------------------------------------------ red-team findings (2026-11-29)
def test_arithmetic_on_the_programs_object_is_reported_as_the_programs_answer():
    # A __sub__ returning 0 passes ``abs(f(x) - expected) < tol``, natively too: the case must say
    # that it rests on the program's own operator.
    prog = ("class Z:\n    def __sub__(self, o):\n        return 0\n    def __rsub__(self, o):\n        return 0\n"
            "def f(x):\n    return Z()\n")
    rep = run_tests(prog, ["assert abs(f(7) - 0.123456) < 1e-6", "assert abs(0.987654 - f(8)) <= 1e-9"], timeout=20)
    assert all(c.program_decided for c in rep.cases if c.passed), rep.cases
    honest = run_tests("def f(x):\n    return x / 3\n", ["assert abs(f(1) - 0.3333333) < 1e-6"], timeout=20)
    assert honest.all_passed and not honest.cases[0].program_decided, honest


def test_a_function_registered_but_never_sent_cannot_be_called_by_a_guessed_id():
    prog = ("def f(*a):\n    return 0\nKEEP = []\ndef keep(fn):\n    KEEP.append(fn)\n"
            "def steal():\n    return type(KEEP[0])(1, 'x')()\n" + TAIL)
    tests = ["def secret():\n    return 'the-expected-value'\ntry:\n    f(secret, object())\nexcept TypeError:\n    pass",
             "keep(lambda: 0)", "assert steal() == 'the-expected-value'"]
    rep = run_tests(prog, tests, timeout=20)
    assert not rep.cases[2].passed, rep.cases


def test_program_threads_calling_the_tests_function_at_once():
    prog = ("from concurrent.futures import ThreadPoolExecutor\ndef f(fn, xs):\n    with ThreadPoolExecutor(4) as ex:\n"
            "        return list(ex.map(fn, xs))\n" + TAIL)
    tests = ["assert f(lambda x: x * 2, list(range(20))) == [x * 2 for x in range(20)]", LATER]
    rep = run_tests(prog, tests, timeout=20, case_timeout=5)
    assert rep.all_passed, rep


def test_a_call_too_large_to_send_fails_in_the_program_and_the_run_goes_on():
    prog = "def f(emit):\n    emit('a' * (9 << 20))\n    return 1\n" + TAIL
    slow = "import time\ntime.sleep(1.5)\n" + LATER
    rep = run_tests(prog, ["out = []\nassert f(out.append) == 1", slow, slow], timeout=20, case_timeout=3)
    assert [c.passed for c in rep.cases] == [False, True, True], rep.cases
    assert "MB" in (rep.cases[0].error or ""), rep.cases[0]


def test_calls_while_loading_that_fail_in_the_judge_fail_the_load_not_the_judge():
    for load in ("class K:\n    pass\ninput({K(): 1})\n",
                 "class P:\n    def __str__(self):\n        raise SystemExit(0)\ninput(P())\n"):
        rep = run_tests(load + TAIL, [LATER], timeout=20)
        assert rep.status == "error" and "Traceback" not in rep.reason, rep


def test_a_global_the_judge_cannot_rebuild_is_left_out_not_a_crash():
    # two field names equal once NFKC-normalised: collections.namedtuple raises SyntaxError
    prog = "class T(tuple):\n    _fields = ('a', '\\U0001d41a')\nX = T((1, 2))\n" + TAIL
    rep = run_tests(prog, [LATER], timeout=20)
    assert rep.all_passed, rep


def test_a_malformed_reply_while_the_judge_drains_ends_the_run_cleanly():
    prog = ("import os, time, gc\ndef ch():\n    for o in gc.get_objects():\n        if type(o).__name__ == '_Channel':\n"
            "            return o\ndef f():\n    c = ch()\n    try:\n        time.sleep(5)\n    except BaseException:\n"
            "        pass\n    t = time.monotonic()\n    while time.monotonic() - t < 1.0:\n        pass\n"
            "    os.write(c.wfd, b'{\"id\": [1]}\\n')\n    time.sleep(5)\n" + TAIL)
    rep = run_tests(prog, ["f()", LATER], timeout=10, case_timeout=1)
    assert not rep.all_passed and "Traceback" not in rep.reason, rep


def test_an_assert_message_the_program_never_finishes_writing_ends_in_time():
    prog = ("class R:\n    def __str__(self):\n        while True:\n            try:\n                pass\n"
            "            except BaseException:\n                pass\ndef f(x):\n    return R()\n" + TAIL)
    rep = run_tests(prog, ["r = f(1)\nassert isinstance(r, list), r", LATER], timeout=20)
    assert len(rep.cases) == 2 and not rep.cases[0].passed, rep
    assert rep.seconds < 15, rep.seconds


def test_the_tests_own_exception_and_a_builtins_arguments_come_back_as_they_were():
    prog = "def f(fn):\n    return fn(5)\n" + TAIL
    tests = ["class Stop(Exception):\n    pass\ndef cb(x):\n    raise Stop(x)\ntry:\n    f(cb)\n"
             "except Stop as e:\n    assert e.args == (5,)\nelse:\n    assert False",
             "def cb(x):\n    raise KeyError('k')\ntry:\n    f(cb)\nexcept KeyError as e:\n    assert e.args == ('k',), e.args",
             LATER]
    rep = run_tests(prog, tests, timeout=20)
    assert rep.all_passed, rep


def test_stdin_without_a_buffer_raises_in_the_program_where_it_can_fall_back():
    prog = ("import sys\ndef f():\n    try:\n        return sys.stdin.buffer.read().decode()\n"
            "    except AttributeError:\n        return sys.stdin.read()\n" + TAIL)
    tests = ["import io\nfrom unittest import mock\nwith mock.patch('sys.stdin', io.StringIO('hi')):\n    assert f() == 'hi'"]
    rep = run_tests(prog, tests, timeout=20)
    assert rep.all_passed, rep


def test_a_list_the_tests_function_changes_in_place_is_changed_in_the_program():
    prog = "def f(fn):\n    xs = [1]\n    d = {}\n    fn(xs, d)\n    return xs, d\n" + TAIL
    rep = run_tests(prog, ["def cb(xs, d):\n    xs.append(2)\n    d['k'] = [3]\nassert f(cb) == ([1, 2], {'k': [3]})",
                           LATER], timeout=20)
    assert rep.all_passed, rep


# ------------------------------------------------------------------ second red-team pass (2026-11-29)
def test_a_kept_token_of_the_tests_exception_does_not_raise_it_again_later():
    # A wrong search probes only the first element, keeps the token of the tests' exception and
    # raises it with later calls: the tests must not see their exception come back.
    prog = ("TOK = []\ndef search(probe, xs):\n    try:\n        probe(xs[0])\n    except Exception as e:\n"
            "        t = getattr(e, '_judge_tok', None)\n        if t is not None:\n            TOK.append(t)\n"
            "        raise\n    if TOK:\n        e = RuntimeError()\n        e._judge_tok = TOK[0]\n        raise e\n"
            "    return None\n")
    tests = ("class Found(Exception):\n    pass\ndef make_probe(secret):\n    def probe(x):\n        if x == secret:\n"
             "            raise Found(x)\n        return False\n    return probe\ndef finds(secret, xs):\n    try:\n"
             "        search(make_probe(secret), xs)\n    except Found:\n        return True\n    return False\n"
             "assert finds(0, [0, 1, 2, 3])\nassert finds(7, [0, 1, 2, 3, 4, 5, 6, 7])\nassert finds(5, [9, 8, 5])\n")
    rep = run_tests(prog, tests, timeout=20)
    assert [c.passed for c in rep.cases] == [True, False, False], rep.cases


def test_an_exit_code_whose_repr_raises_fails_its_case_only():
    prog = ("class R:\n    def __repr__(self):\n        raise ValueError('repr refuses')\nclass Quit(SystemExit):\n"
            "    pass\ndef f(x):\n    e = Quit(0)\n    e.__dict__['code'] = R()\n    raise e\n" + TAIL)
    rep = run_tests(prog, ["assert f(1) == 2", LATER], timeout=20)
    assert [c.passed for c in rep.cases] == [False, True] and "Traceback" not in rep.reason, rep


def test_nested_calls_from_program_threads():
    prog = ("from concurrent.futures import ThreadPoolExecutor\ndef pmap(fn, xs):\n    with ThreadPoolExecutor(2) as ex:\n"
            "        return list(ex.map(fn, xs))\ndef apply(fn, x):\n    return fn(x)\n" + TAIL)
    tests = ["assert apply(lambda x: pmap(lambda y: y * 2, [x, x]), 3) == [6, 6]",
             "assert pmap(lambda y: pmap(lambda z: z, [y]), [1, 2]) == [[1], [2]]", LATER]
    rep = run_tests(prog, tests, timeout=20, case_timeout=5)
    assert rep.all_passed, rep


def test_what_the_tests_function_left_unchanged_keeps_its_type_in_the_program():
    prog = ("from collections import defaultdict, namedtuple\nP = namedtuple('P', 'x y')\ndef f(fn):\n"
            "    d = defaultdict(int)\n    d['a'] += 1\n    return fn([d, 1])\ndef h(fn):\n"
            "    xs = [P(1, 2), bytearray(b'ab'), 0]\n    fn(xs)\n    return [type(xs[0]) is P, type(xs[1]).__name__, xs[2]]\n")
    tests = ["assert f(lambda xs: 'ok') == 'ok'", "def cb(xs):\n    xs[2] = 5\nassert h(cb) == [True, 'bytearray', 5]"]
    rep = run_tests(prog, tests, timeout=20)
    assert rep.all_passed, rep


def test_isinstance_against_the_programs_class_is_the_programs_answer():
    prog = "class M(type):\n    def __instancecheck__(cls, obj):\n        return True\nclass P(metaclass=M):\n    pass\n"
    rep = run_tests(prog, ["assert isinstance(12345, P)"], timeout=20)
    assert all(c.program_decided for c in rep.cases if c.passed), rep.cases
