"""Object keys: ``KeyClasses`` splits an object node's keys into cells (each declared key, then
the classes of other keys by which ``patternProperties``/``propertyNames`` they match), the key
regions' regexes with the keys cut where they must not lex, and the key terminals."""

from __future__ import annotations

from typing import Any, Iterable

from trellis.constrain.automata.charsets import cs, cs_neg
from trellis.constrain.frontends.json_schema.emit_base import EmitterBase, KeyCell
from trellis.constrain.frontends.json_schema.specs import ANY_ID, NEVER_ID
from trellis.constrain.frontends.pattern import pattern_ir, regex_matcher
from trellis.constrain.automata.regex_ir import (ANYSTAR, EPS, JSON_CONTENT, NONE, TooComplex, Unsupported, alt, canonical, cat,
                                        ch, dec_regex, empty_fsm, enc_regex_strict, fsm_and, fsm_regex, fsm_sub, ir_fsm,
                                        lit)

KEY_PRIORITY = 100  # declared-key literals beat every key-class regex (see KeyClasses._cells)


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


class KeyClasses(EmitterBase):
    """Stage of ``LarkEmitter``: the key cells of object nodes, their regexes and terminals."""

    # -- phase 1: key cells of object nodes
    def _cells(self, objs: tuple) -> list[KeyCell]:
        """The key classes of an object node: declared keys (literals), then classes of other keys.

        An other-keys regex may match a declared key, provided that in every state where it is
        in the lexer context the declared key's literal is too (it wins: declared-key literals
        have the highest terminal priority) or is cut out of the regex (``LarkEmitter._text``). States that
        allow other keys also take every allowed declared key again, validated against its own
        schema, so only keys forbidden there are cut and the regexes stay small (determinisation
        happens before minimisation: a complement of 4 keys was 1,600 states to build).
        """
        hit = self._cell_memo.get(objs)
        if hit is not None:
            return hit
        b = self.b
        declared = list(dict.fromkeys(k for o in objs for k in o.order + o.required))
        cells = [KeyCell(k, (), 0, tuple(b.key_value(o, k) for o in objs)) for k in declared]
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
            except (Unsupported, TooComplex) as e:
                self.soften("patternProperties", f"key classes too complex ({e}); any other key allowed")
                cells = [c for c in cells if c.key is not None] + [KeyCell(None, (), 0, tuple(ANY_ID for _ in objs))]
                break
            cells.append(KeyCell(None, langs, mask, tuple(vals)))
        self._cell_memo[objs] = cells
        return cells

    def _lang_fsm(self, lang: tuple) -> Any:
        if lang[0] == "p":
            return ir_fsm(pattern_ir(lang[1]))
        sh = self.b.shallow(lang[1])
        f = empty_fsm()
        for s in sh.strs:
            f = f | s.fsm()
        return f

    def _region(self, langs: tuple, mask: int) -> tuple | None:
        """("all",) | ("ir", IR) | ("fsm", FSM): the keys matching every class of ``mask`` (not
        excluding the others: higher-priority terminals take those, see ``LarkEmitter._text``); None when
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

    def _region_regex(self, cell: KeyCell, cut: frozenset, cut_masks: frozenset, declared: bool) -> str | None:
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
        elif region[0] == "ir" and not cut_masks and not any(regex_matcher(dec_regex(region[1])).fullmatch(k)
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

    # -- phase 4: key terminals
    def _key(self, cell: KeyCell, cut: frozenset, cut_masks: frozenset, declared: bool) -> str:
        if cell.key is not None:
            # once per key: a schema's keys recur on every automaton edge that reads them
            # (11,208 calls over three large maskbench schemas: wp_124, o13020, o18637)
            name = self._key_terms.get(cell.key)
            if name is None:
                if any(0xD800 <= ord(ch_) <= 0xDFFF for ch_ in cell.key):
                    self.fail(f"property name {cell.key!r} contains a lone surrogate")
                name = self._key_terms[cell.key] = self._term("lit", f'"{canonical(cell.key)}"', KEY_PRIORITY)
            return name
        rx = self._region_regex(cell, cut, cut_masks, declared)
        if rx is None:
            self.fail("a patternProperties class contains only keys not allowed there")
        # More classes matched = higher priority: a key matching patterns p and q is lexed as
        # the {p, q} class, not as {p} (whose regex does not exclude q).
        n = len(cell.langs)
        rank = sorted(range(2 ** n), key=lambda m: (bin(m).count("1"), m)).index(cell.mask)
        return self._term("re", f'"{rx}"', 1 + rank)
