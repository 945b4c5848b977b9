"""Constraint states of a serving engine's persistent batch, keyed by each request's own tokens.

An engine such as vLLM keeps a batch of running requests whose rows change between steps (added,
removed, moved, swapped; a preempted request comes back later, its outputs recomputed) and
appends each sampled token to a per-request list of output tokens. ``RequestBatch`` holds, per
row, the request's compiled constraint, a live reference to that list, the tokens advanced
through and the state after each; ``apply`` brings every row up to its list (compared, not
counted, so a row whose list was rebuilt resumes from the state its own tokens name) and masks
the logits rows in place. Compiled constraints are shared by equal ``RequestSpec``s (an LRU).

EOS ids are allowed exactly in accepting states. After an accepted EOS (an engine told to ignore
EOS), a token the constraint refuses (only possible when something changed the logits after the
mask) or a spec that cannot be compiled for the vocabulary, the row is held to EOS and the reason
logged and kept (``tracked``): the engine must go on serving the other requests.

Engine adapters: ``trellis.integrations.vllm`` (V1 logits processor).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, Callable

import torch
from torch import Tensor

from trellis.constrain.base import Constraint, State
from trellis.constrain.errors import GrammarBudgetError
from trellis.integrations import request_spec
from trellis.integrations.request_spec import RequestSpec
from trellis.mask import allocate_bitmask, apply_bitmask_, bool_to_bitmask
from trellis.tokens import Vocabulary

__all__ = ["RequestBatch", "Tracked"]

log = logging.getLogger(__name__)

SHARED_CONSTRAINTS = 64  # compiled constraints kept per batch (LRU); their walks are shared process-wide


class Tracked:
    """One constrained request: ``states[i]`` is the state after ``tokens[:i]``; ``status`` is
    ``"ok"``, ``"finished"`` (EOS accepted) or ``"dead"`` (held to EOS, ``reason`` says why)."""

    __slots__ = ("spec", "constraint", "output", "tokens", "states", "status", "reason")

    def __init__(self, spec: RequestSpec | None, constraint: Constraint | None, output: list[int],
                 reason: str = "") -> None:
        self.spec, self.constraint, self.output = spec, constraint, output
        self.tokens: list[int] = []
        self.states: list[State] = [] if constraint is None else [constraint.start()]
        self.status = "ok" if constraint is not None else "dead"
        self.reason = reason

    def describe(self) -> str:
        return self.spec.describe() if self.spec is not None else "an invalid spec"


class RequestBatch:
    """Rows of a persistent batch -> constraint states (module docstring). ``rows``: the most
    requests the engine runs at once (the bitmask buffer's height)."""

    def __init__(self, vocab: Vocabulary, rows: int, *, pin_memory: bool = False,
                 build: Callable[[RequestSpec, Vocabulary], Constraint] = request_spec.build) -> None:
        self.vocab = vocab
        self._build = build
        self._bitmask = allocate_bitmask(rows, len(vocab))
        if pin_memory:
            self._bitmask = self._bitmask.pin_memory()
        eos_row = torch.zeros(len(vocab), dtype=torch.bool)
        eos_row[sorted(vocab.eos)] = True
        self._eos_bits = bool_to_bitmask(eos_row)[0]  # [W] int32
        self._not_eos = ~self._eos_bits
        self._rows: dict[int, Tracked] = {}
        self._compiled: OrderedDict[RequestSpec, Constraint] = OrderedDict()

    def warm(self) -> None:
        """Build the per-vocabulary tables (token matrix, rest sets, token trie: ~0.3 s on a
        262k vocabulary) now, with a small schema's masks at its start and inside a string, so
        that an engine pays them at start-up instead of in its first constrained request."""
        c = self._build(RequestSpec("schema", '{"type":"object","properties":{"s":{"type":"string"}}}'), self.vocab)
        single = {t[0]: i for i, t in enumerate(self.vocab.tokens) if len(t) == 1 and i not in self.vocab.special}
        row = allocate_bitmask(1, len(self.vocab))[0]
        state = c.start()
        c.fill_mask(state, row)
        for b in b'{"s":"a':
            nxt = c.advance(state, single[b]) if b in single else None
            if nxt is None:
                return  # a vocabulary without these bytes as tokens: the first request builds the rest
            state = nxt
        c.fill_mask(state, row)

    # ------------------------------------------------------------------ bookkeeping

    def constraint_for(self, spec: RequestSpec) -> Constraint:
        """The shared compiled constraint of ``spec`` (compiled on first use)."""
        c = self._compiled.get(spec)
        if c is None:
            c = self._compiled[spec] = self._build(spec, self.vocab)
            while len(self._compiled) > SHARED_CONSTRAINTS:
                self._compiled.popitem(last=False)
        else:
            self._compiled.move_to_end(spec)
        return c

    def add(self, index: int, extra_args: Any, output: list[int]) -> None:
        """Row ``index`` now holds a request with these per-request arguments and this live list
        of output tokens (it replaces whatever the row held)."""
        try:
            spec = request_spec.parse(extra_args)
        except ValueError as e:  # the front end refuses these; a caller that bypassed it gets EOS
            log.error("trellis: malformed constraint arguments, request held to EOS: %s", e)
            self._rows[index] = Tracked(None, None, output, reason=str(e))
            return
        if spec is None:
            self._rows.pop(index, None)
            return
        try:
            constraint = self.constraint_for(spec)
        except Exception as e:  # noqa: BLE001 - one request's failure must not stop the engine
            log.error("trellis: cannot compile %s for this vocabulary, request held to EOS: %s",
                      spec.describe(), e)
            self._rows[index] = Tracked(spec, None, output, reason=str(e))
            return
        self._rows[index] = Tracked(spec, constraint, output)

    def remove(self, index: int) -> None:
        self._rows.pop(index, None)

    def move(self, a: int, b: int, *, swap: bool) -> None:
        """Row ``a``'s request moves to ``b`` (``swap``: and ``b``'s to ``a``; else ``b``'s is dropped)."""
        ta, tb = self._rows.pop(a, None), self._rows.pop(b, None)
        if ta is not None:
            self._rows[b] = ta
        if tb is not None and swap:
            self._rows[a] = tb

    def tracked(self) -> dict[int, Tracked]:
        """Row -> its ``Tracked`` request (a view for tests and diagnostics; do not mutate)."""
        return dict(self._rows)

    # ------------------------------------------------------------------ masks

    def sync(self, r: Tracked) -> None:
        """Advance ``r`` to its output tokens; a list that no longer extends the tokens advanced
        through (recomputed after preemption) rewinds to their common prefix first. A request
        without a constraint (malformed or uncompilable) stays held to EOS: nothing to track."""
        if r.constraint is None:
            return
        out, n = r.output, len(r.tokens)
        if len(out) < n or out[:n] != r.tokens:
            k = 0
            while k < min(n, len(out)) and out[k] == r.tokens[k]:
                k += 1
            if r.status != "ok":  # where it stopped being ok is not kept: replay the whole list
                k = 0
            del r.tokens[k:]
            del r.states[k + 1:]
            r.status, r.reason = "ok", ""
            n = k
        for t in out[n:]:
            t = int(t)
            if t < 0:
                raise RuntimeError("trellis: an output token is still a placeholder when masks are "
                                   "computed (the engine has not resolved an async-scheduled token)")
            state = r.states[-1]
            r.tokens.append(t)
            if r.status != "ok":
                r.states.append(state)
            elif t in self.vocab.eos:
                r.status = "finished" if r.constraint.is_accepting(state) else "dead"
                r.reason = "" if r.status == "finished" else f"EOS {t} before the output was complete"
                r.states.append(state)
            else:
                try:
                    nxt = r.constraint.advance(state, t)
                except GrammarBudgetError as e:  # this request fails alone, never the engine step
                    self._fail(r, e)
                    r.states.append(state)
                    continue
                if nxt is None:
                    r.status, r.reason = "dead", f"token {t} is not allowed at output position {len(r.tokens) - 1}"
                    log.error("trellis: %s under %s (were the logits changed after the mask?); request "
                              "held to EOS", r.reason, r.describe())
                    nxt = state
                r.states.append(nxt)

    def _fail(self, r: Tracked, e: GrammarBudgetError) -> None:
        """``r``'s grammar needed more work than its bound at this position: the request is held
        to EOS (its output so far is a prefix of the language, ``finish_reason`` "stop") and the
        error is logged with its request; the other requests of the step go on."""
        r.status, r.reason = "dead", f"grammar work bound exceeded: {e}"
        log.error("trellis: %s under %s; request held to EOS", r.reason, r.describe())

    def apply(self, logits: Tensor) -> Tensor:
        """Mask the constrained rows of ``logits`` [rows, V'] in place (V' >= the vocabulary:
        padding columns are never allowed) and return it; other rows are untouched."""
        rows = sorted(i for i in self._rows if i < logits.shape[0])
        if not rows:
            return logits
        filled: dict[tuple[int, Any], int] = {}  # (constraint, state) -> a row already filled with it
        for i in rows:
            r = self._rows[i]
            self.sync(r)
            row = self._bitmask[i]
            if r.status != "ok" or r.constraint is None:
                row.copy_(self._eos_bits)
                continue
            state = r.states[-1]
            key = (id(r.constraint), state)
            j = filled.get(key)
            if j is not None:
                row.copy_(self._bitmask[j])
                continue
            try:
                r.constraint.fill_mask(state, row)
            except GrammarBudgetError as e:  # this request fails alone, never the engine step
                self._fail(r, e)
                row.copy_(self._eos_bits)
                continue
            row &= self._not_eos
            if r.constraint.is_accepting(state):
                row |= self._eos_bits
            filled[key] = i
        index = torch.tensor(rows, dtype=torch.long)
        at = index.to(logits.device, non_blocking=True)
        logits[at] = apply_bitmask_(logits[at], self._bitmask[index])
        return logits
