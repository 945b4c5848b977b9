"""Search strategies on Gemma 3 270M (CPU): few-shot addition of two small integers with a checkable answer.

Every method decodes the same problems under the same regex constraint (`` \\d{1,4}\\n``); success is
the generated number equal to a + b. Per problem the LM's KV cache is reset, so every method pays its
own prefill; forward tokens are the ``lm.stats.tokens_forwarded`` delta. MCTS's reward is the model's
own mean log-prob (no access to the answer). EntropyGate's pause rate is read from its search tree
(``paused`` flags on the step nodes). Prints a table and a ``SUMMARY bench_search:`` line and saves
success rate vs mean forward tokens to ``benchmarks/search_success.png``.

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/bench_search.py --problems 10 --lo 1 --hi 9 --threads 2
"""

from __future__ import annotations

import argparse
import pathlib
import random
import re
import statistics
import time
from typing import Any, Callable

import torch

FEW_SHOT = "Q: 12 + 7 =\nA: 19\nQ: 30 + 14 =\nA: 44\nQ: 25 + 38 =\nA: 63\n"
PNG = pathlib.Path(__file__).resolve().parent / "search_success.png"


def problems(n: int, seed: int, lo: int, hi: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randint(lo, hi), rng.randint(lo, hi)) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lo", type=int, default=1)
    ap.add_argument("--hi", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=7)
    ap.add_argument("--entropy-threshold", type=float, default=0.5)
    ap.add_argument("--methods", default="", help="comma-separated subset of method names")
    ap.add_argument("--png", default=str(PNG))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from trellis import Decoder, HFLanguageModel, load
    from trellis.constrain import Regex, compile
    from trellis.search import MCTS, Beam, BestOfN, EntropyGate, Greedy, Lookahead, Sample

    t0 = time.perf_counter()
    h = load()
    lm = HFLanguageModel(h.model)
    constraint = compile(Regex(r" \d{1,4}\n"), h.vocab)
    dec0 = Decoder(lm, constraint, temperature=0, vocab=h.vocab)
    dec_t = Decoder(lm, constraint, temperature=0.7, vocab=h.vocab)
    print(f"loaded in {time.perf_counter() - t0:.1f} s", flush=True)

    def exact(x: Any, y: Any) -> float:
        return float(tuple(x) == tuple(y))

    def reward(hyp: Any) -> float:
        return hyp.logprob / max(1, hyp.num_new)

    # name -> (decoder, strategy factory taking the problem index)
    methods: dict[str, tuple[Decoder, Callable[[int], Any]]] = {
        "Greedy": (dec0, lambda i: Greedy()),
        "Sample(T=0.7)": (dec_t, lambda i: Sample(generator=torch.Generator().manual_seed(1000 + i))),
        "Beam(w=4)": (dec0, lambda i: Beam(width=4)),
        "Lookahead(w=2,d=3)": (dec0, lambda i: Lookahead(width=2, depth=3)),
        "MCTS(r=8)": (dec0, lambda i: MCTS(reward=reward, max_rollouts=8)),
        "BestOfN(n=4,mbr)": (dec_t, lambda i: BestOfN(n=4, scorer="mbr",
                                                       generator=torch.Generator().manual_seed(2000 + i))),
        # MBR with an exact-match utility = majority vote over the samples (self-consistency); the
        # default token n-gram F1 utility rewards shared digits, a poor fit for numeric answers
        "BestOfN(n=4,mbr-exact)": (dec_t, lambda i: BestOfN(n=4, scorer="mbr", utility=exact,
                                                            generator=torch.Generator().manual_seed(2000 + i))),
        f"EntropyGate(tau={args.entropy_threshold})": (
            dec0, lambda i: EntropyGate(threshold=args.entropy_threshold, k=3, depth=3)),
    }
    if args.methods:
        keep = [m.strip() for m in args.methods.split(",")]
        methods = {k: v for k, v in methods.items() if any(k.startswith(m) for m in keep)}

    probs = problems(args.problems, args.seed, args.lo, args.hi)
    rows = []
    failures: list[str] = []
    for name, (dec, make) in methods.items():
        ok, toks, secs, texts = [], [], [], []
        steps = paused = 0
        try:
            for i, (a, b) in enumerate(probs):
                ids = h.tokenizer.encode(FEW_SHOT + f"Q: {a} + {b} =\nA:")
                lm.reset()
                before = lm.stats.tokens_forwarded
                strat = make(i)
                t = time.perf_counter()
                if isinstance(strat, EntropyGate):
                    res = strat.search(dec, dec.start(ids), max_new_tokens=args.max_new_tokens)
                    best = res.hypotheses[0]
                    for _, d in res.tree.nodes(data=True):
                        if "paused" in d:
                            steps += 1
                            paused += bool(d["paused"])
                else:
                    best = strat(dec, dec.start(ids), max_new_tokens=args.max_new_tokens)[0]
                secs.append(time.perf_counter() - t)
                toks.append(lm.stats.tokens_forwarded - before)
                text = dec.text(best)
                m = re.search(r"\d+", text)
                ok.append(m is not None and int(m.group()) == a + b)
                texts.append(text)
        except Exception as e:  # keep the other methods' results
            failures.append(f"{name}: {type(e).__name__}: {e}")
            print(f"FAILED {name}: {type(e).__name__}: {e}", flush=True)
            if not ok:
                continue
        row = {
            "method": name, "n": len(ok), "success": sum(ok) / len(ok),
            "tokens": statistics.mean(toks), "wall": statistics.mean(secs),
            "pause": (paused / steps) if steps else None,
        }
        rows.append(row)
        print(f"  {name}: {sum(ok)}/{len(ok)} ok, {row['tokens']:.0f} fwd tok, {row['wall']:.2f} s/problem; "
              f"outputs {[t for t in texts[:5]]}", flush=True)

    print()
    print(f"Gemma 3 270M, {args.problems} problems (a, b in {args.lo}..{args.hi}, seed {args.seed}), regex ' \\d{{1,4}}\\n', "
          f"max_new_tokens={args.max_new_tokens}, {args.threads} threads")
    hdr = f"{'method':<26} {'n':>3} {'success':>8} {'fwd tokens':>11} {'wall s':>8} {'pause rate':>11}"
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        pause = f"{r['pause']:.2f}" if r["pause"] is not None else "-"
        print(f"{r['method']:<26} {r['n']:>3} {r['success']:>8.2f} {r['tokens']:>11.1f} {r['wall']:>8.2f} {pause:>11}")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for r in rows:
            ax.scatter(r["tokens"], r["success"])
            ax.annotate(r["method"], (r["tokens"], r["success"]), textcoords="offset points", xytext=(4, 4),
                        fontsize=8)
        ax.set_xscale("log")
        ax.set_xlabel("mean forward tokens per problem (log)")
        ax.set_ylabel("success rate")
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(f"Gemma 3 270M, few-shot addition ({args.problems} problems)")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)
        print(f"saved {args.png}")
    except Exception as e:
        failures.append(f"plot: {type(e).__name__}: {e}")
        print(f"FAILED plot: {e}")

    parts = [f"{r['method']}={r['success']:.2f}@{r['tokens']:.0f}tok" for r in rows]
    print("SUMMARY bench_search: " + "; ".join(parts)
          + (f"; FAILED: {' | '.join(failures)}" if failures else ""))


if __name__ == "__main__":
    main()
