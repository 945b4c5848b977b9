"""The sandbox's host side of confinement, set up before the child starts and undone after it:
which namespaces ``unshare`` may create, the kernel's Landlock ABI, the run's cgroup v2 (create,
kill, remove), the per-run uid when running as root, the interpreter's package directories, and the
filesystem cleanup of the work dir (``remove_tree``) and of what a per-run uid left behind (``sweep``).
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["cgroup_base", "cgroup_create", "cgroup_remove", "landlock_abi", "namespaces", "remove_tree", "run_uid",
           "site_dirs", "sweep", "world_reachable"]

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


def cgroup_create(memory_mb: int, max_processes: int) -> tuple[str | None, tuple[str, ...]]:
    """A cgroup v2 child for one run: the supervisor joins it before forking, so every process of
    the run is in it and ``cgroup.kill`` ends them all at once. Where the parent enables the
    memory and pids controllers for its children, ``memory.max`` / ``pids.max`` hold the run-wide
    limits in the kernel too (the supervisor's accounting stays as the portable fallback)."""
    base = cgroup_base()
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


def cgroup_remove(path: str) -> None:
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
