"""A ``pattern`` with a length bound: what a new schema of that shape costs (issue 59).

    python benchmarks/bench_pattern_lengths.py [--no-peers] [--walk 48] [--out FILE]

Inputs, each a string schema ``{"type": "string", "pattern": P, "minLength": a, "maxLength": b}``:

* the issue's real schema, ``^https?://.+$``, at maxLength 64, 256, 1024 and 10,000;
* every distinct (pattern, minLength, maxLength) of a string with a pattern and a length bound in
  ../shared/data/maskbench (the real-world schemas; each node alone, as the schema a user sends).

Per input, on Gemma 3 270M's 262,144-token vocabulary (``trellis.load()``, tables prepared
untimed, as at a server's start), one process, 1 thread:

* trellis: ``compile(JsonSchema(s), vocab, cache=False)`` (translation included) and the first
  mask (``fill_mask``), then the masks along a seeded random walk of up to ``--walk`` tokens
  (tokens drawn from the mask as ``bench_fresh.Walker`` weighs them); a refusal is reported with
  its message and time;
* llguidance (unless ``--no-peers``): ``LLMatcher(grammar_from_json_schema(s))`` and its first
  mask, in the same run.

Prints per input: outcome, compile and first-mask ms for both, trellis' mask p99 along the walk;
then medians, the slowest, and the pooled mask distribution.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import statistics
import sys
import time
from typing import Any

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
MASKBENCH = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data", "maskbench"))
ISSUE = "^https?://.+$"


def maskbench_nodes() -> list[dict]:
    """Distinct string nodes with a pattern and a length bound, in file order."""
    out: dict[str, dict] = {}

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            if isinstance(x.get("pattern"), str) and ("maxLength" in x or "minLength" in x):
                s = {"type": "string", "pattern": x["pattern"]}
                for k in ("minLength", "maxLength"):
                    if isinstance(x.get(k), int):
                        s[k] = x[k]
                if len(s) > 2:
                    out.setdefault(json.dumps(s, sort_keys=True), s)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for f in sorted(glob.glob(os.path.join(MASKBENCH, "*.json"))):
        walk(json.load(open(f, encoding="utf-8"))["schema"])
    return list(out.values())


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--walk", type=int, default=48, help="tokens along each walk")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from bench_fresh import Walker

    from trellis.constrain import JsonSchema, SchemaError, compile
    from trellis.mask import allocate_bitmask, bitmask_to_bool
    from trellis.models import load

    h = load()
    vocab = h.vocab
    row = allocate_bitmask(1, len(vocab))[0]
    walker = Walker(vocab)
    lt = None
    if not args.no_peers:
        import llguidance

        from trellis.integrations.llguidance import lltokenizer

        lt = lltokenizer(vocab, h.tokenizer)
        llrow = torch.zeros(row.shape, dtype=torch.int32)
    inputs = [("issue", {"type": "string", "maxLength": n, "pattern": ISSUE}) for n in (64, 256, 1024, 10_000)]
    inputs += [("maskbench", s) for s in maskbench_nodes()]
    rows, pooled = [], []
    for i, (src, schema) in enumerate(inputs):
        r: dict = {"source": src, "schema": schema}
        t0 = time.perf_counter()
        try:
            c = compile(JsonSchema(schema), vocab, cache=False)
            r["compile_ms"] = (time.perf_counter() - t0) * 1e3
            s = c.start()
            t1 = time.perf_counter()
            c.fill_mask(s, row)
            r["first_mask_ms"] = (time.perf_counter() - t1) * 1e3
            rng, masks = random.Random(i), []
            for _ in range(args.walk):
                ww = walker.w * bitmask_to_bool(row.view(1, -1), len(vocab))[0].numpy()
                if ww.sum() <= 0:
                    break
                t = int(np.searchsorted(np.cumsum(ww), rng.random() * ww.sum(), side="right"))
                s = c.advance(s, t)
                if s is None:
                    raise RuntimeError(f"mask allows token {t} that advance refuses")
                t1 = time.perf_counter()
                c.fill_mask(s, row)
                masks.append((time.perf_counter() - t1) * 1e3)
            r["masks"], r["mask_p99_ms"] = len(masks), pct(masks, 0.99)
            pooled += [(m, i) for m in masks]
            r["outcome"] = "ok"
        except SchemaError as e:
            r["outcome"], r["refused_ms"], r["why"] = "refused", (time.perf_counter() - t0) * 1e3, str(e)[:120]
        if lt is not None:
            t0 = time.perf_counter()
            m = llguidance.LLMatcher(lt, llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema)), log_level=0)
            if m.is_error():
                r["llg"] = "error: " + m.get_error()[:80]
            else:
                r["llg_compile_ms"] = (time.perf_counter() - t0) * 1e3
                t1 = time.perf_counter()
                m.unsafe_compute_mask_ptr(llrow.data_ptr(), llrow.numel() * 4)
                r["llg_first_mask_ms"] = (time.perf_counter() - t1) * 1e3
        rows.append(r)
        print(f"{i:3d} {src:9s} {r['outcome']:7s} compile {r.get('compile_ms', r.get('refused_ms', 0)):8.1f} ms"
              f"  first mask {r.get('first_mask_ms', 0):6.2f}  mask p99 {r.get('mask_p99_ms', 0):6.2f}"
              f"  | llg {r.get('llg_compile_ms', float('nan')):6.1f} / {r.get('llg_first_mask_ms', float('nan')):5.2f}"
              f"  {schema.get('minLength', '')}..{schema.get('maxLength', '')} {schema['pattern'][:50]!r}"
              + (f"  [{r['why']}]" if r["outcome"] == "refused" else ""), flush=True)
    ok = [r for r in rows if r["outcome"] == "ok"]
    print(f"\n{len(ok)} of {len(rows)} compiled; refused {len(rows) - len(ok)}")
    comp = [r["compile_ms"] for r in ok]
    print(f"trellis compile ms: median {statistics.median(comp):.1f}, p90 {pct(comp, 0.9):.1f}, max {max(comp):.1f};"
          f" over 100 ms: {sum(x > 100 for x in comp)}")
    fm = [r["first_mask_ms"] for r in ok]
    print(f"trellis first mask ms: median {statistics.median(fm):.2f}, max {max(fm):.2f}")
    both = [r for r in ok if "llg_compile_ms" in r]
    if both:
        ratios = [(r["compile_ms"] + r["first_mask_ms"]) / (r["llg_compile_ms"] + r["llg_first_mask_ms"]) for r in both]
        print(f"compile + first mask, trellis / llguidance over {len(both)}: median {statistics.median(ratios):.2f}x,"
              f" llguidance median {statistics.median(r['llg_compile_ms'] + r['llg_first_mask_ms'] for r in both):.1f} ms")
    ms = [m for m, _ in pooled]
    if ms:
        print(f"masks along the walks: {len(ms)}, p50 {pct(ms, 0.5):.3f}, p99 {pct(ms, 0.99):.2f}, max {max(ms):.2f} ms")
        for m, i in sorted(pooled, reverse=True)[:5]:
            print(f"  {m:7.2f} ms  input {i}")
    if args.out:
        json.dump(rows, open(args.out, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
