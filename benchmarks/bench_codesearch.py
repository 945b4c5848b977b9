"""Test-guided code search on Gemma 3 270M (CPU): pass@1 of greedy, best-of-N, EntropyGate and
MCTS (PG-TD) at equal forward-token budgets, on HumanEval and MBPP problems.

Each problem's asserts are split (``trellis.codegen.split_tests``, seed ``--seed``) into a visible
half — the searches' reward: the fraction of visible asserts passed — and a held-out half that only
judges the final program (pass = every held-out assert passes; a problem with a single assert is
judged on it and flagged ``held_out_empty``). Greedy runs first; its forward tokens x
``--budget-multiplier`` (8) is the token budget of every search on that problem (``TestGuided``
forces EOS once it is spent, so every strategy stops there; MCTS also stops iterating). Best-of-N
samples ``--n`` (8) programs at ``--temperature``. Per problem and method the LM's KV cache is reset,
so each pays its own prefill; tokens are the ``lm.stats.tokens_forwarded`` delta. Every program
runs in the sandbox (``trellis.codegen.run_tests``); syntax pruning and the function-end stop are on
for every method, greedy included, so the comparison is about search alone.

Prints a markdown table and a final ``SUMMARY bench_codesearch:`` line; ``--out`` saves every
problem's row as JSON.

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/bench_codesearch.py --problems both --limit 20 --out results.json
    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/bench_codesearch.py --limit 1 --max-new-tokens 16 --n 2  # smoke
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import time
from typing import Any

import torch

DATA = pathlib.Path("/work/shared/data")
FILES = {"humaneval": DATA / "humaneval" / "HumanEval-dev.jsonl", "mbpp": DATA / "mbpp" / "mbpp-sanitized-dev.jsonl"}
METHODS = ("greedy", "best-of-n", "entropy-gate", "mcts")


def problems(which: str, limit: int | None) -> list[dict[str, Any]]:
    names = ("humaneval", "mbpp") if which == "both" else (which,)
    out: list[dict[str, Any]] = []
    for name in names:
        rows = [json.loads(line) for line in FILES[name].read_text().splitlines() if line.strip()]
        out.extend(rows[:limit] if limit else rows)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", choices=("humaneval", "mbpp", "both"), default="both")
    ap.add_argument("--limit", type=int, default=None, help="first N problems of each set")
    ap.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of " + ",".join(METHODS))
    ap.add_argument("--max-new-tokens", type=int, default=192)
    ap.add_argument("--budget-multiplier", type=float, default=8.0, help="search budget = greedy tokens x this")
    ap.add_argument("--n", type=int, default=8, help="best-of-N samples")
    ap.add_argument("--k", type=int, default=3, help="MCTS children per expansion / EntropyGate candidates")
    ap.add_argument("--threshold", type=float, default=1.0, help="EntropyGate pause threshold (nats)")
    ap.add_argument("--temperature", type=float, default=0.8, help="sampling / prior temperature")
    ap.add_argument("--visible-fraction", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=5.0, help="seconds per sandboxed test run")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="write per-problem results as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from trellis.codegen import parse_tests
    from trellis.codegen.solve import solve
    from trellis.generate import language_model
    from trellis.models import load

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if "greedy" not in methods:
        methods.insert(0, "greedy")  # it sets the budget
    t0 = time.perf_counter()
    handle = load()
    lm = language_model(handle.model)
    print(f"loaded in {time.perf_counter() - t0:.1f} s", flush=True)

    rows: list[dict[str, Any]] = []
    for prob in problems(args.problems, args.limit):
        suite = parse_tests(prob["test"], entry_point=prob["entry_point"])
        budget = None
        for method in methods:
            lm.reset()  # type: ignore[attr-defined]
            t = time.perf_counter()
            try:
                sol = solve(handle, prob["prompt"], suite, strategy=method, entry_point=prob["entry_point"],
                            visible_fraction=args.visible_fraction, seed=args.seed,
                            budget_tokens=budget, max_new_tokens=args.max_new_tokens,
                            temperature=args.temperature, n=args.n, k=args.k, threshold=args.threshold,
                            timeout=args.timeout)
            except Exception as e:  # keep the other methods' results
                print(f"FAILED {prob['task_id']} {method}: {type(e).__name__}: {e}", flush=True)
                continue
            wall = time.perf_counter() - t
            if method == "greedy":
                budget = max(1, int(sol.tokens * args.budget_multiplier))
            held = sol.held_out
            row = {
                "task_id": prob["task_id"], "method": method, "passed": sol.passed,
                "visible_passed": sol.visible.passed, "visible_total": sol.visible.total,
                "held_out_passed": held.passed if held is not None else None,
                "held_out_total": held.total if held is not None else 0,
                "held_out_empty": held is None or held.total == 0,
                "status": sol.visible.status, "tokens": sol.tokens, "budget": budget if method != "greedy" else None,
                "wall_s": wall, "programs": sol.programs, "pruned": sol.pruned, "completion": sol.completion,
            }
            rows.append(row)
            print(f"  {prob['task_id']:<14} {method:<13} {'PASS' if sol.passed else 'fail'}  visible "
                  f"{sol.visible.passed}/{sol.visible.total}  held-out {row['held_out_passed']}/{row['held_out_total']}"
                  f"  {sol.tokens:>6} tok  {wall:6.1f} s  {sol.programs} programs", flush=True)

    print()
    n_prob = len({r["task_id"] for r in rows})
    print(f"Gemma 3 270M, {n_prob} problems ({args.problems}), max_new_tokens={args.max_new_tokens}, "
          f"budget = greedy tokens x {args.budget_multiplier:g}, N={args.n}, T={args.temperature}, "
          f"{args.threads} threads")
    print()
    print("| method | problems | pass@1 (held-out) | visible pass rate | mean fwd tokens | tokens / greedy | mean wall s | programs run |")
    print("|---|---|---|---|---|---|---|---|")
    greedy_tok = statistics.mean(r["tokens"] for r in rows if r["method"] == "greedy") if any(
        r["method"] == "greedy" for r in rows) else float("nan")
    summary = []
    for method in methods:
        mine = [r for r in rows if r["method"] == method]
        if not mine:
            continue
        rate = sum(r["passed"] for r in mine) / len(mine)
        vis = statistics.mean(r["visible_passed"] / max(1, r["visible_total"]) for r in mine)
        tok = statistics.mean(r["tokens"] for r in mine)
        wall = statistics.mean(r["wall_s"] for r in mine)
        progs = statistics.mean(r["programs"] for r in mine)
        print(f"| {method} | {len(mine)} | {rate:.3f} | {vis:.3f} | {tok:.0f} | {tok / greedy_tok:.2f} | {wall:.1f} | "
              f"{progs:.1f} |")
        summary.append(f"{method} {rate:.2f}")
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))
        print(f"\nrows -> {args.out}")
    print(f"SUMMARY bench_codesearch: pass@1 on held-out asserts over {n_prob} problems: " + ", ".join(summary))


if __name__ == "__main__":
    main()
