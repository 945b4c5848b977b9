"""The child side of ``trellis.codegen.sandbox``: run as ``python -I -c <this file's text>``.

Stdlib only and never imported by trellis itself. It reads one JSON job from stdin and forks a
worker that locks itself down *before* touching the untrusted program (resource limits, Landlock,
privilege drop, a socket shim), then runs the program, the test preamble and every test case,
writing one line per event to the result pipe: ``<nonce> <json>``; the first process reports how
the worker ended. The nonce only keeps stray writes to the pipe from counting;
the program runs in this same process, so a program that sets out to forge results can (see
sandbox.py on what this sandbox is for).
"""

import builtins
import ctypes
import json
import os
import resource
import signal
import sys
import time

_write, _dumps, _clock = os.write, json.dumps, time.monotonic  # bound before the program can patch them
_exec, _compile, _BaseException = exec, compile, BaseException


def _emit(fd, nonce, event):
    data = (nonce + " " + _dumps(event) + "\n").encode("utf-8", "replace")
    while data:
        data = data[_write(fd, data):]


def _count_processes(uid):
    """Processes whose real uid is ``uid`` (RLIMIT_NPROC counts them all, not just ours)."""
    n = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/status") as f:
                    for line in f:
                        if line.startswith("Uid:"):
                            n += int(line.split()[1]) == uid
                            break
            except OSError:
                pass
    return n


def _limits(job, enforced):
    lim = job["limits"]
    pairs = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_CPU, lim["cpu_seconds"]),
             (resource.RLIMIT_FSIZE, lim["file_bytes"]), (resource.RLIMIT_NOFILE, lim["open_files"])]
    if lim["memory_bytes"]:
        pairs.append((resource.RLIMIT_AS, lim["memory_bytes"]))
    if hasattr(resource, "RLIMIT_NPROC"):
        uid = job["drop_uid"] if job["drop_uid"] is not None else os.getuid()
        base = _count_processes(uid) if os.path.isdir("/proc") else 0
        pairs.append((resource.RLIMIT_NPROC, base + lim["processes"]))
    for what, value in pairs:
        soft, hard = resource.getrlimit(what)
        new_hard = value if hard == resource.RLIM_INFINITY else min(hard, value)
        if what == resource.RLIMIT_CPU and hard == resource.RLIM_INFINITY:
            new_hard = value + 1  # SIGXCPU at the soft limit, SIGKILL a second later if it is ignored
        try:
            resource.setrlimit(what, (min(value, new_hard), new_hard))
        except (ValueError, OSError):
            continue
    enforced.append("rlimit")


# Landlock (Linux >= 5.13): unprivileged, per-process access control. Syscall numbers are the same
# on every architecture. Access-right bits from include/uapi/linux/landlock.h.
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_NET_ALL = 3  # BIND_TCP | CONNECT_TCP (ABI >= 4)
_SCOPE_ALL = 3  # ABSTRACT_UNIX_SOCKET | SIGNAL (ABI >= 6)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]


def _landlock(job, enforced):
    """Reads only beneath the interpreter's directories, everything beneath the work dir, nothing
    else: no writes elsewhere, no execve, no TCP, no signals to processes outside the sandbox."""
    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    abi = syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # LANDLOCK_CREATE_RULESET_VERSION
    if abi < 1:
        return
    fs = _FS_ABI[max(k for k in _FS_ABI if k <= abi)]
    attr = _RulesetAttr(fs, _NET_ALL if abi >= 4 else 0, _SCOPE_ALL if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = syscall(444, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return
    read = _FS_READ_FILE | _FS_READ_DIR
    roots = [(job["workdir"], fs & ~_FS_EXECUTE)]
    seen = set()
    for path in [sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path, "/usr/lib", "/lib", "/lib64",
                 "/etc/ld.so.cache", "/usr/share/zoneinfo"]:
        if path and os.path.exists(path) and os.path.realpath(path) not in seen:
            seen.add(os.path.realpath(path))
            roots.append((path, read))
    for path, allowed in roots:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        if not os.path.isdir(path):
            allowed &= _FS_READ_FILE | _FS_WRITE_FILE  # only file rights apply to a file
        rule = _PathBeneath(allowed, fd)
        syscall(445, ctypes.c_int(ruleset), ctypes.c_int(1), ctypes.byref(rule), ctypes.c_uint32(0))
        os.close(fd)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: required to restrict oneself without CAP_SYS_ADMIN
    if syscall(446, ctypes.c_int(ruleset), ctypes.c_uint32(0)) == 0:
        enforced.append(f"landlock-abi{abi}")
    os.close(ruleset)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_root(uid, enforced):
    """Become ``uid`` (nobody) so the kernel's per-user limits (RLIMIT_NPROC) and file permissions
    apply, keeping only CAP_DAC_READ_SEARCH: the interpreter may live under a 0700 directory such
    as /root (Landlock still confines reads to the interpreter's directories)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(8, 1, 0, 0, 0)  # PR_SET_KEEPCAPS: keep the permitted set across setuid
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    caps = (_CapData * 2)()
    caps[0].effective = caps[0].permitted = 1 << 2  # CAP_DAC_READ_SEARCH
    libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), caps)  # _LINUX_CAPABILITY_VERSION_3
    enforced.append(f"uid{uid}")


def _no_network(enforced):
    """Refuse socket creation in Python: a fallback where no network namespace could be made (code
    calling libc through ctypes gets past it; the namespace and Landlock do not let it)."""
    import socket

    def refuse(*args, **kwargs):
        raise PermissionError("network access is disabled in the trellis sandbox")

    class NoSocket(socket.socket):
        def __init__(self, *args, **kwargs):
            refuse()

    socket.socket = NoSocket
    socket.create_connection = refuse
    socket.socketpair = refuse
    import _socket
    _socket.socket = NoSocket
    enforced.append("socket-shim")


class _CaseTimeout(BaseException):
    """Raised by SIGALRM when one case overruns ``case_timeout`` (BaseException: harder to swallow)."""


def _describe(exc, source):
    name = type(exc).__name__
    msg = str(exc)
    if isinstance(exc, AssertionError) and not msg:
        msg = source.strip().splitlines()[0] if source.strip() else ""
    elif isinstance(exc, SystemExit):
        msg = f"the program called exit({exc.code!r})"
    text = f"{name}: {msg}" if msg else name
    return text[:1000]


def _kind(exc):
    if isinstance(exc, MemoryError):
        return "memory"
    if isinstance(exc, _CaseTimeout):
        return "timeout"
    return "error"


def _worker(job):
    """Lock down, then run the program and the test cases (in the forked child of ``main``)."""
    fd, nonce = job["fd"], job["nonce"]
    enforced = []
    _limits(job, enforced)
    if job["landlock"] and sys.platform.startswith("linux"):
        try:
            _landlock(job, enforced)
        except (OSError, AttributeError):
            pass
    if job["drop_uid"] is not None:
        _drop_root(job["drop_uid"], enforced)
    _no_network(enforced)
    _emit(fd, nonce, {"ev": "start", "enforced": enforced})

    def on_alarm(signum, frame):
        raise _CaseTimeout(f"the test case ran longer than {job['case_timeout']} s")

    if job["case_timeout"]:
        signal.signal(signal.SIGALRM, on_alarm)
    g = {"__name__": "__sandbox__", "__builtins__": builtins}
    try:
        _exec(_compile(job["program"], "<program>", "exec"), g)
        if job["entry_point"]:
            if job["entry_point"] not in g:
                raise NameError(f"the program does not define the entry point {job['entry_point']!r}")
            g["candidate"] = g[job["entry_point"]]
        if job["preamble"]:
            _exec(_compile(job["preamble"], "<tests>", "exec"), g)
    except _BaseException as exc:  # noqa: B902 - SystemExit, KeyboardInterrupt: the program's doing
        _emit(fd, nonce, {"ev": "load", "error": _describe(exc, ""), "kind": _kind(exc)})
        os._exit(0)
    _emit(fd, nonce, {"ev": "load", "error": None})
    for i, case in enumerate(job["cases"]):
        ns = dict(g)
        t = _clock()
        error = kind = None
        try:
            try:
                if job["case_timeout"]:
                    signal.setitimer(signal.ITIMER_REAL, job["case_timeout"])
                if case["setup"]:
                    _exec(_compile(case["setup"], "<tests>", "exec"), ns)
                _exec(_compile(case["source"], "<tests>", "exec"), ns)
            finally:  # an alarm landing here is caught below like one inside the case
                if job["case_timeout"]:
                    signal.setitimer(signal.ITIMER_REAL, 0)
        except _BaseException as exc:  # noqa: B902
            error, kind = _describe(exc, case["source"]), _kind(exc)
        _emit(fd, nonce, {"ev": "case", "i": i, "ok": error is None, "error": error, "kind": kind,
                          "t": _clock() - t})
    _emit(fd, nonce, {"ev": "done"})
    os._exit(0)  # skip atexit handlers and finalizers the program may have registered


def _supervise(job, pid, ctl):
    """Wait for the worker or for EOF on the control pipe (the parent's "stop": kill the worker)."""
    import select

    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None  # Linux < 5.3 or not Linux: poll
    while True:
        ready, _, _ = select.select([ctl] + ([pidfd] if pidfd is not None else []), [], [],
                                    None if pidfd is not None else 0.05)
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            _emit(job["fd"], job["nonce"], {
                "ev": "exit", "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                "cpu": usage.ru_utime + usage.ru_stime})
            return
        if ctl in ready and not os.read(ctl, 64):
            os.kill(pid, signal.SIGKILL)
            return


def main():
    """Supervise one worker: it runs the untrusted code; this process stays unlimited, reports how
    the worker ended (signal, exit status, CPU seconds), which a killed process cannot do itself,
    and kills it when the parent closes our stdin. Under ``unshare --pid`` this process is the
    namespace's init: when it exits the kernel kills every process the program left behind, and
    ``unshare`` returns only after they are gone; init also ignores signals from inside."""
    size = int(sys.stdin.buffer.readline())
    job = json.loads(sys.stdin.buffer.read(size).decode("utf-8"))
    ctl = os.dup(0)  # stays open: EOF on it is the parent's stop signal
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the program's input() sees EOF
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ctl)
            _worker(job)
        except _BaseException:  # noqa: B902 - a harness bug: show it on stderr
            import traceback

            traceback.print_exc()
        os._exit(70)
    _supervise(job, pid, ctl)
    if not job["pidns"]:  # no namespace to tear down: take the program's process group with us
        os.killpg(0, signal.SIGKILL)
    os._exit(0)


if __name__ == "__main__":  # python -c <this text>; never run on import
    main()
