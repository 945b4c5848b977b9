"""Run a generated program against its tests in a sandbox where the verdict is not the program's.

``run_tests(code, tests)`` compiles ``code`` here (a syntax error costs no process), then starts
``python -I -S`` (``seccomp.py`` + the parts of ``runner/``: one script, compiled once per process
and sent marshalled on stdin behind a small ``-c`` stub) in a fresh work dir with a scrubbed
environment. Its first process, the *supervisor*, forks the **worker** with the program only, then
reads the tests and forks the **judge** (``runner/supervisor.py`` explains the three). The worker
returns data; the judge runs the assertions on values rebuilt from builtins, in a process the
program never shared memory with, and it alone writes the results. So rebinding the harness,
patching builtins or the JSON encoder, reading frames, ``gc`` or memory for the expected value, or
an ``__eq__`` that is always true earns nothing (tests/codegen/test_sandbox_attacks.py tries each).

This module is the API (``run_tests``, ``layers``) and the driver of one run; its stages live
beside it: ``sandbox_host`` (the confinement set up on the host and the cleanup after),
``sandbox_child`` (the runner sent to the child, its result stream, stopping it) and
``sandbox_report`` (the result types and the report built from the events).

What is enforced (each layer is reported in ``TestReport.enforced``; ``trellis info`` lists them):

- always: one absolute wall-clock deadline (interpreter start-up not counted, set once by the
  supervisor's first event; then everything is SIGKILLed); the result stream checked event by
  event (shape, count, 64 KB per event, 16 MB in all: a violation voids the whole run); rlimits on
  CPU seconds, address space (``memory_mb`` per process), file size, open files, core dumps and
  processes; run-wide limits checked by the supervisor over the program's whole process tree
  (it is a child subreaper, so ``setsid`` daemons stay in it): memory ``memory_mb`` (sampled; the
  kernel's memory cgroup, below, holds it first where there is one), processes ``max_processes``,
  and, without a mount namespace, the
  work dir's size ``disk_mb`` and entry count, checked every 0.1 s; every process of the run killed before
  ``run_tests`` returns; stdout discarded, stderr kept (capped); a socket shim.
- Linux with ``unshare`` (util-linux) usable (root, or an unprivileged user namespace): new
  network (nothing reachable), PID (the run cannot see or signal the host; its init takes every
  process down), IPC (SysV shared memory, queues and semaphores vanish with it) and mount
  namespaces, with the namespace's own ``/proc`` and a tmpfs on the work dir capped at ``disk_mb``
  and 4,096 entries (``fallocate`` cannot reserve past it; the files vanish with the namespace).
- Linux >= 5.13 (Landlock), worker: reads only beneath the interpreter's directories, writes only
  beneath the work dir, no ``execve``; ABI >= 4 no TCP bind/connect; ABI >= 6 no signals or
  abstract sockets outside its domain. Judge: the same with no write anywhere.
- seccomp (x86_64, aarch64; ``seccomp.py``): ``socket()`` only for AF_INET/AF_INET6 (none without
  a network namespace), no keyrings (not covered by the IPC namespace), no ptrace or
  ``process_vm_*``, no new namespaces or mounts, no ``fallocate``; no SysV/POSIX IPC, memfds,
  socket pairs or ``vmsplice`` (memory no process maps escapes the run's memory count); no
  extended attributes, timestamps or inotify on files (Landlock does not govern them); without a
  PID namespace no ``setsid``/``setpgid``. The memory count is proportional set size plus page
  tables; transparent huge pages are off for the run; at most 1,024 pending signals (timers).
- cgroup v2, where this process may create children in its own cgroup: every process of the run
  is born in a cgroup of the run's own, killed at once (``cgroup.kill``) and removed (in the
  background when its processes are still tearing down: ``run_tests`` returns within timeout +
  1 s, start-up not counted); where the memory and pids controllers are enabled there,
  ``memory.max`` and ``pids.max`` hold the run's limits in the kernel.
- cgroup v1, where the host mounts the memory, pids or cpu controller as v1 (a hybrid layout; this
  machine's) and this process may create children there: the worker is born in cgroups of the
  run's own, so the program's whole process tree is held by ``memory.limit_in_bytes`` (swap
  included where the kernel counts it; OOM killer off, so a run at its limit waits until the
  supervisor kills it whole and reports "memory"), ``pids.max`` (``max_processes``) and one cpu
  group (new sessions buy no CPU share: autogroups apply only in the root group). Reported as
  ``cgroup1-memory``, ``cgroup1-pids``, ``cgroup1-cpu``. The memory count is the kernel's: page
  tables, kernel structures of mappings and the run's tmpfs files are in it.
- where no memory cgroup holds the program: a share each, bounded by construction. The program
  may run ``memory_mb // 128`` processes at most (``FALLBACK_SHARE_MB``, up to
  ``max_processes``), each with ``memory_mb`` divided among them as its address space (512 MB:
  4 x 128 MB; reported as ``rlimit-share 4x128MB``), so together they cannot map more than
  ``memory_mb``. Setsid is refused then (one session, one autogroup). The supervisor's sampling
  runs in every run, beside a memory cgroup too: resident sizes first (O(1) counters), proportional sizes only above the
  limit and for at most 10 ms a pass, whatever is not read in time counting at its resident size.
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
namedtuples, Counter/defaultdict (any factory's default)/OrderedDict/deque, dict views, Fraction,
Decimal, range, memoryview, dates and times, and numpy scalars (rebuilt by the judge's own
classes); an exception arrives as its nearest builtin class with its arguments. The tests may send
data, these values, builtin and standard-library callables and types by name (``int``,
``str.upper``, ``math.sqrt``), their own iterators as item lists, and their own functions (a
lambda, a bound method such as ``out.append``, a mock): a function of the tests' stays in the
judge, and when the program calls it the worker sends the call back and waits, serving the judge's
requests meanwhile (the function may use the program's objects; calls nest both ways). The
program's ``input()`` and ``sys.stdin`` are the tests' the same way, so ``mock.patch`` of either
works and, unpatched, they read EOF. A call the judge abandons (the case's timeout) unwinds the
program's request; its late answer is dropped. Program threads may call at once (the worker hands
each answer to the thread that made the call, and the judge keeps a reply that comes before a
nested one's); an exception of the tests' own class raised in their function comes back to them
as itself, once, through the request it was raised in. ``isinstance`` against the program's class
is the program's answer too (``program_decided``). A list, dict or
set the tests' function changes in place is changed in the program too (by value, as the
program's changes to the tests' arguments are). Anything else (the program's
own class instances, generators, numpy arrays) reaches the tests as a handle (``runner/remote.py``)
that the worker operates on: calls, attributes read and set, items, ``len``, streamed iteration,
``repr``/``str``, arithmetic, ``with``, ``isinstance`` against the program's classes. Two of the
program's objects are compared, containment asked and arithmetic on one done by the program: such a
case carries ``program_decided`` (a ``__sub__`` returning 0 passes ``abs(f(x) - expected) < tol``,
natively too). A handle is never compared with the tests' own values, hashed or
truth-tested, and other protocol names (``__*__``) are never asked of it. A reply the judge cannot
rebuild (the program's objects as dict keys) fails its case with the reason; the run goes on. What
therefore fails that passed when one process ran both: equality of the program's
dataclasses/enums/instances with the tests' values, arrays compared element-wise, arguments
aliased to each other, instances of the tests' own classes as arguments, values over 8 MB in one
reply, a data global the tests change. The tests' ``tempfile`` works in a
directory of the work dir both sides may write (``shared``, counted in the run's disk limit). What
the program prints while it answers reaches the tests' ``sys.stdout`` (``redirect_stdout``); the
program's exception classes arrive as the judge's stand-ins (subclasses of their builtin ancestor,
bound to the program's names for them) with the program's text and data fields, so ``except
ProgramError as e: e.field`` works; the tests' ``random.seed`` seeds the program's ``random`` too. Without
namespaces (``unshare`` missing), the disk limit is the supervisor's accounting, sampled every
0.1 s, so fast writes can overshoot briefly; as
a non-root user without Landlock the program can write wherever the user can, and read its
ancestors' memory where Yama's ptrace_scope is 0 (seccomp stops ptrace and ``process_vm_readv``,
not ``/proc/<pid>/mem``). Always: the program can learn which host files exist (``stat``,
``readlink`` cannot be filtered by path), not read them; pipes can hold the kernel's per-user pipe
allowance (64 MB by default) outside the memory count; the work dir's tmpfs is RAM, so a run can
hold ``memory_mb`` + ``disk_mb``. Tests ran here as root with Landlock (ABI 7), a writable cgroup v2
hierarchy without controllers beside v1 memory/pids/cpu hierarchies (``tests/codegen/
test_sandbox_limits.py`` runs each limit with them and without any cgroup), and util-linux unshare; the non-root fallback without
Landlock could not be exercised on these machines (the interpreter lives under /root).
Not for Windows; RLIMIT_AS is not enforced on macOS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from typing import Sequence

from trellis.codegen.sandbox_child import STUB, collect, kill, runner_code, runner_source
from trellis.codegen.sandbox_host import (RunCgroups, cgroup_create, cgroup_remove, finish_later, landlock_abi,
                                          namespaces, remove_tree, run_uid, site_dirs, sweep, world_reachable)
from trellis.codegen.sandbox_report import CaseResult, SandboxError, Status, TestReport, build_report, failed_report
from trellis.codegen.suite import TestSuite, parse_tests

__all__ = ["CaseResult", "SandboxError", "Status", "TestReport", "layers", "run_tests"]

_LANDLOCK = True  # tests switch it off to check the layers that remain without it
_SECCOMP = True  # likewise for the seccomp layer
_CGROUP = True  # and for the per-run cgroup
_INODES = 4096  # files and directories of one run together (its tmpfs)
FALLBACK_SHARE_MB = 128  # the smallest address space a process gets where no memory cgroup holds the run


def layers() -> str:
    """The layers a run enforces on this machine, as ``trellis info`` prints them (runs one
    trivial program), or why the sandbox cannot start."""
    try:
        return ", ".join(run_tests("", ["assert True"]).enforced)
    except SandboxError as e:
        return f"unavailable: {e}"


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
    # Only whether it parses: its SyntaxWarnings (``x is 1``) are the program's, reported with the
    # result, not the caller's to see on its stderr every run; and under ``-W error`` they would
    # turn an honest program into a syntax error (issue 55).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            compile(code, "<program>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError) as e:
            where = f" (line {e.lineno})" if isinstance(e, SyntaxError) and e.lineno else ""
            msg = e.msg if isinstance(e, SyntaxError) else str(e)
            return failed_report(suite, "syntax_error", f"{type(e).__name__}: {msg}{where}", time.monotonic() - t0)
    said = tuple(f"line {w.lineno}: {w.category.__name__}: {w.message}"[:500] for w in caught[:20])
    report = _checked_run(suite, code, t0, timeout, case_timeout, memory_mb, cpu_seconds, file_mb, disk_mb,
                          max_processes, python)
    return replace(report, warnings=said) if said else report


def _checked_run(suite: TestSuite, code: str, t0: float, timeout: float, case_timeout: float | None,
                 memory_mb: int, cpu_seconds: int | None, file_mb: int, disk_mb: int, max_processes: int,
                 python: str | None) -> TestReport:
    """``run_tests`` once the program parses: the host's layers checked, then one run."""
    prefix, layers = namespaces()
    landlock = _LANDLOCK and landlock_abi() > 0
    uid = run_uid() if sys.platform.startswith("linux") else None
    if uid is not None and not landlock:
        for path in {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(python or sys.executable))}:
            if not world_reachable(path):
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
        return failed_report(suite, "crashed", f"the sandbox failed while running the program: "
                              f"{type(e).__name__}: {e}"[:1000], time.monotonic() - t0, tuple(layers))


def _clean_up(dying: subprocess.Popen | None, cg: RunCgroups, workdir: str, sweep_uid: int | None) -> None:
    """Remove the run's cgroups, work dir and (without Landlock) what its uid left elsewhere. While
    ``dying`` has not exited yet, all of it waits in the background (``finish_later``), in order:
    its processes may still write to the work dir."""
    def step() -> bool:
        if dying is not None and dying.poll() is None:
            return False
        cgroup_remove(cg)
        remove_tree(workdir)
        if sweep_uid is not None:
            sweep(sweep_uid)
        return True

    if not step():
        finish_later(step)


def _memory_share(memory_mb: int, max_processes: int) -> tuple[int, int]:
    """(processes, MB each) where no memory cgroup holds the program: its process count and each
    process's address-space limit, so that the total is bounded by construction, processes x share
    <= memory_mb, with a share of at least ``FALLBACK_SHARE_MB`` (an interpreter and an honest
    program's data): 512 MB gives 4 processes of 128 MB. (Where a memory cgroup holds it, the
    kernel bounds the total: ``max_processes`` processes of up to ``memory_mb`` each.) Sampled
    accounting alone let 16 processes hold 2.5 GB against 320 MB (issue 55)."""
    if not memory_mb:
        return max_processes, memory_mb
    n = max(1, min(max_processes, memory_mb // FALLBACK_SHARE_MB))
    return n, memory_mb // n


def _run(suite: TestSuite, code: str, t0: float, prefix: tuple[str, ...], layers: tuple[str, ...], landlock: bool,
         uid: int | None, timeout: float, case_timeout: float | None, memory_mb: int, cpu_seconds: int | None,
         file_mb: int, disk_mb: int, max_processes: int, python: str | None) -> TestReport:
    # Another interpreter than this one keeps its own ``site`` (its package directories are not
    # known here); this one starts without it and is given the directories.
    same = python is None or os.path.realpath(python) == os.path.realpath(sys.executable)
    workdir = tempfile.mkdtemp(prefix="trellis-sandbox-")
    cg = cgroup_create(memory_mb, max_processes) if _CGROUP else RunCgroups()
    share = _memory_share(memory_mb, max_processes)
    read_fd, write_fd = os.pipe()
    errfile = tempfile.TemporaryFile()
    job = {
        "fd": write_fd, "workdir": workdir, "program": code, "landlock": landlock, "run_uid": uid,
        "seccomp": _SECCOMP, "netns": "netns" in layers, "pidns": "pidns" in layers, "ipcns": "ipcns" in layers,
        "mountns": "mountns" in layers, "cgroup": cg.run,
        "cgroup_layers": [x for x in cg.layers if not x.startswith("cgroup1-")],
        "worker_cgroups": cg.worker,
        "site": site_dirs() if same else [],
        "limits": {"cpu_seconds": int(cpu_seconds if cpu_seconds is not None else max(1, -(-timeout // 1)) + 1),
                   "memory_bytes": int(memory_mb) << 20, "file_bytes": int(file_mb) << 20,
                   "disk_bytes": int(disk_mb) << 20, "inodes": _INODES, "open_files": 256,
                   "processes": int(max_processes), "fresh_uid": uid is not None,
                   # where no memory cgroup holds the program (the supervisor knows once it joined
                   # or failed to): its processes (RLIMIT_NPROC) and each one's address space
                   # (RLIMIT_AS), so that their product stays within memory_mb (``_memory_share``)
                   "share_processes": share[0], "share_bytes": share[1] << 20},
    }
    tests = {"preamble": suite.preamble, "entry_point": suite.entry_point, "case_timeout": case_timeout,
             "cases": [{"setup": c.setup, "source": c.source} for c in suite.cases]}
    env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    proc = None
    stopped: bool | None = None  # kill()'s word: False while the child is still exiting
    try:
        if uid is not None:
            os.chown(workdir, uid, uid)
        try:
            flags = ("-I", "-S") if same else ("-I",)
            proc = subprocess.Popen([*prefix, python or sys.executable, *flags, "-c",
                                     STUB if same else runner_source()],
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=errfile, cwd=workdir,
                                    env=env, pass_fds=(write_fd,), start_new_session=True, close_fds=True)
        except OSError as e:
            raise SandboxError(f"cannot start the sandboxed interpreter: {e}") from e
        finally:
            os.close(write_fd)
        try:
            if same:  # the runner itself first (STUB)
                code = runner_code()
                proc.stdin.write(b"%d\n%s" % (len(code), code))  # type: ignore[union-attr]
            for frame in (job, tests):  # two frames, the worker forked between them (runner/supervisor.py)
                data = json.dumps(frame).encode("utf-8")
                proc.stdin.write(b"%d\n%s" % (len(data), data))  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
        except OSError:
            pass  # it died before reading: reported below from its exit status
        events, ended = collect(proc, read_fd, timeout, len(suite.cases))
        stopped = kill(proc, pidns="pidns" in layers)
        errfile.seek(0, os.SEEK_END)
        size = errfile.tell()
        errfile.seek(max(0, size - 600))
        stderr_tail = errfile.read().decode("utf-8", "replace").strip()
    finally:
        if proc is not None and proc.returncode is None and stopped is None:
            stopped = kill(proc, pidns="pidns" in layers)
        os.close(read_fd)
        errfile.close()
        _clean_up(proc if stopped is False else None, cg, workdir, uid if uid is not None and not landlock else None)
    return build_report(suite, events, ended, proc.returncode, stderr_tail, time.monotonic() - t0,
                   timeout, layers, job["limits"])
