"""The on-disk cache of compiled tables: where it lives, what makes an entry valid, how it is
written and bounded.

The cache lives under ``platformdirs.user_cache_dir("trellis")`` (override: ``TRELLIS_CACHE_DIR``;
``TRELLIS_CACHE_DIR=""`` disables it). Entries are pickles keyed by ``cache_key`` of their inputs
and ``cache_version()`` (the package version plus a digest of constrain/'s source), written
atomically on one background thread (``write_cache_later``) and bounded by
``TRELLIS_GRAMMAR_CACHE_MB``, least recently used first out (``prune_cache_dir``). Users: the
Earley engine's shared walks (``vocab/walk_cache.py``) and the LALR engine's tables (``compile.py``).
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import pickle
import queue
import tempfile
import threading
from importlib import metadata
from pathlib import Path

@functools.cache
def cache_version() -> str:
    """Package version plus a digest of the engine's source: pickled tables are only valid for
    the code that built them, and a checkout between releases must not meet stale ones."""
    try:
        v = metadata.version("trellis-decoding")
    except metadata.PackageNotFoundError:
        v = "0+unknown"
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent
    # Every subpackage and the C kernels count too: ~0.4 MB, ~1.5 ms once.
    for f in sorted(root.rglob("*.py")) + sorted(root.rglob("*.c")):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
    return f"{v}+{h.hexdigest()[:12]}"

def grammar_cache_dir() -> Path | None:
    """The compiled-grammar cache directory, or None when caching is disabled."""
    env = os.environ.get("TRELLIS_CACHE_DIR")
    if env is not None:
        return Path(env) if env else None
    try:
        import platformdirs

        return Path(platformdirs.user_cache_dir("trellis")) / "grammars"
    except ImportError:
        return Path.home() / ".cache" / "trellis" / "grammars"

def cache_key(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()[:40]

def read_cache_file(path: Path, *, wait: bool = True) -> object | None:
    """The pickle at ``path`` or None. ``wait``: first let this process' background writes finish
    (a file it is still writing would be a miss; shared walks skip that: their own entry is in
    memory already, and waiting for unrelated writes cost 1.8 s of 14 schema compiles)."""
    if wait:
        wait_for_cache_writes()
    try:
        with open(path, "rb") as f:
            obj = pickle.load(f)
        os.utime(path)  # the LRU in prune_cache_dir goes by access time; relatime mounts may not update it
        return obj
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError):
        return None

class Pickled(bytes):
    """An object pickled by its owner (written as these bytes, read back as the object): for
    objects the owner keeps changing (memos filled on later use), which the background writer must
    not pickle while they change."""


def pickled(obj: object) -> Pickled:
    return Pickled(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def write_cache_now(path: Path, obj: object) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            if isinstance(obj, Pickled):
                f.write(obj)
            else:
                pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
        global _UNPRUNED
        _UNPRUNED += os.path.getsize(path)
        if _UNPRUNED >= PRUNE_EVERY_BYTES:  # a directory scan per small walk file was quadratic
            _UNPRUNED = 0
            prune_cache_dir(path.parent.parent if path.parent.name in ("walks", "vocab") else path.parent)
    except OSError:
        pass  # a read-only cache dir only costs speed

# The cache directory is scanned for pruning after this many bytes written (so it may exceed its
# bound by this much plus one file), not after every file.
PRUNE_EVERY_BYTES = 16 * 2**20

_UNPRUNED = PRUNE_EVERY_BYTES  # the first write of a process prunes

class _Writer:
    """One background thread that writes cache files in order (``write_cache_later``).

    A thread per file cost ~0.6 ms to start (the caller waits for it to run) and the writers
    fought the decoding thread for the GIL: 480 walk files over 39 fresh schemas spent 0.29 s in
    ``Thread.start`` alone (cProfile, maskbench). A daemon thread, drained at exit (``atexit``),
    so the interpreter completes the queued writes before it exits; each file appears atomically
    (rename) either way."""

    def __init__(self) -> None:
        self._q: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def put(self, path: Path, obj: object) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="trellis-cache-write", daemon=True)
                self._thread.start()
        self._q.put((path, obj))

    def _run(self) -> None:
        while True:
            path, obj = self._q.get()
            try:
                write_cache_now(path, obj)
            finally:
                self._q.task_done()

    def wait(self) -> None:
        self._q.join()

_WRITER = _Writer()
atexit.register(_WRITER.wait)

def write_cache_later(path: Path, obj: object) -> None:
    """``_write`` on the background writer: pickling and writing a 262k-vocabulary table (~25 MB)
    takes ~20 ms that a cold compile need not wait for."""
    _WRITER.put(path, obj)

def wait_for_cache_writes() -> None:
    """Block until the background cache writes started so far are on disk."""
    _WRITER.wait()

def prune_cache_dir(d: Path) -> None:
    """Delete the least recently used vocabulary tables (LALR ``t-*``, shared walks ``walks/w-*``,
    per-vocabulary tables ``vocab/v-*``) beyond ``TRELLIS_GRAMMAR_CACHE_MB``.

    Tables are large (json.lark on a 262k vocabulary: ~34 MB) and every distinct grammar or
    JSON schema adds one, so the cache is bounded (default 2048 MB)."""
    limit = float(os.environ.get("TRELLIS_GRAMMAR_CACHE_MB", "2048")) * 2**20
    files = []
    for p in [*d.glob("t-*.pkl"), *d.glob("walks/w-*.pkl"), *d.glob("vocab/v-*.pkl")]:
        try:
            st = p.stat()
        except OSError:
            continue
        files.append((st.st_atime, st.st_size, p))
    total = sum(f[1] for f in files)
    for _, size, p in sorted(files, key=lambda f: f[0]):
        if total <= limit:
            break
        try:
            p.unlink()
            total -= size
        except OSError:
            pass
