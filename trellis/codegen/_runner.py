"""The child side of ``trellis.codegen.sandbox``: ``seccomp.py`` + this text, compiled by the parent and
run by ``python -I -S`` (the parent's ``sandbox_child.STUB``; another interpreter gets the text with ``-c``).

Stdlib only and never imported by trellis. Three processes, so that the verdict is never decided
where the untrusted program runs:

- *main* (the supervisor, unrestricted) reads frame 1 from stdin (the program, the limits, the
  work dir) and forks the **worker**; only then reads frame 2 (the test code) and forks the
  **judge**. It reports how the worker ended (signal, exit status, CPU time), enforces the run-wide
  memory and process limits over the worker's whole process tree (it is a child subreaper, so
  daemons that ``setsid`` and double-fork stay its descendants), and kills that tree when the
  judge is done, when the worker exits, or when the parent closes stdin (its stop signal).
- the **worker** locks itself down (rlimits, Landlock, seccomp, a per-run uid, a socket shim),
  runs the program and then answers the judge's requests: call this function with these values,
  read this attribute. It returns *data*: values of exact builtin types (``None``, ``bool``,
  ``int``, ``float``, ``complex``, ``str``, ``bytes``, ``list``, ``tuple``, ``dict``, ``set``,
  ``frozenset``) encoded as JSON; anything else becomes an opaque handle. It was forked before the
  test code was read, so the tests and their expected values were never in its memory, and it has
  no descriptor of the result pipe.
- the **judge** runs the test code (trusted) with the program's names bound to proxies. Decoded
  values are rebuilt as plain builtins by the judge's own code, so an ``__eq__`` that is always
  true, a patched ``abs`` or a rewritten assert inside the program cannot reach the comparison.
  Handles cannot be compared, hashed or truth-tested (that would ask the program). It writes one
  event per case to the result pipe.

What the program can still do: answer with the right value when it can compute or guess it from
what it sees (the arguments of each call), and fake a test whose expected value is computed by a
function of the program itself (HumanEval/32 checks ``poly(xs, candidate(xs))`` with the
program's ``poly``). The program's stdout is discarded; its stderr is kept for the report.
"""

import base64
import builtins
import ctypes
import json
import math
import numbers
import operator
import os
import re
import resource
import select
import signal
import sys
import time

_write, _dumps, _loads, _clock = os.write, json.dumps, json.loads, time.monotonic
_exec, _compile, _BaseException = exec, compile, BaseException

_MAX_LINE = 8 << 20  # one reply from the worker (a returned value), bytes
_MAX_DEPTH = 100  # nesting of a returned value
_MAX_ITEMS = 1 << 20  # elements materialised from one iterator handle
_GLOBAL_ITEMS = 10000  # a program's data global larger than this reaches the tests as a handle
_FACTORIES = (int, float, str, list, dict, set, tuple)  # defaultdict factories the judge rebuilds
_NAMEDTUPLES = {}  # (name, fields) -> the judge's own namedtuple class
_JUDGE_LOST = 3  # the judge's exit status when the worker died or broke the protocol
_JUDGE_BASE = 64 << 20  # the judge's own interpreter and test code, not charged to the program


# ------------------------------------------------------------------------------------------- framing
def _read_exact(fd, n):
    out = bytearray()
    while len(out) < n:
        chunk = os.read(fd, min(n - len(out), 1 << 16))
        if not chunk:
            raise EOFError("stdin closed before a whole frame")
        out += chunk
    return bytes(out)


def _read_frame(fd):
    """One ``<size>\\n<json>`` frame, read byte-exactly: nothing past it enters this process (the
    test frame must not be in memory when the worker is forked)."""
    head = b""
    while not head.endswith(b"\n"):
        c = os.read(fd, 1)
        if not c or len(head) > 20:
            raise EOFError("bad frame header")
        head += c
    return _loads(_read_exact(fd, int(head)).decode("utf-8"))


def _emit(fd, event):
    data = (_dumps(event) + "\n").encode("utf-8", "replace")
    while data:
        data = data[_write(fd, data):]


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


def _limits(lim, enforced, uid=None, memory_bytes=None):
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


# ------------------------------------------------------------------------------------------- values
# Wire form of a value (one JSON document): None, bool, str and float (finite) as themselves; ints
# within 2**53 as themselves, larger as {"I": hex} (hex parses without the int-digits limit);
# {"f": "nan"|"inf"|"-inf"}, {"C": [re, im]}, {"B": base64}, {"L": [...]}, {"T": [...]},
# {"S": [...]}, {"F": [...]}, {"D": [[k, v], ...]}, and {"H": id, "t": type name} for a handle.
_SMALL = 1 << 53


class _Handles:
    """Objects of the program that are not data, by id (worker side)."""

    def __init__(self):
        self.objs = {}

    def add(self, obj):
        hid = len(self.objs) + 1
        self.objs[hid] = obj
        return hid


class _NotData(Exception):
    pass


def _enc(v, handles, depth=0):
    """Worker side: a value of the program -> wire form (lenient: subclasses as their builtin).
    ``handles`` None: data only (``_NotData`` otherwise)."""
    if depth > _MAX_DEPTH:
        raise ValueError("value nested too deeply to return")
    if v is None or v is True or v is False:
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        v = int.__index__(v)
        return v if -_SMALL < v < _SMALL else {"I": hex(v)}
    if isinstance(v, float):
        v = float.__float__(v)
        return v if math.isfinite(v) else {"f": repr(v)}
    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, complex):
        return {"C": [_enc(v.real, handles), _enc(v.imag, handles)]}
    if isinstance(v, (bytes, bytearray)):
        return {"B": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, tuple) and isinstance(getattr(type(v), "_fields", None), tuple):  # a namedtuple
        return {"NT": [type(v).__name__[:100], [str(f) for f in type(v)._fields],
                       [_enc(x, handles, depth + 1) for x in tuple.__iter__(v)]]}
    for t, tag in ((list, "L"), (tuple, "T"), (set, "S"), (frozenset, "F")):
        if isinstance(v, t):
            return {tag: [_enc(x, handles, depth + 1) for x in t.__iter__(v)]}
    if isinstance(v, dict):
        pairs = [[_enc(k, handles, depth + 1), _enc(x, handles, depth + 1)] for k, x in dict.items(v)]
        kind = type(v).__module__ + "." + type(v).__qualname__
        if kind == "collections.Counter":
            return {"Ct": pairs}
        if kind == "collections.OrderedDict":
            return {"OD": pairs}
        factory = getattr(v, "default_factory", None)
        if kind == "collections.defaultdict" and factory in _FACTORIES:
            return {"dd": [factory.__name__, pairs]}
        return {"D": pairs}
    if isinstance(v, memoryview):
        return {"mv": base64.b64encode(v.tobytes()).decode("ascii")}
    view = type(v).__name__
    if view in ("dict_keys", "dict_values", "dict_items") and type(v).__module__ == "builtins":
        return {view: [_enc(x, handles, depth + 1) for x in v]}
    # Values of the standard library's number and container types, rebuilt by the judge's own
    # classes; numpy's scalars by the number protocols they register with.
    name = type(v).__module__ + "." + type(v).__qualname__
    if name == "fractions.Fraction":
        return {"Q": [_enc(v.numerator, None), _enc(v.denominator, None)]}
    if name == "decimal.Decimal":
        return {"Dm": str(v)}
    if name == "collections.deque":
        return {"dq": [_enc(x, handles, depth + 1) for x in list(v)]}
    if name == "builtins.range":
        return {"R": [_enc(v.start, None), _enc(v.stop, None), _enc(v.step, None)]}
    if type(v).__module__ == "numpy" and type(v).__name__ in ("bool", "bool_"):
        return bool(v)
    if isinstance(v, numbers.Integral):
        return _enc(operator.index(v), None)
    if isinstance(v, numbers.Real) and not isinstance(v, numbers.Rational):
        return _enc(float(v), None)
    if handles is None:
        raise _NotData(type(v).__name__)
    return {"H": handles.add(v), "t": type(v).__name__[:100]}


def _small(v, budget=_GLOBAL_ITEMS):
    """Whether ``v`` has at most ``budget`` elements in all (counted without encoding it)."""
    stack, n = [v], 0
    while stack:
        x = stack.pop()
        n += 1
        if n > budget:
            return False
        if isinstance(x, (list, tuple, set, frozenset)):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
    return True


class _Remote:
    """Judge side: an object of the program that is not data. Calls and attribute reads go to the
    worker; equality, hashing and truth would ask the program, so they raise."""

    __slots__ = ("_rpc", "_ref", "_type")

    def __init__(self, rpc, ref, type_name):
        object.__setattr__(self, "_rpc", rpc)
        object.__setattr__(self, "_ref", ref)
        object.__setattr__(self, "_type", type_name)

    def __call__(self, *args, **kwargs):
        return self._rpc.call(self, args, kwargs)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            # Protocol lookups by the tests' own libraries (numpy's __array_interface__, copy's
            # __deepcopy__) must not take the program's answer: it would point the judge at raw
            # memory or send it the tests' values (third red-team pass).
            raise AttributeError(name)
        return self._rpc.request({"op": "attr", "ref": self._ref, "name": name})

    def __next__(self):
        return self._rpc.request({"op": "next", "ref": self._ref})

    def __iter__(self):
        return iter(self._rpc.request({"op": "iter", "ref": self._ref}))

    def __len__(self):
        return self._rpc.request({"op": "len", "ref": self._ref})

    def __getitem__(self, key):
        return self._rpc.request({"op": "item", "ref": self._ref, "key": self._rpc.enc(key)})

    def _untrusted(self, *args):
        raise TypeError(f"an object of type {self._type!r} returned by the program cannot be compared, hashed "
                        "or truth-tested by the tests (only data values are: numbers, strings, containers)")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __hash__ = __contains__ = _untrusted

    def __str__(self):
        text = self._rpc.request({"op": "str", "ref": self._ref})
        if type(text) is not str:
            raise TypeError("__str__ of the program's object did not return a str")
        return text

    def __instancecheck__(self, obj):
        """``isinstance(x, Cls)`` with ``Cls`` the program's: asked of the program (it defines
        ``Cls``, so it could make any check of its own type true anyway)."""
        return self._rpc.request({"op": "isinstance", "ref": self._ref, "obj": self._rpc.enc(obj)}) is True

    def __repr__(self):
        return f"<{self._type} object of the program>"


class _TooBig(ValueError):
    """A reply over ``_MAX_LINE``: that call fails, the run goes on."""


class _ProgramError(Exception):
    """The program raised an exception that is not one of Python's built-in ones."""


class _ProtocolError(Exception):
    """The worker's reply broke the protocol (malformed, too large, out of order)."""


class _WorkerLost(Exception):
    """The worker died or stopped answering: no later case can run."""


# Modules the program imported that the tests may use by the program's name for them (MBPP's asserts
# call ``math.isclose`` after the program's ``import math``): the judge imports its own copy, and only
# of these pure, side-effect-free ones (the program chooses the names: ``antigravity`` would open a
# browser).
_TEST_MODULES = frozenset((
    "abc", "array", "base64", "binascii", "bisect", "calendar", "cmath", "collections", "collections.abc",
    "copy", "dataclasses", "datetime", "decimal", "difflib", "enum", "fractions", "functools", "hashlib", "heapq",
    "itertools", "json", "keyword", "math", "numbers", "operator", "pprint", "random", "re", "statistics",
    "string", "struct", "sys", "textwrap", "time", "types", "typing", "unicodedata", "zlib"))

_BUILTIN_NAMES = frozenset(vars(builtins))
_LAYER = re.compile(r"rlimit|landlock-abi\d{1,2}|seccomp|uid-per-run|uid\d{1,10}|no-capabilities|socket-shim")
# Built-in exceptions the program raised are rebuilt by name for the tests (``except ValueError``),
# but not StopIteration/StopAsyncIteration: inside ``map``/``filter`` one would end the loop
# quietly and skip the asserts (red-team finding); they arrive as ``_ProgramError`` (PEP 479's rule).
_EXC = {n: c for n, c in vars(builtins).items() if isinstance(c, type) and issubclass(c, BaseException)
        and not issubclass(c, (StopIteration, StopAsyncIteration, GeneratorExit))}


def _dec(x, rpc, depth=0):
    """Judge side, strict: wire form -> a value built from builtins only (or a ``_Remote``)."""
    if depth > _MAX_DEPTH:
        raise _ProtocolError("value nested too deeply")
    t = type(x)
    if x is None or t is bool or t is str or t is float:
        return x
    if t is int:
        if not -_SMALL < x < _SMALL:
            raise _ProtocolError("large int not in hex form")
        return x
    if t is not dict or len(x) not in (1, 2):
        raise _ProtocolError(f"unexpected {t.__name__} in a value")
    (tag, body), = list(x.items())[:1]
    if tag == "H" and len(x) == 2 and type(body) is int and type(x.get("t")) is str:
        return _Remote(rpc, body, x["t"][:100])
    if len(x) != 1:
        raise _ProtocolError("malformed value")
    if tag == "I" and type(body) is str and len(body) < 1 << 22:
        return int(body, 16)
    if tag == "f" and body in ("nan", "inf", "-inf"):
        return float(body)
    if tag == "B" and type(body) is str:
        return base64.b64decode(body.encode("ascii"), validate=True)
    if tag == "Dm" and type(body) is str and len(body) < 1 << 16:
        import decimal

        return decimal.Decimal(body)
    if tag in ("Q", "R") and type(body) is list and len(body) == (2 if tag == "Q" else 3):
        parts = [_dec(b, rpc, depth + 1) for b in body]
        if not all(type(x) is int for x in parts):
            raise _ProtocolError("malformed number")
        if tag == "R":
            return range(*parts)
        import fractions

        return fractions.Fraction(*parts)
    if tag == "dq" and type(body) is list:
        import collections

        return collections.deque(_dec(b, rpc, depth + 1) for b in body)
    if tag == "mv" and type(body) is str:
        return memoryview(base64.b64decode(body.encode("ascii"), validate=True))
    if tag == "NT" and type(body) is list and len(body) == 3:
        import collections

        name, fields, values = body
        if (type(name) is not str or not name.isidentifier() or type(fields) is not list or type(values) is not list
                or len(fields) != len(values) or not all(type(f) is str and f.isidentifier() for f in fields)):
            raise _ProtocolError("malformed namedtuple")
        cls = _NAMEDTUPLES.get((name, tuple(fields)))
        if cls is None:
            if len(_NAMEDTUPLES) > 256:
                raise _ProtocolError("too many namedtuple types")
            try:
                cls = _NAMEDTUPLES[(name, tuple(fields))] = collections.namedtuple(name, fields)
            except ValueError as e:
                raise _ProtocolError(f"malformed namedtuple: {e}") from None
        return cls(*(_dec(x, rpc, depth + 1) for x in values))
    if tag in ("Ct", "OD", "dict_keys", "dict_values", "dict_items", "dd"):
        import collections

        if tag == "dd":
            if type(body) is not list or len(body) != 2 or body[0] not in {f.__name__ for f in _FACTORIES}:
                raise _ProtocolError("malformed defaultdict")
            factory = getattr(builtins, body[0])
            return collections.defaultdict(factory, _dec({"D": body[1]}, rpc, depth))
        if tag in ("Ct", "OD"):
            d = _dec({"D": body}, rpc, depth)
            return collections.Counter(d) if tag == "Ct" else collections.OrderedDict(d)
        items = _dec({"L": body}, rpc, depth)
        if tag == "dict_keys":
            return dict.fromkeys(items).keys()
        if tag == "dict_values":
            return dict(enumerate(items)).values()
        if not all(type(x) is tuple and len(x) == 2 for x in items):
            raise _ProtocolError("malformed dict items")
        return dict(items).items()
    if type(body) is not list:
        raise _ProtocolError("malformed value")
    if tag == "C" and len(body) == 2:
        re_, im = (_dec(b, rpc, depth + 1) for b in body)
        if type(re_) is not float and type(re_) is not int or type(im) is not float and type(im) is not int:
            raise _ProtocolError("malformed complex")
        return complex(re_, im)
    items = [_dec(b, rpc, depth + 1) for b in body] if tag != "D" else None
    try:
        if tag == "L":
            return items
        if tag == "T":
            return tuple(items)
        if tag == "S":
            return set(items)
        if tag == "F":
            return frozenset(items)
        if tag == "D":
            out = {}
            for pair in body:
                if type(pair) is not list or len(pair) != 2:
                    raise _ProtocolError("malformed dict item")
                out[_dec(pair[0], rpc, depth + 1)] = _dec(pair[1], rpc, depth + 1)
            return out
    except TypeError as e:  # an unhashable key or element, e.g. a handle
        raise _ProtocolError(f"malformed value: {e}") from None
    raise _ProtocolError(f"unknown value tag {tag!r}")


def _enc_arg(v, depth=0):
    """Judge side: an argument the tests pass -> wire form (exact builtin types and handles only)."""
    if depth > _MAX_DEPTH:
        raise ValueError("argument nested too deeply")
    t = type(v)
    if isinstance(v, _Remote):
        return {"H": object.__getattribute__(v, "_ref"), "t": ""}
    if v is None or t is bool or t is str:
        return v
    if t is int:
        return v if -_SMALL < v < _SMALL else {"I": hex(v)}
    if t is float:
        return v if math.isfinite(v) else {"f": repr(v)}
    if t is complex:
        return {"C": [_enc_arg(v.real), _enc_arg(v.imag)]}
    if t is bytes or t is bytearray:
        return {"B": base64.b64encode(bytes(v)).decode("ascii")}
    for typ, tag in ((list, "L"), (tuple, "T"), (set, "S"), (frozenset, "F")):
        if t is typ:
            return {tag: [_enc_arg(x, depth + 1) for x in v]}
    if t is dict:
        return {"D": [[_enc_arg(k, depth + 1), _enc_arg(x, depth + 1)] for k, x in v.items()]}
    if t is type(len) and getattr(builtins, getattr(v, "__name__", ""), None) is v:
        return {"bi": v.__name__}  # a builtin function (key=len, map(abs, ...)): by name
    raise TypeError(f"the tests passed a {t.__name__} to the program: only data values, builtin functions "
                    "and the program's own objects can cross into the sandbox")


def _dec_arg(x, handles, depth=0):
    """Worker side: wire form -> value (the judge is trusted; handles name the worker's objects)."""
    if type(x) is not dict:
        return x
    (tag, body), = list(x.items())[:1]
    if tag == "H":
        return handles.objs[body]
    if tag == "bi":
        return getattr(builtins, body)
    if tag == "I":
        return int(body, 16)
    if tag == "f":
        return float(body)
    if tag == "B":
        return base64.b64decode(body)
    if tag == "C":
        return complex(*body)
    if tag == "D":
        return {_dec_arg(k, handles, depth + 1): _dec_arg(v, handles, depth + 1) for k, v in body}
    items = [_dec_arg(b, handles, depth + 1) for b in body]
    return {"L": list, "T": tuple, "S": set, "F": frozenset}[tag](items)


# ------------------------------------------------------------------------------------------- worker
class _CaseTimeout(BaseException):
    """Raised by SIGALRM when one case overruns ``case_timeout`` (BaseException: harder to swallow)."""


def _builtin_ancestor(exc):
    """The name of the nearest built-in class of ``exc`` (a ValueError subclass of the program's
    is a ValueError to the tests' ``except``)."""
    for cls in type(exc).__mro__:
        if getattr(builtins, cls.__name__, None) is cls:
            return cls.__name__
    return "Exception"


def _describe(exc, source=""):
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


def _lock_down_worker(job, enforced):
    _limits(job["limits"], enforced, uid=job["run_uid"] if job["run_uid"] is not None else os.getuid())
    if job["landlock"] and sys.platform.startswith("linux"):
        try:
            _landlock(job["workdir"], enforced)
        except (OSError, AttributeError):
            pass
    landlocked = any(e.startswith("landlock") for e in enforced)
    if job["seccomp"]:
        # IPC is denied even inside an IPC namespace: segments no process maps escape the run's memory
        # count (as do memfds and socket buffers: hidden_memory).
        install_seccomp = globals()["install_seccomp"]  # defined by seccomp.py, prepended to this text
        layer = install_seccomp(sockets="inet" if job["netns"] else "none", ipc=True,
                                keyring=True, trace=True, namespaces=True, fallocate=True,
                                sessions=not job["pidns"], hidden_memory=True, host_files=True)
        if layer:
            enforced.append(layer)
    if job["run_uid"] is not None:
        _drop_root(job["run_uid"], landlocked, enforced)
    _no_network(enforced)


def _worker(job, rfd, wfd):
    """Lock down, run the program, then serve the judge: one request line in, one reply line out."""
    enforced = []
    _lock_down_worker(job, enforced)
    rf = os.fdopen(rfd, "rb", buffering=1 << 16)
    handles = _Handles()

    def reply(obj):
        _emit(wfd, obj)

    def on_alarm(signum, frame):
        raise _CaseTimeout("the test case ran longer than its case_timeout")

    signal.signal(signal.SIGALRM, on_alarm)
    g = {"__name__": "__sandbox__", "__builtins__": builtins}
    try:
        _exec(_compile(job["program"], "<program>", "exec"), g)
    except _BaseException as exc:  # noqa: B902 - SystemExit, KeyboardInterrupt: the program's doing
        reply({"load": _describe(exc), "kind": _kind(exc), "enforced": enforced})
        os._exit(0)
    names = {}
    for name, v in list(g.items()):
        if name.startswith("__"):
            continue
        if type(v).__name__ == "module":
            names[name] = {"mod": getattr(v, "__name__", "")[:200]}
            continue
        try:
            if _small(v):  # plain data (a constant, a table) is sent as a value; a big table stays
                data = _enc(v, None)
                if len(_dumps(data)) < 1 << 16:
                    names[name] = {"v": data}
                    continue
        except _BaseException:  # noqa: B902 - not data, or the program's own code raised
            pass
        names[name] = {"H": handles.add(v), "t": type(v).__name__[:100]}
    reply({"load": None, "names": names, "enforced": enforced})
    while True:
        line = rf.readline()
        if not line:
            os._exit(0)
        req = _loads(line)
        out = {"id": req["id"]}
        budget = req.get("budget")
        try:
            if budget:
                signal.setitimer(signal.ITIMER_REAL, budget)
            try:
                op, obj = req["op"], handles.objs[req["ref"]]
                if op == "call":
                    args = [_dec_arg(a, handles) for a in req["args"]]
                    kwargs = {k: _dec_arg(a, handles) for k, a in req["kw"]}
                    value = obj(*args, **kwargs)
                    # Arguments changed in place go back (by value), and only those.
                    mut = []
                    wires = [*req["args"], *(w for _, w in req["kw"])]
                    for i, (a, wire) in enumerate(zip([*args, *kwargs.values()], wires)):
                        if type(a) in (list, dict, set, bytearray):
                            now = _enc(a, handles)
                            if now != wire:
                                mut.append([i, now])
                    out["mut"] = mut
                elif op == "next":
                    value = next(obj)
                elif op == "str":
                    value = str(obj)
                elif op == "isinstance":
                    value = isinstance(_dec_arg(req["obj"], handles), obj)
                elif op == "attr":
                    value = getattr(obj, req["name"])
                elif op == "iter":
                    value = []
                    for x in obj:
                        value.append(x)
                        if len(value) > _MAX_ITEMS:
                            raise MemoryError(f"more than {_MAX_ITEMS} items from one iterator")
                elif op == "len":
                    value = len(obj)
                elif op == "item":
                    value = obj[_dec_arg(req["key"], handles)]
                else:
                    raise ValueError(f"unknown request {op!r}")
                out["v"] = _enc(value, handles)
            finally:
                if budget:
                    signal.setitimer(signal.ITIMER_REAL, 0)
        except _BaseException as exc:  # noqa: B902
            name = type(exc).__name__ if isinstance(exc, _CaseTimeout) else _builtin_ancestor(exc)
            out = {"id": req["id"], "raise": name, "msg": _describe(exc), "kind": _kind(exc)}
            try:
                if _small(exc.args, 1000):
                    out["args"] = _enc(exc.args, None)
            except _BaseException:  # noqa: B902 - args that are not data stay behind
                pass
        try:
            reply(out)
        except BrokenPipeError:
            os._exit(0)  # the judge is gone: nothing of ours to report
        except (ValueError, TypeError, RecursionError) as exc:  # an unencodable reply: say so
            reply({"id": req["id"], "raise": "ValueError", "msg": f"unencodable return value: {exc}"[:1000],
                   "kind": "error"})


# ------------------------------------------------------------------------------------------- judge
class _Rpc:
    """The judge's end of the worker's pipes: one request, one reply, matched by a random id."""

    def __init__(self, wfd, rfd):
        self.wfd, self.rfd = wfd, rfd
        self.buf = b""
        self.lost = None  # why the worker can no longer be asked
        self.deadline = None  # the current case's end (case_timeout), monotonic
        self.skipping = False  # inside a reply over _MAX_LINE, dropping it up to its newline
        self.abandoned = set()  # ids of requests whose case timed out here: late replies dropped

    def _line(self):
        while b"\n" not in self.buf:
            timeout = None if self.deadline is None else max(0.0, self.deadline + 1.0 - _clock())
            ready, _, _ = select.select([self.rfd], [], [], timeout)
            if not ready:
                self.lost = "the program stopped answering after its case_timeout"
                raise _WorkerLost(self.lost)
            chunk = os.read(self.rfd, 1 << 16)
            if not chunk:
                self.lost = "the program's process ended"
                raise _WorkerLost(self.lost)
            if self.skipping:  # the rest of an oversized line: dropped as it comes
                if b"\n" in chunk:
                    self.buf = chunk.split(b"\n", 1)[1]
                    self.skipping = False
                    raise _TooBig(f"the program returned a value over {_MAX_LINE >> 20} MB")
                continue
            self.buf += chunk
            if len(self.buf) > _MAX_LINE and b"\n" not in self.buf:
                self.buf, self.skipping = b"", True
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def first(self):
        try:
            return _loads(self._line())
        except (ValueError, RecursionError, MemoryError):
            self.lost = "the program's process sent a malformed message"
            raise _WorkerLost(self.lost) from None

    def request(self, req, mutable=()):
        if self.lost:
            raise _WorkerLost(self.lost)
        rid = int.from_bytes(os.urandom(8), "little") >> 2  # (``secrets`` costs 10+ ms to import)
        req["id"] = rid
        if self.deadline is not None:
            req["budget"] = max(0.001, self.deadline - _clock())
        _emit(self.wfd, req)
        try:
            while True:
                try:
                    rep = _loads(self._line())
                except _CaseTimeout:
                    self.abandoned.add(rid)  # its reply, when it comes, answers nothing
                    raise
                if type(rep) is dict and rep.get("id") in self.abandoned:
                    self.abandoned.discard(rep["id"])
                    continue
                break
            if type(rep) is not dict or rep.get("id") != rid:
                raise _ProtocolError("a reply that does not answer the request")
            if "raise" in rep:
                name, msg, kind = rep.get("raise"), rep.get("msg"), rep.get("kind")
                if type(name) is not str or type(msg) is not str:
                    raise _ProtocolError("malformed exception")
                args = _dec(rep["args"], self) if "args" in rep else None
                value, raised = None, (name, msg[:1000], kind, args if type(args) is tuple else None)
            else:
                value, raised = _dec(rep.get("v"), self), None
                for i, new in rep.get("mut") or ():
                    # A list/dict/set argument the program changed in place: mirror it, by value.
                    if type(i) is int and 0 <= i < len(mutable) and type(mutable[i]) in (list, dict, set, bytearray):
                        _mirror(mutable[i], _dec(new, self))
        except _TooBig:
            raise
        except (_ProtocolError, ValueError, TypeError, RecursionError, UnicodeDecodeError, ArithmeticError) as exc:
            self.lost = f"the program's process broke the protocol ({type(exc).__name__}: {exc})"[:500]
            raise _WorkerLost(self.lost) from None
        if raised is None:
            return value
        name, msg, kind, args = raised
        text = msg.split(": ", 1)[1] if msg.startswith(name + ": ") else msg
        if kind == "timeout":
            raise _CaseTimeout(text)
        if name == "StopIteration" and req["op"] == "next":
            raise StopIteration  # the iterator protocol the tests asked for (nowhere else: _EXC)
        cls = _EXC.get(name)
        if cls is None:
            raise _ProgramError(msg)
        exc = None
        if args is not None:
            try:
                exc = cls(*args)
            except Exception:  # noqa: BLE001 - a class that wants other arguments: the message only
                exc = None
        raise exc if exc is not None else cls(text)

    def drain(self):
        """Wait for the replies of requests abandoned at a case timeout (the worker answers them
        in order, after finishing them), so the next case's clock starts on an idle worker, as
        it did when one process ran both."""
        while self.abandoned and not self.lost:
            try:
                rep = _loads(self._line())
            except _WorkerLost:
                return
            except (ValueError, RecursionError, MemoryError):
                self.lost = "the program's process broke the protocol (a malformed reply)"
                return
            if type(rep) is dict and rep.get("id") in self.abandoned:
                self.abandoned.discard(rep["id"])
            else:
                self.lost = "the program's process broke the protocol (a reply nobody asked for)"

    def enc(self, v):
        return _enc_arg(v)

    def call(self, remote, args, kwargs):
        enc = [_enc_arg(a) for a in args]
        kw = [[k, _enc_arg(v)] for k, v in kwargs.items()]
        return self.request({"op": "call", "ref": object.__getattribute__(remote, "_ref"), "args": enc, "kw": kw},
                            mutable=(*args, *kwargs.values()))


def _mirror(old, new, depth=0):
    """Make the tests' ``old`` equal the program's ``new`` in place; nested lists/dicts at the
    same places are updated in place too, so a row the tests hold keeps its identity."""
    if type(new) is not type(old) and not (type(old) is bytearray and type(new) is bytes):
        raise _ProtocolError("an argument changed type")
    if type(old) is set:
        old.clear()
        old.update(new)
    elif type(old) is dict:
        for k in [k for k in old if k not in new]:
            del old[k]
        for k, v in new.items():
            if k in old and type(old[k]) in (list, dict) and type(v) is type(old[k]) and depth < _MAX_DEPTH:
                _mirror(old[k], v, depth + 1)
            else:
                old[k] = v
    elif type(old) is list and len(old) == len(new):
        for i, v in enumerate(new):
            if type(old[i]) in (list, dict) and type(v) is type(old[i]) and depth < _MAX_DEPTH:
                _mirror(old[i], v, depth + 1)
            else:
                old[i] = v
    else:
        old[:] = new


def _lock_down_judge(job, enforced):
    """The judge runs trusted test code on untrusted data: rlimits, Landlock without any write,
    not dumpable (no ptrace or /proc/<pid>/mem by the worker's uid), and, run as root, no
    capability left (uid 0 stays, so the worker's uid cannot signal it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    lim = job["limits"]
    _limits(lim, enforced, memory_bytes=max(lim["memory_bytes"], 1 << 30) + (256 << 20) if lim["memory_bytes"] else 0)
    if job["landlock"] and sys.platform.startswith("linux"):
        try:
            _landlock(None, enforced)
        except (OSError, AttributeError):
            pass
    if os.geteuid() == 0:
        _set_caps(libc, 0)


def _judge(job, tests, rpc_w, rpc_r, out):
    """Run every case in this (trusted) process; the program's names are proxies into the worker."""
    enforced = []
    _lock_down_judge(job, enforced)
    rpc = _Rpc(rpc_w, rpc_r)
    try:
        hello = rpc.first()
    except _WorkerLost as exc:
        _emit(out, {"ev": "lost", "at": 0, "why": str(exc)})
        os._exit(_JUDGE_LOST)
    # The worker says which of its layers took (only it can tell for Landlock): names it could
    # claim are limited to the layers that exist.
    worker_layers = [e for e in hello.get("enforced", ()) if type(e) is str and _LAYER.fullmatch(e)] \
        if type(hello) is dict and type(hello.get("enforced")) is list else []
    _emit(out, {"ev": "start", "enforced": worker_layers})
    if type(hello) is not dict or "load" not in hello or hello["load"] is not None:
        msg = hello.get("load") if type(hello) is dict and type(hello.get("load")) is str else "malformed"
        kind = hello.get("kind") if type(hello) is dict and hello.get("kind") in ("memory", "error") else "error"
        _emit(out, {"ev": "load", "error": msg[:1000], "kind": kind})
        os._exit(0)
    g = {"__name__": "__tests__", "__builtins__": builtins}
    names = hello.get("names")
    if type(names) is not dict:
        names = {}
    import importlib

    entry = tests["entry_point"]
    sources = tests["preamble"] + "".join(c["setup"] + c["source"] for c in tests["cases"])
    for name, d in list(names.items())[:10000]:
        if type(name) is not str or not name.isidentifier() or name.startswith("__") or type(d) is not dict:
            continue
        # The program's names must not stand in for the tests' own: a program ``abs`` or ``range``
        # (or a ``math`` whose ``isclose`` is always true) would decide the comparison. Builtins'
        # names are skipped (but for the entry point), and a standard module's name is bound only
        # to the judge's own copy of that very module.
        if name in _BUILTIN_NAMES and name != entry:
            continue
        if name in sys.stdlib_module_names and d.get("mod") != name and (name != entry and name + "." in sources):
            continue  # the tests use ``name.attr``: the program's object must not stand in for the module
        try:
            if "mod" in d:
                mod = d["mod"]
                if type(mod) is str and mod in _TEST_MODULES:
                    g[name] = importlib.import_module(mod)
            elif "v" in d:
                g[name] = _dec(d["v"], rpc)
            elif type(d.get("H")) is int:
                g[name] = _Remote(rpc, d["H"], str(d.get("t", ""))[:100])
        except (ImportError, _ProtocolError, ValueError, TypeError, RecursionError, ArithmeticError):
            continue
    del hello, names  # the worker's greeting may be large: only what was bound above is kept
    load_error = None
    try:
        if entry:
            if entry not in g:
                raise NameError(f"the program does not define the entry point {entry!r}")
            g["candidate"] = g[entry]
        if tests["preamble"]:
            _exec(_compile(tests["preamble"], "<tests>", "exec"), g)
    except _BaseException as exc:  # noqa: B902
        load_error = _describe(exc)
    if load_error is not None:
        _emit(out, {"ev": "load", "error": load_error, "kind": "error"})
        os._exit(0)
    _emit(out, {"ev": "load", "error": None})
    case_timeout = tests["case_timeout"]

    def on_alarm(signum, frame):
        raise _CaseTimeout(f"the test case ran longer than {case_timeout} s")

    if case_timeout:
        signal.signal(signal.SIGALRM, on_alarm)
    for i, case in enumerate(tests["cases"]):
        rpc.drain()
        if rpc.lost:
            _emit(out, {"ev": "lost", "at": i, "why": rpc.lost})
            os._exit(_JUDGE_LOST)
        ns = dict(g)
        t = _clock()
        error = kind = None
        try:
            try:
                if case_timeout:
                    rpc.deadline = t + case_timeout
                    signal.setitimer(signal.ITIMER_REAL, case_timeout + 0.5)  # the judge's own code
                if case["setup"]:
                    _exec(_compile(case["setup"], "<tests>", "exec"), ns)
                _exec(_compile(case["source"], "<tests>", "exec"), ns)
            finally:
                rpc.deadline = None
                if case_timeout:
                    signal.setitimer(signal.ITIMER_REAL, 0)
        except _WorkerLost as exc:
            error, kind = f"not run to the end: {exc}", "lost"
        except _BaseException as exc:  # noqa: B902
            error, kind = _describe(exc, case["source"]), _kind(exc)
        if rpc.lost and kind != "lost":
            error, kind = f"not run to the end: {rpc.lost}", "lost"
        _emit(out, {"ev": "case", "i": i, "ok": error is None, "error": error, "kind": kind, "t": _clock() - t})
    if rpc.lost:  # the program died (or broke the protocol) during the last case: a crash, not a done run
        _emit(out, {"ev": "lost", "at": len(tests["cases"]), "why": rpc.lost})
        os._exit(_JUDGE_LOST)
    _emit(out, {"ev": "done"})
    os._exit(0)


# ------------------------------------------------------------------------------------------- main
def _children(pid):
    """Direct children of ``pid`` (all its threads'), from /proc; [] where unreadable."""
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
    except (OSError, ValueError):
        pass
    return out


def _tree(roots):
    """Every process below ``roots`` (roots included) that is still alive."""
    seen, stack = set(), list(roots)
    while stack and len(seen) < 100000:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        stack.extend(_children(p))
    return seen


def _memory_bytes(pid):
    """Proportional set size (shared pages split among their users, so forked copies of one
    interpreter are not counted N times) plus page tables (60,000 mappings of one page cost 2 GB
    of them, found by a red-team pass); resident size where smaps_rollup is missing."""
    pte = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmPTE:"):
                    pte = int(line.split()[1]) << 10
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return (int(line.split()[1]) << 10) + pte
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _disk_usage(root, max_entries, pids=()):
    """(bytes allocated, entries) under ``root``, never following symlinks, without recursion
    (stops counting entries past ``max_entries``), plus the regular files that processes ``pids``
    hold open after unlinking them (they take disk no directory shows)."""
    total = n = 0
    seen = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if st.st_nlink == 0 and (st.st_mode & 0o170000) == 0o100000 and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
        # ... and files kept only by a mapping (the descriptor closed after mmap)
        try:
            with open(f"/proc/{pid}/maps") as f:
                spans = [line.split()[0] for line in f if line.rstrip().endswith("(deleted)")]
        except OSError:
            spans = []
        for span in spans:
            try:
                st = os.stat(f"/proc/{pid}/map_files/{span}")
            except OSError:
                continue
            if (st.st_mode & 0o170000) == 0o100000 and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    stack = [root]
    while stack and n <= max_entries:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                for e in it:
                    n += 1
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
        except OSError:
            continue
    return total, n


def _mount_tmpfs(job):
    """A size- and inode-capped tmpfs on the work dir, in this run's mount namespace: the run's
    files live there, count against one disk limit, and vanish with the namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid = job["run_uid"] if job["run_uid"] is not None else 0
    opts = (f"size={job['limits']['disk_bytes']},nr_inodes={job['limits']['inodes']},mode=0700,"
            f"uid={uid},gid={uid}").encode()
    flags = 2 | 4 | 8  # MS_NOSUID | MS_NODEV | MS_NOEXEC
    rc = libc.mount(b"tmpfs", job["workdir"].encode(), b"tmpfs", ctypes.c_ulong(flags), opts)
    return rc == 0


def _parent_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _kill_all(pids):
    """SIGKILL ``pids`` (read from /proc a moment ago) through pidfds, each after checking that the
    process behind the pidfd is still a child of the tree (or of us): a pid the program freed could
    have been reused by a process outside the run in between."""
    me = os.getpid()
    tree = set(pids) | {me}
    for p in pids:
        if p == me:
            continue
        try:
            fd = os.pidfd_open(p)
        except (OSError, AttributeError):
            continue
        try:
            if _parent_of(p) in tree:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(fd)


def main():
    """Supervise one run (module docstring)."""
    job = _read_frame(0)
    out = job["fd"]
    # Started with -S (site's .pth processing cost ~25 ms a run): the interpreter's package
    # directories are added as they are, so the program can import what is installed there.
    sys.path.extend(p for p in job.get("site", ()) if p not in sys.path)
    layers = []
    if job.get("cgroup"):
        try:  # before any fork: every process of the run is born in the run's cgroup
            with open(os.path.join(job["cgroup"], "cgroup.procs"), "w") as f:
                f.write("0")
            layers.extend(job["cgroup_layers"])
        except OSError:
            pass
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans of the program stay our descendants
    libc.prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE (inherited): no 2 MB page for one pinned 4 KB
    if job["mountns"] and _mount_tmpfs(job):
        layers.append("tmpfs")
        os.chdir(job["workdir"])  # the old cwd is the directory under the mount
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    worker = os.fork()
    if worker == 0:
        try:
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the program's input() sees EOF; the tests,
            # still unread in the stdin pipe, are out of its reach
            for fd in (out, req_w, rep_r):
                os.close(fd)
            _worker(job, req_r, rep_w)
        except _BaseException:  # noqa: B902 - a harness bug: show it on stderr
            import traceback

            traceback.print_exc()
        os._exit(70)
    os.close(req_r)
    os.close(rep_w)
    tests = _read_frame(0)  # only now: the worker was forked without the tests in memory
    judge = os.fork()
    if judge == 0:
        try:
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            _judge(job, tests, req_w, rep_r, out)
        except _BaseException:  # noqa: B902
            import traceback

            traceback.print_exc()
        os._exit(70)
    os.close(req_w)
    os.close(rep_r)
    del tests
    # The process tree is read from /proc: only where /proc is this PID namespace's (or the host's,
    # without a namespace). Under ``unshare --pid`` without ``--mount-proc`` /proc is the host's,
    # where our pid names another process: no accounting then (the namespace still kills all).
    try:
        tree_ok = os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        tree_ok = False
    if tree_ok:
        layers.append("run-limits")
    _emit(out, {"ev": "main", "layers": layers})
    lim = job["limits"]
    worker_alive = judge_alive = True
    judge_status = None
    over = None
    tick = 0
    # Exits wake the loop at once (pidfds); otherwise it accounts every 20 ms.
    wake = [0]
    for pid in (worker, judge):
        try:
            wake.append(os.pidfd_open(pid))
        except (OSError, AttributeError):
            pass
    while judge_alive:
        tick += 1
        ready, _, _ = select.select(wake, [], [], 0.02)
        if 0 in ready and not os.read(0, 64):  # the parent's stop
            break
        for fd in ready:
            if fd != 0 and fd in wake:
                wake.remove(fd)  # an exited child's pidfd stays readable: select on it no more
                os.close(fd)
        if worker_alive:
            done, status, usage = os.wait4(worker, os.WNOHANG)
            if done:
                worker_alive = False
                _emit_exit(out, status, usage, over)
        done, judge_status = os.waitpid(judge, os.WNOHANG)
        if done:
            judge_alive = False
            if os.WIFSIGNALED(judge_status):  # the test side died: not the program's exit to report
                _emit(out, {"ev": "judge", "signal": os.WTERMSIG(judge_status)})
        else:
            judge_status = None
        _reap()
        if not tree_ok:
            continue
        tree = _tree([c for c in _children(os.getpid()) if c != judge])
        if not worker_alive and tree:
            _kill_all(tree)  # the program is over: its leftovers go (and release the reply pipe)
            continue
        # The judge counts too: what it holds is mostly what the program sent it.
        if over is None and lim["memory_bytes"] and \
                sum(_memory_bytes(p) for p in tree) + _memory_bytes(judge) > lim["memory_bytes"] + _JUDGE_BASE:
            over = "memory"
        elif over is None and len(tree) > lim["processes"] + 1:
            over = "processes"
        elif over is None and "tmpfs" not in layers and tick % 5 == 0:
            # No tmpfs of its own (no mount namespace): the run's files are counted every 0.1 s.
            used, entries = _disk_usage(job["workdir"], lim["inodes"], tree)
            if used > lim["disk_bytes"] or entries > lim["inodes"]:
                over = "disk"
        if over is not None:
            _kill_all(tree)
    if worker_alive and judge_status is not None and os.WIFEXITED(judge_status) \
            and os.WEXITSTATUS(judge_status) == _JUDGE_LOST:
        # The judge saw the worker's pipe close (an exit closes descriptors first) a moment before
        # the worker became a zombie: give its exit status a moment to arrive.
        until = _clock() + 0.5
        while _clock() < until:
            done, status, usage = os.wait4(worker, os.WNOHANG)
            if done:
                _emit_exit(out, status, usage, over)
                break
            time.sleep(0.002)
    # Kill and reap every descendant (orphans come to us: we are their subreaper), so that none is
    # left as a zombie in the parent's process group when we exit.
    deadline = _clock() + 2.0
    while _clock() < deadline:
        if tree_ok:
            _kill_all(_tree(_children(os.getpid())))
        else:
            for p in (worker, judge):  # our own children, not reaped yet: their pids cannot be reused
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
        if not _reap(block=True):
            break
    os._exit(0)


def _emit_exit(out, status, usage, over):
    """The worker's end, as only its parent can see it."""
    _emit(out, {"ev": "exit", "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                "cpu": usage.ru_utime + usage.ru_stime, "over": over})


def _reap(block=False):
    """Collect exited children; True while any child remains."""
    while True:
        try:
            pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True
        if block:
            return True


if __name__ == "__main__":  # python -c <this text>; never run on import
    main()
