"""Schema locations -> nodes: ``_Builder`` interprets keywords into shallow meanings
(``Shallow``), intersects them (``allOf``), unions them (``anyOf``), decides disjointness
(``oneOf``, unions) and records or raises refusals (``IgnoredKeyword``, ``SchemaError``);
complements (``not``, ``if``, overlapping ``oneOf`` branches) are here too, since they and the
builder call each other."""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, Iterable

from trellis.constrain.errors import SchemaError
from trellis.constrain.formats import NUMBER_FORMATS, SPEC_FORMATS, STRING_FORMATS
from trellis.constrain.json_schema.documents import _DRAFT_NAMES, _Document, _esc, _in_draft, _num
from trellis.constrain.json_schema.limits import MAX_BOUND_EXPONENT, MAX_DEP_BRANCHES, MAX_ITEMS, MAX_STRING
from trellis.constrain.json_schema.specs import (_GENERIC, ANY_ID, ANY_SHALLOW, NEVER_ID, NEVER_SHALLOW, ArrSpec,
                                                 ObjSpec, Shallow, Source, StrSpec, _alts, union)
from trellis.constrain.pattern import pattern_ir, pattern_matches
from trellis.constrain.ranges import NumSpec
from trellis.constrain.regex_ir import _fsm, _TooComplex, _Unsupported, fsm_and


@dataclass(frozen=True)
class IgnoredKeyword:
    """A keyword ``lenient=True`` ignored: the grammar accepts more than the schema there."""

    keyword: str
    pointer: str
    reason: str


_ANNOTATIONS = {"title", "description", "default", "examples", "example", "$comment", "$schema", "$id", "id",
                "$anchor", "$dynamicAnchor", "$vocabulary", "deprecated", "readOnly", "writeOnly",
                "contentMediaType", "contentEncoding", "contentSchema", "$defs", "definitions", "discriminator",
                "xml", "externalDocs", "markdownDescription", "enumDescriptions"}
_TYPES = ("null", "boolean", "object", "array", "number", "integer", "string")


class _Builder:
    """Schema locations -> nodes (ids), their shallow meaning, intersections and disjointness."""

    def __init__(self, doc: _Document, *, lenient: bool, closed_objects: bool, format_assertion: bool,
                 unknown_formats: str = "annotation") -> None:
        self.unknown_formats = unknown_formats
        self.doc = doc
        self.formats = format_assertion
        self.lenient = lenient
        self.closed = closed_objects
        self.ignored: list[IgnoredKeyword] = []
        self.shallows: list[Shallow | None] = [ANY_SHALLOW, NEVER_SHALLOW]
        self.kinds: list[tuple] = [("any",), ("never",)]
        self.ptrs: list[str] = ["", ""]
        self._loc: dict[int, int] = {}
        self._and: dict[frozenset, int] = {}
        self._fixed: dict[Shallow, int] = {}
        self._busy: set[int] = set()

    # -- errors
    def refuse(self, keyword: str, ptr: str, reason: str) -> None:
        """Raise SchemaError, or record the keyword as ignored in lenient mode."""
        while reason.startswith(f"{keyword}: "):  # a nested refusal already named it: say it once
            reason = reason[len(keyword) + 2:]
        if not self.lenient:
            raise SchemaError(f"{keyword}: {reason}", pointer=f"{ptr}/{_esc(keyword)}")
        self.ignored.append(IgnoredKeyword(keyword, f"{ptr}/{_esc(keyword)}", reason))

    # -- ids
    def _new(self, kind: tuple, ptr: str, sh: Shallow | None = None) -> int:
        self.shallows.append(sh)
        self.kinds.append(kind)
        self.ptrs.append(ptr)
        return len(self.kinds) - 1

    def location(self, s: Any, ptr: str, base: str) -> int:
        if s is True:
            return ANY_ID
        if s is False:
            return NEVER_ID
        if not isinstance(s, dict):
            raise SchemaError("a schema must be an object or a boolean", pointer=ptr)
        nid = self._loc.get(id(s))
        if nid is None:
            base, ptr = self.doc.where(s, base, ptr)
            nid = self._loc[id(s)] = self._new(("loc", s, base), ptr)
        return nid

    def fixed(self, sh: Shallow, ptr: str = "") -> int:
        if sh == ANY_SHALLOW:
            return ANY_ID
        if sh.empty():
            return NEVER_ID
        nid = self._fixed.get(sh)
        if nid is None:
            nid = self._fixed[sh] = self._new(("fixed",), ptr, sh)
        return nid

    def and_id(self, ids: Iterable[int]) -> int:
        members: set[int] = set()
        for i in ids:
            if i == NEVER_ID:
                return NEVER_ID
            if i == ANY_ID:
                continue
            k = self.kinds[i]
            members.update(k[1] if k[0] == "and" else (i,))
        if not members:
            return ANY_ID
        if len(members) == 1:
            return next(iter(members))
        fs = frozenset(members)
        nid = self._and.get(fs)
        if nid is None:
            nid = self._and[fs] = self._new(("and", fs), self.ptrs[min(fs)])
        return nid

    def shallow(self, nid: int) -> Shallow:
        sh = self.shallows[nid]
        if sh is not None:
            return sh
        if nid in self._busy:
            raise SchemaError("circular $ref/allOf with no object or array in between", pointer=self.ptrs[nid])
        self._busy.add(nid)
        try:
            k = self.kinds[nid]
            if k[0] == "loc":
                sh = self._interpret(k[1], self.ptrs[nid], k[2])
            else:
                sh = self.inter(*[self.shallow(m) for m in sorted(k[1])])
        finally:
            self._busy.discard(nid)
        self.shallows[nid] = sh
        return sh

    def try_shallow(self, nid: int) -> Shallow | None:
        return None if nid in self._busy else self.shallow(nid)

    # -- set operations
    def inter(self, *shs: Shallow) -> Shallow:
        out = shs[0]
        for s in shs[1:]:
            out = self._inter2(out, s)
        return out

    def _inter2(self, a: Shallow, b: Shallow) -> Shallow:
        nums = [x & y for x in a.nums for y in b.nums]
        strs = [x & y for x in a.strs for y in b.strs]
        arrs = [self._arr_and(x, y) for x in a.arrs for y in b.arrs]
        objs = [self._obj_and(x, y) for x in a.objs for y in b.objs]
        return Shallow(a.null and b.null, a.true and b.true, a.false and b.false,
                       _alts([x for x in nums if not x.empty()], _GENERIC["nums"]),
                       _alts([x for x in strs if not x.empty()], _GENERIC["strs"]),
                       _alts([x for x in arrs if x is not None], _GENERIC["arrs"]),
                       _alts([x for x in objs if x is not None], _GENERIC["objs"]))

    def _arr_and(self, a: ArrSpec, b: ArrSpec) -> ArrSpec | None:
        n = max(len(a.prefix), len(b.prefix))
        lo = max(a.min_items, b.min_items)
        hi = b.max_items if a.max_items is None else a.max_items if b.max_items is None else min(a.max_items,
                                                                                                  b.max_items)
        if hi is not None and hi < lo:
            return None
        return ArrSpec(tuple(self.and_id((a.elem(i), b.elem(i))) for i in range(n)),
                       self.and_id((a.items, b.items)), lo, hi)

    def _obj_and(self, a: ObjSpec, b: ObjSpec) -> ObjSpec | None:
        hi = b.max_props if a.max_props is None else a.max_props if b.max_props is None else min(a.max_props,
                                                                                                  b.max_props)
        lo = max(a.min_props, b.min_props)
        if hi is not None and hi < lo:
            return None
        req = a.required + tuple(k for k in b.required if k not in a.required)
        srcs = a.sources + tuple(x for x in b.sources if x not in a.sources)
        if req and any(v == NEVER_ID and k in req for x in srcs for k, v in x.props):
            return None  # a required key is forbidden (e.g. a dependency's absent-key alternative)
        if any(self._no_value(srcs, k) for k in req):
            return None  # a required key's values have nothing in common (e.g. two if conditions' consts)
        return ObjSpec(a.order + tuple(k for k in b.order if k not in a.order), srcs, req, lo, hi,
                       a.names + tuple(n for n in b.names if n not in a.names))

    def _no_value(self, srcs: tuple, key: str) -> bool:
        """True when the sources' schemas for ``key`` provably admit no value. Prunes object
        alternatives that if/then/else and oneOf complements multiply: an allOf of n ifs on one
        discriminator would otherwise keep 2^n alternatives, most requiring two constants at once."""
        vals = [v for x in srcs for v in self.source_value(x, key)]
        if len(set(vals)) < 2:
            return False
        sh = self.try_shallow(self.and_id(vals))
        return sh is not None and sh.empty()

    # -- values of keys
    def source_value(self, src: Source, key: str) -> list[int]:
        ids = [v for k, v in src.props if k == key]
        ids += [v for p, v in src.patterns if pattern_matches(p, key)]
        return ids if ids else [src.additional]

    def names_ok(self, o: ObjSpec, key: str) -> bool:
        for n in o.names:
            sh = self.shallow(n)
            if not any(s.contains(key) for s in sh.strs):
                return False
        return True

    def key_value(self, o: ObjSpec, key: str) -> int:
        """The node every value of ``key`` must match in objects of ``o`` (NEVER: key not allowed)."""
        if not self.names_ok(o, key):
            return NEVER_ID
        return self.and_id([v for s in o.sources for v in self.source_value(s, key)])

    # -- disjointness (for oneOf and for deciding unions): True only when provable
    def disjoint(self, a: Shallow, b: Shallow, depth: int = 3) -> bool:
        if (a.null and b.null) or (a.true and b.true) or (a.false and b.false):
            return False
        for x in a.nums:
            for y in b.nums:
                if not _num_disjoint(x, y):
                    return False
        for x in a.strs:
            for y in b.strs:
                if not _str_disjoint(x, y):
                    return False
        for x in a.arrs:
            for y in b.arrs:
                if not self._arr_disjoint(x, y, depth):
                    return False
        for x in a.objs:
            for y in b.objs:
                if not self._obj_disjoint(x, y, depth):
                    return False
        return True

    def _ids_disjoint(self, i: int, j: int, depth: int) -> bool:
        if depth <= 0:
            return False
        a, b = self.try_shallow(i), self.try_shallow(j)
        return a is not None and b is not None and self.disjoint(a, b, depth - 1)

    def _arr_disjoint(self, x: ArrSpec, y: ArrSpec, depth: int) -> bool:
        lo = max(x.min_items, y.min_items)
        hi = [m for m in (x.max_items, y.max_items) if m is not None]
        if hi and min(hi) < lo:
            return True
        return any(self._ids_disjoint(x.elem(i), y.elem(i), depth) for i in range(min(lo, 8)))

    def _obj_disjoint(self, x: ObjSpec, y: ObjSpec, depth: int) -> bool:
        lo = max(x.min_props, y.min_props)
        hi = [m for m in (x.max_props, y.max_props) if m is not None]
        if hi and min(hi) < lo:
            return True
        for k in list(dict.fromkeys(x.required + y.required))[:16]:
            if self._ids_disjoint(self.key_value(x, k), self.key_value(y, k), depth):
                return True
        return False

    # -- keyword interpretation
    def _interpret(self, s: dict, ptr: str, base: str) -> Shallow:
        if "$ref" in s and self.doc.draft <= 7:
            return self.shallow(self._ref(s, "$ref", ptr, base))  # siblings of $ref are ignored
        s = _in_draft(s, self.doc.draft)
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
        (``_obj_auto``) determinises the alternatives, so presence is decided key by key, exactly;
        a D that constrains a later key's object or array value differently is refused there."""
        out = []
        for kw in ("dependencies", "dependentRequired", "dependentSchemas"):
            if kw not in s:
                continue
            v = s[kw]
            if not isinstance(v, dict):
                raise SchemaError(f"{kw} must be an object", pointer=f"{ptr}/{kw}")
            for key, dep in v.items():
                p = f"{ptr}/{kw}/{_esc(key)}"
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
        forbid = _forbid(key)
        present = [o for o in (self._obj_and(ObjSpec(required=(key,)), _opened(x)) for x in then.objs)
                   if o is not None]
        return Shallow(True, True, True, (NumSpec(),), (StrSpec(),), (ArrSpec(),), (forbid, *present))

    def _if_then_else(self, s: dict, ptr: str, base: str) -> Shallow:
        """``if``/``then``/``else`` as (C and T) | (not C and E), a missing branch being ``true``:
        exact where the complement of the condition C is (``_complement``: types, enumerated
        values, string patterns/formats/lengths, named keys of objects and their values, e.g.
        ``{"properties": {"kind": {"const": "a"}}, "required": ["kind"]}``). The two alternatives
        are disjoint, so the object automaton decides between them key by key. C, T and E are
        read open, like a dependentSchemas entry: ``closed_objects`` closes the object that
        declares its keys, not a condition on it, whose keys the others must not forbid."""
        cond = self.shallow(self.location(s["if"], f"{ptr}/if", base))
        then, other = (self.shallow(self.location(s[kw], f"{ptr}/{kw}", base)) if kw in s else ANY_SHALLOW
                       for kw in ("then", "else"))
        try:
            neg = _complement(_opened_shallow(cond), self)
        except _Unsupported as e:
            self.refuse("if", ptr, f"the condition cannot be negated exactly ({str(e).removeprefix('not: ')})")
            return ANY_SHALLOW
        out = union(self.inter(_opened_shallow(cond), _opened_shallow(then)), self.inter(neg, _opened_shallow(other)))
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
        (``_complement``), e.g. "exactly one of these keys", ``"oneOf": [{"required": ["a"]},
        {"required": ["b"]}]``; refused when a complement is not expressible."""
        subs = [self.shallow(i) for i in self._list(s, "oneOf", ptr, base)]
        rest: Shallow | None = None
        overlaps: dict[int, list[int]] = {i: [] for i in range(len(subs))}
        for i in range(len(subs)):
            for j in range(i + 1, len(subs)):
                if self.disjoint(subs[i], subs[j]):
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
                negs[j] = _complement(_opened_shallow(subs[j]), self)
            except _Unsupported as e:
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
        d = _num(v)
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
        d = _num(s[kw])
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
                                  f"{_DRAFT_NAMES[self.doc.draft]}", pointer=f"{ptr}/{kw}")
            if not isinstance(s[kw], bool) and _num(s[kw]) is None:
                raise SchemaError(f"{kw} must be a number", pointer=f"{ptr}/{kw}")
        s = dict(s)
        for kw in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            v = _num(s.get(kw))
            if v is not None and v != 0 and abs(v.adjusted()) > MAX_BOUND_EXPONENT:
                # the bound's automaton counts digits up to it: 1e300 took 57 s to determinise
                self.refuse(kw, ptr, f"a bound of magnitude 1e{v.adjusted()} (more than {MAX_BOUND_EXPONENT} "
                                     f"digits to count) is not supported")
                del s[kw]
        lo, hi = _num(s.get("minimum")), _num(s.get("maximum"))
        lo_x = d4 and s.get("exclusiveMinimum") is True
        hi_x = d4 and s.get("exclusiveMaximum") is True
        spec = spec & NumSpec(lo=lo, lo_x=lo_x and lo is not None, hi=hi, hi_x=hi_x and hi is not None)
        xlo, xhi = _num(s.get("exclusiveMinimum")), _num(s.get("exclusiveMaximum"))
        if xlo is not None and not d4:
            spec = spec & NumSpec(lo=xlo, lo_x=True)
        if xhi is not None and not d4:
            spec = spec & NumSpec(hi=xhi, hi_x=True)
        fmt = s.get("format") if self.formats else None
        if isinstance(fmt, str) and fmt in NUMBER_FORMATS:
            a, b = NUMBER_FORMATS[fmt]
            spec = spec & NumSpec(integer=True, lo=Decimal(a), hi=Decimal(b))
        if "multipleOf" in s:
            m = _num(s["multipleOf"])
            if m is None or m <= 0:
                raise SchemaError("multipleOf must be a positive number", pointer=f"{ptr}/multipleOf")
            trial = spec & NumSpec(mults=frozenset([m]))
            try:
                trial.regex()
                spec = trial
            except _Unsupported as e:
                self.refuse("multipleOf", ptr, str(e))
        return spec

    def _strspec(self, s: dict, ptr: str) -> StrSpec:
        lo, hi = self._count(s, "minLength", ptr), self._count(s, "maxLength", ptr)
        if lo is not None and lo > MAX_STRING:  # maxLength is counted in levels (_Emitter._level_rules)
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
            except _Unsupported as e:
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
                pats.append((p, self.location(v, f"{ptr}/patternProperties/{_esc(p)}", base)))
            except _Unsupported as e:
                self.refuse("patternProperties", ptr, f"pattern {p!r}: {e}; additional properties allowed")
                additional = ANY_ID
        src = Source(tuple((k, self.location(v, f"{ptr}/properties/{_esc(k)}", base)) for k, v in props.items()),
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
        if isinstance(sub, dict) and "not" in sub and not (set(_in_draft(sub, self.doc.draft)) - _ANNOTATIONS - {"not"}):
            # double negation: {"not": {"not": S}} is S
            return self.shallow(self.location(sub["not"], f"{ptr}/not/not", base))
        nid = self.location(sub, f"{ptr}/not", base)
        try:
            return _complement(self.shallow(nid), self)
        except _Unsupported as e:
            self.refuse("not", ptr, str(e))
            return ANY_SHALLOW


def _opened(o: ObjSpec) -> ObjSpec:
    return ObjSpec(o.order, tuple(s.opened() for s in o.sources), o.required, o.min_props, o.max_props, o.names)


def _opened_shallow(sh: Shallow) -> Shallow:
    return replace(sh, objs=tuple(map(_opened, sh.objs))) if sh.objs else sh


def _forbid(key: str) -> ObjSpec:
    """Objects without ``key``."""
    return ObjSpec((key,), (Source(((key, NEVER_ID),), (), ANY_ID),))


def _never(b: "_Builder", nid: int) -> bool:
    sh = NEVER_SHALLOW if nid == NEVER_ID else b.try_shallow(nid)
    return sh is not None and sh.empty()


MAX_COMPLEMENT_DEPTH = 8  # nested values a complement negates (a recursive schema would not end)


def _obj_complement(objs: tuple, b: "_Builder", depth: int) -> tuple:
    """The objects in none of ``objs``, when each is a condition on named keys: required keys R,
    values V_k of declared keys (``false``: forbidden) and min/max counts. An object is in one
    of them iff every k of R is present, every present declared k has its value in V_k and the
    count fits, so the complement of one is (some k of R absent) | (some declared k present with
    a value not in V_k) | (too few) | (too many), and of several the intersection of theirs.
    _Unsupported for conditions on keys not named (patternProperties, additionalProperties,
    propertyNames) and for values whose complement is not expressible (``_complement``)."""
    if not objs:
        return (ObjSpec(),)
    out: list | None = None
    for o in map(_opened, objs):  # the spec's reading inside not: closing would widen the complement
        if o.names or any(s.patterns or s.additional != ANY_ID for s in o.sources):
            raise _Unsupported("not: only conditions on named keys of objects can be negated (not "
                               "patternProperties, additionalProperties or propertyNames)")
        alts = [_forbid(k) for k in o.required]
        for s in o.sources:
            for k, v in s.props:
                sh = NEVER_SHALLOW if v == NEVER_ID else b.try_shallow(v)
                if sh is None:
                    raise _Unsupported("not: a negated object refers back to itself (recursion)")
                neg = b.fixed(_complement(sh, b, depth + 1))
                if neg != NEVER_ID:  # k present with a value V_k does not allow
                    alts.append(ObjSpec((k,), (Source(((k, neg),), (), ANY_ID),), (k,)))
        if o.min_props:
            alts.append(ObjSpec(max_props=o.min_props - 1))
        if o.max_props is not None:
            alts.append(ObjSpec(min_props=o.max_props + 1))
        if out is None:
            out = alts
        else:
            out = [z for z in (b._obj_and(x, y) for x in out for y in alts) if z is not None]
        if len(out) > MAX_DEP_BRANCHES:
            raise _Unsupported(f"not: more than {MAX_DEP_BRANCHES} object alternatives")
    return tuple(dict.fromkeys(out or ()))


def _complement(sh: Shallow, b: "_Builder", depth: int = 0) -> Shallow:
    """Every JSON value not in ``sh``, when that is expressible exactly."""
    if depth > MAX_COMPLEMENT_DEPTH:
        raise _Unsupported(f"not: a negated value nested more than {MAX_COMPLEMENT_DEPTH} levels deep")
    nums: tuple = (NumSpec(),)
    if sh.nums:
        if sh.nums == (NumSpec(),):
            nums = ()
        elif all(x.values is not None for x in sh.nums):
            nums = (NumSpec(exclude=frozenset(v for x in sh.nums for v in x.values)),)
        else:
            raise _Unsupported("not: only types and enumerated numbers can be negated")
    strs: tuple = (StrSpec(),)
    if sh.strs:
        if sh.strs == (StrSpec(),):
            strs = ()
        elif all(x.values is not None for x in sh.strs):
            strs = (StrSpec(exclude=frozenset(v for x in sh.strs for v in x.values)),)
        else:  # patterns, formats, lengths: the automaton's difference (StrSpec.fsm)
            strs = (StrSpec(minus=sh.strs),)
    if sh.arrs and sh.arrs != (ArrSpec(),):
        raise _Unsupported("not: only types of arrays can be negated")
    objs = () if ObjSpec() in sh.objs else _obj_complement(sh.objs, b, depth)
    return Shallow(not sh.null, not sh.true, not sh.false, nums, strs, () if sh.arrs else (ArrSpec(),), objs)


def _num_disjoint(x: NumSpec, y: NumSpec) -> bool:
    z = x & y
    if z.empty():
        return True
    try:
        rx, ry = x.regex(), y.regex()
    except _Unsupported:
        return False
    if rx is None or ry is None:
        return True
    try:
        return fsm_and(_fsm(rx), _fsm(ry)).empty()
    except _TooComplex:
        return False


def _str_disjoint(x: StrSpec, y: StrSpec) -> bool:
    z = x & y
    if z.empty():
        return True
    try:
        return fsm_and(x.fsm(), y.fsm()).empty()
    except (_Unsupported, _TooComplex):
        return False
