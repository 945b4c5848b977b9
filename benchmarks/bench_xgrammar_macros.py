"""Mask and compile times on Gemma 3 270M's vocabulary for xgrammar's own test grammars that use its
macros ``Regex``, ``Substring`` or ``TagDispatch`` (issue 58: no grammar may stall a server).

    python benchmarks/bench_xgrammar_macros.py [--walks 3] [--steps 20]

Corpus: ``benchmarks/data/xgrammar_ebnf/grammars.json`` (role ``test_input``), the distinct grammars
that call one of those macros and that trellis compiles. The vocabulary is prepared first
(``prepare_vocabulary``), as a server does once. Per grammar: ``compile(Gbnf(text, root=...),
vocab)``, then ``--walks`` seeded random walks of up to ``--steps`` tokens, each token drawn
uniformly from the mask; every ``fill_mask`` is timed. A walk that meets the mask work bound
(``GrammarBudgetError``) is printed as BOUND and ends. Prints per grammar, then the distribution
and the 8 worst grammars.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trellis import load  # noqa: E402
from trellis.constrain import GrammarBudgetError, compile, prepare_vocabulary  # noqa: E402
from trellis.constrain.errors import GrammarError  # noqa: E402
from trellis.constrain.gbnf import Gbnf  # noqa: E402
from trellis.mask import allocate_bitmask, bitmask_to_bool  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "xgrammar_ebnf" / "grammars.json"
MACRO = re.compile(r"\b(Regex|Substring|TagDispatch)\s*\(")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--walks", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    vocab = load().vocab
    prepare_vocabulary(vocab)
    row = allocate_bitmask(1, len(vocab))[0]
    seen: set = set()
    rows = []
    for r in json.loads(DATA.read_text()):
        key = (r["ebnf"], r["root_rule_name"] or "root")
        if r["role"] != "test_input" or key in seen or not MACRO.search(key[0]):
            continue
        seen.add(key)
        try:
            t0 = time.perf_counter()
            c = compile(Gbnf(key[0], root=key[1]), vocab)
            tc = time.perf_counter() - t0
        except GrammarError:
            continue  # refused by name (token macros, rule options) or refused by xgrammar too
        times = []
        for w in range(args.walks):
            rng, s = random.Random(w), c.start()
            for _ in range(args.steps):
                t = time.perf_counter()
                try:
                    c.fill_mask(s, row)
                except GrammarBudgetError as e:
                    print(f"BOUND {r['id']} walk {w}: {e.message[:100]}")
                    break
                times.append(time.perf_counter() - t)
                ok = np.flatnonzero(bitmask_to_bool(row.view(1, -1), len(vocab))[0].numpy())
                tok = int(rng.choice(ok))
                if tok in vocab.eos:
                    break
                s = c.advance(s, tok)
        rows.append((max(times, default=0.0), r["id"], tc, times))
        print(f"{r['id']}: compile {tc * 1000:.0f} ms, {len(times)} masks, max {rows[-1][0] * 1000:.1f} ms", flush=True)
    allt = np.array([t for x in rows for t in x[3]]) * 1000
    print(f"SUMMARY grammars={len(rows)} masks={len(allt)} p50={np.percentile(allt, 50):.2f} "
          f"p99={np.percentile(allt, 99):.1f} max={allt.max():.1f} ms; compile max "
          f"{max(x[2] for x in rows) * 1000:.0f} ms")
    for m, gid, tc, _ in sorted(rows, reverse=True)[:8]:
        print(f"  worst {gid}: mask max {m * 1000:.1f} ms, compile {tc * 1000:.0f} ms")


if __name__ == "__main__":
    main()
