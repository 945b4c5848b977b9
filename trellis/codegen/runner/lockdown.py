# Names used but not defined here come from the earlier parts of the one script (runner/__init__.py).
"""Runner part: the layers a process of the run puts on itself: rlimits (``_limits``), Landlock
(``_landlock``), the drop to the run's own uid and of capabilities (``_drop_root``, ``_set_caps``) and
the socket shim (``_no_network``). The seccomp filter is ``seccomp.py``, first in the script; the
worker and the judge each pick their layers (``_lock_down_worker``, ``_lock_down_judge``).
"""

# ------------------------------------------------------------------------------------------- lockdown
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


def _limits(lim, enforced, uid=None, memory_bytes=None, processes=None):
    pairs = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_CPU, lim["cpu_seconds"]),
             (resource.RLIMIT_FSIZE, lim["file_bytes"]), (resource.RLIMIT_NOFILE, lim["open_files"])]
    if hasattr(resource, "RLIMIT_SIGPENDING"):  # each POSIX timer holds kernel memory (96k timers: 47 MB)
        pairs.append((resource.RLIMIT_SIGPENDING, 1024))
    memory_bytes = lim["memory_bytes"] if memory_bytes is None else memory_bytes
    if memory_bytes:
        pairs.append((resource.RLIMIT_AS, memory_bytes))
    if uid is not None and hasattr(resource, "RLIMIT_NPROC"):
        # A per-run uid (run as root) owns no process yet: the limit is exactly the run's count.
        base = 0 if lim.get("fresh_uid") else (_count_processes(uid) if os.path.isdir("/proc") else 0)
        pairs.append((resource.RLIMIT_NPROC, base + (lim["processes"] if processes is None else processes)))
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


def _landlock(workdir, enforced):
    """Reads only beneath the interpreter's directories, everything beneath ``workdir`` (None: no
    writes anywhere), nothing else: no execve, no TCP, no signals to processes outside."""
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
    roots = [(workdir, fs & ~_FS_EXECUTE)] if workdir else []
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


def _set_caps(libc, keep):
    caps = (_CapData * 2)()
    caps[0].effective = caps[0].permitted = keep
    return libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), caps)  # _LINUX_CAPABILITY_VERSION_3


def _drop_root(uid, keep_read_search, enforced):
    """Become ``uid`` (a uid of this run alone) so the kernel's per-user limits (RLIMIT_NPROC) and
    file permissions apply. ``keep_read_search`` (only where Landlock confines reads): keep
    CAP_DAC_READ_SEARCH, since the interpreter may live under a 0700 directory such as /root;
    without Landlock no capability survives (the parent refuses to start when the interpreter
    would then be unreadable)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(8, 1 if keep_read_search else 0, 0, 0, 0)  # PR_SET_KEEPCAPS across setuid
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if keep_read_search:
        _set_caps(libc, 1 << 2)  # CAP_DAC_READ_SEARCH
    enforced.append("uid-per-run" if uid >= 1 << 24 else f"uid{uid}")
    if not keep_read_search:
        enforced.append("no-capabilities")


def _no_network(enforced):
    """Refuse socket creation in Python (seccomp and the network namespace stop ctypes too)."""
    import socket

    def refuse(*args, **kwargs):
        raise PermissionError("network access is disabled in the trellis sandbox")

    class NoSocket(socket.socket):
        def __init__(self, *args, **kwargs):
            refuse()

    socket.socket = NoSocket
    socket.create_connection = refuse
    import _socket
    _socket.socket = NoSocket
    enforced.append("socket-shim")
