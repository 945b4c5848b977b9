"""The sandbox's results: the report types ``run_tests`` returns (``TestReport``, ``CaseResult``,
``Status``), ``SandboxError``, and the stage that turns the runner's checked event stream into a
report (``build_report``; ``failed_report`` for a run that produced no events worth reading).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Literal

from trellis.codegen.suite import TestSuite

__all__ = ["CaseResult", "SandboxError", "Status", "TestReport", "build_report", "failed_report"]

Status = Literal["ok", "syntax_error", "error", "timeout", "memory", "crashed"]


class SandboxError(RuntimeError):
    """The sandbox itself could not run (unsupported platform, no interpreter), not the program."""


@dataclass(frozen=True)
class CaseResult:
    """One test case: its ``source``, whether it passed and, if not, why (``error``).
    ``program_decided``: the case compared two of the program's objects (``==``, ``<``), asked
    one whether it holds a value (``in``) or did arithmetic on one (``+``, ``-``, ``abs``), and the
    program's own operator answered (honest programs pass such cases; a test-guided search may
    choose to distrust them, as the program could answer anything: a ``__sub__`` returning 0 passes
    ``abs(f(x) - expected) < tol``)."""

    index: int
    source: str
    passed: bool
    error: str | None = None
    seconds: float = 0.0
    program_decided: bool = False


@dataclass(frozen=True)
class TestReport:
    """The outcome of one run. ``status``: "ok" (every case ran; each passed or failed on its own),
    "syntax_error" (never started), "error" (the program raised while loading: no case passes),
    "timeout" (wall clock, CPU time or ``case_timeout``), "memory" (the address-space limit),
    "crashed" (killed by a signal, or exited before reporting every case). ``reason`` says what
    happened in words; ``cases`` holds the per-case results in test order. ``warnings``: what
    compiling the program warned (``line 2: SyntaxWarning: "is" with 'int' literal...``), here
    rather than on the caller's stderr."""

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
    warnings: tuple[str, ...] = ()

    @property
    def fraction(self) -> float:
        """Passed / total (0.0 for an empty suite)."""
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total

def failed_report(suite: TestSuite, status: Status, reason: str, seconds: float,
                   enforced: tuple[str, ...] = ()) -> TestReport:
    cases = tuple(CaseResult(i, c.source, False, reason) for i, c in enumerate(suite.cases))
    return TestReport(passed=0, failed=len(cases), total=len(cases), first_failure=reason, seconds=seconds,
                      status=status, reason=reason, cases=cases, enforced=enforced)


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


# Layers under which the kernel's memory cgroup (v1 or v2) held the program's memory
MEMORY_CGROUPS = ("cgroup1-memory", "cgroup-memory")


def _address_space(limits: dict, enforced: tuple[str, ...]) -> int:
    """Each process's address-space limit: the run's memory, or its share where no memory cgroup
    held the program (``rlimit-share``)."""
    if any(x.startswith("rlimit-share") for x in enforced):
        return int(limits.get("share_bytes", limits["memory_bytes"]))
    return int(limits["memory_bytes"])


def build_report(suite: TestSuite, events: list[dict], ended: str | None, returncode: int | None, stderr_tail: str,
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
            reason += f" (address-space limit {_address_space(limits, enforced) >> 20} MB)"
        return failed_report(suite, status, reason, seconds, enforced)
    over = (exit_ or {}).get("over")
    missing = n - len(got)
    if ended == "timeout":
        status, reason = "timeout", (f"wall-clock limit of {timeout:g} s exceeded after {len(got)} of {n} "
                                     "test cases; the process group was killed")
    elif ended is not None:  # the result stream broke its rules: none of it counts
        return failed_report(suite, "crashed", f"the run was stopped: {ended}", seconds, enforced)
    elif over == "memory":
        held = "the kernel's memory cgroup" if set(MEMORY_CGROUPS) & set(enforced) \
            else "the supervisor's accounting"
        status, reason = "memory", (f"the program's processes together used more than the run's memory limit of "
                                    f"{limits['memory_bytes'] >> 20} MB ({held}); all were killed")
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
                  "memory": f"a test case hit the address-space limit ({_address_space(limits, enforced) >> 20} MB)",
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
                                    float(t) if isinstance(t, (int, float)) else 0.0, e.get("program") is True))
    passed = sum(c.passed for c in cases)
    first_bad = next((c for c in cases if not c.passed), None)
    first_failure = (None if first_bad is None
                     else f"{first_bad.source.strip().splitlines()[0][:200]} -> {first_bad.error}")
    return TestReport(passed=passed, failed=n - passed, total=n, first_failure=first_failure, seconds=seconds,
                      status=status, reason=reason, cases=tuple(cases), enforced=enforced)
