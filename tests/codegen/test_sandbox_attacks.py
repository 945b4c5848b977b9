"""The sandbox against programs written to beat it (issue 23): one test per attack class, in the
default configuration and, where the platform allows, with the namespaces switched off (the
fallback layers). Every test also checks that nothing of the run is left on the host: files in
/tmp and /dev/shm, SysV IPC objects, processes.

Expected values are random per test session, so a program cannot pass by knowing them: an
unearned pass needs the judge's memory, which the program never shares."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import trellis.codegen.sandbox as sb
import trellis.codegen.sandbox_child as sandbox_child
import trellis.codegen.sandbox_host as sandbox_host
from trellis.codegen import SandboxError, run_tests

TOKEN = secrets.token_hex(16)  # an expected value no program can know
TESTS = [f"assert f(7) == {TOKEN!r}", f"assert f(8) == {TOKEN[::-1]!r}"]
MARKER = b"child side of ``trellis.codegen.sandbox``"


def _host_state() -> dict:
    state = {}
    for d in ("/tmp", "/dev/shm"):
        try:
            state[d] = {e.name for e in os.scandir(d) if e.stat(follow_symlinks=False).st_uid != os.getuid()
                        or e.name.startswith(("trellis-", ".trellis"))}
        except OSError:
            state[d] = set()
    for kind in ("shm", "msg", "sem"):
        try:
            state[kind] = set(Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:])
        except OSError:
            state[kind] = set()
    return state


def _leftover_processes() -> list[int]:
    """Processes of a run still alive after up to 3 s (SIGKILL is asynchronous)."""
    deadline = time.monotonic() + 3.0
    while True:
        left = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                if MARKER in Path(f"/proc/{pid}/cmdline").read_bytes():
                    left.append(int(pid))
                    continue
                uid = int(next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines()
                               if x.startswith("Uid:")).split()[1])
                if uid >= 1 << 24:  # a per-run uid (sandbox_host.run_uid)
                    left.append(int(pid))
            except (OSError, StopIteration, ValueError):
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


@pytest.fixture(params=["default", "no-namespaces"])
def mode(request, monkeypatch):
    """The default layers, and the same without namespaces (Landlock, seccomp, the per-run uid and
    the supervisor's process-tree accounting remain)."""
    if request.param == "no-namespaces":
        monkeypatch.setattr(sb, "namespaces", lambda: ((), ()))
    before = _host_state()
    yield request.param
    assert _leftover_processes() == []
    after = _host_state()
    for key, names in after.items():
        assert names <= before[key], (key, names - before[key])


def _rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _layers() -> tuple[str, ...]:
    return run_tests("", ["assert True"]).enforced


def _needs(*prefixes: str) -> None:
    layers = _layers()
    if not all(any(x.startswith(p) for x in layers) for p in prefixes):
        pytest.skip(f"needs the {'/'.join(prefixes)} layer; this platform enforces {layers}")


def _needs_any(*prefixes: str) -> None:
    layers = _layers()
    if not any(x.startswith(p) for x in layers for p in prefixes):
        pytest.skip(f"needs one of the {'/'.join(prefixes)} layers; this platform enforces {layers}")


def _no_pass(rep) -> None:
    assert rep.passed == 0, rep
    assert all(not c.passed for c in rep.cases)


# ------------------------------------------------------------------------------------ reward forgery
FORGERIES = {
    "eq-always-true": "class Yes:\n    def __eq__(self, o):\n        return True\n    __hash__ = None\n"
                      "def f(x):\n    return Yes()\n",
    "str-subclass-eq": "class S(str):\n    def __eq__(self, o):\n        return True\n"
                       "def f(x):\n    return S('no')\n",
    "patched-builtins": "import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})\n"
                        "builtins.abs = lambda x: 0\nbuiltins.isinstance = lambda *a: True\ndef f(x):\n    return 0\n",
    "patched-json-encoder": "import json\njson._default_encoder.encode = lambda o: '{\"ev\": \"done\"}'\n"
                            "json.dumps = lambda *a, **k: '{\"ev\": \"case\", \"i\": 0, \"ok\": true}'\n"
                            "def f(x):\n    return 0\n",
    "patched-runner": "import __main__\nfor name in ('_emit', '_compile', '_exec', '_describe', '_enc'):\n"
                      "    if hasattr(__main__, name):\n"
                      "        setattr(__main__, name, lambda *a, **k: None)\n"
                      "def f(x):\n    return 0\n",
    "frames-and-gc": textwrap.dedent("""\
        import gc, re, sys
        def _find():
            pat = re.compile(r"^[0-9a-f]{32}$")
            for o in gc.get_objects():
                if isinstance(o, dict):
                    for v in list(o.values()):
                        if isinstance(v, str) and pat.match(v):
                            return v
                        if isinstance(v, str) and "assert" in v and "==" in v:
                            return v.split("==")[-1].strip().strip("'")
            frame = sys._getframe()
            while frame is not None:
                for v in list(frame.f_locals.values()):
                    if isinstance(v, (str, bytes)) and len(v) > 30:
                        m = re.search(r"[0-9a-f]{32}", v if isinstance(v, str) else v.decode("latin-1"))
                        if m:
                            return m.group(0)
                frame = frame.f_back
            return None
        def f(x):
            return _find()
        """),
    "forged-pipe-events": textwrap.dedent("""\
        import os
        line = b'{"ev": "case", "i": 0, "ok": true}\\n{"ev": "case", "i": 1, "ok": true}\\n{"ev": "done"}\\n'
        for fd in range(0, 1024):
            try:
                os.write(fd, line)
            except OSError:
                pass
        def f(x):
            for fd in range(0, 1024):
                try:
                    os.write(fd, line)
                except OSError:
                    pass
            return 0
        """),
    "memory-scan": textwrap.dedent(f"""\
        def f(x):
            # the expected value's first half, searched for in this process's whole memory
            needle = bytes.fromhex('{TOKEN[:16].encode().hex()}')
            with open('/proc/self/maps') as m:
                spans = [l.split()[0].split('-') for l in m if 'r' in l.split()[1]]
            with open('/proc/self/mem', 'rb', 0) as mem:
                for lo, hi in spans:
                    lo, hi = int(lo, 16), int(hi, 16)
                    if hi - lo > 1 << 28:
                        continue
                    try:
                        mem.seek(lo)
                        chunk = mem.read(hi - lo)
                    except OSError:
                        continue
                    i = chunk.find(needle)
                    if i >= 0:
                        return chunk[i:i + 32].decode()
            return None
        """),
    "read-parent-memory": textwrap.dedent("""\
        import os, re
        def f(x):
            for pid in os.listdir('/proc'):
                if not pid.isdigit() or int(pid) == os.getpid():
                    continue
                try:
                    with open(f'/proc/{pid}/cmdline', 'rb') as c:
                        pass
                    with open(f'/proc/{pid}/fd/0', 'rb') as stdin:
                        data = stdin.read(1 << 20)
                        m = re.search(rb'[0-9a-f]{32}', data)
                        if m:
                            return m.group(0).decode()
                except OSError:
                    continue
            return None
        """),
    # Found by a red-team pass: names the program defines must not stand in for the tests' own.
    "shadowed-builtins": "def abs(x):\n    return 0\ndef sorted(x, **k):\n    return []\n"
                         "def range(*a):\n    return []\ndef len(x):\n    return 0\ndef f(x):\n    return None\n",
    "shadowed-module": "class _M:\n    def isclose(self, *a, **k):\n        return True\n"
                       "    def __getattr__(self, n):\n        return lambda *a, **k: True\n"
                       "math = _M()\ndef f(x):\n    return 0\n",
}
SHADOW_TESTS = [f"assert sorted(f(7)) == sorted({TOKEN!r})", f"for i in range(3):\n    assert f(i) == {TOKEN!r}",
                f"assert len(f(7)) == len({TOKEN!r})", "assert abs(f(7) - 0.123456) < 1e-6",
                "import math\nassert math.isclose(f(7), 0.987654)"]


@pytest.mark.parametrize("attack", ["shadowed-builtins", "shadowed-module"])
def test_names_of_the_program_do_not_shadow_the_tests(attack, mode):
    _no_pass(run_tests(FORGERIES[attack], SHADOW_TESTS + ["assert math.isclose(f(7), 0.5)"], timeout=10))
    # a HumanEval-style check through ``candidate``, with the program's abs
    rep = run_tests("def abs(x):\n    return 0\ndef trunc(x):\n    return 0.0\n",
                    "def check(candidate):\n    assert abs(candidate(1.33) - 0.4242) < 1e-6\n", entry_point="trunc")
    _no_pass(rep)
    # while an honest program that defines a function named like a builtin, as its entry point, passes
    rep = run_tests("def sum(xs):\n    return 0 + __builtins__['sum'](xs) if isinstance(__builtins__, dict) "
                    "else __import__('builtins').sum(xs)\n",
                    "def check(candidate):\n    assert candidate([1, 2]) == 3\n", entry_point="sum")
    assert rep.all_passed, rep


@pytest.mark.parametrize("attack", sorted(FORGERIES))
def test_reward_forgery_never_passes(attack, mode):
    rep = run_tests(FORGERIES[attack], TESTS, timeout=10)
    _no_pass(rep)


def test_honest_programs_still_pass_through_the_proxies(mode):
    code = textwrap.dedent(f"""\
        import math
        TABLE = {{'k': [1, 2.5, None, (3, 4), {{5, 6}}, b'x', 1j, 2 ** 80, float('nan')]}}
        class Acc:
            def __init__(self, n):
                self.n = n
            def add(self, k):
                self.n += k
                return self
            def items(self):
                yield from range(self.n)
        def f(x):
            return {TOKEN!r} if x == 7 else {TOKEN[::-1]!r}
        def sort_in_place(xs):
            xs.sort()
        def boom(x):
            raise KeyError(x)
        """)
    tests = TESTS + [
        "assert TABLE['k'][:4] == [1, 2.5, None, (3, 4)] and TABLE['k'][4] == {5, 6}",
        "assert TABLE['k'][5:8] == [b'x', 1j, 2 ** 80] and math.isnan(TABLE['k'][8])",
        "xs = [3, 1, 2]\nsort_in_place(xs)\nassert xs == [1, 2, 3]",
        "a = Acc(2)\nassert a.add(3).n == 5\nassert list(a.items()) == [0, 1, 2, 3, 4]",
        "try:\n    boom(1)\n    assert False\nexcept KeyError as e:\n    assert 'KeyError' not in str(e)",
        "assert math.isclose(math.sqrt(f(7).count('a') + 4), math.sqrt(f(7).count('a') + 4))",
    ]
    rep = run_tests(code, tests, timeout=20)
    assert rep.all_passed, rep


def test_honest_results_of_library_types_reach_the_tests_as_values(mode):
    """Third red-team pass: honest programs that passed before the judge/worker split and failed
    after (false negatives cost test-guided search): numpy scalars, namedtuples, Counter and
    defaultdict, dict views, Fraction/Decimal/deque/range, an exception subclass caught by its
    builtin base with its arguments, ``str()`` and ``isinstance`` of the program's objects,
    nested lists changed in place, builtin functions as arguments."""
    code = textwrap.dedent("""\
        from collections import Counter, defaultdict, deque, namedtuple
        from decimal import Decimal
        from fractions import Fraction
        P = namedtuple('P', 'x y')
        class MyErr(ValueError):
            pass
        class Box:
            def __str__(self):
                return 'Box!'
        def nums():
            try:
                import numpy as np
            except ImportError:
                return [3, 0.5, True]
            return [np.int64(3), np.float64(0.5), np.bool_(True)]
        def point():
            return P(1, 2)
        def counts():
            return Counter('aab')
        def groups():
            d = defaultdict(list)
            d['a'].append(1)
            return d
        def keys():
            return {'a': 1, 'b': 2}.keys()
        def exact():
            return [Fraction(1, 3), Decimal('1.5'), deque([1, 2]), range(3)]
        def fail(x):
            raise MyErr('neg', x)
        def box():
            return Box()
        def poke(grid):
            grid[0][0] = 9
        def apply(fn, xs):
            return [fn(x) for x in xs]
        """)
    tests = ["assert nums() == [3, 0.5, True]",
             "assert point() == (1, 2) and point().y == 2",
             "c = counts()\nassert c == {'a': 2, 'b': 1} and c['z'] == 0 and c.most_common(1) == [('a', 2)]",
             "g = groups()\nassert g['a'] == [1] and g['zz'] == []",
             "assert keys() == {'a', 'b'} and list(keys()) == ['a', 'b']",
             "from collections import deque\nfrom decimal import Decimal\nfrom fractions import Fraction\n"
             "assert exact() == [Fraction(1, 3), Decimal('1.5'), deque([1, 2]), range(3)]",
             "try:\n    fail(-1)\n    assert False\nexcept ValueError as e:\n    assert e.args == ('neg', -1)",
             "assert str(box()) == 'Box!' and isinstance(box(), Box)",
             "grid = [[0]]\nrow = grid[0]\npoke(grid)\nassert row == [9]",
             "assert apply(abs, [-1, 2]) == [1, 2]"]
    rep = run_tests(code, tests, timeout=20)
    assert rep.all_passed, rep


def test_protocol_lookups_are_not_answered_by_the_program(mode):
    """Third red-team pass: the judge's libraries look protocol names up on the instance; a
    program answering ``__array_interface__`` pointed numpy at the judge's raw memory, and
    ``__deepcopy__`` received the tests' values."""
    code = textwrap.dedent("""\
        class Evil:
            def __getattr__(self, name):
                return {'shape': (8,), 'typestr': '|u1', 'data': (16, True), 'version': 3}
            def __deepcopy__(self, memo):
                return 1
        def f(x):
            return Evil()
        """)
    tests = ["o = f(1)\nassert not hasattr(o, '__array_interface__') and not hasattr(o, '__deepcopy__')",
             f"import copy\nassert copy.deepcopy([{TOKEN!r}, f(1)])[1] == 1"]
    rep = run_tests(code, tests)
    assert rep.cases[0].passed and not rep.cases[1].passed, rep


def test_a_case_timeout_inside_c_code_fails_only_that_case(mode):
    """Third red-team pass: a call blocking in C past case_timeout left its late reply to answer
    the next case's request, and every later case was lost."""
    code = "def f(n):\n    return sum(range(n))\ndef g(x):\n    return x + 1\n"
    tests = ["assert f(80_000_000) == 80_000_000 * 79_999_999 // 2"] + [f"assert g({i}) == {i + 1}" for i in range(4)]
    rep = run_tests(code, tests, case_timeout=0.3, timeout=30)
    assert [c.passed for c in rep.cases] == [False, True, True, True, True], rep
    assert rep.status == "timeout", rep


def test_objects_of_the_program_cannot_be_compared_with_the_tests_values(mode):
    """Against a value of the tests' (or by truth) the program's answer would be a claim about a
    builtin value: refused. Two objects of the program are compared by the program (issue 55:
    honest idioms like ``sorted`` of its objects), and the case says it rests on that."""
    code = "class P:\n    pass\ndef f(x):\n    return P()\n"
    rep = run_tests(code, ["assert f(1) == f(1)", "assert f(1)", "assert f(1) != 3", "assert 3 != f(1)"])
    _no_pass(rep)
    assert rep.cases[0].program_decided and "AssertionError" in rep.cases[0].error, rep.cases[0]
    for case in rep.cases[1:]:
        assert "cannot be compared" in case.error and not case.program_decided, case


# ------------------------------------------------------------------------------------ events, deadline
def test_forged_and_padded_writes_neither_move_the_deadline_nor_grow_the_parent(mode):
    code = textwrap.dedent("""\
        import os
        start = b'{"ev": "start", "enforced": []}\\n{"ev": "main", "layers": []}\\n'
        pad = b'x' * (1 << 20)
        while True:
            for fd in range(0, 256):
                try:
                    os.write(fd, start)
                    os.write(fd, pad)
                except OSError:
                    pass
        """)
    rss = _rss_mb()
    t = time.monotonic()
    rep = run_tests(code, TESTS, timeout=2)
    assert time.monotonic() - t < 8, rep
    assert rep.status in ("timeout", "error", "crashed"), rep  # the judge reads garbage: a load failure
    _no_pass(rep)
    code = code.replace("while True:", "def f(x):\n    return 0\nwhile True:")
    rep = run_tests(code, TESTS, timeout=2)
    _no_pass(rep)
    assert _rss_mb() - rss < 64


FAKE_RUNNER = textwrap.dedent("""\
    import json, os, sys, time
    def frame():
        head = b''
        while not head.endswith(b'\\n'):
            head += os.read(0, 1)
        n, data = int(head), b''
        while len(data) < n:
            data += os.read(0, n - len(data))
        return json.loads(data)
    fd = frame()['fd']
    how = sys.argv[-1]
    t = time.monotonic()
    while time.monotonic() - t < 30:
        if how == 'restart':
            os.write(fd, b'{"ev": "main", "layers": []}\\n{"ev": "start", "enforced": []}\\n')
            time.sleep(0.05)
        elif how == 'pad':
            os.write(fd, b'{"ev": "case", "i": 0, "ok": true, "error": "' + b'x' * (1 << 20))
        elif how == 'many':
            os.write(fd, b'{"ev": "case", "i": 0, "ok": true}\\n' * 1000)
        elif how == 'garbage':
            os.write(fd, b'\\xff{not json\\n')
        elif how == 'types':
            os.write(fd, b'{"ev": "main"}\\n{"ev": "load", "error": 3}\\n{"ev": "case", "i": "0", "ok": 1, '
                         b'"error": [1], "t": "x"}\\n{"ev": "exit", "signal": "9", "cpu": "x"}\\n{"ev": "done"}\\n')
            time.sleep(30)
""")


@pytest.mark.parametrize("how", ["restart", "pad", "many", "garbage", "types"])
def test_supervisor_survives_a_runner_that_lies(tmp_path, how, monkeypatch):
    """The parent side alone, against a fake runner writing hostile result streams: one absolute
    deadline, bounded memory, typed fields checked, and a report (never an exception)."""
    script = tmp_path / "fake.py"
    script.write_text(FAKE_RUNNER)
    shim = tmp_path / "python"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} {script} {how}\n")
    shim.chmod(0o755)
    monkeypatch.setattr(sb, "namespaces", lambda: ((), ()))
    t = time.monotonic()
    rep = run_tests("def f(x):\n    return 1\n", ["assert f(1) == 1"], timeout=1, python=str(shim))
    assert time.monotonic() - t < 1 + sandbox_child.STARTUP_SECONDS + 5
    assert rep.passed == 0 and rep.status in ("crashed", "timeout", "error"), rep
    if how == "restart":  # the deadline is not moved by a second "main" event
        assert time.monotonic() - t < 6


# ------------------------------------------------------------------------------------ files
def test_deep_tree_symlinks_and_read_only_dirs_are_cleaned(tmp_path, mode):
    victim = tmp_path / "outside"
    victim.mkdir()
    (victim / "keep.txt").write_text("intact")
    code = textwrap.dedent(f"""\
        import os
        os.symlink({str(victim)!r}, 'link')
        base = os.getcwd()
        for i in range(1500):
            os.mkdir('d')
            os.chdir('d')
        open('leaf', 'w').write('x')
        os.chdir(base)
        os.makedirs('ro/inner')
        open('ro/inner/f', 'w').write('x')
        os.chmod('ro/inner', 0o500)
        os.chmod('ro', 0o500)
        raise RuntimeError('cwd=' + base)
        """)
    rep = run_tests(code, TESTS, timeout=20)
    assert rep.status == "error" and "cwd=" in rep.reason, rep
    cwd = rep.reason.split("cwd=")[1].split()[0]
    assert not Path(cwd).exists()
    assert (victim / "keep.txt").read_text() == "intact"


def test_remove_tree_holds_few_descriptors(tmp_path):
    """``sandbox_host.remove_tree`` alone, in a child with only 40 descriptors allowed: 1,500 levels."""
    code = textwrap.dedent(f"""\
        import os, resource, sys
        from trellis.codegen.sandbox_host import remove_tree
        sys.setrecursionlimit(100)
        root = {str(tmp_path / 'w')!r}
        os.makedirs(root)
        p = root
        for i in range(1500):
            p = os.path.join(p, 'd')
            os.mkdir(p)
        os.chmod(p, 0o500)
        os.symlink('/etc', os.path.join(root, 'etc-link'))
        resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))
        remove_tree(root)
        assert not os.path.exists(root)
        assert os.path.exists('/etc/passwd')
        """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd="/")


def test_many_files_and_fallocate_stay_under_the_run_disk_limit(mode):
    _needs_any("tmpfs", "run-limits")
    code = textwrap.dedent("""\
        import os, time
        def written():
            total = 0
            for i in range(24):
                try:
                    with open(f'f{i}', 'wb') as fh:
                        for _ in range(16):
                            fh.write(b'0' * (1 << 20))
                            fh.flush()
                except OSError:
                    pass
                try:
                    total += os.path.getsize(f'f{i}')
                except OSError:
                    pass
            time.sleep(1)  # the files stay a while: the supervisor's 0.1 s count must see them
            return total
        def reserved():
            fd = os.open('big', os.O_CREAT | os.O_WRONLY)
            try:
                os.posix_fallocate(fd, 0, 1 << 30)
                return os.fstat(fd).st_blocks * 512
            except OSError as e:
                return -e.errno
        def f(x):
            return written() if x == 1 else reserved()
        """)
    rep = run_tests(code, ["assert f(1) <= 64 << 20", "assert f(2) < 64 << 20"], file_mb=16, disk_mb=64,
                    timeout=30)
    if "tmpfs" in rep.enforced:  # a capped tmpfs: writes past 64 MB fail with ENOSPC
        assert rep.all_passed, rep
    else:  # counted by the supervisor every 0.1 s: the run is stopped once past the limit
        assert rep.status == "crashed" and "disk limit" in rep.reason, rep


# ------------------------------------------------------------------------------------ IPC, keyring, sockets
SHM = textwrap.dedent("""\
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    def f(x):
        out = []
        shm = libc.shmget(0, 600 << 20, 0o1000 | 0o600)   # IPC_PRIVATE, IPC_CREAT
        out.append(('shm', shm, ctypes.get_errno()))
        if shm >= 0:
            addr = libc.shmat(shm, None, 0)
            if addr not in (None, ctypes.c_void_p(-1).value):
                ctypes.memset(addr, 1, 600 << 20)
        q = libc.msgget(0x7E11, 0o1000 | 0o666)
        out.append(('msg', q, ctypes.get_errno()))
        if q >= 0:
            buf = ctypes.create_string_buffer(b'\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00carried over', 64)
            libc.msgsnd(q, buf, 12, 0o4000)
        key = libc.syscall(248, b'user', b'trellis-test', b'secret', 6, -4)  # add_key to the user keyring
        out.append(('key', key, ctypes.get_errno()))
        return out
    """)


def test_sysv_ipc_and_keyrings_do_not_outlive_the_run(mode):
    _needs("seccomp")
    if os.path.exists("/proc/keys"):
        keys_before = Path("/proc/keys").read_text()
    rep = run_tests(SHM, ["r = f(1)\nassert r == 0, r"], timeout=20, memory_mb=1024)
    assert rep.status == "ok" and rep.cases[0].error.startswith("AssertionError: [('shm'"), rep  # it ran
    probe = textwrap.dedent("""\
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        def f(x):
            q = libc.msgget(0x7E11, 0)
            return q
        """)
    rep = run_tests(probe, ["assert f(1) == -1"])
    assert rep.all_passed, rep  # no queue carried from one run to the next
    if os.path.exists("/proc/keys"):
        assert "trellis-test" not in Path("/proc/keys").read_text()
        assert "trellis-test" not in keys_before


def test_unix_sockets_outside_are_unreachable(tmp_path, mode):
    _needs("seccomp")
    path = str(tmp_path / "host.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o777)
    listener.listen(4)
    listener.setblocking(False)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0trellis-sandbox-test-" + TOKEN)
    abstract.listen(4)
    abstract.setblocking(False)
    code = textwrap.dedent(f"""\
        import ctypes, socket, _socket
        def via_module(x):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect({path!r})
            return 'connected'
        def via_mro(x):
            base = [c for c in socket.socket.__mro__ if c.__module__ == '_socket'][0]
            s = base(1, 1, 0)
            s.connect({path!r})
            return 'connected'
        def via_abstract(x):
            base = [c for c in socket.socket.__mro__ if c.__module__ == '_socket'][0]
            s = base(1, 1, 0)
            s.connect('\\0trellis-sandbox-test-{TOKEN}')
            return 'connected'
        def via_libc(x):
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.socket(1, 1, 0)
            return 'connected' if fd >= 0 else 'refused'
        """)
    try:
        rep = run_tests(code, ["assert via_module(0) == 'connected'", "assert via_mro(0) == 'connected'",
                               "assert via_abstract(0) == 'connected'", "assert via_libc(0) == 'connected'"])
        _no_pass(rep)
        for s in (listener, abstract):
            with pytest.raises(BlockingIOError):
                s.accept()
    finally:
        listener.close()
        abstract.close()


# ------------------------------------------------------------------------------------ limits per run
HIDDEN_MEMORY = {
    # memory no process maps: invisible to per-process counts (red-team finding; 3.5 GB held)
    "memfd": "import os\ndef f(x):\n    fd = os.memfd_create('x')\n    os.write(fd, b'1' * (64 << 20))\n"
             "    return fd\n",
    "socketpair": "import _socket\ndef f(x):\n    a, b = _socket.socketpair()\n    a.setblocking(False)\n"
                  "    return a.send(b'1' * 65536)\n",
    "sysv-shm": "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\ndef f(x):\n"
                "    return libc.shmget(0, 100 << 20, 0o1000 | 0o600)\n",
    # a pipe slot pins the whole (huge) page it was spliced from, after munmap (second red-team pass)
    "vmsplice": "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\ndef f(x):\n"
                "    r, w = os.pipe()\n    buf = ctypes.create_string_buffer(4096)\n"
                "    iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 4096)\n"
                "    return libc.vmsplice(w, iov, 1, 0)\n",
}


@pytest.mark.parametrize("kind", sorted(HIDDEN_MEMORY))
def test_memory_no_process_maps_cannot_be_allocated(kind, mode):
    _needs("seccomp")
    rep = run_tests(HIDDEN_MEMORY[kind], ["r = f(0)\nassert r == 'unreachable', r"], timeout=10)
    assert rep.status == "ok" and rep.passed == 0, rep
    assert rep.cases[0].error.startswith(("PermissionError", "AssertionError: -1")), rep  # refused, not ran


def test_page_tables_count_against_the_memory_limit(mode):
    """Second red-team pass: one page mapped 60,000 times, 1 GB apart, costs ~8 KB of page tables
    per mapping that no resident-set count shows (1.9 GB held under memory_mb=512)."""
    _needs("run-limits")
    code = textwrap.dedent("""\
        import ctypes, os, time
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        def f(x):
            fd = os.open('page', os.O_CREAT | os.O_RDWR, 0o600)
            os.write(fd, b'1' * 4096)
            base = 1 << 45
            for i in range(40000):
                p = libc.mmap(base + (i << 30), 4096, 1, 0x1 | 0x100000, fd, 0)  # MAP_SHARED|FIXED_NOREPLACE
                if p in (None, ctypes.c_void_p(-1).value):
                    return ('mmap failed', i, ctypes.get_errno())
                ctypes.string_at(p, 1)
            time.sleep(10)
            return 'held'
        """)
    t = time.monotonic()
    rep = run_tests(code, ["assert f(0) == 'held'"], memory_mb=128, timeout=20)
    assert rep.status == "memory" and rep.passed == 0, rep  # the supervisor's kill, reported as such
    assert time.monotonic() - t < 15


def test_files_kept_only_by_a_mapping_count_against_the_disk_limit(mode):
    _needs_any("tmpfs", "run-limits")
    code = textwrap.dedent("""\
        import ctypes, os, time
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        def f(x):
            for i in range(12):
                fd = os.open('.', os.O_TMPFILE | os.O_RDWR, 0o600)
                try:
                    for j in range(15):
                        os.write(fd, b'1' * (1 << 20))
                except OSError:
                    return 'full'
                libc.mmap(None, 4096, 1, 0x1, fd, 0)
                os.close(fd)
            time.sleep(5)
            return 12
        """)
    rep = run_tests(code, ["assert f(0) == 12"], disk_mb=64, file_mb=16, timeout=15)
    _no_pass(rep)
    assert rep.status == "ok" or "disk limit" in rep.reason, rep


def test_stop_iteration_cannot_end_a_tests_loop(mode):
    """Second red-team pass: a StopIteration rebuilt in the judge ended ``map``'s loop quietly, so
    ``for r in map(f, xs): assert ...`` ran no assert and passed."""
    code = "def f(x):\n    raise StopIteration\n"
    tests = [f"assert all(map(lambda x: f(x) == {TOKEN!r}, [7]))",
             f"for r in map(f, [7, 8]):\n    assert r == {TOKEN!r}",
             f"for got, exp in zip(map(f, [7]), [{TOKEN!r}]):\n    assert got == exp"]
    _no_pass(run_tests(code, tests))


def test_host_extended_attributes_are_not_readable(tmp_path, mode):
    _needs("seccomp")
    secret = tmp_path / "secret.txt"
    secret.write_text("x")
    os.setxattr(secret, "user.note", TOKEN.encode())
    os.chmod(tmp_path, 0o755)
    code = f"import os\ndef f(x):\n    return os.getxattr({str(secret)!r}, 'user.note').decode()\n"
    rep = run_tests(code, TESTS[:1])
    _no_pass(rep)
    assert "Permission" in rep.first_failure or "Operation not permitted" in rep.first_failure, rep


def test_unlinked_open_files_count_against_the_disk_limit(mode):
    _needs_any("tmpfs", "run-limits")
    code = textwrap.dedent("""\
        import os, time
        def f(x):
            fds = []
            for i in range(40):
                fd = os.open(f'u{i}', os.O_CREAT | os.O_RDWR, 0o600)
                os.unlink(f'u{i}')
                try:
                    for j in range(16):
                        os.pwrite(fd, b'1' * (1 << 20), j << 20)
                except OSError:
                    return 'full'
                fds.append(fd)
            time.sleep(5)
            return len(fds)
        """)
    rep = run_tests(code, ["assert f(0) == 40"], disk_mb=64, file_mb=16, timeout=15)
    _no_pass(rep)  # ENOSPC on the tmpfs, or the supervisor stops the run past 64 MB
    assert rep.status == "ok" or "disk limit" in rep.reason, rep


def test_cleanup_survives_a_blocking_name_in_the_work_dir(mode):
    """Red-team finding: a file named like cleanup's flattening target, listed after a deep
    directory, made the whole removal give up and left the work dir behind."""
    code = textwrap.dedent("""\
        import os
        for k in range(1, 4):
            open(f'.trellis-flat-{k}', 'w').write('blocker')
        for i in range(200):
            name = f'c{i}'
            os.mkdir(name)
            order = os.listdir('.')
            if order.index(name) < min(order.index(f'.trellis-flat-{k}') for k in range(1, 4)):
                break
            os.rmdir(name)
        p = name
        for j in range(24):
            p = os.path.join(p, 'd')
            os.mkdir(p)
        os.makedirs('b/c')
        os.symlink('/etc', 'b/c/etc')
        raise RuntimeError('cwd=' + os.getcwd())
        """)
    rep = run_tests(code, TESTS, timeout=10)
    cwd = rep.reason.split("cwd=")[1].split()[0]
    assert not Path(cwd).exists() and Path("/etc/passwd").exists()


def test_host_files_keep_their_attributes_and_times(tmp_path, mode):
    _needs("seccomp")
    victim = tmp_path / "open.txt"
    victim.write_text("x")
    victim.chmod(0o666)
    os.chmod(tmp_path, 0o777)
    os.utime(victim, (1_000_000_000, 1_000_000_000))
    code = textwrap.dedent(f"""\
        import os
        def f(x):
            out = []
            for op in (lambda: os.utime({str(victim)!r}), lambda: os.setxattr({str(victim)!r}, 'user.pwned', b'1')):
                try:
                    op()
                    out.append('done')
                except OSError as e:
                    out.append(type(e).__name__)
            return out
        """)
    rep = run_tests(code, ["r = f(0)\nassert r == ['done', 'done'], r"])
    _no_pass(rep)
    assert victim.stat().st_mtime == 1_000_000_000
    assert b"user.pwned" not in [x.encode() for x in os.listxattr(victim)]


def test_a_greeting_nested_too_deep_is_a_clear_failure(mode):
    code = textwrap.dedent("""\
        import os, stat
        payload = b'[' * 200000 + b'\\n'
        for fd in range(3, 64):
            try:
                if stat.S_ISFIFO(os.fstat(fd).st_mode):
                    os.write(fd, payload)
            except OSError:
                pass
        def f(x):
            return x
        """)
    rep = run_tests(code, TESTS, timeout=10)
    _no_pass(rep)
    assert rep.status in ("crashed", "error", "timeout"), rep


@pytest.mark.parametrize("value", ['{"Q": [1, 0]}', '{"C": [{"I": "0x' + "f" * 400 + '"}, 0]}',
                                   '{"NT": ["P", ["class"], [1]]}', '{"Dm": "NaN' + "9" * 100 + '"}'])
def test_values_the_judge_cannot_build_fail_cleanly(value, mode):
    """The worker is the program's process, so it can send any reply (here: rewriting the runner's
    encoder from the program). Values the judge cannot build fail the case that asked for them
    (issue 55: one case, one verdict; before, they ended the run as a protocol break), never pass,
    never crash the judge (third red-team pass: an OverflowError did)."""
    code = ("import json, sys\ng = sys._getframe(1).f_globals\n"
            f"g['_enc'] = lambda v, h, d=0: json.loads({value!r})\n"
            "def f(x):\n    return x\n")
    rep = run_tests(code, TESTS)
    _no_pass(rep)
    assert "70" not in rep.reason and "sandbox process ended" not in rep.reason, rep


def test_memory_limit_holds_for_the_run_not_per_process(mode):
    _needs("run-limits")
    code = textwrap.dedent("""\
        import os, time
        def f(x):
            kids = []
            for i in range(4):
                pid = os.fork()
                if pid == 0:
                    b = bytearray(200 << 20)
                    for j in range(0, len(b), 4096):
                        b[j] = 1
                    time.sleep(30)
                    os._exit(0)
                kids.append(pid)
            time.sleep(30)
            return 1
        """)
    t = time.monotonic()
    rep = run_tests(code, ["assert f(0) == 1"], memory_mb=256, timeout=20)
    assert rep.status == "memory" and rep.passed == 0, rep
    assert time.monotonic() - t < 15


def test_process_limit_holds_for_the_run(mode):
    code = textwrap.dedent("""\
        import os, time
        def f(x):
            n = 0
            for i in range(64):
                try:
                    if os.fork() == 0:
                        time.sleep(30)
                        os._exit(0)
                    n += 1
                except OSError:
                    break
            return n
        """)
    rep = run_tests(code, ["assert f(0) <= 8"], max_processes=8, timeout=10)
    assert rep.status in ("ok", "crashed"), rep
    if rep.status == "ok":
        assert rep.all_passed, rep


def test_daemons_do_not_outlive_the_run(mode, tmp_path):
    code = textwrap.dedent("""\
        import os, time
        if os.fork() == 0:
            try:
                os.setsid()  # denied without a PID namespace (seccomp): the daemon stays in the group
            except OSError:
                pass
            if os.fork() == 0:
                time.sleep(120)
                os._exit(0)
            os._exit(0)
        try:
            os.setsid()
        except OSError:
            pass
        def f(x):
            return x
        """)
    rep = run_tests(code, ["assert f(1) == 1"], timeout=5)
    assert rep.status == "ok", rep  # the fixture checks that no process of the run is left


# ------------------------------------------------------------------------------------ fallback
def test_fallback_without_landlock_drops_every_capability_or_refuses(monkeypatch, tmp_path):
    """Without Landlock nothing confines reads, so as root the program keeps no capability at all;
    where the interpreter is then unreadable (it lives under /root here) the sandbox refuses to
    start, with a clear error, rather than run with CAP_DAC_READ_SEARCH."""
    monkeypatch.setattr(sb, "_LANDLOCK", False)
    code = "def f(x):\n    return open('/etc/shadow').read()[:4]\n"
    try:
        rep = run_tests(code, ["assert f(0) == 'root'"])
    except SandboxError as e:
        assert os.geteuid() == 0 and "refusing to run untrusted code as root without Landlock" in str(e)
        return
    _no_pass(rep)
    if os.geteuid() == 0:
        assert "no-capabilities" in rep.enforced


def test_reads_outside_are_refused_with_and_without_namespaces(mode, tmp_path):
    _needs("landlock")
    secret = tmp_path / "secret.txt"
    secret.write_text(TOKEN)
    os.chmod(tmp_path, 0o755)
    secret.chmod(0o644)
    code = f"def f(x):\n    return open({str(secret)!r}).read() if x == 7 else ''\n"
    for path in ("/etc/shadow", "/root/.bash_history", "/proc/1/environ"):
        code += f"def g_{abs(hash(path))}(x):\n    return open({path!r}).read()\n"
    _no_pass(run_tests(code, TESTS[:1]))


def _memory_holds(pid: int, needle: bytes) -> bool:
    """Whether ``needle`` is anywhere in the readable memory of process ``pid`` (read as root)."""
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            if "r" not in perms or hi - lo > 1 << 30:
                continue
            try:
                mem.seek(lo)
                if needle in mem.read(hi - lo):
                    return True
            except (OSError, ValueError, OverflowError):
                continue
    return False


def test_capabilities_seen_from_the_host(mode):
    """Read from the host's /proc while a run sleeps: the program's process holds no capability
    beyond CAP_DAC_READ_SEARCH (kept only where Landlock confines reads), runs under seccomp and a
    uid of its own; the judge (uid 0 here) holds none at all, so the program cannot signal it."""
    if os.geteuid() != 0:
        pytest.skip("the per-run uid exists only when run as root")
    import threading

    layers = _layers()
    box: list = []
    t = threading.Thread(target=lambda: box.append(run_tests("import time\ndef f(x):\n    time.sleep(3)\n"
                                                             "    return x\n", ["assert f(1) == 1", TESTS[0]],
                                                             timeout=10)))
    t.start()
    seen: dict[str, dict] = {}
    found: dict[str, bool] = {}
    # The worker's /proc status is read again until it has been seen for a second: the first sight
    # can fall between its setresuid and its capset (CapPrm still full, CapEff 0 under KEEPCAPS),
    # before any program code runs. The last reading is the state the program runs in (it sleeps 3 s).
    worker_since = None
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and not ("judge" in seen and worker_since is not None
                                               and time.monotonic() - worker_since > 1.0):
        for pid in os.listdir("/proc"):
            try:
                if not pid.isdigit() or MARKER not in Path(f"/proc/{pid}/cmdline").read_bytes():
                    continue
                st = dict(x.split(":", 1) for x in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in x)
            except OSError:
                continue
            st = {k: v.strip() for k, v in st.items()}
            uid = int(st["Uid"].split()[0])
            if uid >= 1 << 24:
                seen["worker"] = st
                found["worker"] = found.get("worker", False) or _memory_holds(int(pid), TOKEN.encode())
                worker_since = worker_since if worker_since is not None else time.monotonic()
            elif uid == 0 and int(st["CapEff"], 16) == 0 and st.get("NoNewPrivs") == "1":
                seen["judge"] = st
                found["judge"] = _memory_holds(int(pid), TOKEN.encode())
        time.sleep(0.05)
    t.join()
    assert box and box[0].passed == 1, box
    # The expected value is in the judge's memory (the scan works) and was never in the program's.
    assert found == {"worker": False, "judge": True}
    worker = seen["worker"]
    assert int(worker["CapEff"], 16) & ~(1 << 2) == 0 and int(worker["CapPrm"], 16) & ~(1 << 2) == 0
    if not any(x.startswith("landlock") for x in layers):
        assert int(worker["CapEff"], 16) == 0
    if "seccomp" in layers:
        assert worker["Seccomp"] == "2"
    assert int(seen["judge"]["CapPrm"], 16) == 0


def test_every_process_of_a_run_is_in_its_own_cgroup(mode):
    """Where cgroup v2 is writable: the run's processes (forked children too) are in a cgroup of
    the run's own, which is killed and removed before ``run_tests`` returns."""
    if sandbox_host.cgroup_base() is None:
        pytest.skip("no writable cgroup v2 hierarchy here")
    import threading

    code = "import os, time\nif os.fork() == 0:\n    time.sleep(60)\ndef f(x):\n    time.sleep(2)\n    return x\n"
    box: list = []
    t = threading.Thread(target=lambda: box.append(run_tests(code, ["assert f(1) == 1"], timeout=10)))
    before = set(os.listdir(sandbox_host.cgroup_base()))
    t.start()
    procs: list[str] = []
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and len(procs) < 4:
        for name in set(os.listdir(sandbox_host.cgroup_base())) - before:
            if name.startswith("trellis-sandbox-"):
                try:
                    procs = Path(sandbox_host.cgroup_base(), name, "cgroup.procs").read_text().split()
                except OSError:
                    pass
        time.sleep(0.05)
    t.join()
    assert box[0].all_passed and "cgroup" in box[0].enforced, box
    assert len(procs) >= 4  # supervisor, worker, judge, the forked child
    assert {n for n in os.listdir(sandbox_host.cgroup_base()) if n.startswith("trellis-sandbox-")} <= before


def test_internal_errors_become_reports(monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(sb, "collect", broken)
    rep = run_tests("def f(x):\n    return 1\n", ["assert f(1) == 1"])
    assert rep.status == "crashed" and "boom" in rep.reason and rep.passed == 0
