"""Schema nodes and their algebra: ``NodeTable`` numbers nodes (schema locations, fixed shallow
meanings, intersections), computes their shallow meanings (``Shallow``) on demand, intersects them
(``allOf``), gives the node of an object key's values, decides disjointness (``oneOf``, unions)
and records or raises refusals (``IgnoredKeyword``, ``SchemaError``). What a location means, its
keywords, is ``builder.NodeBuilder``'s part."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from trellis.constrain.errors import SchemaError
from trellis.constrain.frontends.json_schema.documents import SchemaDocument, pointer_token
from trellis.constrain.frontends.json_schema.specs import (ANY_ID, ANY_SHALLOW, GENERIC_SPECS, NEVER_ID, NEVER_SHALLOW, ArrSpec,
                                                 ObjSpec, Shallow, Source, StrSpec, distinct_specs)
from trellis.constrain.frontends.pattern import pattern_matches
from trellis.constrain.frontends.ranges import NumSpec
from trellis.constrain.automata.regex_ir import TooComplex, Unsupported, fsm_and, regex_fsm


@dataclass(frozen=True)
class IgnoredKeyword:
    """A keyword ``lenient=True`` ignored: the grammar accepts more than the schema there."""

    keyword: str
    pointer: str
    reason: str


class NodeTable:
    """Nodes (ids), their shallow meaning, intersections and disjointness; ``_interpret`` (the
    meaning of a schema location) is ``NodeBuilder``'s."""

    def __init__(self, doc: SchemaDocument, *, lenient: bool) -> None:
        self.doc = doc
        self.lenient = lenient
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
            raise SchemaError(f"{keyword}: {reason}", pointer=f"{ptr}/{pointer_token(keyword)}")
        self.ignored.append(IgnoredKeyword(keyword, f"{ptr}/{pointer_token(keyword)}", reason))

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
        objs = [self.obj_and(x, y) for x in a.objs for y in b.objs]
        return Shallow(a.null and b.null, a.true and b.true, a.false and b.false,
                       distinct_specs([x for x in nums if not x.empty()], GENERIC_SPECS["nums"]),
                       distinct_specs([x for x in strs if not x.empty()], GENERIC_SPECS["strs"]),
                       distinct_specs([x for x in arrs if x is not None], GENERIC_SPECS["arrs"]),
                       distinct_specs([x for x in objs if x is not None], GENERIC_SPECS["objs"]))

    def _arr_and(self, a: ArrSpec, b: ArrSpec) -> ArrSpec | None:
        n = max(len(a.prefix), len(b.prefix))
        lo = max(a.min_items, b.min_items)
        hi = b.max_items if a.max_items is None else a.max_items if b.max_items is None else min(a.max_items,
                                                                                                  b.max_items)
        if hi is not None and hi < lo:
            return None
        return ArrSpec(tuple(self.and_id((a.elem(i), b.elem(i))) for i in range(n)),
                       self.and_id((a.items, b.items)), lo, hi)

    def obj_and(self, a: ObjSpec, b: ObjSpec) -> ObjSpec | None:
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

    def apart_by_tag(self, subs: list[Shallow], keys: int = 4) -> set[tuple[int, int]]:
        """Pairs (i, j), i < j, of object-only alternatives that one required key proves disjoint:
        the key's values are finite sets of strings with no string in common (a tagged union,
        ``"type": {"const": "abs"}`` or ``"pattern": "^Abs$"``). One pass over the branches per
        key instead of ``disjoint`` per pair: Github_ultra o17072's ``oneOf`` of 41 tagged
        modules made 820 pair tests, 20 of its 32 ms translation. Only sound claims: a pair it
        leaves out may still be disjoint (``disjoint`` decides those). The keys tried are the
        first branch's first object's first ``keys`` required keys."""
        first = next((sh.objs[0] for sh in subs if sh.objs), None)
        apart: set[tuple[int, int]] = set()
        for key in first.required[:keys] if first is not None else ():
            tags = [self._tag_words(sh, key) for sh in subs]
            for i, a in enumerate(tags):
                if a is not None:
                    apart.update((i, j) for j in range(i + 1, len(tags))
                                 if tags[j] is not None and a.isdisjoint(tags[j]))
        return apart

    def _tag_words(self, sh: Shallow, key: str) -> set[str] | None:
        """Every string ``key`` may have in the objects of ``sh``, which must require it; None
        when ``sh`` is not only objects, an object does not require ``key``, or its values are
        not a few strings."""
        if not sh.objs or sh.null or sh.true or sh.false or sh.nums or sh.strs or sh.arrs:
            return None
        words: set[str] = set()
        for o in sh.objs:
            if key not in o.required:
                return None
            v = self.try_shallow(self.key_value(o, key))
            if v is None or v.null or v.true or v.false or v.nums or v.arrs or v.objs:
                return None
            for s in v.strs:
                ws = s.words()
                if ws is None:
                    return None
                words.update(ws)
        return words

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

    def _interpret(self, s: dict, ptr: str, base: str) -> Shallow:
        """The shallow meaning of schema ``s`` at ``ptr``: its keywords, read by ``NodeBuilder``."""
        raise NotImplementedError


def _num_disjoint(x: NumSpec, y: NumSpec) -> bool:
    z = x & y
    if z.empty():
        return True
    try:
        rx, ry = x.regex(), y.regex()
    except Unsupported:
        return False
    if rx is None or ry is None:
        return True
    try:
        return fsm_and(regex_fsm(rx), regex_fsm(ry)).empty()
    except TooComplex:
        return False


def _str_disjoint(x: StrSpec, y: StrSpec) -> bool:
    z = x & y
    if z.empty():
        return True
    try:
        for a, b in ((x, y), (y, x)):
            ws = a.words()  # a few strings (a tag, an enum): test them, no automata product
            if ws is not None:
                return not any(b.contains(w) for w in ws)
        return fsm_and(x.fsm(), y.fsm()).empty()
    except (Unsupported, TooComplex):
        return False
