"""Key order of instances: ``order_keys`` puts an instance's object keys in the order the
grammar expects, following ``$ref``, ``allOf``/``anyOf``/``oneOf`` (the branches the instance
may match), ``if``/``then``/``else``, dependencies, properties and items."""

from __future__ import annotations

from typing import Any

from trellis.constrain.errors import SchemaError
from trellis.constrain.frontends.json_schema.documents import SchemaDocument, in_draft, load_schema
from trellis.constrain.frontends.pattern import pattern_matches
from trellis.constrain.automata.regex_ir import Unsupported


def order_keys(schema: Any, instance: Any) -> Any:
    """``instance`` with object keys in the order the grammar expects (best effort).

    Declared properties first in schema order (following ``$ref``, ``allOf``/``anyOf``/
    ``oneOf``, ``properties``, ``patternProperties``, ``additionalProperties``, items), then the
    other keys as they were. Key order never changes validity, so this only picks the spelling of
    a document to check or to show a model; an instance whose alternatives disagree on the order
    may still be out of order.
    """
    doc = SchemaDocument(load_schema(schema))
    return _order(doc, [(doc.root, doc.base)], instance, 0)


def _fits(doc: "SchemaDocument", cand: tuple, inst: Any) -> bool:
    """Cheap necessary conditions for ``inst`` to match ``cand`` (through $ref / allOf): its
    ``type``, ``required`` keys, closed ``properties`` and ``const``/``enum`` property values. Used
    to pick the anyOf/oneOf branch whose key order applies; False only when it surely fails."""
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    kind = kinds.get(type(inst), "number")
    for s, _ in _expand(doc, [cand], branches=False):
        t = s.get("type")
        types = {t} if isinstance(t, str) else set(t) if isinstance(t, list) else None
        if types is not None and kind not in types and not (kind == "number" and "integer" in types):
            return False
        if not isinstance(inst, dict):
            continue
        props = s.get("properties") if isinstance(s.get("properties"), dict) else {}
        if isinstance(s.get("required"), list) and any(isinstance(k, str) and k not in inst for k in s["required"]):
            return False
        if s.get("additionalProperties") is False and not s.get("patternProperties") and set(inst) - set(props):
            return False
        for k, sub in props.items():
            if k in inst and isinstance(sub, dict):
                if "const" in sub and sub["const"] != inst[k]:
                    return False
                if isinstance(sub.get("enum"), list) and inst[k] not in sub["enum"]:
                    return False
    return True


def _expand(doc: "SchemaDocument", cands: list, depth: int = 0, inst: Any = None, branches: bool = True) -> list:
    """``cands`` and the schemas they reach through $ref, allOf, if/then/else and (``branches``)
    anyOf/oneOf; of the alternatives, only those ``inst`` may match when any does (``_fits``)."""
    out = []
    for s, base in cands:
        if not isinstance(s, dict) or depth > 20:
            continue
        base = doc.where(s, base, "")[0]
        if isinstance(s.get("$ref"), str) and doc.draft <= 7:  # draft <= 7: siblings of $ref are ignored
            try:
                obj, _, b = doc.resolve(s["$ref"], base, "")
                out += _expand(doc, [(obj, b)], depth + 1, inst, branches)
            except SchemaError:
                pass
            continue
        s = in_draft(s, doc.draft)
        out.append((s, base))
        subs = []
        if isinstance(s.get("$ref"), str):
            try:
                obj, _, b = doc.resolve(s["$ref"], base, "")
                subs.append((obj, b))
            except SchemaError:
                pass
        if isinstance(s.get("allOf"), list):
            subs += [(x, base) for x in s["allOf"]]
        for kw in ("anyOf", "oneOf") if branches else ():
            if isinstance(s.get(kw), list):
                alts = [(x, base) for x in s[kw]]
                if inst is not None:
                    alts = [a for a in alts if _fits(doc, a, inst)] or alts
                subs += alts
        # if: its declared keys order the object too (if/then/else compiles to (if and then) | (not if
        # and else), whose alternatives list the condition's keys first)
        subs += [(s[kw], base) for kw in ("if", "then", "else") if kw in s]
        for kw in ("dependencies", "dependentSchemas"):
            if isinstance(s.get(kw), dict):
                subs += [(v, base) for v in s[kw].values() if isinstance(v, dict)]
        out += _expand(doc, subs, depth + 1, inst, branches)
    return out


def _order(doc: "SchemaDocument", cands: list, inst: Any, depth: int) -> Any:
    cands = _expand(doc, cands, inst=inst)
    if isinstance(inst, dict) and depth < 64:
        keys: list = []
        for s, _ in cands:  # const/enum objects: their own key order
            for v in ([s["const"]] if "const" in s else []) + (s["enum"] if isinstance(s.get("enum"), list) else []):
                if isinstance(v, dict) and set(v) == set(inst):
                    keys += [k for k in v if k not in keys]
        for kw in ("properties", "required", "dependencies", "dependentRequired", "dependentSchemas"):
            for s, _ in cands:
                v = s.get(kw)
                if isinstance(v, (dict, list)):  # dependencies: a trigger, then the keys it needs
                    for k in v:
                        for k2 in [k] + (v[k] if isinstance(v, dict) and isinstance(v[k], list) else []):
                            if isinstance(k2, str) and k2 in inst and k2 not in keys:
                                keys.append(k2)
        keys += [k for k in inst if k not in keys]
        out = {}
        for k in keys:
            sub = []
            for s, b in cands:
                props = s.get("properties") if isinstance(s.get("properties"), dict) else {}
                if k in props:
                    sub.append((props[k], b))
                pats = [v for p, v in (s.get("patternProperties") or {}).items() if _matches_safely(p, k)]
                sub += [(v, b) for v in pats]
                if k not in props and not pats and "additionalProperties" in s:
                    sub.append((s["additionalProperties"], b))
            out[k] = _order(doc, sub, inst[k], depth + 1)
        return out
    if isinstance(inst, list) and depth < 64:
        items = []
        for i, x in enumerate(inst):
            sub = []
            for s, b in cands:
                pre = s.get("prefixItems") if isinstance(s.get("prefixItems"), list) else (
                    s.get("items") if isinstance(s.get("items"), list) else [])
                if i < len(pre):
                    sub.append((pre[i], b))
                elif "items" in s and not isinstance(s["items"], list):
                    sub.append((s["items"], b))
                elif "additionalItems" in s:
                    sub.append((s["additionalItems"], b))
            items.append(_order(doc, sub, x, depth + 1))
        return items
    return inst


def _matches_safely(pattern: Any, key: str) -> bool:
    try:
        return isinstance(pattern, str) and pattern_matches(pattern, key)
    except Unsupported:
        return False
