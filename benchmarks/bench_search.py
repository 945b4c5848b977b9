"""Search strategies on Gemma 3 270M (CPU), on tasks with a checkable answer.

``--task keywords`` (default; CommonGen-style lexically constrained generation, the NeuroLogic
setting): "write one sentence using the words w1, w2, w3" (few-shot), under a one-sentence regex;
success = every word appears (as a substring, so "throw" matches "throws"). The words are the
task's input, so the search methods may use them: Lookahead and EntropyGate through ``clauses``
(``must_include``), MCTS and BestOfN through the reward = fraction of words used (+0.01 x mean
log-prob, a tie-break). Greedy, Sample and Beam see only the prompt. EntropyGate's threshold is
calibrated (``EntropyGate.calibrate``, pause rate 0.2) on held-out word sets, not the scored ones.

``--task addition``: few-shot addition of two small integers under the regex `` \\d{1,4}\\n``;
success = the number equals a + b. MCTS's reward is the model's own mean log-prob (no access to
the answer).

Per problem the LM's KV cache is reset, so every method pays its own prefill; forward tokens are
the ``lm.stats.tokens_forwarded`` delta. EntropyGate's pause rate is read from its search tree
(``paused`` flags on the step nodes). Prints a table and a ``SUMMARY bench_search:`` line and saves
success rate vs mean forward tokens to ``benchmarks/search_success.png``.

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/bench_search.py --problems 20 --threads 1
    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/bench_search.py --task addition --problems 10
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


KW_SHOT = ("Write one sentence that uses all the given words.\n"
           "Words: dog, ball, kite, throw\nSentence: The boy throws the ball to his dog while his sister flies a kite.\n"
           "Words: bread, oven, guitar, bake\nSentence: She bakes bread in the oven and plays the guitar while it rises.\n"
           "Words: river, boat, lamp, sail\nSentence: We sail our boat down the river with a lamp at the bow.\n")
# Concept sets of four words that rarely co-occur (CommonGen-hard style: a likely sentence tends to
# drop one); the first CALIBRATION sets only calibrate EntropyGate.
WORD_SETS = [
    ("cat", "window", "violin", "sleep"), ("car", "moon", "sandwich", "drive"), ("book", "volcano", "milk", "read"),
    ("rain", "elephant", "pencil", "walk"), ("guitar", "snow", "doctor", "play"), ("mountain", "cookie", "radio", "climb"),
    ("apple", "rocket", "teacher", "throw"), ("coffee", "tiger", "bridge", "drink"), ("phone", "ocean", "carrot", "call"),
    ("garden", "robot", "candle", "water"), ("train", "pillow", "lion", "wait"), ("student", "cloud", "hammer", "explain"),
    ("fish", "ladder", "queen", "catch"), ("door", "penguin", "soup", "open"), ("bird", "computer", "onion", "build"),
    ("horse", "mirror", "pizza", "run"), ("letter", "desert", "banana", "write"), ("kitchen", "whale", "clock", "cook"),
    ("ball", "castle", "lemon", "kick"), ("camera", "river", "bread", "take"), ("shirt", "planet", "cheese", "sew"),
    ("baby", "truck", "flower", "cry"), ("bike", "island", "spoon", "ride"), ("wall", "dragon", "tomato", "paint"),
    ("ice", "forest", "trumpet", "melt"), ("shop", "owl", "blanket", "carry"), ("beach", "keyboard", "cow", "swim"),
    ("hat", "airport", "honey", "hang"), ("child", "storm", "toy", "share"), ("farmer", "satellite", "egg", "plant"),
]
CALIBRATION = 6


def problems(n: int, seed: int, lo: int, hi: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randint(lo, hi), rng.randint(lo, hi)) for _ in range(n)]


def uses(text: str, words: tuple[str, ...]) -> float:
    """Fraction of ``words`` that appear in ``text`` (case-insensitive substring)."""
    low = text.lower()
    return sum(w in low for w in words) / len(words)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", choices=("keywords", "addition"), default="keywords")
    ap.add_argument("--problems", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lo", type=int, default=1, help="addition: smallest operand")
    ap.add_argument("--hi", type=int, default=9, help="addition: largest operand")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=0, help="0: 7 for addition, 32 for keywords")
    ap.add_argument("--entropy-threshold", type=float, default=None,
                    help="EntropyGate threshold (nats); default: calibrated to a 0.2 pause rate (keywords), "
                         "0.5 (addition)")
    ap.add_argument("--methods", default="", help="comma-separated subset of method names")
    ap.add_argument("--png", default=str(PNG))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    keywords = args.task == "keywords"
    max_new = args.max_new_tokens or (32 if keywords else 7)

    from trellis import Decoder, HFLanguageModel, load
    from trellis.constrain import Regex, compile
    from trellis.search import MCTS, Beam, BestOfN, EntropyGate, Greedy, Lookahead, Sample

    t0 = time.perf_counter()
    h = load()
    lm = HFLanguageModel(h.model)
    # keywords: one sentence (a capital, then text without newlines, a final period), then EOS
    constraint = compile(Regex(r" [A-Z][^\n]{0,160}\.\n" if keywords else r" \d{1,4}\n"), h.vocab)
    dec0 = Decoder(lm, constraint, temperature=0, vocab=h.vocab)
    dec_t = Decoder(lm, constraint, temperature=0.7, vocab=h.vocab)
    print(f"loaded in {time.perf_counter() - t0:.1f} s", flush=True)

    if keywords:
        sets = WORD_SETS[CALIBRATION:][: args.problems]
        probs: list[Any] = sets
        prompt_of = lambda ws: KW_SHOT + f"Words: {', '.join(ws)}\nSentence:"  # noqa: E731
        check = lambda text, ws: uses(text, ws) == 1.0  # noqa: E731
    else:
        probs = problems(args.problems, args.seed, args.lo, args.hi)
        prompt_of = lambda ab: FEW_SHOT + f"Q: {ab[0]} + {ab[1]} =\nA:"  # noqa: E731

        def check(text: str, ab: Any) -> bool:
            m = re.search(r"\d+", text)
            return m is not None and int(m.group()) == ab[0] + ab[1]

    def clauses(p: Any) -> tuple:
        return tuple((w, w.capitalize()) for w in p) if keywords else ()

    def reward_for(p: Any) -> Callable[[Any], float]:
        def reward(hyp: Any) -> float:
            mean_lp = hyp.logprob / max(1, hyp.num_new)
            return uses(dec0.text(hyp), p) + 0.01 * mean_lp if keywords else mean_lp
        return reward

    def exact(x: Any, y: Any) -> float:
        return float(tuple(x) == tuple(y))

    tau = args.entropy_threshold
    gate_opts: dict[str, Any] = {}
    if keywords:
        gate_opts = {"lam": 5.0}
        if tau is None:
            held = [h.tokenizer.encode(prompt_of(ws)) for ws in WORD_SETS[:CALIBRATION]]
            t = time.perf_counter()
            tau = EntropyGate.calibrate(dec0, held, pause_rate=0.2, max_new_tokens=max_new, k=3, depth=4,
                                        iterations=6).threshold
            print(f"EntropyGate calibrated on {len(held)} held-out word sets: tau = {tau:.3f} nats "
                  f"({time.perf_counter() - t:.0f} s)", flush=True)
    tau = 0.5 if tau is None else tau

    # name -> (decoder, strategy factory taking (problem index, problem))
    methods: dict[str, tuple[Decoder, Callable[[int, Any], Any]]] = {
        "Greedy": (dec0, lambda i, p: Greedy()),
        "Sample(T=0.7)": (dec_t, lambda i, p: Sample(generator=torch.Generator().manual_seed(1000 + i))),
        "Beam(w=4)": (dec0, lambda i, p: Beam(width=4)),
        "Lookahead(w=2,d=4)": (dec0, lambda i, p: Lookahead(width=2, depth=4, lam=5.0, clauses=clauses(p))),
        "MCTS(r=8)": (dec0, lambda i, p: MCTS(reward=reward_for(p), max_rollouts=8)),
        "BestOfN(n=4,reward)" if keywords else "BestOfN(n=4,mbr)": (
            dec_t, lambda i, p: BestOfN(n=4, scorer=reward_for(p) if keywords else "mbr",
                                        generator=torch.Generator().manual_seed(2000 + i))),
        f"EntropyGate(tau={tau:.2f})": (
            dec0, lambda i, p: EntropyGate(threshold=tau, k=3, depth=4, clauses=clauses(p), **gate_opts)),
    }
    if not keywords:
        # MBR with an exact-match utility = majority vote over the samples (self-consistency); the
        # default token n-gram F1 utility rewards shared digits, a poor fit for numeric answers
        methods["BestOfN(n=4,mbr-exact)"] = (dec_t, lambda i, p: BestOfN(
            n=4, scorer="mbr", utility=exact, generator=torch.Generator().manual_seed(2000 + i)))
    if args.methods:
        keep = [m.strip() for m in args.methods.split(",")]
        methods = {k: v for k, v in methods.items() if any(k.startswith(m) for m in keep)}

    rows = []
    failures: list[str] = []
    for name, (dec, make) in methods.items():
        ok, toks, secs, texts = [], [], [], []
        steps = paused = 0
        try:
            for i, p in enumerate(probs):
                ids = h.tokenizer.encode(prompt_of(p))
                lm.reset()
                before = lm.stats.tokens_forwarded
                strat = make(i, p)
                t = time.perf_counter()
                if isinstance(strat, EntropyGate):
                    res = strat.search(dec, dec.start(ids), max_new_tokens=max_new)
                    best = res.hypotheses[0]
                    for _, d in res.tree.nodes(data=True):
                        if "paused" in d:
                            steps += 1
                            paused += bool(d["paused"])
                else:
                    best = strat(dec, dec.start(ids), max_new_tokens=max_new)[0]
                secs.append(time.perf_counter() - t)
                toks.append(lm.stats.tokens_forwarded - before)
                text = dec.text(best)
                ok.append(check(text, p))
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
    what = (f"{len(probs)} keyword sets" if keywords else
            f"{len(probs)} problems (a, b in {args.lo}..{args.hi}, seed {args.seed})")
    print(f"Gemma 3 270M, task {args.task}: {what}, max_new_tokens={max_new}, {args.threads} threads")
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
        ax.set_title(f"Gemma 3 270M, {args.task} ({len(probs)} problems)")
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
