"""Vocabulary walks shared across grammars and across runs.

A walk of the whole vocabulary from one DFA state (``rest_walk.walk``) depends only on the
sub-automaton reachable from that state, the bytes that may follow the terminal and the
vocabulary, never on the grammar around it: a JSON string's interior, a number, whitespace are the
same in every schema and grammar. ``SharedWalks`` keys them by (vocabulary fingerprint, canonical
shape): an in-process LRU bounded by bytes (``TRELLIS_WALK_CACHE_MB``, default 256), backed by
pickles under ``<cache dir>/walks`` (written on a background thread, pruned with the LALR tables
under ``TRELLIS_GRAMMAR_CACHE_MB``; ``TRELLIS_CACHE_DIR=""``
disables the disk part, like the grammar cache).

An entry is ``(packed, walk)``: the packed bitset of the tokens that stay inside, and the walk
without its per-token ``inside`` array (only the packed form is used at the top level).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Hashable

import numpy as np

from trellis.constrain.vocab.rest_walk import RestSet, Walk

Entry = tuple[np.ndarray, Walk]


def _nbytes(e: Entry) -> int:
    packed, w = e
    n = packed.nbytes + w.inside.nbytes + w.src.nbytes + w.inv.nbytes
    if w.cross is not None:
        n += w.cross.tid.nbytes + w.cross.base.nbytes + w.cross.length.nbytes
    return n


class SharedWalks:
    """Process-wide LRU of vocabulary walks with a disk cache behind it."""

    def __init__(self) -> None:
        self._mem: OrderedDict[tuple[str, Hashable], Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._mem.clear()
            self._bytes = 0

    def get(self, vocab_fp: str, shape: Hashable, build: Callable[[], Entry], *, disk: bool = True) -> Entry:
        """The entry for ``shape``: from memory, else from disk (unless ``disk`` is False: for
        walks too cheap to have been persisted), else ``build()``."""
        key = (vocab_fp, shape)
        with self._lock:
            hit = self._mem.get(key)
            if hit is not None:
                self._mem.move_to_end(key)
                return hit
        path = _path(vocab_fp, shape) if disk else None
        hit = _read(path) if path is not None and _on_disk(path) else None
        if hit is None:
            t0 = time.perf_counter()
            hit = build()
            if path is not None and time.perf_counter() - t0 >= PERSIST_MIN_S:
                _write_later(path, _snapshot(hit))
                LISTED.setdefault(path.parent, set()).add(path.name)
        self._put(key, hit)
        return hit

    def _put(self, key: tuple[str, Hashable], e: Entry) -> None:
        limit = float(os.environ.get("TRELLIS_WALK_CACHE_MB", "256")) * 2**20
        with self._lock:
            self._mem[key] = e
            self._bytes += _nbytes(e)
            while self._bytes > limit and len(self._mem) > 1:
                _, old = self._mem.popitem(last=False)
                self._bytes -= _nbytes(old)


SHARED = SharedWalks()


# Walks cheaper than this to build are kept in memory only: reading a pickle back costs about as
# much, and a file per literal walk (hundreds per schema) made the background writer compete with
# decoding for the GIL. String interiors, numbers and whitespace (5-15 ms on Gemma) are persisted.
PERSIST_MIN_S = 0.002

# File names present in each walks folder, listed once per process (then kept up to date with this
# process' own writes): a miss costs no open(). Files another process writes later are not seen
# until the next process; that only costs a rebuild.
LISTED: dict[Path, set[str]] = {}


def _on_disk(path: Path) -> bool:
    names = LISTED.get(path.parent)
    if names is None:
        try:
            names = set(os.listdir(path.parent))
        except OSError:
            names = set()
        LISTED[path.parent] = names
    return path.name in names


# The walks folder per value of TRELLIS_CACHE_DIR (read on every lookup: it may change at run
# time): building the Path each time was ~11 us of a ~22 us miss.
_WALK_DIRS: dict[str | None, Path | None] = {}


def _path(vocab_fp: str, shape: Hashable) -> Path | None:
    from trellis.constrain.disk_cache import cache_version, grammar_cache_dir

    env = os.environ.get("TRELLIS_CACHE_DIR")
    d = _WALK_DIRS.get(env, _WALK_DIRS)
    if d is _WALK_DIRS:
        base = grammar_cache_dir()
        d = _WALK_DIRS[env] = None if base is None else base / "walks"
    if d is None:
        return None
    return d / f"w-{key_digest((vocab_fp, cache_version(), shape), 20).hex()}.pkl"


def key_digest(key: Hashable, size: int = 16) -> bytes:
    """A digest of a walk key, nested tuples of bytes and small values: bytes (canonical shapes, up
    to ~256 KB) are hashed as they are, never through ``repr``. Names disk entries, and stands for
    the key of the leftovers a walk leaves (``scannerless._walk``). Memoised (``_DIGESTS``): a new
    walk's key was digested twice or three times, the walk, its leftovers and its disk name, each a
    Python recursion over the key (~6% of bench_fresh's slowest fresh masks, cProfile)."""
    global _DIGEST_BYTES
    hit = _DIGESTS.get((key, size))
    if hit is None:
        hit, n = _digest(key, size)
        if _DIGEST_BYTES + n > DIGESTS_BYTES or len(_DIGESTS) >= 1 << 14:
            _DIGESTS.clear()
            _DIGEST_BYTES = 0
        _DIGESTS[(key, size)] = hit
        _DIGEST_BYTES += n + 200
    return hit


# key_digest's memo, bounded by the bytes its keys hold (a canonical shape is up to ~256 KB; Python
# caches a bytes object's hash, so a lookup hashes it once).
DIGESTS_BYTES = 32 * 2**20
_DIGESTS: dict[tuple[Hashable, int], bytes] = {}
_DIGEST_BYTES = 0


def clear_digests() -> None:
    """Forget ``key_digest``'s memo (``compile.clear_caches``)."""
    global _DIGEST_BYTES
    _DIGESTS.clear()
    _DIGEST_BYTES = 0


def _digest(key: Hashable, size: int) -> tuple[bytes, int]:
    """(the digest, the bytes the key holds)."""
    h = hashlib.blake2b(digest_size=size)
    held = [0]

    def feed(x: object) -> None:
        if isinstance(x, bytes):
            h.update(b"b%d:" % len(x))
            h.update(x)
            held[0] += len(x)
        elif isinstance(x, tuple):
            h.update(b"t%d:" % len(x))
            for y in x:
                feed(y)
        else:
            r = repr(x).encode("utf-8", "surrogatepass")
            h.update(b"r%d:" % len(r))
            h.update(r)

    feed(key)
    return h.digest(), held[0]


def _snapshot(e: Entry) -> Entry:
    """A copy of ``e`` with only its dataclass fields, for the background writer: the live
    objects grow lazy attributes (``Walk._csr``, ``RestSet._firsts``) while in use, and pickling a
    ``__dict__`` that another thread adds to raises "dictionary changed size during iteration"."""
    packed, w = e
    cross = None
    if w.cross is not None:
        c = w.cross
        cross = RestSet(c.tid, c.base, c.length, c.lo, c.distinct, c.key)  # the key names its order
    return packed, Walk(w.inside, cross, w.src, w.inv)


def _read(path: Path) -> Entry | None:
    from trellis.constrain.disk_cache import read_cache_file as read

    obj = read(path, wait=False)
    return obj if isinstance(obj, tuple) and len(obj) == 2 else None


def _write_later(path: Path, e: Entry) -> None:
    from trellis.constrain.disk_cache import write_cache_later as write_later

    write_later(path, e)
