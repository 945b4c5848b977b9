"""Speculative decoding: draft a token tree, verify it with ONE target forward, keep what the target
would have produced anyway.

``Speculative`` is a ``Strategy``, so it is also the rollout policy of search strategies. The target
distribution at every tree node is the Decoder's masked, warped one (bonus and residual tokens
included); the constraint state advances only along accepted tokens (states are immutable, so
rejected nodes leave no trace), and drafted nodes the grammar forbids are pruned before the forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor

from trellis.decoder import Decoder, Hypothesis
from trellis.lm_proxy import Committing
from trellis.sampling import log_softmax
from trellis.search.base import run_steps
from trellis.speculate.node_budget import DraftBudget
from trellis.tokens import TokenTree


@dataclass(frozen=True)
class Draft:
    """A drafted token tree. ``probs`` [N+1, V]: row 0 is the distribution the root's children were
    drawn from, row i+1 the one node i's children were drawn from; ``None`` = deterministic
    proposals. ``sources`` names the drafter of each node (for acceptance statistics)."""

    tree: TokenTree
    probs: Tensor | None = None
    sources: tuple[str, ...] | None = None

    @classmethod
    def empty(cls) -> "Draft":
        return cls(TokenTree(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)))

    def __len__(self) -> int:
        return len(self.tree)


@runtime_checkable
class Drafter(Protocol):
    """Proposes continuations of ``hyp``: at most ``max_nodes`` nodes, paths at most ``max_depth`` long."""

    def draft(self, decoder: Decoder, hyp: Hypothesis, *, max_nodes: int, max_depth: int) -> Draft: ...


@runtime_checkable
class NamedDrafter(Drafter, Protocol):
    """A drafter that names itself in ``Draft.sources`` (acceptance statistics per drafter)."""

    name: str


def drafter_name(drafter: Drafter) -> str:
    """``drafter.name`` for a ``NamedDrafter``, else its class name."""
    return drafter.name if isinstance(drafter, NamedDrafter) else type(drafter).__name__


@runtime_checkable
class LearningDrafter(Drafter, Protocol):
    """A drafter that learns from every verification (e.g. token recycling's successor matrix)."""

    def observe(self, hyp: Hypothesis, draft: Draft, target: Tensor, path: Sequence[int]) -> None:
        """``target`` [N+1, V] are the target's log-probabilities at every node of ``draft`` after ``hyp``
        (masked and warped: the distribution the verifier used)."""
        ...


class Verifier(Protocol):
    def __call__(self, target: Tensor, draft: Draft, generator: torch.Generator | None) -> tuple[list[int], int]: ...


def prune(decoder: Decoder, hyp: Hypothesis, draft: Draft) -> Draft:
    """Drop drafted nodes the constraint forbids, and EOS nodes, with their descendants, before
    verification (EOS then comes as the verifier's next token, where it is exact)."""
    if not decoder.constrained or len(draft) == 0:
        return draft
    toks, pars = draft.tree.tokens.tolist(), draft.tree.parents.tolist()
    states: list[object | None] = []
    for t, p in zip(toks, pars):
        parent_state = hyp.state if p < 0 else states[p]
        ok = parent_state is not None and t not in decoder.eos
        states.append(decoder.constraint.advance(parent_state, t) if ok else None)
    keep = [i for i, s in enumerate(states) if s is not None]
    if len(keep) == len(toks):
        return draft
    new_index = {old: new for new, old in enumerate(keep)}
    tree = TokenTree(torch.tensor([toks[i] for i in keep], dtype=torch.long),
                     torch.tensor([-1 if pars[i] < 0 else new_index[pars[i]] for i in keep], dtype=torch.long))
    probs = None
    if draft.probs is not None and all(p == i - 1 for i, p in enumerate(pars)):
        # Cutting a sampled chain short is exact (its tail was never tested). Dropping one of
        # several sampled siblings is not, so such trees fall back to deterministic verification.
        probs = draft.probs[torch.tensor([0] + [i + 1 for i in keep])]
    sources = tuple(draft.sources[i] for i in keep) if draft.sources is not None else None
    return Draft(tree, probs, sources)


@dataclass
class SpecStats:
    """Per-run counters: rounds, drafted and accepted tokens (per drafter), tokens emitted."""

    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    emitted: int = 0
    drafted_by: dict[str, int] = field(default_factory=dict)
    accepted_by: dict[str, int] = field(default_factory=dict)

    @property
    def mean_accepted(self) -> float:
        """Accepted draft tokens per round (the bonus token not counted)."""
        return self.accepted / self.rounds if self.rounds else 0.0

    @property
    def tokens_per_round(self) -> float:
        return self.emitted / self.rounds if self.rounds else 0.0

    def acceptance_by_drafter(self) -> dict[str, float]:
        return {k: self.accepted_by.get(k, 0) / v for k, v in self.drafted_by.items() if v}

    def record(self, draft: Draft, path: Sequence[int], emitted: int) -> None:
        self.rounds += 1
        self.drafted += len(draft)
        self.accepted += len(path)
        self.emitted += emitted
        if draft.sources is not None:
            for s in draft.sources:
                self.drafted_by[s] = self.drafted_by.get(s, 0) + 1
            for i in path:
                self.accepted_by[draft.sources[i]] = self.accepted_by.get(draft.sources[i], 0) + 1


# A seeded run's fixed node budget: the middle arm of DraftBudget's default arms (0, 2, 6, 15).
SEEDED_NODES = 6


@dataclass(frozen=True)
class Speculative:
    """Draft with ``drafter``, verify the whole tree in one target forward, repeat.

    ``verifier=None`` picks ``GreedyVerifier`` when ``decoder.temperature == 0`` and
    ``TreeRejectionSampler`` otherwise: outputs equal greedy decoding token for token, and sampled
    outputs follow the masked, warped target distribution exactly. ``max_nodes`` caps the tree.

    ``budget`` picks each round's node count (and depth). By default (``None``) that is
    ``DraftBudget()``, which learns it from measured throughput, unless a ``generator`` is given:
    then a fixed ``SEEDED_NODES`` per round. A round's node count decides how many random draws it
    makes, so a budget that follows the wall clock would give one seed different outputs from run
    to run (``generate(seed=...)``, ``trellis generate --speculate --seed``). ``draft_budget`` is
    the one in use. ``stats`` accumulates over calls (read it, or pass a fresh one).
    """

    drafter: Drafter
    verifier: Verifier | None = None
    # 16 rows: with the tuned CPU GEMMs (trellis.kernels) 16 tokens verify for ~1.6x (Intel) to
    # ~2.3x (AMD EPYC) one decode step on 2 cores (bench_forward (b), Gemma 3 270M); the budget
    # decides how much of it to use.
    max_nodes: int = 15
    generator: torch.Generator | None = field(default=None, compare=False)
    budget: DraftBudget | None = field(default=None, compare=False)
    stats: SpecStats = field(default_factory=SpecStats, compare=False)
    _budget: DraftBudget = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Resolved here, not in a default_factory: dataclasses.replace(spec, generator=g) (what
        # generate(seed=...) does) passes budget=None again and so gets the seeded default.
        b = self.budget
        if b is None:
            b = DraftBudget(arms=(min(SEEDED_NODES, self.max_nodes),)) if self.generator is not None \
                else DraftBudget()
        object.__setattr__(self, "_budget", b)

    @property
    def draft_budget(self) -> DraftBudget:
        """The node budget in use (``budget``, or the default it resolved to)."""
        return self._budget

    def _verifier(self, decoder: Decoder) -> Verifier:
        if self.verifier is not None:
            return self.verifier
        from trellis.speculate.verify import GreedyVerifier, TreeRejectionSampler

        return GreedyVerifier() if decoder.temperature == 0 else TreeRejectionSampler()

    def steps(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int) -> Iterator[Hypothesis]:
        verify = self._verifier(decoder)
        greedy = decoder.temperature == 0
        hyp = root
        while not hyp.finished and hyp.num_new - root.num_new < max_new_tokens:
            remaining = max_new_tokens - (hyp.num_new - root.num_new)
            nodes = self._budget.choose(min(self.max_nodes, remaining - 1))
            draft = self.drafter.draft(decoder, hyp, max_nodes=nodes, max_depth=nodes) if nodes > 0 \
                else Draft.empty()
            draft = prune(decoder, hyp, draft)
            scores, _ = decoder.tree_scores(hyp, draft.tree)  # [N+1, V], one forward
            logp = log_softmax(scores)  # [N+1, V]
            target = scores if greedy else logp
            if not torch.isfinite(target[0]).any():
                return  # the constraint allows nothing here
            path, nxt = verify(target, draft, self.generator)
            if isinstance(decoder.lm, Committing):
                decoder.lm.commit(path)
            if isinstance(self.drafter, LearningDrafter):
                self.drafter.observe(hyp, draft, logp, path)
            toks = draft.tree.tokens.tolist()
            rows = [0] + [i + 1 for i in path]
            emitted = 0
            for tok, row in zip([toks[i] for i in path] + [nxt], rows):
                if hyp.finished or hyp.num_new - root.num_new >= max_new_tokens:
                    break
                hyp = decoder.extend(hyp, tok, float(logp[row, tok]))
                emitted += 1
            self.stats.record(draft, path, emitted)
            self._budget.update(emitted)
            yield hyp

    def __call__(self, decoder: Decoder, root: Hypothesis, *, max_new_tokens: int) -> list[Hypothesis]:
        return run_steps(self, decoder, root, max_new_tokens)
