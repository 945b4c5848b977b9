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
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Mapping as AbcMapping
from collections.abc import Sequence as AbcSequence
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Literal, Mapping, Sequence, Union

from torch import Tensor

from trellis.tokens import Vocabulary

ToolChoice = Union[Literal["auto", "required", "none"], str]

__all__ = [
    "Description", "EitherConstraint", "Ge", "Gt", "Keywords", "Le", "Lt", "MaxLen", "MinLen", "MultipleOf",
    "Pattern", "Tool", "ToolCall", "ToolCallError", "as_tool", "call_schema", "format_tools_prompt",
    "parse_docstring", "parse_tool_calls", "text_pattern", "tool_constraint",
]


class ToolCallError(ValueError):
    """Model output that is not a valid call of the given tools; ``path`` locates the culprit."""

    def __init__(self, message: str, *, path: str = "") -> None:
        self.message, self.path = message, path
        super().__init__(f"{path}: {message}" if path else message)


# ----------------------------------------------------------------------------- Annotated keywords
# The trellis spelling of Annotated bounds: same names and attributes as annotated_types, so one
# duck-typed reader (``_metadata_keywords``) handles both.


@dataclass(frozen=True)
class Ge:
    """``Annotated[int, Ge(0)]``: value >= ge (JSON Schema ``minimum``)."""
    ge: float


@dataclass(frozen=True)
class Gt:
    """``Annotated[float, Gt(0)]``: value > gt (``exclusiveMinimum``)."""
    gt: float


@dataclass(frozen=True)
class Le:
    """``Annotated[int, Le(10)]``: value <= le (``maximum``)."""
    le: float


@dataclass(frozen=True)
class Lt:
    """``Annotated[float, Lt(1)]``: value < lt (``exclusiveMaximum``)."""
    lt: float


@dataclass(frozen=True)
class MultipleOf:
    """``Annotated[int, MultipleOf(5)]`` (``multipleOf``)."""
    multiple_of: float


@dataclass(frozen=True)
class MinLen:
    """At least ``min_length`` characters (strings) or items (lists, tuples, dicts)."""
    min_length: int


@dataclass(frozen=True)
class MaxLen:
    """At most ``max_length`` characters (strings) or items (lists, tuples, dicts)."""
    max_length: int


@dataclass(frozen=True)
class Pattern:
    """``Annotated[str, Pattern("[A-Z]{3}")]``: the whole string matches (``pattern``)."""
    pattern: str


@dataclass(frozen=True)
class Description:
    """``Annotated[str, Description("city name")]`` (same as a plain string in ``Annotated``)."""
    description: str


@dataclass(frozen=True, init=False)
class Keywords:
    """Raw JSON Schema keywords merged into the parameter's schema:
    ``Annotated[str, Keywords(format="date", maxLength=10)]``."""

    keywords: Mapping[str, Any] = field(hash=False)

    def __init__(self, **keywords: Any) -> None:
        object.__setattr__(self, "keywords", dict(keywords))


_LENGTH_KEYS = {"string": ("minLength", "maxLength"), "array": ("minItems", "maxItems"),
                "object": ("minProperties", "maxProperties")}


def _metadata_keywords(meta: Any, base: dict[str, Any], where: str) -> dict[str, Any]:
    """JSON Schema keywords of one ``Annotated`` metadata object (trellis, annotated_types, pydantic)."""
    if isinstance(meta, str):
        return {"description": meta}
    if isinstance(meta, Keywords):
        return dict(meta.keywords)
    if type(meta).__name__ == "FieldInfo" and type(meta).__module__.startswith("pydantic"):
        out: dict[str, Any] = {}
        for m in getattr(meta, "metadata", ()):
            out.update(_metadata_keywords(m, base, where))
        if getattr(meta, "description", None):
            out["description"] = meta.description
        return out
    if hasattr(meta, "documentation") and isinstance(meta.documentation, str):  # annotated_types.doc / PEP 727
        return {"description": meta.documentation}
    if hasattr(meta, "__iter__") and not isinstance(meta, (str, bytes, Mapping)):  # annotated_types GroupedMetadata
        out = {}
        for m in meta:
            out.update(_metadata_keywords(m, base, where))
        return out
    for attr, key in (("ge", "minimum"), ("gt", "exclusiveMinimum"), ("le", "maximum"), ("lt", "exclusiveMaximum"),
                      ("multiple_of", "multipleOf"), ("pattern", "pattern"), ("description", "description")):
        if hasattr(meta, attr) and not callable(getattr(meta, attr)):
            return {key: getattr(meta, attr)}
    for attr, idx in (("min_length", 0), ("max_length", 1)):
        if hasattr(meta, attr):
            kind = base.get("type", "string")
            if kind not in _LENGTH_KEYS:
                raise TypeError(f"{where}: {type(meta).__name__} applies to strings, lists and dicts, not {kind}")
            value = getattr(meta, attr)
            return {} if value is None else {_LENGTH_KEYS[kind][idx]: value}
    raise TypeError(f"{where}: unsupported Annotated metadata {meta!r} (use trellis.constrain.tools.Ge/Le/..., "
                    "annotated_types, pydantic.Field or Keywords(...))")


# ----------------------------------------------------------------------------- docstrings

_PARAM_SECTIONS = {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments",
                   "other parameters", "attributes"}
_SECTIONS = _PARAM_SECTIONS | {"returns", "return", "yields", "yield", "raises", "examples", "example", "note",
                               "notes", "warning", "warnings", "see also", "references", "todo", "methods"}
_REST_FIELD = re.compile(r"^:(param|parameter|arg|argument|key|keyword)\s+(?:[^:]*?\s)?\*{0,2}(\w+)\s*:\s*(.*)$")
_GOOGLE_ITEM = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_ITEM = re.compile(r"^\*{0,2}(\w+(?:\s*,\s*\*{0,2}\w+)*)\s*(?::.*)?$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _is_underline(line: str) -> bool:
    s = line.strip()
    return len(s) >= 3 and set(s) == {"-"}


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {parameter: description}) of a Google, NumPy or reST docstring.

    The description is the text before the first section or field, one line per paragraph.
    """
    lines = inspect.cleandoc(doc or "").splitlines()
    params: dict[str, str] = {}
    summary: list[str] = []
    in_summary = True
    i = 0
    while i < len(lines):
        line, stripped = lines[i], lines[i].strip()
        low = stripped.rstrip(":").strip().lower()
        if i + 1 < len(lines) and _is_underline(lines[i + 1]) and low in _SECTIONS:  # NumPy header
            in_summary = False
            i = _numpy_section(lines, i + 2, params if low in _PARAM_SECTIONS else {})
            continue
        if stripped.endswith(":") and low in _SECTIONS:  # Google header
            in_summary = False
            i = _google_section(lines, i + 1, _indent(line), params if low in _PARAM_SECTIONS else {})
            continue
        if stripped.startswith(":") and re.match(r"^:\w", stripped):  # reST field list
            in_summary = False
            m = _REST_FIELD.match(stripped)
            j = i + 1
            text = [m.group(3)] if m else []
            while j < len(lines) and lines[j].strip() and _indent(lines[j]) > _indent(line):
                text.append(lines[j].strip())
                j += 1
            if m:
                params[m.group(2)] = " ".join(t for t in text if t)
            i = j
            continue
        if in_summary:
            summary.append(stripped)
        i += 1
    paragraphs = [" ".join(p.split()) for p in "\n".join(summary).split("\n\n")]
    return "\n".join(p for p in paragraphs if p), params


def _google_section(lines: list[str], i: int, header_indent: int, out: dict[str, str]) -> int:
    item_indent: int | None = None
    name: str | None = None
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        ind = _indent(line)
        if ind <= header_indent:
            break
        if item_indent is None:
            item_indent = ind
        m = _GOOGLE_ITEM.match(line.strip()) if ind == item_indent else None
        if m:
            name = m.group(1)
            out[name] = m.group(2).strip()
        elif name is not None:
            out[name] = (out[name] + " " + line.strip()).strip()
        i += 1
    return i


def _numpy_section(lines: list[str], i: int, out: dict[str, str]) -> int:
    base: int | None = None
    names: list[str] = []
    while i < len(lines):
        line = lines[i]
        if i + 1 < len(lines) and _is_underline(lines[i + 1]) and line.strip():
            break  # the next section's header
        if not line.strip():
            i += 1
            continue
        ind = _indent(line)
        if base is None:
            base = ind
        m = _NUMPY_ITEM.match(line.strip()) if ind <= base else None
        if m:
            names = [n.strip().lstrip("*") for n in m.group(1).split(",")]
            for n in names:
                out[n] = ""
        elif names:
            for n in names:
                out[n] = (out[n] + " " + line.strip()).strip()
        i += 1
    return i


# ----------------------------------------------------------------------------- types -> JSON Schema

_NONE_TYPE = type(None)
_JSON_SCALARS = (str, int, float, bool, _NONE_TYPE)


def _strip_required(tp: Any) -> Any:
    """``Required[X]`` / ``NotRequired[X]`` (TypedDict markers) -> ``X``."""
    origin = typing.get_origin(tp)
    names = {getattr(origin, "_name", None), getattr(origin, "__name__", None)}
    if origin is not None and names & {"Required", "NotRequired", "ReadOnly"}:
        return _strip_required(typing.get_args(tp)[0])
    return tp


def _is_pydantic_model(tp: Any) -> bool:
    if not isinstance(tp, type):
        return False
    try:  # pydantic is optional: only models of an installed pydantic can occur
        from pydantic import BaseModel
    except ImportError:
        return False
    return issubclass(tp, BaseModel)


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__total__") and hasattr(tp, "__annotations__")


def _hints(tp: Any, where: str) -> dict[str, Any]:
    try:
        return typing.get_type_hints(tp, include_extras=True)
    except Exception as e:  # NameError: a forward reference to a name not in the module's globals
        raise TypeError(f"{where}: cannot resolve the type hints of {getattr(tp, '__name__', tp)!r} ({e})") from e


def _typeddict_required(tp: Any, key: str, hint: Any) -> bool:
    """Whether a TypedDict key is required. ``Required``/``NotRequired`` are read from the resolved
    hint too: with ``from __future__ import annotations`` Python 3.10-3.11 cannot see them in
    ``__required_keys__``."""
    origin = typing.get_origin(hint)
    name = getattr(origin, "_name", None) or getattr(origin, "__name__", None)
    if name == "NotRequired":
        return False
    if name == "Required":
        return True
    return key in tp.__required_keys__


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    origin = typing.get_origin(tp)
    if origin is Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        return typing.get_args(tp)
    return None


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    kinds = {_kind(v) for v in values}
    return {"type": kinds.pop(), "enum": values} if len(kinds) == 1 else {"enum": values}


class _SchemaBuilder:
    """Builds one tool's schema; collects pydantic ``$defs`` to hoist to the root."""

    def __init__(self) -> None:
        self.defs: dict[str, Any] = {}
        self._active: set[Any] = set()  # classes being expanded (recursion guard)

    def schema(self, tp: Any, where: str) -> dict[str, Any]:
        if tp is inspect.Parameter.empty:
            raise TypeError(f"{where}: missing type annotation (annotate it, e.g. with str or typing.Any)")
        if tp is Any:
            return {}
        if tp is None or tp is _NONE_TYPE:
            return {"type": "null"}
        if tp is bool:
            return {"type": "boolean"}
        if tp is int:
            return {"type": "integer"}
        if tp is float:
            return {"type": "number"}
        if tp is str:
            return {"type": "string"}
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is typing.Annotated:
            out = self.schema(args[0], where)
            for meta in tp.__metadata__:
                out.update(_metadata_keywords(meta, out, where))
            return out
        union = _union_args(tp)
        if union is not None:
            return {"anyOf": [self.schema(a, where) for a in union]}
        if origin is Literal:
            values = [v.value if isinstance(v, enum.Enum) else v for v in args]
            if not all(isinstance(v, _JSON_SCALARS) for v in values):
                raise TypeError(f"{where}: Literal values must be str, int, float, bool or None, got {args!r}")
            return _enum_schema(values)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            values = [m.value for m in tp]
            if not all(isinstance(v, _JSON_SCALARS) for v in values):
                raise TypeError(f"{where}: enum {tp.__name__} has values that are not JSON scalars")
            return _enum_schema(values)
        if tp in (list, tuple) or origin in (list, AbcSequence, typing.Sequence):
            return {"type": "array", "items": self.schema(args[0], f"{where}[]")} if args else {"type": "array"}
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return {"type": "array", "items": self.schema(args[0], f"{where}[]")}
            if args == ((),):  # tuple[()]
                args = ()
            return {"type": "array", "prefixItems": [self.schema(a, f"{where}[{k}]") for k, a in enumerate(args)],
                    "items": False, "minItems": len(args), "maxItems": len(args)}
        if tp is dict or origin in (dict, AbcMapping, typing.Mapping):
            if not args:
                return {"type": "object"}
            if args[0] is not str:
                raise TypeError(f"{where}: dict keys must be str (JSON object keys), got {args[0]!r}")
            return {"type": "object", "additionalProperties": self.schema(args[1], f"{where}{{}}")}
        if _is_pydantic_model(tp):
            return self._pydantic(tp)
        if isinstance(tp, type) and (dataclasses.is_dataclass(tp) or _is_typeddict(tp)):
            if tp in self._active:
                raise TypeError(f"{where}: recursive type {tp.__name__} is not supported (use a pydantic model)")
            self._active.add(tp)
            try:
                return self._record(tp, where)
            finally:
                self._active.discard(tp)
        raise TypeError(f"{where}: unsupported type annotation {tp!r}")

    def _record(self, tp: type, where: str) -> dict[str, Any]:
        hints = _hints(tp, where)
        _, docs = parse_docstring(tp.__doc__ if tp.__doc__ and not tp.__doc__.startswith(tp.__name__ + "(") else "")
        if dataclasses.is_dataclass(tp):
            fields = [f for f in dataclasses.fields(tp) if f.init]
            names = [f.name for f in fields]
            required = [f.name for f in fields
                        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
            for f in fields:
                if "description" in f.metadata:
                    docs[f.name] = f.metadata["description"]
        else:
            names = list(hints)
            required = [n for n in names if _typeddict_required(tp, n, hints[n])]
        props = {}
        for n in names:
            props[n] = self.schema(_strip_required(hints[n]), f"{where}.{n}")
            if docs.get(n) and "description" not in props[n]:
                props[n]["description"] = docs[n]
        out: dict[str, Any] = {"type": "object", "properties": props}
        if required:
            out["required"] = required
        out["additionalProperties"] = False
        return out

    def _pydantic(self, model: type) -> dict[str, Any]:
        # Closed: pydantic drops unknown keys anyway, and an open object lets a model ramble on.
        return self.hoist(_close_objects(copy.deepcopy(model.model_json_schema())))

    def hoist(self, schema: dict[str, Any]) -> dict[str, Any]:
        """Move ``schema``'s ``$defs`` into ``self.defs`` (renaming clashes) and rewrite its refs."""
        defs = dict(schema.pop("$defs", {}))
        defs.update(schema.pop("definitions", {}))
        renames: dict[str, str] = {}
        for name, sub in defs.items():
            new = name
            k = 2
            while new in self.defs and self.defs[new] != sub:
                new = f"{name}_{k}"
                k += 1
            renames[name] = new
        rewritten = {renames[n]: _rewrite_refs(s, renames) for n, s in defs.items()}
        for n, s in rewritten.items():
            self.defs.setdefault(n, s)
        return _rewrite_refs(schema, renames)


def _close_objects(node: Any) -> Any:
    """``additionalProperties: false`` (in place) on every object schema with ``properties`` and no
    ``additionalProperties`` / ``patternProperties``."""
    if isinstance(node, dict):
        if isinstance(node.get("properties"), dict) and node.get("type", "object") == "object" \
                and "additionalProperties" not in node and "patternProperties" not in node:
            node["additionalProperties"] = False
        for k, v in node.items():
            if k not in ("enum", "const", "default", "examples"):
                _close_objects(v)
    elif isinstance(node, list):
        for v in node:
            _close_objects(v)
    return node


def _rewrite_refs(node: Any, renames: Mapping[str, str], prefix: str = "") -> Any:
    """Copy of ``node`` with ``#/$defs/X`` / ``#/definitions/X`` refs renamed to ``#/$defs/renames[X]``
    and any other local ref ``#/p`` moved under ``prefix`` (the pointer where ``node`` is embedded)."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str) and v.startswith("#"):
                m = re.match(r"^#/(?:\$defs|definitions)/([^/]+)(.*)$", v)
                if m:
                    v = f"#/$defs/{renames.get(m.group(1), m.group(1))}{m.group(2)}"
                elif prefix:
                    v = "#" + prefix + v[1:]
                out[k] = v
            elif k in ("enum", "const", "default", "examples"):
                out[k] = v  # data, not subschemas
            else:
                out[k] = _rewrite_refs(v, renames, prefix)
        return out
    if isinstance(node, list):
        return [_rewrite_refs(v, renames, prefix) for v in node]
    return node


# ----------------------------------------------------------------------------- JSON -> Python values


def _kind(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object",
            _NONE_TYPE: "null"}.get(type(value), type(value).__name__)


def _convert(value: Any, tp: Any, path: str) -> Any:
    """``value`` (parsed JSON) as an instance of annotation ``tp``; ``ToolCallError`` if it does not fit."""
    def bad(what: str) -> ToolCallError:
        return ToolCallError(f"expected {what}, got {_kind(value)} {value!r}"[:200], path=path)

    if tp is Any or tp is inspect.Parameter.empty:
        return value
    if tp is None or tp is _NONE_TYPE:
        if value is not None:
            raise bad("null")
        return None
    if tp is bool:
        if not isinstance(value, bool):
            raise bad("a boolean")
        return value
    if tp is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)  # JSON Schema counts 1.0 as an integer
        if not isinstance(value, int) or isinstance(value, bool):
            raise bad("an integer")
        return value
    if tp is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise bad("a number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise bad("a string")
        return value
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return _convert(value, args[0], path)
    union = _union_args(tp)
    if union is not None:
        for arm in union:
            try:
                return _convert(value, arm, path)
            except ToolCallError:
                continue
        raise bad(" or ".join(getattr(a, "__name__", repr(a)) for a in union))
    if origin is Literal:
        for lit in args:
            raw = lit.value if isinstance(lit, enum.Enum) else lit
            if raw == value and type(raw) is type(value):
                return lit
        raise bad(f"one of {list(args)!r}")
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise bad(f"a {tp.__name__} value") from None
    if tp in (list, tuple) or origin in (list, tuple, AbcSequence, typing.Sequence):
        if not isinstance(value, list):
            raise bad("an array")
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            items = () if args == ((),) else args
            if len(value) != len(items):
                raise bad(f"an array of {len(items)} items")
            return tuple(_convert(v, a, f"{path}/{k}") for k, (v, a) in enumerate(zip(value, items)))
        item = args[0] if args else Any
        out = [_convert(v, item, f"{path}/{k}") for k, v in enumerate(value)]
        return tuple(out) if (tp is tuple or origin is tuple) else out
    if tp is dict or origin in (dict, AbcMapping, typing.Mapping):
        if not isinstance(value, dict):
            raise bad("an object")
        vt = args[1] if args else Any
        return {k: _convert(v, vt, f"{path}/{k}") for k, v in value.items()}
    if _is_pydantic_model(tp):
        from pydantic import ValidationError

        try:
            return tp.model_validate(value)
        except ValidationError as e:
            raise ToolCallError(str(e).splitlines()[0] + f" ({e.error_count()} errors)", path=path) from None
    if isinstance(tp, type) and (dataclasses.is_dataclass(tp) or _is_typeddict(tp)):
        if not isinstance(value, dict):
            raise bad(f"an object ({tp.__name__})")
        hints = _hints(tp, path)
        fields = [f.name for f in dataclasses.fields(tp) if f.init] if dataclasses.is_dataclass(tp) else list(hints)
        extra = set(value) - set(fields)
        if extra:
            raise ToolCallError(f"unexpected keys {sorted(extra)} for {tp.__name__}", path=path)
        kw = {k: _convert(v, _strip_required(hints[k]), f"{path}/{k}") for k, v in value.items()}
        if _is_typeddict(tp):
            missing = {k for k in hints if _typeddict_required(tp, k, hints[k])} - set(kw)
            if missing:
                raise ToolCallError(f"missing keys {sorted(missing)} for {tp.__name__}", path=path)
            return kw
        try:
            return tp(**kw)
        except TypeError as e:
            raise ToolCallError(str(e), path=path) from None
    return value


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
            raise ValueError("a tool needs a non-empty string name")
        if not isinstance(self.parameters, Mapping):
            raise TypeError(f"tool {self.name!r}: parameters must be a JSON Schema object (dict)")
        kind = self.parameters.get("type", "object")
        if kind != "object":
            raise ValueError(f"tool {self.name!r}: the parameters schema must describe an object, not {kind!r}")

    @classmethod
    def from_function(cls, fn: Callable[..., Any], *, name: str | None = None,
                      description: str | None = None) -> "Tool":
        """A tool from a typed Python function (see the module docstring for the supported types)."""
        if not callable(fn):
            raise TypeError(f"{fn!r} is not callable")
        tool_name = name or getattr(fn, "__name__", None)
        if not tool_name or tool_name == "<lambda>":
            raise ValueError("cannot name this tool: pass name=...")
        summary, docs = parse_docstring(inspect.getdoc(fn))
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except Exception as e:  # NameError for unresolvable forward references, TypeError for odd objects
            raise TypeError(f"{tool_name}: cannot resolve type hints ({e})") from e
        builder = _SchemaBuilder()
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
            raise ValueError(f"not an OpenAI function tool spec: {json.dumps(spec)[:200]}")
        return cls.from_schema(fn["name"], fn.get("parameters") or {"type": "object", "properties": {}},
                               description=fn.get("description", ""), function=function)

    def to_openai(self) -> dict[str, Any]:
        """``{"type": "function", "function": {"name", "description", "parameters"}}``."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}}

    def call(self, arguments: Mapping[str, Any]) -> "ToolCall":
        """A ``ToolCall`` of this tool from parsed JSON ``arguments``, converted to the declared types."""
        if not isinstance(arguments, Mapping):
            raise ToolCallError(f"arguments of {self.name} must be an object, got {_kind(arguments)}",
                                path=f"{self.name}")
        converted = {}
        for k, v in arguments.items():
            if self.annotations is not None and k not in self.annotations:
                raise ToolCallError(f"unexpected argument {k!r}", path=self.name)
            tp = self.annotations[k] if self.annotations is not None else Any
            converted[k] = _convert(v, tp, f"{self.name}/{k}")
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
            raise ValueError(f"tool {self.name!r} has no Python function to invoke")
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


def _as_tools(tools: Sequence[Tool | Callable[..., Any] | Mapping[str, Any]]) -> list[Tool]:
    out = [as_tool(t) for t in tools]
    if not out:
        raise ValueError("no tools given")
    names = [t.name for t in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"duplicate tool names: {dup}")
    return out


# ----------------------------------------------------------------------------- the call grammar


def call_schema(tools: Sequence[Tool | Callable[..., Any]], *, tool_choice: ToolChoice = "required",
                parallel: bool = False) -> dict[str, Any]:
    """The JSON Schema of a reply that calls a tool: ``anyOf`` one ``{"name", "arguments"}`` object per
    tool (only the named one for ``tool_choice=<name>``), or a list of them when ``parallel``.

    Each tool's ``$defs`` are hoisted to the root (renamed on clashes), other local ``$ref``s are
    moved to where the parameters schema is embedded.
    """
    ts = _as_tools(tools)
    if tool_choice == "none":
        raise ValueError('tool_choice="none" allows no call, so there is no call schema')
    if tool_choice not in ("auto", "required"):
        ts = [t for t in ts if t.name == tool_choice]
        if not ts:
            raise ValueError(f"tool_choice {tool_choice!r} names no tool (have: {[t.name for t in _as_tools(tools)]})")
    builder = _SchemaBuilder()
    alternatives = []
    for k, t in enumerate(ts):
        params = builder.hoist(copy.deepcopy(dict(t.parameters)))
        at = f"/anyOf/{k}" if len(ts) > 1 else ""
        at = ("/items" if parallel else "") + at + "/properties/arguments"
        params = _rewrite_refs(params, {}, prefix=at)
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
        fn = getattr(c, "forced_tokens", None)
        return list(fn(s)) if fn is not None else []

    def __repr__(self) -> str:
        return f"EitherConstraint({self.a!r}, {self.b!r})"


LEADING_WHITESPACE = 2
"""Whitespace bytes allowed before a call: models like to start a reply with a space or a newline."""


def tool_constraint(tools: Sequence[Tool | Callable[..., Any]], vocab: Vocabulary, *,
                    tool_choice: ToolChoice = "auto", parallel: bool = False,
                    whitespace: Literal["compact", "flexible"] = "flexible", max_whitespace: int = 1,
                    lenient: bool = False) -> Any:
    """The exact Constraint of a reply under ``tool_choice`` (see the module docstring).

    The call is ``call_schema(...)`` compiled by ``JsonSchema`` with the given ``whitespace`` /
    ``max_whitespace`` (default: at most one whitespace byte around
    punctuation, so ``{"a": 1, "b": 2}`` and the compact form both fit, but a weak model cannot
    loop on spaces), preceded by up to ``LEADING_WHITESPACE`` whitespace bytes. ``lenient``: see
    ``JsonSchema``; otherwise a schema keyword that cannot be enforced raises ``SchemaError``.
    """
    from trellis.constrain.compile import SchemaGrammar
    from trellis.constrain.compile import compile as compile_grammar
    from trellis.constrain.json_schema import JsonSchema
    from trellis.constrain.regex import Regex

    if tool_choice == "none":
        _as_tools(tools)  # still validated
        return compile_grammar(Regex(text_pattern(parallel=parallel)), vocab)
    schema = call_schema(tools, tool_choice=tool_choice, parallel=parallel)
    lark = JsonSchema(schema, whitespace=whitespace, max_whitespace=max_whitespace, lenient=lenient).to_lark()
    # The schema grammar allows no whitespace around the whole value; a start rule of our own puts
    # the optional leading run in front (rule/terminal names chosen not to clash with its own).
    lark += (f"\ntrellis_tool_reply: TRELLIS_LEAD_WS start | start\n"
             f"TRELLIS_LEAD_WS: /[ \\t\\r\\n]{{1,{LEADING_WHITESPACE}}}/\n")
    call = compile_grammar(SchemaGrammar(lark), vocab, start="trellis_tool_reply")
    if tool_choice != "auto":
        return call
    text = compile_grammar(Regex(text_pattern(parallel=parallel)), vocab)
    return EitherConstraint(call, text)


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
    ts = {t.name: t for t in _as_tools(tools)}
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
