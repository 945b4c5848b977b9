"""Loading a schema (JSON text, file, pydantic model or Python value, floats as exact
Decimals), the schema document with its resources, anchors and base URIs for ``$ref``
resolution, and which keywords each draft defines."""

from __future__ import annotations

import json
import os
import re
from decimal import Decimal
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from trellis.constrain.errors import SchemaError


# ============================================================================ loading


def load_schema(schema: Any) -> Any:
    """The schema as a Python value (floats as Decimals) from a pydantic model class, a path
    (``os.PathLike``), JSON text or bytes, or a Python value; ``SchemaError`` when it cannot be
    read or is not JSON."""
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        schema = schema.model_json_schema()  # pydantic v2 model class
    elif isinstance(schema, os.PathLike):
        try:
            with open(schema, encoding="utf-8") as f:
                schema = f.read()
        except OSError as e:
            raise SchemaError(f"cannot read schema file: {e}") from None
    if isinstance(schema, (bytes, bytearray)):
        schema = schema.decode("utf-8")
    if isinstance(schema, str):
        try:
            return json.loads(schema, parse_float=Decimal)
        except ValueError as e:
            raise SchemaError(f"schema is not valid JSON: {e}") from None
    return _exact(schema, "")


def _exact(x: Any, ptr: str) -> Any:
    """Deep copy with floats as Decimals (their shortest repr: the JSON text they came from)."""
    if isinstance(x, bool) or x is None or isinstance(x, (int, str, Decimal)):
        return x
    if isinstance(x, float):
        if x != x or x in (float("inf"), float("-inf")):
            raise SchemaError(f"{x} is not a JSON number", pointer=ptr)
        return Decimal(repr(x))
    if isinstance(x, dict):
        out = {}
        for k, v in x.items():
            if not isinstance(k, str):
                raise SchemaError(f"object key {k!r} is not a string", pointer=ptr)
            out[k] = _exact(v, f"{ptr}/{pointer_token(k)}")
        return out
    if isinstance(x, (list, tuple)):
        return [_exact(v, f"{ptr}/{i}") for i, v in enumerate(x)]
    raise SchemaError(f"{type(x).__name__} is not a JSON value", pointer=ptr)


def _join(base: str, ref: str) -> str:
    """RFC 3986 reference resolution; fragment-only and absolute refs also work for URN bases."""
    if ref.startswith("#"):
        return urldefrag(base)[0] + ref
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", ref):
        return ref
    return urljoin(base, ref)


def pointer_token(key: str) -> str:
    """``key`` as a JSON pointer reference token (``~`` -> ``~0``, ``/`` -> ``~1``)."""
    return key.replace("~", "~0").replace("/", "~1")


def as_decimal(x: Any) -> Decimal | None:
    """A JSON number as a Decimal (exact); None for anything else (booleans included)."""
    if isinstance(x, bool) or not isinstance(x, (int, Decimal, float)):
        return None
    return Decimal(x) if not isinstance(x, float) else Decimal(repr(x))


# ============================================================================ documents and $ref

DEFAULT_BASE = "https://trellis.invalid/schema.json"
_DRAFTS = {"draft-03": 3, "draft-04": 4, "draft-06": 6, "draft-07": 7, "2019-09": 2019, "2020-12": 2020}
DRAFT_NAMES = {v: k for k, v in _DRAFTS.items()}  # draft number -> its name in $schema URIs
_SUB_ONE = ("additionalProperties", "additionalItems", "items", "not", "if", "then", "else", "contains",
            "propertyNames", "unevaluatedItems", "unevaluatedProperties", "contentSchema")
_SUB_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
_SUB_LIST = ("allOf", "anyOf", "oneOf", "prefixItems", "items")


class SchemaDocument:
    """One schema document: its resources by URI ($id), anchors, and every subschema's base URI."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.draft = 2020
        self.dialect_known = True
        if isinstance(root, dict) and isinstance(root.get("$schema"), str):
            uri = root["$schema"]
            self.dialect_known = False
            if re.match(r"https?://json-schema\.org/", uri):
                for k, v in _DRAFTS.items():
                    if k in uri:
                        self.draft, self.dialect_known = v, True
        if self.draft == 3:
            raise SchemaError("draft-03 schemas are not supported", pointer="/$schema")
        self.base = DEFAULT_BASE
        self.resources: dict[str, Any] = {}
        self.anchors: dict[str, Any] = {}
        self.info: dict[int, tuple[str, str]] = {}
        self._scan(root, self.base, "")
        self.resources.setdefault(DEFAULT_BASE, root)
        if isinstance(root, dict):
            self.base = self.info[id(root)][0]

    def _scan(self, s: Any, base: str, ptr: str) -> None:
        if not isinstance(s, dict):
            return
        idv = s.get("$id") if self.draft >= 6 else s.get("id")
        if isinstance(idv, str) and not (self.draft <= 7 and "$ref" in s):
            u, frag = urldefrag(_join(base, idv))
            if idv.startswith("#"):
                if frag and self.draft <= 7:
                    self.anchors[f"{base}#{frag}"] = s
            elif u:
                base = u
                self.resources[u] = s
        for kw in ("$anchor", "$dynamicAnchor"):
            if isinstance(s.get(kw), str):
                self.anchors[f"{base}#{s[kw]}"] = s
        self.info[id(s)] = (base, ptr)
        for k, v in s.items():
            p = f"{ptr}/{pointer_token(k)}"
            if k in _SUB_ONE and isinstance(v, (dict, bool)):
                self._scan(v, base, p)
            elif k in _SUB_MAP and isinstance(v, dict):
                for kk, vv in v.items():
                    self._scan(vv, base, f"{p}/{pointer_token(kk)}")
            elif k in _SUB_LIST and isinstance(v, list):
                for i, vv in enumerate(v):
                    self._scan(vv, base, f"{p}/{i}")

    def at(self, ptr: str) -> Any:
        """The value at JSON pointer ``ptr`` from the document root (None when absent)."""
        obj = self.root
        for part in ptr.split("/")[1:] if ptr else []:
            key = part.replace("~1", "/").replace("~0", "~")
            try:
                obj = obj[int(key)] if isinstance(obj, list) else obj[key]
            except (KeyError, ValueError, IndexError, TypeError):
                return None
        return obj

    def locate(self, ptr: str, keyword: str) -> str:
        """Pointer of ``keyword`` in the schema at ``ptr`` or, breadth-first, in the subschemas that
        apply to the same instance there (allOf/anyOf/oneOf/then/else/dependentSchemas/$ref): the
        keyword a refusal names where a merged node got it; ``ptr`` itself when none has it, so a
        refusal never names a path absent from the schema."""
        todo, seen = [(self.at(ptr), ptr)], set()
        while todo and len(seen) < 256:
            s, p = todo.pop(0)
            if not isinstance(s, dict) or id(s) in seen:
                continue
            seen.add(id(s))
            if keyword in s:
                return f"{p}/{pointer_token(keyword)}"
            for kw in ("allOf", "anyOf", "oneOf"):
                if isinstance(s.get(kw), list):
                    todo += [(x, f"{p}/{kw}/{i}") for i, x in enumerate(s[kw])]
            for kw in ("then", "else"):
                if kw in s:
                    todo.append((s[kw], f"{p}/{kw}"))
            for kw in ("dependentSchemas", "dependencies"):
                if isinstance(s.get(kw), dict):
                    todo += [(x, f"{p}/{kw}/{pointer_token(k)}") for k, x in s[kw].items()]
            if isinstance(s.get("$ref"), str):
                try:
                    obj, p2, _ = self.resolve(s["$ref"], self.info.get(id(s), (self.base, p))[0], p)
                    todo.append((obj, p2))
                except SchemaError:
                    pass
        return ptr

    def where(self, s: Any, base: str, ptr: str) -> tuple[str, str]:
        return self.info.get(id(s), (base, ptr))

    def resolve(self, ref: str, base: str, ptr: str) -> tuple[Any, str, str]:
        """(schema, pointer, base URI) that ``ref`` names, from a schema with base URI ``base``."""
        u, frag = urldefrag(_join(base, ref))
        if u not in self.resources:
            raise SchemaError(f"unresolvable $ref {ref!r} (only references inside the schema document are "
                              "supported)", pointer=ptr)
        obj = self.resources[u]
        p = self.info.get(id(obj), (u, ""))[1]
        if frag and not frag.startswith("/"):
            a = self.anchors.get(f"{u}#{frag}")
            if a is None:
                raise SchemaError(f"$ref {ref!r}: no anchor {frag!r}", pointer=ptr)
            obj = a
        else:
            for part in frag.split("/")[1:] if frag else []:
                key = unquote(part).replace("~1", "/").replace("~0", "~")
                try:
                    obj = obj[int(key)] if isinstance(obj, list) else obj[key]
                except (KeyError, ValueError, IndexError, TypeError):
                    raise SchemaError(f"$ref {ref!r} points to nothing", pointer=ptr) from None
                p += "/" + pointer_token(key)
        b2, p2 = self.info.get(id(obj), (u, p))
        return obj, p2, b2


# ============================================================================ drafts

# Keywords each draft defines only from (``_SINCE``) or until (``_UNTIL``) some draft; outside that
# range they are unknown keywords, which every draft says to ignore (draft-04 has no ``const``, draft-07
# no ``dependentRequired``, 2019-09 no ``prefixItems``, 2020-12 no ``dependencies``). 2019-09's
# ``$recursiveRef`` and 2020-12's ``$dynamicRef`` are refused where they exist.
_SINCE = {"const": 6, "contains": 6, "propertyNames": 6, "if": 7, "then": 7, "else": 7,
          "dependentRequired": 2019, "dependentSchemas": 2019, "unevaluatedProperties": 2019,
          "unevaluatedItems": 2019, "minContains": 2019, "maxContains": 2019, "$recursiveRef": 2019,
          "prefixItems": 2020, "$dynamicRef": 2020}
_UNTIL = {"dependencies": 7, "$recursiveRef": 2019}


def in_draft(s: dict, draft: int) -> dict:
    """``s`` without the keywords its draft does not define (same subschema objects)."""
    drop = [k for k in s if _SINCE.get(k, 0) > draft or _UNTIL.get(k, 9999) < draft]
    return {k: v for k, v in s.items() if k not in drop} if drop else s
