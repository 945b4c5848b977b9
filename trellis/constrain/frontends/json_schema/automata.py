"""Object and array automata: ``Automata`` builds, per class, the deterministic automaton over
(key cell, value) pairs or items (declared keys in order, other keys, counts), determinises the
alternatives, refines the values one transition may take into parts a parser tells apart, and
finds the states on productive paths."""

from __future__ import annotations

from typing import Callable

from trellis.constrain.frontends.json_schema.emit_base import START, Automaton, Val
from trellis.constrain.frontends.json_schema.keys import KeyClasses
from trellis.constrain.frontends.json_schema.limits import MAX_AUTOMATON
from trellis.constrain.frontends.json_schema.scalars import ScalarRules
from trellis.constrain.frontends.json_schema.specs import ANY_ID, ANY_SHALLOW, NEVER_ID
from trellis.constrain.automata.regex_ir import JSON_CONTENT


class Automata(KeyClasses, ScalarRules):
    """Stage of ``LarkEmitter``: the object/array automata of classes and their live states."""

    # -- phase 3: automata
    def _class_vals(self, c: int) -> list[Val]:
        """Every Val that class ``c``'s rules mention (building its automata)."""
        sh = self._shallow_c(c)
        out: list[Val] = []
        for kind, f in (("O", "objs"), ("A", "arrs")):
            if getattr(sh, f):
                a = self.automaton(kind, c)
                out += [e[2] for e in a.edges]
        return out

    def automaton(self, kind: str, c: int) -> Automaton:
        a = self.autos.get((kind, c))
        if a is None:
            n = self.rep[c]
            self.ptr = self.b.ptrs[n]
            a = self.autos[(kind, c)] = self._obj_auto(n) if kind == "O" else self._arr_auto(n)
        return a

    def _obj_auto(self, n: int) -> Automaton:
        """Declared keys in order (optional ones skippable), then other keys; counts for min/max.

        A branch state is (branch, next declared index, pairs so far, pairs that count for
        minProperties, whether an other-keys class was used). Once other keys are allowed,
        every allowed key cell is a transition, the branch's own declared keys included when an
        other-keys class is among them (see ``KeyClasses._cells``). For minProperties only keys known to be
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

    def _arr_auto(self, n: int) -> Automaton:
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

    def _determinise(self, start: list, trans: Callable, acc: Callable) -> Automaton:
        ids: dict[frozenset, int] = {}
        queue = [(START, frozenset(start))]
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
        return Automaton(edges, accepting, n)

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
                if any(v[0] in ("SC", "SR") for v, _ in have):  # rules, not one regex to split
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

    def _live(self, a: Automaton, ok: Callable) -> tuple[set, bool]:
        """(states on a productive path from start to acceptance, whether one exists): a search
        forward from the start and one backward from acceptance over the productive edges (sweeps
        to a fixpoint took a round per state of a chain written against the edge order)."""
        succ: dict[int, list[int]] = {}
        pred: dict[int, list[int]] = {}
        for s, _, v, d in a.edges:
            if ok(v):
                succ.setdefault(s, []).append(d)
                pred.setdefault(d, []).append(s)

        def reach(seeds: set, adj: dict[int, list[int]]) -> set:
            seen, todo = set(seeds), list(seeds)
            while todo:
                for d in adj.get(todo.pop(), ()):
                    if d not in seen:
                        seen.add(d)
                        todo.append(d)
            return seen

        live = reach({START}, succ) & reach(set(a.accepting), pred)
        return live, START in live
