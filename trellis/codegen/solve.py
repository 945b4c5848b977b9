"""Test-guided code generation: search the LM's token tree for a program that passes the visible
tests, as in Planning-Guided Transformer Decoding (PG-TD; Zhang et al. 2023, "Planning with Large
Language Models for Code Generation"): the reward of a complete program is the fraction of the
visible tests it passes; a held-out half of the tests judges the result.

``TestGuided`` wraps a search (MCTS by default; also best-of-N, EntropyGate, greedy, or any
``Strategy``) and gives it three things through a proxy of the language model (``_CodeLM``, one per
search; strategies still see only a ``Decoder``):

- *function end*: where the text is at the start of a line (or at the end of one), the tokens that
  would start a logical line at column 0 (``def``, ``if __name__``, a stray fence ...; see
  ``syntax.scan_function``) are removed and their probability is added to EOS, which thus means
  "the function ends here". Every strategy finishes the program there instead of generating junk
  up to the budget, and no token of the next statement enters a hypothesis: its text is the
  completion the tests run (issue 22: ``generate`` returned text ending in ``"\\n\\ndef"`` when
  the end was only noticed after such a token, and each way of starting the next statement was a
  separate search branch of one and the same program);
- *syntax pruning*: of each next-token row, the most likely tokens are checked in order until
  ``prune_top`` viable ones are found and those that make the program prefix unparseable for good
  (``syntax.check_prefix``) are set to -inf; a prefix that still ends up dead gets an all -inf row,
  which stops every strategy on it (reward 0). Checking only the tokens a search can pick keeps
  this cheap on a 262k vocabulary, where a full ``Constraint`` mask would not be;
- *budgets*: a forward that would not fit in ``budget_tokens`` forward tokens or ``budget_seconds``
  is not started: its rows force EOS, so any strategy winds down (how far a budget can be
  overshot: ``TestGuided``).

The reward runs programs in ``sandbox.run_tests`` and caches the report per program text. An MCTS
search ends at the first program that passes every visible test (``early_exit``) or when the
budget is spent, by an exception raised from the reward (MCTS itself has no stop hook).
"""

from __future__ import annotations

import ast
import contextlib
import re
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Literal, Sequence

import networkx as nx
import torch
from torch import Tensor
from tqdm import tqdm

from trellis.codegen.sandbox import TestReport, run_tests
from trellis.codegen.suite import TestSuite, parse_tests, split_tests
from trellis.codegen.syntax import LinePosition, check_prefix, extract_program, scan_function
from trellis.decoder import Decoder, Hypothesis
from trellis.lm import LanguageModel
from trellis.lm_proxy import LMProxy
from trellis.search.base import Strategy
from trellis.search.best_of_n import BestOfN
from trellis.search.entropy import EntropyGate
from trellis.search.greedy import Greedy
from trellis.search.mcts import MCTS
from trellis.search.tree import SearchResult, TreeRecorder, path_tree
from trellis.speculate.base import Drafter, Speculative
from trellis.speculate.drafters import Composite, PromptLookup, TokenRecycling
from trellis.speculate.verify import GreedyVerifier
from trellis.tokens import TokenTree, Vocabulary

__all__ = ["SEARCHES", "Rewarded", "Solution", "TestGuided", "solve"]

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
_NEG_INF = float("-inf")


# A token that, written where a logical line has just ended, puts a non-blank, non-comment
# character at column 0 (after blank lines, if any): the next top-level statement, i.e. the end of
# the function. And the same after the line break that closes the current line.
_COL0_AT_LINE_START = re.compile(rb"(?:[ \t\f]*\r?\n)*[^ \t\f\r\n#]")
_COL0_AFTER_LINE_END = re.compile(rb"[ \t\f]*\r?\n(?:[ \t\f]*\r?\n)*[^ \t\f\r\n#]")
_END_MASKS: dict[tuple[str, int], tuple[Tensor, Tensor]] = {}


def _end_masks(vocab: Vocabulary, width: int) -> tuple[Tensor, Tensor]:
    """Bool masks [width] of the tokens that end the function (see ``_COL0_*``) at a line start and
    at a line end. One pass over the vocabulary (about 0.1 s for 262k tokens), kept per vocabulary."""
    key = (vocab.fingerprint(), width)
    got = _END_MASKS.get(key)
    if got is None:
        skip = vocab.special | vocab.eos
        toks = [b"" if i in skip else t for i, t in enumerate(vocab.tokens[:width])]
        toks += [b""] * (width - len(toks))  # logits wider than the vocabulary: padding ids
        start = torch.tensor([_COL0_AT_LINE_START.match(t) is not None for t in toks], dtype=torch.bool)
        end = torch.tensor([_COL0_AFTER_LINE_END.match(t) is not None for t in toks], dtype=torch.bool)
        if len(_END_MASKS) >= 4:  # a process rarely sees more than one or two vocabularies
            _END_MASKS.pop(next(iter(_END_MASKS)))
        got = _END_MASKS[key] = (start, end)
    return got


class _SearchStopped(Exception):
    """Raised by the test reward inside an iterative search (MCTS) to end it: a program passed every
    visible test (``early_exit``), or the budget is spent. ``TestGuided`` catches it and returns the
    programs rewarded so far; it never escapes to the caller."""


@dataclass
class _Found:
    """What reading one draft-tree row found: pruned children (path -> syntax error) and ends."""

    dead: dict[tuple[int, ...], str] = field(default_factory=dict)
    ended: set[tuple[int, ...]] = field(default_factory=set)


class _CodeLM(LMProxy):
    """The language-model proxy of one test-guided search (see the module docstring). Counts the
    forward tokens it lets through and remembers which prefixes it ended or pruned.

    Why the function end is folded into EOS rather than detected after the fact: the end is only
    visible once a token has started the next top-level statement (``def``, ``print``, ...). Letting
    that token in and forcing EOS after it leaves the start of the next statement in the hypothesis
    (``generate`` returned text ending in ``"\\n\\ndef"``) and gives each way of starting it a
    separate branch. So on every row where the text is at a line start (or line end), the tokens
    that would start a column-0 line are removed and their probability is added to EOS: EOS then
    means "the function ends here", with the model's probability of that."""

    def __init__(self, lm: LanguageModel, vocab: Vocabulary, prompt: str, base: int, *, prune_top: int,
                 max_checks: int, budget_tokens: int | None, budget_seconds: float | None,
                 on_forward: Callable[[], None] | None = None) -> None:
        super().__init__(lm)
        self.vocab, self.prompt, self.base = vocab, prompt, base
        self.prune_top, self.max_checks = prune_top, max_checks
        self.budget_tokens, self.budget_seconds = budget_tokens, budget_seconds
        self.on_forward = on_forward
        self.eos = min(vocab.eos)
        self.ends_at_start, self.ends_at_line_end = _end_masks(vocab, self.vocab_size)
        self.any_at_start, self.any_at_line_end = bool(self.ends_at_start.any()), bool(self.ends_at_line_end.any())
        self.t0 = time.monotonic()
        self.exhausted = False  # a forward was refused for the budget: the search must wind down
        self._tree_forwarded = False  # the last tree_logits reached the model: commit goes through
        self._state: dict[tuple[int, ...], tuple[str, LinePosition, str | None]] = {}
        self.ended: set[tuple[int, ...]] = set()  # generated-token paths whose last token ended the function
        self.dead: dict[tuple[int, ...], str] = {}  # generated-token path -> syntax error (pruned)
        # Where the two above are written: None = into them. A draft tree's rows write into one
        # _Found each, kept only for the rows its verification accepts (``commit``): a rejected
        # draft row is not a place the search went, so its pruned children and ends are not part
        # of the search tree (and one-at-a-time rollouts would never have recorded them).
        self._sink: _Found | None = None
        self._draft_found: list[_Found | None] = []

    def over_budget(self) -> bool:
        return (self.exhausted or (self.budget_tokens is not None and self.spent() >= self.budget_tokens)
                or (self.budget_seconds is not None and time.monotonic() - self.t0 >= self.budget_seconds))

    def _affordable(self, rows: int) -> bool:
        """May a forward of ``rows`` prefixes start? Each costs at least its one new token (a KV-cache
        hit aside), so a call that cannot fit whole is refused rather than started: without LM
        counters (one prefix = one unit) the budget is never exceeded; with them, only the tokens a
        KV-cache miss re-forwards can overshoot (see ``TestGuided``)."""
        if self.exhausted:
            return False
        if ((self.budget_tokens is not None and self.spent() + rows > self.budget_tokens)
                or (self.budget_seconds is not None and time.monotonic() - self.t0 >= self.budget_seconds)):
            self.exhausted = True
            return False
        return True

    def completion(self, prefix: Sequence[int]) -> str:
        return self.vocab.decode(prefix[self.base:]).decode("utf-8", errors="ignore")

    def _record_dead(self, path: tuple[int, ...], reason: str) -> None:
        (self._sink.dead if self._sink is not None else self.dead).setdefault(path, reason)

    def _record_ended(self, path: tuple[int, ...]) -> None:
        (self._sink.ended if self._sink is not None else self.ended).add(path)

    def state(self, prefix: tuple[int, ...]) -> tuple[str, LinePosition]:
        """("ended" | "dead" | "open", where the text ends) — cached: a prefix's verdict never changes
        (it is recorded in ``ended``/``dead`` on every call: into the current draft row's record
        when a tree is being read). The prompt itself is always open."""
        got = self._state.get(prefix)
        path = prefix[self.base:]
        if got is None:
            text = self.completion(prefix)
            found = scan_function(self.prompt, text)
            reason = None
            if not path:
                kind = "open"
            elif found.end is not None:
                # only a token that carries body text and the next statement's start together gets
                # here (the fold below removes the pure ones); ``TestGuided._close`` cuts it off
                kind = "ended"
            else:
                check = check_prefix(self.prompt + text)
                kind = "open" if check.viable else "dead"
                reason = None if check.viable else check.reason
            got = self._state[prefix] = (kind, found.position, reason)
        if got[0] == "ended":
            self._record_ended(path)
        elif got[2] is not None:
            self._record_dead(path, got[2])
        return got[0], got[1]

    def _fold_end_(self, row: Tensor, prefix: tuple[int, ...], position: LinePosition) -> Tensor:
        """Move the probability of the tokens that would end the function into EOS, in place (row [V])."""
        if position == "line_start" and self.any_at_start:
            ends = self.ends_at_start
        elif position == "line_end" and self.any_at_line_end:  # never, with Gemma's newline-only tokens
            ends = self.ends_at_line_end
            if not check_prefix(self.prompt + self.completion(prefix) + "\n").viable:
                row[ends] = _NEG_INF  # the line cannot end here: a line break (and what follows) is dead
                return row
        else:
            return row
        mass = torch.logsumexp(row[ends].float(), 0)
        if torch.isfinite(mass):
            row[self.eos] = torch.logaddexp(row[self.eos].float(), mass).to(row.dtype)
            self._record_ended(prefix[self.base:] + (self.eos,))
        row[ends] = _NEG_INF
        return row

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
                    self._record_dead(prefix[self.base:] + (t,), check.reason)
            if viable >= self.prune_top:
                break
        return row

    def _open_row(self, raw: Tensor, prefix: tuple[int, ...], position: LinePosition) -> Tensor:
        return self._prune_(self._fold_end_(raw.clone(), prefix, position), prefix)

    def _forced(self, kind: str, like: Tensor | None) -> Tensor:
        row = torch.full((self.vocab_size,), _NEG_INF, dtype=like.dtype if like is not None else torch.float32)
        if kind != "dead":
            row[self.eos] = 0.0
        return row

    def _kinds(self, keys: Sequence[tuple[int, ...]],
               found: Sequence[_Found | None] = ()) -> list[tuple[str, LinePosition]]:
        """Each prefix's verdict (recorded into ``found[i]`` where given); open ones become "budget"
        (EOS forced) when their forward cannot start (``_affordable``): past the budget every
        strategy winds down, the prompt included."""
        kinds = []
        for i, k in enumerate(keys):
            with self._into(found[i] if i < len(found) else None):
                kinds.append(self.state(k))
        opened = sum(kind == "open" for kind, _ in kinds)
        if opened and not self._affordable(opened):
            kinds = [("budget", pos) if kind == "open" else (kind, pos) for kind, pos in kinds]
        return kinds

    def logits(self, prefixes: Sequence[Sequence[int]]) -> Tensor:
        keys = [tuple(int(t) for t in p) for p in prefixes]
        kinds = self._kinds(keys)
        need = [k for k, (kind, _) in zip(keys, kinds) if kind == "open"]
        self._tree_forwarded = False
        out = super().logits(need) if need else None  # [M, V]
        if need and self.on_forward is not None:
            self.on_forward()
        rows, j = [], 0
        for k, (kind, pos) in zip(keys, kinds):
            if kind == "open":
                assert out is not None
                rows.append(self._open_row(out[j], k, pos))
                j += 1
            else:
                rows.append(self._forced(kind, out))
        return torch.stack(rows)  # [B, V]

    def tree_logits(self, prefix: Sequence[int], tree: TokenTree) -> Tensor:
        toks = tree.tokens.tolist()
        base = tuple(int(t) for t in prefix)
        keys = [base] + [base + tuple(toks[j] for j in tree.path_to(i)) for i in range(len(tree))]
        # row 0 is the prefix the search stands on: recorded now; draft rows only if accepted
        found: list[_Found | None] = [None] + [_Found() for _ in range(len(tree))]
        kinds = self._kinds(keys, found)
        # the budget is judged before the forward (all N+1 rows come from one pass)
        out = super().tree_logits(prefix, tree) if any(kind == "open" for kind, _ in kinds) else None  # [N+1, V]
        self._tree_forwarded = out is not None
        if out is not None:
            if self.on_forward is not None:
                self.on_forward()
        rows = []
        for i, (key, (kind, pos)) in enumerate(zip(keys, kinds)):
            with self._into(found[i]):
                rows.append(self._open_row(out[i], key, pos) if kind == "open" and out is not None
                            else self._forced(kind, out))
        self._draft_found = [None if toks[i] in self.vocab.eos else f for i, f in enumerate(found[1:])]
        return torch.stack(rows)

    def commit(self, path: Sequence[int]) -> None:
        """Keep what the accepted draft rows found (pruned children, ends); forwarded to the model
        only when the last tree reached it (a tree whose rows were all forced by the budget or by
        syntax never did, and there is nothing to keep)."""
        for i in path:
            if not 0 <= int(i) < len(self._draft_found):
                break
            got = self._draft_found[int(i)]
            if got is None:  # the row after an EOS: a finished hypothesis asks for no distribution
                break
            for p, reason in got.dead.items():
                self.dead.setdefault(p, reason)
            self.ended |= got.ended
        self._draft_found = []
        if self._tree_forwarded:
            self._tree_forwarded = False
            super().commit(path)

    @contextlib.contextmanager
    def _into(self, found: _Found | None) -> Iterator[None]:
        saved, self._sink = self._sink, found
        try:
            yield
        finally:
            self._sink = saved


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
    stands for the start of the next top-level statement: see the module docstring), so its text
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
            raise ValueError(f"unknown strategy {self.strategy!r}; one of {', '.join(SEARCHES)} or a Strategy")
        if isinstance(self.rollout, str) and self.rollout not in ROLLOUTS:
            raise ValueError(f"unknown rollout {self.rollout!r}; one of {', '.join(ROLLOUTS)} or a Drafter")
        if not isinstance(self.rollout, (str, Drafter)):
            raise TypeError(f"rollout must be one of {', '.join(ROLLOUTS)} or a Drafter, got {type(self.rollout).__name__}")
        if self.budget_tokens is not None and self.budget_tokens < 0:
            raise ValueError(f"budget_tokens must be >= 0, got {self.budget_tokens}")

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
    def _close(dec: Decoder, code_lm: _CodeLM, root: Hypothesis, hyp: Hypothesis) -> Hypothesis:
        """``hyp`` cut before the token that ran past the end of its function, closed with EOS.

        Only a token that carries body text *and* the start of the next statement (``"1\\ndef"``;
        no tokenizer in common use has one) can get there: ``_CodeLM`` folds the others into EOS.
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
                    recorder: TreeRecorder | None = None) -> tuple[SearchResult, _CodeLM, list[Rewarded]]:
        """``search`` plus the LM proxy (its ``spent()`` tokens, ``ended`` and ``dead`` prefixes) and
        every reward the inner search asked for, in order (``Rewarded``)."""
        if decoder.vocab is None or not decoder.vocab.eos:
            raise ValueError("TestGuided needs a vocabulary with an EOS token")
        if self.strategy == "best-of-n" and decoder.temperature == 0:
            raise ValueError("best-of-n samples: it needs temperature > 0 (e.g. generate(..., temperature=0.8))")
        prompt = self._prompt(decoder, root)
        name = self.strategy if isinstance(self.strategy, str) else type(self.strategy).__name__
        code_lm = _CodeLM(decoder.lm, decoder.vocab, prompt, len(root.tokens), prune_top=self.prune_top,
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
        searching = hasattr(inner, "search")
        bar = _Progress(self.progress, f"solve ({name})", len(self.tests), self.budget_tokens)
        try:
            try:
                if searching:
                    res = inner.search(dec, root, max_new_tokens=max_new_tokens, recorder=rec)  # type: ignore[attr-defined]
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
class Rewarded:
    """One reward a search asked for: the program, its visible-test reward, the forward tokens and
    seconds the search had spent when it asked, the hypothesis' log-prob and its length."""

    program: str
    reward: float
    tokens: int
    seconds: float
    logprob: float
    new_tokens: int = 0  # the hypothesis' generated tokens (a closing EOS included)


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
        raise ValueError("solve needs the model's vocabulary (a ModelHandle with vocab)")
    if isinstance(prompt, str):
        if handle.tokenizer is None:
            raise ValueError("a text prompt needs a tokenizer; pass token ids for tokenizer-less models")
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
