"""Reading Python type annotations: the helpers shared by the schema stage (types -> JSON Schema,
``schema.py``) and the conversion stage (JSON -> typed values, ``convert.py``)."""

from __future__ import annotations

import types
import typing
from typing import Any, Union

NONE_TYPE = type(None)


def json_kind(value: Any) -> str:
    """The JSON Schema type name of a parsed JSON value (the Python type name for anything else)."""
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object",
            NONE_TYPE: "null"}.get(type(value), type(value).__name__)


def strip_required(tp: Any) -> Any:
    """``Required[X]`` / ``NotRequired[X]`` (TypedDict markers) -> ``X``."""
    origin = typing.get_origin(tp)
    names = {getattr(origin, "_name", None), getattr(origin, "__name__", None)}
    if origin is not None and names & {"Required", "NotRequired", "ReadOnly"}:
        return strip_required(typing.get_args(tp)[0])
    return tp


def is_pydantic_model(tp: Any) -> bool:
    if not isinstance(tp, type):
        return False
    try:  # pydantic is optional: only models of an installed pydantic can occur
        from pydantic import BaseModel
    except ImportError:
        return False
    return issubclass(tp, BaseModel)


def is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__total__") and hasattr(tp, "__annotations__")


def type_hints(tp: Any, where: str) -> dict[str, Any]:
    try:
        return typing.get_type_hints(tp, include_extras=True)
    except Exception as e:  # NameError: a forward reference to a name not in the module's globals
        raise TypeError(f"{where}: cannot resolve the type hints of {getattr(tp, '__name__', tp)!r} ({e})") from e


def typeddict_required(tp: Any, key: str, hint: Any) -> bool:
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


def union_args(tp: Any) -> tuple[Any, ...] | None:
    origin = typing.get_origin(tp)
    if origin is Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        return typing.get_args(tp)
    return None

