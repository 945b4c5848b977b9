"""JSON -> Python values: ``convert_value`` turns a parsed JSON argument into an instance of its
declared annotation; ``ToolCallError`` says where model output is not a valid call."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import typing
from collections.abc import Mapping as AbcMapping
from collections.abc import Sequence as AbcSequence
from typing import Any, Literal

from trellis.constrain.tools.typeinfo import (NONE_TYPE, is_pydantic_model, is_typeddict, json_kind, strip_required,
                                              type_hints, typeddict_required, union_args)


class ToolCallError(ValueError):
    """Model output that is not a valid call of the given tools; ``path`` locates the culprit."""

    def __init__(self, message: str, *, path: str = "") -> None:
        self.message, self.path = message, path
        super().__init__(f"{path}: {message}" if path else message)


# ----------------------------------------------------------------------------- JSON -> Python values


def convert_value(value: Any, tp: Any, path: str) -> Any:
    """``value`` (parsed JSON) as an instance of annotation ``tp``; ``ToolCallError`` if it does not fit."""
    def bad(what: str) -> ToolCallError:
        return ToolCallError(f"expected {what}, got {json_kind(value)} {value!r}"[:200], path=path)

    if tp is Any or tp is inspect.Parameter.empty:
        return value
    if tp is None or tp is NONE_TYPE:
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
        return convert_value(value, args[0], path)
    union = union_args(tp)
    if union is not None:
        for arm in union:
            try:
                return convert_value(value, arm, path)
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
            return tuple(convert_value(v, a, f"{path}/{k}") for k, (v, a) in enumerate(zip(value, items)))
        item = args[0] if args else Any
        out = [convert_value(v, item, f"{path}/{k}") for k, v in enumerate(value)]
        return tuple(out) if (tp is tuple or origin is tuple) else out
    if tp is dict or origin in (dict, AbcMapping, typing.Mapping):
        if not isinstance(value, dict):
            raise bad("an object")
        vt = args[1] if args else Any
        return {k: convert_value(v, vt, f"{path}/{k}") for k, v in value.items()}
    if is_pydantic_model(tp):
        from pydantic import ValidationError

        try:
            return tp.model_validate(value)
        except ValidationError as e:
            raise ToolCallError(str(e).splitlines()[0] + f" ({e.error_count()} errors)", path=path) from None
    if isinstance(tp, type) and (dataclasses.is_dataclass(tp) or is_typeddict(tp)):
        if not isinstance(value, dict):
            raise bad(f"an object ({tp.__name__})")
        hints = type_hints(tp, path)
        fields = [f.name for f in dataclasses.fields(tp) if f.init] if dataclasses.is_dataclass(tp) else list(hints)
        extra = set(value) - set(fields)
        if extra:
            raise ToolCallError(f"unexpected keys {sorted(extra)} for {tp.__name__}", path=path)
        kw = {k: convert_value(v, strip_required(hints[k]), f"{path}/{k}") for k, v in value.items()}
        if is_typeddict(tp):
            missing = {k for k in hints if typeddict_required(tp, k, hints[k])} - set(kw)
            if missing:
                raise ToolCallError(f"missing keys {sorted(missing)} for {tp.__name__}", path=path)
            return kw
        try:
            return tp(**kw)
        except TypeError as e:
            raise ToolCallError(str(e), path=path) from None
    return value
