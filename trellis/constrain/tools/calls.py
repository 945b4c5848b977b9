"""Tools and calls: ``Tool`` (from a typed function, a JSON Schema or an OpenAI spec), ``ToolCall``
(a parsed call, its arguments converted to the declared types) and ``as_tool`` / ``as_tools``."""

from __future__ import annotations

import inspect
import json
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from trellis.constrain.tools.convert import ToolCallError, convert_value
from trellis.constrain.tools.docstrings import parse_docstring
from trellis.constrain.tools.schema import SchemaBuilder
from trellis.constrain.tools.typeinfo import json_kind
from trellis.errors import UsageError

# ----------------------------------------------------------------------------- Tool, ToolCall


@dataclass(frozen=True)
class Tool:
    """A callable tool: ``name``, ``description``, ``parameters`` (the JSON Schema of the arguments
    object; do not mutate it), an optional Python ``function``, and ``annotations`` (parameter name ->
    Python type) used to convert parsed arguments back to Python values (``None``: JSON values as is)."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}}, hash=False)
    function: Callable[..., Any] | None = field(default=None, compare=False)
    annotations: Mapping[str, Any] | None = field(default=None, hash=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise UsageError("a tool needs a non-empty string name")
        if not isinstance(self.parameters, Mapping):
            raise TypeError(f"tool {self.name!r}: parameters must be a JSON Schema object (dict)")
        kind = self.parameters.get("type", "object")
        if kind != "object":
            raise UsageError(f"tool {self.name!r}: the parameters schema must describe an object, not {kind!r}")

    @classmethod
    def from_function(cls, fn: Callable[..., Any], *, name: str | None = None,
                      description: str | None = None) -> "Tool":
        """A tool from a typed Python function (the supported types: see the ``trellis.constrain.tools`` docstring)."""
        if not callable(fn):
            raise TypeError(f"{fn!r} is not callable")
        tool_name = name or getattr(fn, "__name__", None)
        if not tool_name or tool_name == "<lambda>":
            raise UsageError("cannot name this tool: pass name=...")
        summary, docs = parse_docstring(inspect.getdoc(fn))
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except Exception as e:  # NameError for unresolvable forward references, TypeError for odd objects
            raise TypeError(f"{tool_name}: cannot resolve type hints ({e})") from e
        builder = SchemaBuilder()
        props: dict[str, Any] = {}
        required: list[str] = []
        annotations: dict[str, Any] = {}
        for p in inspect.signature(fn).parameters.values():
            where = f"parameter {p.name!r} of {tool_name}"
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"{where}: *args / **kwargs cannot be described as a JSON object")
            tp = hints.get(p.name, inspect.Parameter.empty)
            schema = builder.schema(tp, where)
            if docs.get(p.name) and "description" not in schema:
                schema = {**schema, "description": docs[p.name]}
            props[p.name] = schema
            annotations[p.name] = tp
            if p.default is inspect.Parameter.empty:
                required.append(p.name)
        params: dict[str, Any] = {"type": "object", "properties": props}
        if required:
            params["required"] = required
        params["additionalProperties"] = False
        if builder.defs:
            params["$defs"] = builder.defs
        return cls(name=tool_name, description=summary if description is None else description,
                   parameters=params, function=fn, annotations=annotations)

    @classmethod
    def from_schema(cls, name: str, parameters: Mapping[str, Any] | str, *, description: str = "",
                    function: Callable[..., Any] | None = None) -> "Tool":
        """A tool from a JSON Schema of its arguments object (a dict or JSON text); arguments stay JSON values."""
        if isinstance(parameters, str):
            parameters = json.loads(parameters)
        return cls(name=name, description=description, parameters=dict(parameters), function=function)

    @classmethod
    def from_openai(cls, spec: Mapping[str, Any], *, function: Callable[..., Any] | None = None) -> "Tool":
        """A tool from an OpenAI tool spec: ``{"type": "function", "function": {"name", "description",
        "parameters"}}`` or just the inner ``{"name", ...}`` object."""
        fn = spec.get("function", spec) if spec.get("type", "function") == "function" else None
        if not isinstance(fn, Mapping) or "name" not in fn:
            raise UsageError(f"not an OpenAI function tool spec: {json.dumps(spec)[:200]}")
        return cls.from_schema(fn["name"], fn.get("parameters") or {"type": "object", "properties": {}},
                               description=fn.get("description", ""), function=function)

    def to_openai(self) -> dict[str, Any]:
        """``{"type": "function", "function": {"name", "description", "parameters"}}``."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}}

    def call(self, arguments: Mapping[str, Any]) -> "ToolCall":
        """A ``ToolCall`` of this tool from parsed JSON ``arguments``, converted to the declared types."""
        if not isinstance(arguments, Mapping):
            raise ToolCallError(f"arguments of {self.name} must be an object, got {json_kind(arguments)}",
                                path=f"{self.name}")
        converted = {}
        for k, v in arguments.items():
            if self.annotations is not None and k not in self.annotations:
                raise ToolCallError(f"unexpected argument {k!r}", path=self.name)
            tp = self.annotations[k] if self.annotations is not None else Any
            converted[k] = convert_value(v, tp, f"{self.name}/{k}")
        required = self.parameters.get("required", [])
        missing = [r for r in required if r not in arguments]
        if missing:
            raise ToolCallError(f"missing required arguments {missing}", path=self.name)
        return ToolCall(name=self.name, arguments=converted, tool=self, raw_arguments=dict(arguments))


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: ``arguments`` hold Python values of the declared types (JSON values for
    schema-only tools); ``raw_arguments`` the JSON the model wrote; ``tool`` the tool called."""

    name: str
    arguments: Mapping[str, Any] = field(hash=False)
    tool: Tool | None = field(default=None, repr=False, compare=False)
    raw_arguments: Mapping[str, Any] | None = field(default=None, repr=False, compare=False, hash=False)

    def invoke(self) -> Any:
        """Run the tool's function with these arguments; ``ValueError`` if the tool has none."""
        fn = self.tool.function if self.tool is not None else None
        if fn is None:
            raise UsageError(f"tool {self.name!r} has no Python function to invoke")
        args: list[Any] = []
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):  # builtins without a signature: keywords it is
            params = []
        for p in params:
            if p.kind is p.POSITIONAL_ONLY:
                # passing a missing positional-only default explicitly equals leaving it out
                args.append(self.arguments[p.name] if p.name in self.arguments else p.default)
        positional = {p.name for p in params if p.kind is p.POSITIONAL_ONLY}
        kwargs = {k: v for k, v in self.arguments.items() if k not in positional}
        while args and args[-1] is inspect.Parameter.empty:
            args.pop()
        return fn(*args, **kwargs)

    def to_json(self) -> dict[str, Any]:
        """``{"name": ..., "arguments": ...}`` as the model wrote it (JSON values)."""
        return {"name": self.name, "arguments": dict(self.raw_arguments if self.raw_arguments is not None
                                                     else self.arguments)}


def as_tool(tool: Tool | Callable[..., Any] | Mapping[str, Any]) -> Tool:
    """A ``Tool`` as is, a Python function via ``Tool.from_function``, an OpenAI spec via ``from_openai``."""
    if isinstance(tool, Tool):
        return tool
    if isinstance(tool, Mapping):
        return Tool.from_openai(tool)
    if callable(tool):
        return Tool.from_function(tool)
    raise TypeError(f"not a tool: {tool!r} (pass a Tool, a typed function or an OpenAI tool spec)")


def as_tools(tools: Sequence[Tool | Callable[..., Any] | Mapping[str, Any]]) -> list[Tool]:
    """``as_tool`` of each; ``ValueError`` for no tools or a name given twice."""
    out = [as_tool(t) for t in tools]
    if not out:
        raise UsageError("no tools given")
    names = [t.name for t in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UsageError(f"duplicate tool names: {dup}")
    return out
