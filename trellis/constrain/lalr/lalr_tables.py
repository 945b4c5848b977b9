"""The LALR engine (``engine="lalr"``), tables stage: Lark grammar -> ``GrammarTables``.

Lark builds the grammar and its LALR table (``strict=True``: conflicts are errors; its lexer is
never built); ``compile_lark`` turns them into vocabulary-independent, picklable tables: the
actions and gotos, each state's contextual lexer (byte DFAs of its terminal set, ``lexer.py``),
all lexers' states numbered globally, and, for precomputed compiles, viability answers of every
stack top (``build_top_table``). Lark's errors become ``GrammarError`` with a location
(``lark_error``). The semantics are ``cfg.py``'s module docstring.
"""

from __future__ import annotations

import functools
import re

from trellis.constrain.automata.byte_dfa import literal_dfa
from trellis.constrain.errors import GrammarError, lark_error, locate_in_text
from trellis.constrain.lalr.lalr_runtime import VIABILITY_DEPTH, GrammarTables, LalrRuntime
from trellis.constrain.lalr.lexer import TerminalCollision, TerminalInfo, build_lexer_dfa, globalize
from trellis.constrain.automata.regex import terminal_dfa

# A precomputed compile answers every depth-VIABILITY_DEPTH question on every possible stack top
# ahead of time (``GrammarTables.top_table``) when there are at most this many: python_call.lark
# has 6.7k (~70 ms, once per grammar, disk-cached with it), sql_select.lark 57k (~0.7 s, and a
# pickle too big for its 50 ms warm compile), so sql_select answers them on first use.
TOP_TABLE_BUDGET = 10_000


# ----------------------------------------------------------------------------- compiled grammar


@functools.cache
def _no_lexer() -> type:
    """A Lark lexer class that is never used (lark is imported lazily, so built on first call)."""
    from lark.lexer import Lexer

    class NoLexer(Lexer):
        """Stands in for Lark's lexer: trellis lexes with its own byte DFAs."""

        def __init__(self, conf: object) -> None:
            pass

        def lex(self, *args: object) -> None:  # type: ignore[override]
            raise NotImplementedError("trellis grammars are lexed by trellis.constrain.lalr.lexer")

    return NoLexer


def _terminal_error(msg: str, td: object, text: str, source: str) -> GrammarError:
    """GrammarError at the definition of terminal ``td`` (or its pattern, for anonymous ones)."""
    nm, pat = td.name, td.pattern  # type: ignore[attr-defined]
    line, col = locate_in_text(text, rf"^\s*{re.escape(nm)}\b") if not nm.startswith("__") else (None, None)
    if line is None:
        line, col = locate_in_text(text, re.escape(pat.value)) if pat.value else (None, None)
    return GrammarError(msg, source=source, text=text, line=line, column=col)


def _validate_terminals(defs: list, ignore: set[str], text: str, source: str) -> None:
    """What Lark's lexer construction checks (we never build it): each terminal compiles as a
    Python regex and matches no empty lexeme, and every %ignore'd name is defined. Collisions
    (the other strict check) are found while building the lexer DFAs."""
    undefined = ignore - {td.name for td in defs}
    if undefined:
        raise GrammarError(f"%ignore of undefined terminals: {', '.join(sorted(undefined))}", source=source,
                           text=text, line=locate_in_text(text, r"^%ignore")[0], column=1)
    for td in defs:
        try:
            re.compile(td.pattern.to_regexp())
        except re.error as e:
            raise _terminal_error(f"Cannot compile terminal {td.name}: {e}", td, text, source) from None
        if td.pattern.min_width == 0:
            raise _terminal_error(f"Lexer does not allow zero-width terminals. ({td.name}: {td.pattern})", td,
                                  text, source)


def compile_lark(text: str, *, source: str = "<grammar>", start: str = "start") -> GrammarTables:
    """Compile Lark grammar text into vocabulary-independent tables; errors -> ``GrammarError``."""
    import lark
    from lark.parsers.lalr_analysis import Shift

    try:
        # Lark builds the grammar and the LALR table; its own lexer is never used, and building it
        # (a Python-regex lexer per parser state plus interegular FSMs for the strict collision
        # check) was ~25 ms of a json.lark compile: ``_validate_terminals`` and the lexer DFAs
        # below check the same things on our byte DFAs.
        lk = lark.Lark(text, parser="lalr", lexer=_no_lexer(), start=start, strict=True)
    except Exception as e:  # lark raises GrammarError, LexError, UnexpectedInput, ConfigurationError ...
        raise lark_error(e, text, source) from None
    pt = lk.parser.parser.parser.parse_table
    term_defs = {t.name: t for t in lk.terminals}
    used: set[str] = set(lk.ignore_tokens)
    for row in pt.states.values():
        used.update(k for k in row if k in term_defs)
    names = sorted(used)
    _validate_terminals([term_defs[n] for n in names], set(lk.ignore_tokens), text, source)
    terms: list[TerminalInfo] = []
    for nm in names:
        td = term_defs[nm]
        pat = td.pattern
        try:
            if type(pat).__name__ == "PatternStr" and not pat.flags and pat.value:
                dfa = literal_dfa(pat.value.encode("utf-8"))
            else:
                dfa = terminal_dfa(pat.to_regexp(), name=f"terminal {nm}")
        except GrammarError as ge:
            raise _terminal_error(ge.message, td, text, source) from None
        mw = pat.max_width
        terms.append(TerminalInfo(nm, td.priority, type(pat).__name__ == "PatternStr", pat.value,
                                  frozenset(pat.flags), int(min(mw, 2**62)), dfa))
    tid = {t.name: i for i, t in enumerate(terms)}
    end = len(terms)
    nts: dict[str, int] = {}
    rules: list[tuple[int, int]] = []
    rule_ids: dict[object, int] = {}
    n_states = max(pt.states) + 1
    actions: list[dict[int, int]] = [dict() for _ in range(n_states)]
    gotos: list[dict[int, int]] = [dict() for _ in range(n_states)]
    for s, row in pt.states.items():
        for k, (act, arg) in row.items():
            if k == "$END" or k in tid:
                t = end if k == "$END" else tid[k]
                if act is Shift:
                    actions[s][t] = int(arg)
                else:
                    r = rule_ids.get(id(arg))
                    if r is None:
                        lhs = nts.setdefault(arg.origin.name, len(nts))
                        r = rule_ids[id(arg)] = len(rules)
                        rules.append((lhs, len(arg.expansion)))
                    actions[s][t] = -1 - r
            else:
                gotos[s][nts.setdefault(k, len(nts))] = int(arg)
    ignore = frozenset(tid[n] for n in lk.ignore_tokens)
    sets: dict[frozenset[int], int] = {}
    lexer_of = []
    for s in range(n_states):
        key = frozenset(t for t in actions[s] if t != end) | ignore
        lexer_of.append(sets.setdefault(key, len(sets)))
    memo: dict = {}
    try:
        lexers = [build_lexer_dfa(terms, sorted(k), memo) for k in sets]
    except TerminalCollision as e:
        raise _terminal_error(str(e), term_defs[e.names[0]], text, source) from None
    gtrans, gfinal = globalize(lexers)
    g = GrammarTables(text, source, terms, ignore, end, actions, rules, gotos, pt.start_states[start],
                        pt.end_states[start], lexer_of, lexers, gtrans, gfinal)
    probe = LalrRuntime(g)
    if not probe.viable(((g.start_state,), 0), depth=VIABILITY_DEPTH + 2):
        raise GrammarError("the grammar's language is empty (under greedy contextual lexing)",
                           source=source, text=text, line=1, column=1)
    return g


def build_top_table(g: GrammarTables, budget: int = TOP_TABLE_BUDGET) -> None:
    """Set ``g.top_table`` (empty when it would take more than ``budget`` questions)."""
    g.top_table = LalrRuntime(g).top_table(budget)
