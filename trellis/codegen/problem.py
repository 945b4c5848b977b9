"""Test-guided code generation, the problem stage: ``solve`` takes a model, a prompt and its tests,
splits the tests into visible ones (the reward of a ``TestGuided`` search, ``guided.py``) and
held-out ones (the judge), runs the search and returns a ``Solution``; ``entry_point_of`` and
``visible_and_held_out`` build the suites.
"""

from __future__ import annotations

import ast
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import networkx as nx
import torch

from trellis.codegen.guided import Rewarded, RolloutName, SearchName, TestGuided
from trellis.codegen.sandbox import TestReport, run_tests
from trellis.codegen.suite import TestSuite, parse_tests, split_tests
from trellis.decoder import Decoder
from trellis.errors import UsageError
from trellis.search.base import Strategy
from trellis.speculate.base import Drafter

__all__ = ["Solution", "entry_point_of", "solve", "visible_and_held_out"]

@dataclass(frozen=True)
class Solution:
    """What ``solve`` found. ``program``: the best program (prompt + completion, cut at the end of
    the function); ``visible``: its report on the visible tests (the reward); ``held_out``: on the
    held-out tests (``None`` when there were none); ``tokens``: forward tokens spent (the LM's
    ``stats.tokens_forwarded`` delta, else prefixes evaluated; how far it can exceed ``budget_tokens``:
    ``TestGuided``); ``programs``: distinct programs run;
    ``pruned``: token choices cut by syntax pruning; ``tree``: the explored search tree;
    ``rewarded``: every reward the search asked for, in order (MCTS: one per distinct rollout, as
    it finished; best-of-N: one per sample, in drawing order; greedy and EntropyGate ask none), so
    a caller can read what a smaller budget would have returned."""

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
    rewarded: tuple[Rewarded, ...] = field(default=(), repr=False)

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


def visible_and_held_out(prompt: str, tests: str | Sequence[str] | TestSuite, *, entry_point: str | None = None,
                         held_out: str | Sequence[str] | TestSuite | None = None, visible_fraction: float = 0.5,
                         seed: int = 0) -> tuple[TestSuite, TestSuite]:
    """``solve``'s suites: the visible tests (the reward) and the held-out ones (the judge), both
    aimed at ``entry_point`` (default: the last function ``prompt`` defines); without
    ``held_out``, ``tests`` are split (``split_tests``)."""
    entry = entry_point if entry_point is not None else entry_point_of(prompt)
    suite = tests if isinstance(tests, TestSuite) else parse_tests(tests, entry_point=entry)
    if entry is not None:
        suite = replace(suite, entry_point=entry)
    if held_out is None:
        return split_tests(suite, visible_fraction=visible_fraction, seed=seed)
    hidden = held_out if isinstance(held_out, TestSuite) else parse_tests(held_out, entry_point=entry)
    return suite, replace(hidden, entry_point=entry) if entry is not None else hidden


def solve(model: Any, prompt: str | Sequence[int], tests: str | Sequence[str] | TestSuite, *,
          strategy: SearchName | Strategy = "mcts", entry_point: str | None = None,
          held_out: str | Sequence[str] | TestSuite | None = None, visible_fraction: float = 0.5,
          budget_tokens: int | None = None, budget_seconds: float | None = None, max_new_tokens: int = 256,
          temperature: float = 1.0, n: int = 8, k: int = 3, threshold: float = 1.0, seed: int = 0,
          timeout: float = 5.0, prune_top: int = 8, early_exit: bool = True, rollout: RolloutName | Drafter = "greedy",
          lockstep: int = 1, progress: bool = True) -> Solution:
    """Generate a program for ``prompt`` (a function header + docstring, or token ids for a model
    without a tokenizer) guided by ``tests``.

    Unless ``held_out`` tests are given, ``tests`` are split (``split_tests``, ``visible_fraction``,
    ``seed``) into visible tests — the search's reward — and held-out tests, which only judge the
    final program. ``entry_point`` defaults to the last function the prompt defines. ``strategy``:
    see ``TestGuided``; ``temperature`` shapes the distribution the searches sample / expand from
    (greedy and MCTS rollouts take its argmax, which temperature does not move). ``seed`` seeds the
    split and best-of-N's sampling. ``budget_tokens`` / ``budget_seconds`` (how far they can be
    overshot), ``early_exit`` (MCTS stops at the first program passing every visible test),
    ``rollout`` and ``lockstep`` (how MCTS computes its rollouts) and ``progress`` (a tqdm bar on
    stderr after 1 s: programs run, best visible pass count, tokens): see ``TestGuided``.
    """
    from trellis.generate import language_model
    from trellis.models import load

    t0 = time.monotonic()
    handle = load(model)
    vocab = handle.vocab
    if vocab is None:
        raise UsageError("solve needs the model's vocabulary (a ModelHandle with vocab)")
    if isinstance(prompt, str):
        if handle.tokenizer is None:
            raise UsageError("a text prompt needs a tokenizer; pass token ids for tokenizer-less models")
        ids = list(handle.tokenizer(prompt).input_ids)
        text = prompt
    else:
        ids = [int(t) for t in prompt]
        text = vocab.decode(ids).decode("utf-8", errors="replace")
    visible, hidden = visible_and_held_out(text, tests, entry_point=entry_point, held_out=held_out,
                                           visible_fraction=visible_fraction, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    guided = TestGuided(visible, strategy=strategy, prompt=text, n=n, k=k, threshold=threshold,
                        budget_tokens=budget_tokens, budget_seconds=budget_seconds, prune_top=prune_top,
                        timeout=timeout, early_exit=early_exit, rollout=rollout, lockstep=lockstep,
                        progress=progress, generator=gen)
    decoder = Decoder(language_model(handle.model), temperature=temperature, vocab=vocab)
    root = decoder.start(ids)
    res, code_lm, asked = guided.search_code(decoder, root, max_new_tokens=max_new_tokens)
    best = res.hypotheses[0]
    program = guided.program(decoder, best, text)
    report = guided.report(program)
    hidden_report = run_tests(program, hidden, timeout=timeout) if len(hidden) else None
    name = strategy if isinstance(strategy, str) else type(strategy).__name__
    return Solution(program=program, completion=program[len(text):] if program.startswith(text) else program,
                    visible=report, held_out=hidden_report, tokens=code_lm.spent(),
                    seconds=time.monotonic() - t0, programs=len(guided.reports), pruned=len(code_lm.dead),
                    strategy=name, tree=res.tree, rewarded=tuple(asked))
