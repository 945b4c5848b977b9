"""The Constraint protocol, its optional capabilities, and helpers that work for every constraint.

States are immutable, hashable values: forking a hypothesis keeps a reference, and a rejected
token (``advance`` returning ``None``) leaves no trace.

A ``Constraint`` only promises ``start``/``advance``/``fill_mask``/``is_accepting``. Optional
capabilities are declared as protocols, so a caller asks ``isinstance(c, ForcesTokens)`` instead of
probing for an attribute, and a wrapper (``Budgeted``, ``EitherConstraint``) states which it offers:

- ``ForcesTokens``: ``forced_tokens(state)``, the tokens of the continuation the grammar forces
  (jump-forward proposals for ``GrammarForced``).
- ``Refines``: ``refine(states, scores)``, a constraint that also steers by the masked scores
  (``Budgeted``).
- ``HintsCompletion``: ``completion_hint(state)``, a lower-is-closer estimate of how far ``state``
  is from acceptance (the budget's completion search uses it as its A* heuristic).
- ``HasByteClasses``: ``byte_classes()``, [256] ints, bytes of one class move every state alike
  (the budget's completion search tries one byte per class).
"""

from __future__ import annotations

from typing import Any, Hashable, Protocol, Sequence, runtime_checkable

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


@runtime_checkable
class ForcesTokens(Protocol):
    def forced_tokens(self, state: State) -> list[int]:
        """A canonical (greedy longest-token) tokenisation of the bytes the grammar forces from
        ``state``, each token allowed step by step; ``[]`` when nothing is forced."""
        ...


@runtime_checkable
class Refines(Protocol):
    def refine(self, states: Sequence[State | None], scores: Tensor) -> Tensor:
        """``scores`` [B, V] (already masked) adjusted for row states ``states`` (``None``: pruned)."""
        ...


@runtime_checkable
class HintsCompletion(Protocol):
    def completion_hint(self, state: State) -> int:
        """How far ``state`` is from acceptance (e.g. parser stack depth): lower is closer."""
        ...


@runtime_checkable
class HasByteClasses(Protocol):
    def byte_classes(self) -> Any:
        """[256] integer array: bytes with equal class move every state to the same state."""
        ...


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
    """Tokens of the continuation the grammar forces from ``state`` (jump-forward), or ``[]`` for a
    constraint that is not ``ForcesTokens``. These are proposals for a drafter to have verified by
    the model, never insertions."""
    return list(constraint.forced_tokens(state)) if isinstance(constraint, ForcesTokens) else []


def refine_scores(constraint: Any, states: Sequence[State | None], scores: Tensor) -> Tensor:
    """``constraint.refine(states, scores)`` for a constraint that also steers by the masked scores
    (``Budgeted``), else ``scores`` unchanged. ``states[i]`` is row i's state (``None``: pruned)."""
    return constraint.refine(states, scores) if isinstance(constraint, Refines) else scores
