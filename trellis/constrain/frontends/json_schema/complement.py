"""Complements of shallow meanings, where they are exact (``not``, ``if`` conditions, overlapping
``oneOf`` branches): every JSON value not in a ``Shallow``, types, enumerated scalars, string
languages and conditions on named object keys; ``Unsupported`` for the rest. Conditions are
negated open (``opened_shallow``): ``closed_objects`` closes the object that declares its keys,
not a condition on it."""

from __future__ import annotations

from dataclasses import replace

from trellis.constrain.frontends.json_schema.limits import MAX_DEP_BRANCHES
from trellis.constrain.frontends.json_schema.nodes import NodeTable
from trellis.constrain.frontends.json_schema.specs import (ANY_ID, NEVER_ID, NEVER_SHALLOW, ArrSpec, ObjSpec, Shallow, Source,
                                                 StrSpec)
from trellis.constrain.frontends.ranges import NumSpec
from trellis.constrain.automata.regex_ir import Unsupported


def opened(o: ObjSpec) -> ObjSpec:
    """``o`` with the other keys its sources forbid only by ``closed_objects`` allowed."""
    return ObjSpec(o.order, tuple(s.opened() for s in o.sources), o.required, o.min_props, o.max_props, o.names)


def opened_shallow(sh: Shallow) -> Shallow:
    """``sh`` with its objects ``opened``."""
    return replace(sh, objs=tuple(map(opened, sh.objs))) if sh.objs else sh


def forbid(key: str) -> ObjSpec:
    """Objects without ``key``."""
    return ObjSpec((key,), (Source(((key, NEVER_ID),), (), ANY_ID),))


MAX_COMPLEMENT_DEPTH = 8  # nested values a complement negates (a recursive schema would not end)


def _obj_complement(objs: tuple, b: NodeTable, depth: int) -> tuple:
    """The objects in none of ``objs``, when each is a condition on named keys: required keys R,
    values V_k of declared keys (``false``: forbidden) and min/max counts. An object is in one
    of them iff every k of R is present, every present declared k has its value in V_k and the
    count fits, so the complement of one is (some k of R absent) | (some declared k present with
    a value not in V_k) | (too few) | (too many), and of several the intersection of theirs.
    Unsupported for conditions on keys not named (patternProperties, additionalProperties,
    propertyNames) and for values whose complement is not expressible (``complement``)."""
    if not objs:
        return (ObjSpec(),)
    out: list | None = None
    for o in map(opened, objs):  # the spec's reading inside not: closing would widen the complement
        if o.names or any(s.patterns or s.additional != ANY_ID for s in o.sources):
            raise Unsupported("not: only conditions on named keys of objects can be negated (not "
                               "patternProperties, additionalProperties or propertyNames)")
        alts = [forbid(k) for k in o.required]
        for s in o.sources:
            for k, v in s.props:
                sh = NEVER_SHALLOW if v == NEVER_ID else b.try_shallow(v)
                if sh is None:
                    raise Unsupported("not: a negated object refers back to itself (recursion)")
                neg = b.fixed(complement(sh, b, depth + 1))
                if neg != NEVER_ID:  # k present with a value V_k does not allow
                    alts.append(ObjSpec((k,), (Source(((k, neg),), (), ANY_ID),), (k,)))
        if o.min_props:
            alts.append(ObjSpec(max_props=o.min_props - 1))
        if o.max_props is not None:
            alts.append(ObjSpec(min_props=o.max_props + 1))
        if out is None:
            out = alts
        else:
            out = [z for z in (b.obj_and(x, y) for x in out for y in alts) if z is not None]
        if len(out) > MAX_DEP_BRANCHES:
            raise Unsupported(f"not: more than {MAX_DEP_BRANCHES} object alternatives")
    return tuple(dict.fromkeys(out or ()))


def complement(sh: Shallow, b: NodeTable, depth: int = 0) -> Shallow:
    """Every JSON value not in ``sh``, when that is expressible exactly."""
    if depth > MAX_COMPLEMENT_DEPTH:
        raise Unsupported(f"not: a negated value nested more than {MAX_COMPLEMENT_DEPTH} levels deep")
    nums: tuple = (NumSpec(),)
    if sh.nums:
        if sh.nums == (NumSpec(),):
            nums = ()
        elif all(x.values is not None for x in sh.nums):
            nums = (NumSpec(exclude=frozenset(v for x in sh.nums for v in x.values)),)
        else:
            raise Unsupported("not: only types and enumerated numbers can be negated")
    strs: tuple = (StrSpec(),)
    if sh.strs:
        if sh.strs == (StrSpec(),):
            strs = ()
        elif all(x.values is not None for x in sh.strs):
            strs = (StrSpec(exclude=frozenset(v for x in sh.strs for v in x.values)),)
        else:  # patterns, formats, lengths: the automaton's difference (StrSpec.fsm)
            strs = (StrSpec(minus=sh.strs),)
    if sh.arrs and sh.arrs != (ArrSpec(),):
        raise Unsupported("not: only types of arrays can be negated")
    objs = () if ObjSpec() in sh.objs else _obj_complement(sh.objs, b, depth)
    return Shallow(not sh.null, not sh.true, not sh.false, nums, strs, () if sh.arrs else (ArrSpec(),), objs)

