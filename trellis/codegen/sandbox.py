"""Run a generated program against its tests in a sandbox where the verdict is not the program's.

``run_tests(code, tests)`` compiles ``code`` here (a syntax error costs no process), then starts
``python -I -S`` (``_seccomp.py`` + ``_runner.py``, compiled once per process and sent marshalled on
stdin behind a small ``-c`` stub) in a fresh work dir with a scrubbed environment.
Its first process, the *supervisor*, forks the **worker** with the program only, then reads the
tests and forks the **judge** (``_runner.py`` explains the three). The worker returns data; the
judge runs the assertions on values rebuilt from builtins, in a process the program never shared
memory with, and it alone writes the results. So rebinding the harness, patching builtins or the
JSON encoder, reading frames, ``gc`` or memory for the expected value, or an ``__eq__`` that is
always true earns nothing (tests/codegen/test_sandbox_attacks.py tries each).

What is enforced (each layer is reported in ``TestReport.enforced``; ``trellis info`` lists them):

- always: one absolute wall-clock deadline (interpreter start-up not counted, set once by the
  supervisor's first event; then everything is SIGKILLed); the result stream checked event by
  event (shape, count, 64 KB per event, 16 MB in all: a violation voids the whole run); rlimits on
  CPU seconds, address space (``memory_mb`` per process), file size, open files, core dumps and
  processes; run-wide limits enforced by the supervisor over the program's whole process tree
  (it is a child subreaper, so ``setsid`` daemons stay in it): memory (proportional set size)
  ``memory_mb``, processes ``max_processes``, and, without a mount namespace, the work dir's
  size ``disk_mb`` and entry count, checked every 0.1 s; every process of the run killed before
  ``run_tests`` returns; stdout discarded, stderr kept (capped); a socket shim.
- Linux with ``unshare`` (util-linux) usable (root, or an unprivileged user namespace): new
  network (nothing reachable), PID (the run cannot see or signal the host; its init takes every
  process down), IPC (SysV shared memory, queues and semaphores vanish with it) and mount
  namespaces, with the namespace's own ``/proc`` and a tmpfs on the work dir capped at ``disk_mb``
  and 4,096 entries (``fallocate`` cannot reserve past it; the files vanish with the namespace).
- Linux >= 5.13 (Landlock), worker: reads only beneath the interpreter's directories, writes only
  beneath the work dir, no ``execve``; ABI >= 4 no TCP bind/connect; ABI >= 6 no signals or
  abstract sockets outside its domain. Judge: the same with no write anywhere.
- seccomp (x86_64, aarch64; ``_seccomp.py``): ``socket()`` only for AF_INET/AF_INET6 (none without
  a network namespace), no keyrings (not covered by the IPC namespace), no ptrace or
  ``process_vm_*``, no new namespaces or mounts, no ``fallocate``; no SysV/POSIX IPC, memfds,
  socket pairs or ``vmsplice`` (memory no process maps escapes the run's memory count); no
  extended attributes, timestamps or inotify on files (Landlock does not govern them); without a
  PID namespace no ``setsid``/``setpgid``. The memory count is proportional set size plus page
  tables; transparent huge pages are off for the run; at most 1,024 pending signals (timers).
- cgroup v2, where this process may create children in its own cgroup: every process of the run
  is born in a cgroup of the run's own, killed at once (``cgroup.kill``) and removed before
  ``run_tests`` returns; where the memory and pids controllers are enabled there, ``memory.max``
  and ``pids.max`` hold the run's limits in the kernel.
- the judge binds the program's names for the tests, except names of builtins (unless the entry
  point) and of standard modules (unless that very module, imported by the judge itself).
- run as root: the worker runs as a uid of its own (fresh per run: RLIMIT_NPROC counts exactly
  its processes, and whatever it leaves is its own), keeping only CAP_DAC_READ_SEARCH where
  Landlock confines reads (the interpreter may live under /root) and no capability otherwise;
  without Landlock, if the interpreter is not readable by other users the sandbox refuses to
  start (``SandboxError``) rather than keep that capability. The judge stays uid 0 with no
  capability and is not dumpable: the worker can neither signal nor trace it.

Why Linux primitives driven from Python rather than bubblewrap or nsjail: they need no package
beyond util-linux's ``unshare`` (present wherever trellis' tests ran; bubblewrap is not), they work
unprivileged where user namespaces are allowed, and the judge/worker split needs control inside
the sandbox (fork order, pipes) that a wrapper around one command does not give.

What remains possible: a program can still answer with the right value when it can compute or
guess it from what it sees (each call's arguments), and a test that checks the program with the
program's own function (HumanEval/32's ``poly``) can be faked. Data includes the standard library's
namedtuples, Counter/defaultdict/OrderedDict/deque, dict views, Fraction, Decimal, range and
memoryview, and numpy scalars (rebuilt by the judge's own classes); an exception arrives as its
nearest builtin class with its arguments. Anything else (the program's own class instances,
generators, numpy arrays) reaches the tests as a handle that can be called, iterated, read
(``str``, attributes, ``len``, ``isinstance`` against the program's classes), but not compared,
hashed or truth-tested, and protocol names (``__*__``) are never asked of it. What therefore
fails that passed when one process ran both (third red-team pass): equality of the program's
dataclasses/enums/instances, arrays compared element-wise, arguments aliased to each other, lambdas
passed to the program, values over 8 MB in one reply, a data global the tests change. Without
namespaces (``unshare`` missing), the limits are the supervisor's accounting, sampled every
20-100 ms, so a fast allocation can overshoot briefly; as
a non-root user without Landlock the program can write wherever the user can, and read its
ancestors' memory where Yama's ptrace_scope is 0 (seccomp stops ptrace and ``process_vm_readv``,
not ``/proc/<pid>/mem``). Always: the program can learn which host files exist (``stat``,
``readlink`` cannot be filtered by path), not read them; pipes can hold the kernel's per-user pipe
allowance (64 MB by default) outside the memory count; the work dir's tmpfs is RAM, so a run can
hold ``memory_mb`` + ``disk_mb``. Tests ran here as root with Landlock (ABI 7), a writable cgroup v2
hierarchy without memory/pids controllers, and util-linux unshare; the non-root fallback without
Landlock could not be exercised on these machines (the interpreter lives under /root).
Not for Windows; RLIMIT_AS is not enforced on macOS.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, Sequence

from trellis.codegen.suite import TestSuite, parse_tests

__all__ = ["CaseResult", "SandboxError", "Status", "TestReport", "layers", "run_tests"]

Status = Literal["ok", "syntax_error", "error", "timeout", "memory", "crashed"]
_LANDLOCK = True  # tests switch it off to check the layers that remain without it
_SECCOMP = True  # likewise for the seccomp layer
_CGROUP = True  # and for the per-run cgroup
_STARTUP_SECONDS = 15.0  # interpreter start-up is not charged to ``timeout`` (0.3 s here, under load)
_INODES = 4096  # files and directories of one run together (its tmpfs)
_MAX_EVENT = 64 << 10  # one result event, bytes (a case's error text is cut at 1,000 characters)
_MAX_STREAM = 16 << 20  # all result events of a run, bytes


class SandboxError(RuntimeError):
    """The sandbox itself could not run (unsupported platform, no interpreter), not the program."""


@dataclass(frozen=True)
class CaseResult:
    """One test case: its ``source``, whether it passed and, if not, why (``error``)."""

    index: int
    source: str
    passed: bool
    error: str | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class TestReport:
    """The outcome of one run. ``status``: "ok" (every case ran; each passed or failed on its own),
    "syntax_error" (never started), "error" (the program raised while loading: no case passes),
    "timeout" (wall clock, CPU time or ``case_timeout``), "memory" (the address-space limit),
    "crashed" (killed by a signal, or exited before reporting every case). ``reason`` says what
    happened in words; ``cases`` holds the per-case results in test order."""

    __test__ = False  # not a pytest class

    passed: int
    failed: int
    total: int
    first_failure: str | None
    seconds: float
    status: Status
    reason: str
    cases: tuple[CaseResult, ...] = ()
    enforced: tuple[str, ...] = ()

    @property
    def fraction(self) -> float:
        """Passed / total (0.0 for an empty suite)."""
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total


# What ``python -c`` runs for this interpreter: read the runner's code object (compiled once here;
# compiling 1,600 lines cost 5-15 ms a run) from stdin and run it. The marker text names the
# process in ``ps`` and lets tests find leftovers.
_STUB = (b'"child side of ``trellis.codegen.sandbox``: the runner, compiled, from stdin"\n'
         b"import marshal, os\n"
         b"def _r(n):\n    b = b''\n    while len(b) < n:\n        c = os.read(0, n - len(b))\n"
         b"        if not c:\n            raise SystemExit(70)\n        b += c\n    return b\n"
         b"h = b''\nwhile not h.endswith(b'\\n'):\n    c = os.read(0, 1)\n    if not c:\n        raise SystemExit(70)\n"
         b"    h += c\nexec(marshal.loads(_r(int(h))), {'__name__': '__main__'})\n").decode()


@functools.cache
def _runner_code() -> bytes:
    """The runner's source compiled and marshalled (valid for this interpreter only)."""
    import marshal

    return marshal.dumps(compile(_runner_source(), "<trellis sandbox runner>", "exec", dont_inherit=True))


@functools.cache
def _runner_source() -> str:
    here = Path(__file__)
    # The seccomp layer first (it defines ``install_seccomp``), then the runner; both stdlib only.
    return here.with_name("_seccomp.py").read_text(encoding="utf-8") + "\n" + \
        here.with_name("_runner.py").read_text(encoding="utf-8")


_NS_FULL = ("--net", "--pid", "--ipc", "--mount", "--propagation", "private", "--mount-proc")


@functools.cache
def _namespaces() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(command prefix, layer names): ``unshare`` into new network, PID, IPC and mount namespaces
    (``/proc`` of the new PID namespace mounted, so the supervisor sees only the run's processes)
    when permitted, else network + PID only, else nothing."""
    unshare, true = shutil.which("unshare"), shutil.which("true")
    if not sys.platform.startswith("linux") or unshare is None or true is None:
        return (), ()
    user = ("--user", "--map-root-user") if os.geteuid() != 0 else ()
    for flags, names in ((_NS_FULL, ("netns", "pidns", "ipcns", "mountns")), (("--net", "--pid"), ("netns", "pidns"))):
        cmd = (unshare, *user, *flags, "--fork", "--kill-child")
        try:
            subprocess.run([*cmd, true], check=True, capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            continue
        return cmd, names + (("userns",) if user else ())
    return (), ()


@functools.cache
def _landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none), asked the way the runner asks."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        return max(0, int(libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))))
    except (OSError, AttributeError):
        return 0


@functools.cache
def _cgroup_base() -> str | None:
    """This process's own cgroup v2 directory when it may create children there (a writable
    unified hierarchy); None otherwise. Runs go into children of it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        mount = next(line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
                     if line.split()[2] == "cgroup2")
        own = next(line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::"))
    except (OSError, StopIteration, IndexError):
        return None
    base = os.path.join(mount, own.strip().lstrip("/"))
    probe = os.path.join(base, f"trellis-probe-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.mkdir(probe)
        os.rmdir(probe)
    except OSError:
        return None
    return base


def _cgroup_create(memory_mb: int, max_processes: int) -> tuple[str | None, tuple[str, ...]]:
    """A cgroup v2 child for one run: the supervisor joins it before forking, so every process of
    the run is in it and ``cgroup.kill`` ends them all at once. Where the parent enables the
    memory and pids controllers for its children, ``memory.max`` / ``pids.max`` hold the run-wide
    limits in the kernel too (the supervisor's accounting stays as the portable fallback)."""
    base = _cgroup_base()
    if base is None:
        return None, ()
    path = os.path.join(base, f"trellis-sandbox-{os.getpid()}-{secrets.token_hex(6)}")
    try:
        os.mkdir(path)
    except OSError:
        return None, ()
    names = ["cgroup"]  # reported by the supervisor once it has joined
    for name, value in (("memory.max", int(memory_mb) << 20 if memory_mb else None),
                        ("memory.swap.max", 0 if memory_mb else None), ("pids.max", int(max_processes) + 2)):
        if value is None or not os.path.exists(os.path.join(path, name)):
            continue
        try:
            Path(path, name).write_text(str(value))
            names.append(f"cgroup-{name.split('.')[0]}")
        except OSError:
            pass
    return path, tuple(dict.fromkeys(names))


def _cgroup_remove(path: str) -> None:
    """Kill whatever is left in the run's cgroup and remove it (empty cgroups only go)."""
    kill = os.path.join(path, "cgroup.kill")
    deadline = time.monotonic() + 2.0
    while True:
        try:
            if os.path.exists(kill):
                Path(kill).write_text("1")
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)


def _run_uid() -> int | None:
    """Run as root: a uid of this run alone (no passwd entry, no process), so RLIMIT_NPROC counts
    exactly the run's processes and nothing the run leaves can be mistaken for another's. None
    otherwise (the user's own uid, mapped to root inside a user namespace where there is one)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    import pwd

    while True:
        uid = (1 << 24) + secrets.randbelow(1 << 29)
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid


def _site_dirs() -> list[str]:
    """This interpreter's package directories: the runner starts with ``-S`` (no ``site``: its .pth
    processing cost ~25 ms a run) and adds them itself."""
    import site

    return [p for p in site.getsitepackages() if os.path.isdir(p)]


def _world_reachable(path: str) -> bool:
    """Every directory from / to ``path`` searchable by others, and ``path`` readable by them."""
    p = Path(path).resolve()
    try:
        for d in [*reversed(p.parents), p]:
            mode = d.stat().st_mode
            if not mode & 0o001 or (d == p and not mode & 0o004):
                return False
    except OSError:
        return False
    return True


def layers() -> str:
    """The layers a run enforces on this machine, as ``trellis info`` prints them (runs one
    trivial program), or why the sandbox cannot start."""
    try:
        return ", ".join(run_tests("", ["assert True"]).enforced)
    except SandboxError as e:
        return f"unavailable: {e}"


def _failed_report(suite: TestSuite, status: Status, reason: str, seconds: float,
                   enforced: tuple[str, ...] = ()) -> TestReport:
    cases = tuple(CaseResult(i, c.source, False, reason) for i, c in enumerate(suite.cases))
    return TestReport(passed=0, failed=len(cases), total=len(cases), first_failure=reason, seconds=seconds,
                      status=status, reason=reason, cases=cases, enforced=enforced)


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def run_tests(code: str, tests: str | Sequence[str] | TestSuite, *, entry_point: str | None = None,
              timeout: float = 5.0, case_timeout: float | None = None, memory_mb: int = 512,
              cpu_seconds: int | None = None, file_mb: int = 16, disk_mb: int = 64, max_processes: int = 16,
              python: str | None = None) -> TestReport:
    """Run ``code`` and then each test case of ``tests`` in a sandbox; the verdict is decided
    outside the program's process (module docstring).

    ``tests``: test code (HumanEval ``check(candidate)`` style or plain asserts), a list of assert
    strings, or a parsed ``TestSuite``; ``entry_point`` (the function ``candidate`` names) overrides
    the suite's. ``timeout``: wall-clock seconds for the program and all its tests (one absolute
    deadline; interpreter start-up not counted); ``case_timeout``: seconds per case (a failed
    case, the run goes on while the program still answers). ``cpu_seconds`` defaults to
    ``ceil(timeout) + 1``: a backstop, with one second of slack so it does not race the wall-clock
    limit. ``memory_mb``: memory of the program's processes together (and the address-space limit
    of each; 0: none). ``file_mb``: the largest file; ``disk_mb``: all files of the run together;
    ``max_processes``: the program's processes together. ``python``: the interpreter (default:
    this one). Raises ``SandboxError`` only when the sandbox cannot start; anything that goes
    wrong once it runs is a report (status "crashed"), never an exception.
    """
    suite = tests if isinstance(tests, TestSuite) else parse_tests(tests, entry_point=entry_point)
    if entry_point is not None and suite.entry_point != entry_point:
        suite = replace(suite, entry_point=entry_point)
    if os.name != "posix":
        raise SandboxError("the code sandbox needs a POSIX system (resource limits, process groups)")
    t0 = time.monotonic()
    try:
        compile(code, "<program>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError) as e:
        where = f" (line {e.lineno})" if isinstance(e, SyntaxError) and e.lineno else ""
        msg = e.msg if isinstance(e, SyntaxError) else str(e)
        return _failed_report(suite, "syntax_error", f"{type(e).__name__}: {msg}{where}", time.monotonic() - t0)
    prefix, layers = _namespaces()
    landlock = _LANDLOCK and _landlock_abi() > 0
    uid = _run_uid() if sys.platform.startswith("linux") else None
    if uid is not None and not landlock:
        for path in {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(python or sys.executable))}:
            if not _world_reachable(path):
                raise SandboxError(
                    f"refusing to run untrusted code as root without Landlock: the program would run as an "
                    f"unprivileged uid with no capability, and could not read the interpreter under {path} "
                    f"(a directory on the way is not searchable by other users). Run as a non-root user, use "
                    f"a kernel with Landlock (Linux >= 5.13), or install Python where other users can read it.")
    try:
        return _run(suite, code, t0, prefix, layers, landlock, uid, timeout, case_timeout, memory_mb, cpu_seconds,
                    file_mb, disk_mb, max_processes, python)
    except SandboxError:
        raise
    except Exception as e:  # noqa: BLE001 - a search must never be aborted by one program's run
        return _failed_report(suite, "crashed", f"the sandbox failed while running the program: "
                              f"{type(e).__name__}: {e}"[:1000], time.monotonic() - t0, tuple(layers))


def _run(suite: TestSuite, code: str, t0: float, prefix: tuple[str, ...], layers: tuple[str, ...], landlock: bool,
         uid: int | None, timeout: float, case_timeout: float | None, memory_mb: int, cpu_seconds: int | None,
         file_mb: int, disk_mb: int, max_processes: int, python: str | None) -> TestReport:
    # Another interpreter than this one keeps its own ``site`` (its package directories are not
    # known here); this one starts without it and is given the directories.
    same = python is None or os.path.realpath(python) == os.path.realpath(sys.executable)
    workdir = tempfile.mkdtemp(prefix="trellis-sandbox-")
    cgroup, cg_layers = _cgroup_create(memory_mb, max_processes) if _CGROUP else (None, ())
    read_fd, write_fd = os.pipe()
    errfile = tempfile.TemporaryFile()
    job = {
        "fd": write_fd, "workdir": workdir, "program": code, "landlock": landlock, "run_uid": uid,
        "seccomp": _SECCOMP, "netns": "netns" in layers, "pidns": "pidns" in layers, "ipcns": "ipcns" in layers,
        "mountns": "mountns" in layers, "cgroup": cgroup, "cgroup_layers": list(cg_layers),
        "site": _site_dirs() if same else [],
        "limits": {"cpu_seconds": int(cpu_seconds if cpu_seconds is not None else max(1, -(-timeout // 1)) + 1),
                   "memory_bytes": int(memory_mb) << 20, "file_bytes": int(file_mb) << 20,
                   "disk_bytes": int(disk_mb) << 20, "inodes": _INODES, "open_files": 256,
                   "processes": int(max_processes), "fresh_uid": uid is not None},
    }
    tests = {"preamble": suite.preamble, "entry_point": suite.entry_point, "case_timeout": case_timeout,
             "cases": [{"setup": c.setup, "source": c.source} for c in suite.cases]}
    env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    proc = None
    try:
        if uid is not None:
            os.chown(workdir, uid, uid)
        try:
            flags = ("-I", "-S") if same else ("-I",)
            proc = subprocess.Popen([*prefix, python or sys.executable, *flags, "-c",
                                     _STUB if same else _runner_source()],
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=errfile, cwd=workdir,
                                    env=env, pass_fds=(write_fd,), start_new_session=True, close_fds=True)
        except OSError as e:
            raise SandboxError(f"cannot start the sandboxed interpreter: {e}") from e
        finally:
            os.close(write_fd)
        try:
            if same:  # the runner itself first (_STUB)
                code = _runner_code()
                proc.stdin.write(b"%d\n%s" % (len(code), code))  # type: ignore[union-attr]
            for frame in (job, tests):  # two frames: the worker is forked between them (_runner.py)
                data = json.dumps(frame).encode("utf-8")
                proc.stdin.write(b"%d\n%s" % (len(data), data))  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
        except OSError:
            pass  # it died before reading: reported below from its exit status
        events, ended = _collect(proc, read_fd, timeout, len(suite.cases))
        _kill(proc, pidns="pidns" in layers)
        errfile.seek(0, os.SEEK_END)
        size = errfile.tell()
        errfile.seek(max(0, size - 600))
        stderr_tail = errfile.read().decode("utf-8", "replace").strip()
    finally:
        if proc is not None and proc.returncode is None:
            _kill(proc, pidns="pidns" in layers)
        os.close(read_fd)
        errfile.close()
        if cgroup is not None:
            _cgroup_remove(cgroup)
        _remove_tree(workdir)
        if uid is not None and not landlock:
            _sweep(uid)
    return _report(suite, events, ended, proc.returncode, stderr_tail, time.monotonic() - t0,
                   timeout, layers, job["limits"])


def _collect(proc: subprocess.Popen, fd: int, timeout: float, n_cases: int) -> tuple[list[dict], str | None]:
    """Events from the result pipe until "done", EOF, or the deadline. Returns (events, why it
    ended early: None, "timeout", or a protocol violation). One absolute deadline: start-up time
    plus ``timeout`` counted from the supervisor's first event, set once."""
    events: list[dict] = []
    buf = b""
    t0 = time.monotonic()
    deadline = t0 + _STARTUP_SECONDS + timeout  # never later than this, whatever arrives
    started = False
    done_at: float | None = None
    total = 0
    exited_at: float | None = None
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now >= deadline:
                return events, None if done_at is not None else "timeout"
            if exited_at is None and proc.poll() is not None:
                exited_at = now  # a stray holder of the pipe: give the rest 0.2 s to arrive
            if exited_at is not None and now - exited_at > 0.2:
                return events, None
            if not sel.select(min(deadline - now, 0.05)):
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return events, None
            total += len(chunk)
            buf += chunk
            if total > _MAX_STREAM or len(buf) > _MAX_EVENT:
                return events, "the result stream exceeded its size limit"
            *lines, buf = buf.split(b"\n")
            for line in lines:
                try:
                    ev = json.loads(line)
                except ValueError:
                    return events, "a malformed result event"
                if not _valid_event(ev, n_cases):
                    return events, "a malformed result event"
                events.append(ev)
                if len(events) > n_cases + 8:
                    return events, "more result events than test cases"
                if ev["ev"] == "main" and not started:
                    started = True
                    deadline = min(deadline, time.monotonic() + timeout)
                if ev["ev"] == "done" and done_at is None:
                    # The supervisor's word on the worker (a limit it killed for) may still be on
                    # its way: read on until EOF, briefly.
                    done_at = time.monotonic()
                    deadline = min(deadline, done_at + 0.25)
            if done_at is not None and time.monotonic() >= deadline:
                return events, None


def _is(x: object, *types: type) -> bool:
    return type(x) in types  # exact types: bool is not an int here, and no subclass arrives from JSON


_NUM = (int, float)


def _valid_event(ev: object, n_cases: int) -> bool:
    """The shape of each event the runner may send (_runner.py); anything else breaks the run."""
    if not isinstance(ev, dict):
        return False
    kind = ev.get("ev")
    opt_str = (str, type(None))
    if kind == "main":
        return _is(ev.get("layers"), list) and all(_is(x, str) for x in ev["layers"])
    if kind == "start":
        return _is(ev.get("enforced"), list) and all(_is(x, str) for x in ev["enforced"])
    if kind == "load":
        return _is(ev.get("error"), *opt_str) and _is(ev.get("kind"), *opt_str)
    if kind == "case":
        i = ev.get("i")
        return (_is(i, int) and 0 <= i < n_cases and _is(ev.get("ok"), bool) and _is(ev.get("error"), *opt_str)
                and _is(ev.get("kind"), *opt_str) and _is(ev.get("t"), *_NUM))
    if kind == "lost":
        return _is(ev.get("at"), int) and _is(ev.get("why"), str)
    if kind == "judge":
        return _is(ev.get("signal"), int)
    if kind == "exit":
        return (_is(ev.get("signal"), int, type(None)) and _is(ev.get("code"), int, type(None))
                and _is(ev.get("cpu"), *_NUM) and _is(ev.get("over"), *opt_str))
    return kind == "done"


def _kill(proc: subprocess.Popen, pidns: bool) -> None:
    """Stop the run and everything it started: EOF on the runner's stdin makes its supervisor kill
    the program's process tree and exit, which (as PID-namespace init) takes the namespace down
    before ``unshare`` exits; then SIGKILL the process group for whatever is left (without a
    namespace, repeatedly for up to a second: SIGKILL is asynchronous and a fork bomb's members die
    in turn)."""
    try:
        proc.stdin.close()  # type: ignore[union-attr]
    except OSError:
        pass
    try:
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + (0.0 if pidns else 1.0)
    while True:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            break
        if time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process that survives SIGKILL
        proc.kill()
        proc.wait()


_FLATTEN_DEPTH = 16  # deeper directories are moved up to the top before descending further


def _remove_tree(path: str) -> None:
    """Remove ``path`` and everything in it, never following a symlink, never touching anything
    outside it, without recursion and with at most ``_FLATTEN_DEPTH`` descriptors open: a deeper
    directory is moved to the top level (under a random name) first, so a 1,500-level tree costs
    no stack and no descriptor per level. Read-only directories of the run are made writable
    (they are inside). An entry that cannot be removed is skipped, not fatal."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        top = os.open(path, flags)
    except OSError:
        return
    stack: list[tuple[int, str]] = [(top, "")]  # (dir fd, its name in the directory below it)
    stuck: set[tuple[int, int]] = set()  # (dev, inode) of entries that resisted: not retried
    try:
        while stack:
            fd = stack[-1][0]
            try:
                os.chmod(fd, 0o700)
            except OSError:
                pass
            descend = None
            try:
                with os.scandir(fd) as it:
                    for e in it:
                        try:
                            st = e.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if (st.st_dev, st.st_ino) in stuck:
                            continue
                        if e.is_dir(follow_symlinks=False):
                            descend = e.name
                            break
                        try:
                            os.unlink(e.name, dir_fd=fd)
                        except FileNotFoundError:
                            continue
                        except OSError:
                            stuck.add((st.st_dev, st.st_ino))
            except OSError:
                pass
            if descend is None:
                _, name = stack.pop()
                os.close(fd)
                if stack:
                    try:
                        os.rmdir(name, dir_fd=stack[-1][0])
                    except OSError:
                        pass
                continue
            try:
                if len(stack) >= _FLATTEN_DEPTH:
                    os.rename(descend, f".trellis-flat-{secrets.token_hex(8)}", src_dir_fd=fd, dst_dir_fd=top)
                else:
                    stack.append((os.open(descend, flags, dir_fd=fd), descend))
            except OSError:
                try:
                    st = os.stat(descend, dir_fd=fd, follow_symlinks=False)
                    stuck.add((st.st_dev, st.st_ino))
                except OSError:
                    pass
    finally:
        for fd, _ in stack:
            os.close(fd)
    try:
        os.rmdir(path)
    except OSError:
        pass


def _sweep(uid: int) -> None:
    """Without Landlock, a program running as its own uid may have written to the world-writable
    places: remove what that uid owns there (nothing else can own it)."""
    for d in ("/tmp", "/var/tmp", "/dev/shm"):
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_uid != uid:
                continue
            if e.is_dir(follow_symlinks=False):
                _remove_tree(e.path)
            else:
                try:
                    os.unlink(e.path)
                except OSError:
                    pass


def _report(suite: TestSuite, events: list[dict], ended: str | None, returncode: int | None, stderr_tail: str,
            seconds: float, timeout: float, layers: tuple[str, ...], limits: dict) -> TestReport:
    def first(kind: str) -> dict | None:
        return next((e for e in events if e.get("ev") == kind), None)

    def strings(xs: object) -> tuple[str, ...]:
        return tuple(x for x in xs if isinstance(x, str) and len(x) < 40) if isinstance(xs, list) else ()

    main, start, load, exit_ = first("main"), first("start"), first("load"), first("exit")
    enforced = tuple(layers) + strings((main or {}).get("layers")) + strings((start or {}).get("enforced"))
    done = first("done") is not None
    lost = first("lost")
    n = len(suite.cases)
    got = {e["i"]: e for e in events
           if e.get("ev") == "case" and type(e.get("i")) is int and 0 <= e["i"] < n}
    if load is not None and isinstance(load.get("error"), str):
        kind = load.get("kind")
        status: Status = "memory" if kind == "memory" else "error"
        reason = f"the program failed while loading: {load['error'][:1000]}"
        if kind == "memory":
            reason += f" (address-space limit {limits['memory_bytes'] >> 20} MB)"
        return _failed_report(suite, status, reason, seconds, enforced)
    over = (exit_ or {}).get("over")
    missing = n - len(got)
    if ended == "timeout":
        status, reason = "timeout", (f"wall-clock limit of {timeout:g} s exceeded after {len(got)} of {n} "
                                     "test cases; the process group was killed")
    elif ended is not None:  # the result stream broke its rules: none of it counts
        return _failed_report(suite, "crashed", f"the run was stopped: {ended}", seconds, enforced)
    elif over == "memory":
        status, reason = "memory", (f"the program's processes together used more than the run's memory limit of "
                                    f"{limits['memory_bytes'] >> 20} MB; all were killed")
    elif over == "disk":
        status, reason = "crashed", (f"the program's files together exceeded the run's disk limit of "
                                     f"{limits['disk_bytes'] >> 20} MB or {limits['inodes']} files; all its "
                                     "processes were killed")
    elif over == "processes":
        status, reason = "crashed", f"the program started more than {limits['processes']} processes; all were killed"
    elif first("judge") is not None:
        sig = first("judge")["signal"]  # type: ignore[index]
        status, reason = "crashed", (f"the process running the tests died ({_signal_name(sig)}) after {len(got)} of "
                                     f"{n} test cases")
    elif lost is not None and isinstance(lost.get("why"), str) and "protocol" in lost["why"]:
        status, reason = "crashed", f"{lost['why'][:300]} after {len(got)} of {n} test cases"
    elif not done or lost is not None:
        ex = exit_ or {}
        sig, code = ex.get("signal"), ex.get("code")
        sig = sig if type(sig) is int else None
        code = code if type(code) is int else None
        cpu = ex.get("cpu")
        cpu_out = float(cpu if isinstance(cpu, (int, float)) else 0.0) >= limits["cpu_seconds"] - 0.05
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_out):
            status, reason = "timeout", f"CPU time limit of {limits['cpu_seconds']} s exceeded ({_signal_name(sig)})"
        elif sig:
            status, reason = "crashed", f"killed by {_signal_name(sig)} after {len(got)} of {n} test cases"
        elif code is not None:
            status, reason = "crashed", (f"the program exited with status {code} before reporting "
                                         f"{missing} of {n} test cases")
        elif lost is not None and isinstance(lost.get("why"), str):
            status, reason = "crashed", f"{lost['why'][:300]} after {len(got)} of {n} test cases"
        else:
            status, reason = "crashed", f"the sandbox process ended (status {returncode}) without a report"
        if stderr_tail:
            reason += f"; stderr: {stderr_tail[-300:]}"
    elif missing:
        status, reason = "crashed", f"the run ended without a result for {missing} of {n} test cases"
    else:
        kinds = {e.get("kind") for e in got.values()}
        status = "memory" if "memory" in kinds else "timeout" if "timeout" in kinds else "ok"
        reason = {"ok": f"ran {n} test cases",
                  "memory": f"a test case hit the address-space limit ({limits['memory_bytes'] >> 20} MB)",
                  "timeout": "a test case hit case_timeout"}[status]
    not_run = {"timeout": "not run: time limit", "crashed": "not run: the process died",
               "memory": "not run: memory limit"}.get(status, "not run")
    cases = []
    for i, c in enumerate(suite.cases):
        e = got.get(i)
        if e is None:
            cases.append(CaseResult(i, c.source, False, not_run))
        else:
            err, t = e.get("error"), e.get("t")
            cases.append(CaseResult(i, c.source, e.get("ok") is True, err[:1000] if isinstance(err, str) else None,
                                    float(t) if isinstance(t, (int, float)) else 0.0))
    passed = sum(c.passed for c in cases)
    first_bad = next((c for c in cases if not c.passed), None)
    first_failure = (None if first_bad is None
                     else f"{first_bad.source.strip().splitlines()[0][:200]} -> {first_bad.error}")
    return TestReport(passed=passed, failed=n - passed, total=n, first_failure=first_failure, seconds=seconds,
                      status=status, reason=reason, cases=tuple(cases), enforced=enforced)
