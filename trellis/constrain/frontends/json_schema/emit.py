"""Grammar emission: ``LarkEmitter`` turns the builder's nodes into Lark text: the nodes reachable
from the root, their bisimulation classes (equal meaning -> one rule), the object/array automata
(``automata``, over ``keys`` cells and ``scalars`` values), productivity, and the rules and
terminals written out."""

from __future__ import annotations

import re

from trellis.constrain.errors import SchemaError
from trellis.constrain.frontends.json_schema.automata import Automata
from trellis.constrain.frontends.json_schema.emit_base import START, Val, lark_regex
from trellis.constrain.frontends.json_schema.limits import MAX_RULES
from trellis.constrain.frontends.json_schema.specs import NEVER_ID


class LarkEmitter(Automata):
    """The builder's nodes -> Lark grammar text (``grammar``)."""

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

    # -- productivity: only rules that derive some text are emitted (the engine relies on it)
    def _productive(self, classes: set[int]) -> dict[tuple, bool]:
        prod: dict[tuple, bool] = {}
        for c in classes:
            prod[("c", c)] = False
            for k in ("O", "A"):
                prod[(k, c)] = False

        def val_ok(v: Val) -> bool:
            if v[0] in ("lit", "S", "N", "SC", "SR"):  # scalars: made only when some string fits
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

    # -- phase 4: text
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
        if v[0] == "SR":  # rules made by ScalarRules._pattern_chunked
            return v[1]
        return f"v{v[0].lower()}{v[1]}"

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
            alts = [f"{open_} {close}"] if START in a.accepting else []
            alts += [f"{open_} {nt}{q} {close}" for q in sorted(a.accepting & live) if q != START]
            for x in alts:
                rule(f"v{kind.lower()}{c}", x)
            labelled = []
            # An edge's label depends on its cell and value only: an object's key cell labels an
            # edge from every state before it (18,746 object edges, 2,345 distinct labels over bench_fresh's
            # 100 schemas), each a key lookup behind two new frozensets (translation x0.966 per
            # schema, in-process A/B: benchmarks/README.md, bench_fresh section).
            syms: dict[tuple, str] = {}
            for s, ci, v, d in edges:
                if v[0] in ("c", "O", "A"):
                    todo.append(("c" if v[0] == "c" else v[0], v[1]))
                sym = syms.get((ci, v))
                if sym is None:
                    if kind == "A":
                        sym = self._val(v)
                    else:
                        key = self._key(cells[ci], frozenset(cuts.get(ci, ())), frozenset(cut_masks.get(ci, ())),
                                        bool(names))
                        sym = f"{key} COLON {self._val(v)}"
                    syms[(ci, v)] = sym
                labelled.append((s, sym, d))
            self._edge_rules(nt, labelled, rule)
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
                lines.append(f"{name}: /{lark_regex(before + re.escape(p) + after)}/")
        lines += ['NULL: "null"', 'TRUE: "true"', 'FALSE: "false"']
        for (kind, text, _), name in self.terms.items():
            if kind == "lit":
                lines.append(f'{name}: "{_lark_str(text)}"')
            else:
                lines.append(f"{name}: /{lark_regex(text)}/")
        return "\n".join(lines) + "\n"

    def _edge_rules(self, nt: str, edges: list[tuple[int, str, int]], rule) -> None:
        """The rules of an automaton's edges ``(source, label, target)``: state ``d``'s
        nonterminal derives the pairs (or items) read up to ``d``, so an edge is
        ``nt_d: nt_s COMMA label`` (``nt_d: label`` from the start).

        Plain form: one alternative per edge. An object of n optional properties in order has
        n^2/2 edges (every earlier state reaches every later key), each alternative repeating its
        key and value: WashingtonPost wp_124's grammar had 6,334 such alternatives of 7,088.
        ``shared_sources`` (the Earley engine's form, ``compile``): the edges into ``d`` with one
        label are one alternative ``nt_d: U COMMA label`` over the union ``U`` of their sources,
        ``U(S): U(S - {max S}) | nt_max`` or ``nt_min | U(S - {min S})`` memoised per set, built
        smaller sets first, so nested source sets share one chain (prefixes: {1..k-1} into the
        k-th optional key; suffixes: {k..n} into an open object's other-keys state) and the
        grammar is linear in the edges' distinct (label, target) pairs: 6,334 -> ~2,100
        alternatives on wp_124.
        Each ``U(S)`` derives each ``nt_s`` (s in S) exactly once, so the language is the
        same and no ambiguity is added. Not for Lark's LALR parser: whether to reduce ``nt_s``
        to a larger union is decided only by the key after the comma (a reduce/reduce conflict),
        so ``JsonSchema.to_lark()`` keeps the plain form."""
        if not self.shared_sources:
            for s, sym, d in edges:
                rule(f"{nt}{d}", sym if s == START else f"{nt}{s} COMMA {sym}")
            return
        groups: dict[tuple[int, str], list[int]] = {}
        for s, sym, d in edges:
            groups.setdefault((d, sym), []).append(s)
        unions: dict[tuple[int, ...], str] = {}

        def union(states: tuple[int, ...]) -> str:
            if len(states) == 1:
                return f"{nt}{states[0]}"
            hit = unions.get(states)
            if hit is not None:
                return hit
            if len(states) == 2 or states[1:] in unions:  # a suffix chain: U(S) = nt_min | U(S - {min})
                u = unions[states] = f"{nt}u{len(unions)}"
                rule(u, f"{nt}{states[0]}")
                rule(u, union(states[1:]))
                return u
            k = len(states)  # the longest prefix already named (a loop: chains reach 4,096)
            while k > 1 and states[:k] not in unions:
                k -= 1
            name = unions[states[:k]] if k > 1 else f"{nt}{states[0]}"
            for j in range(k + 1, len(states) + 1):
                u = unions[states[:j]] = f"{nt}u{len(unions)}"
                rule(u, name)
                rule(u, f"{nt}{states[j - 1]}")
                name = u
            return name

        rests = {g: tuple(sorted(set(sources) - {START})) for g, sources in groups.items()}
        for r in sorted(set(rests.values()), key=len):  # smaller sets first: prefixes are found at once
            if r:
                union(r)
        for (d, sym), sources in groups.items():
            if START in sources:
                rule(f"{nt}{d}", sym)
            if rests[(d, sym)]:
                rule(f"{nt}{d}", f"{union(rests[(d, sym)])} COMMA {sym}")


def _lark_str(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')
