"""The call grammar: ``call_schema`` (the JSON Schema of a reply that calls a tool), ``text_pattern``
(an ``"auto"`` reply that is text), ``EitherConstraint`` (the union of the two) and ``tool_constraint``
(the exact Constraint of a reply under ``tool_choice``)."""

from __future__ import annotations

import copy
from typing import Any, Callable, Hashable, Literal, Sequence, Union

from torch import Tensor

from trellis.constrain.base import forced_tokens
from trellis.constrain.tools.calls import Tool, as_tools
from trellis.constrain.tools.schema import SchemaBuilder, rewrite_refs
from trellis.errors import UsageError
from trellis.tokens import Vocabulary

ToolChoice = Union[Literal["auto", "required", "none"], str]

# ----------------------------------------------------------------------------- the call grammar


def call_schema(tools: Sequence[Tool | Callable[..., Any]], *, tool_choice: ToolChoice = "required",
                parallel: bool = False) -> dict[str, Any]:
    """The JSON Schema of a reply that calls a tool: ``anyOf`` one ``{"name", "arguments"}`` object per
    tool (only the named one for ``tool_choice=<name>``), or a list of them when ``parallel``.

    Each tool's ``$defs`` are hoisted to the root (renamed on clashes), other local ``$ref``s are
    moved to where the parameters schema is embedded.
    """
    ts = as_tools(tools)
    if tool_choice == "none":
        raise UsageError('tool_choice="none" allows no call, so there is no call schema')
    if tool_choice not in ("auto", "required"):
        ts = [t for t in ts if t.name == tool_choice]
        if not ts:
            raise UsageError(f"tool_choice {tool_choice!r} names no tool (have: {[t.name for t in as_tools(tools)]})")
    builder = SchemaBuilder()
    alternatives = []
    for k, t in enumerate(ts):
        params = builder.hoist(copy.deepcopy(dict(t.parameters)))
        at = f"/anyOf/{k}" if len(ts) > 1 else ""
        at = ("/items" if parallel else "") + at + "/properties/arguments"
        params = rewrite_refs(params, {}, prefix=at)
        alternatives.append({"type": "object",
                             "properties": {"name": {"const": t.name}, "arguments": params},
                             "required": ["name", "arguments"], "additionalProperties": False})
    one: dict[str, Any] = alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}
    out: dict[str, Any] = {"type": "array", "items": one, "minItems": 1} if parallel else one
    if builder.defs:
        out = {**out, "$defs": builder.defs}
    return out


def text_pattern(*, parallel: bool = False) -> str:
    """The regex of an ``"auto"`` reply that is text: first non-whitespace character not a call marker."""
    marker = r"\[{" if parallel else "{"
    return rf"[ \t\r\n]*[^ \t\r\n{marker}][\s\S]*"


class EitherConstraint:
    """The union of two constraints (a token is allowed when either branch allows it; EOS when
    either accepts). State: ``(a_state | None, b_state | None)``; a dead branch stays ``None``, so
    once the first non-whitespace character has decided, masks cost one branch only."""

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b
        self.vocab: Vocabulary = a.vocab

    def start(self) -> Hashable:
        return (self.a.start(), self.b.start())

    def advance(self, state: Hashable, token: int) -> Hashable | None:
        sa, sb = state  # type: ignore[misc]
        na = self.a.advance(sa, token) if sa is not None else None
        nb = self.b.advance(sb, token) if sb is not None else None
        return None if na is None and nb is None else (na, nb)

    def fill_mask(self, state: Hashable, out: Tensor) -> None:
        sa, sb = state  # type: ignore[misc]
        if sa is None or sb is None:
            (self.a if sb is None else self.b).fill_mask(sa if sb is None else sb, out)
            return
        self.a.fill_mask(sa, out)
        other = out.clone()  # [W] int32
        self.b.fill_mask(sb, other)
        out.bitwise_or_(other)

    def is_accepting(self, state: Hashable) -> bool:
        sa, sb = state  # type: ignore[misc]
        return (sa is not None and self.a.is_accepting(sa)) or (sb is not None and self.b.is_accepting(sb))

    def forced_tokens(self, state: Hashable) -> list[int]:
        sa, sb = state  # type: ignore[misc]
        if sa is not None and sb is not None:
            return []  # two live branches: nothing is forced
        c, s = (self.a, sa) if sb is None else (self.b, sb)
        return forced_tokens(c, s)

    def __repr__(self) -> str:
        return f"EitherConstraint({self.a!r}, {self.b!r})"


LEADING_WHITESPACE = 2
"""Whitespace bytes allowed before a call: models like to start a reply with a space or a newline."""


def tool_constraint(tools: Sequence[Tool | Callable[..., Any]], vocab: Vocabulary, *,
                    tool_choice: ToolChoice = "auto", parallel: bool = False,
                    whitespace: Literal["compact", "flexible"] = "flexible", max_whitespace: int = 1,
                    lenient: bool = False) -> Any:
    """The exact Constraint of a reply under ``tool_choice`` (see the ``trellis.constrain.tools`` docstring).

    The call is ``call_schema(...)`` compiled by ``JsonSchema`` with the given ``whitespace`` /
    ``max_whitespace`` (default: at most one whitespace byte around
    punctuation, so ``{"a": 1, "b": 2}`` and the compact form both fit, but a weak model cannot
    loop on spaces), preceded by up to ``LEADING_WHITESPACE`` whitespace bytes. ``lenient``: see
    ``JsonSchema``; otherwise a schema keyword that cannot be enforced raises ``SchemaError``.
    """
    from trellis.constrain.compile import SchemaGrammar
    from trellis.constrain.compile import compile as compile_grammar
    from trellis.constrain.frontends.json_schema import JsonSchema
    from trellis.constrain.regex_constraint import Regex

    if tool_choice == "none":
        as_tools(tools)  # still validated
        return compile_grammar(Regex(text_pattern(parallel=parallel)), vocab)
    schema = call_schema(tools, tool_choice=tool_choice, parallel=parallel)
    lark = JsonSchema(schema, whitespace=whitespace, max_whitespace=max_whitespace,
                      lenient=lenient).to_lark("earley")  # compiled below on the Earley engine
    # The schema grammar allows no whitespace around the whole value; a start rule of our own puts
    # the optional leading run in front (rule/terminal names chosen not to clash with its own).
    lark += (f"\ntrellis_tool_reply: TRELLIS_LEAD_WS start | start\n"
             f"TRELLIS_LEAD_WS: /[ \\t\\r\\n]{{1,{LEADING_WHITESPACE}}}/\n")
    call = compile_grammar(SchemaGrammar(lark), vocab, start="trellis_tool_reply")
    if tool_choice != "auto":
        return call
    text = compile_grammar(Regex(text_pattern(parallel=parallel)), vocab)
    return EitherConstraint(call, text)
