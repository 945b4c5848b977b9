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
from typing import Iterable

import numpy as np

from trellis.constrain.grammar import lark_reader
from trellis.constrain.grammar.analysis import bnf_parse, nullable, productive, remap
from trellis.constrain.grammar.lark_reader import TermDef
from trellis.constrain.grammar.plain_patterns import plain_pattern
from trellis.constrain.automata.byte_dfa import ByteDFA, literal_dfa
from trellis.constrain.automata.dfa_minimise import char_budget, shortest
from trellis.constrain.errors import GrammarError
from trellis.constrain.automata.lookaround import FollowGuard
from trellis.constrain.automata.regex import terminal_parts
from trellis.constrain.terminal_kinds import CHARS, LAZY, TokenRef, budget_of


@dataclass(eq=False)
class Terminal:
    name: str
    dfa: ByteDFA
    pattern: str  # the regex (or literal) it was compiled from, for messages
    priority: int = 0
    # Set on the part of a terminal whose matches end only where the next character passes its
    # trailing lookahead (``regex.terminal_parts``): the recogniser applies it to what follows.
    guard: FollowGuard | None = None
    # A token element (``terminal_kinds.py``): it matches one token by id; ``dfa`` is ``NO_BYTES``.
    token: TokenRef | None = None


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
    """Where the first ``%declare`` of a terminal that is not a token element stands (token
    elements are declared terminals with reserved names, ``terminal_kinds.py``)."""
    for m in re.finditer(r"^[ \t]*%declare\b([^\n]*)", text, re.M):
        if all(TokenRef.from_name(n) is not None for n in m.group(1).split()):
            continue
        return text.count("\n", 0, m.start()) + 1, m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
    return None


# Lark's loader parses an imported file again for every ``%import`` statement of every grammar
# (all of common.lark, ~60 definitions mangled, then pruned to the few used: half of Lark's load
# time for arithmetic.lark). The pruned definitions depend only on the file found, its text and
# the import statement, so they are kept per process, keyed by all of those, and deep-copied out.
IMPORTS_MEMO: dict[tuple, tuple[dict, dict]] = {}
_IMPORTS_MAX = 256


def _install_import_memo() -> None:
    import copy

    from lark import load_grammar as lg

    builder = lg.GrammarBuilder
    if getattr(builder.do_import, "_trellis_memo", False):
        return
    original = builder.do_import

    def resolve(self, dotted_path: tuple, base_path: str | None) -> tuple[str, str] | None:
        grammar_path = os.path.join(*dotted_path) + lg.EXT
        for src in self.import_paths + ([base_path] if base_path is not None else []) + [lg.stdlib_loader]:
            try:
                if callable(src):
                    joined, text = src(base_path, grammar_path)
                else:
                    joined = os.path.join(src, grammar_path)
                    with open(joined, encoding="utf8") as f:
                        text = f.read()
            except IOError:
                continue
            return str(joined), text
        return None

    def do_import(self, dotted_path, base_path, aliases, base_mangle=None):  # type: ignore[no-untyped-def]
        found = resolve(self, dotted_path, base_path) if base_mangle is None else None
        if found is None:  # nested imports and failures: Lark's own path (and its errors)
            return original(self, dotted_path, base_path, aliases, base_mangle)
        joined, text = found
        key = (joined, lg.sha256_digest(text), tuple(dotted_path), tuple(sorted(aliases.items())),
               bool(self.global_keep_all_tokens))
        hit = IMPORTS_MEMO.get(key)
        if hit is None:
            before, used_before = set(self._definitions), dict(self.used_files)
            original(self, dotted_path, base_path, aliases, base_mangle)
            new = {k: v for k, v in self._definitions.items() if k not in before}
            used = {k: v for k, v in self.used_files.items() if k not in used_before}
            if len(IMPORTS_MEMO) >= _IMPORTS_MAX:
                IMPORTS_MEMO.clear()
            IMPORTS_MEMO[key] = (copy.deepcopy(new), used)
            return None
        defs, used = hit
        for k, h in used.items():
            if self.used_files.get(k, h) != h:
                raise RuntimeError("Grammar file was changed during importing")
        for name in defs:
            if name in self._definitions:
                raise lg.GrammarError(f"Cannot import '{name}' from '{os.path.join(*dotted_path) + lg.EXT}': "
                                      f"Symbol already defined.")
        self.used_files.update(used)
        self._definitions.update(copy.deepcopy(defs))
        return None

    do_import._trellis_memo = True  # type: ignore[attr-defined]
    builder.do_import = do_import


def load_lark(text: str, *, source: str = "<grammar>", start: str = "start",
              path: str | os.PathLike | None = None, fast: bool = True) -> GrammarIR:
    """Lark grammar text -> ``GrammarIR``; every failure is a ``GrammarError`` with a location.

    ``path``: the grammar file, so that relative ``%import .name`` finds files beside it.
    ``fast``: read the common subset with ``lark_reader`` (the same grammar, 3-10x sooner), and
    anything else with Lark's own loader; False: always Lark's loader."""
    decl = _declared(text)
    if decl is not None:
        raise GrammarError("%declare is not supported: declared terminals come from a postlexer (e.g. an "
                           "indenter), which has no byte-level language", source=source, text=text,
                           line=decl[0], column=decl[1])
    read = lark_reader.read(text, start=start) if fast else None
    if read is not None:  # (no Lark import on this path: its import is ~20-45 ms of a new process)
        return _build(*read, start, text, source)
    from lark import exceptions as lark_exc
    from lark.load_grammar import load_grammar

    from trellis.constrain.errors import lark_error

    _install_import_memo()
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
        raise lark_error(e, text, source) from None
    if not any(r.origin.name == start for r in rules):
        defined = [name for name, *_ in g.rule_defs if not name.startswith("_")]
        raise GrammarError(f"start rule {start!r} is not defined (rules: {', '.join(defined[:12]) or 'none'}; "
                           f"pass start=...)", source=source)
    rules = [(r.origin.name, tuple((x.name, x.is_term) for x in r.expansion)) for r in rules]
    return _build(terms, rules, ignore, start, text, source)


def _terminal_parts(td: object, text: str, source: str) -> list[tuple[ByteDFA, FollowGuard | None]]:
    pat = td.pattern  # type: ignore[attr-defined]
    try:
        if pat.type == "str" and not pat.flags:  # Lark's PatternStr or plain_patterns' twin
            if not pat.value:
                return [(_EPSILON, None)]
            return [(literal_dfa(pat.value.encode("utf-8")), None)]
        parts = terminal_parts(pat.to_regexp(), name=f"terminal {td.name}",  # type: ignore[attr-defined]
                               written=None if pat.flags else pat.raw)
        if len(parts) > 1 and any(bool(d.final[0]) for d, _ in parts):
            raise GrammarError(f"terminal {td.name}: regex feature not supported (an empty match beside a "  # type: ignore[attr-defined]
                               f"lookahead past the end of the match) in /{pat.to_regexp()}/")  # type: ignore[attr-defined]
        return parts
    except GrammarError as ge:
        line, col = _locate(text, td.name)  # type: ignore[attr-defined]
        if line is None and pat.value:
            m = text.find(pat.value)
            if m >= 0:
                line, col = text.count("\n", 0, m) + 1, m - (text.rfind("\n", 0, m) + 1) + 1
        raise GrammarError(ge.message, source=source, text=text, line=line, column=col) from None


_EPSILON = ByteDFA(np.full((1, 256), -1, dtype=np.int32), np.ones(1, dtype=bool))
# The byte DFA of a token element (``terminal_kinds.py``): one state, not accepting, no byte leaves
# it. A scan of it is never moved by a byte, so the byte-level machinery (steps, walks, live
# bytes) passes it by.
NO_BYTES = ByteDFA(np.full((1, 256), -1, dtype=np.int32), np.zeros(1, dtype=bool))


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


def _build(terms: list, rules: list | None, ignore: list[str], start: str, text: str, source: str,
           flat: tuple | None = None) -> GrammarIR:
    """``rules``: ``(origin name, ((symbol name, is terminal), ...))``; ``terms``: objects with
    ``name``, ``pattern`` (a Lark pattern) and ``priority``. ``flat`` instead of ``rules``:
    ``analysis.bnf_parse``'s names and tables (``_flat_rules``)."""
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

    # A terminal whose matches end in more than one way (unconditionally, or under a follow guard
    # of a trailing lookahead) is one terminal per part and a nonterminal T| -> part | part ...
    parts_of: dict[str, list[int]] = {}

    def term(name: str) -> int:
        if name in tids:
            return tids[name]
        td = term_defs.get(name)
        ref = TokenRef.from_name(name) if td is None else None
        if ref is not None:
            tids[name] = len(terminals)
            terminals.append(Terminal(name, NO_BYTES, str(ref), token=ref))
            return tids[name]
        if td is None:
            line, col = _locate(text, name)
            raise GrammarError(f"terminal {name} has no definition", source=source, text=text, line=line, column=col)
        parts = _terminal_parts(td, text, source)
        if name.startswith(LAZY):  # committed-shortest: its matches that no shorter match begins
            assert len(parts) == 1 and parts[0][1] is None, name  # (GBNF text: no lookaround)
            parts = [(shortest(parts[0][0]), None)]
        elif name.startswith(CHARS):  # xgrammar's max_chars (terminal_kinds.py)
            assert len(parts) == 1 and parts[0][1] is None, name
            try:
                parts = [(char_budget(parts[0][0], budget_of(name), name="xgrammar rule option"), None)]
            except GrammarError as e:
                raise GrammarError(e.message, source=source, text=text) from None
        value, prio = getattr(td.pattern, "value", ""), int(getattr(td, "priority", 0) or 0)
        if len(parts) > 1 or parts[0][1] is not None:
            parts_of[name] = []
            for dfa, guard in parts:
                parts_of[name].append(len(terminals))
                terminals.append(Terminal(name, dfa, value, prio, guard))
            tids[name] = parts_of[name][0]
            return tids[name]
        dfa = parts[0][0]
        if bool(dfa.final[0]):
            dfa = _without_empty(dfa)
            optional[name] = f"{name}?"
        tids[name] = len(terminals)
        terminals.append(Terminal(name, dfa, value, prio))
        return tids[name]

    # The symbol a terminal name stands for in a rule, once per name (a schema grammar uses its
    # COMMA and COLON thousands of times: a numpy test per use was 0.13 s over 135 schemas).
    sym_of: dict[str, int] = {}

    def term_sym(name: str) -> int:
        hit = sym_of.get(name)
        if hit is None:
            t = term(name)
            # an empty language keeps the terminal (dropped by the productivity pass); a terminal
            # that also matches "" stands for its nonterminal T? -> T' | (empty)
            d = terminals[t].dfa
            empty_lang = not d.literal and (d.num_states == 0 or not d.final.any())
            if name in parts_of:
                hit = nt(f"{name}|")
                out_rules.extend((hit, (-1 - p,)) for p in parts_of[name])
            else:
                hit = nt(optional[name]) if name in optional and not empty_lang else -1 - t
            sym_of[name] = hit
        return hit

    aug = nt("$start")
    nt(start)
    if flat is None:
        for origin, expansion in rules:  # type: ignore[union-attr]
            out_rules.append((nt(origin), tuple(term_sym(n) if is_t else nt(n) for n, is_t in expansion)))
    else:
        out_rules = _flat_rules(flat, nt, term_sym, out_rules)
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
        ign.extend(parts_of.get(name, [t]))
    names = [""] * len(nts)
    for k, v in nts.items():
        names[v] = k
    out_rules = _productive(out_rules, len(nts), terminals, nts, start, text, source)
    ir = GrammarIR(source, names, terminals, out_rules, tuple(ign), aug)
    ir.nullable = nullable(out_rules, len(nts))
    return ir


def _flat_rules(flat: tuple, nt, term_sym, out_rules: list) -> list:
    """``_build``'s rules from ``analysis.bnf_parse``'s tables: each name numbered once, in order of
    first appearance, which is the order in which the loop over rules numbers them, so the IR is
    the same (a terminal's part rules, which ``term_sym`` adds, go before the rule where its name
    first appears, as there); the rule tuples are made in C (``analysis.remap``). With the line
    reading in C, a fresh schema's compile is x0.91 per schema, the analyses in C alone x0.97
    (``ab_masks.py --switch cfgc``, benchmarks/README.md)."""
    names, is_term, first_rule, origin, off, sym = flat
    table: list[int] = []
    extra: list[tuple[int, list]] = []
    for i, name in enumerate(names):
        k = len(out_rules)
        table.append(term_sym(name) if is_term[i] else nt(name))
        if len(out_rules) > k:
            extra.append((memoryview(first_rule).cast("i")[i], out_rules[k:]))
            del out_rules[k:]
    mapped = remap(origin, off, sym, table)
    for r, rs in reversed(extra):  # (first appearances in rule order: later ones first keeps indices)
        mapped[r:r] = rs
    return out_rules + mapped


def _productive(rules: list[tuple[int, tuple[int, ...]]], n: int, terminals: list[Terminal],
                nts: dict[str, int], start: str, text: str, source: str) -> list[tuple[int, tuple[int, ...]]]:
    """Rules whose every symbol derives some string (least fixpoint); error if the start rule has none."""
    # (a literal chain is a non-empty word: no numpy test, a schema grammar has a key per terminal)
    # (a token element matches a token: whether one of this vocabulary is checked with it, later)
    ok_t = bytes(bool(t.dfa.literal) or t.token is not None or _has_words(t.dfa) for t in terminals)
    prod, kept = productive(rules, n, ok_t)
    if not prod[nts[start]]:
        line, col = _locate(text, start)
        raise GrammarError(f"rule {start} derives no string (every expansion needs a rule or terminal that "
                           f"matches nothing)", source=source, text=text, line=line, column=col)
    return kept


def _has_words(dfa: ByteDFA) -> bool:
    """Whether a (trimmed) DFA matches a non-empty string; kept on the DFA object (the regex memos
    share DFAs across grammars: two numpy reductions per terminal per compile otherwise)."""
    hit = dfa.__dict__.get("_has_words")
    if hit is None:
        hit = dfa.__dict__["_has_words"] = bool(dfa.final.any() and (dfa.trans >= 0).any())
    return hit


_BNF_RULE = re.compile(r"([a-z_][a-z0-9_]*): ([A-Za-z0-9_ |]*)")
_BNF_TERM = re.compile(r'([A-Z_][A-Z0-9_]*)(?:\.(-?\d+))?: ("(?:[^"\\]|\\.)*"|/(?:[^/\\]|\\.)*/[imslux]*)')


def load_bnf(text: str, *, source: str = "<grammar>", start: str = "start",
             lexical_priority: bool = False) -> GrammarIR | None:
    """``GrammarIR`` of plain BNF in Lark syntax (``rule: A b | c`` lines and ``NAME.prio: "lit"`` /
    ``NAME: /regex/`` lines only, as ``JsonSchema.to_lark`` writes), read line by line; None when
    the text uses anything else (then ``load_lark`` reads it).

    Lark's grammar parser is itself an LALR parser in Python: on a 186 KB schema grammar
    (Kubernetes kb_1007) it took 3.7 s of a 6.6 s compile, this reader ~0.05 s."""
    return _load_bnf(text, source, start, lexical_priority, bnf_parse(text))


def _load_bnf_py(text: str, *, source: str, start: str, lexical_priority: bool) -> GrammarIR | None:
    """``load_bnf`` with the rule lines read in Python (what runs without ``_cfgc``)."""
    return _load_bnf(text, source, start, lexical_priority, None)


def _load_bnf(text: str, source: str, start: str, lexical_priority: bool, parsed: tuple | None) -> GrammarIR | None:
    """``load_bnf`` from ``analysis.bnf_parse``'s tables, or, where they are None (no ``_cfgc``, or
    a line break other than "\\n", which ``str.splitlines`` also splits at), line by line here."""
    if parsed is None:
        rules, term_lines = _bnf_lines(text)
        flat = None
        has_start = any(origin == start for origin, _ in rules)
        used = {n for _, exp in rules for n, is_t in exp if is_t}
    else:
        names, is_term, is_origin, first_rule, origin, off, sym, term_lines = parsed
        rules, flat = None, (names, is_term, first_rule, origin, off, sym)
        has_start = start in names and bool(is_origin[names.index(start)])
        used = {n for n, t in zip(names, is_term) if t}
    terms = _bnf_terms(term_lines)
    if terms is None or not has_start or not used <= set(terms):
        return None
    ir = _build([terms[n] for n in sorted(used)], rules, [], start, text, source, flat=flat)
    ir.lexical_priority = lexical_priority
    return ir


def _bnf_terms(lines: Iterable[str]) -> dict[str, TermDef] | None:
    """``load_bnf``'s terminal lines (``NAME.prio: "lit"`` / ``NAME: /regex/``) as definitions;
    None when one is not such a line or its pattern does not read."""
    terms: dict[str, TermDef] = {}
    for line in lines:
        m = _BNF_TERM.fullmatch(line)
        if m is None:
            return None
        try:
            pat = plain_pattern(m.group(3))  # (no Lark import on this path: plain_patterns.py)
        except Exception:
            return None
        terms[m.group(1)] = TermDef(m.group(1), pat, int(m.group(2) or 0))
    return terms


def _bnf_lines(text: str) -> tuple[list, list[str]]:
    """The rule lines of ``text`` as ``(origin, ((symbol, is terminal), ...))`` per alternative, and
    its other non-empty lines (``_bnf_terms`` reads them)."""
    rules: list = []
    term_lines: list[str] = []
    for line in text.splitlines():
        if not line:
            continue
        m = _BNF_RULE.fullmatch(line)
        if m:
            origin = m.group(1)
            for alt in m.group(2).split("|"):
                rules.append((origin, tuple((x, x[0].isupper() or x[0] == "_" and x[1:2].isupper())
                                            for x in alt.split())))
        else:
            term_lines.append(line)
    return rules, term_lines
