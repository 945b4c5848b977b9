"""Test-guided code generation, the search stage: ``TestGuided``, a strategy that searches the
LM's token tree for a program that passes the visible tests, as in Planning-Guided Transformer
Decoding (PG-TD; Zhang et al. 2023, "Planning with Large Language Models for Code Generation"):
the reward of a complete program is the fraction of the visible tests it passes; a held-out half
of the tests judges the result (``problem.solve``).

``TestGuided`` wraps a search (MCTS by default; also best-of-N, EntropyGate, greedy, or any
``Strategy``) and gives it three things through a proxy of the language model (``code_lm.CodeLM``,
one per search; strategies still see only a ``Decoder``): the function end, syntax pruning and
budgets (``code_lm`` explains each).

The reward runs programs in ``sandbox.run_tests`` and caches the report per program text. An MCTS
search ends at the first program that passes every visible test (``early_exit``) or when the
budget is spent, by an exception raised from the reward (MCTS itself has no stop hook).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Literal

import networkx as nx
import torch
from tqdm import tqdm

from trellis.codegen.code_lm import CodeLM
from trellis.codegen.sandbox import TestReport, run_tests
from trellis.codegen.suite import TestSuite, parse_tests
from trellis.codegen.syntax import extract_program, scan_function
from trellis.decoder import Decoder, Hypothesis
from trellis.errors import UsageError
from trellis.search.base import Strategy
from trellis.search.best_of_n import BestOfN
from trellis.search.entropy import EntropyGate
from trellis.search.greedy import Greedy
from trellis.search.mcts import MCTS
from trellis.search.tree import SearchResult, TreeRecorder, TreeSearch, path_tree
from trellis.speculate.base import Drafter, Speculative
from trellis.speculate.drafters import Composite, PromptLookup, TokenRecycling
from trellis.speculate.verify import GreedyVerifier

__all__ = ["ROLLOUTS", "SEARCHES", "SPECULATIVE_ROLLOUT", "Rewarded", "TestGuided", "lookup_and_recycling_rollout",
           "prompt_lookup_rollout"]

SearchName = Literal["mcts", "best-of-n", "entropy-gate", "greedy"]
SEARCHES: tuple[str, ...] = ("mcts", "best-of-n", "entropy-gate", "greedy")
RolloutName = Literal["greedy", "speculative"]
ROLLOUTS: tuple[str, ...] = ("greedy", "speculative")


def prompt_lookup_rollout(vocab_size: int) -> Drafter:
    """Prompt lookup: continuations of earlier occurrences of the last tokens in prompt + rollout."""
    return PromptLookup()


def lookup_and_recycling_rollout(vocab_size: int) -> Drafter:
    """Prompt lookup merged with token recycling (its successor table learns from every
    verification of the search, so later rollouts, which rewrite much of earlier ones, draft
    deeper)."""
    return Composite([PromptLookup(), TokenRecycling(vocab_size)])


# The drafter of rollout="speculative" (benchmarks/bench_codesearch.py --throughput compares them)
SPECULATIVE_ROLLOUT: Callable[[int], Drafter] = prompt_lookup_rollout


class _SearchStopped(Exception):
    """Raised by the test reward inside an iterative search (MCTS) to end it: a program passed every
    visible test (``early_exit``), or the budget is spent. ``TestGuided`` catches it and returns the
    programs rewarded so far; it never escapes to the caller."""


class _Progress:
    """The progress bar of one search (tqdm on stderr, shown only once the search has run ``DELAY``
    seconds, removed when it ends): programs run, best visible pass count, tokens spent."""

    DELAY = 1.0
    REFRESH = 0.5  # seconds between redraws that only the token count asks for

    def __init__(self, enabled: bool, desc: str, tests: int, budget_tokens: int | None) -> None:
        self.bar = tqdm(desc=desc, unit="program", delay=self.DELAY, file=sys.stderr, leave=False,
                        disable=not enabled, dynamic_ncols=True)
        self.tests, self.budget_tokens = tests, budget_tokens
        self.best, self.tokens = 0, 0
        self.t0 = self.last = time.monotonic()

    def _postfix(self) -> str:
        budget = f"/{self.budget_tokens}" if self.budget_tokens is not None else ""
        return f"best {self.best}/{self.tests} visible, {self.tokens}{budget} tokens"

    def program(self, passed: int, tokens: int, *, ran: bool) -> None:
        """A program was rewarded (``ran``: run now, not answered from the report cache)."""
        self.best, self.tokens = max(self.best, passed), tokens
        self.bar.set_postfix_str(self._postfix(), refresh=False)
        self.bar.update(1 if ran else 0)

    def forward(self, tokens: int) -> None:
        """A long rollout runs no program for a while: keep the token count moving (tqdm's own
        ``delay`` only applies to ``update``, so it is honoured here by hand)."""
        self.tokens = tokens
        now = time.monotonic()
        if now - self.t0 >= self.DELAY and now - self.last >= self.REFRESH:
            self.last = now
            self.bar.set_postfix_str(self._postfix(), refresh=True)

    def close(self) -> None:
        self.bar.close()


@dataclass(frozen=True)
class TestGuided:
    """A strategy that searches for a program passing ``tests`` (the *visible* tests): the reward
    of a finished program is the fraction of them it passes (PG-TD). Usable as
    ``generate(model, prompt, strategy=TestGuided(tests, ...))``; hypotheses come back sorted by
    reward (ties in the inner strategy's order), each ending where its function ends (a closing EOS
    stands for the start of the next top-level statement: see ``code_lm``), so its text
    is the completion the tests ran, up to trailing blank lines.

    ``tests``: a ``TestSuite`` (test code or a list of asserts is parsed). ``strategy``: "mcts"
    (PG-TD; greedy rollouts, ``k`` children per expansion, at most ``max_rollouts``), "best-of-n"
    (``n`` samples ranked by reward; needs temperature > 0), "entropy-gate" (AdaDec with
    ``threshold`` nats; one program), "greedy", or a ``Strategy`` — an ``MCTS`` gets the test
    reward as its ``reward``, a ``BestOfN`` as its ``scorer``, anything else is reranked.
    ``prompt``: the program text before the completion (default: the root's decoded tokens).
    ``entry_point`` overrides the suite's. ``prune_top``: how many viable tokens each row must keep
    (0: no token masking; a prefix that is dead still ends its hypothesis); ``max_checks``: at most
    this many tokens are checked per row. ``timeout``, ``memory_mb``: per program run.
    ``reports`` caches the test report of every program text across calls (shared, not compared).

    ``early_exit``: an MCTS search stops at the first program that passes every visible test (the
    held-out tests, if any, judge it afterwards). Best-of-N draws its ``n`` samples together and
    greedy / entropy-gate write one program, so only MCTS has anything left to skip.

    Budgets: ``budget_tokens`` forward tokens (the LM's ``stats.tokens_forwarded``, else prefixes
    sent to it) and ``budget_seconds`` of wall time bound the whole search. Both are checked before
    every forward: a forward that would not fit is not started, rows force EOS instead, every
    strategy winds down and an MCTS search ends. Without LM counters the token budget is never
    exceeded. With them (``HFLanguageModel``) a forward starts only if one token per prefix still
    fits, so the only possible overshoot is what a KV-cache miss in that last forward re-reads: at
    most its prefixes' length (prompt + ``max_new_tokens`` per prefix; one prefix for MCTS and
    greedy, ``n`` for best-of-N). The time budget can be overshot by one forward plus one program
    run (``timeout``).

    ``rollout`` (MCTS): "greedy" rollouts, advanced ``lockstep`` at a time (``MCTS.lockstep``: the
    rollouts the search will likely ask for next share each forward), or "speculative": each
    rollout drafted (``SPECULATIVE_ROLLOUT``) and verified greedily, several tokens per forward
    (``Speculative``), or speculative rollouts drafted by the given ``Drafter`` (one instance for
    every search: a learning drafter keeps learning). All return the programs greedy rollouts
    return, in the same tree.

    ``progress``: a tqdm bar on stderr (from 1 s on; removed at the end) with the programs run, the
    best visible pass count and the tokens spent.
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
    early_exit: bool = True
    rollout: RolloutName | Drafter = "greedy"
    lockstep: int = 1
    progress: bool = field(default=True, compare=False)
    generator: torch.Generator | None = field(default=None, compare=False)
    reports: dict[str, TestReport] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.tests, TestSuite):
            object.__setattr__(self, "tests", parse_tests(self.tests, entry_point=self.entry_point))
        if self.entry_point is not None and self.tests.entry_point != self.entry_point:
            object.__setattr__(self, "tests", replace(self.tests, entry_point=self.entry_point))
        if isinstance(self.strategy, str) and self.strategy not in SEARCHES:
            raise UsageError(f"unknown strategy {self.strategy!r}; one of {', '.join(SEARCHES)} or a Strategy")
        if isinstance(self.rollout, str) and self.rollout not in ROLLOUTS:
            raise UsageError(f"unknown rollout {self.rollout!r}; one of {', '.join(ROLLOUTS)} or a Drafter")
        if not isinstance(self.rollout, (str, Drafter)):
            raise TypeError(f"rollout must be one of {', '.join(ROLLOUTS)} or a Drafter, got {type(self.rollout).__name__}")
        if self.budget_tokens is not None and self.budget_tokens < 0:
            raise UsageError(f"budget_tokens must be >= 0, got {self.budget_tokens}")

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
            raise UsageError("TestGuided needs the model's vocabulary to read programs")
        return decoder.vocab.decode(root.tokens[:root.prompt_len]).decode("utf-8", errors="replace")

    def _rollout_drafter(self, vocab_size: int) -> Drafter | None:
        """The drafter of speculative MCTS rollouts (None: greedy rollouts). A new one per search:
        token recycling learns the model's successors from the search's own verifications."""
        if isinstance(self.rollout, str):
            return None if self.rollout == "greedy" else SPECULATIVE_ROLLOUT(vocab_size)
        return self.rollout

    def _inner(self, reward: Callable[[Hypothesis], float], vocab_size: int) -> Strategy:
        s = self.strategy
        if s == "mcts":
            drafter = self._rollout_drafter(vocab_size)
            if drafter is not None:
                # greedy verification whatever the decoder's temperature: the rollout stays the
                # argmax path, so the sequence cache stays exact
                spec = Speculative(drafter, verifier=GreedyVerifier())
                return MCTS(reward=reward, k=self.k, max_rollouts=self.max_rollouts, budget_tokens=self.budget_tokens,
                            max_seconds=self.budget_seconds, rollout=spec, sequence_cache=True)
            return MCTS(reward=reward, k=self.k, max_rollouts=self.max_rollouts, budget_tokens=self.budget_tokens,
                        max_seconds=self.budget_seconds, lockstep=self.lockstep)
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

    @staticmethod
    def _close(dec: Decoder, code_lm: CodeLM, root: Hypothesis, hyp: Hypothesis) -> Hypothesis:
        """``hyp`` cut before the token that ran past the end of its function, closed with EOS.

        Only a token that carries body text *and* the start of the next statement (``"1\\ndef"``;
        no tokenizer in common use has one) can get there: ``CodeLM`` folds the others into EOS.
        The text such a token carried before the end is dropped with it, and the reward is taken
        on the cut program, so what is returned is what was tested. Its log-prob stays in
        ``logprob`` as that of the closing EOS (the model's choice to end the function there)."""
        new = hyp.new_tokens
        if scan_function(code_lm.prompt, code_lm.completion(hyp.tokens)).end is None:
            return hyp  # one pass over the text; the token-by-token search below is for the rare cut
        cut = next((i for i in range(1, len(new) + 1) if code_lm.state(root.tokens + new[:i])[0] == "ended"), None)
        if cut is None:
            return hyp
        kept = new[:cut - 1]
        state = root.state
        if dec.constrained:  # replay the constraint: the state after the kept tokens, not after the cut one
            for t in kept:
                state = dec.constraint.advance(state, t)
            if not dec.constraint.is_accepting(state):
                return Hypothesis(root.tokens + kept, hyp.prompt_len, state, hyp.logprob, False)
        return Hypothesis(root.tokens + kept + (code_lm.eos,), hyp.prompt_len, state, hyp.logprob, True)

    # ------------------------------------------------------------------ the strategy
    def search_code(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int,
                    recorder: TreeRecorder | None = None) -> tuple[SearchResult, CodeLM, list[Rewarded]]:
        """``search`` plus the LM proxy (its ``spent()`` tokens, ``ended`` and ``dead`` prefixes) and
        every reward the inner search asked for, in order (``Rewarded``)."""
        if decoder.vocab is None or not decoder.vocab.eos:
            raise UsageError("TestGuided needs a vocabulary with an EOS token")
        if self.strategy == "best-of-n" and decoder.temperature == 0:
            raise UsageError("best-of-n samples: it needs temperature > 0 (e.g. generate(..., temperature=0.8))")
        prompt = self._prompt(decoder, root)
        name = self.strategy if isinstance(self.strategy, str) else type(self.strategy).__name__
        code_lm = CodeLM(decoder.lm, decoder.vocab, prompt, len(root.tokens), prune_top=self.prune_top,
                          max_checks=self.max_checks, budget_tokens=self.budget_tokens,
                          budget_seconds=self.budget_seconds, on_forward=lambda: bar.forward(code_lm.spent()))
        dec = replace(decoder, lm=code_lm)
        rewarded: dict[tuple[int, ...], tuple[float, Hypothesis]] = {}  # closed hypothesis -> (reward, it)
        asked: list[Rewarded] = []
        t_start = time.monotonic()

        def score(h: Hypothesis) -> tuple[float, Hypothesis]:
            closed = self._close(dec, code_lm, root, h)
            got = rewarded.get(closed.tokens)
            if got is None:
                program = self.program(dec, closed, prompt)
                ran = program not in self.reports  # else a report from an earlier search (``reports`` is shared)
                rep = self.report(program)
                bar.program(rep.passed, code_lm.spent(), ran=ran)
                got = rewarded[closed.tokens] = (rep.fraction, closed)
            return got

        stoppable = False

        def reward(h: Hypothesis) -> float:
            r, closed = score(h)
            asked.append(Rewarded(self.program(dec, closed, prompt), r, code_lm.spent(),
                                  time.monotonic() - t_start, closed.logprob, closed.num_new))
            if stoppable and ((self.early_exit and r == 1.0) or code_lm.over_budget()):
                raise _SearchStopped  # MCTS has no stop hook: it would iterate on to max_rollouts
            return r

        inner = self._inner(reward, decoder.lm.vocab_size)
        stoppable = isinstance(inner, MCTS)  # the only search that rewards while it has budget left to spend
        rec = recorder if recorder is not None else TreeRecorder(dec, root)
        searching = isinstance(inner, TreeSearch)
        bar = _Progress(self.progress, f"solve ({name})", len(self.tests), self.budget_tokens)
        try:
            try:
                if searching:
                    res = inner.search(dec, root, max_new_tokens=max_new_tokens, recorder=rec)
                    hyps, tree = list(res.hypotheses), res.tree
                else:
                    hyps, tree = inner(dec, root, max_new_tokens=max_new_tokens), nx.DiGraph()
            except _SearchStopped:
                # what MCTS would have returned: every program rewarded so far, best first
                hyps = [h for _, h in sorted(rewarded.values(), key=lambda x: (-x[0], -x[1].logprob))]
                tree = rec.graph
            stoppable = False
            closed = [score(h)[1] for h in hyps]  # duplicates stay: best-of-N returns all n samples
            rewards = [score(h)[0] for h in closed]
        finally:
            bar.close()
        order = sorted(range(len(closed)), key=lambda i: -rewards[i])  # stable: ties keep the inner order
        ranked, scores = [closed[i] for i in order], [rewards[i] for i in order]
        if rec.enabled:
            if not searching:
                tree = path_tree(dec, root, ranked)
            elif tree is rec.graph:  # re-mark the ranks: hypotheses may have been cut, or the search stopped
                for node in tree.nodes:
                    tree.nodes[node].pop("returned", None)
                rec.result(ranked, scores)
            _annotate(tree, code_lm, {h.tokens[len(root.tokens):]: r for h, r in zip(ranked, scores)})
        return SearchResult(tuple(ranked), tuple(scores), tree), code_lm, asked

    def search(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int,
               recorder: TreeRecorder | None = None) -> SearchResult:
        """Hypotheses best first with their rewards, and the explored tree (syntax-pruned tokens are
        ``pruned`` nodes with a ``syntax_error``; returned programs carry their ``reward``; an EOS
        that ended the function is a ``function_end`` node)."""
        return self.search_code(decoder, root, max_new_tokens=max_new_tokens, recorder=recorder)[0]

    def __call__(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int) -> list[Hypothesis]:
        res = self.search(decoder, root, max_new_tokens=max_new_tokens, recorder=TreeRecorder.off(decoder, root))
        return list(res.hypotheses)


def _annotate(tree: nx.DiGraph, code_lm: CodeLM, rewards: dict[tuple[int, ...], float]) -> None:
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
class Rewarded:
    """One reward a search asked for: the program, its visible-test reward, the forward tokens and
    seconds the search had spent when it asked, the hypothesis' log-prob and its length."""

    program: str
    reward: float
    tokens: int
    seconds: float
    logprob: float
    new_tokens: int = 0  # the hypothesis' generated tokens (a closing EOS included)
