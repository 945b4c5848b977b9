"""Batched generate vs one call per prompt, on the embedded Gemma 3 270M.

    python benchmarks/bench_batch.py [--prompts 8] [--max-new-tokens 32] [--threads 2] [--repeats 2]

Takes the first turn of ``--prompts`` Spec-Bench questions (one per category, in file order, so
their lengths differ: the batch needs left-padding holes), and times, with greedy decoding:

* ``sequential``: ``generate(model, p, max_new_tokens=N)`` for each prompt, one after another;
* ``batched``: ``generate(model, prompts, max_new_tokens=N)``: one result per prompt, decoded in
  lockstep (``Greedy.batch``: one forward per step for every live row).

Both are what a user calls, with defaults. It checks that the outputs are token for token the same
and prints tokens/s of each (generated tokens over wall time) and their ratio; runs alternate
(``--repeats`` rounds, best of each kept). The last line starts with SUMMARY.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import torch

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "spec_bench" / "question.jsonl"


def prompts(k: int) -> list[str]:
    seen, out = set(), []
    for line in DATA.read_text(encoding="utf-8").splitlines():
        q = json.loads(line)
        if q["category"] not in seen:
            seen.add(q["category"])
            out.append(q["turns"][0])
    if len(out) < k:  # fewer categories than prompts asked: take more of them in file order
        out += [json.loads(x)["turns"][0] for x in DATA.read_text(encoding="utf-8").splitlines()][: k - len(out)]
    return out[:k]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from trellis import generate, load

    model = load()
    ps = prompts(args.prompts)
    lens = [len(model.tokenizer(p).input_ids) for p in ps]
    generate(model, ps[0], max_new_tokens=2)  # warm-up: kernel tuning, allocator
    best = {"sequential": float("inf"), "batched": float("inf")}
    seq_out = bat_out = None
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        seq_out = [generate(model, p, max_new_tokens=args.max_new_tokens) for p in ps]
        best["sequential"] = min(best["sequential"], time.perf_counter() - t0)
        t0 = time.perf_counter()
        bat_out = generate(model, ps, max_new_tokens=args.max_new_tokens)
        best["batched"] = min(best["batched"], time.perf_counter() - t0)
    assert seq_out is not None and bat_out is not None
    same = [a.tokens == b.tokens for a, b in zip(seq_out, bat_out)]
    tokens = sum(len(r.tokens) for r in seq_out)
    print(f"{len(ps)} prompts of {min(lens)}-{max(lens)} tokens, max_new_tokens={args.max_new_tokens}, "
          f"{tokens} tokens generated, threads={args.threads}")
    print("| run | seconds | tokens/s |\n|---|---|---|")
    for k, s in best.items():
        print(f"| {k} | {s:.2f} | {tokens / s:.1f} |")
    for i, (a, b) in enumerate(zip(seq_out, bat_out)):
        if a.tokens != b.tokens:
            print(f"DIFF prompt {i}: sequential {a.text!r} vs batched {b.text!r}")
    ratio = best["sequential"] / best["batched"]
    print(f"SUMMARY batched/sequential tokens/s = {ratio:.2f}x, identical outputs {sum(same)}/{len(same)}")


if __name__ == "__main__":
    main()
