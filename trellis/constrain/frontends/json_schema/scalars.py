"""String and number values: ``ScalarRules`` gives a class's strings one content regex (or, for
long length-bounded strings, chunk and level rules counted by the parser) and its numbers one
regex, and splits overlapping alternatives at one place into Venn regions."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from trellis.constrain.frontends.json_schema.emit_base import EmitterBase, Val
from trellis.constrain.frontends.json_schema.limits import CHUNK, MAX_AUTOMATON, MAX_PATTERN_STRING, MAX_STRING
from trellis.constrain.frontends.json_schema.pattern_chunks import class_run, pattern_chunk_rules
from trellis.constrain.frontends.json_schema.specs import StrSpec
from trellis.constrain.automata.finite_words import venn_words
from trellis.constrain.automata.regex_ir import (JSON_CONTENT, JSON_NUMBER, JSON_UNIT, TooComplex, Unsupported, fsm_and,
                                        fsm_regex, fsm_sub, quantifier, regex_atom, regex_fsm, to_regex)


class ScalarRules(EmitterBase):
    """Stage of ``LarkEmitter``: string and number values as regexes and rules."""

    # -- phase 3: values
    def scalar(self, c: int, kind: str) -> Val | None:
        """Class ``c``'s strings ("S": one content regex, "SC": chunk rules, "SR": pattern chunk
        rules) or numbers ("N")."""
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
        elif len(specs) == 1 and kind == "S" and (pc := self._pattern_chunked(specs[0])) is not False:
            out = pc
        else:
            if any(x is not None for x in chunked):
                self.soften("maxLength", "a long length-bounded string cannot be combined with other string "
                                         "alternatives; its bounds are dropped")
                specs = [StrSpec() if x is not None else sp for sp, x in zip(specs, chunked)]
            rxs = []
            for sp in specs:
                try:
                    r = sp.regex()
                except (Unsupported, TooComplex) as e:
                    if kind == "S" and (sp.min_len or sp.max_len is not None):
                        r = self._without_lengths(sp, "maxLength", e)
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

    def _pattern_chunked(self, sp: StrSpec) -> Val | None | bool:
        """("SR", rule) for a pattern with a long length bound (``pattern_chunks``), None when no
        string qualifies, False when ``sp`` is not such a spec. Too complex: the bound is
        dropped (lenient) or refused (strict), as the product path does."""
        try:
            pc = sp.pattern_chunked()
        except (Unsupported, TooComplex):
            pc = None  # the automaton of the pattern alone fails: the regex path says why
        if pc is None:
            return False
        f, lo, hi = pc
        # One character class repeated (Earley's long chunks only): counted like a plain string
        # with that class as its unit (``class_run``); LALR keeps the chunks its greedy-lexing
        # argument was made for.
        run = class_run(f) if self.string_chunk != CHUNK and (hi is None or hi <= MAX_STRING) else None
        if run is not None:
            unit, m = run
            lo = max(lo, m)
            return None if hi is not None and hi < lo else ("SC", (lo, hi, unit))
        name = f"sp{len(self._chunks)}"
        try:
            if max(lo, hi or 0) > MAX_PATTERN_STRING:
                raise Unsupported(f"string length bound above {MAX_PATTERN_STRING} with a pattern, format or negation")
            rules = pattern_chunk_rules(f, lo, hi, lambda rx: self._term("re", rx), f"{name}_r")
        except (Unsupported, TooComplex) as e:
            r = self._without_lengths(sp, "maxLength" if sp.max_len is not None else "minLength", e)
            return None if r is None else ("S", r)
        if rules is None:
            return None
        self._chunks.add(name)
        self._extra_rules += [(name, f'{self._term("lit", chr(34))} {name}_r')] + rules
        return "SR", name

    def _without_lengths(self, sp: StrSpec, keyword: str, why: Exception) -> str | None:
        """``sp``'s content regex with its length bounds dropped (lenient; strict: SchemaError at
        ``keyword``), and its pattern too where that regex fails as well."""
        self.soften(keyword, f"{why}; the length bounds are dropped")
        try:
            return replace(sp, min_len=0, max_len=None).regex()
        except (Unsupported, TooComplex) as e:
            self.soften("pattern", f"{e}; constraint dropped")
            return JSON_CONTENT

    def _chunk_rules(self, lo: int, hi: int | None, unit: str = JSON_UNIT) -> str:
        """Rules for strings of lo..hi characters: CHUNK-character lexemes counted by the parser;
        a character is ``unit`` (a pattern that is one class repeated: ``_pattern_chunked``).

        One regex ``U{lo,hi}`` would be a byte DFA of ~60 states per character (unminimised
        UTF-8 and escapes); here the lexer DFA is CHUNK characters deep whatever the bound.
        Greedy lexing is exact: a full chunk lexeme ends unless ``"`` follows, which only the
        (at most CHUNK-character) tail terminal accepts. Bounds above MAX_STRING are counted in
        levels (``_level_rules``): linear counting rules would make Lark's LALR construction
        superlinear (40 000 characters took 110 s).
        """
        if hi is not None and hi > MAX_STRING:  # (a class unit never comes here: _pattern_chunked)
            return self._level_rules(lo, hi)
        name = f"sc{lo}_{'inf' if hi is None else hi}"
        if unit != JSON_UNIT:
            name += f"_u{self._units.setdefault(unit, len(self._units))}"
        if name in self._chunks:
            return name
        self._chunks.add(name)
        k, u = self.string_chunk, regex_atom(unit)
        # chunks before the tail: a tail reads up to k characters, so a bound of k or less is one
        # terminal (no chunk DFA is built: EARLEY_CHUNK's is ~1,700 states)
        top = max(0, (hi - 1) // k) if hi is not None else -(-lo // k)
        dq = self._term("lit", '"')
        chunk = self._term("re", f"{u}{{{k}}}") if top else ""
        if top > MAX_AUTOMATON:
            self.fail(f"string length bound above {k * MAX_AUTOMATON}")
        rules = [(f"{name}_0", dq)] + [(f"{name}_{c}", f"{name}_{c - 1} {chunk}") for c in range(1, top + 1)]
        if hi is None:
            rules.append((f"{name}_{top}", f"{name}_{top} {chunk}"))
        for c in range(top + 1):
            t_hi = k if hi is None or c < top else hi - c * k
            t_lo = max(0, lo - c * k)
            if t_lo <= t_hi:
                rules.append((name, f"{name}_{c} " + self._term("re", f'{u}{quantifier(t_lo, t_hi)}"')))
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
        k, u = CHUNK, regex_atom(JSON_UNIT)
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
                rules.append((r, self._term("re", f'{u}{quantifier(a, b)}"')))
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

    def _venn(self, kind: str, items: list[tuple[str, set]]) -> list[tuple[str, set]]:
        try:
            few = venn_words(items)  # a few strings each (tags, enums): grouped by string
            return few if few is not None else venn_regions(items)
        except (Unsupported, TooComplex) as e:
            self.soften("anyOf", f"overlapping {'string' if kind == 'S' else 'number'} alternatives too complex "
                                 f"to separate ({e}); their union accepted with every continuation")
            return [("(?:" + "|".join(r for r, _ in items) + ")", set().union(*[t for _, t in items]))]


def venn_regions(items: list[tuple[str, set]]) -> list[tuple[str, set]]:
    """The Venn regions of ``items`` ((regex, tags) pairs) by automata: each region a regex of the
    strings held by exactly the items whose tags it carries (non-empty regions only). Raises
    ``Unsupported`` / ``TooComplex`` where a regex or product is beyond the automata."""
    regions: list[tuple[Any, set]] = []
    for rx, ts in items:
        f = regex_fsm(rx)
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
