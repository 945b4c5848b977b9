"""What one ``run_tests`` call costs: the median wall time over ``--calls`` calls, for this
checkout and, with ``--baseline DIR``, for another checkout of trellis (a ``git worktree`` at an
older commit) in the same run, rounds interleaved so both see the same machine.

The programs are the HumanEval and MBPP dev splits' canonical solutions (../shared/data), cycled
in order: small programs with 3-10 asserts, what test-guided search runs thousands of times.
Each side runs in its own process (``python -c``) with one thread; the figures are printed per
side with the ratio, and a final ``SUMMARY bench_sandbox:`` line.

    python benchmarks/bench_sandbox.py --calls 50
    git worktree add /tmp/base 3b665e5 && cp trellis/constrain/_walkc*.so /tmp/base/trellis/constrain/
    python benchmarks/bench_sandbox.py --calls 50 --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data"
FILES = [DATA / "humaneval" / "HumanEval-dev.jsonl", DATA / "mbpp" / "mbpp-sanitized-dev.jsonl"]

# Runs in the measured checkout's own process: k calls, one time per call, as JSON on stdout.
# MBPP's solutions are indented by 1, 2, 4 or 8 spaces under 4-space prompts: 72 of its 114 dev
# rows do not compile as given (a syntax error costs no process), so each is re-indented first
# (the first of a few re-indentations that compiles; before 2026-11-29 the bench timed them as
# syntax errors).
CHILD = """
import json, sys, textwrap, time
from trellis.codegen import parse_tests, run_tests
rows = [json.loads(l) for f in sys.argv[1:-2] for l in open(f)]
start, k = int(sys.argv[-2]), int(sys.argv[-1])

def program(r):
    sol, p = r["canonical_solution"], r["prompt"]
    lines = sol.splitlines()
    levels = sorted({len(l) - len(l.lstrip(" ")) for l in lines if l.strip()}) or [4]
    ranked = "\\n".join("    " * (levels.index(len(l) - len(l.lstrip(" "))) + 1) + l.lstrip(" ") if l.strip() else ""
                       for l in lines) + "\\n"
    scaled = "\\n".join(" " * ((len(l) - len(l.lstrip(" "))) * 4 // max(levels[0], 1)) + l.lstrip(" ")
                       for l in lines) + "\\n"
    for cand in (sol, scaled, ranked, textwrap.indent(textwrap.dedent(sol), "    ")):
        try:
            compile(p + cand, "<program>", "exec")
            return p + cand
        except SyntaxError:
            continue
    return p + sol

out = []
for i in range(start, start + k):
    r = rows[i % len(rows)]
    suite = parse_tests(r["test"], entry_point=r["entry_point"])
    code = program(r)
    t = time.perf_counter()
    rep = run_tests(code, suite, timeout=10)
    out.append([time.perf_counter() - t, rep.status, rep.passed, rep.total, list(rep.enforced)])
print(json.dumps(out))
"""


def run_side(root: Path, start: int, k: int) -> list[list]:
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-c", CHILD, *map(str, FILES), str(start), str(k)], cwd=str(root),
                         env=env, capture_output=True, text=True, timeout=3600, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (calls split among them)")
    ap.add_argument("--baseline", type=Path, default=None, help="another trellis checkout to time in the same run")
    args = ap.parse_args(argv)
    sides = {"this": HERE.parent} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    per = max(1, args.calls // args.rounds)
    times: dict[str, list[float]] = {s: [] for s in sides}
    outcome: dict[str, list] = {s: [] for s in sides}
    layers: dict[str, list] = {}
    for r in range(args.rounds):
        for name, root in sides.items():
            rows = run_side(root, r * per, per)
            times[name] += [x[0] for x in rows]
            outcome[name] += [x[1:4] for x in rows]
            layers[name] = sorted({x for row in rows for x in row[4]} | set(layers.get(name, ())))
    for name in sides:
        ts = sorted(times[name])
        print(f"{name:9s} {len(ts)} calls: median {1e3 * statistics.median(ts):.1f} ms, "
              f"p90 {1e3 * ts[int(0.9 * (len(ts) - 1))]:.1f} ms; layers {', '.join(layers[name])}")
    summary = f"SUMMARY bench_sandbox: median {1e3 * statistics.median(times['this']):.1f} ms per call"
    if args.baseline:
        ratio = statistics.median(times["this"]) / statistics.median(times["baseline"])
        same = sum(a == b for a, b in zip(outcome["this"], outcome["baseline"]))
        print(f"ratio this/baseline {ratio:.2f}x; identical (status, passed, total) in {same}/{len(outcome['this'])}")
        summary += f" ({ratio:.2f}x the baseline's {1e3 * statistics.median(times['baseline']):.1f} ms)"
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
