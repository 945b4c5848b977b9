"""The sandbox's child process, seen from the parent: the runner it executes (``seccomp.py`` + the
parts of ``runner/``, one script compiled once and sent marshalled on stdin behind the ``-c`` stub
``STUB``), the result stream it writes (``collect`` reads it against one absolute deadline and
checks every event's shape and size), and stopping it with everything it started (``kill``).
"""

from __future__ import annotations

import functools
import json
import os
import selectors
import signal
import subprocess
import time
from pathlib import Path

from trellis.codegen.runner import PARTS

__all__ = ["KILL_SECONDS", "STARTUP_SECONDS", "STUB", "collect", "kill", "runner_code", "runner_source"]

STARTUP_SECONDS = 15.0  # interpreter start-up is not charged to ``timeout`` (0.3 s here, under load)
KILL_SECONDS = 0.6  # stopping a run, at most: run_tests returns within timeout + 1 s (issue 55)
_MAX_EVENT = 64 << 10  # one result event, bytes (a case's error text is cut at 1,000 characters)
_MAX_STREAM = 16 << 20  # all result events of a run, bytes


# What ``python -c`` runs for this interpreter: read the runner's code object (compiled once here;
# compiling 1,600 lines cost 5-15 ms a run) from stdin and run it. The marker text names the
# process in ``ps`` and lets tests find leftovers.
STUB = (b'"child side of ``trellis.codegen.sandbox``: the runner, compiled, from stdin"\n'
         b"import marshal, os\n"
         b"def _r(n):\n    b = b''\n    while len(b) < n:\n        c = os.read(0, n - len(b))\n"
         b"        if not c:\n            raise SystemExit(70)\n        b += c\n    return b\n"
         b"h = b''\nwhile not h.endswith(b'\\n'):\n    c = os.read(0, 1)\n    if not c:\n        raise SystemExit(70)\n"
         b"    h += c\nexec(marshal.loads(_r(int(h))), {'__name__': '__main__'})\n").decode()


@functools.cache
def runner_code() -> bytes:
    """The runner's source compiled and marshalled (valid for this interpreter only)."""
    import marshal

    return marshal.dumps(compile(runner_source(), "<trellis sandbox runner>", "exec", dont_inherit=True))


@functools.cache
def runner_source() -> str:
    """The one script the child runs: the seccomp layer first (it defines ``install_seccomp``), then
    the runner's parts in ``PARTS`` order, joined with a newline; all stdlib only."""
    here = Path(__file__)
    texts = [here.with_name("seccomp.py")] + [here.with_name("runner") / part for part in PARTS]
    return "\n".join(p.read_text(encoding="utf-8") for p in texts)


def collect(proc: subprocess.Popen, fd: int, timeout: float, n_cases: int) -> tuple[list[dict], str | None]:
    """Events from the result pipe until "done", EOF, or the deadline. Returns (events, why it
    ended early: None, "timeout", or a protocol violation). One absolute deadline: start-up time
    plus ``timeout`` counted from the supervisor's first event, set once."""
    events: list[dict] = []
    buf = b""
    t0 = time.monotonic()
    deadline = t0 + STARTUP_SECONDS + timeout  # never later than this, whatever arrives
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
    """The shape of each event the runner may send (``runner/judge.py``, ``runner/supervisor.py``);
    anything else breaks the run."""
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
                and _is(ev.get("kind"), *opt_str) and _is(ev.get("t"), *_NUM) and _is(ev.get("program", False), bool))
    if kind == "lost":
        return _is(ev.get("at"), int) and _is(ev.get("why"), str)
    if kind == "judge":
        return _is(ev.get("signal"), int)
    if kind == "exit":
        return (_is(ev.get("signal"), int, type(None)) and _is(ev.get("code"), int, type(None))
                and _is(ev.get("cpu"), *_NUM) and _is(ev.get("over"), *opt_str))
    return kind == "done"


def kill(proc: subprocess.Popen, pidns: bool, budget: float = KILL_SECONDS) -> bool:
    """Stop the run and everything it started: EOF on the runner's stdin makes its supervisor kill
    the program's process tree and exit, which (as PID-namespace init) takes the namespace down
    before ``unshare`` exits; then SIGKILL the process group for whatever is left (without a
    namespace, repeatedly: SIGKILL is asynchronous and a fork bomb's members die in turn).

    Returns within ``budget`` seconds: True when the child has exited, False when it is still
    going (dying processes that hold much memory take a while to tear down), so that ``run_tests``
    returns on time; the caller then finishes in the background (``sandbox_host.finish_later``)."""
    until = time.monotonic() + budget
    try:
        proc.stdin.close()  # type: ignore[union-attr]
    except OSError:
        pass
    try:
        proc.wait(timeout=max(0.0, until - time.monotonic()) / 2)
        return True
    except subprocess.TimeoutExpired:
        pass
    while True:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            break
        if pidns or proc.poll() is not None or time.monotonic() >= until:
            break
        time.sleep(0.01)
    try:
        proc.wait(timeout=max(0.0, until - time.monotonic()))
        return True
    except subprocess.TimeoutExpired:
        return False
