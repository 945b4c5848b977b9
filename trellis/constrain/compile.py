"""``compile(grammar, vocab) -> Constraint``, with a disk cache of the compiled tables.

``grammar`` is one of: a ``Regex``; a ``JsonSchema`` (compiled through its Lark text; the
constraint's ``ignored_keywords`` lists what lenient mode ignored); the name of a grammar shipped
in ``trellis/grammars/`` (``"json.lark"`` or ``"json"``); a path to a ``.lark`` file; or raw
Lark grammar text.

The cache lives under ``platformdirs.user_cache_dir("trellis")`` (override: ``TRELLIS_CACHE_DIR``;
``TRELLIS_CACHE_DIR=""`` or ``cache=False`` disables it). Entries are pickles keyed by
(grammar text, start rule, vocab.fingerprint(), trellis version, cache format). The
vocabulary-independent grammar tables are always cached; with ``precompute=True`` (the default)
the per-lexer-state vocabulary tables are built up front (tqdm progress bar) and cached too
(bounded by ``TRELLIS_GRAMMAR_CACHE_MB``, least recently used first out), otherwise they are built
lazily on first use of each lexer state during decoding.
"""

from __future__ import annotations

from collections import OrderedDict

import functools
import hashlib
import os
import pickle
import tempfile
import threading
from importlib import metadata
from pathlib import Path
from typing import Union

from trellis.constrain.cfg import CFGConstraint, CompiledGrammar, build_top_table, compile_lark
from trellis.constrain.errors import GrammarError
from trellis.constrain.json_schema import JsonSchema
from trellis.constrain.regex import Regex, RegexConstraint
from trellis.tokens import Vocabulary

GRAMMAR_DIR = Path(__file__).resolve().parent.parent / "grammars"

GrammarSpec = Union[str, os.PathLike, Regex, JsonSchema]


@functools.cache
def _version() -> str:
    """Package version plus a digest of the engine's source: pickled tables are only valid for
    the code that built them, and a checkout between releases must not meet stale ones."""
    try:
        v = metadata.version("trellis-decoding")
    except metadata.PackageNotFoundError:
        v = "0+unknown"
    h = hashlib.sha256()
    for f in sorted(Path(__file__).resolve().parent.glob("*.py")):  # ~0.3 MB, ~1.5 ms once
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return f"{v}+{h.hexdigest()[:12]}"


def cache_dir() -> Path | None:
    """The compiled-grammar cache directory, or None when caching is disabled."""
    env = os.environ.get("TRELLIS_CACHE_DIR")
    if env is not None:
        return Path(env) if env else None
    try:
        import platformdirs

        return Path(platformdirs.user_cache_dir("trellis")) / "grammars"
    except ImportError:
        return Path.home() / ".cache" / "trellis" / "grammars"


def shipped_grammars() -> list[str]:
    """File names of the grammars shipped in ``trellis/grammars/``."""
    return sorted(p.name for p in GRAMMAR_DIR.glob("*.lark"))


def load_grammar_text(grammar: str | os.PathLike) -> tuple[str, str]:
    """(text, source name) for a shipped grammar name, a path, or raw grammar text."""
    if isinstance(grammar, os.PathLike):
        p = Path(grammar)
        return p.read_text(encoding="utf-8"), str(p)
    g = str(grammar)
    if "\n" not in g and ":" not in g.replace("\\", "/").split("/")[-1]:
        name = g if g.endswith(".lark") else g + ".lark"
        shipped = GRAMMAR_DIR / name
        if shipped.is_file():
            return shipped.read_text(encoding="utf-8"), name
        p = Path(g).expanduser()
        if p.is_file():
            return p.read_text(encoding="utf-8"), str(p)
        if g.endswith(".lark") or os.sep in g:
            raise GrammarError(f"no such grammar file (shipped: {', '.join(shipped_grammars())})", source=g)
    return g, "<grammar>"


def _key(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()[:40]


def _read(path: Path) -> object | None:
    wait_for_cache_writes()
    try:
        with open(path, "rb") as f:
            obj = pickle.load(f)
        os.utime(path)  # the LRU in _prune goes by access time; relatime mounts may not update it
        return obj
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError):
        return None


def _write(path: Path, obj: object) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
        _prune(path.parent)
    except OSError:
        pass  # a read-only cache dir only costs speed


_PENDING: list[threading.Thread] = []


def _write_later(path: Path, obj: object) -> None:
    """``_write`` on a background thread: pickling and writing a 262k-vocabulary table (~25 MB)
    takes ~20 ms that a cold compile need not wait for. Not a daemon thread, so the interpreter
    completes the write before it exits; the file appears atomically (rename) either way."""
    t = threading.Thread(target=_write, args=(path, obj), name="trellis-cache-write")
    t.start()
    _PENDING.append(t)


def wait_for_cache_writes() -> None:
    """Block until the background cache writes started so far are on disk."""
    while _PENDING:
        _PENDING.pop().join()


def _prune(d: Path) -> None:
    """Delete the least recently used vocabulary tables beyond ``TRELLIS_GRAMMAR_CACHE_MB``.

    Tables are large (json.lark on a 262k vocabulary: ~34 MB) and every distinct grammar or
    JSON schema adds one, so the cache is bounded (default 2048 MB)."""
    limit = float(os.environ.get("TRELLIS_GRAMMAR_CACHE_MB", "2048")) * 2**20
    files = []
    for p in d.glob("t-*.pkl"):
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


def compile_grammar(text: str, *, source: str = "<grammar>", start: str = "start",
                    cache: bool = True, top_table: bool = False) -> CompiledGrammar:
    """Vocabulary-independent tables of Lark grammar text (disk-cached); ``top_table``: with the
    viability answers of every stack top (``cfg.build_top_table``; for precomputed compiles)."""
    d = cache_dir() if cache else None
    path = d / f"g-{_key(text, start, _version())}.pkl" if d else None
    g = _read(path) if path is not None else None
    if isinstance(g, CompiledGrammar):
        g.source = source
        if not top_table or g.top_table is not None:
            return g
    else:
        g = compile_lark(text, source=source, start=start)
    if top_table:
        build_top_table(g)
    if path is not None:
        _write(path, g)
    return g


def compile(grammar: GrammarSpec, vocab: Vocabulary, *, start: str = "start", cache: bool = True,
            precompute: bool = True, progress: bool | None = None) -> CFGConstraint | RegexConstraint:
    """Compile a grammar for ``vocab`` into a Constraint (exact token masks).

    ``precompute=True`` (default) walks the vocabulary from every lexer state now and caches the
    tables on disk with the vocabulary fingerprint, so no mask pays a table build during decoding
    (one build is ~3-15 ms on a 262k vocabulary). ``precompute=False`` builds each on first use:
    cheaper when only ``advance`` is needed (e.g. validating documents). ``progress`` shows a
    tqdm bar while precomputing (default: when stderr is a terminal).
    """
    if isinstance(grammar, Regex):
        return grammar.compile(vocab)
    ignored: tuple = ()
    if isinstance(grammar, JsonSchema):
        text, source, ignored = grammar.to_lark(), "<json schema>", grammar.ignored_keywords
    else:
        text, source = load_grammar_text(grammar)
    # One constraint per (grammar, vocabulary) per process: its lexer-state tables and mask cache
    # are the expensive part, and states are immutable values, so callers can share it.
    key = (text, source, start, vocab.fingerprint(), precompute) + ((ignored,) if ignored else ())
    hit = _COMPILED.get(key)
    if hit is not None:
        _COMPILED.move_to_end(key)
        return hit
    c = _compile_new(text, source, vocab, start=start, cache=cache, precompute=precompute, progress=progress)
    if isinstance(grammar, JsonSchema):
        c.ignored_keywords = ignored  # type: ignore[attr-defined]
    _COMPILED[key] = c
    while len(_COMPILED) > _COMPILED_MAX:
        _COMPILED.popitem(last=False)
    return c


_COMPILED: "OrderedDict[tuple[str, str, str, str, bool], CFGConstraint]" = OrderedDict()
_COMPILED_MAX = 8  # each holds vocabulary tables (tens of MB on a 262k vocabulary)


def _compile_new(text: str, source: str, vocab: Vocabulary, *, start: str, cache: bool, precompute: bool,
                 progress: bool | None) -> CFGConstraint:
    g = compile_grammar(text, source=source, start=start, cache=cache, top_table=precompute)
    if not precompute:
        return CFGConstraint(g, vocab)
    d = cache_dir() if cache else None
    # Keyed by the global lexer table, not the text: the tables are a function of (gtrans, gfinal,
    # vocabulary) alone, while lark numbers LALR states differently from one process to the next
    # (set orders), so a grammar recompiled after its g-*.pkl was lost must not meet old tables.
    lex = hashlib.sha256(g.gtrans.tobytes() + g.gfinal.tobytes()).hexdigest()
    path = d / f"t-{_key(lex, vocab.fingerprint(), _version())}.pkl" if d else None
    tables = _read(path) if path is not None else None
    c = CFGConstraint(g, vocab, tables=tables if isinstance(tables, dict) else None)
    if not isinstance(tables, dict):
        precompute_tables(c, progress=progress)
        if path is not None:
            _write_later(path, dict(c.tables))
    return c


def precompute_tables(c: CFGConstraint, *, progress: bool | None = None) -> None:
    """Walk the vocabulary from every (global) lexer state of ``c``, then every crossing set's
    rests from the lexers that can follow (tqdm bar over the states when ``progress``)."""
    import sys

    keys = range(len(c.grammar.gfinal))
    if progress is None:
        progress = sys.stderr.isatty()
    it = keys
    if progress:
        from tqdm import tqdm

        it = tqdm(keys, desc=f"compiling {c.grammar.source}", unit="state")
    for g in it:
        c.walk(g)
    c.precompute_continuations()
