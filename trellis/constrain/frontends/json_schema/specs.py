"""The value types of schema nodes: ``StrSpec`` (a set of strings), ``ArrSpec``, ``Source`` /
``ObjSpec`` (objects), ``Shallow`` (a node's meaning split by JSON type, children as node ids)
and their ``union``. Numbers are ``trellis.constrain.frontends.ranges.NumSpec``."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable

from trellis.constrain.automata.finite_words import ir_words
from trellis.constrain.frontends.formats import format_ir
from trellis.constrain.frontends.json_schema.limits import CHUNK, MAX_STRING
from trellis.constrain.frontends.pattern import pattern_ir, pattern_matches, pattern_words, regex_matcher
from trellis.constrain.frontends.ranges import NumSpec
from trellis.constrain.automata.regex_ir import (ANY, ANYSTAR, JSON_CONTENT, JSON_UNIT, MAX_REPEAT, NONE, Unsupported, alt,
                                        dec_regex, empty_fsm, enc_regex, fsm_and, fsm_regex, fsm_sub, ir_fsm, ir_len,
                                        lit, quantifier, regex_atom, rep)


# ============================================================================ strings


@dataclass(frozen=True)
class StrSpec:
    """A set of strings: length, patterns, formats, enumerated or excluded values, minus the
    strings of other specs (``minus``: what ``not``, ``oneOf`` and ``if`` negate)."""

    min_len: int = 0
    max_len: int | None = None
    patterns: tuple = ()
    formats: tuple = ()
    values: frozenset | None = None
    exclude: frozenset = frozenset()
    minus: tuple = ()  # StrSpecs whose strings are not in this set

    def contains(self, s: str) -> bool:
        if len(s) < self.min_len or (self.max_len is not None and len(s) > self.max_len):
            return False
        if self.values is not None and s not in self.values:
            return False
        if s in self.exclude or any(not pattern_matches(p, s) for p in self.patterns):
            return False
        if any(m.contains(s) for m in self.minus):
            return False
        return all(regex_matcher(dec_regex(format_ir(f))).fullmatch(s) for f in self.formats)

    def __and__(self, o: "StrSpec") -> "StrSpec":
        values = self.values if o.values is None else (o.values if self.values is None else self.values & o.values)
        r = StrSpec(max(self.min_len, o.min_len),
                    o.max_len if self.max_len is None else self.max_len if o.max_len is None else
                    min(self.max_len, o.max_len),
                    tuple(dict.fromkeys(self.patterns + o.patterns)), tuple(dict.fromkeys(self.formats + o.formats)),
                    values, self.exclude | o.exclude, tuple(dict.fromkeys(self.minus + o.minus)))
        if values is not None:
            r = StrSpec(values=frozenset(v for v in values if r.contains(v)))
        return r

    def empty(self) -> bool:
        if self.values is not None:
            return not self.values
        return self.max_len is not None and self.max_len < self.min_len

    def words(self) -> list[str] | None:
        """Every string of this set when it is an enumeration or one of its patterns or formats
        is a finite language of at most ``finite_words.LIMIT`` strings (``^Abs$``, ``^(a|b)$``);
        None otherwise. Exact: a candidate is kept when ``contains`` holds."""
        if self.values is not None:
            return [v for v in self.values if self.contains(v)]
        for ws in [pattern_words(p) for p in self.patterns] + [ir_words(format_ir(f)) for f in self.formats]:
            if ws is not None:
                return [w for w in ws if self.contains(w)]
        return None

    def _irs(self) -> list[tuple]:
        irs = [pattern_ir(p) for p in self.patterns] + [format_ir(f) for f in self.formats]
        if self.min_len or self.max_len is not None:
            lens = [ir_len(x) for x in irs]
            implied = any(a >= self.min_len and b is not None and self.max_len is not None and b <= self.max_len
                          or a >= self.min_len and self.max_len is None for a, b in lens)
            if not implied:
                irs.insert(0, rep(ANY, self.min_len, self.max_len))
        return irs

    def fsm(self) -> Any:
        """interegular FSM of the decoded strings."""
        if self.values is not None:
            vs = [v for v in self.values if self.contains(v)]
            return ir_fsm(alt(*[lit(v) for v in vs])) if vs else empty_fsm()
        if self.min_len > MAX_STRING or (self.max_len or 0) > MAX_STRING:
            raise Unsupported(f"string length bound above {MAX_STRING} in an automaton")
        irs = self._irs() or [ANYSTAR]
        f = ir_fsm(irs[0])
        for x in irs[1:]:
            f = fsm_and(f, ir_fsm(x))
        if self.exclude:
            f = fsm_sub(f, ir_fsm(alt(*[lit(v) for v in self.exclude])))
        for m in self.minus:
            f = fsm_sub(f, m.fsm())
        return f

    def chunked(self) -> tuple[int, int | None] | None:
        """(min, max) when this is a long length-only spec, compiled as chunk rules (see
        ``ScalarRules._chunk_rules``) rather than as one regex."""
        if self.values is not None or self.patterns or self.formats or self.exclude or self.minus:
            return None
        if self.min_len > CHUNK or (self.max_len is not None and self.max_len > CHUNK):
            return self.min_len, self.max_len
        return None

    def pattern_chunked(self) -> tuple[Any, int, int | None] | None:
        """(P, min, max) when this is a pattern (format, exclusion, negation) with a length bound
        longer than CHUNK that the pattern does not imply: compiled as chunk rules over P's states
        (``pattern_chunks``) rather than as the product of P and a counter. P is the automaton of
        everything but the length."""
        if self.values is not None or not (self.patterns or self.formats or self.exclude or self.minus):
            return None
        if max(self.min_len, self.max_len or 0) <= CHUNK or self.empty():
            return None
        irs = self._irs()
        if not irs or irs[0] != rep(ANY, self.min_len, self.max_len):
            return None  # the bound is implied by a pattern or format: no counter needed
        return replace(self, min_len=0, max_len=None).fsm(), self.min_len, self.max_len

    def _check_lengths(self) -> None:
        """Unsupported when a length bound of this spec, or of one it subtracts, is too long for
        one automaton (chunk rules count long lengths, but only alone: see ``chunked``)."""
        if any(max(ir_len(x)[0], ir_len(x)[1] or 0) > MAX_REPEAT for x in self._irs()):
            raise Unsupported(f"string length bound above {MAX_REPEAT} with a pattern, format or negation")
        for m in self.minus:
            m._check_lengths()

    def regex(self) -> str | None:
        """Regex of the JSON string *content* (between the quotes); None if empty."""
        if self.values is not None:
            vs = sorted(v for v in self.values if self.contains(v))
            return None if not vs else enc_regex(alt(*[lit(v) for v in vs]))
        if not self.patterns and not self.formats and not self.exclude and not self.minus:
            if not self.min_len and self.max_len is None:
                return JSON_CONTENT
            if self.max_len is not None and self.max_len < self.min_len:
                return None
            return regex_atom(JSON_UNIT) + quantifier(self.min_len, self.max_len)
        self._check_lengths()
        irs = self._irs()
        if len(irs) == 1 and not self.exclude and not self.minus:
            return None if irs[0] == NONE else enc_regex(irs[0])
        f = self.fsm()
        return None if f.empty() else fsm_regex(f, enc_regex)


# ============================================================================ schema nodes
# A node is the meaning of a subschema split by JSON type ("shallow": children are node ids).

ANY_ID, NEVER_ID = 0, 1


@dataclass(frozen=True)
class ArrSpec:
    prefix: tuple = ()
    items: int = ANY_ID
    min_items: int = 0
    max_items: int | None = None

    def elem(self, i: int) -> int:
        return self.prefix[i] if i < len(self.prefix) else self.items


@dataclass(frozen=True)
class Source:
    """One object schema's properties / patternProperties / additionalProperties."""

    props: tuple = ()  # ((key, node), ...)
    patterns: tuple = ()  # ((pattern, node), ...)
    additional: int = ANY_ID
    closed: bool = False  # additional is NEVER only by closed_objects (no additionalProperties keyword)

    def opened(self) -> "Source":
        """The spec's reading: other keys allowed where only ``closed_objects`` forbade them."""
        return Source(self.props, self.patterns, ANY_ID) if self.closed else self


@dataclass(frozen=True)
class ObjSpec:
    order: tuple = ()  # declared keys, in order
    sources: tuple = ()  # allOf-merged object schemas: every source applies to every key
    required: tuple = ()
    min_props: int = 0
    max_props: int | None = None
    names: tuple = ()  # propertyNames node ids


@dataclass(frozen=True)
class Shallow:
    null: bool = False
    true: bool = False
    false: bool = False
    nums: tuple = ()
    strs: tuple = ()
    arrs: tuple = ()
    objs: tuple = ()

    def empty(self) -> bool:
        return not (self.null or self.true or self.false or self.nums or self.strs or self.arrs or self.objs)


ANY_SHALLOW = Shallow(True, True, True, (NumSpec(),), (StrSpec(),), (ArrSpec(),), (ObjSpec(),))
NEVER_SHALLOW = Shallow()
# The unconstrained spec of each Shallow field: an alternative list holding it is just that spec.
GENERIC_SPECS = {"nums": NumSpec(), "strs": StrSpec(), "arrs": ArrSpec(), "objs": ObjSpec()}


def distinct_specs(xs: Iterable, generic: Any) -> tuple:
    """The distinct specs of ``xs`` in order, or only ``generic`` when it is one of them."""
    # By hash (specs are frozen dataclasses of hashable fields; NodeTable.fixed hashes whole
    # Shallows already): an enum of n strings is n specs, and pairwise tests were quadratic (an
    # enum of 392 values: 13 ms per union, Github_ultra o13020's).
    seen = dict.fromkeys(xs)
    return (generic,) if generic in seen else tuple(seen)


def union(*shs: Shallow) -> Shallow:
    return Shallow(any(s.null for s in shs), any(s.true for s in shs), any(s.false for s in shs),
                   *[distinct_specs([x for s in shs for x in getattr(s, f)], g) for f, g in GENERIC_SPECS.items()])
