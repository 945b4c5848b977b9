"""The Constraint protocol and helpers that work for every constraint.

States are immutable, hashable values: forking a hypothesis keeps a reference, and a rejected
token (``advance`` returning ``None``) leaves no trace.
"""

from __future__ import annotations

from typing import Any, Hashable, Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor

from trellis.mask import allocate_bitmask
from trellis.tokens import TokenTree, Vocabulary

State = Hashable


@runtime_checkable
class Constraint(Protocol):
    """Maps a state to the set of allowed next tokens; ``None`` from ``advance`` = not allowed."""

    vocab: Vocabulary

    def start(self) -> State: ...

    def advance(self, state: State, token: int) -> State | None: ...

    def fill_mask(self, state: State, out: Tensor) -> None:
        """Write one int32 bitmask row [ceil(V/32)] for ``state`` into ``out`` (in place)."""
        ...

    def is_accepting(self, state: State) -> bool:
        """True when the text so far is a complete sentence (EOS allowed)."""
        ...


class Unconstrained:
    """Every token allowed, always; its single state is ``0``."""

    def __init__(self, vocab: Vocabulary | None = None) -> None:
        self.vocab = vocab  # type: ignore[assignment]

    def start(self) -> State:
        return 0

    def advance(self, state: State, token: int) -> State | None:
        return 0

    def fill_mask(self, state: State, out: Tensor) -> None:
        out.fill_(-1)

    def is_accepting(self, state: State) -> bool:
        return True

    def __repr__(self) -> str:
        return "Unconstrained()"


def is_unconstrained(constraint: Any) -> bool:
    return isinstance(constraint, Unconstrained)


def advance_many(constraint: Constraint, state: State, tokens: Sequence[int]) -> State | None:
    """Advance through ``tokens``; ``None`` as soon as one is not allowed."""
    for t in tokens:
        nxt = constraint.advance(state, int(t))
        if nxt is None:
            return None
        state = nxt
    return state


def fill_masks(constraint: Constraint, states: Sequence[State], vocab_size: int) -> Tensor:
    """[len(states), ceil(V/32)] int32 bitmask, one row per state."""
    out = allocate_bitmask(len(states), vocab_size)
    for i, s in enumerate(states):
        constraint.fill_mask(s, out[i])
    return out


def tree_masks(constraint: Constraint, root: State, tree: TokenTree, vocab_size: int
               ) -> tuple[Tensor, list[State | None]]:
    """Mask rows for a draft tree: row 0 for ``root``, row ``i+1`` for the state after node ``i``.

    Returns (bitmask [N+1, W] int32, states [N+1]); a node whose token the grammar forbids gets
    state ``None`` and an all-zero row, and so do its descendants (pruned before verification).
    """
    n = len(tree)
    states: list[State | None] = [root] + [None] * n
    toks, pars = tree.tokens.tolist(), tree.parents.tolist()
    for i in range(n):
        parent_state = states[pars[i] + 1]
        states[i + 1] = None if parent_state is None else constraint.advance(parent_state, toks[i])
    out = allocate_bitmask(n + 1, vocab_size)
    for i, s in enumerate(states):
        if s is None:
            out[i].zero_()
        else:
            constraint.fill_mask(s, out[i])
    return out, states


def forced_tokens(constraint: Any, state: State) -> list[int]:
    """Tokens of the continuation the grammar forces from ``state`` (jump-forward), or ``[]``.

    Uses ``constraint.forced_tokens(state)`` when the constraint has it: a canonical (greedy
    longest-token) tokenisation of the forced bytes, each token allowed step by step. These are
    proposals for a drafter to have verified by the model, never insertions.
    """
    fn = getattr(constraint, "forced_tokens", None)
    return list(fn(state)) if fn is not None else []


def refine_scores(constraint: Any, states: Sequence[State | None], scores: Tensor) -> Tensor:
    """``constraint.refine(states, scores)`` for a constraint that also steers by the masked scores
    (``Budgeted``), else ``scores`` unchanged. ``states[i]`` is row i's state (``None``: pruned)."""
    fn = getattr(constraint, "refine", None)
    return fn(states, scores) if fn is not None else scores
