"""Grammar emission: ``_Emitter`` turns the builder's nodes into Lark text (key cells,
bisimulation classes, determinised object/array automata, Venn regions of overlapping scalars,
chunk and level rules for long strings, productivity, terminals)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

from trellis.constrain.charsets import cs, cs_neg
from trellis.constrain.errors import SchemaError
from trellis.constrain.json_schema.builder import IgnoredKeyword, _Builder
from trellis.constrain.json_schema.limits import CHUNK, MAX_AUTOMATON, MAX_RULES, MAX_STRING
from trellis.constrain.json_schema.specs import ANY_ID, ANY_SHALLOW, NEVER_ID, Shallow, StrSpec
from trellis.constrain.pattern import _matcher, pattern_ir
from trellis.constrain.regex_ir import (ANYSTAR, EPS, JSON_CONTENT, JSON_NUMBER, JSON_UNIT, NONE, _empty_fsm, _fsm,
                                        _group, _quant, _TooComplex, _Unsupported, alt, canonical, cat, ch, dec_regex,
                                        enc_regex_strict, fsm_and, fsm_regex, fsm_sub, ir_fsm, lit, to_regex)


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
