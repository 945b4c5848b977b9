"""Potentials: user functions that score a text, for sequential Monte Carlo (``trellis.search.smc``).

A potential phi multiplies the target: SMC samples from p(x | x in L) * phi(x), normalised
(Loula et al., ICLR 2025, "Syntactic and Semantic Control of Large Language Models via Sequential
Monte Carlo": the grammar is the cheap constraint applied inside the proposal through exact masks,
a potential is the constraint the grammar cannot say: a JSON Schema's semantic keywords, a type
check, a critic). Both methods return a LOG weight (0.0: neutral, ``-inf``: rejected).

- ``complete(text)``: log phi(x) of a finished output (x without EOS). This defines the target.
- ``prefix(text)``: log psi(x_{1:t}) of an unfinished one, the twist applied at every step (its
  ratio psi_t / psi_{t-1} multiplies the weight; at the end the weight is corrected from psi to
  phi, so the twist changes the variance, never the target). It must not return ``-inf`` for a
  prefix that some completion with phi > 0 extends: that would remove the completion from the
  target silently. A potential that knows nothing about prefixes returns 0.0.

Texts are the decoded output (a prefix cut inside a multi-byte character ends before it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

from trellis.errors import UsageError

NEG_INF = float("-inf")


@runtime_checkable
class Potential(Protocol):
    """Scores a partial (``prefix``) or finished (``complete``) output; log weights."""

    def prefix(self, text: str) -> float: ...

    def complete(self, text: str) -> float: ...


@dataclass(frozen=True)
class Check:
    """A potential from a boolean test of the finished text: ``complete`` is 0.0 when ``fn(text)``
    is true, ``-inf`` otherwise; prefixes are neutral, unless ``prefix_fn`` says a prefix can no
    longer succeed (it must never reject a prefix of an accepted text)."""

    fn: Callable[[str], bool]
    prefix_fn: Callable[[str], bool] | None = None

    def prefix(self, text: str) -> float:
        return 0.0 if self.prefix_fn is None or self.prefix_fn(text) else NEG_INF

    def complete(self, text: str) -> float:
        return 0.0 if self.fn(text) else NEG_INF


@dataclass(frozen=True)
class Score:
    """A soft potential: ``complete`` is ``fn(text)`` (a log weight, e.g. a critic's log-odds times a
    strength); ``prefix_fn`` (optional) twists unfinished texts the same way."""

    fn: Callable[[str], float]
    prefix_fn: Callable[[str], float] | None = None

    def prefix(self, text: str) -> float:
        return 0.0 if self.prefix_fn is None else as_log_weight(self.prefix_fn(text))

    def complete(self, text: str) -> float:
        return as_log_weight(self.fn(text))


@dataclass(frozen=True)
class JsonSchemaValid:
    """The finished text parses as JSON and validates against ``schema`` with the ``jsonschema``
    package, formats included (``format_checker``): the keywords a grammar cannot express
    (``uniqueItems``, ``multipleOf``, ``format``, numeric bounds outside the grammar's reach...)."""

    schema: Any
    _validator: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            import jsonschema
        except ImportError:  # pragma: no cover - dev extra
            raise UsageError("JsonSchemaValid needs the jsonschema package (pip install jsonschema)") from None
        schema = json.loads(self.schema) if isinstance(self.schema, str) else self.schema
        cls = jsonschema.validators.validator_for(schema)
        object.__setattr__(self, "_validator", cls(schema, format_checker=cls.FORMAT_CHECKER))

    def prefix(self, text: str) -> float:
        return 0.0

    def complete(self, text: str) -> float:
        try:
            value = json.loads(text)
        except ValueError:
            return NEG_INF
        return 0.0 if self._validator.is_valid(value) else NEG_INF


@dataclass(frozen=True)
class PythonSyntax:
    """Python code that compiles: prefixes that can no longer be completed into a valid module are
    rejected at once (``trellis.codegen.syntax.check_prefix``, which never rejects a viable prefix),
    the finished text must compile."""

    def prefix(self, text: str) -> float:
        from trellis.codegen.syntax import check_prefix

        return 0.0 if check_prefix(text).viable else NEG_INF

    def complete(self, text: str) -> float:
        try:
            compile(text, "<smc>", "exec")
        except (SyntaxError, ValueError):
            return NEG_INF
        return 0.0


def prefix_text(data: bytes) -> str:
    """UTF-8 text of ``data`` without a multi-byte character cut at its end (a prefix's text)."""
    for cut in range(1, min(4, len(data)) + 1):
        b = data[-cut]
        if b < 0x80:
            break
        if b >= 0xC0:  # the lead byte of the last character: is it complete?
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            if cut < need:
                data = data[:-cut]
            break
    return data.decode("utf-8", errors="replace")


def as_log_weight(value: float) -> float:
    """``value`` as a log weight: finite or -inf (NaN and +inf are a potential's bug)."""
    v = float(value)
    if math.isnan(v) or v == math.inf:
        raise UsageError(f"a potential returned {v}: log weights are finite or -inf")
    return v
