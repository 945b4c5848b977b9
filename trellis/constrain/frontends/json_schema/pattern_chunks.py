"""Strings of a pattern's language with a length bound: chunk rules over the pattern's states.

A ``pattern`` with ``maxLength`` (or ``minLength``) is the intersection of two automata: the
pattern's DFA P and a counter of characters. Built as one product and turned back into a regex
(``StrSpec.regex``), its size grows with the bound: ``^https?://.+$`` with maxLength 1024 took
45 s and ``.*\\{\\{.+}}.*`` with 255 was refused as too large. Here the counter is the parser's
and the pattern's state is the rule's, so the text grows with ``bound / CHUNK`` times the states
P can be in at a chunk boundary, and every terminal is at most ``CHUNK`` characters deep:

    R(c, p)  ->  C(p, q) R(c + 1, q)     for each q that CHUNK characters lead p to
              |  T(c, p)

``R(c, p)``: the rest of the string after ``c`` whole chunks, P in state ``p``. ``C(p, q)``:
the strings of exactly CHUNK characters that lead P from ``p`` to ``q`` (disjoint for distinct
``q``: P is deterministic). ``T(c, p)``: the last ``t < CHUNK`` characters, ``lo <= c * CHUNK + t
<= hi``, ending in an accepting state, and the closing quote. A string of ``L`` characters splits
one way only (``L // CHUNK`` chunks), so the grammar is unambiguous; rules that derive no string
are pruned, so every prefix the grammar allows can be completed (exact masks). Without an upper
bound the layers from ``ceil(lo / CHUNK)`` on are one (a loop).
"""

from __future__ import annotations

from typing import Any, Callable

from interegular.fsm import FSM

from trellis.constrain.automata.encoded_dfa import encoded_dfa
from trellis.constrain.automata.fsm_product import minimal
from trellis.constrain.automata.regex import seed_parts
from trellis.constrain.automata.regex_ir import (ANY, TooComplex, enc_regex, enc_set, fsm_and, fsm_regex, ir_fsm,
                                                live_states, rep)
from trellis.constrain.frontends.json_schema.emit_base import lark_regex

# Rules one pattern-and-length string may expand into (each layer holds the pattern states a
# boundary can be in): past it the spec is refused as too complex, as the product path refuses.
MAX_PATTERN_RULES = 20_000
# Chunk sizes tried, longest first: a chunk's regex is the pattern's paths of exactly k
# characters, and for a pattern whose states interleave (``(?:\\S+\\s+){0,49}``, ``.*\\{\\{.+}}``)
# that text grows fast with k (535k characters at 16), so a shorter chunk is tried instead.
CHUNKS = (16, 8, 4, 2, 1)
MAX_CHUNK_NODES, MAX_CHUNK_CHARS = 4_000, 8_000
# All chunk regexes of one chunk size together: past it a shorter chunk is tried. Without it an
# email format with maxLength 40 (172 states) spent 22 s on thousands of 8-character regexes
# before compiling (0.3 s at chunk size 1).
MAX_CHUNK_TEXT = 100_000
MAX_CHUNK_PIECES = 1_500  # distinct chunk and tail regexes of one chunk size (each is a product)


def pattern_chunk_rules(f: Any, lo: int, hi: int | None, term: Callable[[str], str],
                        name: str) -> list[tuple[str, str]] | None:
    """Rules (lhs, rhs) deriving, from ``name``, the JSON string bodies (closing quote included)
    of the strings of ``f`` (an interegular FSM over decoded characters) with ``lo`` to ``hi``
    characters (``hi`` None: no upper bound); ``term(regex)`` names a regex terminal. None when
    no string qualifies. Raises TooComplex when no chunk size gives small terminals within
    MAX_PATTERN_RULES."""
    f = minimal(f)
    live = live_states(f)
    if f.initial not in live:
        return None
    why = ""
    for k in CHUNKS:
        try:
            built = _layers(f, live, lo, hi, k)
        except _TooLong as e:  # a chunk's regex is large: shorter chunks give shorter regexes
            why = str(e)
            continue
        if built is None:
            return None
        start, rules = built
        names = {rx: term(rx) for _, rhs in rules for rx in rhs[:1]}
        ids = {node: i for i, node in enumerate(dict.fromkeys(lhs for lhs, _ in rules))}

        def nt(node: Any) -> str:
            return name if node == start else f"{name}_{ids[node]}"

        return [(nt(lhs), names[rhs[0]] if len(rhs) == 1 else f"{names[rhs[0]]} {nt(rhs[1])}") for lhs, rhs in rules]
    raise TooComplex(f"a pattern with a length bound: {why}")


def class_run(f: Any) -> tuple[str, int] | None:
    """(regex of one JSON-encoded character of C, m) when ``f``'s language (an interegular FSM over
    decoded characters) is ``C{m,}`` for one character class C: a chain of m states then one
    accepting loop, every step over the same characters (``^[a-z0-9_]+$``: m = 1). None otherwise.

    Such a pattern with a length bound is C{max(lo, m),hi}: counted by the plain string's chunk
    rules with C as the unit (``ScalarRules._chunk_rules``), one terminal up to EARLEY_CHUNK
    characters, instead of 16-character chunks over the pattern's states: o10012's
    ``[ -~]+`` with minLength 30 cut ~100k tokens at every chunk edge (17-45 ms a mask; a
    counted class: compile 12-18 ms -> 2-4 ms for ``^[a-z0-9_]+$`` with maxLength 64-300)."""
    f = minimal(f)
    live = live_states(f)
    s, m, symbols = f.initial, 0, None
    while s in live and m < len(f.states):  # (a longer chain revisits a state: a cycle, not C{m,})
        out = {sym: t for sym, t in f.map.get(s, {}).items() if t in live}
        if not out or len(set(out.values())) != 1 or (symbols is not None and set(out) != symbols):
            return None
        symbols, t = set(out), next(iter(out.values()))
        if t == s:
            if {x for x in f.finals if x in live} != {s}:
                return None  # (a shorter string accepted before the loop: not C{m,})
            one = fsm_and(FSM(alphabet=f.alphabet, states=f.states, initial=s, finals=frozenset([s]), map=f.map,
                              __no_validation__=True), ir_fsm(rep(ANY, 1, 1)))
            try:
                return _chunk_regex(one), m
            except _TooLong:
                return None
        s, m = t, m + 1
    return None


class _TooLong(TooComplex):
    """The chunk regexes of one chunk size are too large (MAX_CHUNK_NODES / MAX_CHUNK_CHARS each,
    MAX_CHUNK_TEXT together) or too many (MAX_CHUNK_PIECES): a shorter chunk is tried."""


def _chunk_regex(g: Any, suffix: str = "") -> str:
    try:
        rx = fsm_regex(g, enc_regex, MAX_CHUNK_NODES) + suffix
    except TooComplex as e:
        raise _TooLong(str(e)) from None
    if len(rx) > MAX_CHUNK_CHARS:
        raise _TooLong(f"a chunk's regex of {len(rx)} characters")
    return rx


def _written(rx: str) -> str:
    """The literal ``emit.py`` writes for the regex terminal ``rx`` (``/.../``), which the grammar
    reader hands ``terminal_parts`` beside the pattern it reads from it."""
    return f"/{lark_regex(rx)}/"


def _layers(f: Any, live: set, lo: int, hi: int | None, k: int) -> tuple[Any, list] | None:
    """(start node, [(node, (regex,) | (regex, node))]) with chunks of k characters; None when
    no string qualifies. The layers are laid out from state sets first (cheap), so a bound past
    MAX_PATTERN_RULES is refused before any regex is built."""
    kwin, finals = ir_fsm(rep(ANY, k, k)), [s for s in f.finals if s in live]
    reach: dict[Any, list] = {}
    regex_memo: dict[tuple, str | None] = {}

    def restricted(p: Any, fin: list) -> Any:
        return FSM(alphabet=f.alphabet, states=f.states, initial=p, finals=frozenset(fin), map=f.map,
                   __no_validation__=True)

    def succ(p: Any) -> list:
        """The live states that k characters can lead p to (a superset of those some string
        of ANY leads to: ``chunk`` decides)."""
        if p not in reach:
            layer = {p}
            for _ in range(k):
                layer = {t for s in layer for t in f.map.get(s, {}).values() if t in live}
            reach[p] = sorted(layer, key=repr)
        return reach[p]

    text = [0]

    def remember(key: tuple, g: Any, suffix: str = "") -> str | None:
        rx = None if g.empty() else _chunk_regex(g, suffix)
        if rx is not None:  # its DFA from g when the grammar reader asks, not from parsing rx again
            # (enc_set: the leaf _chunk_regex's enc_regex writes each character set with)
            seed_parts(_written(rx), lambda: encoded_dfa(g, enc_set, suffix.encode(), name="pattern chunk",
                                                            pattern=rx), len(g.states))
        text[0] += len(rx or "")
        if text[0] > MAX_CHUNK_TEXT:
            raise _TooLong(f"chunk regexes of more than {MAX_CHUNK_TEXT} characters")
        regex_memo[key] = rx
        return rx

    def chunk(p: Any, q: Any) -> str | None:
        if (p, q) in regex_memo:
            return regex_memo[(p, q)]
        return remember((p, q), fsm_and(restricted(p, [q]), kwin))

    def tail(p: Any, a: int, b: int) -> str | None:
        if (p, a, b) in regex_memo:
            return regex_memo[(p, a, b)]
        return remember((p, a, b), fsm_and(restricted(p, finals), ir_fsm(rep(ANY, a, b))), '"')

    # Layers: c whole chunks read. Bounded: c <= top, a chunk allowed while (c + 1) * k <= hi.
    # Unbounded: layer `top` stands for every c >= top (its tail range no longer depends on c).
    top = hi // k if hi is not None else -(-lo // k)

    def nxt(c: int) -> int | None:
        return c + 1 if c < top else (top if hi is None else None)

    def tail_range(c: int) -> tuple[int, int]:
        return max(0, lo - c * k), (k - 1 if hi is None else min(k - 1, hi - c * k))

    # forward, over state sets: the (c, p) a string can reach and their alternatives
    alts: dict[tuple[int, Any], list] = {}
    start = (0, f.initial)
    todo, n_rules = [start], 0
    while todo:
        c, p = node = todo.pop()
        if node in alts:
            continue
        a, b = tail_range(c)
        mine: list = [((p, a, b),)] if a <= b else []
        c2 = nxt(c)
        if c2 is not None:
            for q in succ(p):
                mine.append(((p, q), (c2, q)))
                if (c2, q) not in alts:
                    todo.append((c2, q))
        alts[node] = mine
        n_rules += len(mine)
        if n_rules > MAX_PATTERN_RULES:
            raise TooComplex(f"more than {MAX_PATTERN_RULES} rules")
    # the regexes of the pieces used (each a product and a state elimination: counted first);
    # a piece with no string drops its alternative
    if len({alt[0] for mine in alts.values() for alt in mine}) > MAX_CHUNK_PIECES:
        raise _TooLong(f"more than {MAX_CHUNK_PIECES} chunk regexes")
    for node, mine in alts.items():
        alts[node] = [(rx,) + alt[1:] for alt in mine
                      if (rx := (tail(*alt[0]) if len(alt) == 1 else chunk(*alt[0]))) is not None]
    # backward: keep the (c, p) that derive a string (a fixpoint: the unbounded layer loops)
    good: set = set()
    changed = True
    while changed:
        changed = False
        for node, mine in alts.items():
            if node not in good and any(len(alt) == 1 or alt[1] in good for alt in mine):
                good.add(node)
                changed = True
    if start not in good:
        return None
    order = sorted(good, key=lambda n: (n[0], repr(n[1])))
    return start, [(node, alt) for node in order for alt in alts[node] if len(alt) == 1 or alt[1] in good]
