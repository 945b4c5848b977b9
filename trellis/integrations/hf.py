"""A transformers ``LogitsProcessor`` that applies a trellis ``Constraint`` inside ``model.generate``.

    from transformers import LogitsProcessorList
    proc = GrammarLogitsProcessor(compile("json.lark", vocab))
    model.generate(ids, logits_processor=LogitsProcessorList([proc]), max_new_tokens=64)

Works for greedy, sampling, batched prompts (left padding) and beam search. Constraint states are
keyed by each row's *generated token prefix*, never by batch row (DESIGN.md): transformers' beam
search reorders, duplicates and drops rows between steps, and a prefix names its state wherever
the row went. The prompt length is recorded on the first call of a ``generate`` run.
"""

from __future__ import annotations

from typing import Iterable, Sequence, Union

import torch
from torch import Tensor
from transformers import LogitsProcessor

from trellis.constrain.base import Constraint, State
from trellis.errors import UsageError
from trellis.mask import allocate_bitmask, apply_bitmask_, bool_to_bitmask

__all__ = ["GrammarLogitsProcessor"]


class _Finished:
    """Row status after EOS in an accepting state: later tokens (padding) are ignored."""

    def __repr__(self) -> str:
        return "FINISHED"


class _Dead:
    """Row status after a token the constraint forbids (a beam candidate taken at score -inf)."""

    def __repr__(self) -> str:
        return "DEAD"


FINISHED = _Finished()
DEAD = _Dead()
_Status = Union[State, _Finished, _Dead]


class GrammarLogitsProcessor(LogitsProcessor):
    """Masks ``scores`` [B, V] in place to the tokens ``constraint`` allows after each row's
    generated tokens; EOS ids are allowed exactly where the constraint accepts.

    ``eos_token_id``: extra ids treated as EOS (besides ``constraint.vocab.eos``), e.g. the
    generation config's. Rows that already ended (EOS, then padding) and dead beams (a forbidden
    token chosen at score -inf because fewer allowed continuations than beams existed) are masked
    to EOS only, so sampling never sees an all ``-inf`` row.

    One instance serves one ``generate`` run; it restarts by itself when a call's prompt columns
    differ from the recorded ones (or call ``reset()``). Under beam search transformers applies
    processors to log-softmax scores, so beam scores are sums of *unrenormalised* masked
    log-probs; pass ``renormalize_logits=True`` to ``generate`` for trellis' scoring (sums of
    masked, renormalised log-probs).
    """

    def __init__(self, constraint: Constraint, *, eos_token_id: int | Iterable[int] | None = None) -> None:
        self.constraint = constraint
        extra = [] if eos_token_id is None else [eos_token_id] if isinstance(eos_token_id, int) else eos_token_id
        vocab = getattr(constraint, "vocab", None)
        if vocab is None:
            raise UsageError("GrammarLogitsProcessor needs a constraint with a vocabulary (constraint.vocab)")
        self.vocab_size = len(vocab)
        self.eos: frozenset[int] = frozenset(vocab.eos) | frozenset(int(e) for e in extra)
        eos_row = torch.zeros(self.vocab_size, dtype=torch.bool)
        eos_row[[e for e in self.eos if 0 <= e < self.vocab_size]] = True
        self._eos_bits = bool_to_bitmask(eos_row)[0]  # [W] int32
        self.reset()

    def reset(self) -> None:
        """Forget the prompt and every cached state (the next call starts a new generation)."""
        self._prompt: Tensor | None = None  # [B, P] prompt columns of the first call
        self._states: dict[tuple[int, ...], _Status] = {(): self.constraint.start()}

    @property
    def prompt_len(self) -> int | None:
        """Columns of ``input_ids`` that belong to the prompt (None before the first call)."""
        return None if self._prompt is None else int(self._prompt.shape[1])

    def state_of(self, generated: Sequence[int]) -> _Status:
        """The constraint state after ``generated`` tokens, ``FINISHED`` or ``DEAD``."""
        key = tuple(int(t) for t in generated)
        hit = self._states.get(key)
        if hit is not None:
            return hit
        # Walk back to the longest cached prefix (normally the previous step's), then forward.
        k = len(key) - 1
        while k > 0 and key[:k] not in self._states:
            k -= 1
        status = self._states[key[:k]]
        for t in key[k:]:
            status = self._step(status, t)
        return status

    def _step(self, status: _Status, token: int) -> _Status:
        if status is FINISHED or status is DEAD:
            return status
        if token in self.eos:
            return FINISHED if self.constraint.is_accepting(status) else DEAD
        nxt = self.constraint.advance(status, token)
        return DEAD if nxt is None else nxt

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """Mask ``scores`` [B, V] in place (``input_ids`` [B, L]: prompt + generated) and return it."""
        if not self._same_generation(input_ids):
            self.reset()
            self._prompt = input_ids.detach().clone()
        p = self._prompt.shape[1]  # type: ignore[union-attr]
        rows = input_ids[:, p:].tolist()
        bitmask = allocate_bitmask(len(rows), self.vocab_size)  # [B, W]
        states: dict[tuple[int, ...], _Status] = {(): self._states[()]}
        filled: dict[object, int] = {}  # state -> first row holding its mask (beams often share one)
        for i, gen in enumerate(rows):
            key = tuple(gen)
            status = self.state_of(key)
            states[key] = status
            if status is FINISHED or status is DEAD:
                bitmask[i] = self._eos_bits
                continue
            j = filled.get(status)
            if j is not None:
                bitmask[i] = bitmask[j]
                continue
            self.constraint.fill_mask(status, bitmask[i])
            if self.constraint.is_accepting(status):  # the protocol says EOS is allowed here
                bitmask[i] |= self._eos_bits
            filled[status] = i
        # Keep only this step's prefixes: the next step's rows extend them by one token.
        self._states = states
        return apply_bitmask_(scores, bitmask)

    def _same_generation(self, input_ids: Tensor) -> bool:
        old = self._prompt
        if old is None or input_ids.shape[0] != old.shape[0] or input_ids.shape[1] < old.shape[1]:
            return False
        return bool(torch.equal(input_ids[:, : old.shape[1]], old.to(input_ids.device)))
