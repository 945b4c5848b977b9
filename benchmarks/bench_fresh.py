"""What a user with a NEW grammar or JSON schema waits for: trellis vs xgrammar vs llguidance.

    python benchmarks/bench_fresh.py [--schemas 100] [--docs-per-grammar 3] [--grammars-only]
                                     [--threads 1] [--seed 0] [--out results.json]

Vocabulary: the embedded Gemma 3 270M's 262,144 tokens (``trellis.models.load()``). Every engine
runs on its default path: trellis ``compile(spec, vocab)`` with no options (Lark and GBNF grammars
on the scannerless Earley engine, ``JsonSchema`` too); xgrammar 0.2.8
``GrammarCompiler(info, max_threads=--threads, cache_enabled=False)`` + ``GrammarMatcher``;
llguidance a new ``LLMatcher``. The peers read the HF tokenizer themselves
(``trellis.integrations.xgrammar.tokenizer_info(vocab, tokenizer)``,
``trellis.integrations.llguidance.lltokenizer(vocab, tokenizer)``), and their masks are filled
and tokens consumed with their native calls (``fill_next_token_bitmask`` / ``accept_token``;
``unsafe_compute_mask_ptr`` / ``consume_token``), not through the replay adapters, whose extra
EOS masking would be charged to them.

Inputs (every engine in a row gets the same token sequence: the HF tokenizer's tokens of one
document, kept only where they decode back to the document's bytes and every engine that
compiled the input accepts them with EOS allowed at the end; a peer that rejects every document
trellis accepts is dropped for that input and reported):

* grammars: the shipped ones (``shipped_grammars()``; documents from ``bench_masks.grammar_docs``)
  and the corpus under ../shared/data/grammars (Lark files in lark/ and outlines/, GBNF files in
  llama.cpp/). Corpus documents are random walks with trellis itself (an untimed compile whose
  caches are undone, see below): tokens drawn from the mask with a seeded RNG, weighted
  1/len(bytes)^2 and x20 for tokens without letters or digits, stopping on a coin flip (0.15)
  where EOS is allowed after at least 5 tokens, at most 80 tokens, 60 s per grammar (the walks'
  compile has no work bound: a document a walk cannot finish under the default bound would
  otherwise never be chosen, and lark.lark and advanced_template_lark.lark dropped out that way;
  the timed compile is the default one, so such a document's mask past the bound is reported as
  an error of trellis, the default path's answer); Lark
  documents are kept only if Lark's Earley parser (``lexer="dynamic_complete"``) parses them,
  GBNF documents only if the peers accept them (the check above: xgrammar is the GBNF oracle,
  llguidance where xgrammar refuses the grammar). trellis gets the shipped name or the file
  path; xgrammar gets GBNF through ``Grammar.from_ebnf(text, root_rule_name="root")`` and Lark
  through ``compile_lark(lark_for_llguidance(text))`` (json.lark: ``JSON_EBNF``, as in
  bench_masks.py);
  llguidance gets ``grammar_from_lark(lark_for_llguidance(text))`` and GBNF through
  ``llguidance.grammar_from("gbnf", text)`` (its own GBNF-to-Lark converter, timed as part of its
  compile). ``--docs-per-grammar`` documents per grammar, each a separate fresh request.
* schemas: maskbench (``bench_jsonschema.load_cases(None, None, "maskbench")``, sources
  interleaved, Handwritten and Synthesized dropped), the first ``--schemas`` that trellis compiles
  and that have a valid instance every engine accepts; the document is the first such valid
  instance, keys in the grammar's order (``json_schema.order_keys``), compact
  ``json.dumps(x, separators=(",", ":"), ensure_ascii=False)``. trellis ``JsonSchema(schema,
  closed_objects=False)`` (the default closes objects; open matches the peers' options below);
  xgrammar ``compile_json_schema(..., any_whitespace=False, separators=(",", ":"),
  strict_mode=False)``; llguidance ``grammar_from_json_schema(..., defaults={"item_separator":
  ",", "key_separator": ":"})``. Schemas trellis refuses (SchemaError/GrammarError) are counted.

Fresh means the input is new to the process (``--isolation grammar``, default): the run's
``TRELLIS_CACHE_DIR`` is a new empty temporary folder, and before every timed trellis compile
the in-process memo keyed by grammar text is cleared (``compile.COMPILED``), the grammar-keyed
disk entries (compiled tables) removed, and the spec is a new copy (a ``JsonSchema`` keeps its Lark
translation on the object). What trellis shares across grammars (``walk_cache.SHARED`` and
``<cache>/walks``: vocabulary walks of common terminals; the memos keyed by ONE terminal's regex:
regex -> byte DFA, its parts and parse tree (``regex.DFA_MEMO``, ``regex.PARTS_MEMO``,
``regex_compile.PARSED``: a JSON string, number or integer terminal is the same regex in every
schema), regex -> FSM, pattern, fraction-range, scaled-DFA, format, JSON-escape and alphabet-union
memos) carries over from EARLIER inputs of the run, as in a server that has served them, but is
reset before each timed compile to its state before the current input: the untimed
compiles that generate and check documents run in a scratch cache dir and are undone, and a
grammar's second document does not find its first document's walks. ``--isolation process``
clears all of it before every compile (``clear_caches()`` + the memos above, empty cache dir): the
first grammar a new process with an empty cache ever sees. The per-vocabulary tables are kept in both. xgrammar gets a
new ``GrammarCompiler`` without cache (created untimed) per compile, llguidance a new matcher.
Imports, first-call paths (one tiny grammar, GBNF and schema per engine, then every trellis
memo cleared) and the per-tokenizer setup (trellis' ``prepare_vocabulary``: token matrix, trie, sorted
order, slices; xgrammar's TokenizerInfo,
llguidance's LLTokenizer) happen once, untimed, before the first input (setup times printed).

Timed per input and engine (``time.perf_counter``; ``torch.set_num_threads(--threads)``):

* compile: trellis ``compile(...)`` + ``start()``; xgrammar (``Grammar.from_ebnf`` +)
  ``compile_*`` + ``GrammarMatcher(compiled)``; llguidance ``grammar_from_*`` + ``LLMatcher(...)``.
* (a) fresh-request overhead: compile + every mask along the document, which this compiled
  object has never seen: at each of the len+1 positions ``fill_mask`` (the last one with EOS
  allowed), plus ``advance`` for each token.
* (b) time to first mask: compile + the first ``fill_mask`` (from the same run as (a)).
* (c) steady state: the SAME document again on the same compiled object (state from ``start()``,
  xgrammar/llguidance ``reset()``): each ``fill_mask`` alone; median and p99 pooled over all
  positions of all inputs.

Python's garbage collector: before each engine's timed (a) run the harness calls ``gc.collect()``
(all engines alike), so a full (generation-2) collection inside the timed region is paid for the
engine's own allocations, not for the harness's (peer wrappers, the Lark oracle, document
generation: without it, about one 300-450 ms pause every ~25 inputs landed on whichever trellis
mask was running, on sql_select.lark once per document). Collections are left ON inside the
timed region: those trellis triggers itself count, and the tables say how many there were and how
long they took (``gc2`` per engine).

Engines run (a) one after another within an input (the order rotates from input to input), then
(c) interleaved position by position, so machine noise hits all alike ((c) stops after 60 s, keeping
the positions every engine finished, and says how long each engine's masks took). A trellis compile + walk
past 60 s (or a random walk generation past 60 s) is abandoned (SIGALRM) and reported; such
inputs are left out of the tables (their count is printed, and (a) p95 is also given counting
them as 60 s). Tables: per input kind, per engine, medians and p95 over inputs of compile, (a),
(b), and pooled median/p99 of (c); ratios trellis/llguidance for (a) and trellis/xgrammar for
(c) over the inputs both engines ran; the distribution of every mask along the fresh documents
(the (a) runs' masks) per engine, with trellis' worst five and where they were; then the targets
checked: (a) median <= 2x llguidance's and p95 <= 250 ms; (b) median <= 10 ms; (c) median <=
xgrammar's and p99 <= 2 ms; and issue 59's: (a) median <= 1.0x llguidance's, p95 <= 50 ms on
schemas and 120 ms on grammars, (b) median <= llguidance's, fresh masks p99 <= 1 ms. The machine is
shared: absolute times are noisy, ratios from one run are the comparison. The last line starts
with SUMMARY.
"""

from __future__ import annotations

import argparse
import gc
import glob
import importlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from bench_jsonschema import load_cases  # noqa: E402
from bench_masks import grammar_docs, timed  # noqa: E402

CORPUS = os.path.normpath(os.path.join(ROOT, "..", "shared", "data", "grammars"))
ENGINES = ("trellis", "xgrammar", "llguidance")
LIMIT_S = 60.0  # per input: trellis compile + walk, and per grammar: random-walk generation
MAX_WALK_TOKENS = 80
MIN_WALK_TOKENS = 5

# In-process memos (module, attribute). GRAMMAR_MEMOS are keyed by grammar text and always
# cleared before a trellis compile; SHARED_MEMOS hold pieces many grammars share (a terminal's
# regex -> DFA or FSM, vocabulary walks of common terminals): kept across inputs with --isolation
# grammar (never warmed by the input itself), cleared with --isolation process. Absent ones are
# skipped. The regex -> byte DFA memos were GRAMMAR_MEMOS until the twenty-first session (their key
# is one terminal's regex, like _FSM_CACHE's): 50 median maskbench schemas, in-process A/B, 3 reps,
# kept from 40 earlier schemas vs cleared: compile median 2.74 -> 1.95 ms, (a) per input 0.911.
GRAMMAR_MEMOS = [("trellis.constrain.compile", "COMPILED")]
SHARED_MEMOS = [("trellis.constrain.automata.regex", "DFA_MEMO"), ("trellis.constrain.automata.regex", "PARTS_MEMO"),
                ("trellis.constrain.automata.regex", "PENDING_PARTS"), ("trellis.constrain.automata.encoded_dfa", "_CLASS_NFA"),
                ("trellis.constrain.automata.regex_compile", "PARSED"), ("trellis.constrain.automata.regex_compile", "_CHAR_SETS"),
                ("trellis.constrain.vocab.walk_cache", "SHARED"), ("trellis.constrain.automata.regex_ir", "_FSM_CACHE"),
                ("trellis.constrain.frontends.pattern", "_MATCHERS"), ("trellis.constrain.frontends.ranges", "_FRAC_MEMO"),
                ("trellis.constrain.vocab.rest_walk", "_SCALED"), ("trellis.constrain.frontends.formats", "_FORMAT_IR"),
                ("trellis.constrain.grammar.grammar_ir", "IMPORTS_MEMO"), ("trellis.constrain.vocab.dfa_shapes", "_SHAPES"),
                ("trellis.constrain.automata.regex_ir", "_ENC_MEMO"), ("trellis.constrain.frontends.pattern", "_IR_MEMO"),
                ("trellis.constrain.automata.fsm_product", "_UNIONS"), ("trellis.constrain.automata.byte_dfa", "LITERAL_MEMO"),
                ("trellis.constrain.grammar.plain_patterns", "PLAIN_MEMO"), ("trellis.constrain.grammar.analysis", "BOOL_ROWS"),
                ("trellis.constrain.vocab.walk_cache", "_DIGESTS"), ("trellis.constrain.vocab.counted_walk", "MEMO")]
SHARED_DISK = ("walks",)  # cache-dir entries that are not keyed by a grammar (walk_cache.py)


def _memo(mod: str, attr: str) -> Any:
    try:
        return getattr(importlib.import_module(mod), attr, None)
    except ImportError:
        return None


def _wait_writes() -> None:
    importlib.import_module("trellis.constrain.disk_cache").wait_for_cache_writes()


class Fresh:
    """Cache directories and in-process memos around trellis compiles (module docstring).

    ``isolation="grammar"``: timed compiles use one run-wide cache dir from which every
    grammar-keyed entry is removed before each compile; the shared entries (``walks/``) and the
    shared memos carry over from earlier inputs but are reset, before each timed compile, to their
    state before the current input (``snapshot``), so neither the untimed checking compiles nor
    an earlier document of the same grammar warm it. ``isolation="process"``: every compile starts
    from an empty cache dir and all memos cleared (``clear_caches()`` where trellis has it).
    Untimed compiles (document generation and checks) use a scratch dir emptied each time."""

    def __init__(self, isolation: str) -> None:
        self.isolation = isolation
        self.root = tempfile.mkdtemp(prefix="trellis-fresh-")
        self.run_dir = os.path.join(self.root, "run")
        self.scratch = os.path.join(self.root, "scratch")
        os.makedirs(self.run_dir)
        os.environ["TRELLIS_CACHE_DIR"] = self.run_dir
        self._snap: dict | None = None

    @staticmethod
    def _empty(d: str, keep: tuple[str, ...] = ()) -> None:
        os.makedirs(d, exist_ok=True)
        for name in os.listdir(d):
            if name in keep:
                continue
            p = os.path.join(d, name)
            shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else os.unlink(p)

    def _clear(self, memos: list[tuple[str, str]]) -> None:
        for mod, attr in memos:
            m = _memo(mod, attr)
            if m is not None and hasattr(m, "clear"):
                m.clear()

    def snapshot(self) -> None:
        """Remember the shared state before an input's first (untimed) compile."""
        _wait_writes()
        snap: dict = {"disk": {}}
        for mod, attr in SHARED_MEMOS:
            m = _memo(mod, attr)
            if m is None:
                continue
            if isinstance(m, dict):
                snap[(mod, attr)] = m.copy()
            elif isinstance(getattr(m, "_mem", None), dict):  # walk_cache.SharedWalks
                snap[(mod, attr)] = (m._mem.copy(), getattr(m, "_bytes", None))
            else:
                snap[(mod, attr)] = None  # unknown shape: cleared on restore (stricter)
        for sub in SHARED_DISK:
            d = os.path.join(self.run_dir, sub)
            snap["disk"][sub] = set(os.listdir(d)) if os.path.isdir(d) else set()
        saved = _memo("trellis.constrain.vocab.alike_patch", "saved")  # reference walks, on memoised DFAs
        if saved is not None:
            snap["alike"] = saved()
        self._snap = snap

    def _restore(self) -> None:
        snap = self._snap or {"disk": {}}
        for mod, attr in SHARED_MEMOS:
            m = _memo(mod, attr)
            if m is None:
                continue
            saved = snap.get((mod, attr))
            if isinstance(m, dict):
                m.clear()
                m.update(saved or {})
            elif saved is not None:
                lock = getattr(m, "_lock", None)
                if lock is not None:
                    lock.acquire()
                try:
                    m._mem.clear()
                    m._mem.update(saved[0])
                    if saved[1] is not None:
                        m._bytes = saved[1]
                finally:
                    if lock is not None:
                        lock.release()
            elif hasattr(m, "clear"):
                m.clear()
        restore = _memo("trellis.constrain.vocab.alike_patch", "restore")
        if restore is not None:
            restore(snap.get("alike", []))
        for sub in SHARED_DISK:
            d = os.path.join(self.run_dir, sub)
            if os.path.isdir(d):
                for name in set(os.listdir(d)) - snap["disk"].get(sub, set()):
                    try:
                        os.unlink(os.path.join(d, name))
                    except OSError:
                        pass

    def untimed(self) -> None:
        """Before an untimed compile: grammar memos cleared, an empty scratch cache dir."""
        _wait_writes()
        self._clear(GRAMMAR_MEMOS)
        if self.isolation == "process":
            self._clear_all()
        self._empty(self.scratch)
        os.environ["TRELLIS_CACHE_DIR"] = self.scratch

    def timed(self) -> None:
        """Before a timed compile: the grammar is new to the process (class docstring)."""
        _wait_writes()
        self._clear(GRAMMAR_MEMOS)
        if self.isolation == "process":
            self._clear_all()
            self._empty(self.run_dir)
        else:
            self._restore()
            self._empty(self.run_dir, keep=SHARED_DISK)
        os.environ["TRELLIS_CACHE_DIR"] = self.run_dir

    def _clear_all(self) -> None:
        tc = importlib.import_module("trellis.constrain.compile")
        if hasattr(tc, "clear_caches"):
            tc.clear_caches()
        self._clear(GRAMMAR_MEMOS + SHARED_MEMOS)

    def close(self) -> None:
        try:
            _wait_writes()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


class Timeout(Exception):
    pass


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise Timeout in the main thread after ``seconds`` (SIGALRM; Python code only)."""
    def handler(signum: int, frame: Any) -> None:
        raise Timeout(f"> {seconds:g} s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def first_line(e: BaseException) -> str:
    s = " ".join(str(e).split())
    return f"{type(e).__name__}: {s[:150]}" if s else type(e).__name__


# ----------------------------------------------------------------------------- engines


class Engine:
    """One compiled object of one engine for one input: compile() (timed by the caller), then a
    walk with reset / fill / advance. ``new()`` gives an uncompiled twin (fresh compile)."""

    name: str

    def new(self) -> "Engine": ...

    def compile(self) -> None: ...

    def reset(self) -> None: ...

    def fill(self, row: torch.Tensor) -> None: ...

    def advance(self, token: int) -> bool: ...

    def accepts_end(self) -> bool: ...


class TrellisEngine(Engine):
    name = "trellis"

    def __init__(self, spec: Any, vocab: Any) -> None:
        self.spec, self.vocab = spec, vocab

    def new(self) -> "TrellisEngine":
        # A copy of the spec the timed compile has never seen: JsonSchema keeps its Lark translation
        # on the object (``_out``), so the untimed compile that picks the documents handed every
        # timed compile before 2026-11-27 (seventeenth session) a schema already translated.
        spec = self.spec
        if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
            spec = dataclasses.replace(spec)
        return TrellisEngine(spec, self.vocab)

    def compile(self) -> None:
        from trellis.constrain import compile

        self.c = compile(self.spec, self.vocab)
        self.s = self.c.start()

    def reset(self) -> None:
        self.s = self.c.start()

    def fill(self, row: torch.Tensor) -> None:
        self.c.fill_mask(self.s, row)

    def advance(self, token: int) -> bool:
        nxt = self.c.advance(self.s, token)
        if nxt is None:
            return False
        self.s = nxt
        return True

    def accepts_end(self) -> bool:
        return bool(self.c.is_accepting(self.s))


class XGrammarEngine(Engine):
    name = "xgrammar"

    def __init__(self, make: Callable[[Any], Any], info: Any, threads: int, eos: int) -> None:
        self.make, self.info, self.threads, self.eos = make, info, threads, eos

    def new(self) -> "XGrammarEngine":
        import xgrammar as xgr

        e = XGrammarEngine(self.make, self.info, self.threads, self.eos)
        e.compiler = xgr.GrammarCompiler(self.info, max_threads=self.threads, cache_enabled=False)  # untimed
        return e

    def compile(self) -> None:
        import xgrammar as xgr

        self.compiled = self.make(self.compiler)
        self.m = xgr.GrammarMatcher(self.compiled)

    def reset(self) -> None:
        self.m.reset()

    def fill(self, row: torch.Tensor) -> None:
        self.m.fill_next_token_bitmask(row.view(1, -1), 0)

    def advance(self, token: int) -> bool:
        return bool(self.m.accept_token(token))

    def accepts_end(self) -> bool:
        return bool(self.m.accept_token(self.eos)) and bool(self.m.is_terminated())


class LLGuidanceEngine(Engine):
    name = "llguidance"

    def __init__(self, make: Callable[[], str], lt: Any) -> None:
        self.make, self.lt = make, lt

    def new(self) -> "LLGuidanceEngine":
        return LLGuidanceEngine(self.make, self.lt)

    def compile(self) -> None:
        import llguidance

        g = self.make()
        self.m = llguidance.LLMatcher(self.lt, g, log_level=0)
        if self.m.is_error():
            raise ValueError(self.m.get_error())

    def reset(self) -> None:
        self.m.reset()

    def fill(self, row: torch.Tensor) -> None:
        self.m.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * 4)

    def advance(self, token: int) -> bool:
        return bool(self.m.consume_token(token))

    def check_advance(self, token: int) -> bool:
        # A rejected consume_token leaves an LLMatcher in an error state: validate first.
        return self.m.validate_tokens([token]) == 1 and bool(self.m.consume_token(token))

    def accepts_end(self) -> bool:
        return bool(self.m.is_accepting())


# ----------------------------------------------------------------------------- inputs


@dataclass
class Input:
    kind: str  # "grammars" | "schemas"
    name: str
    trellis_spec: Any
    xgr_make: Callable[[Any], Any] | None  # compiler -> compiled grammar
    llg_make: Callable[[], str] | None
    docs: list[str] = field(default_factory=list)  # candidate documents
    is_lark: bool = False
    text: str = ""
    path: str | None = None
    notes: list[str] = field(default_factory=list)


def grammar_inputs(names: list[str] | None) -> list[Input]:
    import llguidance

    from trellis.constrain import load_grammar_text, shipped_grammars
    from trellis.integrations.llguidance import lark_for_llguidance
    from trellis.integrations.xgrammar import JSON_EBNF

    out: list[Input] = []
    specs = [(g, None) for g in shipped_grammars()]
    for sub, ext in (("lark", "lark"), ("outlines", "lark"), ("llama.cpp", "gbnf")):
        specs += [(None, p) for p in sorted(glob.glob(os.path.join(CORPUS, sub, f"*.{ext}")))]
    for shipped, path in specs:
        name = shipped if shipped else os.path.relpath(path, CORPUS)
        if names and not any(n in name for n in names):
            continue
        text = load_grammar_text(shipped)[0] if shipped else open(path, encoding="utf-8").read()
        if (shipped or path).endswith(".gbnf"):
            xgr_make = (lambda t: lambda comp: comp.compile_grammar(
                __import__("xgrammar").Grammar.from_ebnf(t, root_rule_name="root")))(text)
            llg_make = (lambda t: lambda: llguidance.grammar_from("gbnf", t))(text)
            is_lark = False
        else:
            lk = lark_for_llguidance(text)  # the %ignore edge rewrite: untimed dialect adapter
            if shipped == "json.lark":
                xgr_make = lambda comp: comp.compile_grammar(JSON_EBNF)  # noqa: E731 (as bench_masks.py)
            else:
                xgr_make = (lambda t: lambda comp: comp.compile_lark(t))(lk)
            llg_make = (lambda t: lambda: llguidance.LLMatcher.grammar_from_lark(t))(lk)
            is_lark = True
        out.append(Input("grammars", name, shipped if shipped else path, xgr_make, llg_make,
                         is_lark=is_lark, text=text, path=path))
    return out


def schema_cases() -> list[dict]:
    cases = load_cases(None, None, "maskbench")
    return [c for c in cases if not c["source"].startswith(("Handwritten", "Synthesized"))]


def schema_docs(case: dict) -> list[str]:
    """A maskbench case's valid documents, compact, keys in the schema's order (trellis' documented
    narrowing) where the helper can read the schema, else as given."""
    from trellis.constrain.frontends.json_schema import order_keys

    docs = []
    for t in case["tests"]:
        if not t.get("valid"):
            continue
        try:
            data = order_keys(case["schema"], t["data"])
        except Exception:  # noqa: BLE001 - a schema the helper cannot read: keep the given order
            data = t["data"]
        docs.append(json.dumps(data, separators=(",", ":"), ensure_ascii=False))
    return docs


def schema_input(case: dict) -> Input:
    import llguidance

    from trellis.constrain import JsonSchema

    schema = case["schema"]
    text = json.dumps(schema)
    docs = schema_docs(case)

    def xgr_make(comp: Any) -> Any:
        return comp.compile_json_schema(text, any_whitespace=False, separators=(",", ":"), strict_mode=False)

    def llg_make() -> str:
        return llguidance.LLMatcher.grammar_from_json_schema(
            text, defaults={"item_separator": ",", "key_separator": ":"})

    # closed_objects=False: the spec's additionalProperties, as the peers are configured
    # (strict_mode=False); the documents may carry keys the schema does not declare.
    return Input("schemas", case["name"], JsonSchema(schema, closed_objects=False), xgr_make, llg_make, docs=docs)


# ----------------------------------------------------------------------------- random-walk documents


class Walker:
    """Seeded random walks with a trellis constraint (module docstring)."""

    def __init__(self, vocab: Any) -> None:
        self.vocab = vocab
        w = np.zeros(len(vocab))
        skip = vocab.special | vocab.eos
        for i, t in enumerate(vocab.tokens):
            if not t or i in skip:
                continue
            s = t.decode("utf-8", "replace")
            w[i] = (1.0 if any(ch.isalnum() for ch in s) else 20.0) / len(t) ** 2
        self.w = w

    def walk(self, c: Any, rng: random.Random, row: torch.Tensor) -> list[int] | None:
        from trellis.mask import bitmask_to_bool

        s, ids = c.start(), []
        while True:
            c.fill_mask(s, row)
            acc = c.is_accepting(s)
            if acc and len(ids) >= MIN_WALK_TOKENS and (rng.random() < 0.15 or len(ids) >= MAX_WALK_TOKENS):
                return ids
            if len(ids) >= MAX_WALK_TOKENS:
                return None
            ww = self.w * bitmask_to_bool(row.view(1, -1), len(self.vocab))[0].numpy()
            tot = ww.sum()
            if tot <= 0:
                return ids if acc and ids else None
            t = int(np.searchsorted(np.cumsum(ww), rng.random() * tot, side="right"))
            s = c.advance(s, t)
            if s is None:  # the mask allowed a token advance refuses: report as a walk failure
                raise RuntimeError(f"trellis: mask allows token {t} that advance rejects")
            ids.append(t)


def walk_docs(inp: Input, n: int, seed: int, walker: Walker, fresh: Fresh, row: torch.Tensor) -> tuple[list[str], dict]:
    """Up to ``n`` random-walk documents of ``inp`` (Lark ones checked with Lark's Earley parser)."""
    import lark

    from trellis.constrain import compile

    info = {"walks": 0, "failed_walks": 0, "lark_rejected": 0, "bad_utf8": 0, "lark_rejected_examples": []}
    from trellis.constrain.earley.earley import UNBOUNDED

    fresh.untimed()
    # (no work bound: the module docstring) ConstraintError propagates: a refusal
    c = compile(inp.trellis_spec, walker.vocab, mask_work=UNBOUNDED, advance_work=UNBOUNDED)
    lk = None
    if inp.is_lark:
        lk = lark.Lark(inp.text, parser="earley", lexer="dynamic_complete",
                       import_paths=[os.path.dirname(inp.path)] if inp.path else [])
    rng = random.Random(f"{seed}:{inp.name}")
    docs: list[str] = []
    try:
        with deadline(LIMIT_S):
            while len(docs) < n and info["walks"] < 25 * n:
                info["walks"] += 1
                ids = walker.walk(c, rng, row)
                if ids is None:
                    info["failed_walks"] += 1
                    continue
                try:
                    doc = walker.vocab.decode(ids).decode("utf-8")
                except UnicodeDecodeError:
                    info["bad_utf8"] += 1
                    continue
                if doc in docs:
                    continue
                if lk is not None:
                    try:
                        lk.parse(doc)
                    except Exception:  # noqa: BLE001 - any Lark error: the oracle rejects it
                        info["lark_rejected"] += 1
                        if len(info["lark_rejected_examples"]) < 3:
                            info["lark_rejected_examples"].append(doc[:80])
                        continue
                docs.append(doc)
    except Timeout:
        info["timeout"] = True
    del c
    return docs, info


# ----------------------------------------------------------------------------- one input


def q(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))] if s else float("nan")


def make_engines(inp: Input, ctx: dict, skip: dict[str, str]) -> list[Engine]:
    engines: list[Engine] = [TrellisEngine(inp.trellis_spec, ctx["vocab"])]
    if inp.xgr_make is not None and "xgrammar" not in skip:
        engines.append(XGrammarEngine(inp.xgr_make, ctx["info"], ctx["threads"], ctx["eos"]))
    if inp.llg_make is not None and "llguidance" not in skip:
        engines.append(LLGuidanceEngine(inp.llg_make, ctx["lt"]))
    return engines


def tokenize(doc: str, ctx: dict) -> list[int] | None:
    ids = ctx["tokenizer"](doc, add_special_tokens=False).input_ids
    return ids if ctx["vocab"].decode(ids) == doc.encode("utf-8") else None


def select_docs(inp: Input, ctx: dict, want: int, fresh: Fresh) -> dict:
    """Compile each engine once (untimed, discarded) and keep up to ``want`` documents that
    trellis and every peer that compiled accept. Returns {status, reason?, docs, peers, ...}."""
    res: dict = {"peer_refused": {}, "peer_rejected_docs": Counter(), "trellis_rejected_docs": 0,
                 "untokenizable": 0}
    compiled: list[Engine] = []
    for proto in make_engines(inp, ctx, {}):
        e = proto.new()
        if e.name == "trellis":
            fresh.untimed()
            try:
                with deadline(LIMIT_S):
                    e.compile()
            except Timeout:
                return {**res, "status": "timeout", "reason": f"trellis compile > {LIMIT_S:g} s"}
            except Exception as err:  # noqa: BLE001 - ConstraintError = a refusal; anything else an error
                from trellis.constrain.errors import ConstraintError

                return {**res, "status": "refused" if isinstance(err, ConstraintError) else "error",
                        "reason": first_line(err)}
        else:
            try:
                e.compile()
            except Exception as err:  # noqa: BLE001 - the peer refuses this input
                res["peer_refused"][e.name] = first_line(err)
                continue
        compiled.append(e)
    verdicts: list[tuple[list[int], dict[str, bool]]] = []
    for doc in inp.docs:
        ids = tokenize(doc, ctx)
        if ids is None:
            res["untokenizable"] += 1
            continue
        v: dict[str, bool] = {}
        for e in compiled:
            e.reset()
            try:
                if e.name == "trellis":
                    with deadline(LIMIT_S):
                        ok = all(e.advance(t) for t in ids) and e.accepts_end()
                elif isinstance(e, LLGuidanceEngine):
                    ok = all(e.check_advance(t) for t in ids) and e.accepts_end()
                else:
                    ok = all(e.advance(t) for t in ids) and e.accepts_end()
            except Timeout:
                return {**res, "status": "timeout", "reason": f"trellis advance along a document > {LIMIT_S:g} s"}
            except Exception:  # noqa: BLE001 - a matcher error counts as a rejection
                ok = False
            v[e.name] = ok
        if not v["trellis"]:
            res["trellis_rejected_docs"] += 1
            continue
        for name, ok in v.items():
            if not ok:
                res["peer_rejected_docs"][name] += 1
        verdicts.append((ids, v))
        if sum(all(x.values()) for _, x in verdicts) >= want:
            break
    del compiled
    peers = [n for n in ("xgrammar", "llguidance") if n not in res["peer_refused"]]
    if not verdicts:
        return {**res, "status": "nodocs", "reason": "no document trellis accepts"
                + (f" ({res['trellis_rejected_docs']} rejected)" if res["trellis_rejected_docs"] else "")}
    # A peer that rejects every document trellis accepts is dropped for this input (reported).
    dropped = {p: "rejected all documents trellis accepts" for p in peers if not any(v[p] for _, v in verdicts)}
    keep = [p for p in peers if p not in dropped]
    docs = [ids for ids, v in verdicts if all(v[p] for p in keep)][:want]
    return {**res, "status": "ok", "docs": docs, "peers": keep, "peer_dropped": dropped}


GC_PAUSES: list[float] = []  # seconds of each generation-2 collection since the last clear
_gc_t0 = [0.0]


def _gc_watch(phase: str, info: dict) -> None:
    if info.get("generation") != 2:
        return
    if phase == "start":
        _gc_t0[0] = time.perf_counter()
    else:
        GC_PAUSES.append(time.perf_counter() - _gc_t0[0])


gc.callbacks.append(_gc_watch)


def measure(inp: Input, ids: list[int], ctx: dict, peers: list[str], order_shift: int, fresh: Fresh) -> dict:
    """(a), (b), compile and (c) for one document; trellis past LIMIT_S raises Timeout."""
    row = ctx["row"]
    skip = {n: "" for n in ("xgrammar", "llguidance") if n not in peers}
    protos = make_engines(inp, ctx, skip)
    k = order_shift % len(protos)
    order = protos[k:] + protos[:k]
    out: dict = {}
    live: dict[str, Engine] = {}
    n = len(ids)
    for proto in order:
        e = proto.new()  # untimed: xgrammar's new compiler without cache
        if e.name == "trellis":
            fresh.timed()
        gc.collect()  # the harness's garbage is not the engine's (module docstring)
        GC_PAUSES.clear()

        def run() -> dict:
            tc, _ = timed(e.compile)
            masks, adv = [], []
            for pos in range(n + 1):
                t0 = time.perf_counter()
                e.fill(row)
                masks.append(time.perf_counter() - t0)
                if pos < n:
                    t0 = time.perf_counter()
                    ok = e.advance(ids[pos])
                    adv.append(time.perf_counter() - t0)
                    if not ok:
                        raise RuntimeError(f"{e.name} rejected token {pos} on the timed walk")
            return {"compile": tc, "fresh": tc + sum(masks) + sum(adv), "ttfm": tc + masks[0],
                    "fresh_masks": masks, "advances": adv, "gc2": list(GC_PAUSES)}

        if e.name == "trellis":
            with deadline(LIMIT_S):
                out[e.name] = run()
        else:
            out[e.name] = run()
        live[e.name] = e
    # (c) the same document again, same objects, engines interleaved per position
    steady: dict[str, list[float]] = {name: [] for name in live}
    for e in live.values():
        e.reset()
    try:
        with deadline(LIMIT_S):
            for pos in range(n + 1):
                for name, e in live.items():
                    t0 = time.perf_counter()
                    e.fill(row)
                    steady[name].append(time.perf_counter() - t0)
                if pos < n:
                    for e in live.values():
                        e.advance(ids[pos])
    except Timeout:  # a peer's masks can take seconds each: keep (a), (b) and the positions done
        spent = {name: round(sum(v), 1) for name, v in steady.items()}
        print(f"    (c) stopped after {LIMIT_S:g} s at position {len(steady['trellis'])} of {n + 1}; "
              f"seconds of masks per engine: {spent}")
        k = min(len(v) for v in steady.values())
        steady = {name: v[:k] for name, v in steady.items()}
    for name in live:
        out[name]["steady"] = steady[name]
    del live
    return out


# ----------------------------------------------------------------------------- report


def ms(x: float | None, digits: int = 1) -> str:
    return "-" if x is None or x != x else f"{x * 1e3:.{digits}f}"


def report(kind: str, rows: list[dict], timeouts: list[dict]) -> tuple[dict, list[str]]:
    """Print one table; return the targets {name: (value, PASS?)} and the lines printed."""
    lines: list[str] = []
    p = lines.append
    positions = sum(r["tokens"] + 1 for r in rows)
    p(f"\n== {kind}: {len(rows)} inputs ({len({r['name'] for r in rows})} {kind}), {positions:,} token positions; "
      f"{len(timeouts)} input(s) past {LIMIT_S:g} s left out")
    p(f"{'engine':<11} {'inputs':>6} {'compile med':>11} {'p95':>8} {'(a) fresh med':>13} {'p95':>8} "
      f"{'(b) TTFM med':>12} {'p95':>8} {'(c) mask med':>12} {'p99':>7}   (ms)")
    stats: dict[str, dict] = {}
    for e in ENGINES:
        rs = [r["engines"][e] for r in rows if e in r["engines"]]
        if not rs:
            p(f"{e:<11} {0:>6}")
            continue
        comp = [x["compile"] for x in rs]
        fresh = [x["fresh"] for x in rs]
        ttfm = [x["ttfm"] for x in rs]
        steady = [t for x in rs for t in x["steady"]]
        st = stats[e] = {"n": len(rs), "compile_med": statistics.median(comp), "compile_p95": q(comp, 0.95),
                         "a_med": statistics.median(fresh), "a_p95": q(fresh, 0.95),
                         "b_med": statistics.median(ttfm), "b_p95": q(ttfm, 0.95),
                         "c_med": statistics.median(steady), "c_p99": q(steady, 0.99)}
        p(f"{e:<11} {st['n']:>6} {ms(st['compile_med']):>11} {ms(st['compile_p95']):>8} {ms(st['a_med']):>13} "
          f"{ms(st['a_p95']):>8} {ms(st['b_med'], 2):>12} {ms(st['b_p95']):>8} {ms(st['c_med'], 3):>12} "
          f"{ms(st['c_p99'], 2):>7}")

    def paired(peer: str, key: str) -> tuple[list[float], list[float]]:
        both = [r for r in rows if "trellis" in r["engines"] and peer in r["engines"]]
        if key == "steady":
            return ([t for r in both for t in r["engines"]["trellis"]["steady"]],
                    [t for r in both for t in r["engines"][peer]["steady"]])
        return [r["engines"]["trellis"][key] for r in both], [r["engines"][peer][key] for r in both]

    for e in ENGINES:
        pauses = [g for r in rows if e in r["engines"] for g in r["engines"][e].get("gc2", [])]
        hit = sum(1 for r in rows if r["engines"].get(e, {}).get("gc2"))
        if e in stats:
            p(f"gc2 {e}: {len(pauses)} generation-2 collection(s) inside timed (a) regions, on {hit} input(s), "
              f"{ms(sum(pauses))} ms in all" + (f", longest {ms(max(pauses))} ms" if pauses else ""))
    targets: dict[str, tuple[str, bool | None]] = {}
    ta, la = paired("llguidance", "fresh")
    tcs, xcs = paired("xgrammar", "steady")
    npa = sum(1 for r in rows if "trellis" in r["engines"] and "llguidance" in r["engines"])
    npc = sum(1 for r in rows if "trellis" in r["engines"] and "xgrammar" in r["engines"])
    ra = statistics.median(ta) / statistics.median(la) if ta else float("nan")
    rc = statistics.median(tcs) / statistics.median(xcs) if tcs else float("nan")
    per_input = [a / b for a, b in zip(ta, la) if b > 0]
    if ta:
        p(f"ratio (a) trellis/llguidance over {npa} paired inputs: median {ra:.3g}x, p95 "
          f"{q(ta, 0.95) / q(la, 0.95):.3g}x (median of per-input ratios {statistics.median(per_input):.3g}x)")
    if tcs:
        p(f"ratio (c) trellis/xgrammar over {npc} paired inputs ({len(tcs):,} positions): median {rc:.3g}x, "
          f"p99 {q(tcs, 0.99) / q(xcs, 0.99):.3g}x")
    # Every mask along the fresh documents (each the first mask of its state in a new compiled
    # object: the (a) runs' masks), per engine, and trellis' worst five with where they were.
    fresh_masks: dict[str, list[float]] = {}
    for e in ENGINES:
        xs = sorted(m for r in rows if e in r["engines"] for m in r["engines"][e].get("fresh_masks", []))
        if xs:
            fresh_masks[e] = xs
            p(f"fresh masks {e}: {len(xs):,}, p50 {ms(q(xs, 0.5), 3)} p90 {ms(q(xs, 0.9), 3)} "
              f"p99 {ms(q(xs, 0.99), 2)} max {ms(xs[-1], 1)} ms; over 1 ms: {sum(x > 1e-3 for x in xs)}")
    worst = sorted(((m, r["name"], r["doc"], i) for r in rows if "trellis" in r["engines"]
                    for i, m in enumerate(r["engines"]["trellis"].get("fresh_masks", []))), reverse=True)[:5]
    if worst:
        p("trellis' worst fresh masks: " + "; ".join(f"{ms(m, 1)} ms {n} doc {d} position {i}" for m, n, d, i in worst))
    t = stats.get("trellis")
    if t:
        a_all = [r["engines"]["trellis"]["fresh"] for r in rows] + [LIMIT_S] * len(timeouts)
        if timeouts:
            p(f"trellis (a) p95 counting the {len(timeouts)} timed-out input(s) as {LIMIT_S:g} s: "
              f"{ms(q(a_all, 0.95))} ms")
        targets["(a) median <= 2x llguidance"] = (f"{ra:.3g}x", ra <= 2.0 if ta else None)
        targets["(a) p95 <= 250 ms"] = (f"{ms(t['a_p95'])} ms", t["a_p95"] <= 0.250)
        targets["(b) median <= 10 ms"] = (f"{ms(t['b_med'], 2)} ms", t["b_med"] <= 0.010)
        targets["(c) median <= xgrammar"] = (f"{rc:.3g}x", rc <= 1.0 if tcs else None)
        targets["(c) p99 <= 2 ms"] = (f"{ms(t['c_p99'], 2)} ms", t["c_p99"] <= 0.002)
        # issue 59's bounds (the ones above are the earlier issue's, kept for comparison)
        lb = stats.get("llguidance")
        p95_bound = 0.050 if kind == "schemas" else 0.120
        targets["59: (a) median <= 1.0x llguidance"] = (f"{ra:.3g}x", ra <= 1.0 if ta else None)
        targets[f"59: (a) p95 <= {p95_bound * 1e3:g} ms"] = (f"{ms(t['a_p95'])} ms", t["a_p95"] <= p95_bound)
        targets["59: (b) median <= llguidance's"] = (
            f"{ms(t['b_med'], 2)} vs {ms(lb['b_med'], 2) if lb else '-'} ms", t["b_med"] <= lb["b_med"] if lb else None)
        fm = fresh_masks.get("trellis", [])
        targets["59: fresh masks p99 <= 1 ms"] = (f"{ms(q(fm, 0.99), 2)} ms" if fm else "-",
                                                  q(fm, 0.99) <= 0.001 if fm else None)
        p("targets (trellis):")
        for name, (val, ok) in targets.items():
            p(f"  {name:<36} {val:>16}  {'PASS' if ok else ('FAIL' if ok is not None else 'n/a')}")
    for line in lines:
        print(line)
    return targets, lines


def per_grammar_table(rows: list[dict]) -> None:
    names = list(dict.fromkeys(r["name"] for r in rows))
    print(f"\nper grammar (median over its documents; ms): {'docs':>4} {'tok':>4}  "
          + "  ".join(f"{e + ' cmp/(a)/(b)':>26}" for e in ENGINES) + f"  {'(c) t/x/l med':>20}")
    for name in names:
        rs = [r for r in rows if r["name"] == name]
        cells = []
        for e in ENGINES:
            xs = [r["engines"][e] for r in rs if e in r["engines"]]
            cells.append("-" if not xs else "/".join(ms(statistics.median([x[k] for x in xs]))
                                                       for k in ("compile", "fresh", "ttfm")))
        c = []
        for e in ENGINES:
            xs = [t for r in rs if e in r["engines"] for t in r["engines"][e]["steady"]]
            c.append(ms(statistics.median(xs), 3) if xs else "-")
        print(f"{name[:45]:<45} {len(rs):>4} {statistics.median(r['tokens'] for r in rs):>4.0f}  "
              + "  ".join(f"{x:>26}" for x in cells) + f"  {'/'.join(c):>20}")


def git_state() -> str:
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "trellis"], capture_output=True,
                               text=True, timeout=10).stdout.split("\n")
        dirty = [d[3:] for d in dirty if d.strip()]
        return head + (f" + uncommitted changes in {', '.join(dirty)}" if dirty else "")
    except Exception:  # noqa: BLE001
        return "?"


# ----------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--schemas", type=int, default=100, help="maskbench schemas to measure (0: none)")
    ap.add_argument("--grammars-only", action="store_true", help="no schemas")
    ap.add_argument("--schemas-only", action="store_true", help="no grammars")
    ap.add_argument("--grammars", nargs="*", default=None, help="only grammars whose name contains one of these")
    ap.add_argument("--docs-per-grammar", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads and xgrammar compile threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write per-input results as JSON")
    ap.add_argument("--isolation", choices=("grammar", "process"), default="grammar",
                    help="grammar: each input new to a process that may have served the earlier inputs (shared, "
                         "grammar-independent caches carry over); process: every compile as in a new process with "
                         "an empty cache (module docstring)")
    ap.add_argument("--report", metavar="FILE", default=None, help="print the tables of a saved --out file and exit")
    args = ap.parse_args()
    if args.report:
        return report_from(args.report)
    torch.set_num_threads(args.threads)
    t_all = time.perf_counter()

    from trellis.constrain import Gbnf, JsonSchema, compile
    from trellis.constrain.errors import ConstraintError
    from trellis.integrations.llguidance import lltokenizer
    from trellis.integrations.xgrammar import tokenizer_info
    from trellis.mask import allocate_bitmask
    from trellis.models import load

    h = load()  # before TRELLIS_CACHE_DIR moves: the converted model lives in the user's cache
    vocab, tokenizer = h.vocab, h.tokenizer
    fresh = Fresh(args.isolation)  # sets TRELLIS_CACHE_DIR to the run's temporary folder
    try:
        from trellis.constrain import prepare_vocabulary

        # the token matrix, trie, sorted order and slices depend on the vocabulary alone (built
        # once per process, as the peers' TokenizerInfo / LLTokenizer)
        setup_t = timed(lambda: prepare_vocabulary(vocab))[0]
    except ImportError:  # a trellis from before prepare_vocabulary
        from trellis.constrain.vocab.trie_walk import TokenTrie
        from trellis.constrain.vocab.walks import TokenMatrix

        setup_t = timed(lambda: TokenTrie.of(TokenMatrix.of(vocab)))[0]
    setup_x = timed(lambda: tokenizer_info(vocab, tokenizer))[0]
    setup_l = timed(lambda: lltokenizer(vocab, tokenizer))[0]
    row = allocate_bitmask(1, len(vocab))[0]
    ctx = {"vocab": vocab, "tokenizer": tokenizer, "info": tokenizer_info(vocab, tokenizer),
           "lt": lltokenizer(vocab, tokenizer), "threads": args.threads, "eos": min(vocab.eos), "row": row}
    # Warm-up, untimed: imports (lark, interegular, ...) and first-call paths of every engine.
    import llguidance

    for spec in ('start: "a" "b"', Gbnf('root ::= "a" [0-9]*'), JsonSchema({"type": "object", "properties": {
            "a": {"type": "string"}, "b": {"type": "integer"}}})):
        fresh.untimed()
        c = compile(spec, vocab)
        c.fill_mask(c.start(), row)
    warm = Input("grammars", "warm-up", 'start: "a"', lambda comp: comp.compile_lark('start: "a"'),
                 lambda: llguidance.grammar_from("gbnf", 'root ::= "a"'))
    for proto in make_engines(warm, ctx, {})[1:]:
        e = proto.new()
        e.compile()
        e.fill(row)
    fresh._clear_all()  # the run starts from a process that has seen no grammar (imports aside)
    fresh._empty(fresh.run_dir)
    print(f"bench_fresh: {len(vocab):,}-token vocabulary (Gemma 3); trellis at {git_state()}; threads {args.threads}; "
          f"isolation {args.isolation}")
    print(f"per-tokenizer setup (once, excluded): trellis prepare_vocabulary {setup_t:.2f}s, xgrammar TokenizerInfo "
          f"{setup_x:.2f}s, llguidance LLTokenizer {setup_l:.2f}s", flush=True)

    results: dict[str, list[dict]] = {"grammars": [], "schemas": []}
    skipped: list[dict] = []
    timeouts: dict[str, list[dict]] = {"grammars": [], "schemas": []}
    gen_info: dict[str, dict] = {}
    refusals: Counter = Counter()
    peer_refusals: dict[str, Counter] = {"xgrammar": Counter(), "llguidance": Counter()}
    peer_rejects: dict[str, Counter] = {"xgrammar": Counter(), "llguidance": Counter()}
    trellis_rejects: Counter = Counter()
    counter = 0

    def run_input(inp: Input, want: int) -> bool:
        """Select documents, measure each; True if at least one was measured."""
        nonlocal counter
        sel = select_docs(inp, ctx, want, fresh)
        for peer, reason in sel["peer_refused"].items():
            peer_refusals[peer][reason[:100]] += 1
        for peer, n in sel["peer_rejected_docs"].items():
            peer_rejects[peer][inp.kind] += n
        if sel["trellis_rejected_docs"]:
            trellis_rejects[inp.kind] += sel["trellis_rejected_docs"]
        if sel["status"] != "ok":
            skipped.append({"kind": inp.kind, "name": inp.name, "status": sel["status"], "reason": sel["reason"]})
            if sel["status"] == "timeout":
                timeouts[inp.kind].append({"name": inp.name, "reason": sel["reason"]})
            if sel["status"] == "refused":
                refusals[(inp.kind, sel["reason"][:110])] += 1
            print(f"  skip {inp.kind[:-1]} {inp.name}: {sel['status']}: {sel['reason']}", flush=True)
            return False
        notes = [f"{p}: refused ({r[:70]})" for p, r in sel["peer_refused"].items()]
        notes += [f"{p}: {r}" for p, r in sel["peer_dropped"].items()]
        notes += [f"{p} rejected {n} doc(s)" for p, n in sel["peer_rejected_docs"].items()
                  if p not in sel["peer_dropped"]]
        measured = False
        for i, ids in enumerate(sel["docs"]):
            counter += 1
            try:
                eng = measure(inp, ids, ctx, sel["peers"], counter, fresh)
            except Timeout:
                timeouts[inp.kind].append({"name": inp.name, "doc": i, "tokens": len(ids),
                                           "reason": f"trellis compile + walk > {LIMIT_S:g} s"})
                print(f"  [{counter}] {inp.name} doc {i} ({len(ids)} tokens): trellis compile + walk > {LIMIT_S:g} s, "
                      f"left out", flush=True)
                continue
            except Exception as err:  # noqa: BLE001 - an engine failing mid-walk: reported, not fatal
                skipped.append({"kind": inp.kind, "name": inp.name, "status": "error", "reason": first_line(err)})
                print(f"  [{counter}] {inp.name} doc {i}: error: {first_line(err)}", flush=True)
                continue
            measured = True
            results[inp.kind].append({"kind": inp.kind, "name": inp.name, "doc": i, "tokens": len(ids),
                                      "engines": eng, "notes": notes})
            cells = "  ".join(f"{e[:4]} {ms(eng[e]['compile'])}/{ms(eng[e]['fresh'])}/{ms(eng[e]['ttfm'])}"
                              for e in ENGINES if e in eng)
            print(f"  [{counter}] {inp.name[:48]:<48} d{i} {len(ids):>4} tok  cmp/(a)/(b) ms: {cells}"
                  + (f"  [{'; '.join(notes)}]" if notes and i == 0 else ""), flush=True)
        return measured

    # ------------------------------------------------------------------ grammars
    if not args.schemas_only:
        walker = Walker(vocab)
        print(f"\n-- grammars ({args.docs_per_grammar} document(s) each; per input: compile/(a)/(b) ms per engine)",
              flush=True)
        for inp in grammar_inputs(args.grammars):
            want = args.docs_per_grammar
            fresh.snapshot()  # shared state before this grammar: its own untimed work must not warm it
            try:
                if inp.path is None:  # shipped: bench_masks' documents
                    inp.docs = grammar_docs(inp.trellis_spec, 4 * want, args.seed)
                else:
                    inp.docs, info = walk_docs(inp, 3 * want, args.seed, walker, fresh, row)
                    gen_info[inp.name] = info
                    if info.get("lark_rejected") or info.get("timeout"):
                        print(f"  {inp.name}: random walks: {len(inp.docs)} kept of {info['walks']}"
                              + (f", {info['lark_rejected']} trellis-accepted walk(s) Lark rejected, e.g. "
                                 f"{info['lark_rejected_examples'][0]!r}" if info["lark_rejected"] else "")
                              + (f"; generation stopped at {LIMIT_S:g} s" if info.get("timeout") else ""),
                              flush=True)
            except ConstraintError as err:
                refusals[("grammars", first_line(err)[:110])] += 1
                skipped.append({"kind": "grammars", "name": inp.name, "status": "refused", "reason": first_line(err)})
                print(f"  skip grammar {inp.name}: trellis refuses: {first_line(err)}", flush=True)
                continue
            except Exception as err:  # noqa: BLE001 - e.g. Lark cannot load the grammar as an oracle
                skipped.append({"kind": "grammars", "name": inp.name, "status": "error", "reason": first_line(err)})
                print(f"  skip grammar {inp.name}: {first_line(err)}", flush=True)
                continue
            if not inp.docs:
                why = "random-walk generation timed out" if gen_info.get(inp.name, {}).get("timeout") else \
                    "no documents"
                skipped.append({"kind": "grammars", "name": inp.name, "status": "nodocs", "reason": why})
                if gen_info.get(inp.name, {}).get("timeout"):
                    timeouts["grammars"].append({"name": inp.name, "reason": why})
                print(f"  skip grammar {inp.name}: {why}", flush=True)
                continue
            run_input(inp, want)

    # ------------------------------------------------------------------ schemas
    n_schemas = 0 if args.grammars_only else args.schemas
    tried = 0
    if n_schemas:
        print(f"\n-- schemas (maskbench, first {n_schemas} measurable; per input: compile/(a)/(b) ms per engine)",
              flush=True)
        measured = 0
        for case in schema_cases():
            if measured >= n_schemas:
                break
            tried += 1
            try:
                inp = schema_input(case)
            except Exception as err:  # noqa: BLE001 - JsonSchema(...) refuses up front (or fails)
                status = "refused" if isinstance(err, ConstraintError) else "error"
                if status == "refused":
                    refusals[("schemas", first_line(err)[:110])] += 1
                skipped.append({"kind": "schemas", "name": case["name"], "status": status,
                                "reason": first_line(err)})
                continue
            if not inp.docs:
                skipped.append({"kind": "schemas", "name": case["name"], "status": "nodocs",
                                "reason": "no valid instance"})
                continue
            fresh.snapshot()
            measured += run_input(inp, 1)

    # ------------------------------------------------------------------ report
    all_targets = print_tables(results, timeouts)
    print("\nskipped / refused:")
    by = Counter((s["kind"], s["status"]) for s in skipped)
    for (kind, status), n in sorted(by.items()):
        print(f"  {kind:<8} {status:<8} {n}")
    for s in skipped:
        if s["kind"] == "grammars" or s["status"] in ("timeout", "error"):
            print(f"    {s['kind'][:-1]} {s['name']}: {s['status']}: {s['reason'][:140]}")
    if refusals:
        print("  trellis refusal reasons (schemas, most common):")
        for (kind, reason), n in refusals.most_common():
            if kind == "schemas":
                print(f"    {n:4d}  {reason}")
    for kind in ("grammars", "schemas"):
        for t in timeouts[kind]:
            print(f"  timeout {kind[:-1]} {t['name']}" + (f" doc {t['doc']} ({t['tokens']} tokens)" if "doc" in t else "")
                  + f": {t['reason']}")
    for peer in ("xgrammar", "llguidance"):
        if peer_refusals[peer]:
            print(f"  {peer} refused {sum(peer_refusals[peer].values())} input(s): "
                  + "; ".join(f"{n}x {r}" for r, n in peer_refusals[peer].most_common(6)))
        if peer_rejects[peer]:
            print(f"  {peer} rejected documents trellis accepts: " + ", ".join(f"{k} {v}" for k, v in peer_rejects[peer].items()))
    if trellis_rejects:
        print("  trellis rejected candidate documents (dropped): " + ", ".join(f"{k} {v}" for k, v in trellis_rejects.items()))
    noted = [r for kind in ("grammars", "schemas") for r in results[kind] if r["notes"] and r["doc"] == 0]
    if noted:
        print("  peers on measured inputs:")
        for r in noted:
            print(f"    {r['name']}: {'; '.join(r['notes'])}")
    if n_schemas:
        print(f"  schemas tried {tried}, measured {len(results['schemas'])}")

    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), "trellis": git_state(), "vocab": len(vocab),
                       "setup_s": {"trellis": setup_t, "xgrammar": setup_x, "llguidance": setup_l},
                       "seconds": time.perf_counter() - t_all,
                       "results": results, "skipped": skipped, "timeouts": timeouts, "random_walks": gen_info,
                       "targets": {k: {n: {"value": v, "pass": ok} for n, (v, ok) in t.items()}
                                   for k, t in all_targets.items()}}, f, indent=1)
    fresh.close()
    summary(all_targets, results, timeouts, time.perf_counter() - t_all)
    return 0


def print_tables(results: dict[str, list[dict]], timeouts: dict[str, list[dict]]) -> dict[str, dict]:
    all_targets: dict[str, dict] = {}
    if results["grammars"]:
        per_grammar_table(results["grammars"])
    for kind in ("grammars", "schemas"):
        if results[kind] or timeouts[kind]:
            all_targets[kind], _ = report(kind, results[kind], timeouts[kind])
    return all_targets


def summary(all_targets: dict[str, dict], results: dict[str, list[dict]], timeouts: dict[str, list[dict]],
            seconds: float | None) -> None:
    parts = []
    npass = ntot = 0
    for kind, t in all_targets.items():
        marks = [f"{name} {'PASS' if ok else ('FAIL' if ok is not None else 'n/a')} ({val})" for name, (val, ok) in t.items()]
        ntot += sum(ok is not None for _, ok in t.values())
        npass += sum(bool(ok) for _, ok in t.values())
        parts.append(f"{kind} [{len(results[kind])} inputs, {len(timeouts[kind])} timed out]: " + ", ".join(marks))
    print(f"\nSUMMARY {npass}/{ntot} targets pass; " + "; ".join(parts)
          + (f" ({seconds:.0f} s)" if seconds is not None else ""))


def report_from(path: str) -> int:
    """--report: the tables and SUMMARY of a saved --out file, without measuring."""
    with open(path, encoding="utf-8") as f:
        saved = json.load(f)
    print(f"bench_fresh results from {path}: trellis at {saved.get('trellis', '?')}; {saved.get('args', {})}")
    all_targets = print_tables(saved["results"], saved["timeouts"])
    summary(all_targets, saved["results"], saved["timeouts"], saved.get("seconds"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
