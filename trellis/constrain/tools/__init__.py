"""Typed tool calling: Python functions, pydantic models and JSON Schemas -> one call grammar.

A **call** is the JSON object ``{"name": <tool name>, "arguments": {...}}``. The grammar of a reply
is the JSON Schema ``anyOf`` of one such object per tool, ``name`` a ``const`` written first, so
once the name is out the arguments follow that tool's parameters schema. With ``parallel=True``
the reply is a JSON list of one or more calls instead.

``tool_choice`` says what the reply may be:

* ``"required"``: a call (a list of calls with ``parallel=True``);
* a tool name: a call of that tool;
* ``"none"``: free text only (the tools are still listed in the prompt);
* ``"auto"``: a call, *or* free text. The call marker is the JSON opening bracket: a reply whose
  first non-whitespace character is ``{`` (``[`` with ``parallel=True``) is a call and must be a
  complete, schema-valid one; any other first character starts text, which then runs freely
  (EOS allowed after at least one non-whitespace character). So a call can never be half text,
  and text can never be mistaken for a call. The constraint is the union of the two (see
  ``EitherConstraint``); both branches are exact, so the union is too.

Every call may be preceded by up to ``LEADING_WHITESPACE`` whitespace bytes (models like to open
a reply with a space or newline); the JSON itself follows the ``JsonSchema`` compiler's language
(its whitespace option, declared properties in schema order: ``name`` before ``arguments``).

Python types map to JSON Schema as follows (``Tool.from_function``); arguments parsed back from the
model's JSON are converted to these types (``ToolCall.arguments``):

=============================================  ===================================================
``int`` / ``float`` / ``bool`` / ``str``       integer / number / boolean / string
``None``, ``Optional[X]``, ``X | Y``           null, ``anyOf`` (converted: first arm that fits)
``Literal[...]``, ``Enum`` subclasses          ``enum`` of the values (converted: Enum members)
``list[X]``, ``Sequence[X]``                   array of X
``tuple[X, ...]``, ``tuple[X, Y]``             array of X; ``prefixItems`` (converted: tuple)
``dict[str, X]``                               object, ``additionalProperties`` X
dataclasses, ``TypedDict`` (total, NotRequired) closed objects (converted: instance / dict)
pydantic ``BaseModel`` subclasses              ``model_json_schema()``, ``$defs`` hoisted
``typing.Any``                                 any JSON value
``Annotated[X, ...]``                          X plus keywords, see below
=============================================  ===================================================

``Annotated`` metadata: ``annotated_types`` objects (``Ge``, ``Gt``, ``Le``, ``Lt``, ``Interval``,
``MultipleOf``, ``MinLen``, ``MaxLen``, ``Len``), pydantic ``Field(...)`` (its constraints and
description), a plain string or ``annotated_types.doc(...)`` (a description), and the trellis
spelling defined here, which needs no extra package::

    from trellis.constrain.tools import Ge, Le, Pattern, Keywords
    def roll(sides: Annotated[int, Ge(2), Le(100)], label: Annotated[str, Pattern("[a-z]+")]): ...
    def f(x: Annotated[float, Keywords(minimum=0, exclusiveMaximum=1)]): ...

Parameters with a default are not required. Descriptions come from the docstring: the text before
the first section is the tool description; parameters are read from Google (``Args:``), NumPy
(``Parameters`` + dashes) and reST (``:param x:``) sections. Anything else raises ``TypeError``
naming the parameter.

The package, one module a stage (each imports only those listed before it): ``typeinfo`` (reading
annotations), ``annotated`` (``Annotated`` metadata -> keywords), ``docstrings``, ``schema`` (types ->
JSON Schema), ``convert`` (JSON -> typed values, ``ToolCallError``), ``calls`` (``Tool``, ``ToolCall``),
``constraint`` (the call grammar), ``replies`` (the prompt and parsing a reply).
"""

from __future__ import annotations

from trellis.constrain.tools.annotated import (Description, Ge, Gt, Keywords, Le, Lt, MaxLen, MinLen, MultipleOf,
                                               Pattern)
from trellis.constrain.tools.calls import Tool, ToolCall, as_tool
from trellis.constrain.tools.constraint import (LEADING_WHITESPACE, EitherConstraint, ToolChoice, call_schema,
                                                text_pattern, tool_constraint)
from trellis.constrain.tools.convert import ToolCallError
from trellis.constrain.tools.docstrings import parse_docstring
from trellis.constrain.tools.replies import format_tools_prompt, parse_tool_calls

__all__ = [
    "Description", "EitherConstraint", "Ge", "Gt", "Keywords", "LEADING_WHITESPACE", "Le", "Lt", "MaxLen", "MinLen",
    "MultipleOf", "Pattern", "Tool", "ToolCall", "ToolCallError", "ToolChoice", "as_tool", "call_schema",
    "format_tools_prompt", "parse_docstring", "parse_tool_calls", "text_pattern", "tool_constraint",
]
