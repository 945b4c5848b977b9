"""What a CLI user waits for: a NEW process per schema, from ``load()`` to the first mask.

    python benchmarks/bench_first_mask.py [--schemas 20] [--seed 0] [--out FILE]

Per maskbench schema (``closed_objects=False``, as bench_fresh.py), one child process per engine,
engines alternating. Each child loads the embedded Gemma 3 270M (``trellis.load()``, its
tokenizer and 262,144-token vocabulary), then:

* trellis: ``compile(JsonSchema(schema), vocab)`` and the first mask (``fill_mask``), then every
  mask along one valid instance (the fresh request); ``load()`` prepares the per-vocabulary tables
  (``constrain/vocab/tables.py``, from the disk cache the first child wrote), so its time is in
  ``load``;
* llguidance: its ``LLTokenizer`` for the same tokenizer (``trellis.integrations.llguidance.
  lltokenizer``, what a process must build before its first mask: "setup"), then
  ``LLMatcher(grammar_from_json_schema(...))`` and the first mask, then every mask along the same
  instance.

Reported per engine: the median of ``load``, of setup, of "first mask after load" (setup +
compile + first mask: the wait the issue bounds at 200 ms) and of the fresh request, and the ratio
trellis / llguidance of first-mask-after-load. One thread (``torch.set_num_threads(1)``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


def child(engine: str, case_file: str) -> dict:
    import torch

    torch.set_num_threads(1)
    from bench_fresh import schema_input

    from trellis.mask import allocate_bitmask
    from trellis.models import load

    case = json.load(open(case_file))
    t0 = time.perf_counter()
    h = load()
    t_load = time.perf_counter() - t0
    vocab, tok = h.vocab, h.tokenizer
    inp = schema_input(case)
    ids = None
    for doc in inp.docs:
        x = tok.encode(doc, add_special_tokens=False)
        if vocab.decode(x) == doc.encode("utf-8"):
            ids = x
            break
    row = allocate_bitmask(1, len(vocab))[0]
    out = {"engine": engine, "name": inp.name, "load": t_load, "setup": 0.0}
    if engine == "trellis":
        from trellis.constrain import compile

        t1 = time.perf_counter()
        c = compile(inp.trellis_spec, vocab)
        s = c.start()
        c.fill_mask(s, row)
        out["first"] = time.perf_counter() - t1
        for t in ids or []:
            s = c.advance(s, t)
            if s is None:
                out["rejected"] = True
                break
            c.fill_mask(s, row)
        out["fresh"] = time.perf_counter() - t1
    else:
        import llguidance

        from trellis.integrations.llguidance import lltokenizer

        t1 = time.perf_counter()
        lt = lltokenizer(vocab, tok)
        out["setup"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        m = llguidance.LLMatcher(lt, inp.llg_make(), log_level=0)
        if m.is_error():
            return {**out, "refused": m.get_error()}
        m.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * 4)
        out["first"] = time.perf_counter() - t1
        out["first_after_setup"] = time.perf_counter() - t2
        for t in ids or []:
            if not m.consume_token(t):
                out["rejected"] = True
                break
            m.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * 4)
        out["fresh"] = time.perf_counter() - t1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schemas", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engines", nargs="*", default=["trellis", "llguidance"])
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    import tempfile

    from bench_fresh import schema_cases

    cases = schema_cases()
    random.Random(args.seed).shuffle(cases)
    rows: list[dict] = []
    # the first child builds and writes the vocabulary tables; every later one reads them
    warm = [sys.executable, __file__, "--child", "trellis"]
    with tempfile.TemporaryDirectory() as d:
        k = 0
        for case in cases:
            if k == args.schemas:
                break
            f = os.path.join(d, "case.json")
            json.dump(case, open(f, "w"))
            if not rows:
                subprocess.run(warm + [f], capture_output=True, text=True, timeout=600)
            got = []
            engines = args.engines if k % 2 == 0 else args.engines[::-1]
            for e in engines:
                r = subprocess.run([sys.executable, __file__, "--child", e, f], capture_output=True, text=True,
                                   timeout=600)
                if r.returncode != 0:
                    got.append({"engine": e, "name": case["name"], "error": r.stderr.strip().splitlines()[-1:]})
                    continue
                got.append(json.loads(r.stdout.strip().splitlines()[-1]))
            if all("first" in g for g in got):
                rows += got
                k += 1
                print(" | ".join(f"{g['engine']} load {g['load']:.2f}s first {g['first'] * 1e3:.0f} ms" for g in got),
                      case["name"], file=sys.stderr, flush=True)
    if args.out:
        json.dump(rows, open(args.out, "w"))
    print(f"{k} schemas, a new process per schema and engine\n")
    print("| engine | load() median | setup median | first mask after load median / p95 | fresh request median |")
    print("|---|---|---|---|---|")
    med = {}
    for e in args.engines:
        rs = [r for r in rows if r["engine"] == e]
        first = sorted(r["first"] * 1e3 for r in rs)
        med[e] = statistics.median(first)
        print(f"| {e} | {statistics.median(r['load'] for r in rs):.2f} s | {statistics.median(r['setup'] for r in rs) * 1e3:.0f} ms "
              f"| {med[e]:.0f} / {first[int(0.95 * (len(first) - 1))]:.0f} ms | "
              f"{statistics.median(r['fresh'] for r in rs) * 1e3:.0f} ms |")
    if "trellis" in med and "llguidance" in med:
        t = {r["name"]: r for r in rows if r["engine"] == "trellis"}
        ratios = [t[r["name"]]["first"] / r["first"] for r in rows if r["engine"] == "llguidance"]
        after = [t[r["name"]]["first"] / r["first_after_setup"] for r in rows if r["engine"] == "llguidance"]
        print(f"\ntrellis / llguidance, first mask after load (median of per-schema ratios): "
              f"{statistics.median(ratios):.3f}x; llguidance without its setup: {statistics.median(after):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
