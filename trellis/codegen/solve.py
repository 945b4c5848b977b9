"""Test-guided code generation: search the LM's token tree for a program that passes the visible
tests, as in Planning-Guided Transformer Decoding (PG-TD; Zhang et al. 2023, "Planning with Large
Language Models for Code Generation"): the reward of a complete program is the fraction of the
visible tests it passes; a held-out half of the tests judges the result.

``TestGuided`` wraps a search (MCTS by default; also best-of-N, EntropyGate, greedy, or any
``Strategy``) and gives it three things through a proxy of the language model (``_CodeLM``, one per
search; strategies still see only a ``Decoder``):

- *function end*: once the completion starts a logical line at column 0 (``def``, ``if __name__``,
  a stray fence ...; see ``syntax.function_end``) the only allowed token is EOS, so every strategy
  finishes the program there instead of generating junk up to the budget (no forward pass spent);
- *syntax pruning*: of each next-token row, the most likely tokens are checked in order until
  ``prune_top`` viable ones are found and those that make the program prefix unparseable for good
  (``syntax.check_prefix``) are set to -inf; a prefix that still ends up dead gets an all -inf row,
  which stops every strategy on it (reward 0). Checking only the tokens a search can pick keeps
  this cheap on a 262k vocabulary, where a full ``Constraint`` mask would not be;
- *budgets*: past ``budget_tokens`` forward tokens or ``budget_seconds``, rows force EOS, so any
  strategy winds down; MCTS also stops iterating.

The reward runs programs in ``sandbox.run_tests`` and caches the report per program text.
"""

from __future__ import annotations

import ast
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Literal, Sequence

import networkx as nx
import torch
from torch import Tensor

from trellis.codegen.sandbox import TestReport, run_tests
from trellis.codegen.suite import TestSuite, parse_tests, split_tests
from trellis.codegen.syntax import check_prefix, extract_program, function_end
from trellis.decoder import Decoder, Hypothesis
from trellis.lm import LanguageModel
from trellis.search.base import Strategy
from trellis.search.best_of_n import BestOfN
from trellis.search.entropy import EntropyGate
from trellis.search.greedy import Greedy
from trellis.search.mcts import MCTS
from trellis.search.tree import SearchResult, TreeRecorder, path_tree
from trellis.tokens import TokenTree, Vocabulary

__all__ = ["SEARCHES", "Solution", "TestGuided", "solve"]

SearchName = Literal["mcts", "best-of-n", "entropy-gate", "greedy"]
SEARCHES: tuple[str, ...] = ("mcts", "best-of-n", "entropy-gate", "greedy")
_NEG_INF = float("-inf")


class _CodeLM:
    """The language-model proxy of one test-guided search (see the module docstring). Counts the
    forward tokens it lets through and remembers which prefixes it ended or pruned."""

    def __init__(self, lm: LanguageModel, vocab: Vocabulary, prompt: str, base: int, *, prune_top: int,
                 max_checks: int, budget_tokens: int | None, budget_seconds: float | None) -> None:
        self.lm, self.vocab, self.prompt, self.base = lm, vocab, prompt, base
        self.vocab_size = lm.vocab_size
        self.prune_top, self.max_checks = prune_top, max_checks
        self.budget_tokens, self.budget_seconds = budget_tokens, budget_seconds
        self.eos = min(vocab.eos)
        self.t0 = time.monotonic()
        self.rows_forwarded = 0
        stats = getattr(lm, "stats", None)
        self._tokens0 = stats.tokens_forwarded if stats is not None else None
        self._state: dict[tuple[int, ...], str] = {}
        self.ended: set[tuple[int, ...]] = set()  # generated-token paths whose function had ended
        self.dead: dict[tuple[int, ...], str] = {}  # generated-token path -> syntax error (pruned)

    @property
    def stats(self) -> Any:
        return getattr(self.lm, "stats", None)  # MCTS reads the LM's counters for its budget

    def spent(self) -> int:
        """Forward tokens since this proxy was made (``lm.stats``), else prefixes sent to the LM."""
        stats = self.stats
        if stats is not None and self._tokens0 is not None:
            return stats.tokens_forwarded - self._tokens0
        return self.rows_forwarded

    def over_budget(self) -> bool:
        return ((self.budget_tokens is not None and self.spent() >= self.budget_tokens)
                or (self.budget_seconds is not None and time.monotonic() - self.t0 >= self.budget_seconds))

    def completion(self, prefix: Sequence[int]) -> str:
        return self.vocab.decode(prefix[self.base:]).decode("utf-8", errors="ignore")

    def state(self, prefix: tuple[int, ...]) -> str:
        """"ended", "dead" or "open" (cached: a prefix's verdict never changes)."""
        got = self._state.get(prefix)
        if got is None:
            text = self.completion(prefix)
            path = prefix[self.base:]
            if function_end(self.prompt, text) is not None:
                got = "ended"
                self.ended.add(path)
            else:
                check = check_prefix(self.prompt + text)
                got = "open" if check.viable else "dead"
                if not check.viable:
                    self.dead[path] = check.reason
            self._state[prefix] = got
        return got

    def _prune_(self, row: Tensor, prefix: tuple[int, ...]) -> Tensor:
        """Set the likeliest tokens that would make the program dead to -inf, in place (row [V])."""
        if self.prune_top <= 0:
            return row
        text = self.prompt + self.completion(prefix)
        order = torch.topk(row, min(self.max_checks, row.shape[-1])).indices.tolist()  # not a full sort: V = 262k
        viable = 0
        for t in order:
            if row[t] == _NEG_INF:
                break
            if t in self.vocab.eos or t >= len(self.vocab.tokens):
                viable += 1
            else:
                piece = self.vocab.tokens[t].decode("utf-8", errors="ignore")
                check = check_prefix(text + piece) if piece else None
                if check is None or check.viable:
                    viable += 1
                else:
                    row[t] = _NEG_INF
                    self.dead.setdefault(prefix[self.base:] + (t,), check.reason)
            if viable >= self.prune_top:
                break
        return row

    def _forced(self, kind: str, like: Tensor | None) -> Tensor:
        row = torch.full((self.vocab_size,), _NEG_INF, dtype=like.dtype if like is not None else torch.float32)
        if kind != "dead":
            row[self.eos] = 0.0
        return row

    def logits(self, prefixes: Sequence[Sequence[int]]) -> Tensor:
        keys = [tuple(int(t) for t in p) for p in prefixes]
        over = self.over_budget()
        kinds = ["budget" if over and len(k) > self.base else
                 self.state(k) if len(k) > self.base else "open" for k in keys]
        need = [k for k, kind in zip(keys, kinds) if kind == "open"]
        out = self.lm.logits(need) if need else None  # [M, V]
        self.rows_forwarded += len(need)
        rows, j = [], 0
        for k, kind in zip(keys, kinds):
            if kind == "open":
                assert out is not None
                rows.append(self._prune_(out[j].clone(), k))
                j += 1
            else:
                rows.append(self._forced(kind, out))
        return torch.stack(rows)  # [B, V]

    def tree_logits(self, prefix: Sequence[int], tree: TokenTree) -> Tensor:
        out = self.lm.tree_logits(prefix, tree)  # [N+1, V]
        self.rows_forwarded += len(tree) + 1
        toks = tree.tokens.tolist()
        base = tuple(int(t) for t in prefix)
        over = self.over_budget()
        rows = []
        for i in range(len(tree) + 1):
            key = base if i == 0 else base + tuple(toks[j] for j in tree.path_to(i - 1))
            kind = "budget" if over and len(key) > self.base else self.state(key) if len(key) > self.base else "open"
            rows.append(self._prune_(out[i].clone(), key) if kind == "open" else self._forced(kind, out))
        return torch.stack(rows)  # [N+1, V]


@dataclass(frozen=True)
class TestGuided:
    """A strategy that searches for a program passing ``tests`` (the *visible* tests): the reward
    of a finished program is the fraction of them it passes (PG-TD). Usable as
    ``generate(model, prompt, strategy=TestGuided(tests, ...))``; hypotheses come back sorted by
    reward (ties in the inner strategy's order).

    ``tests``: a ``TestSuite`` (test code or a list of asserts is parsed). ``strategy``: "mcts"
    (PG-TD; greedy rollouts, ``k`` children per expansion, at most ``max_rollouts``), "best-of-n"
    (``n`` samples ranked by reward; needs temperature > 0), "entropy-gate" (AdaDec with
    ``threshold`` nats; one program), "greedy", or a ``Strategy`` — an ``MCTS`` gets the test
    reward as its ``reward``, a ``BestOfN`` as its ``scorer``, anything else is reranked.
    ``prompt``: the program text before the completion (default: the root's decoded tokens).
    ``entry_point`` overrides the suite's. ``budget_tokens`` / ``budget_seconds`` bound the whole
    search (see the module docstring). ``prune_top``: how many viable tokens each row must keep
    (0: no token masking; a prefix that is dead still ends its hypothesis); ``max_checks``: at most
    this many tokens are checked per row. ``timeout``, ``memory_mb``: per program run.
    ``reports`` caches the test report of every program text across calls (shared, not compared).
    """

    __test__ = False  # not a pytest class

    tests: TestSuite
    strategy: SearchName | Strategy = "mcts"
    prompt: str | None = None
    entry_point: str | None = None
    n: int = 8
    k: int = 3
    max_rollouts: int = 512
    threshold: float = 1.0
    budget_tokens: int | None = None
    budget_seconds: float | None = None
    prune_top: int = 8
    max_checks: int = 64
    timeout: float = 5.0
    memory_mb: int = 512
    generator: torch.Generator | None = field(default=None, compare=False)
    reports: dict[str, TestReport] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.tests, TestSuite):
            object.__setattr__(self, "tests", parse_tests(self.tests, entry_point=self.entry_point))
        if self.entry_point is not None and self.tests.entry_point != self.entry_point:
            object.__setattr__(self, "tests", replace(self.tests, entry_point=self.entry_point))
        if isinstance(self.strategy, str) and self.strategy not in SEARCHES:
            raise ValueError(f"unknown strategy {self.strategy!r}; one of {', '.join(SEARCHES)} or a Strategy")

    # ------------------------------------------------------------------ rewards
    def report(self, program: str) -> TestReport:
        """The visible tests' report on ``program`` (cached by program text)."""
        rep = self.reports.get(program)
        if rep is None:
            rep = self.reports[program] = run_tests(program, self.tests, timeout=self.timeout,
                                                    memory_mb=self.memory_mb)
        return rep

    def program(self, decoder: Decoder, hyp: Hypothesis, prompt: str | None = None) -> str:
        """The program of a hypothesis: prompt + completion, cut where the function ends."""
        return extract_program(prompt if prompt is not None else self._prompt(decoder, hyp), decoder.text(hyp))

    def _prompt(self, decoder: Decoder, root: Hypothesis) -> str:
        if self.prompt is not None:
            return self.prompt
        if decoder.vocab is None:
            raise ValueError("TestGuided needs the model's vocabulary to read programs")
        return decoder.vocab.decode(root.tokens[:root.prompt_len]).decode("utf-8", errors="replace")

    def _inner(self, reward: Callable[[Hypothesis], float]) -> Strategy:
        s = self.strategy
        if s == "mcts":
            return MCTS(reward=reward, k=self.k, max_rollouts=self.max_rollouts, budget_tokens=self.budget_tokens,
                        max_seconds=self.budget_seconds)
        if s == "best-of-n":
            return BestOfN(n=self.n, scorer=reward, early_stop=False, generator=self.generator)
        if s == "entropy-gate":
            return EntropyGate(threshold=self.threshold, k=self.k)
        if s == "greedy":
            return Greedy()
        if isinstance(s, MCTS):
            return replace(s, reward=reward)
        if isinstance(s, BestOfN):
            return replace(s, scorer=reward)
        return s  # type: ignore[return-value]

    # ------------------------------------------------------------------ the strategy
    def search_code(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int,
                    recorder: TreeRecorder | None = None) -> tuple[SearchResult, _CodeLM]:
        """``search`` plus the LM proxy (its ``spent()`` tokens, ``ended`` and ``dead`` prefixes)."""
        if decoder.vocab is None or not decoder.vocab.eos:
            raise ValueError("TestGuided needs a vocabulary with an EOS token")
        prompt = self._prompt(decoder, root)
        code_lm = _CodeLM(decoder.lm, decoder.vocab, prompt, len(root.tokens), prune_top=self.prune_top,
                          max_checks=self.max_checks, budget_tokens=self.budget_tokens,
                          budget_seconds=self.budget_seconds)
        dec = replace(decoder, lm=code_lm)

        def reward(h: Hypothesis) -> float:
            return self.report(self.program(dec, h, prompt)).fraction

        if self.strategy == "best-of-n" and decoder.temperature == 0:
            raise ValueError("best-of-n samples: it needs temperature > 0 (e.g. generate(..., temperature=0.8))")
        inner = self._inner(reward)
        rec = recorder if recorder is not None else TreeRecorder(dec, root)
        if hasattr(inner, "search"):
            res = inner.search(dec, root, max_new_tokens=max_new_tokens, recorder=rec)  # type: ignore[attr-defined]
            hyps, tree = list(res.hypotheses), res.tree
        else:
            hyps = inner(dec, root, max_new_tokens=max_new_tokens)
            tree = path_tree(dec, root, hyps) if rec.enabled else nx.DiGraph()
        rewards = [reward(h) for h in hyps]
        order = sorted(range(len(hyps)), key=lambda i: -rewards[i])  # stable: ties keep the inner order
        if rec.enabled:
            _annotate(tree, code_lm, {hyps[i].tokens[len(root.tokens):]: rewards[i] for i in order})
        return SearchResult(tuple(hyps[i] for i in order), tuple(rewards[i] for i in order), tree), code_lm

    def search(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int,
               recorder: TreeRecorder | None = None) -> SearchResult:
        """Hypotheses best first with their rewards, and the explored tree (syntax-pruned tokens are
        ``pruned`` nodes with a ``syntax_error``; returned programs carry their ``reward``)."""
        return self.search_code(decoder, root, max_new_tokens=max_new_tokens, recorder=recorder)[0]

    def __call__(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int) -> list[Hypothesis]:
        res = self.search(decoder, root, max_new_tokens=max_new_tokens, recorder=TreeRecorder.off(decoder, root))
        return list(res.hypotheses)


def _annotate(tree: nx.DiGraph, code_lm: _CodeLM, rewards: dict[tuple[int, ...], float]) -> None:
    """Mark syntax-pruned children, ended programs and returned programs' rewards in the tree."""
    if tree.number_of_nodes() == 0:
        return
    path_of: dict[int, tuple[int, ...]] = {0: ()}
    for parent, child in nx.bfs_edges(tree, 0):
        path_of[child] = path_of[parent] + (tree.nodes[child]["token"],)
    index = {path: node for node, path in path_of.items()}
    for path, reason in code_lm.dead.items():
        parent = index.get(path[:-1])
        if parent is None:
            continue
        node = index.get(path)
        if node is None:
            node = max(tree.nodes) + 1
            tok = path[-1]
            text = code_lm.vocab.tokens[tok].decode("utf-8", "replace") if tok < len(code_lm.vocab.tokens) else str(tok)
            tree.add_node(node, token=tok, text=text, depth=len(path), logprob=None, score=None, visits=0,
                          value=None, pruned=True, finished=False)
            tree.add_edge(parent, node)
            index[path] = node
        tree.nodes[node]["pruned"] = True
        tree.nodes[node]["syntax_error"] = reason
    for path in code_lm.ended:
        if path in index:
            tree.nodes[index[path]]["function_end"] = True
    for path, r in rewards.items():
        if path in index:
            tree.nodes[index[path]]["reward"] = r


@dataclass(frozen=True)
class Solution:
    """What ``solve`` found. ``program``: the best program (prompt + completion, cut at the end of
    the function); ``visible``: its report on the visible tests (the reward); ``held_out``: on the
    held-out tests (``None`` when there were none); ``tokens``: forward tokens spent (the LM's
    ``stats.tokens_forwarded`` delta, else prefixes evaluated); ``programs``: distinct programs run;
    ``pruned``: token choices cut by syntax pruning; ``tree``: the explored search tree."""

    program: str
    completion: str
    visible: TestReport
    held_out: TestReport | None
    tokens: int
    seconds: float
    programs: int
    pruned: int
    strategy: str
    tree: nx.DiGraph = field(repr=False)

    @property
    def passed(self) -> bool:
        """Judged on the held-out tests when there are any, else on the visible ones."""
        rep = self.held_out if self.held_out is not None and self.held_out.total else self.visible
        return rep.all_passed


def entry_point_of(prompt: str) -> str | None:
    """The last top-level function the prompt defines (the one the completion writes)."""
    try:
        names = [n.name for n in ast.parse(prompt).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    except SyntaxError:
        names = re.findall(r"^(?:async\s+)?def\s+(\w+)", prompt, flags=re.M)
    return names[-1] if names else None


def solve(model: Any, prompt: str | Sequence[int], tests: str | Sequence[str] | TestSuite, *,
          strategy: SearchName | Strategy = "mcts", entry_point: str | None = None,
          held_out: str | Sequence[str] | TestSuite | None = None, visible_fraction: float = 0.5,
          budget_tokens: int | None = None, budget_seconds: float | None = None, max_new_tokens: int = 256,
          temperature: float = 1.0, n: int = 8, k: int = 3, threshold: float = 1.0, seed: int = 0,
          timeout: float = 5.0, prune_top: int = 8) -> Solution:
    """Generate a program for ``prompt`` (a function header + docstring, or token ids for a model
    without a tokenizer) guided by ``tests``.

    Unless ``held_out`` tests are given, ``tests`` are split (``split_tests``, ``visible_fraction``,
    ``seed``) into visible tests — the search's reward — and held-out tests, which only judge the
    final program. ``entry_point`` defaults to the last function the prompt defines. ``strategy``:
    see ``TestGuided``; ``temperature`` shapes the distribution the searches sample / expand from
    (greedy and MCTS rollouts take its argmax, which temperature does not move). ``seed`` seeds the
    split and best-of-N's sampling.
    """
    from trellis.generate import language_model
    from trellis.models import load

    t0 = time.monotonic()
    handle = load(model)
    vocab = handle.vocab
    if vocab is None:
        raise ValueError("solve needs the model's vocabulary (a ModelHandle with vocab)")
    if isinstance(prompt, str):
        if handle.tokenizer is None:
            raise ValueError("a text prompt needs a tokenizer; pass token ids for tokenizer-less models")
        ids = list(handle.tokenizer(prompt).input_ids)
        text = prompt
    else:
        ids = [int(t) for t in prompt]
        text = vocab.decode(ids).decode("utf-8", errors="replace")
    entry = entry_point if entry_point is not None else entry_point_of(text)
    suite = tests if isinstance(tests, TestSuite) else parse_tests(tests, entry_point=entry)
    if entry is not None:
        suite = replace(suite, entry_point=entry)
    if held_out is None:
        visible, hidden = split_tests(suite, visible_fraction=visible_fraction, seed=seed)
    else:
        visible = suite
        hidden = held_out if isinstance(held_out, TestSuite) else parse_tests(held_out, entry_point=entry)
        hidden = replace(hidden, entry_point=entry) if entry is not None else hidden
    gen = torch.Generator().manual_seed(seed)
    guided = TestGuided(visible, strategy=strategy, prompt=text, n=n, k=k, threshold=threshold,
                        budget_tokens=budget_tokens, budget_seconds=budget_seconds, prune_top=prune_top,
                        timeout=timeout, generator=gen)
    decoder = Decoder(language_model(handle.model), temperature=temperature, vocab=vocab)
    root = decoder.start(ids)
    res, code_lm = guided.search_code(decoder, root, max_new_tokens=max_new_tokens)
    best = res.hypotheses[0]
    program = guided.program(decoder, best, text)
    report = guided.report(program)
    hidden_report = run_tests(program, hidden, timeout=timeout) if len(hidden) else None
    name = strategy if isinstance(strategy, str) else type(strategy).__name__
    return Solution(program=program, completion=program[len(text):] if program.startswith(text) else program,
                    visible=report, held_out=hidden_report, tokens=code_lm.spent(),
                    seconds=time.monotonic() - t0, programs=len(guided.reports), pruned=len(code_lm.dead),
                    strategy=name, tree=res.tree)
