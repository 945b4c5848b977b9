"""Per-request constraint arguments of a serving engine -> a checked spec -> a shared ``Constraint``.

A server receives the constraint of each request as plain values (vLLM: ``SamplingParams.extra_args``
offline, ``vllm_xargs`` in an OpenAI request online, whose values may only be strings, numbers or
lists of them). The keys, all optional, at most one of the first five per request:

==============================  =================================================================
``trellis_grammar``             a grammar shipped in ``trellis/grammars`` (``"json.lark"``,
                                ``"json"``) or Lark grammar text
``trellis_gbnf``                llama.cpp GBNF grammar text
``trellis_schema``              a JSON Schema: a dict, or its JSON text
``trellis_regex``               a regular expression (Python syntax; the whole output matches)
``trellis_tools``               OpenAI tool specs (a list, or its JSON text): the reply is a call
``trellis_tool_choice``         with tools: ``"required"`` (default), ``"auto"``, ``"none"`` or a
                                tool name (``trellis.constrain.tools``)
``trellis_parallel_tool_calls`` with tools: a JSON list of calls (``true``/``1``/``"true"``)
``trellis_whitespace``          with a schema or tools: ``"compact"`` (schema default) or
                                ``"flexible"`` (tools default)
==============================  =================================================================

Other ``trellis_*`` keys are refused by name (a typo must not silently unconstrain a request); keys
without the prefix belong to others and are ignored. A client of a server must not make it open
files: a grammar string is never read as a path (a shipped name or grammar text only), and its
``%import``s may name only Lark's bundled grammars (``common.WORD``), never relative files.

``parse(extra_args)`` returns a ``RequestSpec`` (hashable: equal specs share one compiled
constraint) or ``None``; ``check(spec)`` raises the ``GrammarError``/``SchemaError``/``ValueError``
that compiling would raise about the grammar itself, without a vocabulary (what a server checks
before accepting a request); ``build(spec, vocab)`` compiles it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from trellis.constrain.base import Constraint
from trellis.constrain.errors import SchemaError
from trellis.tokens import Vocabulary

PREFIX = "trellis_"
KINDS = ("grammar", "gbnf", "schema", "regex", "tools")
OPTIONS = ("tool_choice", "parallel_tool_calls", "whitespace")
KEYS = tuple(PREFIX + k for k in KINDS + OPTIONS)


class RequestSpecError(ValueError):
    """Per-request constraint arguments that are malformed (wrong key, type or combination)."""


@dataclass(frozen=True)
class RequestSpec:
    """One request's constraint: ``kind`` (one of ``KINDS``) and its canonical ``text`` (grammar
    or regex text, a shipped grammar name, or canonical JSON of a schema or tool list), plus the
    options that change the language."""

    kind: str
    text: str
    tool_choice: str = "required"
    parallel: bool = False
    whitespace: str | None = None

    def describe(self) -> str:
        head = self.text if len(self.text) <= 40 else self.text[:37] + "..."
        return f"{self.kind} {head!r}"


def _json_text(value: Any, key: str) -> str:
    """Compact JSON text of a dict/list value or of JSON text (equal schemas share a key; key order
    is kept: a schema's property order is its output's key order)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise RequestSpecError(f"{key}: invalid JSON ({e})") from None
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise RequestSpecError(f"{key}: not JSON data ({e})") from None


def _flag(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    raise RequestSpecError(f"{key}: expected true or false, got {value!r}")


def parse(extra_args: Mapping[str, Any] | None) -> RequestSpec | None:
    """The ``RequestSpec`` in ``extra_args``, ``None`` when it names no constraint."""
    if not extra_args:
        return None
    ours = {k: v for k, v in extra_args.items() if isinstance(k, str) and k.startswith(PREFIX)}
    unknown = sorted(set(ours) - set(KEYS))
    if unknown:
        raise RequestSpecError(f"unknown trellis argument(s) {unknown}; known: {list(KEYS)}")
    kinds = [k for k in KINDS if PREFIX + k in ours]
    if len(kinds) > 1:
        raise RequestSpecError(f"pass one of {[PREFIX + k for k in KINDS]}, got {[PREFIX + k for k in kinds]}")
    if not kinds:
        if ours:
            raise RequestSpecError(f"{sorted(ours)} given without a constraint ({[PREFIX + k for k in KINDS]})")
        return None
    kind = kinds[0]
    key = PREFIX + kind
    value = ours[key]
    if kind in ("schema", "tools"):
        text = _json_text(value, key)
    elif isinstance(value, str) and value:
        text = value
    else:
        raise RequestSpecError(f"{key}: expected non-empty text, got {type(value).__name__}")
    if kind != "tools" and (PREFIX + "tool_choice" in ours or PREFIX + "parallel_tool_calls" in ours):
        raise RequestSpecError("trellis_tool_choice / trellis_parallel_tool_calls go with trellis_tools")
    whitespace = ours.get(PREFIX + "whitespace")
    if whitespace is not None:
        if kind not in ("schema", "tools"):
            raise RequestSpecError("trellis_whitespace goes with trellis_schema or trellis_tools")
        if whitespace not in ("compact", "flexible"):
            raise RequestSpecError(f"trellis_whitespace: 'compact' or 'flexible', got {whitespace!r}")
    choice = ours.get(PREFIX + "tool_choice", "required")
    if not isinstance(choice, str) or not choice:
        raise RequestSpecError(f"trellis_tool_choice: expected a string, got {choice!r}")
    parallel = _flag(ours.get(PREFIX + "parallel_tool_calls", False), PREFIX + "parallel_tool_calls")
    return RequestSpec(kind, text, tool_choice=choice, parallel=parallel, whitespace=whitespace)


_IMPORT = re.compile(r"^[ \t]*%import[ \t]+(\.*)([\w.]*)", re.M)
LARK_BUNDLED = ("common", "unicode", "python", "lark")  # the grammars inside the lark package


def _refuse_file_imports(text: str) -> None:
    """A request's Lark text may import only Lark's bundled grammars: a relative ``%import``
    would make the server read ``.lark`` files of its own on a client's behalf."""
    for m in _IMPORT.finditer(text):
        dots, name = m.group(1), m.group(2)
        if dots or name.split(".")[0] not in LARK_BUNDLED:
            raise RequestSpecError(f"trellis_grammar: %import {dots}{name} refused: a request grammar may import "
                                   f"only Lark's bundled grammars ({', '.join(LARK_BUNDLED)}), never files")


def _grammar(spec: RequestSpec) -> Any:
    """The trellis grammar object of a grammar/gbnf/schema/regex spec (no vocabulary needed)."""
    from trellis.constrain.compile import GRAMMAR_DIR, shipped_grammars
    from trellis.constrain.frontends.gbnf import Gbnf
    from trellis.constrain.frontends.json_schema import JsonSchema
    from trellis.constrain.regex_constraint import Regex

    if spec.kind == "schema":
        return JsonSchema(json.loads(spec.text), whitespace=spec.whitespace or "compact")
    if spec.kind == "regex":
        return Regex(spec.text)
    if spec.kind == "gbnf":
        return Gbnf(spec.text, source="<gbnf>")
    # grammar: a shipped name, else text (load_grammar_text would also open a path: not here)
    name = spec.text.strip()
    if "\n" not in name:
        shipped = set(shipped_grammars())
        for candidate in (name, name + ".lark"):
            if candidate in shipped:
                path = GRAMMAR_DIR / candidate
                return Gbnf.from_file(path) if candidate.endswith(".gbnf") else str(path)
    _refuse_file_imports(spec.text)
    return spec.text if "\n" in spec.text else spec.text + "\n"  # one line is text, never a path


def _tools(spec: RequestSpec) -> list[Any]:
    from trellis.constrain.tools import as_tool

    data = json.loads(spec.text)
    if not isinstance(data, list) or not data:
        raise RequestSpecError("trellis_tools: expected a non-empty list of OpenAI tool specs")
    tools = []
    for t in data:
        if not isinstance(t, Mapping):
            raise RequestSpecError(f"trellis_tools: each tool is an OpenAI tool spec object, got {type(t).__name__}")
        try:
            tools.append(as_tool(t))
        except (TypeError, KeyError) as e:
            raise RequestSpecError(f"trellis_tools: {e}") from None
    return tools


def check(spec: RequestSpec) -> None:
    """Raise what compiling ``spec`` would raise about the grammar itself (no vocabulary)."""
    from trellis.constrain.compile import check_grammar
    from trellis.constrain.frontends.json_schema import JsonSchema
    from trellis.constrain.automata.regex import regex_to_byte_dfa
    from trellis.constrain.tools import call_schema

    if spec.kind == "tools":
        tools = _tools(spec)
        if spec.tool_choice == "none":
            return
        schema = call_schema(tools, tool_choice=spec.tool_choice, parallel=spec.parallel)
        JsonSchema(schema, whitespace=spec.whitespace or "flexible").to_lark()
        return
    if spec.kind == "schema":
        try:
            json.loads(spec.text)
        except json.JSONDecodeError as e:  # parse() made it; a hand-built spec may not be JSON
            raise SchemaError(f"invalid JSON ({e})") from None
    if spec.kind == "regex":
        regex_to_byte_dfa(spec.text)
        return
    check_grammar(_grammar(spec))


def build(spec: RequestSpec, vocab: Vocabulary) -> Constraint:
    """The compiled constraint of ``spec`` for ``vocab``."""
    from trellis.constrain.compile import compile as compile_grammar
    from trellis.constrain.tools import tool_constraint

    if spec.kind == "tools":
        return tool_constraint(_tools(spec), vocab, tool_choice=spec.tool_choice,  # type: ignore[arg-type]
                               parallel=spec.parallel, whitespace=spec.whitespace or "flexible")  # type: ignore[arg-type]
    return compile_grammar(_grammar(spec), vocab)
