"""Immutable constraint states over a peer's *mutable* matcher, by rollback and replay.

xgrammar's ``GrammarMatcher`` and llguidance's ``LLMatcher`` change in place as they consume
tokens, while a trellis state must be an immutable value that many hypotheses can share. Here a
state is the tuple of token ids consumed so far, and one matcher (the cursor) is moved to
whichever state is asked about: roll back to the common prefix, then accept the rest.

Cost of a query at state ``s`` with the cursor at ``c`` (``k`` = common prefix length):
``len(c) - k`` tokens rolled back plus ``len(s) - k`` tokens accepted. A linear walk (advance,
then mask the new state) costs one accept per token, i.e. nothing beyond the peer's own cost;
alternating between beams of depth ``d`` that split ``d`` tokens ago costs ``O(d)`` per switch;
building each state tuple costs ``O(len)`` (fine for documents of a few thousand tokens).
"""

from __future__ import annotations

from typing import Hashable

import torch
from torch import Tensor

from trellis.constrain.errors import ConstraintUsageError
from trellis.mask import bool_to_bitmask
from trellis.tokens import Vocabulary

TokenPrefix = tuple[int, ...]


class ReplayConstraint:
    """Base class: the Constraint protocol over a matcher with accept / rollback / fill / accepting.

    Subclasses implement ``_accept`` (consume one token, ``False`` and no state change if it is
    not allowed), ``_rollback(n)``, ``_reset()``, ``_fill(out)`` (the peer's mask into one int32
    row) and ``_accepting()``. EOS is never consumed: ``advance`` returns ``None`` for EOS ids and
    the mask's EOS bits are set exactly where ``is_accepting`` (trellis' convention).
    """

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self._at: TokenPrefix = ()
        eos = torch.zeros(len(vocab), dtype=torch.bool)
        eos[sorted(vocab.eos)] = True
        self._eos_bits = bool_to_bitmask(eos)[0]  # [W]
        self._not_eos = ~self._eos_bits
        self.replayed = 0  # tokens accepted to move the cursor (tests and benchmarks read it)

    # -- peer hooks
    def _accept(self, token: int) -> bool:
        raise NotImplementedError

    def _rollback(self, n: int) -> None:
        raise NotImplementedError

    def _reset(self) -> None:
        raise NotImplementedError

    def _fill(self, out: Tensor) -> None:
        raise NotImplementedError

    def _accepting(self) -> bool:
        raise NotImplementedError

    # -- cursor
    def _goto(self, state: TokenPrefix) -> None:
        cur = self._at
        if cur == state:
            return
        k = 0
        n = min(len(cur), len(state))
        while k < n and cur[k] == state[k]:
            k += 1
        if k < len(cur):
            if k == 0:
                self._reset()
            else:
                self._rollback(len(cur) - k)
            self._at = cur[:k]
        for t in state[k:]:
            if not self._accept(t):
                raise ConstraintUsageError(f"state {state[:8]}... is not reachable: token {t} rejected on replay")
            self._at = self._at + (t,)
            self.replayed += 1

    # -- protocol
    def start(self) -> TokenPrefix:
        return ()

    def advance(self, state: Hashable, token: int) -> TokenPrefix | None:
        token = int(token)
        if token in self.vocab.eos or not 0 <= token < len(self.vocab):
            return None
        st: TokenPrefix = state  # type: ignore[assignment]
        self._goto(st)
        if not self._accept(token):
            return None
        self._at = st + (token,)
        return self._at

    def fill_mask(self, state: Hashable, out: Tensor) -> None:
        """One int32 bitmask row for ``state`` into ``out`` [ceil(V/32)] (in place)."""
        self._goto(state)  # type: ignore[arg-type]
        self._fill(out)
        out &= self._not_eos
        if self._accepting():
            out |= self._eos_bits

    def is_accepting(self, state: Hashable) -> bool:
        self._goto(state)  # type: ignore[arg-type]
        return self._accepting()
