"""Test-guided search on a fake LM whose tokens are code chunks: MCTS finds the program that passes
the tests where greedy does not, best-of-N filters samples by tests, syntax pruning steers away
from dead prefixes, generation stops at the end of the function, reports are cached per program,
budgets hold, and ``solve`` judges the result on held-out tests."""

from __future__ import annotations

from typing import Sequence

import pytest
import torch
from torch import Tensor

import trellis.codegen.solve as solve_mod
from trellis.codegen import parse_tests
from trellis.codegen.solve import Solution, TestGuided, entry_point_of, solve
from trellis.decoder import Decoder
from trellis.models import ModelHandle
from trellis.search import MCTS, Greedy
from trellis.tokens import TokenTree, Vocabulary

PROMPT = 'def inc(x):\n    """Add one to x."""\n'
CHUNKS = ["", "<bos>", "<eos>", PROMPT, "    return x", " - 1", " + 1", " * 2", "\n", "\nprint(inc(3))\n", " +)",
          " +", "x"]
TOK = {c: i for i, c in enumerate(CHUNKS)}
EOS = 2
R, MINUS, PLUS, TIMES, NL, JUNK, DEAD, PLUS_BARE, X = (TOK[c] for c in (
    "    return x", " - 1", " + 1", " * 2", "\n", "\nprint(inc(3))\n", " +)", " +", "x"))
VISIBLE = ["assert inc(1) == 2"]
HIDDEN = ["assert inc(5) == 6", "assert inc(-1) == 0"]


def vocab() -> Vocabulary:
    return Vocabulary(tuple(c.encode() if i > 2 else b"" for i, c in enumerate(CHUNKS)), eos=frozenset({EOS}),
                      special=frozenset({0, 1, EOS}))


class TableLM:
    """Logits from a table keyed by the generated tokens (prompt = [1, 3]); unlisted: after the body
    the LM rambles on with column-0 junk forever (so only a function-end stop ends it early)."""

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]]) -> None:
        self.vocab_size, self.table = len(CHUNKS), table
        self.rows = 0

    def _row(self, prefix: Sequence[int]) -> Tensor:
        row = torch.full((self.vocab_size,), -20.0)
        for t, v in self.table.get(tuple(prefix[2:]), {JUNK: 5.0, EOS: 1.0}).items():
            row[t] = v
        return row

    def logits(self, prefixes: Sequence[Sequence[int]]) -> Tensor:
        self.rows += len(prefixes)
        return torch.stack([self._row(p) for p in prefixes])

    def tree_logits(self, prefix: Sequence[int], tree: TokenTree) -> Tensor:
        toks = tree.tokens.tolist()
        return torch.stack([self._row(prefix)] + [self._row(list(prefix) + [toks[j] for j in tree.path_to(i)])
                                                  for i in range(len(tree))])


def trap_table(first: dict[int, float] | None = None) -> dict[tuple[int, ...], dict[int, float]]:
    """Greedy writes `return x - 1`; `+ 1` (the answer) is the second choice after `return x`."""
    table: dict[tuple[int, ...], dict[int, float]] = {(): {R: 5.0}, (R,): first or {MINUS: 3.0, PLUS: 2.0, TIMES: 1.0}}
    for op in (MINUS, PLUS, TIMES, PLUS_BARE):
        table[(R, op)] = {NL: 5.0}
    table[(R, PLUS_BARE)] = {X: 5.0}  # `return x +` `x`: still fine mid-line
    table[(R, PLUS_BARE, X)] = {NL: 5.0}
    return table


def setup(table=None):
    lm = TableLM(table or trap_table())
    dec = Decoder(lm, vocab=vocab())
    return lm, dec, dec.start([1, TOK[PROMPT]])


def guided(strategy="mcts", **kw) -> TestGuided:
    return TestGuided(parse_tests(VISIBLE), strategy=strategy, **kw)


def test_mcts_finds_the_passing_program_where_greedy_does_not():
    lm, dec, root = setup()
    g = guided("greedy")
    best = g(dec, root, max_new_tokens=20)[0]
    assert g.program(dec, best) == PROMPT + "    return x - 1\n"
    assert g.report(g.program(dec, best)).fraction == 0.0
    m = guided("mcts", max_rollouts=20)
    res = m.search(dec, root, max_new_tokens=20)
    assert res.scores[0] == 1.0 and m.program(dec, res.hypotheses[0]) == PROMPT + "    return x + 1\n"
    assert list(res.scores) == sorted(res.scores, reverse=True)
    assert any(d.get("reward") == 1.0 for _, d in res.tree.nodes(data=True))
    # an MCTS instance keeps its settings but gets the test reward
    res2 = guided(MCTS(reward=lambda h: 0.0, k=3, max_rollouts=20)).search(dec, root, max_new_tokens=20)
    assert res2.scores[0] == 1.0


def test_generation_stops_at_the_end_of_the_function():
    lm, dec, root = setup()
    plain = Greedy()(dec, root, max_new_tokens=12)[0]
    assert plain.num_new == 12 and not plain.finished  # rambles on with junk to the budget
    lm.rows = 0
    best = guided("greedy")(dec, root, max_new_tokens=12)[0]
    assert best.finished and best.new_tokens[-1] == EOS
    assert best.new_tokens[:-1] == (R, MINUS, NL, JUNK)  # the column-0 `print` line ended it ...
    assert lm.rows == 4  # ... and its EOS cost no forward pass


def test_syntax_pruning_steers_away_from_dead_tokens_and_records_them():
    table = trap_table({DEAD: 4.0, PLUS: 2.0, MINUS: 1.0})
    lm, dec, root = setup(table)
    unpruned = guided("greedy", prune_top=0)
    best = unpruned(dec, root, max_new_tokens=10)[0]
    assert unpruned.program(dec, best).startswith(PROMPT + "    return x +)")
    assert unpruned.report(unpruned.program(dec, best)).status == "syntax_error"
    g = guided("greedy")
    res = g.search(dec, root, max_new_tokens=10)
    assert g.program(dec, res.hypotheses[0]) == PROMPT + "    return x + 1\n" and res.scores[0] == 1.0
    pruned = [d for _, d in res.tree.nodes(data=True) if d.get("pruned") and d["depth"] == 2]
    assert DEAD in {d["token"] for d in pruned}  # (the tiny vocabulary has other dead tokens too)
    assert all("unmatched" in d["syntax_error"] for d in pruned if d["token"] == DEAD)


def test_a_prefix_that_still_dies_stops_the_search_on_it():
    table = trap_table({PLUS_BARE: 4.0})
    table[(R, PLUS_BARE)] = {NL: 5.0}  # `return x +` then newline: dead, nothing viable left
    lm, dec, root = setup(table)
    best = guided("greedy", prune_top=0)(dec, root, max_new_tokens=10)[0]  # no masking: it picks the newline
    assert best.new_tokens == (R, PLUS_BARE, NL) and not best.finished


def test_best_of_n_filters_samples_by_tests():
    lm, dec, root = setup()
    dec = Decoder(lm, vocab=vocab(), temperature=1.0)
    g = guided("best-of-n", n=8, generator=torch.Generator().manual_seed(0))
    res = g.search(dec, root, max_new_tokens=12)
    assert len(res.hypotheses) == 8 and res.scores[0] == 1.0
    # `x * 2` also passes the one visible test (inc(1) == 2): the held-out tests tell them apart
    assert g.program(dec, res.hypotheses[0]) in (PROMPT + "    return x + 1\n", PROMPT + "    return x * 2\n")
    assert sum(s == 1.0 for s in res.scores) < 8
    assert len(g.reports) <= 3  # at most three distinct programs among the 8 samples: run once each


def test_reports_are_cached_per_program(monkeypatch):
    calls: list[str] = []
    real = solve_mod.run_tests

    def counting(code, tests, **kw):
        calls.append(code)
        return real(code, tests, **kw)

    monkeypatch.setattr(solve_mod, "run_tests", counting)
    lm, dec, root = setup()
    g = guided("mcts", max_rollouts=30)
    g.search(dec, root, max_new_tokens=20)
    g.search(dec, root, max_new_tokens=20)  # second search: every program already known
    assert len(calls) == len(set(calls)) == len(g.reports) <= 3


def test_entropy_gate_for_code_runs_with_pruning():
    lm, dec, root = setup(trap_table({DEAD: 3.0, PLUS: 2.9, MINUS: 2.8}))
    res = guided("entropy-gate", threshold=0.5).search(dec, root, max_new_tokens=12)
    assert len(res.hypotheses) == 1 and res.hypotheses[0].finished
    assert any(d.get("paused") for _, d in res.tree.nodes(data=True))
    assert DEAD not in res.hypotheses[0].new_tokens


def test_generate_accepts_test_guided():
    from trellis.generate import generate

    lm = TableLM(trap_table())
    handle = ModelHandle(model=lm, tokenizer=None, vocab=vocab(), name="table")  # type: ignore[arg-type]
    out = generate(handle, [1, TOK[PROMPT]], strategy=guided("mcts", max_rollouts=20), max_new_tokens=20)
    assert out.text is not None and out.text.startswith("    return x + 1\n")


def test_solve_judges_on_held_out_tests_and_reports_its_work():
    handle = ModelHandle(model=TableLM(trap_table()), tokenizer=None, vocab=vocab(), name="table")  # type: ignore[arg-type]
    sol = solve(handle, [1, TOK[PROMPT]], VISIBLE, held_out=HIDDEN, strategy="mcts", max_new_tokens=20)
    assert isinstance(sol, Solution) and sol.passed
    assert sol.program == PROMPT + "    return x + 1\n" and sol.completion == "    return x + 1\n"
    assert sol.visible.all_passed and sol.held_out is not None and sol.held_out.total == 2
    assert sol.tokens > 0 and sol.programs >= 2 and sol.tree.number_of_nodes() > 3
    greedy = solve(handle, [1, TOK[PROMPT]], VISIBLE + HIDDEN, strategy="greedy", max_new_tokens=20)
    assert not greedy.passed and greedy.visible.total == 1 and greedy.held_out is not None
    assert greedy.held_out.total == 2  # split 1 visible / 2 held-out, deterministic


def test_held_out_tests_catch_a_program_that_only_fits_the_visible_ones():
    handle = ModelHandle(model=TableLM(trap_table({MINUS: 3.0, TIMES: 2.0, PLUS: 1.0})), tokenizer=None,
                         vocab=vocab(), name="table")  # type: ignore[arg-type]
    sol = solve(handle, [1, TOK[PROMPT]], VISIBLE, held_out=HIDDEN, strategy="mcts", max_new_tokens=20)
    assert sol.program.endswith("return x * 2\n")  # the likelier of the two programs with reward 1
    assert sol.visible.all_passed and not sol.passed and sol.held_out is not None and sol.held_out.passed == 0


def test_budget_tokens_bound_any_strategy():
    lm = TableLM(trap_table())
    handle = ModelHandle(model=lm, tokenizer=None, vocab=vocab(), name="table")  # type: ignore[arg-type]
    sol = solve(handle, [1, TOK[PROMPT]], VISIBLE + HIDDEN, strategy="best-of-n", n=4, budget_tokens=4,
                max_new_tokens=20)
    assert sol.tokens <= 4 + 4  # one batched step may start before the budget is seen as spent


def test_entry_point_and_bad_search_name():
    assert entry_point_of(PROMPT) == "inc"
    assert entry_point_of("import math\ndef helper(a):\n    return a\ndef main(x):\n") == "main"
    with pytest.raises(ValueError):
        TestGuided(parse_tests(VISIBLE), strategy="beam")  # type: ignore[arg-type]
    lm, dec, root = setup()
    with pytest.raises(ValueError, match="temperature"):  # eight copies of the greedy program otherwise
        guided("best-of-n")(Decoder(lm, vocab=vocab(), temperature=0.0), root, max_new_tokens=5)


def test_cli_solve_prints_the_program_and_writes_the_tree(tmp_path, monkeypatch, capsys):
    import trellis.models
    from trellis.cli import SOLVE_STRATEGIES, main
    from trellis.codegen.solve import SEARCHES

    assert SOLVE_STRATEGIES == SEARCHES

    class Tok:
        def __call__(self, text):
            assert text == PROMPT
            return type("Enc", (), {"input_ids": [1, TOK[PROMPT]]})()

    handle = ModelHandle(model=TableLM(trap_table()), tokenizer=Tok(), vocab=vocab(), name="table")  # type: ignore[arg-type]
    monkeypatch.setattr(trellis.models, "load", lambda model=None, **kw: handle)
    (tmp_path / "prompt.py").write_text(PROMPT)
    (tmp_path / "tests.py").write_text("def check(candidate):\n" + "".join(f"    {t}\n" for t in VISIBLE + HIDDEN))
    tree = tmp_path / "tree.dot"
    rc = main(["solve", "--tests", str(tmp_path / "tests.py"), str(tmp_path / "prompt.py"), "--strategy", "mcts",
               "--max-new-tokens", "20", "--tree-out", str(tree), "--threads", "1"])
    out = capsys.readouterr()
    assert rc == 0 and out.out == PROMPT + "    return x + 1\n"
    assert "held-out 2/2" in out.err and tree.read_text().startswith("digraph")
    rc = main(["solve", "--tests", str(tmp_path / "tests.py"), str(tmp_path / "prompt.py"), "--strategy", "greedy",
               "--max-new-tokens", "20", "-q"])
    assert rc == 1 and capsys.readouterr().out.endswith("return x - 1\n")


@pytest.mark.model
def test_gemma_writes_a_small_function_and_stops_at_its_end(gemma):
    prompt = 'def add(a, b):\n    """Return the sum of a and b."""\n'
    sol = solve(gemma, prompt, ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"], strategy="greedy",
                max_new_tokens=24)
    assert sol.program.startswith(prompt) and sol.visible.total == 1 and sol.held_out is not None
    compile(sol.program, "<gemma>", "exec")
    assert sol.passed, sol.program  # measured: `return a + b`
    assert sol.tokens < 24 + len(prompt)  # the function end stopped it before the budget
