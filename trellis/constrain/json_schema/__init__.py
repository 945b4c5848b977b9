"""JSON Schema -> Lark grammar text for the CFG engine: exact, or refused with the JSON pointer.

``JsonSchema(schema).to_lark()`` returns a grammar whose language is a set of JSON texts that
are *all* valid instances of the schema (drafts 2020-12, 2019-09, 07, 06 and 04 spellings);
``trellis.constrain.compile(JsonSchema(...), vocab)`` compiles it like any grammar. Honesty rule:
a keyword the grammar cannot enforce exactly raises ``SchemaError`` naming the keyword and its
JSON pointer, unless ``lenient=True``, where it is ignored (the language grows) and listed in
``ignored_keywords``. Malformed schemas (not JSON, unknown ``$ref``, empty ``enum``, a ``type``
no ``enum`` value has, contradictory ``allOf``, a schema matching nothing) raise ``SchemaError``.

What the language is (the documented narrowings: valid instances outside it are rejected,
an invalid instance is never accepted)
---------------------------------------------------------------------------------------------
* **Property order.** Declared ``properties`` come in the order the schema lists them (for
  ``allOf`` merges: first schema first), then required-but-undeclared keys in ``required``
  order, then the other (``patternProperties`` / ``additionalProperties``) keys; ``order_keys``
  puts an instance in that order. Where other keys are allowed, a declared key may come again
  among them, each value checked against its own schema (valid whichever duplicate a parser
  keeps); closed objects never repeat a key. Repeated other keys are not detected, so
  ``minProperties`` counts declared keys in order plus one other key (refused when other keys are
  allowed and it is 2 or more: two other keys may repeat one name, which a grammar cannot rule out).
* **additionalProperties** absent: by default (``closed_objects=True``) it is read as ``false`` in
  schemas that declare ``properties`` or ``patternProperties`` (what xgrammar's ``strict_mode``,
  outlines and most LLM tools do): a documented narrowing, the output never has undeclared keys.
  Chosen by measurement (``benchmarks/bench_schema_defaults.py``, Gemma 3 270M on 50 maskbench
  extraction prompts: 82% valid outputs and 54% of reference fields exact, against 52% and 33%
  with open objects, where the model invented 32 keys). ``closed_objects=False`` is the spec's
  reading, "any other key"; free-form ``{"type": "object"}`` stays open either way.
* **Strings** are UTF-8 text. A string with no constraint accepts every JSON escape. A
  constrained one (``minLength``/``maxLength``, ``pattern``, ``format``, ``enum``, ``const``,
  ``not``) spells characters raw, except ``"`` ``\\`` and control characters, which must be
  escaped (``\\"``, ``\\n``, ``\\u001f`` ...); ``/`` may also be ``\\/``; ``\\uXXXX`` of other
  characters is rejected. Object keys of schemas with declared properties must be spelled as
  ``json.dumps`` does (one spelling: no ``\\/``). Lengths count code points; a bound above 16
  compiles as rules over 16-character lexemes (above 8192, counted in levels of 16, 256, 4096 ...
  characters); a ``minLength`` above 8192, or a ``maxLength`` above 2048 with a pattern or format,
  is refused.
* **Numbers.** Unconstrained numbers accept all JSON numbers. Integers, and numbers with
  bounds, ``multipleOf``, ``enum`` or ``const``, are written in plain decimal notation
  (``1.0`` is an integer, ``1e2`` is rejected). Bounds are exact (decimal arithmetic).
* **Whitespace.** ``"compact"`` (default): none at all, one spelling per value — fewest tokens,
  and a weak model cannot loop on spaces. Kept by measurement (``bench_schema_defaults.py``, 80
  schemas with closed objects: 75% valid outputs and 48% of reference fields exact, against 67.5%
  and 47% with flexible whitespace, whose runs of blanks become loops), although compact costs
  numbers their sign or value where the model wanted ``": "`` (BFCL numbers 62% exact vs 76%). ``"flexible"``: a run of at most ``max_whitespace``
  bytes of ``[ \\t\\n\\r]`` after ``{ [ , :`` and before ``} ] , :``, which covers
  ``json.dumps(x, indent=2)``; never before or after the whole value.
* **Formats** are asserted (the format-assertion vocabulary; ``format_assertion=False`` makes them
  annotations as 2020-12 does by default): date-time, date, time, email (RFC 5321 mailbox), uuid,
  uri, uri-reference (RFC 3986), ipv4, ipv6, hostname; int32/int64 on numbers. Leap seconds are
  accepted only as ``23:59:60`` with ``Z`` or a ``+-00:00`` offset; hostnames (at most 253 bytes)
  as up to four labels, 8 labels of <= 30 bytes or 12 of <= 20, and labels with ``--`` in
  positions 3-4 (IDNA A-labels, whose punycode a regex cannot check) are rejected. A format no
  draft defines (``url``, ``byte``, ``semver``, ...) is an annotation, as every draft says: it
  constrains nothing and is ignored (``unknown_formats="refuse"`` refuses it by name instead); a
  defined format trellis cannot assert (``regex``, ``duration``, ``iri``, ...) is refused.
* **Patterns** use ECMA-262 semantics (``\\d \\w`` ASCII, ``\\s`` Unicode space, ``.`` excludes
  line terminators, ``$`` only at the end) with search semantics: unanchored unless ``^``/``$``.

Supported: ``type`` (and type arrays; in draft-04 ``integer`` means a number spelled without a
fraction or exponent, so ``1.0`` is not one; from draft-06 on any number with a zero fraction is), ``enum``, ``const``, ``properties``, ``required``,
``additionalProperties``, ``patternProperties``, ``propertyNames``, ``minProperties``,
``maxProperties``, ``items``, ``prefixItems``, array ``items`` + ``additionalItems``,
``minItems``, ``maxItems``, ``minLength``, ``maxLength``, ``pattern``, ``format``, ``minimum``,
``maximum``, ``exclusiveMinimum``/``exclusiveMaximum`` (number and draft-04 boolean forms),
``multipleOf`` (powers of ten; a/10^d with a dividing 1000; any value over a bounded range),
``allOf`` (merged), ``anyOf``, ``dependentRequired``, ``dependentSchemas``, ``dependencies``
(key absent | key present and D), and negation where the complement is exact: ``not`` of types,
enumerated scalars, string patterns/formats/lengths, double negation, and objects' conditions on
named keys (required, forbidden, counts, values of declared keys, recursively: ``{"not":
{"properties": {"type": {"const": "group"}}}}``); ``if``/``then``/``else`` as (if and then) | (not if
and else), e.g. on a const-discriminated property; ``oneOf`` as the union of (A_i and not A_j) over
the branches j that may overlap A_i (none where the branches are provably disjoint under their
siblings; "exactly one of these keys"); ``$ref`` with ``$defs``/``definitions``/``$id``/``$anchor``/
JSON pointers (recursion included; draft <= 7 ignores ``$ref`` siblings), ``nullable`` (OpenAPI).
Patterns may have ``^``/``$`` anywhere (``^$|^a+$``, ``(,|$)`` in a group). Annotations and
unknown keywords are ignored, as the spec says. Refused: ``uniqueItems: true``, ``contains``,
``unevaluated*``, ``$dynamicRef``, ``$recursiveRef``, other ``multipleOf`` forms, negations
(``not``, ``if`` conditions, overlapping ``oneOf`` branches) of bounded or ``multipleOf``
numbers, of arrays with item conditions, or of conditions on keys not named (patternProperties,
additionalProperties, propertyNames), and those making more than 64 object alternatives;
defined formats trellis cannot assert (``regex``, ``duration``, ``iri`` ...), draft-03 keywords,
remote ``$ref``, custom ``$schema`` dialects, regex features without an exact automaton
(lookaround, backreferences, ``\\b``, ``\\p{..}``), and unions that cannot be decided left to
right (e.g. two alternatives with different objects at the same place).

Grammar shape
-------------
One value rule per schema node (nodes are deduplicated up to bisimulation). Scalars of a node
are one terminal per JSON type (all string alternatives of an ``anyOf`` are one regex, the
quotes included), so a parser state never has two competing string terminals. Objects and
arrays are left-linear rules of a *deterministic* automaton over (key class, value) pairs or
items: every ``anyOf`` alternative is an automaton, the union is determinised, and values of
one key that differ between alternatives are split by type and by regex (Venn regions), so the
grammar is LALR(1) and its contextual lexer collision-free. Declared keys are literals with the
highest terminal priority; the other key classes are regexes ranked by how many patterns they
match, each cut of the keys that have no transition where it is in the lexer context.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Callable, Iterable, Literal
from urllib.parse import unquote, urldefrag, urljoin

from trellis.constrain.charsets import cs, cs_neg
from trellis.constrain.errors import SchemaError
from trellis.constrain.formats import NUMBER_FORMATS, SPEC_FORMATS, STRING_FORMATS, format_ir
from trellis.constrain.pattern import _matcher, pattern_ir, pattern_matches
from trellis.constrain.ranges import NumSpec
from trellis.constrain.regex_ir import (ANY, ANYSTAR, EPS, JSON_CONTENT, JSON_NUMBER, JSON_UNIT, MAX_REPEAT, NONE,
                                        _empty_fsm, _fsm, _group, _quant, _TooComplex, _Unsupported, alt, canonical,
                                        cat, ch, dec_regex, enc_regex, enc_regex_strict, fsm_and, fsm_regex, fsm_sub,
                                        ir_fsm, ir_len, lit, rep, to_regex)

__all__ = ["IgnoredKeyword", "JsonSchema", "order_keys", "schema_to_lark"]

MAX_WHITESPACE = 64
# Bounds on what one schema may expand into; beyond them the schema is refused (SchemaError),
# never silently loosened. The regex bounds (MAX_REPEAT, MAX_REGEX_CHARS, MAX_REGEX) are in regex_ir.py.
MAX_ITEMS = 1024  # largest minItems/maxItems (one automaton state per count; Lark's LALR
# construction is superlinear: 2048 items took 34 s)
MAX_STRING = 8192  # longest string length bound (chunks of CHUNK characters; Lark's LALR
# construction is superlinear: 40 000 took 110 s)
MAX_AUTOMATON = 4096  # states of one object/array automaton
MAX_RULES = 40_000
MAX_DEP_BRANCHES = 64
MAX_BOUND_EXPONENT = 100  # numeric bounds up to 1e100 in magnitude (and down to 1e-100): compile < 1 s  # object alternatives that dependencies/dependentRequired/dependentSchemas may create
CHUNK = 16  # length-bounded strings longer than this are split into CHUNK-character lexemes


@dataclass(frozen=True)
class IgnoredKeyword:
    """A keyword ``lenient=True`` ignored: the grammar accepts more than the schema there."""

    keyword: str
    pointer: str
    reason: str


@dataclass(frozen=True, eq=False)
class JsonSchema:
    """A JSON Schema as a grammar: ``compile(JsonSchema(schema), vocab)`` or ``.to_lark()``.

    ``schema``: a dict/bool, JSON text, a path to a ``.json`` file (``os.PathLike``), or a
    pydantic model class (``model_json_schema()``). ``whitespace``: ``"compact"`` or
    ``"flexible"`` (runs of at most ``max_whitespace`` bytes); ``lenient``: ignore (and list)
    what cannot be enforced instead of raising; ``closed_objects`` (default True): a missing
    ``additionalProperties`` means ``false`` where ``properties``/``patternProperties`` are
    declared (False: the spec's "any other key"); ``format_assertion``: enforce ``format``;
    ``unknown_formats``: ``"annotation"`` (a format no draft defines constrains nothing, as the
    specs say) or ``"refuse"`` (raise ``SchemaError`` naming it). The
    translation runs once, on first use. See the module docstring for the exact language and
    why the defaults (compact whitespace, closed objects) are what they are.
    """

    schema: Any
    whitespace: Literal["compact", "flexible"] = "compact"
    lenient: bool = False
    closed_objects: bool = True
    format_assertion: bool = True
    unknown_formats: Literal["annotation", "refuse"] = "annotation"
    max_whitespace: int = MAX_WHITESPACE
    _out: list = field(default_factory=list, init=False, repr=False, compare=False)

    def _translate(self) -> tuple[str, tuple[IgnoredKeyword, ...]]:
        if not self._out:
            self._out.append(schema_to_lark(self.schema, whitespace=self.whitespace, lenient=self.lenient,
                                            closed_objects=self.closed_objects,
                                            format_assertion=self.format_assertion,
                                            unknown_formats=self.unknown_formats,
                                            max_whitespace=self.max_whitespace))
        return self._out[0]

    def to_lark(self) -> str:
        """The Lark grammar text (parser="lalr", start rule ``start``); SchemaError if refused."""
        return self._translate()[0]

    @property
    def ignored_keywords(self) -> tuple[IgnoredKeyword, ...]:
        """Keywords ignored in lenient mode (empty in strict mode)."""
        return self._translate()[1]


def schema_to_lark(schema: Any, *, whitespace: Literal["compact", "flexible"] = "compact", lenient: bool = False,
                   closed_objects: bool = True, format_assertion: bool = True,
                   unknown_formats: Literal["annotation", "refuse"] = "annotation",
                   max_whitespace: int = MAX_WHITESPACE) -> tuple[str, tuple[IgnoredKeyword, ...]]:
    """(Lark grammar text, ignored keywords) of a JSON Schema; ``SchemaError`` when refused."""
    if whitespace not in ("compact", "flexible"):
        raise ValueError(f"whitespace must be 'compact' or 'flexible', not {whitespace!r}")
    if max_whitespace < 1:
        raise ValueError("max_whitespace must be >= 1")
    doc = _Document(_load(schema))
    if unknown_formats not in ("annotation", "refuse"):
        raise ValueError(f"unknown_formats must be 'annotation' or 'refuse', not {unknown_formats!r}")
    b = _Builder(doc, lenient=lenient, closed_objects=closed_objects, format_assertion=format_assertion,
                 unknown_formats=unknown_formats)
    if not doc.dialect_known:
        b.refuse("$schema", "", "unknown dialect (custom metaschema); it is read as draft 2020-12")
    root = b.location(doc.root, "", doc.base)
    text = _Emitter(b, whitespace=whitespace, max_ws=max_whitespace).grammar(root)
    return text, tuple(b.ignored)


def order_keys(schema: Any, instance: Any) -> Any:
    """``instance`` with object keys in the order the grammar expects (best effort).

    Declared properties first in schema order (following ``$ref``, ``allOf``/``anyOf``/
    ``oneOf``, ``properties``, ``patternProperties``, ``additionalProperties``, items), then the
    other keys as they were. Key order never changes validity, so this only picks the spelling of
    a document to check or to show a model; an instance whose alternatives disagree on the order
    may still be out of order.
    """
    doc = _Document(_load(schema))
    return _order(doc, [(doc.root, doc.base)], instance, 0)


def _fits(doc: "_Document", cand: tuple, inst: Any) -> bool:
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


def _expand(doc: "_Document", cands: list, depth: int = 0, inst: Any = None, branches: bool = True) -> list:
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
        s = _in_draft(s, doc.draft)
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


def _order(doc: "_Document", cands: list, inst: Any, depth: int) -> Any:
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
    except _Unsupported:
        return False


# ============================================================================ loading


def _load(schema: Any) -> Any:
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
            out[k] = _exact(v, f"{ptr}/{_esc(k)}")
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


def _esc(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _num(x: Any) -> Decimal | None:
    if isinstance(x, bool) or not isinstance(x, (int, Decimal, float)):
        return None
    return Decimal(x) if not isinstance(x, float) else Decimal(repr(x))


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
        return all(_matcher(dec_regex(format_ir(f))).fullmatch(s) for f in self.formats)

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
            return ir_fsm(alt(*[lit(v) for v in vs])) if vs else _empty_fsm()
        if self.min_len > MAX_STRING or (self.max_len or 0) > MAX_STRING:
            raise _Unsupported(f"string length bound above {MAX_STRING} in an automaton")
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
        ``_Emitter._chunk_rules``) rather than as one regex."""
        if self.values is not None or self.patterns or self.formats or self.exclude or self.minus:
            return None
        if self.min_len > CHUNK or (self.max_len is not None and self.max_len > CHUNK):
            return self.min_len, self.max_len
        return None

    def _check_lengths(self) -> None:
        """_Unsupported when a length bound of this spec, or of one it subtracts, is too long for
        one automaton (chunk rules count long lengths, but only alone: see ``chunked``)."""
        if any(max(ir_len(x)[0], ir_len(x)[1] or 0) > MAX_REPEAT for x in self._irs()):
            raise _Unsupported(f"string length bound above {MAX_REPEAT} with a pattern, format or negation")
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
            return _group(JSON_UNIT) + _quant(self.min_len, self.max_len)
        self._check_lengths()
        irs = self._irs()
        if len(irs) == 1 and not self.exclude and not self.minus:
            return None if irs[0] == NONE else enc_regex(irs[0])
        f = self.fsm()
        return None if f.empty() else fsm_regex(f, enc_regex)


# ============================================================================ documents and $ref

DEFAULT_BASE = "https://trellis.invalid/schema.json"
_DRAFTS = {"draft-03": 3, "draft-04": 4, "draft-06": 6, "draft-07": 7, "2019-09": 2019, "2020-12": 2020}
_DRAFT_NAMES = {v: k for k, v in _DRAFTS.items()}
_SUB_ONE = ("additionalProperties", "additionalItems", "items", "not", "if", "then", "else", "contains",
            "propertyNames", "unevaluatedItems", "unevaluatedProperties", "contentSchema")
_SUB_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
_SUB_LIST = ("allOf", "anyOf", "oneOf", "prefixItems", "items")


class _Document:
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
            p = f"{ptr}/{_esc(k)}"
            if k in _SUB_ONE and isinstance(v, (dict, bool)):
                self._scan(v, base, p)
            elif k in _SUB_MAP and isinstance(v, dict):
                for kk, vv in v.items():
                    self._scan(vv, base, f"{p}/{_esc(kk)}")
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
                return f"{p}/{_esc(keyword)}"
            for kw in ("allOf", "anyOf", "oneOf"):
                if isinstance(s.get(kw), list):
                    todo += [(x, f"{p}/{kw}/{i}") for i, x in enumerate(s[kw])]
            for kw in ("then", "else"):
                if kw in s:
                    todo.append((s[kw], f"{p}/{kw}"))
            for kw in ("dependentSchemas", "dependencies"):
                if isinstance(s.get(kw), dict):
                    todo += [(x, f"{p}/{kw}/{_esc(k)}") for k, x in s[kw].items()]
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
                p += "/" + _esc(key)
        b2, p2 = self.info.get(id(obj), (u, p))
        return obj, p2, b2


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
_GENERIC = {"nums": NumSpec(), "strs": StrSpec(), "arrs": ArrSpec(), "objs": ObjSpec()}


def _alts(xs: Iterable, generic: Any) -> tuple:
    out = []
    for x in xs:
        if x == generic:
            return (generic,)
        if x not in out:
            out.append(x)
    return tuple(out)


def union(*shs: Shallow) -> Shallow:
    return Shallow(any(s.null for s in shs), any(s.true for s in shs), any(s.false for s in shs),
                   *[_alts([x for s in shs for x in getattr(s, f)], g) for f, g in _GENERIC.items()])


# Keywords each draft defines only from (``_SINCE``) or until (``_UNTIL``) some draft; outside that
# range they are unknown keywords, which every draft says to ignore (draft-04 has no ``const``, draft-07
# no ``dependentRequired``, 2019-09 no ``prefixItems``, 2020-12 no ``dependencies``). 2019-09's
# ``$recursiveRef`` and 2020-12's ``$dynamicRef`` are refused where they exist.
_SINCE = {"const": 6, "contains": 6, "propertyNames": 6, "if": 7, "then": 7, "else": 7,
          "dependentRequired": 2019, "dependentSchemas": 2019, "unevaluatedProperties": 2019,
          "unevaluatedItems": 2019, "minContains": 2019, "maxContains": 2019, "$recursiveRef": 2019,
          "prefixItems": 2020, "$dynamicRef": 2020}
_UNTIL = {"dependencies": 7, "$recursiveRef": 2019}


def _in_draft(s: dict, draft: int) -> dict:
    """``s`` without the keywords its draft does not define (same subschema objects)."""
    drop = [k for k in s if _SINCE.get(k, 0) > draft or _UNTIL.get(k, 9999) < draft]
    return {k: v for k, v in s.items() if k not in drop} if drop else s


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


# ============================================================================ grammar emission


@dataclass(frozen=True)
class _Cell:
    """A class of object keys: one declared key, or the other keys matching pattern/name classes
    ``mask`` of ``langs``; with the value node per ObjSpec alternative (NEVER_ID: not allowed)."""

    key: str | None
    langs: tuple
    mask: int
    values: tuple


def _not_in(words: Iterable[str]) -> tuple:
    """IR of every string except ``words``: proper trie prefixes, or a divergence then anything.

    One shared ``ANY*`` tail keeps the (unminimised) byte DFA linear in the trie size.
    """
    trie: dict = {}
    for w in words:
        node = trie
        for c in w:
            node = node.setdefault(c, {})
        node[None] = True

    def diverge(node: dict) -> tuple:
        chars = [c for c in node if c is not None]
        return alt(ch(cs_neg(cs(*[ord(c) for c in chars]))), *[cat(lit(c), diverge(node[c])) for c in chars])

    def prefix(node: dict) -> tuple:
        chars = [c for c in node if c is not None]
        return alt(*([] if None in node else [EPS]), *[cat(lit(c), prefix(node[c])) for c in chars])

    return alt(cat(diverge(trie), ANYSTAR), prefix(trie))


_UNIONS = ("oneOf", "dependentSchemas", "dependencies", "dependentRequired", "not", "type", "enum", "$ref")
_START = 0
KEY_PRIORITY = 100  # declared-key literals beat every key-class regex (see _Emitter._cells)
Val = tuple  # ("c", class) | ("lit", "null"|"true"|"false") | ("S"|"N", regex) | ("O"|"A", class)


@dataclass
class _Automaton:
    """A determinised object/array automaton: edges (src, cell index or -1, Val, dst); state 0 starts."""

    edges: list
    accepting: set
    n: int


class _Emitter:
    def __init__(self, b: _Builder, *, whitespace: str, max_ws: int) -> None:
        self.b = b
        self.flex = whitespace == "flexible"
        self.max_ws = max_ws
        self.cells: dict[int, list[_Cell]] = {}
        self._cell_memo: dict[tuple, list[_Cell]] = {}
        self._regions: dict[tuple, tuple | None] = {}
        self._region_rx: dict[tuple, str | None] = {}
        self.cls: dict[int, int] = {}
        self.rep: dict[int, int] = {}
        self.parts: dict[tuple[int, str], Any] = {}
        self.autos: dict[tuple[str, int], _Automaton] = {}
        self._scalars: dict[tuple[int, str], Val | None] = {}
        self._chunks: set[str] = set()
        self._extra_rules: list[tuple[str, str]] = []
        self.terms: dict[tuple[str, str], str] = {}
        self.ptr = ""

    # -- errors
    def fail(self, msg: str) -> None:
        raise SchemaError(msg, pointer=self.ptr)

    def soften(self, keyword: str, reason: str, at: str | None = None) -> None:
        """Lenient fallback to a looser (superset) construction, or SchemaError in strict mode.
        The pointer is where ``keyword`` is, in the node's schema (``at``, default the node being
        emitted) or in a subschema merged into it (``_Document.locate``). A union (``anyOf``) may
        come from other keywords: the first of them found is named."""
        at = self.ptr if at is None else at
        for kw in (keyword,) + (_UNIONS if keyword == "anyOf" else ()):
            ptr = self.b.doc.locate(at, kw)
            if ptr != at:
                keyword = kw
                break
        if not self.b.lenient:
            raise SchemaError(f"{keyword}: {reason}", pointer=ptr)
        self.b.ignored.append(IgnoredKeyword(keyword, ptr, reason))

    def grammar(self, root: int) -> str:
        if root == NEVER_ID:
            raise SchemaError("the schema matches no JSON value")
        nodes = self._closure(root)
        self._classes(nodes)
        rc = self.cls[root]
        todo, seen = [rc], {rc}
        while todo:
            c = todo.pop()
            for v in self._class_vals(c):
                if v[0] in ("c", "O", "A") and v[1] not in seen:
                    seen.add(v[1])
                    todo.append(v[1])
        prod = self._productive(seen)
        self.ptr = ""
        if not prod[("c", rc)]:
            raise SchemaError("the schema matches no JSON value (or only infinitely deep ones)")
        return self._text(rc, prod)

    # -- phase 1: every node reachable from the root, with its key cells
    def _closure(self, root: int) -> list[int]:
        b = self.b
        seen, order, stack = set(), [], [root]
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            order.append(n)
            self.ptr = b.ptrs[n]
            sh = b.shallow(n)
            for a in sh.arrs:
                stack.extend(a.prefix)
                stack.append(a.items)
            if sh.objs:
                self.cells[n] = self._cells(sh.objs)
                for c in self.cells[n]:
                    stack.extend(v for v in c.values if v != NEVER_ID)
        return [n for n in order if n != NEVER_ID]

    def _cells(self, objs: tuple) -> list[_Cell]:
        """The key classes of an object node: declared keys (literals), then classes of other keys.

        An other-keys regex may match a declared key, provided that in every state where it is
        in the lexer context the declared key's literal is too (it wins: declared-key literals
        have the highest terminal priority) or is cut out of the regex (``_text``). States that
        allow other keys also take every allowed declared key again, validated against its own
        schema, so only keys forbidden there are cut and the regexes stay small (determinisation
        happens before minimisation: a complement of 4 keys was 1,600 states to build).
        """
        hit = self._cell_memo.get(objs)
        if hit is not None:
            return hit
        b = self.b
        declared = list(dict.fromkeys(k for o in objs for k in o.order + o.required))
        cells = [_Cell(k, (), 0, tuple(b.key_value(o, k) for o in objs)) for k in declared]
        langs = tuple(dict.fromkeys([("p", p) for o in objs for s in o.sources for p, _ in s.patterns] +
                                    [("n", n) for o in objs for n in o.names]))
        if len(langs) > 6:
            self.fail("more than 6 patternProperties/propertyNames in one object cannot be compiled")
        index = {x: i for i, x in enumerate(langs)}
        for mask in range(2 ** len(langs)):
            vals = []
            for o in objs:
                if any(not mask >> index[("n", n)] & 1 for n in o.names):
                    vals.append(NEVER_ID)
                    continue
                ids = []
                for s in o.sources:
                    ids += [v for p, v in s.patterns if mask >> index[("p", p)] & 1] or [s.additional]
                vals.append(b.and_id(ids))
            if all(v == NEVER_ID for v in vals):
                continue
            try:
                if self._region(langs, mask) is None:
                    continue
            except (_Unsupported, _TooComplex) as e:
                self.soften("patternProperties", f"key classes too complex ({e}); any other key allowed")
                cells = [c for c in cells if c.key is not None] + [_Cell(None, (), 0, tuple(ANY_ID for _ in objs))]
                break
            cells.append(_Cell(None, langs, mask, tuple(vals)))
        self._cell_memo[objs] = cells
        return cells

    def _lang_fsm(self, lang: tuple) -> Any:
        if lang[0] == "p":
            return ir_fsm(pattern_ir(lang[1]))
        sh = self.b.shallow(lang[1])
        f = _empty_fsm()
        for s in sh.strs:
            f = f | s.fsm()
        return f

    def _region(self, langs: tuple, mask: int) -> tuple | None:
        """("all",) | ("ir", IR) | ("fsm", FSM): the keys matching every class of ``mask`` (not
        excluding the others: higher-priority terminals take those, see ``_text``); None when
        no key matches exactly the classes of ``mask``."""
        key = (langs, mask)
        if key in self._regions:
            return self._regions[key]
        members = [i for i in range(len(langs)) if mask >> i & 1]
        r: tuple | None
        if not members:
            r = ("all",)
        elif len(members) == 1 and langs[members[0]][0] == "p":
            r = ("ir", pattern_ir(langs[members[0]][1]))
        else:
            f = ir_fsm(ANYSTAR)
            for i in members:
                f = fsm_and(f, self._lang_fsm(langs[i]))
            r = ("fsm", f)
        if len(langs) > 1 or not members:  # is "exactly these classes" non-empty?
            f = ir_fsm(r[1]) if r[0] == "ir" else r[1] if r[0] == "fsm" else ir_fsm(ANYSTAR)
            for i in range(len(langs)):
                if not mask >> i & 1:
                    f = fsm_sub(f, self._lang_fsm(langs[i]))
            if f.empty():
                r = None
        elif r is not None and r[0] == "ir" and r[1] == NONE:
            r = None
        self._regions[key] = r
        return r

    def _region_regex(self, cell: _Cell, cut: frozenset, cut_masks: frozenset, declared: bool) -> str | None:
        """JSON content regex of ``cell``'s keys minus the keys ``cut`` and the key classes
        ``cut_masks``, one spelling per key when keys are ``declared`` (a declared key spelled
        differently must not slip past its literal)."""
        key = (cell.langs, cell.mask, cut, cut_masks, declared)
        if key in self._region_rx:
            return self._region_rx[key]
        enc = enc_regex_strict
        region = self._region(cell.langs, cell.mask)
        out: str | None
        if region is None:
            out = None
        elif region[0] == "all" and not cut_masks:
            out = enc(_not_in(sorted(cut))) if cut else (enc(ANYSTAR) if declared else JSON_CONTENT)
        elif region[0] == "ir" and not cut_masks and not any(_matcher(dec_regex(region[1])).fullmatch(k)
                                                               for k in cut):
            out = enc(region[1])
        else:
            f = ir_fsm(region[1]) if region[0] == "ir" else region[1] if region[0] == "fsm" else ir_fsm(ANYSTAR)
            for m in cut_masks:
                other = self._region(cell.langs, m)
                if other is not None:
                    f = fsm_sub(f, ir_fsm(other[1]) if other[0] == "ir" else other[1])
            if cut:
                f = fsm_sub(f, ir_fsm(alt(*[lit(k) for k in sorted(cut)])))
            out = None if f.empty() else fsm_regex(f, enc)
        self._region_rx[key] = out
        return out

    # -- phase 2: bisimulation classes (equal meaning -> one rule)
    def _sig(self, n: int, cls: dict[int, int]) -> tuple:
        sh = self.b.shallow(n)
        c = lambda v: -1 if v == NEVER_ID else cls[v]  # noqa: E731
        arrs = tuple((tuple(c(p) for p in a.prefix), c(a.items), a.min_items, a.max_items) for a in sh.arrs)
        objs: tuple = ()
        if sh.objs:
            objs = (tuple((x.key, x.langs, x.mask, tuple(c(v) for v in x.values)) for x in self.cells[n]),
                    tuple((o.order, o.required, o.min_props, o.max_props) for o in sh.objs))
        return (sh.null, sh.true, sh.false, sh.nums, sh.strs, arrs, objs)

    def _classes(self, nodes: list[int]) -> None:
        cls = {n: 0 for n in nodes}
        count = 1
        while True:
            sigs = {n: self._sig(n, cls) for n in nodes}
            ids: dict[tuple, int] = {}
            new = {n: ids.setdefault((cls[n], sigs[n]), len(ids)) for n in nodes}
            cls = new
            if len(ids) == count:
                break
            count = len(ids)
        self.cls = cls
        for n in nodes:
            self.rep.setdefault(cls[n], n)
        for n in nodes:
            if self.rep[cls[n]] == n:
                s = sigs[n]
                self.parts[(cls[n], "A")] = s[5]
                self.parts[(cls[n], "O")] = s[6]

    # -- phase 3: values, automata
    def _shallow_c(self, c: int) -> Shallow:
        return self.b.shallow(self.rep[c])

    def scalar(self, c: int, kind: str) -> Val | None:
        """Class ``c``'s strings ("S": one content regex, or "SC": chunk rules) or numbers ("N")."""
        key = (c, kind)
        if key in self._scalars:
            return self._scalars[key]
        n = self.rep[c]
        self.ptr = self.b.ptrs[n]
        sh = self._shallow_c(c)
        specs = list(sh.strs if kind == "S" else sh.nums)
        out: Val | None = None
        chunked = [sp.chunked() for sp in specs] if kind == "S" else []
        if len(specs) == 1 and chunked and chunked[0] is not None:
            out = ("SC", chunked[0])
        else:
            if any(x is not None for x in chunked):
                self.soften("maxLength", "a long length-bounded string cannot be combined with other string "
                                         "alternatives; its bounds are dropped")
                specs = [StrSpec() if x is not None else sp for sp, x in zip(specs, chunked)]
            rxs = []
            for sp in specs:
                try:
                    r = sp.regex()
                except (_Unsupported, _TooComplex) as e:
                    if kind == "S" and (sp.min_len or sp.max_len is not None):
                        self.soften("maxLength", f"{e}; the length bounds are dropped")
                        sp = replace(sp, min_len=0, max_len=None)
                        try:
                            r = sp.regex()
                        except (_Unsupported, _TooComplex) as e2:
                            self.soften("pattern", f"{e2}; constraint dropped")
                            r = JSON_CONTENT
                    else:
                        self.soften("pattern" if kind == "S" else "multipleOf", f"{e}; constraint dropped")
                        r = JSON_CONTENT if kind == "S" else JSON_NUMBER
                if r is not None:
                    rxs.append(r)
            generic = JSON_CONTENT if kind == "S" else JSON_NUMBER
            rxs = [generic] if generic in rxs else list(dict.fromkeys(rxs))
            if rxs:
                out = (kind, rxs[0] if len(rxs) == 1 else "(?:" + "|".join(rxs) + ")")
        self._scalars[key] = out
        return out

    def _chunk_rules(self, lo: int, hi: int | None) -> str:
        """Rules for strings of lo..hi characters: CHUNK-character lexemes counted by the parser.

        One regex ``U{lo,hi}`` would be a byte DFA of ~60 states per character (unminimised
        UTF-8 and escapes); here the lexer DFA is CHUNK characters deep whatever the bound.
        Greedy lexing is exact: a full chunk lexeme ends unless ``"`` follows, which only the
        (at most CHUNK-character) tail terminal accepts. Bounds above MAX_STRING are counted in
        levels (``_level_rules``): linear counting rules would make Lark's LALR construction
        superlinear (40 000 characters took 110 s).
        """
        if hi is not None and hi > MAX_STRING:
            return self._level_rules(lo, hi)
        name = f"sc{lo}_{'inf' if hi is None else hi}"
        if name in self._chunks:
            return name
        self._chunks.add(name)
        k, u = CHUNK, _group(JSON_UNIT)
        dq, chunk = self._term("lit", '"'), self._term("re", f"{u}{{{k}}}")
        top = hi // k if hi is not None else -(-lo // k)
        if top > MAX_AUTOMATON:
            self.fail(f"string length bound above {k * MAX_AUTOMATON}")
        rules = [(f"{name}_0", dq)] + [(f"{name}_{c}", f"{name}_{c - 1} {chunk}") for c in range(1, top + 1)]
        if hi is None:
            rules.append((f"{name}_{top}", f"{name}_{top} {chunk}"))
        for c in range(top + 1):
            t_hi = k if hi is None or c < top else hi - c * k
            t_lo = max(0, lo - c * k)
            if t_lo <= t_hi:
                rules.append((name, f"{name}_{c} " + self._term("re", f'{u}{_quant(t_lo, t_hi)}"')))
        self._extra_rules += rules
        return name

    def _level_rules(self, lo: int, hi: int) -> str:
        """Strings of lo..hi characters (hi > MAX_STRING) with O(CHUNK * levels + hi / size(L))
        rules: a unit of level l is CHUNK units of level l - 1 (level 0: the chunk lexeme), so
        size(l) = CHUNK ** (l + 1); the parser counts units of the top level L and then reads a
        remainder ``R(l, a, b)``: a..b more characters, b <= size(l), as up to CHUNK - 1 units of
        level l - 1 and a remainder of level l - 1 (right-recursive, so no reduction is due
        before the unit/remainder choice is made, which greedy lexing makes at the last chunk:
        chunk or tail). A unit is never followed by ``"`` directly (greedy lexing would have made
        its last chunk a tail), so a remainder after one has at least 1 character. The grammar
        stays LALR(1): every state predicts one remainder."""
        name = f"sl{lo}_{hi}"
        if name in self._chunks:
            return name
        self._chunks.add(name)
        k, u = CHUNK, _group(JSON_UNIT)
        top_level = 1
        while hi // k ** (top_level + 1) > 64:  # at most 64 top-level units to count
            top_level += 1
        size = [k ** (lv + 1) for lv in range(top_level + 1)]
        unit = [self._term("re", f"{u}{{{k}}}")] + [f"{name}_u{lv}" for lv in range(1, top_level + 1)]
        rules = [(unit[lv], " ".join([unit[lv - 1]] * k)) for lv in range(1, top_level + 1)]
        made: set = set()

        def rem(lv: int, a: int, b: int) -> str:
            r = f"{name}_r{lv}_{a}_{b}"
            if r in made:
                return r
            made.add(r)
            if lv == 0:
                rules.append((r, self._term("re", f'{u}{_quant(a, b)}"')))
                return r
            s = size[lv - 1]
            if a <= s:
                rules.append((r, rem(lv - 1, a, min(b, s))))
            if b - s >= 1:
                rules.append((r, f"{unit[lv - 1]} {rem(lv, max(1, a - s), b - s)}"))
            return r

        big = size[top_level]
        rules.append((f"{name}_c0", self._term("lit", '"')))
        for c in range((hi - 1) // big + 1):
            a, b = (lo, min(hi, big)) if c == 0 else (max(1, lo - c * big), min(big, hi - c * big))
            if c:
                rules.append((f"{name}_c{c}", f"{name}_c{c - 1} {unit[top_level]}"))
            if a <= b:
                rules.append((name, f"{name}_c{c} {rem(top_level, a, b)}"))
        self._extra_rules += rules
        return name

    def _class_vals(self, c: int) -> list[Val]:
        """Every Val that class ``c``'s rules mention (building its automata)."""
        sh = self._shallow_c(c)
        out: list[Val] = []
        for kind, f in (("O", "objs"), ("A", "arrs")):
            if getattr(sh, f):
                a = self.automaton(kind, c)
                out += [e[2] for e in a.edges]
        return out

    def automaton(self, kind: str, c: int) -> _Automaton:
        a = self.autos.get((kind, c))
        if a is None:
            n = self.rep[c]
            self.ptr = self.b.ptrs[n]
            a = self.autos[(kind, c)] = self._obj_auto(n) if kind == "O" else self._arr_auto(n)
        return a

    def _obj_auto(self, n: int) -> _Automaton:
        """Declared keys in order (optional ones skippable), then other keys; counts for min/max.

        A branch state is (branch, next declared index, pairs so far, pairs that count for
        minProperties, whether an other-keys class was used). Once other keys are allowed,
        every allowed key cell is a transition, the branch's own declared keys included when an
        other-keys class is among them (see ``_cells``). For minProperties only keys known to be
        distinct count: declared keys in order, and the first key of an other-keys class (it is
        no declared key: those are lexed as their literals).
        """
        sh = self.b.shallow(n)
        cells = self.cells[n]
        key_cell = {x.key: i for i, x in enumerate(cells) if x.key is not None}
        branches = []
        for bi, o in enumerate(sh.objs):
            vals = {i: x.values[bi] for i, x in enumerate(cells) if x.values[bi] != NEVER_ID}
            ordc, ok = [], True
            for k in dict.fromkeys(o.order + o.required):
                i = key_cell[k]
                if i in vals:
                    ordc.append((i, k in o.required))
                elif k in o.required:
                    ok = False
            if not ok:
                continue
            used = {i for i, _ in ordc}
            # Own declared keys come again after the others only where a key-class regex is
            # allowed (to keep their literals in its lexer context); a closed object never repeats.
            regions = any(cells[i].key is None for i in vals)
            extras = [i for i in vals if i not in used or regions]
            cap = o.max_props if o.max_props is not None else 0
            lo = o.min_props
            # Other keys count once (the first): two of them may be the same name, which a
            # grammar cannot rule out. With lo >= 2 an object of other keys alone ({"x":1,"y":2})
            # would then be rejected though valid (found by benchmarks/fuzz_schemas.py): refused.
            if lo > len(ordc) + regions or (regions and lo >= 2):
                self.soften("minProperties", f"{lo} properties would need several additional property names "
                                             "that are distinct, which a grammar cannot check; minProperties ignored")
                lo = 0
            branches.append((tuple(ordc), tuple(extras), lo, o.max_props, cap, vals))

        def trans(m: tuple) -> list:
            bi, i, cnt, mc, rf = m
            ordc, extras, lo, hi, cap, vals = branches[bi]
            if hi is not None and cnt >= hi:
                return []
            nc = min(cnt + 1, cap)
            out = []
            for j in range(i, len(ordc)):
                ci, req = ordc[j]
                out.append((ci, vals[ci], (bi, j + 1, nc, min(mc + 1, lo), rf)))
                if req:
                    return out
            for e in extras:
                first = cells[e].key is None and not rf
                out.append((e, vals[e], (bi, len(ordc) + 1, nc, min(mc + 1, lo) if first else mc, rf or first)))
            return out

        def acc(m: tuple) -> bool:
            bi, i, cnt, mc, rf = m
            ordc, _, lo, _, _, _ = branches[bi]
            return mc >= lo and not any(req for _, req in ordc[i:])

        return self._determinise([(bi, 0, 0, 0, False) for bi in range(len(branches))], trans, acc)

    def _arr_auto(self, n: int) -> _Automaton:
        arrs = self.b.shallow(n).arrs

        def trans(m: tuple) -> list:
            bi, i = m
            a = arrs[bi]
            if a.max_items is not None and i >= a.max_items:
                return []
            v = a.elem(i)
            if v == NEVER_ID:
                return []
            nxt = i + 1 if a.max_items is not None else min(i + 1, max(len(a.prefix), a.min_items))
            return [(-1, v, (bi, nxt))]

        def acc(m: tuple) -> bool:
            return m[1] >= arrs[m[0]].min_items

        return self._determinise([(bi, 0) for bi in range(len(arrs))], trans, acc)

    def _determinise(self, start: list, trans: Callable, acc: Callable) -> _Automaton:
        ids: dict[frozenset, int] = {}
        queue = [(_START, frozenset(start))]
        edges, accepting, n = [], set(), 1
        while queue:
            sid, mem = queue.pop()
            if any(acc(m) for m in mem):
                accepting.add(sid)
            by_cell: dict[int, dict[int, set]] = {}
            for m in mem:
                for ci, v, t in trans(m):
                    by_cell.setdefault(ci, {}).setdefault(self.cls[v], set()).add(t)
            for ci in sorted(by_cell):
                for val, targets in self._refine(by_cell[ci]):
                    key = frozenset(targets)
                    tid = ids.get(key)
                    if tid is None:
                        tid = ids[key] = n
                        n += 1
                        if n > MAX_AUTOMATON:
                            self.fail(f"object/array automaton above {MAX_AUTOMATON} states (counts too large)")
                        queue.append((tid, key))
                    edges.append((sid, ci, val, tid))
        return _Automaton(edges, accepting, n)

    def _refine(self, groups: dict[int, set]) -> list[tuple[Val, set]]:
        """Split the values one key (or array position) may take into parts a parser tells apart."""
        if len(groups) == 1:
            ((c, t),) = groups.items()
            return [(("c", c), t)]
        out: list[tuple[Val, set]] = []
        shs = {c: self._shallow_c(c) for c in groups}
        for name in ("null", "true", "false"):
            ts = set().union(*[t for c, t in groups.items() if getattr(shs[c], name)])
            if ts:
                out.append((("lit", name), ts))
        for kind, f in (("S", "strs"), ("N", "nums")):
            have = [(self.scalar(c, kind), t) for c, t in groups.items() if getattr(shs[c], f)]
            have = [(v, t) for v, t in have if v is not None]
            if len(have) == 1 or (have and len({v for v, _ in have}) == 1):
                out.append((have[0][0], set().union(*[t for _, t in have])))
            elif have:
                if any(v[0] == "SC" for v, _ in have):
                    self.soften("maxLength", "alternatives with long length-bounded strings at the same place "
                                             "cannot be told apart; any string accepted there")
                    out.append((("S", JSON_CONTENT), set().union(*[t for _, t in have])))
                    continue
                out += [((kind, r), t) for r, t in self._venn(kind, [(v[1], t) for v, t in have])]
        for kind, f in (("O", "objs"), ("A", "arrs")):
            have = [(c, t) for c, t in groups.items() if getattr(shs[c], f)]
            if not have:
                continue
            ts = set().union(*[t for _, t in have])
            if len({repr(self.parts[(c, kind)]) for c, _ in have}) == 1:
                out.append(((kind, have[0][0]), ts))
                continue
            what = "objects" if kind == "O" else "arrays"
            self.soften("anyOf", f"alternatives allow different {what} at the same place, which cannot be "
                                 f"decided left to right; any {what[:-1]} accepted there")
            out.append(((kind, self.cls[ANY_ID] if ANY_ID in self.cls else self._any_class()), ts))
        return out

    def _any_class(self) -> int:
        c = max(self.cls.values(), default=-1) + 1
        self.cls[ANY_ID] = c
        self.rep[c] = ANY_ID
        self.cells[ANY_ID] = self._cells(ANY_SHALLOW.objs)
        self.parts[(c, "O")] = ("any",)
        self.parts[(c, "A")] = ("any",)
        return c

    def _venn(self, kind: str, items: list[tuple[str, set]]) -> list[tuple[str, set]]:
        try:
            regions: list[tuple[Any, set]] = []
            for rx, ts in items:
                f = _fsm(rx)
                new = []
                for g, gts in regions:
                    a, d = fsm_and(g, f), fsm_sub(g, f)
                    if not a.empty():
                        new.append((a, gts | ts))
                    if not d.empty():
                        new.append((d, gts))
                    f = fsm_sub(f, g)
                if not f.empty():
                    new.append((f, set(ts)))
                regions = new
            return [(fsm_regex(g, to_regex), ts) for g, ts in regions]
        except (_Unsupported, _TooComplex) as e:
            self.soften("anyOf", f"overlapping {'string' if kind == 'S' else 'number'} alternatives too complex "
                                 f"to separate ({e}); their union accepted with every continuation")
            return [("(?:" + "|".join(r for r, _ in items) + ")", set().union(*[t for _, t in items]))]

    # -- productivity: only rules that derive some text are emitted (the engine relies on it)
    def _productive(self, classes: set[int]) -> dict[tuple, bool]:
        prod: dict[tuple, bool] = {}
        for c in classes:
            prod[("c", c)] = False
            for k in ("O", "A"):
                prod[(k, c)] = False

        def val_ok(v: Val) -> bool:
            if v[0] in ("lit", "S", "N"):
                return True
            return prod.get((v[0], v[1]), False)

        changed = True
        while changed:
            changed = False
            for c in classes:
                sh = self._shallow_c(c)
                for k in ("O", "A"):
                    if prod[(k, c)] or not (sh.objs if k == "O" else sh.arrs):
                        continue
                    a = self.automaton(k, c)
                    if self._live(a, val_ok)[1]:
                        prod[(k, c)] = changed = True
                if not prod[("c", c)]:
                    scal = (sh.null or sh.true or sh.false or (sh.strs and self.scalar(c, "S") is not None)
                            or (sh.nums and self.scalar(c, "N") is not None))
                    if scal or prod[("O", c)] or prod[("A", c)]:
                        prod[("c", c)] = changed = True
        self._val_ok = val_ok
        return prod

    def _live(self, a: _Automaton, ok: Callable) -> tuple[set, bool]:
        """(states on a productive path from start to acceptance, whether one exists)."""
        good = [e for e in a.edges if ok(e[2])]
        fwd = {_START}
        changed = True
        while changed:
            changed = False
            for s, _, _, d in good:
                if s in fwd and d not in fwd:
                    fwd.add(d)
                    changed = True
        back = set(a.accepting)
        changed = True
        while changed:
            changed = False
            for s, _, _, d in good:
                if d in back and s not in back:
                    back.add(s)
                    changed = True
        live = fwd & back
        return live, _START in live

    # -- phase 4: text
    def _term(self, kind: str, text: str, priority: int = 0) -> str:
        """Name of the terminal ("lit": literal text, "re": Python regex), defined once."""
        name = self.terms.get((kind, text, priority))
        if name is None:
            name = self.terms[(kind, text, priority)] = f"T{len(self.terms)}" + (f".{priority}" if priority else "")
        return name.split(".")[0]

    def _val(self, v: Val) -> str:
        if v[0] == "c":
            return f"v{v[1]}"
        if v[0] == "lit":
            return v[1].upper()
        if v[0] == "S":
            return self._term("re", f'"{v[1]}"')
        if v[0] == "N":
            return self._term("re", v[1])
        if v[0] == "SC":
            return self._chunk_rules(*v[1])
        return f"v{v[0].lower()}{v[1]}"

    def _key(self, cell: _Cell, cut: frozenset, cut_masks: frozenset, declared: bool) -> str:
        if cell.key is not None:
            if any(0xD800 <= ord(ch_) <= 0xDFFF for ch_ in cell.key):
                self.fail(f"property name {cell.key!r} contains a lone surrogate")
            return self._term("lit", f'"{canonical(cell.key)}"', KEY_PRIORITY)
        rx = self._region_regex(cell, cut, cut_masks, declared)
        if rx is None:
            self.fail("a patternProperties class contains only keys not allowed there")
        # More classes matched = higher priority: a key matching patterns p and q is lexed as
        # the {p, q} class, not as {p} (whose regex does not exclude q).
        n = len(cell.langs)
        rank = sorted(range(2 ** n), key=lambda m: (bin(m).count("1"), m)).index(cell.mask)
        return self._term("re", f'"{rx}"', 1 + rank)

    def _text(self, root: int, prod: dict) -> str:
        rules: dict[str, list[str]] = {"start": [f"v{root}"]}

        def rule(name: str, rhs: str) -> None:
            rules.setdefault(name, []).append(rhs)

        done: set[tuple] = set()
        todo: list[tuple] = [("c", root)]
        ok = self._val_ok
        while todo:
            item = todo.pop()
            if item in done:
                continue
            done.add(item)
            kind, c = item
            self.ptr = self.b.ptrs[self.rep[c]]
            sh = self._shallow_c(c)
            if kind == "c":
                alts = []
                for k in ("S", "N"):
                    v = self.scalar(c, k) if (sh.strs if k == "S" else sh.nums) else None
                    if v is not None:
                        alts.append(self._val(v))
                alts += [n.upper() for n in ("null", "true", "false") if getattr(sh, n)]
                for k in ("O", "A"):
                    if prod[(k, c)]:
                        alts.append(f"v{k.lower()}{c}")
                        todo.append((k, c))
                for x in alts:
                    rule(f"v{c}", x)
                continue
            a = self.automaton(kind, c)
            live, _ = self._live(a, ok)
            edges = [e for e in a.edges if e[0] in live and e[3] in live and ok(e[2])]
            cells = self.cells[self.rep[c]] if kind == "O" else []
            names = frozenset(x.key for x in cells if x.key is not None)
            cuts: dict[int, set] = {}
            cut_masks: dict[int, set] = {}
            if kind == "O":
                # Where a key-class regex is in the lexer context, every key (class) it could
                # match that has no transition there must be cut out of it (see _cells).
                here: dict[int, set] = {}
                for s_, ci, _, _ in edges:
                    here.setdefault(s_, set()).add(ci)
                masks = {x.mask: i for i, x in enumerate(cells) if x.key is None}
                for s_, ci, _, _ in edges:
                    x = cells[ci]
                    if x.key is not None:
                        continue
                    ok_here = here.get(s_, set())
                    cuts.setdefault(ci, set()).update(
                        y.key for j, y in enumerate(cells) if y.key is not None and j not in ok_here)
                    for m in range(2 ** len(x.langs)):
                        if m != x.mask and m & x.mask == x.mask and masks.get(m) not in ok_here:
                            cut_masks.setdefault(ci, set()).add(m)
            open_, close = ("LBRACE", "RBRACE") if kind == "O" else ("LSQB", "RSQB")
            nt = f"{kind.lower()}{c}_"
            alts = [f"{open_} {close}"] if _START in a.accepting else []
            alts += [f"{open_} {nt}{q} {close}" for q in sorted(a.accepting & live) if q != _START]
            for x in alts:
                rule(f"v{kind.lower()}{c}", x)
            for s, ci, v, d in edges:
                if v[0] in ("c", "O", "A"):
                    todo.append(("c" if v[0] == "c" else v[0], v[1]))
                if kind == "A":
                    sym = self._val(v)
                else:
                    key = self._key(cells[ci], frozenset(cuts.get(ci, ())), frozenset(cut_masks.get(ci, ())),
                                    bool(names))
                    sym = f"{key} COLON {self._val(v)}"
                rule(f"{nt}{d}", sym if s == _START else f"{nt}{s} COMMA {sym}")
        for name, rhs in self._extra_rules:
            rule(name, rhs)
        if sum(map(len, rules.values())) > MAX_RULES:
            self.fail(f"the grammar would have more than {MAX_RULES} rules")
        ws = f"[ \t\n\r]{{0,{self.max_ws}}}"
        punct = {"LBRACE": "{", "RBRACE": "}", "LSQB": "[", "RSQB": "]", "COMMA": ",", "COLON": ":"}
        lines = [f"{name}: " + " | ".join(rhs) for name, rhs in rules.items()] + [""]
        for name, p in punct.items():
            if not self.flex:
                lines.append(f'{name}: "{p}"')
            else:
                before = ws if name in ("RBRACE", "RSQB", "COMMA", "COLON") else ""
                after = ws if name in ("LBRACE", "LSQB", "COMMA", "COLON") else ""
                lines.append(f"{name}: /{_lark_regex(before + re.escape(p) + after)}/")
        lines += ['NULL: "null"', 'TRUE: "true"', 'FALSE: "false"']
        for (kind, text, _), name in self.terms.items():
            if kind == "lit":
                lines.append(f'{name}: "{_lark_str(text)}"')
            else:
                lines.append(f"{name}: /{_lark_regex(text)}/")
        return "\n".join(lines) + "\n"


def _lark_str(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _lark_regex(rx: str) -> str:
    """A Python regex as the body of a Lark /.../ literal (Lark unescapes \\uXXXX itself)."""
    out = []
    for c in rx:
        o = ord(c)
        if c == "/":
            out.append("\\/")
        elif c == '"':  # Lark's unescaping turns \\" into \" (losing the backslash): spell it \u0022
            out.append("\\u0022")
        elif 32 <= o < 127:
            out.append(c)
        elif o <= 0xFFFF:
            out.append(f"\\u{o:04x}")
        else:
            out.append(f"\\U{o:08x}")
    return "".join(out)
