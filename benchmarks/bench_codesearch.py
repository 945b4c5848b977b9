"""Test-guided code search on Gemma 3 270M (CPU): held-out pass@1 of greedy, best-of-N,
EntropyGate and MCTS (PG-TD; greedy rollouts in lockstep, or speculative rollouts) on the shipped
HumanEval and MBPP problems, with paired significance tests against greedy and a budget curve.

Each problem's asserts are split (``trellis.codegen.split_tests``, seed ``--seed``) into a visible
half, the searches' reward (the fraction of visible asserts passed), and a held-out half that only
judges the final program (pass = every held-out assert passes; a problem with a single assert is
judged on it and flagged ``held_out_empty``). Greedy runs first; its forward tokens and its wall
seconds x ``--budget-multiplier`` (8) are the budgets of every search on that problem, both
enforced (``TestGuided``: a forward that does not fit is not started). Per problem and method the
LM's KV cache is reset, so each pays its own prefill; tokens are the ``lm.stats.tokens_forwarded``
delta. Every program runs in the sandbox (``run_tests``); syntax pruning and the function-end stop
are on for every method, greedy included, so the comparison is about search alone.

Budget curve: what each search would have returned with 1x, 2x, 4x, 8x greedy's tokens, read from
the one run at 8x (``Solution.rewarded``: every reward the search asked for, with the tokens spent
by then). MCTS at budget B returns the best program rewarded within B tokens (exact: MCTS with a
budget B runs the same iterations up to B; the only difference is a last rollout a real budget
would have cut short, which we count as not found); best-of-N at m x greedy's tokens is best-of-m,
the first m of the 8 samples (independent draws, so the same distribution as drawing m).

Significance: per method, the exact McNemar test on the paired held-out outcomes against greedy
(two-sided binomial test on the discordant problems) and a paired bootstrap 95% CI of the
difference in pass rate (10,000 resamples of problems).

``--throughput N``: the rollout paths old and new on the first N problems at the same token
budget: MCTS with one-at-a-time greedy rollouts, per-row prompt re-reads and the float32 BLAS
kernels (the path before issue 25) vs lockstep greedy rollouts vs speculative rollouts (two
drafters), the new paths with every kernel (``int8_blocks``: Gemma's Q8_0 LM head read as int8);
best-of-8 (8 whole samples) the old way (prompt re-read per sample, torch.multinomial, BLAS
kernels) and the new. Reports forward tokens/s, program tokens/s (the tokens of the programs
rewarded), distinct programs per minute, and whether the greedy rollout paths returned the same
programs.

    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/bench_codesearch.py --out results.json --plot curve.png
    # interrupted? results.json.partial.jsonl has every finished row:
    python benchmarks/bench_codesearch.py --report results.json.partial.jsonl
    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/bench_codesearch.py --out more.json \
        --resume results.json.partial.jsonl   # the same options: skips the problems done
    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/bench_codesearch.py --throughput 3
    HF_HUB_OFFLINE=1 PYTHONPATH=. python benchmarks/bench_codesearch.py --limit 1 --max-new-tokens 16 --n 2  # smoke
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import random
import statistics
import time
from typing import Any

import torch

DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"
FILES = {"humaneval": DATA / "humaneval" / "HumanEval-dev.jsonl", "mbpp": DATA / "mbpp" / "mbpp-sanitized-dev.jsonl"}
METHODS = ("greedy", "best-of-n", "entropy-gate", "mcts", "mcts-spec")
CURVE = (1, 2, 4, 8)


def problems(which: str, limit: int | None) -> list[dict[str, Any]]:
    names = ("humaneval", "mbpp") if which == "both" else (which,)
    out: list[dict[str, Any]] = []
    for name in names:
        rows = [json.loads(line) for line in FILES[name].read_text().splitlines() if line.strip()]
        out.extend(rows[:limit] if limit else rows)
    return out


def mcnemar(a: list[bool], b: list[bool]) -> tuple[int, int, float]:
    """Exact McNemar test of paired outcomes: (b wins, a wins, two-sided p)."""
    wins = sum(1 for x, y in zip(a, b) if y and not x)
    losses = sum(1 for x, y in zip(a, b) if x and not y)
    n = wins + losses
    if n == 0:
        return 0, 0, 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return wins, losses, min(1.0, 2 * tail)


def bootstrap_ci(a: list[bool], b: list[bool], *, reps: int = 10_000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of (b - a) over problems and its paired bootstrap 95% CI."""
    d = [int(y) - int(x) for x, y in zip(a, b)]
    if not d:
        return 0.0, 0.0, 0.0
    rng = random.Random(seed)
    means = sorted(sum(rng.choice(d) for _ in d) / len(d) for _ in range(reps))
    return sum(d) / len(d), means[int(0.025 * reps)], means[int(0.975 * reps) - 1]


def best_within(rewarded: list[dict[str, Any]], method: str, mult: int, greedy_tokens: int, n: int) -> str | None:
    """The program a search would have returned with ``mult`` x greedy's tokens (module docstring)."""
    if method == "best-of-n":
        m = min(n, mult * n // 8) if n >= 8 else min(n, mult)
        pool = rewarded[:max(1, m)]
    else:
        pool = [r for r in rewarded if r["tokens"] <= mult * greedy_tokens]
    if not pool:
        return None
    best = min(range(len(pool)), key=lambda i: (-pool[i]["reward"], -pool[i]["logprob"], i))
    return pool[best]["program"]


def read_run(path: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(args, rows) of a finished run (``--out`` JSON) or of an interrupted one (its
    ``.partial.jsonl``: an ``{"args": ...}`` line, then one row per line)."""
    text = pathlib.Path(path).read_text()
    if path.endswith(".jsonl"):
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
        saved = next((x["args"] for x in lines if "args" in x), {})
        return saved, [x for x in lines if "args" not in x]
    data = json.loads(text)
    return data.get("args", {}), data["rows"]


def run_problems(args: argparse.Namespace, handle: Any, lm: Any, methods: list[str]) -> list[dict[str, Any]]:
    """Every method on every problem; with ``--out``, each row is also appended to
    ``<out>.partial.jsonl`` as it is made (an interrupted run can be reported with ``--report``
    and continued with ``--resume``: problems with every method's row there are skipped)."""
    from trellis.codegen import parse_tests, run_tests, solve, visible_and_held_out

    rows: list[dict[str, Any]] = []
    done: set[str] = set()
    if args.resume:
        old = read_run(args.resume)[1]
        have: dict[str, set[str]] = {}
        for r in old:
            have.setdefault(r["task_id"], set()).add(r["method"])
        done = {t for t, ms in have.items() if set(methods) <= ms}
        rows = [r for r in old if r["task_id"] in done and r["method"] in methods]
        print(f"resuming: {len(done)} problems already done in {args.resume}", flush=True)
    partial = open(args.out + ".partial.jsonl", "a", encoding="utf-8") if args.out else None  # noqa: SIM115
    if partial is not None and partial.tell() == 0:
        partial.write(json.dumps({"args": vars(args)}) + "\n")
    if partial is not None and args.resume and os.path.abspath(args.resume) != os.path.abspath(partial.name):
        for r in rows:
            partial.write(json.dumps(r) + "\n")
    for prob in problems(args.problems, args.limit):
        if prob["task_id"] in done:
            continue
        suite = parse_tests(prob["test"], entry_point=prob["entry_point"])
        _, hidden = visible_and_held_out(prob["prompt"], suite, entry_point=prob["entry_point"],
                                         visible_fraction=args.visible_fraction, seed=args.seed)
        judged: dict[str, bool] = {}

        def judge(program: str | None) -> bool:
            if program is None:
                return False
            if program not in judged:
                rep = run_tests(program, hidden, timeout=args.timeout) if len(hidden) else None
                judged[program] = bool(rep.all_passed) if rep is not None else False
            return judged[program]

        budget = seconds = None
        greedy_tokens = 0
        for method in methods:
            lm.reset()
            strategy, rollout = ("mcts", "speculative") if method == "mcts-spec" else (method, "greedy")
            t = time.perf_counter()
            try:
                sol = solve(handle, prob["prompt"], suite, strategy=strategy, rollout=rollout,
                            entry_point=prob["entry_point"], visible_fraction=args.visible_fraction, seed=args.seed,
                            budget_tokens=budget, budget_seconds=seconds, max_new_tokens=args.max_new_tokens,
                            temperature=args.temperature, n=args.n, k=args.k, threshold=args.threshold,
                            timeout=args.timeout, lockstep=args.lockstep, progress=False)
            except Exception as e:  # keep the other methods' results
                print(f"FAILED {prob['task_id']} {method}: {type(e).__name__}: {e}", flush=True)
                continue
            wall = time.perf_counter() - t
            if method == "greedy":
                greedy_tokens = sol.tokens
                budget = max(1, int(sol.tokens * args.budget_multiplier))
                seconds = max(1.0, wall * args.budget_multiplier)
            held = sol.held_out
            rewarded = [dict(program=r.program, reward=r.reward, tokens=r.tokens, seconds=r.seconds,
                             logprob=r.logprob) for r in sol.rewarded]
            curve = {}
            if method in ("best-of-n", "mcts", "mcts-spec"):
                for mult in CURVE:
                    curve[str(mult)] = judge(best_within(rewarded, method, mult, greedy_tokens, args.n))
            row = {
                "task_id": prob["task_id"], "method": method, "passed": sol.passed,
                "visible_passed": sol.visible.passed, "visible_total": sol.visible.total,
                "visible_all": sol.visible.all_passed,
                "held_out_passed": held.passed if held is not None else None,
                "held_out_total": held.total if held is not None else 0,
                "held_out_empty": held is None or held.total == 0,
                "status": sol.visible.status, "tokens": sol.tokens, "greedy_tokens": greedy_tokens,
                "budget": budget if method != "greedy" else None,
                "budget_seconds": seconds if method != "greedy" else None,
                "wall_s": wall, "programs": sol.programs, "pruned": sol.pruned, "completion": sol.completion,
                "curve": curve, "rewarded": [{k: v for k, v in r.items() if k != "program"} for r in rewarded],
            }
            rows.append(row)
            if partial is not None:
                partial.write(json.dumps(row) + "\n")
                partial.flush()
            print(f"  {prob['task_id']:<14} {method:<13} {'PASS' if sol.passed else 'fail'}  visible "
                  f"{sol.visible.passed}/{sol.visible.total}  held-out {row['held_out_passed']}/{row['held_out_total']}"
                  f"  {sol.tokens:>6} tok  {wall:6.1f} s  {sol.programs} programs", flush=True)
    if partial is not None:
        partial.close()
    return rows


def report(args: argparse.Namespace, rows: list[dict[str, Any]], methods: list[str], total_s: float) -> None:
    # problems every method finished (an interrupted run's last problem may lack some)
    tasks = sorted({r["task_id"] for r in rows if r["method"] == "greedy"}
                   & set.intersection(*({r["task_id"] for r in rows if r["method"] == m} for m in methods)))
    by = {(r["task_id"], r["method"]): r for r in rows}
    n_prob = len(tasks)
    print()
    print(f"Gemma 3 270M, {n_prob} problems ({args.problems}), max_new_tokens={args.max_new_tokens}, budgets = greedy's "
          f"tokens and seconds x {args.budget_multiplier:g}, N={args.n}, T={args.temperature}, k={args.k}, "
          f"{args.threads} threads, whole run {total_s / 60:.1f} min")
    print()
    print("| method | problems | held-out pass@1 | visible all-pass | mean fwd tokens | tokens / greedy | "
          "mean wall s | total wall min | programs run | vs greedy: won / lost, McNemar p | diff, 95% CI |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    greedy = [by[(t, "greedy")]["passed"] for t in tasks]
    g_tok = statistics.mean(by[(t, "greedy")]["tokens"] for t in tasks) if tasks else float("nan")
    summary = []
    for method in methods:
        mine = [by.get((t, method)) for t in tasks]
        if any(r is None for r in mine):
            print(f"| {method} | missing on {sum(r is None for r in mine)} problems | | | | | | | | | |")
            continue
        passed = [r["passed"] for r in mine]  # type: ignore[index]
        rate = sum(passed) / len(passed)
        vis = sum(r["visible_all"] for r in mine) / len(mine)  # type: ignore[index]
        tok = statistics.mean(r["tokens"] for r in mine)  # type: ignore[index]
        wall = [r["wall_s"] for r in mine]  # type: ignore[index]
        progs = statistics.mean(r["programs"] for r in mine)  # type: ignore[index]
        won, lost, p = mcnemar(greedy, passed)
        d, lo, hi = bootstrap_ci(greedy, passed)
        sig = "" if method == "greedy" else f"{won} / {lost}, p = {p:.3g}"
        ci = "" if method == "greedy" else f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]"
        print(f"| {method} | {len(mine)} | {rate:.3f} ({sum(passed)}/{len(passed)}) | {vis:.3f} | {tok:.0f} | "
              f"{tok / g_tok:.2f} | {statistics.mean(wall):.1f} | {sum(wall) / 60:.1f} | {progs:.1f} | {sig} | {ci} |")
        summary.append(f"{method} {rate:.3f}" + ("" if method == "greedy" else f" (p={p:.2g})"))
    curves: dict[str, list[float]] = {}
    print()
    print("Budget curve (held-out pass rate with m x greedy's tokens; best-of-N: best of the first m samples):")
    print()
    print("| method | " + " | ".join(f"{m}x" for m in CURVE) + " | 8x vs greedy: won / lost, p |")
    print("|---|" + "---|" * (len(CURVE) + 1))
    for method in methods:
        mine = [by.get((t, method)) for t in tasks]
        if method == "greedy" or any(r is None or not r["curve"] for r in mine):
            continue
        pts = [sum(r["curve"][str(m)] for r in mine) / len(mine) for m in CURVE]  # type: ignore[index]
        curves[method] = pts
        won, lost, p = mcnemar(greedy, [r["curve"]["8"] for r in mine])  # type: ignore[index]
        print(f"| {method} | " + " | ".join(f"{x:.3f}" for x in pts) + f" | {won} / {lost}, p = {p:.3g} |")
    overfit = []
    for method in methods:
        mine = [by.get((t, method)) for t in tasks]
        if method == "greedy" or any(r is None for r in mine):
            continue
        vis_only = sum(1 for r in mine if r["visible_all"] and not r["passed"])  # type: ignore[index]
        overfit.append(f"{method} {vis_only}")
    print()
    print("Programs passing every visible assert but failing a held-out one (the reward overfitting): "
          + ", ".join(overfit))
    if args.plot and curves:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        g_rate = sum(greedy) / len(greedy)
        ax.axhline(g_rate, color="gray", linestyle="--", label=f"greedy ({g_rate:.3f})")
        for method, pts in curves.items():
            ax.plot(CURVE, pts, marker="o", label=method)
        ax.set_xscale("log", base=2)
        ax.set_xticks(CURVE, [f"{m}x" for m in CURVE])
        ax.set_xlabel("budget (x greedy's forward tokens)")
        ax.set_ylabel("held-out pass@1")
        ax.set_title(f"Gemma 3 270M, {n_prob} HumanEval/MBPP problems")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"\nplot -> {args.plot}")
    print(f"SUMMARY bench_codesearch: held-out pass@1 over {n_prob} problems: " + ", ".join(summary)
          + f"; whole run {total_s / 60:.1f} min")


def _multinomial_sample(log_probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """trellis.sampling.sample before 2026-11-26 (torch.multinomial), for the old best-of-8 path."""
    return torch.multinomial(log_probs.float().exp(), 1, generator=generator).squeeze(-1)


def throughput(args: argparse.Namespace, handle: Any, lm: Any) -> None:
    """Old and new rollout paths on the same problems (module docstring). MCTS paths run under the
    same token budget; best-of-8 paths draw their 8 whole samples (no budget: the old path's
    prompt re-reads would eat most of one)."""
    import trellis.search.best_of_n as best_of_n_module

    sample_now = best_of_n_module.sample
    from trellis.codegen import lookup_and_recycling_rollout, parse_tests, prompt_lookup_rollout, solve

    from trellis.kernels import BLAS_KERNELS, TunedLinears

    vsize = lm.vocab_size
    new_kernels = lm.kernels
    # the kernels before int8_blocks (2026-11-26): the old paths' GEMMs
    old_kernels = TunedLinears.for_model(lm.model, 16, kernels=BLAS_KERNELS)
    paths = [
        ("mcts", "old: one rollout at a time, prompt re-read per row", lambda: dict(strategy="mcts"), False),
        ("mcts", "one rollout at a time, new kernels and shared prefill", lambda: dict(strategy="mcts"), True),
        ("mcts", f"lockstep {args.lockstep} greedy rollouts", lambda: dict(strategy="mcts", lockstep=args.lockstep), True),
        ("mcts", "speculative rollouts, prompt lookup",
         lambda: dict(strategy="mcts", rollout=prompt_lookup_rollout(vsize)), True),
        ("mcts", "speculative rollouts, prompt lookup + recycling",
         lambda: dict(strategy="mcts", rollout=lookup_and_recycling_rollout(vsize)), True),
        ("best-of-8", "old: prompt re-read per sample, torch.multinomial", lambda: dict(strategy="best-of-n"), False),
        ("best-of-8", "shared prompt prefill, inverse-transform draw", lambda: dict(strategy="best-of-n"), True),
    ]
    agg: dict[str, list[float]] = {label: [0.0, 0.0, 0.0, 0.0] for _, label, _, _ in paths}
    same: dict[str, list[bool]] = {}
    for prob in problems(args.problems, None)[: args.throughput]:
        suite = parse_tests(prob["test"], entry_point=prob["entry_point"])
        ref: list[str] | None = None
        for family, label, kw, share in paths:
            lm.reset()
            lm.share_prefix = share
            lm.kernels = new_kernels if share else old_kernels
            old_draw = family == "best-of-8" and not share
            if old_draw:
                best_of_n_module.sample = _multinomial_sample  # type: ignore[assignment]
            t = time.perf_counter()
            try:
                sol = solve(handle, prob["prompt"], suite, entry_point=prob["entry_point"], seed=args.seed,
                            visible_fraction=args.visible_fraction,
                            budget_tokens=args.throughput_budget if family == "mcts" else None,
                            max_new_tokens=args.max_new_tokens, temperature=args.temperature, n=8, k=args.k,
                            timeout=args.timeout, early_exit=False, progress=False, **kw())
            finally:
                best_of_n_module.sample = sample_now
                lm.kernels = new_kernels
            wall = time.perf_counter() - t
            programs = [r.program for r in sol.rewarded]
            a = agg[label]
            a[0] += sol.tokens
            a[1] += wall
            a[2] += len(set(programs))
            a[3] += sum(r.new_tokens for r in sol.rewarded)
            if family == "mcts":
                if ref is None:
                    ref = programs
                else:
                    # the same programs in the same order; the last one of the shorter list may
                    # be cut by the token budget at a different point, so it is not compared
                    k = min(len(ref), len(programs)) - 1
                    same.setdefault(label, []).append(ref[:k] == programs[:k])
            print(f"  {prob['task_id']:<14} {label:<52} {sol.tokens:>6} tok {wall:6.1f} s "
                  f"{sol.tokens / wall:6.1f} fwd tok/s  {len(set(programs))} programs", flush=True)
    print()
    print(f"Rollout throughput, {args.throughput} problems, MCTS budget {args.throughput_budget} forward tokens, "
          f"best-of-8 unbudgeted, max_new_tokens {args.max_new_tokens}, {args.threads} threads")
    print()
    print("| path | fwd tokens | wall s | fwd tokens/s | program tokens/s | distinct programs | programs/min | "
          "same programs as one-at-a-time |")
    print("|---|---|---|---|---|---|---|---|")
    base: dict[str, tuple[float, float]] = {}
    for family, label, _, _ in paths:
        tok, wall, progs, gen = agg[label]
        rate, grate = tok / wall, gen / wall
        b = base.setdefault(family, (rate, grate))
        s = same.get(label)
        print(f"| {family}: {label} | {tok:.0f} | {wall:.1f} | {rate:.1f} ({rate / b[0]:.2f}x) | "
              f"{grate:.1f} ({grate / b[1]:.2f}x) | {progs:.0f} | {60 * progs / wall:.2f} | "
              f"{'' if s is None else f'{sum(s)}/{len(s)}'} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", choices=("humaneval", "mbpp", "both"), default="both")
    ap.add_argument("--limit", type=int, default=None, help="first N problems of each set")
    ap.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of " + ",".join(METHODS))
    ap.add_argument("--max-new-tokens", type=int, default=192)
    ap.add_argument("--budget-multiplier", type=float, default=8.0, help="search budgets = greedy's x this")
    ap.add_argument("--n", type=int, default=8, help="best-of-N samples")
    ap.add_argument("--k", type=int, default=3, help="MCTS children per expansion / EntropyGate candidates")
    ap.add_argument("--lockstep", type=int, default=4, help="MCTS greedy rollouts advanced together")
    ap.add_argument("--threshold", type=float, default=1.0, help="EntropyGate pause threshold (nats)")
    ap.add_argument("--temperature", type=float, default=0.8, help="sampling / prior temperature")
    ap.add_argument("--visible-fraction", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=5.0, help="seconds per sandboxed test run")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--throughput", type=int, default=0, help="compare rollout paths on the first N problems instead")
    ap.add_argument("--throughput-budget", type=int, default=800)
    ap.add_argument("--out", default=None, help="write per-problem results as JSON here")
    ap.add_argument("--plot", default=None, help="write the budget curve here (png)")
    ap.add_argument("--report", metavar="FILE", default=None,
                    help="print the tables of a saved --out file (or its .partial.jsonl) and exit")
    ap.add_argument("--resume", metavar="FILE", default=None,
                    help="skip the problems this --out file (or .partial.jsonl) has every method's row for")
    args = ap.parse_args()
    if args.report:
        saved, rows = read_run(args.report)
        for k, v in saved.items():  # the run's own settings for the table's header
            if k not in ("report", "resume", "out", "plot"):
                setattr(args, k, v)
        methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
        # an interrupted run's last problem may lack some methods: the time counts whole problems only
        whole = set.intersection(*({r["task_id"] for r in rows if r["method"] == m} for m in methods))
        wall = sum(r["wall_s"] for r in rows if r["task_id"] in whole)
        print(f"{args.report}: {len(rows)} rows; the whole-run time below is the sum of the wall times of "
              f"the {len(whole)} problems every method finished")
        report(args, rows, methods, wall)
        return
    torch.set_num_threads(args.threads)

    from trellis.hf_lm import language_model
    from trellis.models import load

    t0 = time.perf_counter()
    handle = load()
    lm = language_model(handle.model)
    print(f"loaded in {time.perf_counter() - t0:.1f} s", flush=True)
    if args.throughput:
        throughput(args, handle, lm)
        return
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = set(methods) - set(METHODS)
    if unknown:
        ap.error(f"unknown methods {sorted(unknown)}")
    if "greedy" not in methods:
        methods.insert(0, "greedy")  # it sets the budgets
    t1 = time.perf_counter()
    rows = run_problems(args, handle, lm, methods)
    total = time.perf_counter() - t1
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps({"args": vars(args), "rows": rows, "total_s": total}, indent=1))
        print(f"\nrows -> {args.out}")
    report(args, rows, methods, total)


if __name__ == "__main__":
    main()
