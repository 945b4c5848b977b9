"""Finish within the token budget: a constrained output that would run past ``max_new_tokens`` is
steered to close in time, so it still parses.

A weak model under a grammar can loop (digits of a number, items of an array, nested free-form
objects) until the budget cuts it, and a cut output is not in the language. ``Budgeted(inner,
budget)`` wraps any constraint; its states are ``(inner_state, tokens_left, steered)``. The mask
is the inner one (plus: with one token left only EOS). The budget acts through ``refine``, which
the ``Decoder`` applies to the masked scores of every row:

* ``L(s)``, the length of a short completion of inner state ``s`` in tokens, is found by a
  search over single-byte tokens (and, where the grammar forces a literal, its ``forced_tokens``):
  A*-style with the constraint's ``completion_hint`` (the CFG
  parser's stack depth) when it has one, else breadth-first (shortest). It is an upper bound on
  the tokens a completion needs; memoised per state and capped at ``max_states`` expanded states
  (beyond it ``L`` is unknown and nothing is steered).
* Far from the end (``left - 1 > L(s) + margin``) scores are untouched.
* Near it, a row keeps only its ``k`` best-scored tokens whose next state can still finish in
  time (``L(next) <= left - 2``; EOS when accepting); if none can, the first token of the shortest
  completion. Greedy therefore picks the unbudgeted argmax whenever that can still finish: an
  output that finishes within the budget on its own is unchanged (its own path is the witness).
  Sampling near the end is truncated to those ``k`` tokens.

What this does to the distribution: nothing far from the end; near it, each step's distribution is
the masked one truncated to (at most) ``k`` tokens that can still finish, renormalised, and the last
token is forced to EOS. It is therefore NOT the model's locally masked distribution, and an output
it shaped can be a shortened or blanked value (``{"name": ""}``) that parses but says less than the
model would have. That is why ``generate`` never applies it by default (a cut output comes back
``finished=False``, ``stop_reason="length"``) and why a hypothesis it steered is marked: states
carry a ``steered`` flag, set once ``refine`` removed a row's best-scored token on the path, and
``was_steered(state)`` reads it (``generate`` reports ``stop_reason="steered"``).
"""

from __future__ import annotations

import heapq
import weakref
from itertools import count
from typing import Any, Hashable, Sequence

import torch
from torch import Tensor

from trellis.constrain.base import Constraint, ForcesTokens, HasByteClasses, HintsCompletion, State
from trellis.constrain.vocab.walks import TokenMatrix
from trellis.errors import UsageError
from trellis.mask import allocate_bitmask, bool_to_bitmask

# Shortest completions are a property of the inner constraint's states: share them across the
# Budgeted wrappers of one constraint (one per generate call).
_PLANS: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


_NOT_FORWARDED = frozenset({"completion_hint", "byte_classes"})


class Budgeted:
    """``inner`` whose outputs finish (EOS included) within ``budget`` tokens; see the module
    docstring. ``margin``: how many spare tokens before the budget starts steering; ``k``: candidates
    checked per row when it does; ``max_states``: search cap per shortest completion; ``greed``:
    weight of the constraint's completion hint in that search (1 = plain A*)."""

    def __init__(self, inner: Constraint, budget: int, *, margin: int = 32, k: int = 8,
                 max_states: int = 2048, greed: float = 2.0) -> None:
        if budget < 1:
            raise UsageError(f"budget must be >= 1 token, got {budget}")
        self.inner, self.budget, self.margin, self.k, self.max_states = inner, budget, margin, k, max_states
        self.greed = greed
        self.vocab = inner.vocab
        v = self.vocab
        eos = torch.zeros(v.size, dtype=torch.bool)
        eos[sorted(v.eos)] = True
        self._eos_row = bool_to_bitmask(eos)[0]  # AND-ed into the last token's mask
        # byte -> its single-byte token (a piece rather than <0xNN>, never EOS or special)
        tm = TokenMatrix.of(v)
        by_byte = {b: t for b in range(256) if (t := tm.token_of_bytes(bytes([b]))) is not None}
        self._edge_t = torch.tensor(sorted(by_byte.values()), dtype=torch.long)
        # With byte classes, one byte per class is enough (same next state): the search then skips
        # the mask and tries a handful of advances per state. Printable ASCII represents a class.
        # Asked once: the completion search needs the inner forced tokens at every state it expands
        # (up to max_states), and isinstance on a runtime protocol costs 4-7 us a call on
        # Python 3.11 (timeit, this VM) against 0.05 us for the attribute it replaced.
        self._forces = isinstance(inner, ForcesTokens)
        self._reps: list[int] | None = None
        if isinstance(inner, HasByteClasses):
            cls = inner.byte_classes()
            reps: dict[int, int] = {}
            for b in sorted(by_byte, key=lambda b: (not 0x21 <= b < 0x7F, b)):
                reps.setdefault(int(cls[b]), by_byte[b])
            # Classes of only non-ASCII or control bytes (UTF-8 lead bytes, raw tabs) open partial
            # characters that never shorten a completion but multiply the frontier: skipped.
            self._reps = sorted(t for t in reps.values() if 0x20 <= v.tokens[t][0] < 0x7F)
        self._overridden: set[tuple[Hashable, int]] = set()  # (inner state, tokens left): argmax removed
        try:  # inner state -> shortest completion (None: not found within max_states)
            self._plan: dict[Hashable, tuple[int, ...] | None] = _PLANS.setdefault(inner, {})
        except TypeError:  # not weak-referenceable
            self._plan = {}

    # -- Constraint protocol
    def start(self) -> State:
        return (self.inner.start(), self.budget, False)

    def advance(self, state: State, token: int) -> State | None:
        s, left, steered = state  # type: ignore[misc]
        if left <= 1:  # the last token can only be EOS
            return None
        nxt = self.inner.advance(s, token)
        return None if nxt is None else (nxt, left - 1, steered or (s, left) in self._overridden)

    def fill_mask(self, state: State, out: Tensor) -> None:
        s, left, _ = state  # type: ignore[misc]
        self.inner.fill_mask(s, out)
        if left <= 1:
            out &= self._eos_row

    def is_accepting(self, state: State) -> bool:
        return self.inner.is_accepting(state[0])  # type: ignore[index]

    def forced_tokens(self, state: State) -> list[int]:
        s, left, _ = state  # type: ignore[misc]
        return self._inner_forced(s)[: max(0, left - 1)]

    def _inner_forced(self, s: Hashable) -> list[int]:
        return list(self.inner.forced_tokens(s)) if self._forces else []

    def was_steered(self, state: State) -> bool:
        """Whether ``refine`` removed a row's best-scored token at some step of the path to
        ``state`` (the model's own choice was overridden), or ``state`` is the last budget position,
        where only EOS is allowed. A greedy output the budget left unchanged is never marked; a
        sampled one is marked only where its row's favourite was removed, although inside the
        window every sampled step draws from a truncated distribution (module docstring)."""
        _, left, steered = state  # type: ignore[misc]
        return bool(steered) or left <= 1

    def __getattr__(self, name: str) -> Any:  # ignored_keywords, tables, ... of the inner constraint
        # Not the inner constraint's state-taking capabilities: they read inner states, and this
        # constraint's states are (inner state, left, steered) (``ForcesTokens``/``Refines`` are
        # implemented above; the others are not offered, so ``isinstance`` says so).
        if name.startswith("_") or name in _NOT_FORWARDED:
            raise AttributeError(name)
        return getattr(self.inner, name)

    # -- steering
    def completion(self, s: Hashable) -> tuple[int, ...] | None:
        """A short token sequence from inner state ``s`` to an accepting state (single-byte tokens;
        shortest without a ``completion_hint``), or ``None`` when none is found within ``max_states``."""
        if s in self._plan:
            return self._plan[s]
        plan = self._search(s)
        self._plan[s] = plan
        if plan:  # every state along the plan gets its tail, so following a plan never lengthens it
            cur = s
            for i, t in enumerate(plan[:-1]):
                cur = self.inner.advance(cur, t)
                if cur is None:
                    break
                tail, old = plan[i + 1:], self._plan.get(cur)
                if old is None or len(old) > len(tail):
                    self._plan[cur] = tail
        return plan

    def _search(self, s0: Hashable) -> tuple[int, ...] | None:
        if self.inner.is_accepting(s0):
            return ()
        # Weighted A* on length + greed x the inner constraint's hint (CFG: parser stack depth,
        # which falls as structures close); breadth-first without a hint. With the weight the
        # search dives towards closing instead of sweeping every equally long branch (values,
        # strings, arrays under an any-schema: ~20 per level). The plan is short, not always
        # shortest: an upper bound, which is all the budget needs.
        w, inner = self.greed, self.inner
        h = (lambda s: w * inner.completion_hint(s)) if isinstance(inner, HintsCompletion) else (lambda _s: 0)
        parent: dict[Hashable, tuple[Hashable, int] | None] = {s0: None}
        tie = count()
        heap = [(h(s0), 0, next(tie), s0)]  # (length + hint, -length: deeper first on ties, tie, state)
        row = allocate_bitmask(1, self.vocab.size)[0]
        expanded = 0
        while heap and expanded < self.max_states:
            _, neg_g, _, s = heapq.heappop(heap)
            g = -neg_g
            expanded += 1
            known = self._plan.get(s, False)
            if known is not False and s is not s0:  # a memoised tail: splice it in
                if known is None:
                    continue
                return self._path(parent, s) + known
            forced = self._inner_forced(s)
            if forced:  # a forced literal (a key, a keyword): its multi-byte tokens, not its bytes
                edges = forced[:1]
            elif self._reps is not None:
                edges = self._reps
            else:
                self.inner.fill_mask(s, row)
                allowed = (row[self._edge_t >> 5] >> (self._edge_t & 31)) & 1
                edges = self._edge_t[allowed.bool()].tolist()
            for t in edges:
                nxt = self.inner.advance(s, t)
                if nxt is None or nxt in parent:
                    continue
                parent[nxt] = (s, t)
                if self.inner.is_accepting(nxt):
                    return self._path(parent, nxt)
                heapq.heappush(heap, (g + 1 + h(nxt), -(g + 1), next(tie), nxt))
        return None

    @staticmethod
    def _path(parent: dict, s: Hashable) -> tuple[int, ...]:
        out = []
        while parent[s] is not None:
            s, t = parent[s]
            out.append(t)
        return tuple(reversed(out))

    def _fits(self, s: Hashable, tokens_left: int) -> bool:
        plan = self.completion(s)
        return plan is not None and len(plan) <= tokens_left

    def refine(self, states: Sequence[State | None], scores: Tensor) -> Tensor:
        """Masked scores [B, V] -> the same with, near the end of the budget, only tokens that can
        still finish in time (module docstring). Rows are edited in place; returns ``scores``."""
        eos = self.vocab.eos
        for r, st in enumerate(states):
            if st is None:
                continue
            s, left, _ = st  # type: ignore[misc]
            plan = self.completion(s)
            if plan is None or left - 1 > len(plan) + self.margin:
                continue
            row = scores[r]
            finite = int(torch.isfinite(row).sum())
            if finite == 0:
                continue
            keep = []
            top = torch.topk(row, min(self.k, finite)).indices.tolist()
            best = top[0]
            for t in top:
                if t in eos:
                    keep.append(t)  # finite only when the inner state accepts
                elif left >= 2:
                    nxt = self.inner.advance(s, t)
                    if nxt is not None and self._fits(nxt, left - 2):
                        keep.append(t)
            if not keep and plan:
                keep = [plan[0]]
            if keep:
                if keep[0] != best:  # the row's own choice was removed: children are marked steered
                    self._overridden.add((s, left))
                vals = row[keep].clone()
                row.fill_(float("-inf"))
                row[keep] = vals
        return scores
