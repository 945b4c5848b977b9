"""The seccomp layer of the code sandbox (``trellis/codegen/seccomp.py``).

The filter is permanent, so every check runs in a fresh ``python -I -c <module text + snippet>``
(exactly how the sandbox uses the file) and never touches pytest's own process. Each probe makes
one system call with arguments that do nothing harmful, and reports its errno (0 on success)
before and after the filter is installed: a denied call must turn into EPERM, an allowed one must
give the same answer as without the filter.
"""

from __future__ import annotations

import ast
import errno
import json
import platform
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import trellis.codegen.seccomp as seccomp_module

SOURCE = Path(seccomp_module.__file__).read_text(encoding="utf-8")
MACHINE = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(
    platform.machine().lower())

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or MACHINE is None or struct.calcsize("P") != 8,
    reason="seccomp filter supports only 64-bit Linux on x86_64 and aarch64")

# Transcribed independently of the module, from arch/x86/entry/syscalls/syscall_64.tbl and the
# generic table (include/uapi/asm-generic/unistd.h, scripts/syscall.tbl) that aarch64 uses.
EXPECTED_NUMBERS = {
    "x86_64": {
        "socket": 41, "shmget": 29, "shmat": 30, "shmctl": 31, "semget": 64, "semop": 65, "semctl": 66,
        "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "semtimedop": 220, "mq_open": 240,
        "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243, "add_key": 248, "request_key": 249,
        "keyctl": 250, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
        "pidfd_getfd": 438, "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
        "chroot": 161, "clone": 56, "clone3": 435, "fallocate": 285, "setsid": 112, "setpgid": 109,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
        "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
        "memfd_create": 319, "memfd_secret": 447, "socketpair": 53, "vmsplice": 278, "getxattr": 191,
        "lgetxattr": 192, "fgetxattr": 193, "listxattr": 194, "llistxattr": 195, "flistxattr": 196,
        "getxattrat": 464, "listxattrat": 465, "setxattr": 188, "lsetxattr": 189,
        "fsetxattr": 190, "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199, "setxattrat": 463,
        "removexattrat": 466, "utime": 132, "utimes": 235, "futimesat": 261, "utimensat": 280,
        "inotify_init": 253, "inotify_init1": 294, "inotify_add_watch": 254, "fanotify_init": 300,
    },
    "aarch64": {
        "socket": 198, "shmget": 194, "shmat": 196, "shmctl": 195, "semget": 190, "semop": 193, "semctl": 191,
        "msgget": 186, "msgsnd": 189, "msgrcv": 188, "msgctl": 187, "semtimedop": 192, "mq_open": 180,
        "mq_unlink": 181, "mq_timedsend": 182, "mq_timedreceive": 183, "add_key": 217, "request_key": 218,
        "keyctl": 219, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272,
        "pidfd_getfd": 438, "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41,
        "chroot": 51, "clone": 220, "clone3": 435, "fallocate": 47, "setsid": 157, "setpgid": 154,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
        "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
        "memfd_create": 279, "memfd_secret": 447, "socketpair": 199, "vmsplice": 75, "getxattr": 8,
        "lgetxattr": 9, "fgetxattr": 10, "listxattr": 11, "llistxattr": 12, "flistxattr": 13, "getxattrat": 464,
        "listxattrat": 465, "setxattr": 5, "lsetxattr": 6,
        "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15, "fremovexattr": 16, "setxattrat": 463,
        "removexattrat": 466, "utimensat": 88, "inotify_init1": 26, "inotify_add_watch": 27, "fanotify_init": 262,
    },
}

# Probes: name -> Python expression giving an errno (0 = success). ``_sys`` makes a raw system call by
# name, ``_libc`` calls the C library's wrapper; ``_BUF`` is a scratch buffer. Arguments are chosen so
# that an allowed call fails harmlessly (missing key, bad id, bad fd) or does nothing (unshare(0)).
PRELUDE = r'''
import ctypes as _ct, json as _json, os as _os, resource as _resource, socket as _socket, sys as _sys_mod
import subprocess as _subprocess, tempfile as _tempfile, threading as _threading

_resource.setrlimit(_resource.RLIMIT_CORE, (0, 0))  # a SIGSYS kill must not leave a core file
_NR = _json.loads(_sys_mod.argv[1])
_libc_dll = _ct.CDLL(None, use_errno=True)
_BUF = _ct.create_string_buffer(4096)
_GONE = b"/nonexistent-trellis-seccomp"
_NOPID = 0x3FFFFFFF  # above any pid_max: ESRCH when the call is allowed


def _arg(a):
    return _ct.c_long(a) if isinstance(a, int) else a


def _errno_of(fn, *args):
    _ct.set_errno(0)
    r = fn(*[_arg(a) for a in args])
    return 0 if r != -1 else _ct.get_errno()


def _sys(name, *args):
    f = _libc_dll.syscall
    f.restype = _ct.c_long
    return _errno_of(f, _NR[name], *args)


def _libc(name, *args, restype=_ct.c_int):
    f = getattr(_libc_dll, name)
    f.restype = restype
    return _errno_of(f, *args)


def _py(fn):
    try:
        r = fn()
        if hasattr(r, "close"):
            r.close()
        return 0
    except OSError as e:
        return e.errno


def _in_child(fn):
    """Run ``fn`` (returning an errno) in a forked child: for calls that change this process."""
    pid = _os.fork()
    if pid == 0:
        try:
            _os._exit(fn())
        except BaseException:
            _os._exit(99)
    return _os.waitstatus_to_exitcode(_os.waitpid(pid, 0)[1])


def _fallocate():
    with _tempfile.TemporaryFile() as f:
        return _libc("fallocate", f.fileno(), 0, 0, 4096)


def _posix_fallocate():
    with _tempfile.TemporaryFile() as f:
        return _py(lambda: _os.posix_fallocate(f.fileno(), 0, 4096))


def _thread():
    out = []
    t = _threading.Thread(target=lambda: out.append(1))
    t.start()
    t.join()
    return 0 if out == [1] else 98


def _fork():
    pid = _os.fork()
    if pid == 0:
        _os._exit(7)
    return 0 if _os.waitpid(pid, 0)[1] == 7 << 8 else 98


def _clone(flags):
    """clone() with ``flags`` | SIGCHLD, like fork(); a child that gets created exits at once."""
    _ct.set_errno(0)
    f = _libc_dll.syscall
    f.restype = _ct.c_long
    r = f(_ct.c_long(_NR["clone"]), _ct.c_long(flags | 17), _ct.c_long(0), _ct.c_long(0), _ct.c_long(0),
          _ct.c_long(0))
    if r == 0:
        _os._exit(0)
    if r > 0:
        _os.waitpid(r, 0)
        return 0
    return _ct.get_errno()


_PROBES = {
    "socket_unix": lambda: _py(lambda: _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)),
    "socket_netlink": lambda: _sys("socket", 16, 3, 0),  # AF_NETLINK, SOCK_RAW, NETLINK_ROUTE
    "socket_packet": lambda: _sys("socket", 17, 3, 0),  # AF_PACKET, SOCK_RAW
    "socket_inet": lambda: _py(lambda: _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)),
    "socket_inet6": lambda: _py(lambda: _socket.socket(_socket.AF_INET6, _socket.SOCK_DGRAM)),
    "socket_inet_raw_call": lambda: _sys("socket", 2, 2, 0),
    "socket_inet_high_word": lambda: _sys("socket", (1 << 32) | 2, 2, 0),  # the kernel reads AF_INET
    "socketpair": lambda: _py(lambda: _socket.socketpair()[0]),
    "io_uring_setup": lambda: _sys("io_uring_setup", 0, None),
    "shmget": lambda: _libc("shmget", 0x7A11CE01, _ct.c_size_t(4096), 0),
    "shmat": lambda: _libc("shmat", 0x7FFFFFFF, None, 0, restype=_ct.c_long),
    "shmctl": lambda: _libc("shmctl", 0x7FFFFFFF, 2, _BUF),  # IPC_STAT
    "msgget": lambda: _libc("msgget", 0x7A11CE02, 0),
    "msgsnd": lambda: _libc("msgsnd", 0x7FFFFFFF, _BUF, _ct.c_size_t(0), 0o4000),  # IPC_NOWAIT
    "msgrcv": lambda: _libc("msgrcv", 0x7FFFFFFF, _BUF, _ct.c_size_t(8), _ct.c_long(0), 0o4000, restype=_ct.c_long),
    "msgctl": lambda: _libc("msgctl", 0x7FFFFFFF, 2, _BUF),
    "semget": lambda: _libc("semget", 0x7A11CE03, 1, 0),
    "semop": lambda: _libc("semop", 0x7FFFFFFF, _BUF, _ct.c_size_t(1)),
    "semtimedop": lambda: _sys("semtimedop", 0x7FFFFFFF, _BUF, 1, None),
    "semctl": lambda: _sys("semctl", 0x7FFFFFFF, 0, 2, _BUF),
    "mq_open": lambda: _sys("mq_open", _GONE[1:], 0, 0, None),  # the kernel takes the name without "/"
    "mq_unlink": lambda: _sys("mq_unlink", _GONE[1:]),
    "mq_timedsend": lambda: _sys("mq_timedsend", -1, _BUF, 0, 0, None),
    "mq_timedreceive": lambda: _sys("mq_timedreceive", -1, _BUF, 8, None, None),
    "add_key": lambda: _sys("add_key", None, None, None, 0, 0),
    "request_key": lambda: _sys("request_key", None, None, None, 0),
    "keyctl": lambda: _sys("keyctl", 9999, 0, 0, 0, 0),
    "ptrace": lambda: _libc("ptrace", 16, _NOPID, None, None, restype=_ct.c_long),  # PTRACE_ATTACH
    "process_vm_readv": lambda: _libc("process_vm_readv", _NOPID, None, 0, None, 0, 0, restype=_ct.c_long),
    "process_vm_writev": lambda: _libc("process_vm_writev", _NOPID, None, 0, None, 0, 0, restype=_ct.c_long),
    "kcmp": lambda: _sys("kcmp", _NOPID, _NOPID, 0, 0, 0),
    "pidfd_getfd": lambda: _sys("pidfd_getfd", -1, 0, 0),
    "unshare_raw": lambda: _sys("unshare", 0),
    "unshare": lambda: _libc("unshare", 0),
    "setns": lambda: _libc("setns", -1, 0),
    "mount": lambda: _libc("mount", b"none", _GONE, b"tmpfs", 0, None),
    "umount2": lambda: _libc("umount2", _GONE, 0),
    "pivot_root": lambda: _sys("pivot_root", _GONE, _GONE),
    "chroot": lambda: _libc("chroot", _GONE),
    "fsopen": lambda: _sys("fsopen", b"nonexistent-trellis-fs", 0),
    "open_tree": lambda: _sys("open_tree", -100, _GONE, 0),  # AT_FDCWD
    "clone3": lambda: _sys("clone3", None, 0),
    "fallocate": _fallocate,
    "posix_fallocate": _posix_fallocate,
    "setsid": lambda: _in_child(lambda: _py(_os.setsid)),
    "setpgid": lambda: _in_child(lambda: _py(lambda: _os.setpgid(0, 0))),
    "memfd_create": lambda: _py(lambda: _os.close(_os.memfd_create("trellis-probe"))),
    "memfd_secret": lambda: _sys("memfd_secret", 0),
    "utimensat": lambda: _py(lambda: _os.utime(".")),
    "setxattr": lambda: _py(lambda: _os.setxattr(".", "user.trellis-probe", b"1")),
    "removexattr": lambda: _py(lambda: _os.removexattr(".", "user.trellis-probe-absent")),
    "listxattr": lambda: _py(lambda: _os.listxattr(".")),
    "vmsplice": lambda: _sys("vmsplice", -1, None, 0, 0),
    "inotify_init1": lambda: _sys("inotify_init1", 0),
    "fork": _fork,
    "thread": _thread,
    "subprocess": lambda: _subprocess.run(["/bin/true"]).returncode,
}
# clone() with a namespace flag is probed only under the filter: allowed, it would make namespaces.
_CLONE_NEW = {"newns": 0x20000, "newcgroup": 0x2000000, "newuts": 0x4000000, "newipc": 0x8000000,
              "newuser": 0x10000000, "newpid": 0x20000000, "newnet": 0x40000000, "newtime": 0x80}


def _report(**options):
    before = {name: probe() for name, probe in _PROBES.items()}
    layer = install_seccomp(**options)
    after = {name: probe() for name, probe in _PROBES.items()}
    clone = {"plain": _clone(0)}
    if options.get("namespaces", True):
        clone.update({name: _clone(flag) for name, flag in _CLONE_NEW.items()})
    print(_json.dumps({"layer": layer, "before": before, "after": after, "clone": clone}))
'''

GROUPS = {
    "sockets": ["socket_unix", "socket_netlink", "socket_packet", "socket_inet_high_word", "io_uring_setup"],
    "ipc": ["shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop",
            "semtimedop", "semctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive"],
    "keyring": ["add_key", "request_key", "keyctl"],
    "trace": ["ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd"],
    "namespaces": ["unshare_raw", "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "fsopen",
                   "open_tree"],
    "fallocate": ["fallocate", "posix_fallocate"],
    "sessions": ["setsid", "setpgid"],
    "hidden_memory": ["socketpair", "memfd_create", "memfd_secret", "vmsplice"],
    "host_files": ["utimensat", "setxattr", "removexattr", "listxattr", "inotify_init1"],
}
ALWAYS_ALLOWED = ["fork", "thread", "subprocess"]
INET = ["socket_inet", "socket_inet6", "socket_inet_raw_call"]


def _run(snippet: str, tmp_path: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    text = SOURCE + "\n" + PRELUDE + "\n" + textwrap.dedent(snippet)
    return subprocess.run([sys.executable, "-I", "-c", text, json.dumps(EXPECTED_NUMBERS[MACHINE])],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path)


def _report(tmp_path: Path, **options) -> dict:
    proc = _run(f"_report(**{options!r})", tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if result["layer"] is None:
        pytest.skip("install_seccomp returned None: this kernel has no seccomp filters")
    assert result["layer"] == "seccomp"
    return result


def _check(result: dict, denied: list[str], allowed: list[str]) -> None:
    before, after = result["before"], result["after"]
    for name in denied:
        assert after[name] == errno.EPERM, (name, before[name], after[name])
    for name in allowed:
        assert after[name] == before[name], (name, before[name], after[name])


def test_defaults_deny_each_group_and_keep_the_rest(tmp_path):
    result = _report(tmp_path)
    denied = [name for group, names in GROUPS.items() if group != "sessions" for name in names]
    _check(result, denied, [*GROUPS["sessions"], *ALWAYS_ALLOWED, *INET])
    # Meaningful only if these calls work without the filter (they do as root or as any user).
    for name in ["socket_unix", "socket_inet", "socket_inet_high_word", "socketpair", "shmget", "msgget", "semget",
                 "unshare", "unshare_raw", "fallocate", "posix_fallocate", "setsid", "fork", "thread", "subprocess"]:
        assert result["before"][name] != errno.EPERM, name
    for name in ["socket_inet", "socket_inet_raw_call", "setsid", "setpgid", "fork", "thread", "subprocess"]:
        assert result["after"][name] == 0, name
    for name in ["socketpair", "memfd_create", "utimensat", "inotify_init1"]:
        assert result["before"][name] == 0, name
    assert result["before"]["shmget"] == errno.ENOENT and result["before"]["msgget"] == errno.ENOENT
    # clone3 answers ENOSYS (glibc then falls back to clone); clone with any CLONE_NEW* flag is EPERM.
    assert result["before"]["clone3"] != errno.ENOSYS and result["after"]["clone3"] == errno.ENOSYS
    assert result["clone"] == {**{name: errno.EPERM for name in result["clone"]}, "plain": 0}


def test_sessions_option_denies_setsid_and_setpgid(tmp_path):
    result = _report(tmp_path, sessions=True)
    _check(result, GROUPS["sessions"], ALWAYS_ALLOWED)
    assert result["before"]["setsid"] == 0 and result["before"]["setpgid"] == 0


def test_sockets_none_denies_inet_too(tmp_path):
    result = _report(tmp_path, sockets="none")
    _check(result, [*GROUPS["sockets"], *INET], ALWAYS_ALLOWED)


def test_sockets_all_leaves_socket_alone(tmp_path):
    result = _report(tmp_path, sockets="all")
    _check(result, GROUPS["ipc"], [*GROUPS["sockets"], *INET])


@pytest.mark.parametrize("group", ["ipc", "keyring", "trace", "namespaces", "fallocate", "hidden_memory", "host_files"])
def test_each_option_off_leaves_its_calls_alone(tmp_path, group):
    result = _report(tmp_path, **{group: False})
    others = [name for g, names in GROUPS.items() if g not in (group, "sessions") for name in names]
    _check(result, others, [*GROUPS[group], *ALWAYS_ALLOWED, *INET])
    if group == "namespaces":
        assert result["after"]["clone3"] == result["before"]["clone3"]
        assert result["clone"]["plain"] == 0


def test_everything_off_denies_nothing(tmp_path):
    result = _report(tmp_path, sockets="all", ipc=False, keyring=False, trace=False, namespaces=False,
                     fallocate=False, sessions=False, hidden_memory=False, host_files=False)
    _check(result, [], [name for names in GROUPS.values() for name in names] + ALWAYS_ALLOWED + INET + ["clone3"])


def test_ordinary_program_runs_and_the_filter_is_inherited(tmp_path):
    proc = _run("""
        import json, math, os, re, subprocess, sys
        if install_seccomp() is None:
            print("UNSUPPORTED"); sys.exit(0)
        with open("out.json", "w") as f:
            json.dump({"sqrt": math.sqrt(16), "words": re.findall(r"\\w+", "a bc")}, f)
        with open("out.json") as f:
            assert json.load(f) == {"sqrt": 4.0, "words": ["a", "bc"]}
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # a forked child keeps the filter
            os.write(w, json.dumps([_py(lambda: _socket.socket(_socket.AF_UNIX)),
                                    open("/proc/self/status").read().split("Seccomp:")[1].split()[0]]).encode())
            os._exit(0)
        os.close(w)
        child = json.loads(os.read(r, 1000))
        os.waitpid(pid, 0)
        code = "print(open('/proc/self/status').read().split('Seccomp:')[1].split()[0])"
        execd = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True).stdout.strip()
        print(json.dumps({"child": child, "execd": execd}))
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    if proc.stdout.strip() == "UNSUPPORTED":
        pytest.skip("install_seccomp returned None")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"child": [errno.EPERM, "2"], "execd": "2"}  # 2: SECCOMP_MODE_FILTER


@pytest.mark.skipif(MACHINE != "x86_64", reason="int 0x80 and x32 exist only on x86_64")
@pytest.mark.parametrize("abi", ["i386", "x32"])
def test_foreign_abi_syscall_kills_the_process(tmp_path, abi):
    if abi == "i386":  # mov eax, 20 (getpid in the i386 table); int 0x80; ret
        call = """
            import mmap
            _m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
            _m.write(bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3]))
            _f = _ct.CFUNCTYPE(_ct.c_int)(_ct.addressof(_ct.c_char.from_buffer(_m)))
            _call = lambda: _f() == _os.getpid()
        """
    else:  # getpid (39) with __X32_SYSCALL_BIT: ENOSYS on kernels without x32, getpid with it
        call = """
            _call = lambda: _libc_dll.syscall(_ct.c_long(0x40000000 | 39))
        """
    call = textwrap.dedent(call)
    unfiltered = _run(call + "print(_call())\n", tmp_path)
    if unfiltered.returncode != 0:
        pytest.skip(f"{abi} system calls do not work here even without the filter")
    proc = _run(call + textwrap.dedent("""
        if install_seccomp() is None:
            print("UNSUPPORTED"); _sys_mod.exit(0)
        print("installed", flush=True)
        print(_call(), flush=True)
    """), tmp_path)
    if proc.stdout.strip() == "UNSUPPORTED":
        pytest.skip("install_seccomp returned None")
    assert proc.stdout.split() == ["installed"], proc.stdout
    assert proc.returncode == -signal.SIGSYS, (proc.returncode, proc.stderr)


def test_bad_sockets_value_is_rejected_before_anything_is_installed():
    with pytest.raises(ValueError):
        seccomp_module.install_seccomp(sockets="unix")


def test_syscall_numbers_match_the_kernel_tables():
    for arch, (_audit_arch, numbers) in seccomp_module.SECCOMP_ARCHES.items():
        assert numbers == EXPECTED_NUMBERS[arch], arch
    assert seccomp_module.SECCOMP_ARCHES["x86_64"][0] == 0xC000003E
    assert seccomp_module.SECCOMP_ARCHES["aarch64"][0] == 0xC00000B7
    groups = {name for names in seccomp_module.SECCOMP_GROUPS.values() for name in names}
    assert groups <= set(EXPECTED_NUMBERS["x86_64"]) and "socketpair" in seccomp_module.SECCOMP_GROUPS["hidden_memory"]


def test_filter_programs_assemble_for_both_architectures():
    for arch in seccomp_module.SECCOMP_ARCHES:
        for sockets in ("inet", "none", "all"):
            for flag in (True, False):
                program = seccomp_module.seccomp_program(arch, sockets, flag, flag, flag, flag, flag, not flag)
                assert all(len(ins) == 8 for ins in program) and len(program) < 256


def test_source_can_be_prepended_to_another_script():
    tree = ast.parse(SOURCE)
    assert "from __future__" not in SOURCE
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            assert isinstance(node, ast.Import), "no from-imports, relative or otherwise"
            assert all(alias.name in {"ctypes", "errno", "os", "platform", "struct"} for alias in node.names)
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names = [node.name]
        else:
            assert isinstance(node, ast.Assign), ast.dump(node)[:80]  # constants only: no side effects
            names = [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        for name in names:
            assert name in ("install_seccomp", "seccomp_program") or name.startswith(("_seccomp", "SECCOMP_")), name
