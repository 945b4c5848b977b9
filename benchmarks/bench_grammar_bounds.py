"""Worst-case masks and compiles on real grammars (issue 58): can one grammar stall a server?

    python benchmarks/bench_grammar_bounds.py [--walks 10] [--tokens 40] [--seed 0]
                                              [--grammars NAME ...] [--limit-s 120] [--out r.json]
                                              [--freeze-heap] [--xgrammar-macros]

Grammars: trellis' shipped ones, the shared corpus (``../shared/data/grammars``: lark/, outlines/, llama.cpp/) and
``benchmarks/data/real_grammars`` (Lark and GBNF files collected from public repositories, origins
in its ORIGINS.md; none of them in the shared corpus); with ``--xgrammar-macros`` instead, xgrammar's
own test grammars that use its ``Regex``/``Substring``/``TagDispatch`` macros, token elements or lazy rules. Vocabulary: Gemma 3
270M's 262,144 tokens.

Per grammar, in this process, on the default path (``compile(spec, vocab)``, the Earley engine, its
default work bounds): the compile is timed from the text to the first mask (cold: the process's
walk caches are cleared and the disk cache is off, ``TRELLIS_CACHE_DIR`` a fresh temp dir), then
``--walks`` seeded random walks of up to ``--tokens`` tokens (``bench_fresh.Walker``: short and
punctuation tokens favoured, EOS on a coin flip once allowed) time every ``fill_mask`` and every
``advance``. A typed refusal (``GrammarError``: an unsupported feature, or a work bound exceeded,
``GrammarBudgetError``) ends the compile or the walk and is counted with its message; any other
exception is a failure. A grammar that runs past ``--limit-s`` in Python code is cut (SIGALRM) and
reported as a stall. Timings include whatever the process does meanwhile, CPython's full garbage
collections included (a full collection traverses every tracked object of the process, torch's and
transformers' ~450k among them: 0.5-0.9 s here); ``--freeze-heap`` freezes the heap after loading
the model, as vLLM's engine does after start-up. Each grammar starts cold: ``clear_caches()``, then
an untimed ``gc.collect()`` of the garbage that reset made.

Prints per grammar: compile ms (or the refusal), masks timed, p50/p99/max mask ms, budget errors;
then the pooled distribution of mask times, the worst 10 masks with grammar, walk and position,
and the compile times over 2 s. The last line starts with SUMMARY. Threads: 1 (torch and numpy).
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import random
import re
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from bench_fresh import Timeout, Walker, deadline, first_line  # noqa: E402
from trellis.constrain.earley.scannerless import EarleyConstraint  # noqa: E402

CORPUS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "shared", "data", "grammars")
REAL = os.path.join(HERE, "data", "real_grammars")


def grammar_files(names: list[str] | None) -> list[tuple[str, str, str]]:
    """(name, path, start rule) of every grammar file: the shared corpus, then the collected set
    (the files ORIGINS.md lists)."""
    from trellis.constrain import shipped_grammars

    starts = _origins_starts()
    out = [(f"shipped/{g}", g, "start") for g in shipped_grammars()]  # generate(grammar="json.lark")
    for sub, ext in (("lark", "lark"), ("outlines", "lark"), ("llama.cpp", "gbnf")):
        for p in sorted(glob.glob(os.path.join(CORPUS, sub, f"*.{ext}"))):
            if os.path.basename(p) != "common.lark":  # a library of terminals, no start rule
                out.append((f"shared/{sub}/{os.path.basename(p)}", p, "start" if ext == "gbnf" else _first_rule(p)))
    for f, start in sorted(starts.items()):
        if start is None:  # a file another grammar imports
            continue
        out.append((f"real/{f}", os.path.join(REAL, f), "start" if f.endswith(".gbnf") else start))
    return [x for x in out if not names or any(n in x[0] for n in names)]


def _first_rule(path: str) -> str:
    """``start`` if the Lark file defines it, else its first rule (lark's test grammars are loaded
    with ``start=`` naming one of theirs)."""
    rules = re.findall(r"^[?!]?([a-z_][a-z_0-9]*)(?:\.\d+)?\s*:", open(path, encoding="utf-8").read(), re.M)
    return "start" if "start" in rules or not rules else rules[0]


def _origins_starts() -> dict[str, str | None]:
    """file (relative to REAL) -> start rule, from ORIGINS.md's table (column 'start rule'; None:
    a helper file that another grammar imports)."""
    path = os.path.join(REAL, "ORIGINS.md")
    if not os.path.exists(path):
        return {}
    out: dict[str, str | None] = {}
    cols: list[str] = []
    for line in open(path, encoding="utf-8"):
        if not line.startswith("|"):
            continue
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if not cols:
            cols = [c.lower() for c in cells]
            continue
        if set(cells[0]) <= set("-: ") or not os.path.isfile(os.path.join(REAL, cells[0])):
            continue  # the separator row, or a row of another table
        row = dict(zip(cols, cells))
        f, s = row.get("file", ""), row.get("start rule", "start") or "start"
        out[f] = None if "helper" in s else s.split()[0]
    return out


XGRAMMAR_TESTS = os.path.join(HERE, "data", "xgrammar_ebnf", "grammars.json")
_MACRO = re.compile(r"\b(Regex|Substring|TagDispatch|Token|ExcludeToken|TokenTagDispatch)\s*\(|<\[|\blazy\b|\bmax_chars\b")


def xgrammar_macro_grammars(names: list[str] | None) -> list[tuple[str, Any, str]]:
    """(name, Gbnf spec, start rule) of xgrammar's own test grammars (``--xgrammar-macros``,
    ``data/xgrammar_ebnf``) that call its macros ``Regex``, ``Substring``, ``TagDispatch``, its token
    elements (``Token``, ``ExcludeToken``, ``TokenTagDispatch``: ids resolved against Gemma's
    vocabulary, where 1 and 106 are EOS ids and a grammar naming one is refused), a ``lazy`` or a
    ``max_chars`` rule:
    the EBNF vLLM users send (structural tags), one per distinct (text, root rule)."""
    from trellis.constrain import Gbnf

    seen: set = set()
    out = []
    for r in json.load(open(XGRAMMAR_TESTS, encoding="utf-8")):
        key = (r["ebnf"], r["root_rule_name"] or "root")
        if r["role"] == "test_input" and key not in seen and _MACRO.search(key[0]):
            seen.add(key)
            out.append((f"xgrammar/{r['id']}", Gbnf(key[0], source=r["id"], root=key[1]), "start"))
    return [x for x in out if not names or any(n in x[0] for n in names)]


def spec_of(path: Any) -> Any:
    """What ``compile`` takes for a grammar file (a ``Gbnf`` for a .gbnf file); a spec as it is."""
    from trellis.constrain import Gbnf

    if not isinstance(path, str):
        return path
    if path.endswith(".gbnf"):
        return Gbnf.from_file(path) if os.path.isfile(path) else path
    return path


def run_grammar(name: str, path: Any, start: str, vocab: Any, walker: Walker, args: argparse.Namespace) -> dict:
    from trellis.constrain import compile
    from trellis.constrain.compile import clear_caches
    from trellis.constrain.errors import GrammarError
    from trellis.mask import allocate_bitmask, bitmask_to_bool

    clear_caches()
    # The reset leaves the previous grammar's memos as cyclic garbage that no server makes (item
    # sets point at each other); collected here, untimed, instead of inside some later mask.
    gc.collect()
    rec: dict[str, Any] = {"name": name, "start": start, "masks": [], "advances": [], "refused": None,
                           "budget_errors": [], "failures": [], "stalled": False}
    row = allocate_bitmask(1, len(vocab))[0]
    try:
        with deadline(args.limit_s):
            t0 = time.perf_counter()
            try:
                c = compile(spec_of(path), vocab, start=start)  # the default path: shared walks, disk cache (fresh dir)
                s = c.start()
                c.fill_mask(s, row)
            except GrammarError as e:
                rec["refused"] = first_line(e)
                rec["compile_ms"] = (time.perf_counter() - t0) * 1e3
                return rec
            rec["compile_ms"] = (time.perf_counter() - t0) * 1e3
            rng = random.Random(f"{args.seed}-{name}")
            for w in range(args.walks):
                s, pos = c.start(), 0
                while pos < args.tokens:
                    _reset_work(c)
                    t1 = time.perf_counter()
                    try:
                        c.fill_mask(s, row)
                    except GrammarError as e:  # the caller waited this long for the error
                        rec["budget_errors"].append((w, pos, first_line(e), (time.perf_counter() - t1) * 1e3))
                        break
                    rec["masks"].append(((time.perf_counter() - t1) * 1e3, w, pos, _work(c)))
                    ok = bitmask_to_bool(row.view(1, -1), len(vocab))[0].numpy()
                    acc = c.is_accepting(s)
                    if acc and pos and rng.random() < 0.15:
                        break
                    ww = walker.w * ok
                    tot = ww.sum()
                    if tot <= 0:
                        break
                    tok = int(np.searchsorted(np.cumsum(ww), rng.random() * tot, side="right"))
                    t1 = time.perf_counter()
                    try:
                        nxt = c.advance(s, tok)
                    except GrammarError as e:
                        rec["budget_errors"].append((w, pos, first_line(e), (time.perf_counter() - t1) * 1e3))
                        break
                    rec["advances"].append(((time.perf_counter() - t1) * 1e3, w, pos))
                    if nxt is None:
                        rec["failures"].append(f"walk {w} pos {pos}: the mask allowed token {tok} that advance refuses")
                        break
                    s, pos = nxt, pos + 1
    except Timeout:
        rec["stalled"] = True
    except Exception as e:  # noqa: BLE001 - reported, never hidden
        rec["failures"].append(first_line(e))
    return rec


def _reset_work(c: Any) -> None:
    """Zero the work count, so that ``_work`` after a mask served from the mask cache says 0 (a
    computed mask resets it itself)."""
    if isinstance(c, EarleyConstraint):
        c.earley.work = 0


def _work(c: Any) -> int:
    """The work units the last mask counted (the Earley engine's; other engines count none)."""
    return int(c.earley.work) if isinstance(c, EarleyConstraint) else 0


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--walks", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--grammars", nargs="*")
    ap.add_argument("--limit-s", type=float, default=120.0)
    ap.add_argument("--out")
    ap.add_argument("--xgrammar-macros", action="store_true",
                    help="instead of the grammar files: xgrammar's own test grammars that use its Regex, "
                         "Substring or TagDispatch macros (data/xgrammar_ebnf)")
    ap.add_argument("--freeze-heap", action="store_true",
                    help="after loading the model, move every object the collector tracks out of its "
                         "reach (gc.freeze), as vLLM's engine does after start-up (vllm.utils.gc_utils."
                         "freeze_gc_heap): full collections then traverse only what came later")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from trellis import load

    vocab = load().vocab  # before TRELLIS_CACHE_DIR moves: the converted model lives in the user's cache
    os.environ["TRELLIS_CACHE_DIR"] = tempfile.mkdtemp(prefix="trellis-bounds-")  # no disk walks from earlier runs
    if args.xgrammar_macros:
        # as a server does at start-up (the vLLM processor's warm()): the per-vocabulary tables,
        # untimed, not inside the first grammar's compile and masks (~1 s, then a 0.3-0.4 s mask)
        from trellis.constrain import prepare_vocabulary

        prepare_vocabulary(vocab)
    if args.freeze_heap:
        for g in (0, 1, 2):
            gc.collect(g)
        gc.freeze()
    walker = Walker(vocab)
    recs = []
    print(f"{'grammar':58s} {'compile':>9s} {'masks':>5s} {'p50':>7s} {'p99':>7s} {'max':>8s}  notes", flush=True)
    grammars = xgrammar_macro_grammars(args.grammars) if args.xgrammar_macros else grammar_files(args.grammars)
    for name, path, start in grammars:
        r = run_grammar(name, path, start, vocab, walker, args)
        recs.append(r)
        ms = [m[0] for m in r["masks"]]
        notes = []
        if r["refused"]:
            notes.append("refused: " + r["refused"])
        if r["budget_errors"]:
            notes.append(f"{len(r['budget_errors'])} budget errors: {r['budget_errors'][0][2][:90]}")
        if r["failures"]:
            notes.append("FAILED: " + r["failures"][0][:100])
        if r["stalled"]:
            notes.append(f"STALLED past {args.limit_s:g} s")
        print(f"{name[:58]:58s} {r.get('compile_ms', float('nan')):9.1f} {len(ms):5d} {pct(ms, 50):7.2f} "
              f"{pct(ms, 99):7.2f} {max(ms, default=float('nan')):8.2f}  {'; '.join(notes)}", flush=True)
    pooled = [(m, r["name"], w, p, k) for r in recs for m, w, p, k in r["masks"]]
    ms = [x[0] for x in pooled]
    adv = [m for r in recs for m, _, _ in r["advances"]]
    waits = ms + [e[3] for r in recs for e in r["budget_errors"]]  # a refused mask (or advance) is a wait too
    print(f"masks and refused masks or advances (the wait either way): {len(waits)}; "
          + " ".join(f"p{q}={pct(waits, q):.3f}" for q in (50, 99)) + f" max={max(waits, default=0):.2f} ms")
    by = {}
    for r in recs:
        if r["budget_errors"]:
            by[r["name"]] = len(r["budget_errors"])
    print(f"walks ended by a budget error: {sum(by.values())} of {sum(1 for r in recs if r['masks']) * args.walks} "
          f"({', '.join(f'{n} {k}' for n, k in sorted(by.items(), key=lambda x: -x[1]))})")
    print(f"\nmasks: {len(ms)} over {sum(1 for r in recs if r['masks'])} grammars; "
          + " ".join(f"p{q}={pct(ms, q):.3f}" for q in (50, 90, 99, 99.9)) + f" max={max(ms, default=0):.2f} ms")
    print("advance: " + " ".join(f"p{q}={pct(adv, q):.3f}" for q in (50, 99)) + f" max={max(adv, default=0):.2f} ms")
    print("worst 10 masks (ms, grammar, walk, position, work units):")
    for m, n, w, p, k in sorted(pooled, reverse=True)[:10]:
        print(f"  {m:9.2f}  {n}  walk {w}  token {p}  {k:,}")
    big = [(m, k) for m, _, _, _, k in pooled if k >= 1000]
    if big:  # how many microseconds a unit of work costs where the work is large (the bound's scale)
        us = sorted(1e3 * m / k for m, k in big)
        print(f"us per work unit over {len(big)} masks of >= 1,000 units: median {us[len(us) // 2]:.2f}, "
              f"max {us[-1]:.2f}; most work in one mask: {max(k for _, k in big):,}")
    slow = sorted(((r.get("compile_ms", 0), r["name"]) for r in recs), reverse=True)
    print("compiles over 2 s: " + (", ".join(f"{n} {c / 1e3:.1f} s" for c, n in slow if c > 2000) or "none"))
    print("slowest 5 compiles: " + ", ".join(f"{n} {c:.0f} ms" for c, n in slow[:5]))
    refused = [r for r in recs if r["refused"]]
    budget = sum(len(r["budget_errors"]) for r in recs)
    failed = [r["name"] for r in recs if r["failures"]]
    stalled = [r["name"] for r in recs if r["stalled"]]
    if args.out:
        with open(args.out, "w") as f:
            json.dump(recs, f)
    print(f"SUMMARY grammars={len(recs)} refused={len(refused)} masks={len(ms)} p99={pct(ms, 99):.2f}ms "
          f"max={max(ms, default=0):.2f}ms wait_max={max(waits, default=0):.2f}ms budget_errors={budget} failed={len(failed)} stalled={len(stalled)} "
          f"compiles_over_2s={sum(1 for c, _ in slow if c > 2000)}"
          + (f" FAILED={failed}" if failed else "") + (f" STALLED={stalled}" if stalled else ""))
    return 1 if failed or stalled else 0


if __name__ == "__main__":
    sys.exit(main())
