"""Grammar mask cost: trellis vs xgrammar vs llguidance vs outlines-core, same tokenizer, same walks.

    python benchmarks/bench_masks.py [--quick] [--docs 10] [--threads 1] [--peer-tokenizer hf|bytes]

Tokenizers: Gemma 3 (262,144 tokens, the embedded model's) and "bpe32k", a 32,000-token GPT-2
style byte-level BPE trained here with the ``tokenizers`` library on the Python standard library's
top-level modules (~4.7 MB) plus 400 random JSON documents: no 32k-50k tokenizer is available
offline on these machines, and a trained one has a real-ish merge structure (words, indentation
runs, punctuation clusters) unlike a synthetic list. It is cached under the trellis cache dir.

Grammars and how each peer expresses them (walks are token sequences of documents that EVERY
engine in the row accepts; documents a peer rejects are dropped and counted):

* json: trellis json.lark; xgrammar ``JSON_EBNF`` (same language); llguidance
  ``lark_for_llguidance(json.lark)`` (same language); outlines-core the regex of the generic
  ``{"type": "object"}`` schema (``build_regex_from_schema``): a smaller language (objects only,
  bounded nesting, single-space whitespace), so the JSON documents here are objects that it
  accepts too.
* csv, yaml_flat (regular): outlines-core gets a hand-translated regex; the others as below.
  outlines-core 0.2.14 drops every transition from an accepting DFA state into a non-accepting
  one (``Index("a(bb)?")`` rejects ``"a", "b"``; ``[0-9]+(\.[0-9]+)?`` rejects ``"1", "."``),
  which would reject most csv/yaml walks (an opening quote, ``\r``, a key); the regexes are
  therefore given a trailing ``\x00`` sentinel so that no walk prefix is accepting.
* arithmetic, python_call, sql_select, json_object: xgrammar via its Lark converter, llguidance
  via its Lark dialect, both given ``lark_for_llguidance(text)`` (both skip ``%ignore`` terminals
  only between/after terminals, not before the first one); outlines-core cannot express them
  (recursive) and is skipped.

Measured per engine: compile cold (no cache: empty TRELLIS_CACHE_DIR, cleared in-process memos
``trellis.constrain.compile.COMPILED`` and ``trellis.constrain.automata.regex.DFA_MEMO``; the tables'
disk write runs on a background thread and is awaited before the warm compile, untimed; fresh
xgrammar compiler without cache; a new LLMatcher; a new outlines ``Index``; ``--cold-repeats N``
reports the median of N cold compiles, outlines-core excepted) and warm (trellis: disk-cached tables, memo cleared; xgrammar: its
compiler cache; outlines: unpickling the index; llguidance has no cache). Tokenizer preprocessing
(trellis' per-vocabulary tables (``prepare_vocabulary``), xgrammar TokenizerInfo, llguidance LLTokenizer, outlines Vocabulary) is
per tokenizer, not per grammar: it is timed once, printed, and excluded from compile times.
Per-token mask time: at every position of every walk, each engine's ``fill_mask`` alone is
timed (after advancing), engines interleaved so that machine noise hits all alike; median and
p99. trellis runs its default path (the scannerless Earley engine, tables built on first use)
once with its mask LRU as shipped ("trellis", kept across walks as in a server) and once with the
LRU emptied before every mask ("trellis/nocache": the cost of a state never seen before; the
per-DFA-state vocabulary walks stay), and the opt-in LALR engine with precomputed tables
("trellis-lalr"). ``benchmarks/bench_fresh.py`` times what a NEW grammar or schema costs. The peers run as they ship
(xgrammar's adaptive mask cache is built at compile time, llguidance's caches warm up as it goes).
Ratios are engine / xgrammar. Absolute times are noisy on the shared machines; compare ratios
from one run. The last line starts with SUMMARY.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import pathlib
import pickle
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import Tensor

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from trellis.constrain.compile import load_grammar_text  # noqa: E402
from trellis.constrain.automata.regex import DFA_MEMO  # noqa: E402
from trellis.mask import allocate_bitmask  # noqa: E402
from trellis.tokens import Vocabulary  # noqa: E402

CSV_REGEX = (r'(?:[^,"\r\n]+|"(?:[^"]|"")*")?(?:,(?:[^,"\r\n]+|"(?:[^"]|"")*")?)*'
             r'(?:\r?\n(?:[^,"\r\n]+|"(?:[^"]|"")*")?(?:,(?:[^,"\r\n]+|"(?:[^"]|"")*")?)*)*')
_Y_KEY = r"[A-Za-z_][A-Za-z0-9_.\-]*"
_Y_VALUE = (r"""(?:[^ \t\r\n"'#\[\]{}|>&*!%@`,][^\r\n#]*"""
            r"""|"(?:[^"\\\r\n]|\\[^\r\n])*"(?:[ \t]+)?|'(?:[^'\r\n]|'')*'(?:[ \t]+)?)""")
_Y_LINE = rf"(?:{_Y_KEY}:(?:[ \t]+{_Y_VALUE}?)?(?:#[^\r\n]*)?|#[^\r\n]*)?"
YAML_REGEX = rf"{_Y_LINE}(?:\r?\n{_Y_LINE})*"

GRAMMARS = ["json.lark", "csv.lark", "yaml_flat.lark", "arithmetic.lark", "python_call.lark", "sql_select.lark",
            "json_object.lark"]
QUICK_GRAMMARS = ["json.lark", "csv.lark"]


# ----------------------------------------------------------------------------- tokenizers


def bpe32k() -> Any:
    """A 32,000-token byte-level BPE trained on local text (cached; see the module docstring)."""
    import sysconfig

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    import platformdirs

    from tests.constrain.test_crosscheck import json_documents

    std = pathlib.Path(sysconfig.get_paths()["stdlib"])
    texts = [f.read_text(encoding="utf-8", errors="replace") for f in sorted(std.glob("*.py"))]
    texts += json_documents(400, seed=123)
    key = hashlib.sha256("\0".join(texts).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    path = pathlib.Path(platformdirs.user_cache_dir("trellis")) / "bench" / f"bpe32k-{key}.json"
    if path.is_file():
        tk = Tokenizer.from_file(str(path))
    else:
        tk = Tokenizer(models.BPE())
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=32_000, special_tokens=["<|endoftext|>"], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tk.train_from_iterator(texts, trainer=trainer)
        path.parent.mkdir(parents=True, exist_ok=True)
        tk.save(str(path))
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>")


# ----------------------------------------------------------------------------- documents


def json_object_docs(n: int, seed: int) -> list[str]:
    """JSON objects inside outlines-core's generic-object regex (and json.lark): nesting <= 2,
    ", "/": " or compact separators, exponents with a sign, no escapes beyond the basic ones."""
    rng = random.Random(seed)
    words = ["name", "id", "Ada Lovelace", "naïve café", "日本", "x", "value", "a b c", "tags", "€", "line\nnext"]

    def scalar() -> Any:
        r = rng.random()
        if r < 0.4:
            return rng.choice(words) + ("" if rng.random() < 0.5 else str(rng.randint(0, 999)))
        if r < 0.6:
            return rng.randint(-10 ** 6, 10 ** 9)
        if r < 0.8:
            return round(rng.uniform(-1e3, 1e3), rng.randint(1, 4))
        return rng.choice([True, False, None])

    def value(depth: int) -> Any:
        r = rng.random()
        if depth and r < 0.25:
            return {rng.choice(words) + str(i): value(depth - 1) for i in range(rng.randint(1, 4))}
        if depth and r < 0.45:
            return [scalar() for _ in range(rng.randint(0, 5))]
        return scalar()

    docs = []
    while len(docs) < n:
        obj = {rng.choice(words) + str(i): value(2) for i in range(rng.randint(2, 7))}
        seps = rng.choice([(", ", ": "), (",", ":")])
        docs.append(json.dumps(obj, ensure_ascii=False, separators=seps))
    return docs


def grammar_docs(name: str, n: int, seed: int) -> list[str]:
    """``n`` candidate documents of a shipped grammar (the bench keeps those every engine accepts)."""
    if name == "json.lark":
        return json_object_docs(n, seed)
    import lark

    from tests.constrain.grammar_cases import sentences

    text, _ = load_grammar_text(name)
    lk = lark.Lark(text, parser="lalr")
    if name in ("csv.lark", "yaml_flat.lark"):  # line-based: several sentences, one document
        rng = random.Random(seed)
        pool = sentences(name, lk, 8 * n, seed=seed)
        return ["\n".join(rng.sample(pool, rng.randint(4, 8))) for _ in range(n)]
    return [d for d in sentences(name, lk, 4 * n, seed=seed, max_depth=7) if len(d) >= 8][:n]


# ----------------------------------------------------------------------------- engines


class Walker:
    """One engine along one walk: reset, advance a token (False = rejected), fill one mask row."""

    name: str

    def reset(self) -> None: ...

    def advance(self, token: int) -> bool: ...

    def fill(self, row: Tensor) -> None: ...


class ConstraintWalker(Walker):
    def __init__(self, name: str, constraint: Any, *, clear_cache: bool = False) -> None:
        self.name, self.c, self.clear_cache = name, constraint, clear_cache
        self.reset()

    def reset(self) -> None:
        self.state = self.c.start()

    def advance(self, token: int) -> bool:
        nxt = self.c.advance(self.state, token)
        if nxt is None:
            return False
        self.state = nxt
        return True

    def fill(self, row: Tensor) -> None:
        if self.clear_cache:
            masks = getattr(self.c, "_masks", None)  # trellis' whole-mask LRU (scannerless.py, cfg.py)
            if masks is not None:
                masks.clear()
        self.c.fill_mask(self.state, row)


class OutlinesWalker(Walker):
    def __init__(self, index: Any) -> None:
        import outlines_core

        self.name, self.index, self._guide_cls = "outlines-core", index, outlines_core.Guide
        self.reset()

    def reset(self) -> None:
        self.guide = self._guide_cls(self.index)

    def advance(self, token: int) -> bool:
        try:
            self.guide.advance(token, return_tokens=False)
        except Exception:  # outlines raises ValueError-like errors for a token with no transition
            return False
        return True

    def fill(self, row: Tensor) -> None:
        self.guide.write_mask_into(row.data_ptr(), row.numel(), 4)


@dataclass
class EngineResult:
    name: str
    cold: float | None = None
    warm: float | None = None
    masks: list[float] = field(default_factory=list)  # seconds per fill_mask
    note: str = ""

    def q(self, p: float) -> float:
        xs = sorted(self.masks)
        return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


COLD_REPEATS = 1  # --cold-repeats: a single cold compile on this VM swings by +-30%


def timed_cold(fn: Callable[[], Any], setup: Callable[[], None] = lambda: None) -> tuple[float, Any]:
    """Median of COLD_REPEATS runs of ``fn``, each after an untimed ``setup`` (cache clearing)."""
    times, out = [], None
    for _ in range(COLD_REPEATS):
        setup()
        t, out = timed(fn)
        times.append(t)
    return statistics.median(times), out


def trellis_engines(name: str, vocab: Vocabulary) -> tuple[list[EngineResult], list[Walker]]:
    """trellis' default path (the Earley engine, tables built lazily: "trellis", and with its mask
    LRU emptied before every mask: "trellis/nocache") and the opt-in LALR engine with
    precomputed, disk-cached tables ("trellis-lalr")."""
    import importlib

    tc = importlib.import_module("trellis.constrain.compile")  # the module (the package rebinds `compile`)

    old = os.environ.get("TRELLIS_CACHE_DIR")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TRELLIS_CACHE_DIR"] = tmp

        def clear() -> None:
            tc.clear_caches()  # compiled grammars, regex DFAs, shared vocabulary walks
            shutil_rm(tmp)

        try:
            default_cold, _ = timed_cold(lambda: tc.compile(name, vocab), clear)
            tc.COMPILED.clear()
            c_default = tc.compile(name, vocab)
            tc.COMPILED.clear()
            c_default2 = tc.compile(name, vocab, cache=False)  # its own LRU, emptied before each mask
            cold, _ = timed_cold(lambda: tc.compile(name, vocab, precompute=True, progress=False, engine="lalr"),
                                 clear)
            tc.COMPILED.clear()
            tc.wait_for_cache_writes()  # tables are written in the background, off the compile's path
            warm, c = timed(lambda: tc.compile(name, vocab, precompute=True, progress=False, engine="lalr"))
        finally:
            if old is None:
                os.environ.pop("TRELLIS_CACHE_DIR", None)
            else:
                os.environ["TRELLIS_CACHE_DIR"] = old
    tc.COMPILED.clear()
    res = [EngineResult("trellis", default_cold, None, note="default: Earley, lazy tables"),
           EngineResult("trellis/nocache", default_cold, None, note="mask LRU emptied before every mask"),
           EngineResult("trellis-lalr", cold, warm, note="engine=lalr, precompute=True")]
    walkers: list[Walker] = [ConstraintWalker("trellis", c_default),
                             ConstraintWalker("trellis/nocache", c_default2, clear_cache=True),
                             ConstraintWalker("trellis-lalr", c)]
    return res, walkers


def trellis_vocab_setup(vocab: Vocabulary) -> float | None:
    """Build trellis' per-vocabulary tables (shared by every grammar) and time it."""
    try:
        from trellis.constrain import prepare_vocabulary
    except ImportError:
        return None
    return timed(lambda: prepare_vocabulary(vocab))[0]


def shutil_rm(path: str) -> None:
    import shutil

    for p in pathlib.Path(path).iterdir():
        shutil.rmtree(p) if p.is_dir() else p.unlink()


def peer_engines(name: str, vocab: Vocabulary, tokenizer: Any, *, threads: int, outlines: bool,
                 peer_tok: Any) -> tuple[list[EngineResult], list[Walker]]:
    res: list[EngineResult] = []
    walkers: list[Walker] = []
    text, _ = load_grammar_text(name)
    # xgrammar
    import xgrammar as xgr

    from trellis.integrations.xgrammar import JSON_EBNF, XGrammarConstraint, tokenizer_info

    from trellis.integrations.llguidance import lark_for_llguidance

    info = tokenizer_info(vocab, peer_tok)
    # xgrammar's Lark converter, like llguidance, skips %ignore terminals only after terminals, so
    # the same edge rewrite makes leading whitespace legal (otherwise it rejects such documents).
    syntax, src = ("ebnf", JSON_EBNF) if name == "json.lark" else ("lark", lark_for_llguidance(text))

    def xcompile(comp: Any) -> Any:
        return comp.compile_grammar(src) if syntax == "ebnf" else comp.compile_lark(src)

    try:
        cold, compiled = timed_cold(lambda: xcompile(xgr.GrammarCompiler(info, max_threads=threads,
                                                                           cache_enabled=False)))
        cached = xgr.GrammarCompiler(info, max_threads=threads, cache_enabled=True)
        xcompile(cached)
        warm, _ = timed(lambda: xcompile(cached))
        res.append(EngineResult("xgrammar", cold, warm, note=syntax))
        walkers.append(ConstraintWalker("xgrammar", XGrammarConstraint(compiled, vocab)))
    except Exception as e:  # a grammar the converter refuses: reported, not fatal
        res.append(EngineResult("xgrammar", note=f"failed: {str(e).splitlines()[0][:80]}"))
    # llguidance
    import llguidance

    from trellis.integrations.llguidance import LLGuidanceConstraint, lltokenizer

    lt = lltokenizer(vocab, peer_tok)
    g = llguidance.LLMatcher.grammar_from_lark(lark_for_llguidance(text))
    try:
        cold, _ = timed_cold(lambda: llguidance.LLMatcher(lt, g, log_level=0))
        c = LLGuidanceConstraint(g, vocab, tokenizer=peer_tok)
        res.append(EngineResult("llguidance", cold, None, note="lark"))
        walkers.append(ConstraintWalker("llguidance", c))
    except Exception as e:
        res.append(EngineResult("llguidance", note=f"failed: {str(e).splitlines()[0][:80]}"))
    # outlines-core (regular languages only)
    # csv / yaml get a trailing NUL sentinel: no proper prefix of a walk is then accepting, which
    # dodges outlines-core's dropped accepting->non-accepting transitions (module docstring); the
    # masks differ from the true ones only by the sentinel's token where a document may end.
    regex = {"json.lark": None, "csv.lark": f"(?:{CSV_REGEX})\\x00",
             "yaml_flat.lark": f"(?:{YAML_REGEX})\\x00"}.get(name, "skip")
    if regex == "skip":
        res.append(EngineResult("outlines-core", note="cannot express (recursive grammar)"))
    elif not outlines:
        res.append(EngineResult("outlines-core", note="skipped (--quick on a large vocabulary)"))
    else:
        import outlines_core

        if regex is None:
            from outlines_core.json_schema import build_regex_from_schema

            regex = build_regex_from_schema(json.dumps({"type": "object"}))
        ov = outlines_vocab(vocab)
        cold, index = timed(lambda: outlines_core.Index(regex, ov))
        blob = pickle.dumps(index)
        warm, index = timed(lambda: pickle.loads(blob))
        res.append(EngineResult("outlines-core", cold, warm,
                                note="generic-object schema" if name == "json.lark" else "hand-written regex + NUL"))
        walkers.append(OutlinesWalker(index))
    return res, walkers


_OV: dict[str, Any] = {}


def outlines_vocab(vocab: Vocabulary) -> Any:
    import outlines_core

    ov = _OV.get(vocab.fingerprint())
    if ov is None:
        m: dict[bytes, list[int]] = {}
        for i, t in enumerate(vocab.tokens):
            if t and i not in vocab.special and i not in vocab.eos:
                m.setdefault(t, []).append(i)
        ov = _OV[vocab.fingerprint()] = outlines_core.Vocabulary(min(vocab.eos), m)
    return ov


# ----------------------------------------------------------------------------- one row of the table


def bench(name: str, tokenizer: Any, vocab: Vocabulary, docs: list[str], *, want: int, threads: int,
          outlines: bool, peer_tok: Any) -> tuple[list[EngineResult], dict[str, int]]:
    tres, twalk = trellis_engines(name, vocab)
    pres, pwalk = peer_engines(name, vocab, tokenizer, threads=threads, outlines=outlines, peer_tok=peer_tok)
    results = {r.name: r for r in tres + pres}
    walkers = twalk + pwalk
    # Same walks for every engine: keep the documents all of them accept.
    walks, dropped = [], {w.name: 0 for w in walkers}
    for doc in docs:
        if len(walks) == want:
            break
        ids = tokenizer(doc, add_special_tokens=False).input_ids
        if vocab.decode(ids) != doc.encode():
            continue
        ok = True
        for w in walkers:
            w.reset()
            if not all(w.advance(t) for t in ids):
                dropped[w.name] += 1
                ok = False
        if ok:
            walks.append(ids)
    row = allocate_bitmask(1, len(vocab))
    for ids in walks:
        for w in walkers:
            w.reset()
        for pos in range(len(ids) + 1):
            for w in walkers:
                t0 = time.perf_counter()
                w.fill(row[0])
                results[w.name].masks.append(time.perf_counter() - t0)
            if pos < len(ids):
                for w in walkers:
                    w.advance(ids[pos])
    dropped["walks"] = len(walks)
    dropped["positions"] = sum(len(i) + 1 for i in walks)
    return list(results.values()), dropped


def fmt(x: float | None, scale: float = 1.0, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * scale:.{digits}f}"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return "-"
    return f"{a / b:.2f}x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="json + csv, 3 documents, no outlines-core on Gemma")
    ap.add_argument("--docs", type=int, default=10)
    ap.add_argument("--grammars", nargs="*", default=None)
    ap.add_argument("--tokenizers", nargs="*", default=["gemma", "bpe32k"], choices=["gemma", "bpe32k"])
    ap.add_argument("--threads", type=int, default=1, help="torch and xgrammar compile threads")
    ap.add_argument("--peer-tokenizer", choices=["hf", "bytes"], default="hf",
                    help="peers read the HF tokenizer themselves (hf) or trellis' token bytes (bytes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cold-repeats", type=int, default=1,
                    help="cold compiles per engine, median reported (outlines-core: always 1)")
    args = ap.parse_args()
    global COLD_REPEATS
    COLD_REPEATS = max(1, args.cold_repeats)
    torch.set_num_threads(args.threads)
    grammars = args.grammars or (QUICK_GRAMMARS if args.quick else GRAMMARS)
    ndocs = 3 if args.quick and args.docs == 10 else args.docs
    summary: dict[str, list[float]] = {}
    t_all = time.perf_counter()
    from trellis.constrain import compile_lark

    compile_lark('start: "a"')  # imports lark & co. once, outside every timed compile
    for tok_name in args.tokenizers:
        if tok_name == "gemma":
            from trellis.models import load

            h = load()
            tokenizer, vocab = h.tokenizer, h.vocab
        else:
            tokenizer = bpe32k()
            vocab = Vocabulary.from_hf(tokenizer)
        peer_tok = tokenizer if args.peer_tokenizer == "hf" else None
        from trellis.integrations.llguidance import lltokenizer
        from trellis.integrations.xgrammar import tokenizer_info

        setup_t = trellis_vocab_setup(vocab)
        setup_x, _ = timed(lambda: tokenizer_info(vocab, peer_tok))
        setup_l, _ = timed(lambda: lltokenizer(vocab, peer_tok))
        setup_o = timed(lambda: outlines_vocab(vocab))[0] if not (args.quick and len(vocab) > 100_000) else None
        print(f"\n== {tok_name}: {len(vocab):,} tokens; per-tokenizer setup (excluded below): trellis "
              f"{fmt(setup_t, 1, 2)}s, xgrammar {setup_x:.2f}s, llguidance {setup_l:.2f}s, "
              f"outlines-core {fmt(setup_o, 1, 2)}s", flush=True)
        print(f"{'grammar':<17} {'engine':<16} {'cold s':>8} {'warm s':>8} {'mask med ms':>12} {'p99 ms':>8} "
              f"{'med/xgr':>8} {'p99/xgr':>8} {'cold/xgr':>9}  note")
        for name in grammars:
            docs = grammar_docs(name, 8 * ndocs, args.seed)
            outlines = not (args.quick and len(vocab) > 100_000)
            results, info = bench(name, tokenizer, vocab, docs, want=ndocs, threads=args.threads, outlines=outlines,
                                  peer_tok=peer_tok)
            x = next((r for r in results if r.name == "xgrammar" and r.masks), None)
            for r in results:
                med, p99 = r.q(0.5), r.q(0.99)
                xm, xp, xc = (x.q(0.5), x.q(0.99), x.cold) if x else (None, None, None)
                print(f"{name:<17} {r.name:<16} {fmt(r.cold):>8} {fmt(r.warm):>8} {fmt(med, 1e3):>12} "
                      f"{fmt(p99, 1e3, 2):>8} {ratio(med, xm):>8} {ratio(p99, xp):>8} {ratio(r.cold, xc):>9}  {r.note}")
                if x and r.masks and r.name != "xgrammar":
                    summary.setdefault(r.name, []).append(med / xm)
            drop = {k: v for k, v in info.items() if k not in ("walks", "positions") and v}
            print(f"{'':<17} walks {info['walks']}, positions {info['positions']}"
                  + (f", documents dropped (rejected by): {drop}" if drop else ""), flush=True)
    geo = {k: math.exp(statistics.fmean(math.log(v) for v in vs)) for k, vs in summary.items() if vs}
    print("\nSUMMARY median mask time / xgrammar, geometric mean over rows: "
          + ", ".join(f"{k} {v:.2f}x" for k, v in sorted(geo.items()))
          + f" (seconds {time.perf_counter() - t_all:.0f})")


if __name__ == "__main__":
    main()
