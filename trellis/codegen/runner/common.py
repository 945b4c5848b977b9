"""Runner part (first, after ``seccomp.py``): the imports, aliases and limits that every later part
uses, and the framing: ``<size>\n<json>`` frames read from the parent's stdin (``_read_frame``) and
one JSON line per event or message written to a pipe (``_emit``). Stdlib only; a text of the child's
one script (``runner/__init__.py``), never imported, so its imports serve the parts after it.
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
_MAX_DEPTH = 500  # nesting of a returned value (the runner raises its recursion limit to match)
_MAX_ITEMS = 1 << 20  # elements materialised from one iterator handle
_GLOBAL_ITEMS = 10000  # a program's data global larger than this reaches the tests as a handle
_FACTORIES = (int, float, str, list, dict, set, tuple)  # defaultdict factories the judge rebuilds
_NAMEDTUPLES = {}  # (name, fields) -> the judge's own namedtuple class
_JUDGE_LOST = 3  # the judge's exit status when the worker died or broke the protocol
_JUDGE_BASE = 64 << 20  # the judge's own interpreter and test code, not charged to the program
_MEMORY_CGROUPS = ("cgroup1-memory", "cgroup-memory")  # layers under which the kernel holds the program's memory


def _builtin_name(cls):
    """The name of the nearest builtin class of ``cls`` (a ValueError subclass of the program's is a
    ValueError to the tests' ``except``); "Exception" if none."""
    for c in getattr(cls, "__mro__", ()):
        if getattr(builtins, c.__name__, None) is c:
            return c.__name__
    return "Exception"


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
