"""Forward-pass benchmark on Gemma 3 270M (CPU).

(a) trellis greedy vs transformers ``model.generate`` greedy: same prompt, 128 new tokens,
    alternating runs in one process; prints the tokens/s ratio (trellis / transformers), also for
    trellis restricted to the BLAS kernels (no ``int8_blocks``), and the first run's time (it
    prepares the kernels: the int8 block search, tuning unless ``kernels.json`` has it).
(b) cost of verifying k tokens in one forward relative to one token (k = 1..32) on top of a
    ~200-token KV cache: the curve that sets speculative budgets on this machine.

    python benchmarks/bench_forward.py --threads 2 [--reps 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--model", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from trellis import Decoder, Greedy, HFLanguageModel, TokenTree, load

    h = load(args.model)
    model, tok = h.model, h.tokenizer
    prompt = tok("Write a short story about a lighthouse keeper who finds a message in a bottle.").input_ids
    n = args.new_tokens

    from trellis.kernels import BLAS_KERNELS, TunedLinears

    # the kernels before int8_blocks (2026-11-26), to show its share in the same run
    blas = TunedLinears.for_model(model, 16, kernels=BLAS_KERNELS)

    def run_trellis(blas_only: bool = False) -> tuple[float, list[int]]:
        lm = HFLanguageModel(model)  # fresh cache: prefill counted like transformers'
        if blas_only:
            lm.kernels = blas
        dec = Decoder(lm)
        t0 = time.perf_counter()
        out = Greedy()(dec, dec.start(prompt), max_new_tokens=n)[0].new_tokens
        return time.perf_counter() - t0, list(out)

    def run_hf() -> tuple[float, list[int]]:
        ids = torch.tensor([prompt])
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)
        return time.perf_counter() - t0, out[0, len(prompt):].tolist()

    t0 = time.perf_counter()
    run_trellis()  # warm-up; the first one also prepares the kernels (timed: a new process pays it)
    first = time.perf_counter() - t0
    run_trellis(blas_only=True), run_hf()
    ours, blas_t, theirs = [], [], []
    same = same_blas = True
    for _ in range(args.reps):
        t, a = run_trellis()
        ours.append(t)
        t, c = run_trellis(blas_only=True)
        blas_t.append(t)
        t, b = run_hf()
        theirs.append(t)
        same &= a[: len(b)] == b
        same_blas &= c[: len(b)] == b
    tps_ours, tps_hf = n / statistics.median(ours), n / statistics.median(theirs)
    tps_blas = n / statistics.median(blas_t)
    print(f"(a) greedy {n} tokens, {args.threads} threads, median of {args.reps}:")
    print(f"    trellis      {tps_ours:7.2f} tok/s   (first run, kernels prepared: {first:.1f} s)")
    print(f"    trellis BLAS {tps_blas:7.2f} tok/s   (no int8_blocks)")
    print(f"    transformers {tps_hf:7.2f} tok/s")
    print(f"    ratio trellis/transformers = {tps_ours / tps_hf:.3f}   identical tokens: {same}")
    print(f"    ratio trellis BLAS/transformers = {tps_blas / tps_hf:.3f}   identical tokens: {same_blas}")

    lm = HFLanguageModel(model)
    if lm.kernels is not None:  # tuned once per machine (cached); print what each row count uses
        print("GEMM kernels per weight shape and row bucket:", lm.kernels.choices())
    long_prompt = (prompt * 20)[:200]
    lm.logits([long_prompt])
    base = None
    print("(b) k tokens verified in one forward on a 200-token cache (median of 5):")
    print("    k   ms      cost(k)/cost(1)")
    costs = {}
    for k in [1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32]:
        tree = TokenTree.chain([int(t) for t in long_prompt[10:10 + k - 1]])  # k-1 nodes + 1 prefix token
        times = []
        for _ in range(6):
            t0 = time.perf_counter()
            lm.tree_logits(long_prompt, tree)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times[1:])
        base = base or med
        costs[k] = med / base
        print(f"    {k:<3} {med * 1e3:6.1f}  {med / base:5.2f}")
    print(f"SUMMARY bench_forward: greedy ratio {tps_ours / tps_hf:.3f} (trellis {tps_ours:.1f} vs hf {tps_hf:.1f} tok/s); "
          f"verify cost k=4 {costs[4]:.2f}x, k=8 {costs[8]:.2f}x, k=16 {costs[16]:.2f}x, k=32 {costs[32]:.2f}x of k=1")


if __name__ == "__main__":
    main()
