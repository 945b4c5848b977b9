"""Python types -> JSON Schema: ``SchemaBuilder`` (one tool's parameter types, pydantic ``$defs`` hoisted
to the root), ``rewrite_refs`` (renamed and moved ``$ref``s) and closing pydantic objects."""

from __future__ import annotations

import copy
import dataclasses
import enum
import inspect
import re
import typing
from collections.abc import Mapping as AbcMapping
from collections.abc import Sequence as AbcSequence
from typing import Any, Literal, Mapping

from trellis.constrain.tools.annotated import metadata_keywords
from trellis.constrain.tools.docstrings import parse_docstring
from trellis.constrain.tools.typeinfo import (NONE_TYPE, is_pydantic_model, is_typeddict, json_kind, strip_required,
                                              type_hints, typeddict_required, union_args)

# ----------------------------------------------------------------------------- types -> JSON Schema

_JSON_SCALARS = (str, int, float, bool, NONE_TYPE)


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    kinds = {json_kind(v) for v in values}
    return {"type": kinds.pop(), "enum": values} if len(kinds) == 1 else {"enum": values}


class SchemaBuilder:
    """Builds one tool's schema; collects pydantic ``$defs`` to hoist to the root."""

    def __init__(self) -> None:
        self.defs: dict[str, Any] = {}
        self._active: set[Any] = set()  # classes being expanded (recursion guard)

    def schema(self, tp: Any, where: str) -> dict[str, Any]:
        if tp is inspect.Parameter.empty:
            raise TypeError(f"{where}: missing type annotation (annotate it, e.g. with str or typing.Any)")
        if tp is Any:
            return {}
        if tp is None or tp is NONE_TYPE:
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
                out.update(metadata_keywords(meta, out, where))
            return out
        union = union_args(tp)
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
        if is_pydantic_model(tp):
            return self._pydantic(tp)
        if isinstance(tp, type) and (dataclasses.is_dataclass(tp) or is_typeddict(tp)):
            if tp in self._active:
                raise TypeError(f"{where}: recursive type {tp.__name__} is not supported (use a pydantic model)")
            self._active.add(tp)
            try:
                return self._record(tp, where)
            finally:
                self._active.discard(tp)
        raise TypeError(f"{where}: unsupported type annotation {tp!r}")

    def _record(self, tp: type, where: str) -> dict[str, Any]:
        hints = type_hints(tp, where)
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
            required = [n for n in names if typeddict_required(tp, n, hints[n])]
        props = {}
        for n in names:
            props[n] = self.schema(strip_required(hints[n]), f"{where}.{n}")
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
        rewritten = {renames[n]: rewrite_refs(s, renames) for n, s in defs.items()}
        for n, s in rewritten.items():
            self.defs.setdefault(n, s)
        return rewrite_refs(schema, renames)


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


def rewrite_refs(node: Any, renames: Mapping[str, str], prefix: str = "") -> Any:
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
                out[k] = rewrite_refs(v, renames, prefix)
        return out
    if isinstance(node, list):
        return [rewrite_refs(v, renames, prefix) for v in node]
    return node
