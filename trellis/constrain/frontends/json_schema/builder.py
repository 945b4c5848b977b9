"""Schema locations -> nodes: ``NodeBuilder`` (a ``NodeTable``) interprets a location's keywords
into its shallow meaning (``Shallow``): types, enum/const, the number, string, array and object
keywords, ``$ref``, ``allOf`` (merged), ``anyOf``, ``not``, ``if``/``then``/``else``,
dependencies and ``oneOf``; the complements these negate are in ``complement``."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from trellis.constrain.errors import SchemaError
from trellis.constrain.frontends.formats import NUMBER_FORMATS, SPEC_FORMATS, STRING_FORMATS
from trellis.constrain.frontends.json_schema.complement import complement, forbid, opened, opened_shallow
from trellis.constrain.frontends.json_schema.documents import DRAFT_NAMES, SchemaDocument, as_decimal, in_draft, pointer_token
from trellis.constrain.frontends.json_schema.limits import MAX_BOUND_EXPONENT, MAX_DEP_BRANCHES, MAX_ITEMS, MAX_STRING
from trellis.constrain.frontends.json_schema.nodes import NodeTable
from trellis.constrain.frontends.json_schema.specs import (ANY_ID, ANY_SHALLOW, NEVER_ID, ArrSpec, ObjSpec, Shallow, Source,
                                                 StrSpec, union)
from trellis.constrain.frontends.pattern import pattern_ir
from trellis.constrain.frontends.ranges import NumSpec
from trellis.constrain.automata.regex_ir import Unsupported


_ANNOTATIONS = {"title", "description", "default", "examples", "example", "$comment", "$schema", "$id", "id",
                "$anchor", "$dynamicAnchor", "$vocabulary", "deprecated", "readOnly", "writeOnly",
                "contentMediaType", "contentEncoding", "contentSchema", "$defs", "definitions", "discriminator",
                "xml", "externalDocs", "markdownDescription", "enumDescriptions"}
_TYPES = ("null", "boolean", "object", "array", "number", "integer", "string")


class NodeBuilder(NodeTable):
    """Schema locations -> nodes: the keywords of each location read into its shallow meaning."""

    def __init__(self, doc: SchemaDocument, *, lenient: bool, closed_objects: bool, format_assertion: bool,
                 unknown_formats: str = "annotation") -> None:
        super().__init__(doc, lenient=lenient)
        self.unknown_formats = unknown_formats
        self.formats = format_assertion
        self.closed = closed_objects

    # -- keyword interpretation
    def _interpret(self, s: dict, ptr: str, base: str) -> Shallow:
        if "$ref" in s and self.doc.draft <= 7:
            return self.shallow(self._ref(s, "$ref", ptr, base))  # siblings of $ref are ignored
        s = in_draft(s, self.doc.draft)
        for kw in ("$dynamicRef", "$recursiveRef"):
            if kw in s:
                self.refuse(kw, ptr, "dynamic references are not supported")
        for kw in ("disallow", "extends", "divisibleBy"):
            if kw in s:
                self.refuse(kw, ptr, "draft-03 keyword")
        parts = [self._own(s, ptr, base)]
        if "$ref" in s:
            parts.append(self.shallow(self._ref(s, "$ref", ptr, base)))
        if "allOf" in s:
            subs = [self.shallow(i) for i in self._list(s, "allOf", ptr, base)]
            parts.extend(subs)
            if subs and all(not x.empty() for x in subs) and self.inter(*subs).empty():
                raise SchemaError("allOf: the branches have no value in common", pointer=f"{ptr}/allOf")
        if "anyOf" in s:
            parts.append(union(*[self.shallow(i) for i in self._list(s, "anyOf", ptr, base)]))
        if "not" in s:
            parts.append(self._not(s["not"], ptr, base))
        if "if" in s and ("then" in s or "else" in s):  # an if alone constrains nothing
            parts.append(self._if_then_else(s, ptr, base))
        deps = self._dependencies(s, ptr, base)
        if deps:
            with_deps = self.inter(*parts, *deps)
            if len(with_deps.objs) > MAX_DEP_BRANCHES:
                kw = next(k for k in ("dependencies", "dependentRequired", "dependentSchemas") if k in s)
                self.refuse(kw, ptr, f"more than {MAX_DEP_BRANCHES} combinations of present/absent trigger keys")
            else:
                parts = [with_deps]
        if "oneOf" in s:
            parts.append(self._one_of(s, ptr, base, parts))
        return self.inter(*parts)

    def _dependencies(self, s: dict, ptr: str, base: str) -> list[Shallow]:
        """``dependentRequired``/``dependentSchemas`` (and draft 4-7 ``dependencies``, arrays or
        schemas): "if key k is present, the object also matches D", each as the union of two object
        alternatives, k forbidden | k required and D; other types pass. The object automaton
        (``Automata._obj_auto``) determinises the alternatives, so presence is decided key by key, exactly;
        a D that constrains a later key's object or array value differently is refused there."""
        out = []
        for kw in ("dependencies", "dependentRequired", "dependentSchemas"):
            if kw not in s:
                continue
            v = s[kw]
            if not isinstance(v, dict):
                raise SchemaError(f"{kw} must be an object", pointer=f"{ptr}/{kw}")
            for key, dep in v.items():
                p = f"{ptr}/{kw}/{pointer_token(key)}"
                if isinstance(dep, list) and kw != "dependentSchemas":
                    if not all(isinstance(x, str) for x in dep):
                        raise SchemaError(f"{kw}: the keys {key!r} needs must be strings", pointer=p)
                    need = tuple(dict.fromkeys(x for x in dep if x != key))
                    if need:
                        out.append(self._if_present(key, Shallow(objs=(ObjSpec(required=need),))))
                elif isinstance(dep, (dict, bool)) and kw != "dependentRequired":
                    nid = self.location(dep, p, base)
                    if nid in self._busy:
                        self.refuse(kw, ptr, f"the schema of {key!r} refers back to this object (recursion)")
                        continue
                    then = self.shallow(nid)
                    if then.objs != (ObjSpec(),):
                        out.append(self._if_present(key, then))
                else:
                    raise SchemaError(f"{kw}: the value of {key!r} must be "
                                      f"{'an array of keys' if kw == 'dependentRequired' else 'a schema'}"
                                      f"{' or an array of keys' if kw == 'dependencies' else ''}", pointer=p)
        return out

    def _if_present(self, key: str, then: Shallow) -> Shallow:
        """Objects without ``key``, or with it and in ``then``; every non-object. ``then`` is read
        open (``closed_objects`` closes the object that declares keys, not a condition on it)."""
        absent = forbid(key)
        present = [o for o in (self.obj_and(ObjSpec(required=(key,)), opened(x)) for x in then.objs)
                   if o is not None]
        return Shallow(True, True, True, (NumSpec(),), (StrSpec(),), (ArrSpec(),), (absent, *present))

    def _if_then_else(self, s: dict, ptr: str, base: str) -> Shallow:
        """``if``/``then``/``else`` as (C and T) | (not C and E), a missing branch being ``true``:
        exact where the complement of the condition C is (``complement``: types, enumerated
        values, string patterns/formats/lengths, named keys of objects and their values, e.g.
        ``{"properties": {"kind": {"const": "a"}}, "required": ["kind"]}``). The two alternatives
        are disjoint, so the object automaton decides between them key by key. C, T and E are
        read open, like a dependentSchemas entry: ``closed_objects`` closes the object that
        declares its keys, not a condition on it, whose keys the others must not forbid."""
        cond = self.shallow(self.location(s["if"], f"{ptr}/if", base))
        then, other = (self.shallow(self.location(s[kw], f"{ptr}/{kw}", base)) if kw in s else ANY_SHALLOW
                       for kw in ("then", "else"))
        try:
            neg = complement(opened_shallow(cond), self)
        except Unsupported as e:
            self.refuse("if", ptr, f"the condition cannot be negated exactly ({str(e).removeprefix('not: ')})")
            return ANY_SHALLOW
        out = union(self.inter(opened_shallow(cond), opened_shallow(then)), self.inter(neg, opened_shallow(other)))
        if len(out.objs) > MAX_DEP_BRANCHES:
            self.refuse("if", ptr, f"(if and then) | (not if and else) makes more than {MAX_DEP_BRANCHES} object "
                                   "alternatives")
            return ANY_SHALLOW
        return out

    def _one_of(self, s: dict, ptr: str, base: str, siblings: list[Shallow]) -> Shallow:
        """``oneOf``: an instance satisfies the siblings S and exactly one branch, i.e. the union
        over i of (A_i and S and not A_j for every other j). Where (A_i and S) is provably
        disjoint from (A_j and S), not A_j adds nothing and is left out: the most common
        discriminated union, ``{"type": "object", "required": ["t"], "oneOf": [{"properties":
        {"t": {"const": "a"}}}, {"properties": {"t": {"const": "b"}}}]}``, is the plain union (the
        branches alone overlap on objects without ``t``). Branches that may overlap are negated
        (``complement``), e.g. "exactly one of these keys", ``"oneOf": [{"required": ["a"]},
        {"required": ["b"]}]``; refused when a complement is not expressible."""
        subs = [self.shallow(i) for i in self._list(s, "oneOf", ptr, base)]
        rest: Shallow | None = None
        overlaps: dict[int, list[int]] = {i: [] for i in range(len(subs))}
        apart = self.apart_by_tag(subs)
        for i in range(len(subs)):
            for j in range(i + 1, len(subs)):
                if (i, j) in apart or self.disjoint(subs[i], subs[j]):
                    continue
                if rest is None:
                    rest = self.inter(*siblings)
                if not self.disjoint(self.inter(rest, subs[i]), self.inter(rest, subs[j])):
                    overlaps[i].append(j)
                    overlaps[j].append(i)
        if not any(overlaps.values()):
            return union(*subs)
        negs: dict[int, Shallow] = {}
        for j in sorted({j for js in overlaps.values() for j in js}):
            try:
                # open, as in not: closed_objects closes a branch's own objects, and its complement
                # must not grow by the keys closing would forbid
                negs[j] = complement(opened_shallow(subs[j]), self)
            except Unsupported as e:
                i = overlaps[j][0]
                self.refuse("oneOf", ptr, f"branches {min(i, j)} and {max(i, j)} may both match, and branch {j} "
                                          f"cannot be negated exactly ({str(e).removeprefix('not: ')}); "
                                          "treated as anyOf")
                return union(*subs)
        out = []
        for i, sub in enumerate(subs):
            for j in overlaps[i]:
                sub = self.inter(sub, negs[j])
                if len(sub.objs) > MAX_DEP_BRANCHES:  # each complement multiplies the object alternatives
                    self.refuse("oneOf", ptr, f"branch {i} and the negations of the branches it may overlap "
                                              f"make more than {MAX_DEP_BRANCHES} object alternatives; treated as anyOf")
                    return union(*subs)
            out.append(sub)
        return union(*out)

    def _ref(self, s: dict, kw: str, ptr: str, base: str) -> int:
        ref = s[kw]
        if not isinstance(ref, str):
            raise SchemaError("$ref must be a string", pointer=f"{ptr}/{kw}")
        obj, p, b = self.doc.resolve(ref, base, f"{ptr}/{kw}")
        return self.location(obj, p, b)

    def _list(self, s: dict, kw: str, ptr: str, base: str) -> list[int]:
        v = s[kw]
        if not isinstance(v, list) or not v:
            raise SchemaError(f"{kw} must be a non-empty array of schemas", pointer=f"{ptr}/{kw}")
        return [self.location(x, f"{ptr}/{kw}/{i}", base) for i, x in enumerate(v)]

    def _types(self, s: dict, ptr: str) -> set[str]:
        if "type" not in s:
            return set(_TYPES)
        t = s["type"]
        ts = [t] if isinstance(t, str) else t
        if not isinstance(ts, list) or not ts or not all(isinstance(x, str) for x in ts):
            raise SchemaError("type must be a type name or a non-empty array of them", pointer=f"{ptr}/type")
        bad = [x for x in ts if x not in _TYPES]
        if bad:
            raise SchemaError(f"unknown type {bad[0]!r}", pointer=f"{ptr}/type")
        out = set(ts)
        if "number" in out:
            out.add("integer")
        if s.get("nullable") is True:
            out.add("null")
        return out

    def _own(self, s: dict, ptr: str, base: str) -> Shallow:
        types = self._types(s, ptr)
        if s.get("required") is True or s.get("required") is False:
            self.refuse("required", ptr, "draft-03 boolean required")
        sh = Shallow("null" in types, "boolean" in types, "boolean" in types,
                     (self._numspec(s, ptr, "number" not in types),) if "integer" in types else (),
                     (self._strspec(s, ptr),) if "string" in types else (),
                     (self._arrspec(s, ptr, base),) if "array" in types else (),
                     (self._objspec(s, ptr, base),) if "object" in types else ())
        sh = Shallow(sh.null, sh.true, sh.false, tuple(x for x in sh.nums if not x.empty()),
                     tuple(x for x in sh.strs if not x.empty()), sh.arrs, sh.objs)
        for kw in ("enum", "const"):
            if kw not in s:
                continue
            vals = s[kw] if kw == "enum" else [s[kw]]
            if not isinstance(vals, list) or not vals:
                raise SchemaError("enum must be a non-empty array", pointer=f"{ptr}/{kw}")
            # No value of an allowed type leaves an empty schema, which is legal (like ``false``): an
            # optional property with it is a forbidden key, a required one an impossible object
            # (issue 27: these were refused). An empty root is refused where the grammar is built.
            sh = self.inter(sh, union(*[self._const(v) for v in vals]))
        return sh

    def const_id(self, v: Any) -> int:
        return self.fixed(self._const(v))

    def _const(self, v: Any) -> Shallow:
        if v is None:
            return Shallow(null=True)
        if v is True or v is False:
            return Shallow(true=v is True, false=v is False)
        d = as_decimal(v)
        if d is not None:
            return Shallow(nums=(NumSpec(values=frozenset([d])),))
        if isinstance(v, str):
            return Shallow(strs=(StrSpec(values=frozenset([v])),))
        if isinstance(v, list):
            return Shallow(arrs=(ArrSpec(tuple(self.const_id(x) for x in v), NEVER_ID, len(v), len(v)),))
        if isinstance(v, dict):
            src = Source(tuple((k, self.const_id(x)) for k, x in v.items()), (), NEVER_ID)
            return Shallow(objs=(ObjSpec(tuple(v), (src,), tuple(v)),))
        raise SchemaError(f"{type(v).__name__} is not a JSON value")

    def _count(self, s: dict, kw: str, ptr: str) -> int | None:
        if kw not in s:
            return None
        d = as_decimal(s[kw])
        if d is None or d < 0 or d % 1 != 0:
            raise SchemaError(f"{kw} must be a non-negative integer", pointer=f"{ptr}/{kw}")
        return int(d)

    def _numspec(self, s: dict, ptr: str, integer: bool) -> NumSpec:
        # draft-04's "integer" type is a spelling: no fraction, no exponent (1.0 is not one there)
        spec = NumSpec(integer=integer, plain=integer and self.doc.draft == 4)
        d4 = self.doc.draft == 4
        for kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
            if kw not in s:
                continue
            if kw.startswith("exclusive") and isinstance(s[kw], bool) != d4:
                # draft-04: a boolean modifying minimum/maximum; from draft-06 on: a number bound
                raise SchemaError(f"{kw} must be a {'boolean' if d4 else 'number'} in draft "
                                  f"{DRAFT_NAMES[self.doc.draft]}", pointer=f"{ptr}/{kw}")
            if not isinstance(s[kw], bool) and as_decimal(s[kw]) is None:
                raise SchemaError(f"{kw} must be a number", pointer=f"{ptr}/{kw}")
        s = dict(s)
        for kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            v = as_decimal(s.get(kw))
            if v is not None and v != 0 and abs(v.adjusted()) > MAX_BOUND_EXPONENT:
                # the bound's automaton counts digits up to it: 1e300 took 57 s to determinise
                self.refuse(kw, ptr, f"a bound of magnitude 1e{v.adjusted()} (more than {MAX_BOUND_EXPONENT} "
                                     f"digits to count) is not supported")
                del s[kw]
        lo, hi = as_decimal(s.get("minimum")), as_decimal(s.get("maximum"))
        lo_x = d4 and s.get("exclusiveMinimum") is True
        hi_x = d4 and s.get("exclusiveMaximum") is True
        spec = spec & NumSpec(lo=lo, lo_x=lo_x and lo is not None, hi=hi, hi_x=hi_x and hi is not None)
        xlo, xhi = as_decimal(s.get("exclusiveMinimum")), as_decimal(s.get("exclusiveMaximum"))
        if xlo is not None and not d4:
            spec = spec & NumSpec(lo=xlo, lo_x=True)
        if xhi is not None and not d4:
            spec = spec & NumSpec(hi=xhi, hi_x=True)
        fmt = s.get("format") if self.formats else None
        if isinstance(fmt, str) and fmt in NUMBER_FORMATS:
            a, b = NUMBER_FORMATS[fmt]
            spec = spec & NumSpec(integer=True, lo=Decimal(a), hi=Decimal(b))
        if "multipleOf" in s:
            m = as_decimal(s["multipleOf"])
            if m is None or m <= 0:
                raise SchemaError("multipleOf must be a positive number", pointer=f"{ptr}/multipleOf")
            trial = spec & NumSpec(mults=frozenset([m]))
            try:
                trial.regex()
                spec = trial
            except Unsupported as e:
                self.refuse("multipleOf", ptr, str(e))
        return spec

    def _strspec(self, s: dict, ptr: str) -> StrSpec:
        lo, hi = self._count(s, "minLength", ptr), self._count(s, "maxLength", ptr)
        if lo is not None and lo > MAX_STRING:  # maxLength is counted in levels (ScalarRules._level_rules)
            self.refuse("minLength", ptr, f"string length bounds above {MAX_STRING} are too large to compile")
            lo = None
        pats: tuple = ()
        if "pattern" in s:
            p = s["pattern"]
            if not isinstance(p, str):
                raise SchemaError("pattern must be a string", pointer=f"{ptr}/pattern")
            try:
                pattern_ir(p)
                pats = (p,)
            except Unsupported as e:
                self.refuse("pattern", ptr, str(e))
        fmts: tuple = ()
        fmt = s.get("format") if self.formats else None
        if fmt is not None:
            if not isinstance(fmt, str):
                raise SchemaError("format must be a string", pointer=f"{ptr}/format")
            if fmt in STRING_FORMATS:
                fmts = (fmt,)
            elif fmt in SPEC_FORMATS:
                self.refuse("format", ptr, f"format {fmt!r} is not supported")
            elif fmt not in NUMBER_FORMATS and self.unknown_formats == "refuse":
                self.refuse("format", ptr, f"format {fmt!r} is not defined by JSON Schema (unknown_formats='refuse')")
        return StrSpec(lo or 0, hi, pats, fmts)

    def _arrspec(self, s: dict, ptr: str, base: str) -> ArrSpec:
        prefix: tuple = ()
        items = ANY_ID
        if "prefixItems" in s:
            if not isinstance(s["prefixItems"], list):
                raise SchemaError("prefixItems must be an array of schemas", pointer=f"{ptr}/prefixItems")
            prefix = tuple(self.location(x, f"{ptr}/prefixItems/{i}", base) for i, x in enumerate(s["prefixItems"]))
            if "items" in s:
                items = self.location(s["items"], f"{ptr}/items", base)
        elif isinstance(s.get("items"), list):
            prefix = tuple(self.location(x, f"{ptr}/items/{i}", base) for i, x in enumerate(s["items"]))
            if "additionalItems" in s:
                items = self.location(s["additionalItems"], f"{ptr}/additionalItems", base)
        elif "items" in s:
            items = self.location(s["items"], f"{ptr}/items", base)
        lo, hi = self._count(s, "minItems", ptr) or 0, self._count(s, "maxItems", ptr)
        if s.get("uniqueItems") is True and (hi is None or hi > 1):
            self.refuse("uniqueItems", ptr, "uniqueness of items cannot be enforced by a grammar")
        if "contains" in s:
            self.refuse("contains", ptr, "contains is not supported")
        if "unevaluatedItems" in s and s["unevaluatedItems"] not in (True, {}):
            self.refuse("unevaluatedItems", ptr, "unevaluatedItems is not supported")
        for kw, v in (("minItems", lo), ("maxItems", hi)):
            if v is not None and v > MAX_ITEMS:
                self.refuse(kw, ptr, f"item counts above {MAX_ITEMS} are too large to compile")
                lo, hi = (0, hi) if kw == "minItems" else (lo, None)
        return ArrSpec(prefix, items, lo, hi)

    def _objspec(self, s: dict, ptr: str, base: str) -> ObjSpec:
        props = s.get("properties", {})
        if not isinstance(props, dict):
            raise SchemaError("properties must be an object", pointer=f"{ptr}/properties")
        pp = s.get("patternProperties", {})
        if not isinstance(pp, dict):
            raise SchemaError("patternProperties must be an object", pointer=f"{ptr}/patternProperties")
        req = s.get("required", [])
        if isinstance(req, bool):
            req = []
        if not isinstance(req, list) or not all(isinstance(k, str) for k in req):
            raise SchemaError("required must be an array of strings", pointer=f"{ptr}/required")
        # closed_objects closes objects that declare keys; a free-form {"type": "object"} and a
        # wrapper ({"anyOf": [...]} around object branches) stay open, or the wrapper's {} would
        # intersect every branch down to the empty object.
        additional = NEVER_ID if self.closed and (props or pp) else ANY_ID
        if "additionalProperties" in s:
            additional = self.location(s["additionalProperties"], f"{ptr}/additionalProperties", base)
        implicit = additional == NEVER_ID and "additionalProperties" not in s
        pats = []
        for p, v in pp.items():
            try:
                pattern_ir(p)
                pats.append((p, self.location(v, f"{ptr}/patternProperties/{pointer_token(p)}", base)))
            except Unsupported as e:
                self.refuse("patternProperties", ptr, f"pattern {p!r}: {e}; additional properties allowed")
                additional = ANY_ID
        src = Source(tuple((k, self.location(v, f"{ptr}/properties/{pointer_token(k)}", base))
                           for k, v in props.items()),
                     tuple(pats), additional, implicit and additional == NEVER_ID)
        srcs = () if src == Source() else (src,)
        lo, hi = self._count(s, "minProperties", ptr) or 0, self._count(s, "maxProperties", ptr)
        for kw, v in (("minProperties", lo), ("maxProperties", hi)):
            if v is not None and v > 64:
                self.refuse(kw, ptr, "property counts above 64 are too large to compile")
                lo, hi = (0, hi) if kw == "minProperties" else (lo, None)
        names: tuple = ()
        if "propertyNames" in s:
            names = (self.location(s["propertyNames"], f"{ptr}/propertyNames", base),)
        if "unevaluatedProperties" in s and s["unevaluatedProperties"] not in (True, {}):
            self.refuse("unevaluatedProperties", ptr, "unevaluatedProperties is not supported")
        return ObjSpec(tuple(props), srcs, tuple(dict.fromkeys(req)), lo, hi, names)

    def _not(self, sub: Any, ptr: str, base: str) -> Shallow:
        if isinstance(sub, dict) and "not" in sub and not (set(in_draft(sub, self.doc.draft)) - _ANNOTATIONS - {"not"}):
            # double negation: {"not": {"not": S}} is S
            return self.shallow(self.location(sub["not"], f"{ptr}/not/not", base))
        nid = self.location(sub, f"{ptr}/not", base)
        try:
            return complement(self.shallow(nid), self)
        except Unsupported as e:
            self.refuse("not", ptr, str(e))
            return ANY_SHALLOW
