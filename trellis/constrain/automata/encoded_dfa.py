"""The byte DFA of a character automaton's encoded language, built from the automaton itself.

A JSON Schema ``pattern`` with a length bound is translated into chunk terminals
(``frontends/json_schema/pattern_chunks.py``): each is an interegular FSM over decoded characters
written out as a regex (state elimination), which the grammar reader then parsed again (``sre``),
built into a byte NFA and determinised: ``^(\\d+\\.\\d+\\.\\d+.*)$`` with maxLength 32 spent ~60%
of its compile that way. The regex only restates the FSM. Here the FSM's edges are
substituted by the byte NFAs of their encoded character classes (one small regex per class,
memoised: a string pattern's classes repeat), and the result is determinised and minimised
like any terminal: the language is the same (an encoding of one character at a time distributes
over the regex's union, concatenation and star), so the minimal DFA, canonically numbered,
is the same table (``tests/constrain/test_encoded_dfa.py`` compares them).
"""

from __future__ import annotations

from typing import Any, Callable

from trellis.constrain.automata.byte_dfa import ByteDFA
from trellis.constrain.automata.charsets import Ranges, alphabet_ranges
from trellis.constrain.automata.dfa_minimise import determinised, minimal
from trellis.constrain.automata.regex_compile import Edges, regex_nfa
from trellis.constrain.automata.regex_ir import live_states

# encoded class regex -> (its byte NFA's edges, finals), or None where it cannot be spliced
_CLASS_NFA: dict[str, tuple[Edges, frozenset] | None] = {}
_CLASS_NFA_MAX = 4096


def _class_nfa(rx: str) -> tuple[Edges, frozenset] | None:
    """The epsilon-free byte NFA of one encoded character (start 0), if it can be spliced in
    place of an edge: nothing re-enters the start and nothing leaves an accepting state (one
    character is a finite set of byte strings, so both hold for every encoding trellis writes;
    anything else declines)."""
    hit = _CLASS_NFA.get(rx, False)
    if hit is False:
        edges, finals = regex_nfa(rx)
        ok = 0 not in finals and all(not edges[q] for q in finals) and \
            all(t != 0 for out in edges for _, _, t in out)
        hit = (edges, frozenset(finals)) if ok else None
        if len(_CLASS_NFA) >= _CLASS_NFA_MAX:
            _CLASS_NFA.clear()
        _CLASS_NFA[rx] = hit
    return hit


def encoded_dfa(f: Any, encode: Callable[[Ranges], str], suffix: bytes, *, name: str,
                pattern: str) -> ByteDFA | None:
    """The minimal byte DFA of ``encode``-d strings of the interegular FSM ``f`` followed by
    ``suffix``: what ``terminal_parts`` builds from the regex ``encode(fsm_ir(f)) + suffix``. None
    where ``f`` accepts nothing or a class's encoding cannot be spliced (the caller parses the
    regex instead)."""
    cls = alphabet_ranges(f.alphabet)
    live = live_states(f)
    if f.initial not in live:
        return None
    ids = {f.initial: 0}
    order = [f.initial]
    edges: Edges = [[]]
    finals: set[int] = set()
    by_symbol: dict[Any, tuple[Edges, frozenset] | None] = {}

    def new() -> int:
        edges.append([])
        return len(edges) - 1

    end = None
    for s in order:  # (grows while it is read: states are numbered as they are reached)
        me = ids[s]
        for t, d in f.map.get(s, {}).items():
            if d not in live:
                continue
            if d not in ids:
                ids[d] = new()
                order.append(d)
            spliced = by_symbol.get(t, False)
            if spliced is False:  # (one class per symbol of f's alphabet: no unions per state)
                spliced = by_symbol[t] = _class_nfa(encode(cls[t]))
            if spliced is None:
                return None
            c_edges, c_finals = spliced
            m = {0: me}
            for q in range(1, len(c_edges)):
                m[q] = ids[d] if q in c_finals else new()
            for q, out in enumerate(c_edges):
                src = edges[m[q]]
                src += [(lo, hi, m[t2]) for lo, hi, t2 in out]
        if s in f.finals:
            if not suffix:
                finals.add(me)
                continue
            if end is None:  # one chain of the suffix's bytes, shared by every accepting state
                end = new()
                at = end
                for b in suffix[1:]:
                    nxt = new()
                    edges[at].append((b, b, nxt))
                    at = nxt
                finals.add(at)
            edges[me].append((suffix[0], suffix[0], end))
    trans, final = determinised(edges, finals, 0)
    return minimal(trans, final, name=name, pattern=pattern)
