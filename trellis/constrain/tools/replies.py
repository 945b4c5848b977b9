"""The text around the grammar: ``format_tools_prompt`` (the default prompt listing the tools) and
``parse_tool_calls`` (a reply -> its converted ``ToolCall``s, ``[]`` for text)."""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from trellis.constrain.tools.calls import Tool, ToolCall, as_tools
from trellis.constrain.tools.convert import ToolCallError

# ----------------------------------------------------------------------------- parsing replies


def parse_tool_calls(text: str | None, tools: Sequence[Tool | Callable[..., Any]], *, parallel: bool = False,
                     lenient: bool = False) -> list[ToolCall]:
    """The calls in a reply: ``[]`` when it is text (first non-whitespace character not ``{``, or
    ``[`` with ``parallel``), else the parsed call(s), converted (``ToolCallError`` if invalid).

    ``lenient=True`` (for unconstrained output) takes the first JSON object or list anywhere in the
    text and ignores what follows it.
    """
    if text is None:
        return []
    ts = {t.name: t for t in as_tools(tools)}
    s = text.strip()
    markers = "{[" if parallel else "{"
    if lenient:
        starts = [k for k in (s.find(c) for c in "{[") if k >= 0]
        if not starts:
            return []
        try:
            data, _ = json.JSONDecoder().raw_decode(s, min(starts))
        except json.JSONDecodeError as e:
            raise ToolCallError(f"invalid JSON: {e}") from None
    else:
        if not s or s[0] not in markers:
            return []
        try:
            data = json.loads(s)
        except json.JSONDecodeError as e:
            raise ToolCallError(f"invalid JSON: {e}") from None
    items = data if isinstance(data, list) else [data]
    if isinstance(data, list) and not parallel and not lenient:
        raise ToolCallError("a list of calls needs parallel=True")
    calls = []
    for k, item in enumerate(items):
        where = f"/{k}" if isinstance(data, list) else ""
        if not isinstance(item, dict) or set(item) != {"name", "arguments"}:
            raise ToolCallError('a call is an object {"name": ..., "arguments": {...}}', path=where or "/")
        tool = ts.get(item["name"]) if isinstance(item["name"], str) else None
        if tool is None:
            raise ToolCallError(f"unknown tool {item['name']!r} (have: {sorted(ts)})", path=f"{where}/name")
        calls.append(tool.call(item["arguments"]))
    return calls


# ----------------------------------------------------------------------------- prompting


def format_tools_prompt(tools: Sequence[Tool], prompt: str) -> str:
    """The default ``tool_prompt`` of ``generate``: a plain-text listing of the tools (name,
    description, parameters as JSON Schema), the call format, then ``Request: <prompt>`` and
    ``Tool call or answer:``. Made for base models (on Gemma 3 270M this wording picked the right
    tool more often than ``User:``/``Assistant:`` turns); pass your own function of the same
    signature for a chat template or another layout. The grammar, not the prompt, guarantees the
    format.
    """
    lines = ["You can call the following tools.", ""]
    for t in tools:
        lines.append(f"- {t.name}: {t.description}".rstrip(": ") if t.description else f"- {t.name}")
        lines.append(f"  arguments (JSON Schema): {json.dumps(dict(t.parameters), ensure_ascii=False)}")
    lines += ["",
              'To call a tool, reply with one JSON object: {"name": "<tool name>", "arguments": {<arguments>}}.',
              "Otherwise, reply in plain text.",
              "",
              f"Request: {prompt}",
              "Tool call or answer:"]
    return "\n".join(lines)
