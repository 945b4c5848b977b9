"""Run a generated program against its tests in a separate, locked-down process.

``run_tests(code, tests)`` compiles ``code`` here (a syntax error costs no process), then starts
``python -I`` (``_runner.py``) in a fresh temporary directory with a scrubbed environment and
sends it the program and the test cases on stdin. That process forks a *worker*, which locks
itself down before it runs any of the program (the limits are set there, not in a ``preexec_fn``,
which is unsafe in a threaded parent such as one running torch), runs the program and then each
case, and writes one result per case to a pipe: every assert is counted on its own, and a case
that hangs or crashes still leaves the earlier results. The first process stays unrestricted and
reports how the worker ended (signal, exit status, CPU time), which a killed process cannot.

What is enforced (each layer is reported in ``TestReport.enforced``):

- always: a wall-clock ``timeout`` (interpreter start-up not counted; then everything is
  SIGKILLed, so a SIGTERM handler cannot delay it); ``setrlimit`` on CPU seconds, address space
  (``memory_mb``), file size, open files, core dumps and processes (RLIMIT_NPROC: the count the
  user already has + ``max_processes``); stdout discarded, stderr into an unlinked file (capped by the file-size limit); the child's
  environment is only PATH/HOME/TMPDIR/LANG; a socket shim refuses ``socket.socket``.
- Linux with ``unshare`` (util-linux) usable: new network namespace (no interface but a downed
  loopback: nothing can be reached) and PID namespace (the program cannot see or signal the
  parent; when the namespace's first process exits, every process the program forked dies with
  it, even ones that called ``setsid``, before ``run_tests`` returns). Unprivileged users get a
  user namespace for this.
- Linux >= 5.13 (Landlock): reads only beneath the interpreter's own directories, full access only
  beneath the temporary directory, no ``execve`` at all; ABI >= 4 also denies TCP bind/connect;
  ABI >= 6 denies signals to processes outside the sandbox.
- run as root: the child drops to ``nobody`` (keeping only CAP_DAC_READ_SEARCH, since the
  interpreter may live under /root), so RLIMIT_NPROC applies (the kernel exempts root) and files the
  parent owns cannot be written even where Landlock is missing.

What it cannot do: the program and the test harness share one process, so a program written to
attack the harness (patching ``AssertionError``, returning objects whose ``__eq__`` is always true,
finding the result pipe's nonce in memory) can fake passes — this contains accidents and runaway
code, it does not judge adversarial programs. Without namespaces and Landlock (macOS, old kernels,
containers that forbid them) the remaining guards are the rlimits, the process group kill, the
socket shim and ordinary file permissions. RLIMIT_AS is not enforced on macOS. Not for Windows.
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

__all__ = ["CaseResult", "SandboxError", "Status", "TestReport", "run_tests"]

Status = Literal["ok", "syntax_error", "error", "timeout", "memory", "crashed"]
_LANDLOCK = True  # tests switch it off to check the layers that remain without it
_STARTUP_SECONDS = 15.0  # interpreter start-up is not charged to ``timeout`` (0.3 s here, under load)


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


@functools.cache
def _runner_source() -> str:
    return (Path(__file__).with_name("_runner.py")).read_text(encoding="utf-8")


@functools.cache
def _namespaces() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(command prefix, layer names): ``unshare`` into new network + PID namespaces when permitted."""
    unshare, true = shutil.which("unshare"), shutil.which("true")
    if not sys.platform.startswith("linux") or unshare is None or true is None:
        return (), ()
    cmd = [unshare, "--net", "--pid", "--fork", "--kill-child"]
    names = ["netns", "pidns"]
    if os.geteuid() != 0:
        cmd[1:1] = ["--user", "--map-root-user"]
        names.append("userns")
    try:
        subprocess.run([*cmd, true], check=True, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return (), ()
    return tuple(cmd), tuple(names)


def _nobody() -> int | None:
    """The uid to drop to when running as root (None otherwise)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    try:
        import pwd

        return pwd.getpwnam("nobody").pw_uid
    except (ImportError, KeyError):
        return 65534


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
              cpu_seconds: int | None = None, file_mb: int = 16, max_processes: int = 16,
              python: str | None = None) -> TestReport:
    """Run ``code`` and then each test case of ``tests`` in a sandboxed child process.

    ``tests``: test code (HumanEval ``check(candidate)`` style or plain asserts), a list of assert
    strings, or a parsed ``TestSuite``; ``entry_point`` (the function ``candidate`` names) overrides
    the suite's. ``timeout``: wall-clock seconds for the program and all its tests; ``case_timeout``:
    seconds per case (SIGALRM inside the child; a failed case, the run goes on). ``cpu_seconds``
    defaults to ``ceil(timeout) + 1``: the CPU limit is a backstop, and the one second of slack
    keeps it from racing the wall-clock limit (CPU time also counts interpreter start-up). ``memory_mb``: address-space limit (0: none). ``python``: the
    interpreter (default: this one). Raises ``SandboxError`` only when the sandbox cannot start.
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
    drop = _nobody() if sys.platform.startswith("linux") else None
    workdir = tempfile.mkdtemp(prefix="trellis-sandbox-")
    read_fd, write_fd = os.pipe()
    errfile = tempfile.TemporaryFile()
    nonce = secrets.token_hex(16)
    job = {
        "nonce": nonce, "fd": write_fd, "workdir": workdir, "program": code, "preamble": suite.preamble,
        "entry_point": suite.entry_point, "cases": [{"setup": c.setup, "source": c.source} for c in suite.cases],
        "case_timeout": case_timeout, "landlock": _LANDLOCK, "drop_uid": drop, "pidns": "pidns" in layers,
        "limits": {"cpu_seconds": int(cpu_seconds if cpu_seconds is not None else max(1, -(-timeout // 1)) + 1),
                   "memory_bytes": int(memory_mb) << 20, "file_bytes": int(file_mb) << 20,
                   "open_files": 256, "processes": int(max_processes)},
    }
    env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    try:
        if drop is not None:
            os.chown(workdir, drop, drop)
        try:
            proc = subprocess.Popen([*prefix, python or sys.executable, "-I", "-c", _runner_source()],
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=errfile, cwd=workdir,
                                    env=env, pass_fds=(write_fd,), start_new_session=True, close_fds=True)
        except OSError as e:
            raise SandboxError(f"cannot start the sandboxed interpreter: {e}") from e
        finally:
            os.close(write_fd)
        try:
            data = json.dumps(job).encode("utf-8")
            proc.stdin.write(b"%d\n%s" % (len(data), data))  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
        except OSError:
            pass  # it died before reading: reported below from its exit status
        events, timed_out = _collect(proc, read_fd, nonce, timeout)
        _kill(proc, pidns="pidns" in layers)
        errfile.seek(0, os.SEEK_END)
        size = errfile.tell()
        errfile.seek(max(0, size - 600))
        stderr_tail = errfile.read().decode("utf-8", "replace").strip()
    finally:
        os.close(read_fd)
        errfile.close()
        shutil.rmtree(workdir, onerror=_force_remove)
    return _report(suite, events, timed_out, proc.returncode, stderr_tail, time.monotonic() - t0,
                   timeout, layers, job["limits"])


def _collect(proc: subprocess.Popen, fd: int, nonce: str, timeout: float) -> tuple[list[dict], bool]:
    """Result events from the pipe until "done", EOF, or the deadline (True: the deadline hit)."""
    events: list[dict] = []
    buf = b""
    tag = nonce.encode() + b" "
    deadline = time.monotonic() + _STARTUP_SECONDS  # moved to start + timeout once the child reports
    exited_at: float | None = None
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now >= deadline:
                return events, True
            if exited_at is None and proc.poll() is not None:
                exited_at = now  # a stray child may hold the pipe open: give the rest 0.2 s to arrive
            if exited_at is not None and now - exited_at > 0.2:
                return events, False
            if not sel.select(min(deadline - now, 0.05)):
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return events, False
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if not line.startswith(tag):
                    continue  # the program wrote to the pipe itself: not ours
                try:
                    ev = json.loads(line[len(tag):])
                except ValueError:
                    continue
                events.append(ev)
                if ev.get("ev") == "start":
                    deadline = time.monotonic() + timeout
                if ev.get("ev") == "done":
                    return events, False


def _kill(proc: subprocess.Popen, pidns: bool) -> None:
    """Stop the run and everything it started: EOF on the runner's stdin makes its first process
    kill the worker and exit, which (as PID-namespace init) takes the namespace down before
    ``unshare`` exits; then SIGKILL the process group for whatever is left (without a namespace,
    repeatedly for up to a second: SIGKILL is asynchronous and a fork bomb's members die in turn)."""
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


def _force_remove(func, path, exc_info) -> None:  # type: ignore[no-untyped-def]
    """rmtree helper: the program may have made its files or directories read-only."""
    try:
        os.chmod(os.path.dirname(path), 0o700)
        os.chmod(path, 0o700)
        func(path)
    except OSError:
        pass


def _report(suite: TestSuite, events: list[dict], timed_out: bool, returncode: int | None, stderr_tail: str,
            seconds: float, timeout: float, layers: tuple[str, ...], limits: dict) -> TestReport:
    start = next((e for e in events if e.get("ev") == "start"), None)
    enforced = tuple(layers) + tuple(start.get("enforced", ()) if start else ())
    load = next((e for e in events if e.get("ev") == "load"), None)
    done = any(e.get("ev") == "done" for e in events)
    got = {e["i"]: e for e in events if e.get("ev") == "case" and isinstance(e.get("i"), int)}
    n = len(suite.cases)
    if load is not None and load.get("error"):
        kind = load.get("kind")
        status: Status = "memory" if kind == "memory" else "error"
        reason = f"the program failed while loading: {load['error']}"
        if kind == "memory":
            reason += f" (address-space limit {limits['memory_bytes'] >> 20} MB)"
        return _failed_report(suite, status, reason, seconds, enforced)
    missing = n - len(got)
    if timed_out:
        status, reason = "timeout", (f"wall-clock limit of {timeout:g} s exceeded after {len(got)} of {n} "
                                     "test cases; the process group was killed")
    elif not done:
        ex = next((e for e in events if e.get("ev") == "exit"), {})
        sig, code = ex.get("signal"), ex.get("code")
        cpu_out = float(ex.get("cpu") or 0.0) >= limits["cpu_seconds"] - 0.05
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_out):
            status, reason = "timeout", f"CPU time limit of {limits['cpu_seconds']} s exceeded ({_signal_name(sig)})"
        elif sig:
            status, reason = "crashed", f"killed by {_signal_name(sig)} after {len(got)} of {n} test cases"
        elif code is not None:
            status, reason = "crashed", (f"the program exited with status {code} before reporting "
                                         f"{missing} of {n} test cases")
        else:
            status, reason = "crashed", f"the sandbox process ended (status {returncode}) without a report"
        if stderr_tail:
            reason += f"; stderr: {stderr_tail[-300:]}"
    else:
        kinds = {e.get("kind") for e in got.values()}
        status = "memory" if "memory" in kinds else "timeout" if "timeout" in kinds else "ok"
        reason = {"ok": f"ran {n} test cases",
                  "memory": f"a test case hit the address-space limit ({limits['memory_bytes'] >> 20} MB)",
                  "timeout": "a test case hit case_timeout"}[status]
    not_run = {"timeout": "not run: time limit", "crashed": "not run: the process died"}.get(status, "not run")
    cases = []
    for i, c in enumerate(suite.cases):
        e = got.get(i)
        if e is None:
            cases.append(CaseResult(i, c.source, False, not_run))
        else:
            cases.append(CaseResult(i, c.source, bool(e.get("ok")), e.get("error"), float(e.get("t", 0.0))))
    passed = sum(c.passed for c in cases)
    first = next((c for c in cases if not c.passed), None)
    first_failure = None if first is None else f"{first.source.strip().splitlines()[0][:200]} -> {first.error}"
    return TestReport(passed=passed, failed=n - passed, total=n, first_failure=first_failure, seconds=seconds,
                      status=status, reason=reason, cases=tuple(cases), enforced=enforced)
