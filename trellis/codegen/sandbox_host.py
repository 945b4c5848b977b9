"""The sandbox's host side of confinement, set up before the child starts and undone after it:
which namespaces ``unshare`` may create, the kernel's Landlock ABI, the run's cgroup v2 (create,
kill, remove), the per-run uid when running as root, the interpreter's package directories, and the
filesystem cleanup of the work dir (``remove_tree``) and of what a per-run uid left behind (``sweep``).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from trellis.codegen.sandbox_report import MEMORY_CGROUPS

__all__ = ["RunCgroups", "cgroup_base", "cgroup_create", "cgroup_remove", "cgroup_v1_bases", "finish_later", "landlock_abi",
           "namespaces", "pending_cleanup", "remove_tree", "run_uid", "site_dirs", "sweep", "world_reachable"]

_NS_FULL = ("--net", "--pid", "--ipc", "--mount", "--propagation", "private", "--mount-proc")


@functools.cache
def namespaces() -> tuple[tuple[str, ...], tuple[str, ...]]:
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
def landlock_abi() -> int:
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
def cgroup_base() -> str | None:
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


_V1_CONTROLLERS = ("memory", "pids", "cpu")


@functools.cache
def cgroup_v1_bases() -> dict[str, str]:
    """Controller -> this process's own directory in the cgroup v1 hierarchy of that controller,
    for ``memory``, ``pids`` and ``cpu`` where such a hierarchy is mounted and this process may
    create children there. A host that mounts the controllers as v1 (a hybrid layout: cgroup v2
    then has none of them) still gets the kernel's limits this way."""
    if not sys.platform.startswith("linux"):
        return {}
    try:
        mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
        own_lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return {}
    where: dict[str, str] = {}
    for fields in mounts:
        if len(fields) >= 4 and fields[2] == "cgroup":
            for opt in fields[3].split(","):
                if opt in _V1_CONTROLLERS:
                    where.setdefault(opt, fields[1])
    own: dict[str, str] = {}
    for line in own_lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for c in parts[1].split(","):
                own[c] = parts[2]
    out: dict[str, str] = {}
    for c, mount in where.items():
        if c not in own:
            continue
        base = os.path.join(mount, own[c].strip().lstrip("/"))
        probe = os.path.join(base, f"trellis-probe-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            os.mkdir(probe)
            os.rmdir(probe)
        except OSError:
            continue
        out[c] = base
    return out


@dataclass(frozen=True)
class RunCgroups:
    """The cgroups of one run.

    ``run``: a cgroup v2 directory the supervisor joins before it forks, so every process of the
    run is in it and ``cgroup.kill`` ends them all at once (with ``memory.max``/``pids.max`` where
    the v2 controllers are enabled). ``worker``: cgroup v1 directories by controller, which the
    worker joins before it runs the program, so the program's whole process tree (not the
    supervisor, not the judge) is held by the kernel: ``memory`` (``memory.limit_in_bytes``, swap
    included where the kernel counts it, the OOM killer off: a run at its limit waits for the
    supervisor, which kills it whole and reports "memory"), ``pids`` (``pids.max``) and ``cpu``
    (one scheduling group: new sessions buy no CPU share). ``layers``: what each one holds, named
    as reports list them."""

    run: str | None = None
    worker: dict[str, str] = field(default_factory=dict)
    layers: tuple[str, ...] = ()

    def dirs(self) -> list[str]:
        return [*self.worker.values(), *([self.run] if self.run else [])]

    @property
    def memory_held(self) -> bool:
        """Whether the kernel holds the program's memory (v1 or v2 memory controller)."""
        return any(x in self.layers for x in MEMORY_CGROUPS)


def _v1_child(base: str, controller: str, memory_mb: int, max_processes: int) -> str | None:
    path = os.path.join(base, f"trellis-sandbox-{os.getpid()}-{secrets.token_hex(6)}")
    try:
        os.mkdir(path)
    except OSError:
        return None
    settings: list[tuple[str, str, bool]] = []  # (file, value, required)
    if controller == "memory":
        if not memory_mb:
            return _drop(path)
        limit = str(int(memory_mb) << 20)
        # memsw (memory + swap) after the plain limit (it may not be below it); absent without swap
        # accounting. OOM killer off: a process at the limit waits (its allocation blocks) until the
        # supervisor, which sees ``under_oom``, kills the whole run.
        settings = [("memory.limit_in_bytes", limit, True), ("memory.memsw.limit_in_bytes", limit, False),
                    ("memory.oom_control", "1", True)]
    elif controller == "pids":
        settings = [("pids.max", str(int(max_processes) + 1), True)]  # the worker and its processes
    for name, value, required in settings:
        try:
            Path(path, name).write_text(value)
        except OSError:
            if required:
                return _drop(path)
    return path


def _drop(path: str) -> None:
    with contextlib.suppress(OSError):
        os.rmdir(path)
    return None


def cgroup_create(memory_mb: int, max_processes: int) -> RunCgroups:
    """The run's cgroups (``RunCgroups``): a cgroup v2 child of this process's cgroup where it may
    create one, and cgroup v1 children for the memory, pids and cpu controllers where those are
    mounted as v1 and writable."""
    names: list[str] = []
    run = None
    base = cgroup_base()
    if base is not None:
        path = os.path.join(base, f"trellis-sandbox-{os.getpid()}-{secrets.token_hex(6)}")
        try:
            os.mkdir(path)
            run = path
            names.append("cgroup")  # reported by the supervisor once it has joined
        except OSError:
            pass
    if run is not None:
        for name, value in (("memory.max", int(memory_mb) << 20 if memory_mb else None),
                            ("memory.swap.max", 0 if memory_mb else None), ("pids.max", int(max_processes) + 2)):
            if value is None or not os.path.exists(os.path.join(run, name)):
                continue
            try:
                Path(run, name).write_text(str(value))
                names.append(f"cgroup-{name.split('.')[0]}")
            except OSError:
                pass
    worker: dict[str, str] = {}
    for controller, v1_base in cgroup_v1_bases().items():
        if f"cgroup-{controller}" in names:
            continue  # held in v2 already
        path = _v1_child(v1_base, controller, memory_mb, max_processes)
        if path is not None:
            worker[controller] = path
            names.append(f"cgroup1-{controller}")
    return RunCgroups(run, worker, tuple(dict.fromkeys(names)))


def _kill_members(path: str) -> None:
    """SIGKILL every process listed in the v1 cgroup ``path``, each through a pidfd after checking
    that it is still in that cgroup (a pid freed in between could name another process)."""
    try:
        pids = [int(x) for x in Path(path, "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return
    tail = "/" + os.path.basename(path)  # the run's random name: in no other cgroup's path
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except (OSError, AttributeError):
            continue
        try:
            if any(line.endswith(tail) for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(fd)


def _remove_once(path: str) -> bool:
    """Kill what is left in one cgroup directory and remove it: True when it is gone."""
    try:
        kill = os.path.join(path, "cgroup.kill")
        if os.path.exists(kill):
            Path(kill).write_text("1")
        elif os.path.exists(os.path.join(path, "cgroup.procs")):
            _kill_members(path)
        os.rmdir(path)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


def cgroup_remove(cgroups: RunCgroups, wait: float = 0.1) -> None:
    """Kill whatever is left in the run's cgroups and remove them. What is not gone within ``wait``
    seconds (processes still exiting: 16 processes of 150 MB and 30,000 mappings each take longer
    to tear down) is finished by the background ``finish_later`` thread, so the call returns on
    time and the cleanup still completes."""
    left = [d for d in cgroups.dirs() if not _remove_once(d)]
    deadline = time.monotonic() + wait
    while left and time.monotonic() < deadline:
        time.sleep(0.01)
        left = [d for d in left if not _remove_once(d)]
    for d in left:
        finish_later(lambda d=d: _remove_once(d))


# Cleanup that outlives a run (``finish_later``): one daemon thread retries each step until it
# succeeds; at interpreter exit it gets up to _EXIT_WAIT seconds to finish.
_later: list[Callable[[], bool]] = []
_later_lock = threading.Lock()
_later_thread: list[threading.Thread] = []
_EXIT_WAIT = 30.0


def finish_later(step: Callable[[], bool]) -> None:
    """Retry ``step`` (True when done) every 20 ms in a background thread until it succeeds."""
    with _later_lock:
        _later.append(step)
        if not _later_thread or not _later_thread[0].is_alive():
            t = threading.Thread(target=_finish_loop, name="trellis-sandbox-cleanup", daemon=True)
            _later_thread[:] = [t]
            t.start()


def _finish_loop() -> None:
    while True:
        with _later_lock:
            steps = list(_later)
        if not steps:
            return
        done = []
        for step in steps:
            try:
                if step():
                    done.append(step)
            except Exception:  # noqa: BLE001 - a cleanup step that cannot run is dropped, not retried forever
                done.append(step)
        with _later_lock:
            for step in done:
                _later.remove(step)
            if not _later:
                return
        time.sleep(0.02)


def pending_cleanup() -> int:
    """Cleanup steps still running in the background (tests wait for 0)."""
    with _later_lock:
        return len(_later)


@atexit.register
def _finish_at_exit() -> None:
    deadline = time.monotonic() + _EXIT_WAIT
    while pending_cleanup() and time.monotonic() < deadline:
        time.sleep(0.02)


def run_uid() -> int | None:
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


def site_dirs() -> list[str]:
    """This interpreter's package directories: the runner starts with ``-S`` (no ``site``: its .pth
    processing cost ~25 ms a run) and adds them itself."""
    import site

    return [p for p in site.getsitepackages() if os.path.isdir(p)]


def world_reachable(path: str) -> bool:
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


_FLATTEN_DEPTH = 16  # deeper directories are moved up to the top before descending further


def remove_tree(path: str) -> None:
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


def sweep(uid: int) -> None:
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
                remove_tree(e.path)
            else:
                try:
                    os.unlink(e.path)
                except OSError:
                    pass
