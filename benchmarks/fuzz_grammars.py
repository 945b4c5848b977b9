"""Fuzz every shipped grammar: random-logit constrained decodes on a tiny vocabulary and on Gemma 3.

    python benchmarks/fuzz_grammars.py --tiny 10000 --gemma 500 [--grammars json.lark csv.lark]

Per grammar and vocabulary prints decodes, finished (EOS), parsed % (finished outputs that Lark's
own LALR parser accepts: must be 100), empty-mask count (must be 0), EOS/accepting mismatches and
refused tokens (must be 0), steps and seconds, with minimal repros of any failure. The decode
logic is tests/constrain/test_fuzz.py's ``fuzz``. The last line starts with SUMMARY.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from tests.constrain.test_fuzz import (BUDGET, fuzz, format_stats, gemma_favoured, lark_parser,  # noqa: E402
                                       tiny_vocab)
from trellis.constrain import compile, shipped_grammars  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiny", type=int, default=300, help="decodes per grammar on the tiny vocabulary")
    ap.add_argument("--gemma", type=int, default=5, help="decodes per grammar on Gemma 3's vocabulary (0: skip)")
    ap.add_argument("--grammars", nargs="*", default=None)
    ap.add_argument("--budget", type=int, default=BUDGET, help="max tokens per decode")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    names = args.grammars or shipped_grammars()
    rows, seconds = [], {}
    t_all = time.perf_counter()
    for name in names:
        if args.tiny:
            t0 = time.perf_counter()
            c = compile(name, tiny_vocab(name), cache=False)
            rows.append(fuzz(name, c, lark_parser(name), args.tiny, seed=args.seed, budget=args.budget, label="tiny"))
            seconds[(name, "tiny")] = time.perf_counter() - t0
            print(f"{name} tiny: {seconds[(name, 'tiny')]:.1f} s", flush=True)
    if args.gemma:
        from trellis.models import load

        h = load()
        for name in names:
            t0 = time.perf_counter()
            c = compile(name, h.vocab)
            rows.append(fuzz(name, c, lark_parser(name), args.gemma, seed=args.seed + 1, budget=args.budget,
                             favoured=gemma_favoured(name, h.vocab), label="gemma"))
            seconds[(name, "gemma")] = time.perf_counter() - t0
            print(f"{name} gemma: {seconds[(name, 'gemma')]:.1f} s", flush=True)
    print()
    print(format_stats(rows))
    print()
    for s in rows:
        key = (s.grammar, s.vocab)
        per_step = 1000 * seconds[key] / max(s.steps, 1)
        print(f"{s.grammar:<18} {s.vocab:<6} {seconds[key]:8.1f} s  {per_step:6.2f} ms/step")
    bad = [s for s in rows if not s.ok]
    print(f"\nSUMMARY grammars={len(names)} decodes={sum(s.decodes for s in rows)} "
          f"finished={sum(s.finished for s in rows)} parsed={sum(s.parsed for s in rows)} "
          f"empty_masks={sum(s.empty_masks for s in rows)} eos_mismatch={sum(s.eos_mismatch for s in rows)} "
          f"refused={sum(s.refused for s in rows)} failing={[f'{s.grammar}/{s.vocab}' for s in bad]} "
          f"seconds={time.perf_counter() - t_all:.0f}")


if __name__ == "__main__":
    main()
