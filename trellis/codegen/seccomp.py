"""A seccomp-BPF layer for the code sandbox: deny the system calls an untrusted program could use
to reach outside its sandbox, on Linux x86_64 and aarch64, with nothing but the standard library.

``trellis.codegen.sandbox`` runs model-written programs; its other layers are rlimits, network and
PID namespaces, Landlock and a drop to ``nobody``. Landlock restricts files (and, on new kernels,
TCP and signals) but not the kernel objects that live outside the file system, and the namespaces
can be missing (containers, old kernels) or be undone from inside by a program that makes its own.
This filter closes those gaps. It is a deny list (everything else stays allowed, so an ordinary
program, ``fork``, threads and ``subprocess`` keep working). By option, it denies:

- ``sockets``: ``socket()`` for any family but AF_INET/AF_INET6 (``"inet"``: AF_UNIX reaches host
  daemons (D-Bus, a container runtime) by path or abstract name, AF_NETLINK talks to the kernel,
  AF_PACKET sniffs; IP sockets reach nothing inside the sandbox's empty network namespace), or for
  every family (``"none"``); ``"all"`` leaves ``socket()`` alone. Unless ``"all"``, io_uring is
  denied too, since IORING_OP_SOCKET creates sockets without the ``socket()`` system call.
- ``ipc``: creating, attaching and controlling SysV shared memory, message queues and semaphores
  and POSIX message queues (shared by the whole host without an IPC namespace; inside one, memory
  no process maps, which the run's memory count would miss; POSIX shared memory is files under
  /dev/shm, Landlock's concern).
- ``keyring``: the kernel key-retention calls (keyrings are per user, not per namespace).
- ``trace``: reading or controlling other processes (ptrace, process_vm_*, pidfd_getfd, kcmp).
- ``namespaces``: making or entering namespaces and changing mounts or the root (``unshare``,
  ``setns``, ``clone`` with a CLONE_NEW* flag, ``clone3``, the mount calls, ``chroot``); a new user
  namespace gives back every capability inside it and re-exposes kernel attack surface.
- ``fallocate``: it reserves disk beyond RLIMIT_FSIZE (FALLOC_FL_KEEP_SIZE leaves the size alone).
- ``sessions`` (off by default): ``setsid``/``setpgid``, keeping every process in the run's process
  group so that one group kill reaches them all.
- ``hidden_memory``: ``memfd_create``, ``memfd_secret``, ``socketpair``, ``vmsplice``: memory that no
  process maps (memfd files, socket buffers, pages pinned in pipes) escapes the sandbox's run-wide
  memory count.
- ``host_files``: extended attributes (read or written), timestamps and inotify/fanotify watches:
  Landlock does not govern them, so a host file's attributes could be read or a host directory
  watched.

Denied calls fail with EPERM (the program sees a ``PermissionError``), except ``clone3`` (ENOSYS,
see below). A system call made through another ABI than the process's own (32-bit ``int 0x80``
on x86_64, x32 numbers) kills the process: see ``seccomp_program``.

The filter is permanent and inherited by every child, across ``execve`` as well. Its text is
prepended to the sandbox's ``python -I -c`` runner script, so this file imports only the standard
library, runs nothing at import, and names everything at top level ``_seccomp*``/``SECCOMP_*``
except ``install_seccomp`` and ``seccomp_program`` (the filter it installs, public for tests).
"""

import ctypes
import errno
import os
import platform
import struct

# Classic BPF opcodes (include/uapi/linux/filter.h): load a 32-bit word from seccomp_data, compare
# with a constant, return.
SECCOMP_BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
SECCOMP_BPF_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
SECCOMP_BPF_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
SECCOMP_BPF_RET = 0x06  # BPF_RET | BPF_K

# Filter return values (include/uapi/linux/seccomp.h).
SECCOMP_RET_KILL_PROCESS = 0x80000000  # kernels before 4.14 read it as RET_KILL (thread): still fatal
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]. Both supported
# architectures are little-endian, so the low 32 bits of args[i] are at 16 + 8*i, the high at +4.
SECCOMP_OFF_NR = 0
SECCOMP_OFF_ARCH = 4


def _seccomp_arg_lo(i):
    return 16 + 8 * i


def _seccomp_arg_hi(i):
    return 20 + 8 * i


SECCOMP_X32_BIT = 0x40000000  # __X32_SYSCALL_BIT: x32 syscalls are x86_64 numbers with this bit set
SECCOMP_AF_INET, SECCOMP_AF_INET6 = 2, 10
# Every CLONE_NEW* flag: NEWNS 0x20000, NEWCGROUP 0x2000000, NEWUTS 0x4000000, NEWIPC 0x8000000,
# NEWUSER 0x10000000, NEWPID 0x20000000, NEWNET 0x40000000, and NEWTIME 0x80. For clone() the low
# byte is the exit signal, where 0x80 is never a valid signal (<= 64), so matching it costs nothing;
# CLONE_NEWTIME itself only works through unshare/clone3, denied anyway.
SECCOMP_CLONE_NEW_MASK = 0x7E020080

# System call numbers, {name: (x86_64, aarch64)}, None where the architecture has no such call.
# x86_64 from arch/x86/entry/syscalls/syscall_64.tbl; aarch64 uses the generic table
# (include/uapi/asm-generic/unistd.h, now scripts/syscall.tbl); from 424 on (Linux 5.1) every
# architecture has the same number. Neither has socketcall() or ipc(): those multiplexers exist
# only for 32-bit ABIs, which the arch check below shuts out, so socket() and the IPC calls cannot
# be reached by another number.
SECCOMP_NUMBERS = {
    "socket": (41, 198), "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "shmget": (29, 194), "shmat": (30, 196), "shmctl": (31, 195), "semget": (64, 190), "semop": (65, 193),
    "semctl": (66, 191), "msgget": (68, 186), "msgsnd": (69, 189), "msgrcv": (70, 188), "msgctl": (71, 187),
    "semtimedop": (220, 192), "mq_open": (240, 180), "mq_unlink": (241, 181), "mq_timedsend": (242, 182),
    "mq_timedreceive": (243, 183),
    "add_key": (248, 217), "request_key": (249, 218), "keyctl": (250, 219),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271), "kcmp": (312, 272),
    "pidfd_getfd": (438, 438),
    "clone": (56, 220), "clone3": (435, 435), "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40),
    "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51), "open_tree": (428, 428),
    "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432),
    "fspick": (433, 433), "mount_setattr": (442, 442),
    "fallocate": (285, 47),
    "setpgid": (109, 154), "setsid": (112, 157),
    "memfd_create": (319, 279), "memfd_secret": (447, 447), "socketpair": (53, 199), "vmsplice": (278, 75),
    "getxattr": (191, 8), "lgetxattr": (192, 9), "fgetxattr": (193, 10), "listxattr": (194, 11),
    "llistxattr": (195, 12), "flistxattr": (196, 13), "getxattrat": (464, 464), "listxattrat": (465, 465),
    "setxattr": (188, 5), "lsetxattr": (189, 6), "fsetxattr": (190, 7), "removexattr": (197, 14),
    "lremovexattr": (198, 15), "fremovexattr": (199, 16), "setxattrat": (463, 463), "removexattrat": (466, 466),
    "utime": (132, None), "utimes": (235, None), "futimesat": (261, None), "utimensat": (280, 88),
    "inotify_init": (253, None), "inotify_init1": (294, 26), "inotify_add_watch": (254, 27),
    "fanotify_init": (300, 262),
}


def _seccomp_numbers(column):
    """One architecture's {name: number}: ``column`` 0 of ``SECCOMP_NUMBERS`` for x86_64, 1 for aarch64."""
    return {name: nrs[column] for name, nrs in SECCOMP_NUMBERS.items() if nrs[column] is not None}


# Per architecture: (AUDIT_ARCH_* value, {name: number}).
SECCOMP_ARCHES = {
    "x86_64": (0xC000003E, _seccomp_numbers(0)),  # EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
    "aarch64": (0xC00000B7, _seccomp_numbers(1)),  # EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
}

SECCOMP_GROUPS = {
    # socketpair() is deliberately absent: an anonymous connected pair reaches nothing.
    "io_uring": ("io_uring_setup", "io_uring_enter", "io_uring_register"),
    "ipc": ("shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semctl",
            "semtimedop", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive"),
    "keyring": ("add_key", "request_key", "keyctl"),
    "trace": ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp"),
    # The new mount API (open_tree .. mount_setattr) is listed with mount(): denying one without the
    # other would leave the same operation a different name.
    "namespaces": ("unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount",
                   "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr"),
    "fallocate": ("fallocate",),
    "sessions": ("setsid", "setpgid"),
    # Memory no process maps, so no per-process or proportional count sees it: memfd files written
    # and never mapped, and socket buffers (an AF_UNIX pair holds SO_SNDBUF per end, and passes
    # descriptors), and pages spliced into a pipe after unmapping them (vmsplice: a 4 KB slot pins a
    # whole 2 MB huge page). Found by red-team passes: 3.5 GB of memfd, 1.1 GB through vmsplice,
    # under memory_mb=128.
    "hidden_memory": ("memfd_create", "memfd_secret", "socketpair", "vmsplice"),
    # What Landlock does not govern on host files: extended attributes (read: they can hold
    # secrets; written: on world-writable files), timestamps, and watching host directories for new
    # names. (utime/utimes/futimesat/inotify_init exist on x86_64 only.) stat() and readlink()
    # cannot be filtered by path: the program can learn which host files exist, not their content.
    "host_files": ("getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr", "getxattrat",
                   "listxattrat", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
                   "setxattrat", "removexattrat", "utime", "utimes", "futimesat", "utimensat", "inotify_init",
                   "inotify_init1", "inotify_add_watch", "fanotify_init"),
}


def _seccomp_machine():
    """The architecture of *this process's* system calls, or None: a 32-bit Python on a 64-bit
    kernel (i386 or x32 on x86_64, arm32 on aarch64) reports the kernel's machine but makes 32-bit
    calls, which this filter's numbers do not describe."""
    if struct.calcsize("P") != 8:
        return None
    machine = platform.machine().lower()
    return {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(machine)


def seccomp_program(arch, sockets, ipc, keyring, trace, namespaces, fallocate, sessions, hidden_memory=True,
                     host_files=True):
    """The filter as a list of (code, jt, jf, k); jt/jf may name a label, resolved at the end."""
    audit_arch, nrs = SECCOMP_ARCHES[arch]
    code = []

    def ins(op, k, jt=0, jf=0):
        code.append((op, jt, jf, k))

    def label(name):
        code.append(name)

    # Another ABI's call is killed rather than refused. Its numbers mean different calls (i386 has
    # socketcall, ipc, and socket as 359), so it would walk past every rule below; no program the
    # sandbox runs makes such calls on purpose, and a 32-bit binary cannot run under this filter at
    # all (an EPERM from every call, exit included, would leave it looping until the CPU limit).
    # The parent then reports death by SIGSYS, which names the cause.
    ins(SECCOMP_BPF_LD_W_ABS, SECCOMP_OFF_ARCH)
    ins(SECCOMP_BPF_JEQ, audit_arch, jt=0, jf="kill")
    ins(SECCOMP_BPF_LD_W_ABS, SECCOMP_OFF_NR)
    if arch == "x86_64":
        # x32 calls carry AUDIT_ARCH_X86_64 too, so only the number tells them apart; they reach
        # the same handlers (socket is 41 | 0x40000000), so without this they would bypass the rules.
        ins(SECCOMP_BPF_JSET, SECCOMP_X32_BIT, jt="kill", jf=0)
    denied = []
    for group, enabled in (("io_uring", sockets != "all"), ("ipc", ipc), ("keyring", keyring), ("trace", trace),
                           ("namespaces", namespaces), ("fallocate", fallocate), ("sessions", sessions),
                           ("hidden_memory", hidden_memory), ("host_files", host_files)):
        if enabled:
            denied.extend(n for n in SECCOMP_GROUPS[group] if n in nrs)
    for name in denied:
        ins(SECCOMP_BPF_JEQ, nrs[name], jt="eperm", jf=0)
    if namespaces:
        # clone3 passes its flags in a struct in memory, which BPF cannot read, so it is denied
        # outright. ENOSYS, not EPERM: glibc (>= 2.34) tries clone3 first for pthread_create and
        # posix_spawn and falls back to clone only on ENOSYS, whose flags (arg0 on both x86_64 and
        # aarch64) the next rule can check.
        ins(SECCOMP_BPF_JEQ, nrs["clone3"], jt="enosys", jf=0)
        ins(SECCOMP_BPF_JEQ, nrs["clone"], jt="clone", jf=0)
    if sockets == "none":
        ins(SECCOMP_BPF_JEQ, nrs["socket"], jt="eperm", jf=0)
    elif sockets == "inet":
        ins(SECCOMP_BPF_JEQ, nrs["socket"], jt="socket", jf=0)
    ins(SECCOMP_BPF_RET, SECCOMP_RET_ALLOW)  # no rule matched
    if sockets == "inet":
        # The family is an int: the kernel reads the low word only. Requiring the high word to be 0
        # as well denies nothing glibc or libffi would send (they sign-extend a non-negative int).
        label("socket")
        ins(SECCOMP_BPF_LD_W_ABS, _seccomp_arg_hi(0))
        ins(SECCOMP_BPF_JEQ, 0, jt=0, jf="eperm")
        ins(SECCOMP_BPF_LD_W_ABS, _seccomp_arg_lo(0))
        ins(SECCOMP_BPF_JEQ, SECCOMP_AF_INET, jt="allow", jf=0)
        ins(SECCOMP_BPF_JEQ, SECCOMP_AF_INET6, jt="allow", jf="eperm")
    if namespaces:
        # The kernel takes clone()'s flags from the low 32 bits (lower_32_bits(clone_flags)), where
        # every CLONE_NEW* flag lies, so the high word need not be checked.
        label("clone")
        ins(SECCOMP_BPF_LD_W_ABS, _seccomp_arg_lo(0))
        ins(SECCOMP_BPF_JSET, SECCOMP_CLONE_NEW_MASK, jt="eperm", jf="allow")
    label("allow")  # BPF jumps only forward, so the argument checks above need a second one
    ins(SECCOMP_BPF_RET, SECCOMP_RET_ALLOW)
    label("eperm")
    ins(SECCOMP_BPF_RET, SECCOMP_RET_ERRNO | errno.EPERM)
    label("enosys")
    ins(SECCOMP_BPF_RET, SECCOMP_RET_ERRNO | errno.ENOSYS)
    label("kill")
    ins(SECCOMP_BPF_RET, SECCOMP_RET_KILL_PROCESS)
    return _seccomp_assemble(code)


def _seccomp_assemble(code):
    """Resolve label names to the relative jump offsets BPF uses (forward only, at most 255), and pack
    each instruction as struct sock_filter { __u16 code; __u8 jt; __u8 jf; __u32 k; }."""
    where, n = {}, 0
    for item in code:
        if isinstance(item, str):
            where[item] = n
        else:
            n += 1
    out, i = [], 0
    for item in code:
        if isinstance(item, str):
            continue
        op, jt, jf, k = item
        jt = where[jt] - i - 1 if isinstance(jt, str) else jt
        jf = where[jf] - i - 1 if isinstance(jf, str) else jf
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise ValueError("seccomp filter jump out of range")
        out.append(struct.pack("=HBBI", op, jt, jf, k))
        i += 1
    return out


def install_seccomp(*, sockets="inet", ipc=True, keyring=True, trace=True, namespaces=True, fallocate=True,
                    sessions=False, hidden_memory=True, host_files=True):
    """Install the filter on this process (inherited by every child; cannot be removed).
    Returns a layer name such as "seccomp" when installed, None when unsupported
    (not Linux, unknown architecture, kernel without seccomp filters).

    ``sockets`` is ``"inet"`` (only AF_INET/AF_INET6), ``"none"`` or ``"all"`` (no socket rule);
    each flag denies the group of calls described in this module's docstring."""
    if sockets not in ("inet", "none", "all"):
        raise ValueError(f"sockets must be 'inet', 'none' or 'all', not {sockets!r}")
    if not platform.system() == "Linux":
        return None
    arch = _seccomp_machine()
    if arch is None:
        return None
    filt = b"".join(seccomp_program(arch, sockets, ipc, keyring, trace, namespaces, fallocate, sessions,
                                     hidden_memory, host_files))
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    prctl.restype = ctypes.c_int
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    # PR_SET_NO_NEW_PRIVS (38) first: without CAP_SYS_ADMIN the kernel refuses a filter otherwise,
    # and it keeps a setuid binary from running with privileges the filter never saw.
    if prctl(38, 1, 0, 0, 0) != 0:
        return None
    buf = ctypes.create_string_buffer(filt, len(filt))
    # struct sock_fprog { unsigned short len; struct sock_filter *filter; }: the pointer is 8-aligned.
    fprog = ctypes.create_string_buffer(struct.pack("=H6xQ", len(filt) // 8, ctypes.addressof(buf)), 16)
    # PR_SET_SECCOMP (22), SECCOMP_MODE_FILTER (2); prctl rather than seccomp(2), which needs 3.17.
    if prctl(22, 2, ctypes.addressof(fprog), 0, 0) != 0:
        err = ctypes.get_errno()
        if err in (errno.EINVAL, errno.ENOSYS):  # kernel without CONFIG_SECCOMP_FILTER
            return None
        raise OSError(err, "seccomp: " + os.strerror(err))
    return "seccomp"
