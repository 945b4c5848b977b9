"""``Annotated`` metadata -> JSON Schema keywords: the trellis spelling of bounds (``Ge``, ``Le``,
``Pattern``, ``Keywords``, ...) and the one reader of it, of ``annotated_types`` and of pydantic ``Field``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

# ----------------------------------------------------------------------------- Annotated keywords
# The trellis spelling of Annotated bounds: same names and attributes as annotated_types, so one
# duck-typed reader (``metadata_keywords``) handles both.


def _keyword_class(name: str, attr: str, kind: type, doc: str) -> type:
    """A frozen dataclass ``name`` with the one field ``attr``: ``name(value)`` / ``name(attr=value)``."""
    cls = dataclasses.make_dataclass(name, [(attr, kind)], frozen=True, namespace={"__doc__": doc})
    cls.__module__ = __name__
    return cls


Ge = _keyword_class("Ge", "ge", float, "``Annotated[int, Ge(0)]``: value >= ge (JSON Schema ``minimum``).")
Gt = _keyword_class("Gt", "gt", float, "``Annotated[float, Gt(0)]``: value > gt (``exclusiveMinimum``).")
Le = _keyword_class("Le", "le", float, "``Annotated[int, Le(10)]``: value <= le (``maximum``).")
Lt = _keyword_class("Lt", "lt", float, "``Annotated[float, Lt(1)]``: value < lt (``exclusiveMaximum``).")
MultipleOf = _keyword_class("MultipleOf", "multiple_of", float, "``Annotated[int, MultipleOf(5)]`` (``multipleOf``).")
MinLen = _keyword_class("MinLen", "min_length", int,
                        "At least ``min_length`` characters (strings) or items (lists, tuples, dicts).")
MaxLen = _keyword_class("MaxLen", "max_length", int,
                        "At most ``max_length`` characters (strings) or items (lists, tuples, dicts).")
Pattern = _keyword_class("Pattern", "pattern", str,
                         '``Annotated[str, Pattern("[A-Z]{3}")]``: the whole string matches (``pattern``).')
Description = _keyword_class("Description", "description", str,
                             '``Annotated[str, Description("city name")]`` (same as a plain string in ``Annotated``).')


@dataclass(frozen=True, init=False)
class Keywords:
    """Raw JSON Schema keywords merged into the parameter's schema:
    ``Annotated[str, Keywords(format="date", maxLength=10)]``."""

    keywords: Mapping[str, Any] = field(hash=False)

    def __init__(self, **keywords: Any) -> None:
        object.__setattr__(self, "keywords", dict(keywords))


_LENGTH_KEYS = {"string": ("minLength", "maxLength"), "array": ("minItems", "maxItems"),
                "object": ("minProperties", "maxProperties")}


def metadata_keywords(meta: Any, base: dict[str, Any], where: str) -> dict[str, Any]:
    """JSON Schema keywords of one ``Annotated`` metadata object (trellis, annotated_types, pydantic)."""
    if isinstance(meta, str):
        return {"description": meta}
    if isinstance(meta, Keywords):
        return dict(meta.keywords)
    if type(meta).__name__ == "FieldInfo" and type(meta).__module__.startswith("pydantic"):
        out: dict[str, Any] = {}
        for m in getattr(meta, "metadata", ()):
            out.update(metadata_keywords(m, base, where))
        if getattr(meta, "description", None):
            out["description"] = meta.description
        return out
    if hasattr(meta, "documentation") and isinstance(meta.documentation, str):  # annotated_types.doc / PEP 727
        return {"description": meta.documentation}
    if hasattr(meta, "__iter__") and not isinstance(meta, (str, bytes, Mapping)):  # annotated_types GroupedMetadata
        out = {}
        for m in meta:
            out.update(metadata_keywords(m, base, where))
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
