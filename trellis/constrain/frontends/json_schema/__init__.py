"""JSON Schema -> Lark grammar text for the CFG engine: exact, or refused with the JSON pointer.

``JsonSchema(schema).to_lark()`` returns a grammar whose language is a set of JSON texts that
are *all* valid instances of the schema (drafts 2020-12, 2019-09, 07, 06 and 04 spellings);
``trellis.constrain.compile(JsonSchema(...), vocab)`` compiles it like any grammar (on the default
Earley engine it takes ``to_lark("earley")``: the same language, object automata written with
shared source unions, linear in the optional properties instead of quadratic). Honesty rule:
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
  characters). A bound with a ``pattern``/``format``/``not`` compiles as rules over the
  pattern's states at 16-character boundaries (``pattern_chunks.py``; shorter chunks where a
  chunk's regex would be large), up to 16,384 characters and 20,000 rules; past them, and a
  ``minLength`` above 8192 alone, it is refused.
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

Modules
-------
``limits`` (the ``MAX_*`` bounds, ``CHUNK``), ``documents`` (loading, ``SchemaDocument`` and its
``$ref`` resolution, drafts), ``specs`` (node value types: ``StrSpec``, ``ArrSpec``, ``ObjSpec``,
``Shallow``), ``nodes`` (``NodeTable``: node ids, intersections, disjointness, refusals;
``IgnoredKeyword``), ``complement`` (exact complements for ``not``/``if``/``oneOf``), ``builder``
(``NodeBuilder``: keywords -> nodes), ``emit_base`` (the emitter's data, state and refusals),
``keys`` (object key classes), ``scalars`` (string and number regexes, long-string rules),
``automata`` (object/array automata), ``emit`` (``LarkEmitter``: nodes -> Lark text),
``ordering`` (``order_keys``); this module: ``JsonSchema`` and ``schema_to_lark``. Each imports
only the ones listed before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from trellis.constrain.errors import SchemaError
from trellis.constrain.automata.fsm_product import translation_scope
from trellis.constrain.gc_pause import paused
from trellis.constrain.frontends.json_schema.builder import NodeBuilder
from trellis.constrain.frontends.json_schema.complement import MAX_COMPLEMENT_DEPTH
from trellis.constrain.frontends.json_schema.documents import DEFAULT_BASE, SchemaDocument, load_schema
from trellis.constrain.frontends.json_schema.emit import LarkEmitter
from trellis.constrain.frontends.json_schema.keys import KEY_PRIORITY
from trellis.constrain.frontends.json_schema.limits import (CHUNK, EARLEY_CHUNK, MAX_AUTOMATON, MAX_BOUND_EXPONENT, MAX_DEP_BRANCHES, MAX_ITEMS,
                                                  MAX_RULES, MAX_STRING, MAX_WHITESPACE)
from trellis.constrain.frontends.json_schema.nodes import IgnoredKeyword
from trellis.constrain.frontends.json_schema.ordering import order_keys
from trellis.constrain.frontends.json_schema.specs import ArrSpec, ObjSpec, Shallow, Source, StrSpec, union
from trellis.errors import UsageError

__all__ = ["IgnoredKeyword", "JsonSchema", "order_keys", "schema_to_lark",
           # re-exported: SchemaError is raised by everything here; the bounds and node types as before
           "SchemaError", "CHUNK", "DEFAULT_BASE", "KEY_PRIORITY", "MAX_AUTOMATON", "MAX_BOUND_EXPONENT",
           "MAX_COMPLEMENT_DEPTH", "MAX_DEP_BRANCHES", "MAX_ITEMS", "MAX_RULES", "MAX_STRING", "MAX_WHITESPACE",
           "ArrSpec", "ObjSpec", "Shallow", "Source", "StrSpec", "union"]


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
    _out: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def _translate(self, engine: str = "lalr") -> tuple[str, tuple[IgnoredKeyword, ...]]:
        if engine not in ("lalr", "earley"):
            raise UsageError(f"engine must be 'lalr' or 'earley', not {engine!r}")
        if engine not in self._out:
            with paused():  # an allocation burst over long-lived memos (gc_pause.py)
                self._out[engine] = schema_to_lark(self.schema, whitespace=self.whitespace,
                                                   lenient=self.lenient,
                                                   closed_objects=self.closed_objects,
                                                   format_assertion=self.format_assertion,
                                                   unknown_formats=self.unknown_formats,
                                                   max_whitespace=self.max_whitespace,
                                                   shared_sources=engine == "earley",
                                                   string_chunk=EARLEY_CHUNK if engine == "earley" else CHUNK)
        return self._out[engine]

    def to_lark(self, engine: str = "lalr") -> str:
        """The Lark grammar text (start rule ``start``); SchemaError if refused. ``engine="lalr"``
        (default): a grammar Lark's LALR parser takes. ``engine="earley"``: the same language
        with the edges of object/array automata shared by source set (``LarkEmitter._edge_rules``:
        linear instead of quadratic in an object's optional properties), which is not LALR(1);
        what ``compile`` builds for the default (Earley) engine."""
        return self._translate(engine)[0]

    @property
    def ignored_keywords(self) -> tuple[IgnoredKeyword, ...]:
        """Keywords ignored in lenient mode (empty in strict mode)."""
        if self._out:  # the same for either form: the builder's, before emission
            return next(iter(self._out.values()))[1]
        return self._translate()[1]


def schema_to_lark(schema: Any, *, whitespace: Literal["compact", "flexible"] = "compact", lenient: bool = False,
                   closed_objects: bool = True, format_assertion: bool = True,
                   unknown_formats: Literal["annotation", "refuse"] = "annotation",
                   max_whitespace: int = MAX_WHITESPACE, shared_sources: bool = False, string_chunk: int = CHUNK
                   ) -> tuple[str, tuple[IgnoredKeyword, ...]]:
    """(Lark grammar text, ignored keywords) of a JSON Schema; ``SchemaError`` when refused.
    ``shared_sources`` and ``string_chunk=EARLEY_CHUNK``: ``JsonSchema.to_lark(engine="earley")``'s
    form."""
    if whitespace not in ("compact", "flexible"):
        raise UsageError(f"whitespace must be 'compact' or 'flexible', not {whitespace!r}")
    if max_whitespace < 1:
        raise UsageError("max_whitespace must be >= 1")
    if unknown_formats not in ("annotation", "refuse"):
        raise UsageError(f"unknown_formats must be 'annotation' or 'refuse', not {unknown_formats!r}")
    with translation_scope():  # the FSM products' memo lives for one translation (fsm_product.py)
        doc = SchemaDocument(load_schema(schema))
        b = NodeBuilder(doc, lenient=lenient, closed_objects=closed_objects, format_assertion=format_assertion,
                        unknown_formats=unknown_formats)
        if not doc.dialect_known:
            b.refuse("$schema", "", "unknown dialect (custom metaschema); it is read as draft 2020-12")
        root = b.location(doc.root, "", doc.base)
        text = LarkEmitter(b, whitespace=whitespace, max_ws=max_whitespace,
                           shared_sources=shared_sources, string_chunk=string_chunk).grammar(root)
    return text, tuple(b.ignored)
