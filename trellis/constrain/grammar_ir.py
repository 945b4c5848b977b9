"""A context-free grammar over byte-level terminals: what the scannerless engine compiles.

``load_lark(text)`` reads a Lark grammar with Lark's own grammar loader (so templates, ``%import``
of ``common`` and of files relative to the grammar's folder, ``?rule``/``_rule``/``[x]``, ``~ m..n``
and every other piece of Lark syntax mean what they mean in Lark) and keeps only what decides the
*language*: the rules, the terminals (each compiled to a trimmed byte DFA, ``regex.py``) and the
``%ignore`` terminals. Priorities (of rules and terminals) only choose between parse trees of one
string in Lark's Earley parser, so they do not change the language and are ignored here. ``%declare``
terminals have no pattern (they come from a postlexer, e.g. Python's indentation): refused by name.

Productivity is checked here because the engine relies on it: with every nonterminal deriving some
string and every terminal DFA trimmed, an Earley chart that is not empty is a viable prefix (the
correct-prefix property), so the engine needs no look-ahead search for dead ends. Rules that can
never derive a string are dropped; a start symbol that derives nothing is an error.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import numpy as np

from trellis.constrain.errors import GrammarError
from trellis.constrain.regex import ByteDFA, literal_dfa, terminal_dfa


@dataclass(eq=False)
class Terminal:
    name: str
    dfa: ByteDFA
    pattern: str  # the regex (or literal) it was compiled from, for messages
    priority: int = 0


@dataclass(eq=False)
class GrammarIR:
    """Rules over nonterminals ``0..N-1`` and terminals ``0..M-1``.

    A right-hand side symbol ``s >= 0`` is nonterminal ``s``; ``s < 0`` is terminal ``-1 - s``.
    ``start`` is an augmented nonterminal with the single rule ``start -> <grammar's start>``.
    """

    source: str
    nonterminals: list[str]
    terminals: list[Terminal]
    rules: list[tuple[int, tuple[int, ...]]]
    ignore: tuple[int, ...]
    start: int
    nullable: list[bool] = field(default_factory=list)
    # Terminal priorities as a contextual lexer applies them: where terminals t and u are both
    # expected and prio(u) > prio(t), t does not match u's strings. Off for Lark grammars (Lark's
    # Earley parser uses priorities only to choose between parse trees); on for the grammars
    # ``JsonSchema`` generates, whose declared keys outrank the "any other key" regex there.
    lexical_priority: bool = False


def _locate(text: str, name: str) -> tuple[int | None, int | None]:
    m = re.search(rf"^[ \t]*[?!_]?{re.escape(name.lstrip('_'))}\b", text, re.M) if name else None
    if not m:
        return None, None
    line = text.count("\n", 0, m.start()) + 1
    return line, m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1


def _declared(text: str) -> tuple[int, int] | None:
    m = re.search(r"^[ \t]*%declare\b", text, re.M)
    if not m:
        return None
    return text.count("\n", 0, m.start()) + 1, m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1


def load_lark(text: str, *, source: str = "<grammar>", start: str = "start",
              path: str | os.PathLike | None = None) -> GrammarIR:
    """Lark grammar text -> ``GrammarIR``; every failure is a ``GrammarError`` with a location.

    ``path``: the grammar file, so that relative ``%import .name`` finds files beside it."""
    from lark import exceptions as lark_exc
    from lark.load_grammar import load_grammar

    from trellis.constrain.cfg import _lark_error

    decl = _declared(text)
    if decl is not None:
        raise GrammarError("%declare is not supported: declared terminals come from a postlexer (e.g. an "
                           "indenter), which has no byte-level language", source=source, text=text,
                           line=decl[0], column=decl[1])
    try:
        g, _ = load_grammar(text, str(path) if path is not None else source, [], False)
        terms, rules, ignore = g.compile([start], set())
    except OSError as e:  # an %import whose file is not found
        name = os.path.basename(e.filename or "") if isinstance(e.filename, str) else ""
        stem = name[:-5] if name.endswith(".lark") else name
        m = re.search(rf"^[ \t]*%import[ \t]+\.?{re.escape(stem)}\b", text, re.M) if stem else None
        m = m or re.search(r"^[ \t]*%import\b", text, re.M)
        line = text.count("\n", 0, m.start()) + 1 if m else None
        where = f"beside {path}" if path is not None else "(grammar text has no folder: compile the file by its path)"
        raise GrammarError(f"%import: grammar file {name or '?'} not found {where}", source=source, text=text,
                           line=line, column=1 if m else None) from None
    except (lark_exc.LarkError, KeyError, AssertionError, RecursionError, ValueError, TypeError) as e:
        raise _lark_error(e, text, source) from None
    if not any(r.origin.name == start for r in rules):
        defined = [name for name, *_ in g.rule_defs if not name.startswith("_")]
        raise GrammarError(f"start rule {start!r} is not defined (rules: {', '.join(defined[:12]) or 'none'}; "
                           f"pass start=...)", source=source)
    return _build(terms, rules, ignore, start, text, source)


def _terminal_dfa(td: object, text: str, source: str) -> ByteDFA:
    pat = td.pattern  # type: ignore[attr-defined]
    try:
        if type(pat).__name__ == "PatternStr" and not pat.flags:
            if not pat.value:
                return _EPSILON
            return literal_dfa(pat.value.encode("utf-8"))
        return terminal_dfa(pat.to_regexp(), name=f"terminal {td.name}")  # type: ignore[attr-defined]
    except GrammarError as ge:
        line, col = _locate(text, td.name)  # type: ignore[attr-defined]
        if line is None and pat.value:
            m = text.find(pat.value)
            if m >= 0:
                line, col = text.count("\n", 0, m) + 1, m - (text.rfind("\n", 0, m) + 1) + 1
        raise GrammarError(ge.message, source=source, text=text, line=line, column=col) from None


_EPSILON = ByteDFA(np.full((1, 256), -1, dtype=np.int32), np.ones(1, dtype=bool))


def _without_empty(dfa: ByteDFA) -> ByteDFA:
    """The DFA of L(dfa) minus the empty string: a fresh, non-accepting copy of the start state
    (state 0 may be re-entered, so it cannot just be made non-final)."""
    s = dfa.num_states
    trans = np.vstack([dfa.trans, dfa.trans[:1]])
    final = np.concatenate([dfa.final, [False]])
    order = np.concatenate([[s], np.arange(s)])  # the copy becomes state 0
    remap = np.empty(s + 1, dtype=np.int32)
    remap[order] = np.arange(s + 1, dtype=np.int32)
    t = trans[order]
    t = np.where(t >= 0, remap[np.maximum(t, 0)], -1).astype(np.int32)
    return ByteDFA(t, final[order])


def _build(terms: list, rules: list, ignore: list[str], start: str, text: str, source: str) -> GrammarIR:
    term_defs = {t.name: t for t in terms}
    nts: dict[str, int] = {}
    tids: dict[str, int] = {}
    terminals: list[Terminal] = []
    # A terminal that matches the empty string becomes a nonterminal T_opt -> T' | (empty), with
    # T' its non-empty part: the recogniser's scans then always consume at least one byte.
    optional: dict[str, str] = {}
    out_rules: list[tuple[int, tuple[int, ...]]] = []

    def nt(name: str) -> int:
        return nts.setdefault(name, len(nts))

    def term(name: str) -> int:
        if name in tids:
            return tids[name]
        td = term_defs.get(name)
        if td is None:
            line, col = _locate(text, name)
            raise GrammarError(f"terminal {name} has no definition", source=source, text=text, line=line, column=col)
        dfa = _terminal_dfa(td, text, source)
        if bool(dfa.final[0]):
            dfa = _without_empty(dfa)
            optional[name] = f"{name}?"
        tids[name] = len(terminals)
        terminals.append(Terminal(name, dfa, getattr(td.pattern, "value", ""), int(getattr(td, "priority", 0) or 0)))
        return tids[name]

    aug = nt("$start")
    nt(start)
    for r in rules:
        rhs: list[int] = []
        for sym in r.expansion:
            if sym.is_term:
                t = term(sym.name)
                if terminals[t].dfa.num_states == 0 or not terminals[t].dfa.final.any():
                    rhs.append(-1 - t)  # empty language: dropped by the productivity pass
                elif sym.name in optional:
                    rhs.append(nt(optional[sym.name]))
                else:
                    rhs.append(-1 - t)
            else:
                rhs.append(nt(sym.name))
        out_rules.append((nt(r.origin.name), tuple(rhs)))
    for name, opt in optional.items():
        t = tids[name]
        if terminals[t].dfa.num_states > 1 or terminals[t].dfa.trans.max() >= 0:
            out_rules.append((nts[opt], (-1 - t,)))
        out_rules.append((nts[opt], ()))
    out_rules.append((aug, (nts[start],)))
    ign: list[int] = []
    for name in ignore:
        t = term(name)
        if name in optional and terminals[t].dfa.trans.max() < 0:
            continue  # ignoring the empty string changes nothing
        ign.append(t)
    names = [""] * len(nts)
    for k, v in nts.items():
        names[v] = k
    out_rules = _productive(out_rules, len(nts), terminals, nts, start, text, source)
    ir = GrammarIR(source, names, terminals, out_rules, tuple(ign), aug)
    ir.nullable = _nullable(out_rules, len(nts))
    return ir


def _productive(rules: list[tuple[int, tuple[int, ...]]], n: int, terminals: list[Terminal],
                nts: dict[str, int], start: str, text: str, source: str) -> list[tuple[int, tuple[int, ...]]]:
    """Rules whose every symbol derives some string (fixpoint); error if the start rule has none."""
    ok_t = [t.dfa.final.any() and (t.dfa.trans >= 0).any() for t in terminals]
    prod = [False] * n
    changed = True
    while changed:
        changed = False
        for lhs, rhs in rules:
            if not prod[lhs] and all(prod[s] if s >= 0 else ok_t[-1 - s] for s in rhs):
                prod[lhs] = changed = True
    if not prod[nts[start]]:
        line, col = _locate(text, start)
        raise GrammarError(f"rule {start} derives no string (every expansion needs a rule or terminal that "
                           f"matches nothing)", source=source, text=text, line=line, column=col)
    return [(lhs, rhs) for lhs, rhs in rules if prod[lhs] and all(prod[s] if s >= 0 else ok_t[-1 - s] for s in rhs)]


def _nullable(rules: list[tuple[int, tuple[int, ...]]], n: int) -> list[bool]:
    null = [False] * n
    changed = True
    while changed:
        changed = False
        for lhs, rhs in rules:
            if not null[lhs] and all(s >= 0 and null[s] for s in rhs):
                null[lhs] = changed = True
    return null


def follow_terminals(ir: GrammarIR) -> list[frozenset[int]]:
    """For each terminal, the terminals that can come right after it in some sentence (the
    classic FOLLOW sets, at the level of terminals); ``%ignore`` terminals can follow anything and
    anything can follow them. Used to drop, ahead of any parse, token splits whose next byte no
    follower can start."""
    n, m = len(ir.nonterminals), len(ir.terminals)
    first: list[set[int]] = [set() for _ in range(n)]
    null = ir.nullable

    def first_of(seq: tuple[int, ...]) -> tuple[set[int], bool]:
        out: set[int] = set()
        for s in seq:
            if s < 0:
                out.add(-1 - s)
                return out, False
            out |= first[s]
            if not null[s]:
                return out, False
        return out, True

    changed = True
    while changed:
        changed = False
        for lhs, rhs in ir.rules:
            f, _ = first_of(rhs)
            if not f <= first[lhs]:
                first[lhs] |= f
                changed = True
    follow_nt: list[set[int]] = [set() for _ in range(n)]
    follow_t: list[set[int]] = [set() for _ in range(m)]
    changed = True
    while changed:
        changed = False
        for lhs, rhs in ir.rules:
            for k, s in enumerate(rhs):
                f, rest_null = first_of(rhs[k + 1:])
                if rest_null:
                    f = f | follow_nt[lhs]
                target = follow_t[-1 - s] if s < 0 else follow_nt[s]
                if not f <= target:
                    target |= f
                    changed = True
    ign = set(ir.ignore)
    everything = frozenset(range(m))
    return [everything if t in ign else frozenset(follow_t[t] | ign) for t in range(m)]


_BNF_RULE = re.compile(r"([a-z_][a-z0-9_]*): ([A-Za-z0-9_ |]*)")
_BNF_TERM = re.compile(r'([A-Z_][A-Z0-9_]*)(?:\.(-?\d+))?: ("(?:[^"\\]|\\.)*"|/(?:[^/\\]|\\.)*/[imslux]*)')


def load_bnf(text: str, *, source: str = "<grammar>", start: str = "start",
             lexical_priority: bool = False) -> GrammarIR | None:
    """``GrammarIR`` of plain BNF in Lark syntax (``rule: A b | c`` lines and ``NAME.prio: "lit"`` /
    ``NAME: /regex/`` lines only, as ``JsonSchema.to_lark`` writes), read line by line; None when
    the text uses anything else (then ``load_lark`` reads it).

    Lark's grammar parser is itself an LALR parser in Python: on a 186 KB schema grammar
    (Kubernetes kb_1007) it took 3.7 s of a 6.6 s compile, this reader ~0.05 s."""
    from types import SimpleNamespace as NS

    from lark import Token
    from lark.load_grammar import _literal_to_pattern

    rules: list = []
    terms: dict[str, object] = {}
    for line in text.splitlines():
        if not line:
            continue
        m = _BNF_RULE.fullmatch(line)
        if m:
            origin = NS(name=m.group(1))
            for alt in m.group(2).split("|"):
                syms = [NS(name=x, is_term=x[0].isupper() or x[0] == "_" and x[1:2].isupper()) for x in alt.split()]
                rules.append(NS(origin=origin, expansion=syms))
            continue
        m = _BNF_TERM.fullmatch(line)
        if m is None:
            return None
        lit = m.group(3)
        try:
            pat = _literal_to_pattern(Token("STRING" if lit[0] == '"' else "REGEXP", lit))
        except Exception:
            return None
        terms[m.group(1)] = NS(name=m.group(1), pattern=pat, priority=int(m.group(2) or 0))
    if not any(r.origin.name == start for r in rules):
        return None
    used = {s.name for r in rules for s in r.expansion if s.is_term}
    if not used <= set(terms):
        return None
    ir = _build([terms[n] for n in sorted(used)], rules, [], start, text, source)
    ir.lexical_priority = lexical_priority
    return ir
