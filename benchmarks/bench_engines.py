"""Does the opt-in LALR(1) engine pay for itself? The default Earley engine against ``engine="lalr"``
on what users run (issue 56's "one engine unless two pay").

    python benchmarks/bench_engines.py [--schemas 100] [--docs 3] [--threads 1] [--out FILE]

Inputs: the shipped Lark grammars, the shared corpus' Lark grammars (lark/, outlines/; GBNF is
Earley-only), and ``--schemas`` maskbench schemas (``closed_objects=False``, as bench_fresh.py).
Gemma 3's 262,144-token vocabulary, prepared once (by ``trellis.load``) before anything is
timed. Documents: a schema's valid instances (HF tokens that decode back to the bytes); a
grammar's seeded random walks of the Earley constraint (bench_fresh.Walker), so both engines walk
the same token ids. A document the LALR language does not contain (it can be smaller: greedy
lexing) ends where LALR's advance refuses; those positions are counted, not timed.

Per input, engines interleaved (order alternating), each on its default settings
(``compile(spec, vocab, engine=...)``; ``lalr+pre`` adds ``precompute=True`` with a cold disk
cache, grammars only: it walks the vocabulary from every lexer state, seconds per grammar):

* fresh: compile + every mask along the first document (what a new request waits for), each
  engine from cold caches (``cold()``: nothing of the grammar or its terminals memoised or on disk);
* steady: every mask along the other documents, after the first warmed the grammar (a server's
  next requests on the same grammar: positions not seen before), p50 / p99;
* memory (``--memory``): a new process per engine compiles and walks every input, holding the
  last 8 constraints as ``compile``'s own cache does; RSS growth above the prepared vocabulary.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from bench_fresh import Timeout, Walker, deadline, first_line, grammar_inputs, q, schema_cases, schema_input  # noqa: E402

ENGINES = ("earley", "lalr", "lalr+pre")


def cold() -> None:
    """Forget what earlier inputs and the other engine built (process memos, shared walks, the disk
    cache: a new empty folder), keeping the prepared vocabulary: each engine's fresh request is its
    first sight of the grammar and of its terminals (the documents' walks warmed the Earley ones)."""
    from trellis.constrain.compile import clear_caches

    clear_caches()
    os.environ["TRELLIS_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_engines_")


def compile_with(engine: str, spec: Any, vocab: Any) -> Any:
    from trellis.constrain import compile
    from trellis.constrain.compile import COMPILED

    COMPILED.clear()  # a new request: no constraint object carried over
    if engine == "lalr+pre":
        return compile(spec, vocab, engine="lalr", precompute=True, progress=False)
    return compile(spec, vocab, engine=engine)


def walk_timed(c: Any, ids: list[int], row: torch.Tensor) -> tuple[list[float], int]:
    """Per-position mask times along ``ids`` (and EOS at the end); positions after a refused advance
    are returned as the count not walked."""
    s, times = c.start(), []
    for k, t in enumerate(ids + [None]):
        t0 = time.perf_counter()
        c.fill_mask(s, row)
        times.append(time.perf_counter() - t0)
        if t is None:
            break
        s = c.advance(s, t)
        if s is None:
            return times, len(ids) - k
    return times, 0


def documents(inp: Any, vocab: Any, tokenizer: Any, n: int, seed: int, row: torch.Tensor) -> list[list[int]]:
    if inp.kind == "schemas":
        out = []
        for doc in inp.docs[:n]:
            ids = tokenizer.encode(doc, add_special_tokens=False)
            if vocab.decode(ids) == doc.encode("utf-8"):
                out.append(ids)
        return out
    c = compile_with("earley", inp.trellis_spec, vocab)
    rng, w = random.Random(seed), Walker(vocab)
    out = []
    for _ in range(4 * n):
        ids = w.walk(c, rng, row)
        if ids:
            out.append(ids)
        if len(out) == n:
            break
    return out


def inputs(args: argparse.Namespace) -> list[Any]:
    grammars = [g for g in grammar_inputs(args.grammars) if g.is_lark]
    cases = schema_cases()
    random.Random(args.seed).shuffle(cases)
    return grammars + [schema_input(c) for c in cases[:args.schemas]]


def setup() -> tuple[Any, Any, torch.Tensor]:
    """The embedded Gemma's vocabulary (tables prepared) and tokenizer, a mask row, and a cold disk
    cache for what follows."""
    from trellis.mask import allocate_bitmask
    from trellis.models import load

    h = load()  # prepares the vocabulary tables (before the cache moves: they stay warm)
    os.environ["TRELLIS_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_engines_")
    return h.vocab, h.tokenizer, allocate_bitmask(1, len(h.vocab))[0]


def timing(args: argparse.Namespace) -> list[dict]:
    vocab, tokenizer, row = setup()
    rows = []
    for i, inp in enumerate(inputs(args)):
        try:
            with deadline(120):
                docs = documents(inp, vocab, tokenizer, args.docs, args.seed + i, row)
        except Exception as e:  # noqa: BLE001 - Earley refuses or times out: no documents to compare on
            rows.append({"kind": inp.kind, "name": inp.name, "skipped": first_line(e)})
            continue
        if not docs:
            rows.append({"kind": inp.kind, "name": inp.name, "skipped": "no documents"})
            continue
        engines = [e for e in ENGINES if inp.kind == "grammars" or e != "lalr+pre"]
        if i % 2:
            engines.reverse()
        r = {"kind": inp.kind, "name": inp.name, "docs": len(docs), "engines": {}}
        for e in engines:
            try:
                cold()
                with deadline(300):
                    t0 = time.perf_counter()
                    c = compile_with(e, inp.trellis_spec, vocab)
                    compile_t = time.perf_counter() - t0
                    first, cuts = walk_timed(c, docs[0], row)
                    steady = []
                    for d in docs[1:]:  # the grammar warm, these documents' positions new
                        ts, k = walk_timed(c, d, row)
                        steady += ts
                        cuts += k
                r["engines"][e] = {"compile": compile_t, "fresh": compile_t + sum(first), "first_mask": first[0],
                                   "steady": steady, "not_walked": cuts}
            except (Exception, Timeout) as exc:  # noqa: BLE001 - a refusal (LALR conflicts, collisions) is a result
                r["engines"][e] = {"refused": first_line(exc)}
        rows.append(r)
        print(f"[{i}] {inp.name}: " + ", ".join(
            f"{e} " + (f"fresh {v['fresh'] * 1e3:.1f} ms" if "fresh" in v else "refused")
            for e, v in r["engines"].items()), file=sys.stderr, flush=True)
    return rows


def memory(args: argparse.Namespace, engine: str) -> dict:
    """RSS growth in a new process that serves every input with ``engine`` (module docstring)."""
    vocab, tokenizer, row = setup()
    base = rss_mb()
    from trellis.constrain import compile

    served = 0
    for i, inp in enumerate(inputs(args)):
        if engine == "lalr+pre" and inp.kind != "grammars":
            continue
        try:
            with deadline(300):
                docs = documents(inp, vocab, tokenizer, args.docs, args.seed + i, row)
                kw = {"engine": "lalr", "precompute": True, "progress": False} if engine == "lalr+pre" else {"engine": engine}
                c = compile(inp.trellis_spec, vocab, **kw)
                for d in docs:
                    walk_timed(c, d, row)
            served += 1
        except (Exception, Timeout):  # noqa: BLE001 - refusals are counted by the timing pass
            continue
    return {"engine": engine, "served": served, "rss_growth_mb": rss_mb() - base,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def table(rows: list[dict], mem: list[dict]) -> None:
    print("| inputs | engine | compiled | fresh median | fresh p95 | first mask median | steady p50 | steady p99 | "
          "positions outside LALR's language |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kind in ("grammars", "schemas"):
        rs = [r for r in rows if r["kind"] == kind and "engines" in r]
        for e in ENGINES:
            got = [r["engines"][e] for r in rs if e in r["engines"]]
            ok = [g for g in got if "fresh" in g]
            if not got:
                continue
            if not ok:
                print(f"| {kind} | {e} | 0/{len(got)} | | | | | | |")
                continue
            fresh = [g["fresh"] * 1e3 for g in ok]
            steady = [t * 1e3 for g in ok for t in g["steady"]] or [float("nan")]
            print(f"| {kind} | {e} | {len(ok)}/{len(got)} | {statistics.median(fresh):.1f} ms | {q(fresh, 0.95):.1f} ms | "
                  f"{statistics.median(g['first_mask'] * 1e3 for g in ok):.2f} ms | {q(steady, 0.5):.3f} ms | "
                  f"{q(steady, 0.99):.2f} ms | {sum(g['not_walked'] for g in ok)} |")
        both = [r for r in rs if all("fresh" in r["engines"].get(e, {}) for e in ("earley", "lalr"))]
        if both:
            ratio = [r["engines"]["lalr"]["fresh"] / r["engines"]["earley"]["fresh"] for r in both]
            print(f"\n{kind}: on the {len(both)} inputs both engines compile, LALR fresh / Earley fresh: median "
                  f"{statistics.median(ratio):.2f}x")
    if mem:
        print("\n| engine | inputs served | RSS growth over the prepared vocabulary | peak RSS |\n|---|---|---|---|")
        for m in mem:
            print(f"| {m['engine']} | {m['served']} | {m['rss_growth_mb']:.0f} MB | {m['peak_rss_mb']:.0f} MB |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schemas", type=int, default=100)
    ap.add_argument("--docs", type=int, default=3)
    ap.add_argument("--grammars", nargs="*", default=None, help="only grammars whose name contains one of these")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--memory", action="store_true", help="also measure memory (a new process per engine)")
    ap.add_argument("--memory-of", choices=ENGINES, help=argparse.SUPPRESS)  # the child's mode
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    np.seterr(all="ignore")
    if args.memory_of:
        print(json.dumps(memory(args, args.memory_of)))
        return 0
    rows = timing(args)
    mem = []
    if args.memory:
        for e in ENGINES:
            cmd = [sys.executable, __file__, "--memory-of", e, "--schemas", str(args.schemas), "--docs", str(args.docs),
                   "--threads", str(args.threads), "--seed", str(args.seed)]
            if args.grammars is not None:
                cmd += ["--grammars", *args.grammars]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            mem.append(json.loads(out.strip().splitlines()[-1]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rows": rows, "memory": mem}, f)
    table(rows, mem)
    return 0


if __name__ == "__main__":
    sys.exit(main())
