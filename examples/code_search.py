"""Code generation with test-guided search on the embedded Gemma 3 270M.

1. ``run_tests``: run a program against HumanEval-style tests in the sandbox, one result per assert.
2. ``solve``: greedy vs MCTS (PG-TD: reward = share of the visible asserts passed) on the same
   problem at about 8x greedy's forward tokens; the held-out asserts judge both. The MCTS tree is
   written as SVG (syntax-pruned tokens red and dashed, the returned program green).

    python examples/code_search.py                                   # a few minutes on a laptop CPU
    python examples/code_search.py --max-new-tokens 16 --multiplier 2 # quick look
"""

from __future__ import annotations

import argparse

from trellis.codegen import run_tests, solve, split_tests
from trellis.codegen.suite import parse_tests
from trellis.models import load
from trellis.viz import write_tree

PROMPT = '''def count_vowels(word: str) -> int:
    """Return how many of the characters of word are vowels (a, e, i, o, u; lower case only).
    >>> count_vowels("banana")
    3
    """
'''
TESTS = '''
def check(candidate):
    assert candidate("banana") == 3
    assert candidate("xyz") == 0
    assert candidate("") == 0
    assert candidate("aeiou") == 5
    assert candidate("hello world") == 3
    assert candidate("AEIOU") == 0
'''

ap = argparse.ArgumentParser()
ap.add_argument("--max-new-tokens", type=int, default=96)
ap.add_argument("--multiplier", type=float, default=8.0, help="MCTS budget = greedy's forward tokens x this")
ap.add_argument("--tree-out", default="code_search_tree.svg")
args = ap.parse_args()

# 1. the sandbox on its own
suite = parse_tests(TESTS, entry_point="count_vowels")
good = PROMPT + "    return sum(ch in 'aeiou' for ch in word)\n"
bad = PROMPT + "    return sum(ch in 'aeiouAEIOU' for ch in word)\n"
for name, program in (("right", good), ("case-blind", bad)):
    rep = run_tests(program, suite)
    marks = "".join("." if c.passed else "F" for c in rep.cases)
    print(f"{name:>10}: {rep.passed}/{rep.total} [{marks}] {rep.status}; first failure: {rep.first_failure}")
print("sandbox layers here:", ", ".join(rep.enforced))
# A program written to fool the tests: its result claims to equal anything. The assertions run in a
# separate judge process on data only, so it earns nothing (trellis/codegen/sandbox.py).
cheat = PROMPT + "    class Yes:\n        def __eq__(self, other):\n            return True\n    return Yes()\n"
rep = run_tests(cheat, suite)
print(f"{'always-eq':>10}: {rep.passed}/{rep.total}; first failure: {rep.first_failure}")
visible, held_out = split_tests(suite, visible_fraction=0.5, seed=0)
print(f"visible asserts: {len(visible)}, held-out: {len(held_out)}\n")

# 2. search
model = load()
greedy = solve(model, PROMPT, suite, strategy="greedy", max_new_tokens=args.max_new_tokens)
budget = int(greedy.tokens * args.multiplier)
mcts = solve(model, PROMPT, suite, strategy="mcts", budget_tokens=budget, max_new_tokens=args.max_new_tokens)
for sol in (greedy, mcts):
    held = sol.held_out
    print(f"--- {sol.strategy}: {'PASS' if sol.passed else 'fail'}; visible {sol.visible.passed}/{sol.visible.total}, "
          f"held-out {held.passed if held else '-'}/{held.total if held else 0}; {sol.tokens} forward tokens, "
          f"{sol.programs} programs run, {sol.pruned} tokens pruned by syntax, {sol.seconds:.1f} s")
    print(sol.completion)
print("tree ->", write_tree(mcts.tree, args.tree_out))
