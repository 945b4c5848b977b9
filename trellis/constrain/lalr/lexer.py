"""Terminals -> one byte DFA per contextual terminal set.

``LexerDFA`` is the subset-construction product of the byte DFAs of a set of terminals (the
terminals one LALR state accepts, plus the ``%ignore`` ones). Each state records which terminal a
lexeme ending there becomes (``accept``, resolved the way Lark's lexer resolves ties), which
terminals the lexeme can still become (``completable``), and which bytes can follow the lexeme
when it ends as a given terminal (``boundary``: bytes that cannot extend it — lexemes are greedy).
``globalize`` numbers the states of all lexers by their product components, so that identical
sub-automata share one global state (and one vocabulary walk, ``walks.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Sequence

import numpy as np

from trellis.constrain.automata.byte_dfa import ByteDFA
from trellis.constrain.automata.dfa_minimise import unique_rows

# ----------------------------------------------------------------------------- terminals


@dataclass(frozen=True)
class TerminalInfo:
    """What the lexer needs to know about one Lark terminal."""

    name: str
    priority: int
    is_string: bool  # Lark PatternStr (a literal) rather than PatternRE
    value: str  # the literal, or the regex source
    flags: frozenset[str]
    max_width: int
    dfa: ByteDFA


def lark_order(terms: Sequence[TerminalInfo], members: Sequence[int]) -> tuple[list[int], dict[int, list[int]]]:
    """Lark's BasicLexer order over ``members`` and its ``unless`` retyping table.

    Returns (alternation order with embedded literals removed, {regex terminal: literals it is
    retyped to when the lexeme equals them}) exactly as ``lark.lexer._create_unless`` builds them.
    """
    srt = sorted(members, key=lambda i: (-terms[i].priority, -terms[i].max_width, -len(terms[i].value),
                                         terms[i].name))
    embedded: set[int] = set()
    unless: dict[int, list[int]] = {}
    for r in srt:
        if terms[r].is_string:
            continue
        lst = []
        for s in srt:
            if not terms[s].is_string or terms[s].priority != terms[r].priority:
                continue
            if terms[r].dfa.matches(terms[s].value.encode("utf-8")):
                lst.append(s)
                if terms[s].flags <= terms[r].flags:
                    embedded.add(s)
        if lst:
            unless[r] = lst
    return [i for i in srt if i not in embedded], unless


@dataclass(eq=False)
class LexerDFA:
    """Product DFA of a terminal set; state 0 = no lexeme started (never accepting).

    ``accept[s]``: terminal a lexeme ending in ``s`` becomes (-1: none); ``completable[s]``: bitset
    of terminals reachable as ``accept`` from ``s``; ``boundary[s][T]``: 256-bit set of bytes that
    may follow a lexeme ending as ``T`` somewhere at or after ``s``; ``first``: bytes that start one.
    """

    members: tuple[int, ...]
    trans: np.ndarray  # [S, 256] int32
    accept: np.ndarray  # [S] int32
    completable: list[int]
    boundary: list[dict[int, int]]
    first: int
    # keys[s]: the product components of state s; equal keys in two lexers root identical
    # sub-automata, so their vocabulary walks are shared (``globalize``).
    keys: list[Hashable] = field(default_factory=list, repr=False)
    glob: np.ndarray | None = field(default=None, repr=False)  # [S] int32 global state ids
    rows: list[list[int]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.rows = self.trans.tolist()

    def __getstate__(self) -> dict:
        d = dict(self.__dict__)
        d.pop("rows", None)
        return d

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        self.rows = self.trans.tolist()


def _bits(row: np.ndarray) -> int:
    """[256] bool -> Python int bitset."""
    return int.from_bytes(np.packbits(row.astype(bool), bitorder="little").tobytes(), "little")


class TerminalCollision(ValueError):
    """Two same-priority regex terminals of one lexer match a common lexeme (Lark's strict mode
    refuses the grammar: which one the lexeme becomes would be arbitrary)."""

    def __init__(self, a: str, b: str, example: bytes) -> None:
        super().__init__(f"Collision between Terminals {a} and {b}: both match {example!r}")
        self.names = (a, b)
        self.example = example


Successors = dict  # product components -> (successor components per distinct byte column, [256] column index)


def build_lexer_dfa(terms: Sequence[TerminalInfo], members: Sequence[int], memo: Successors | None = None) -> LexerDFA:
    """Subset-construction product of the members' byte DFAs, with Lark's tie resolution.

    ``memo`` shares the successor computation between the lexers of one grammar: a product
    state's successors depend only on its components, and most states (inside strings, numbers,
    whitespace) occur in many lexers (json.lark: 417 lexer states, 123 distinct). Raises
    ``TerminalCollision`` where two regex terminals of equal priority are final in one state.
    """
    members = tuple(sorted(members))
    memo = {} if memo is None else memo
    alt, unless = lark_order(terms, members)
    rank = {t: i for i, t in enumerate(alt)}

    def resolve(finals: list[int]) -> int:
        cands = [t for t in finals if t in rank]
        if not cands:
            return -1
        best = min(cands, key=rank.__getitem__)
        for s in unless.get(best, ()):
            if s in finals:
                return s
        return best

    reps, cls_of = _term_byte_classes(terms, memo)
    start = tuple((t, 0) for t in members)
    ids: dict[object, int] = {("start",): 0}
    order: list[tuple[tuple[int, int], ...]] = [start]
    rows: list[np.ndarray] = []
    succ: list[list[int]] = []
    accept: list[int] = []
    collision: tuple[int, int, int] | None = None  # (state, a, b)
    i = 0
    while i < len(order):
        comps = order[i]
        i += 1
        finals = [t for t, s in comps if terms[t].dfa.final[s]]
        if len(finals) > 1 and collision is None:
            pair = _collision(terms, finals)
            collision = (i - 1, *pair) if pair else None
        accept.append(resolve(finals) if i > 1 else -1)
        if not comps:  # a parser state that accepts only $END and no %ignore terminals
            rows.append(np.full(256, -1, dtype=np.int32))
            succ.append([])
            continue
        hit = memo.get(comps)
        if hit is None:
            # Distinct columns of the components' rows, sorted (np.unique's order, which fixes the
            # state numbering); a dict of tuples is ~10x faster than np.unique(axis=0) here, and
            # one column per byte class of the grammar's terminals (not 256) another ~3x.
            cols = list(zip(*[terms[t].dfa.trans[s, reps].tolist() for t, s in comps]))
            uniq = sorted(set(cols))
            pos = {c: u for u, c in enumerate(uniq)}
            hit = memo[comps] = ([tuple((comps[k][0], c) for k, c in enumerate(col) if c >= 0) for col in uniq],
                                 np.array([pos[c] for c in cols], dtype=np.int64)[cls_of])
        nexts, inv = hit
        targets = np.empty(len(nexts), dtype=np.int32)
        for u, nxt in enumerate(nexts):
            if not nxt:
                targets[u] = -1
                continue
            j = ids.get(nxt)
            if j is None:
                j = ids[nxt] = len(order)
                order.append(nxt)
            targets[u] = j
        rows.append(targets[inv])
        succ.append(sorted(set(targets.tolist()) - {-1}))
    trans = np.stack(rows).astype(np.int32)
    if collision is not None:
        st, a, b = collision
        raise TerminalCollision(terms[a].name, terms[b].name, _shortest_path(trans, st))
    acc = np.array(accept, dtype=np.int32)
    n = len(order)
    dead = np.packbits(trans < 0, axis=1, bitorder="little").tobytes()  # 32 bytes per state
    dead_bytes = [int.from_bytes(dead[32 * s:32 * s + 32], "little") for s in range(n)]
    completable = [(1 << int(acc[s])) if acc[s] >= 0 else 0 for s in range(n)]
    boundary: list[dict[int, int]] = [{int(acc[s]): dead_bytes[s]} if acc[s] >= 0 else {} for s in range(n)]
    changed = True
    while changed:
        changed = False
        for s in range(n - 1, -1, -1):
            c, b = completable[s], boundary[s]
            for u in succ[s]:
                c |= completable[u]
                for t, bb in boundary[u].items():
                    old = b.get(t, 0)
                    if old | bb != old:
                        b[t] = old | bb
                        changed = True
            if c != completable[s]:
                completable[s] = c
                changed = True
    keys: list[Hashable] = [("start", order[0])] + order[1:]
    return LexerDFA(members, trans, acc, completable, boundary, _bits(trans[0] >= 0), keys)


_CLASSES = ("byte classes",)  # the memo's entry for _term_byte_classes (product keys are tuples of pairs)


def _term_byte_classes(terms: Sequence[TerminalInfo], memo: Successors) -> tuple[np.ndarray, np.ndarray]:
    """(one byte per class, [256] class of each byte): bytes that move every state of every
    terminal DFA alike, so a product state's successors need one column per class."""
    hit = memo.get(_CLASSES)
    if hit is None:
        hit = memo[_CLASSES] = unique_rows(np.concatenate([t.dfa.trans for t in terms], axis=0).T)  # [256, sum S]
    return hit


def _collision(terms: Sequence[TerminalInfo], finals: list[int]) -> tuple[int, int] | None:
    """Two final regex terminals of equal priority, if any (Lark's strict check compares exactly
    these pairs: literals are resolved by its ``unless`` rule, priorities by rank)."""
    rx = [t for t in finals if not terms[t].is_string]
    for k, a in enumerate(rx):
        for b in rx[k + 1:]:
            if terms[a].priority == terms[b].priority:
                return a, b
    return None


def _shortest_path(trans: np.ndarray, target: int) -> bytes:
    """The shortest byte string leading from state 0 to ``target`` (an example for errors)."""
    prev: dict[int, tuple[int, int]] = {0: (-1, -1)}
    frontier = [0]
    while frontier and target not in prev:
        nxt = []
        for s in frontier:
            for b in np.flatnonzero(trans[s] >= 0).tolist():
                u = int(trans[s, b])
                if u not in prev:
                    prev[u] = (s, b)
                    nxt.append(u)
        frontier = nxt
    out = bytearray()
    s = target
    while s in prev and prev[s][0] >= 0:
        s, b = prev[s]
        out.append(b)
    return bytes(reversed(out))


def globalize(lexers: Sequence[LexerDFA]) -> tuple[np.ndarray, np.ndarray]:
    """Number the states of all lexers by their keys; set each ``lex.glob``.

    Returns (gtrans [G, 256] int32, gfinal [G] bool). A state's transitions depend only on its
    product components, so one global table serves every lexer; ``accept >= 0`` exactly when some
    component is final (an embedded literal's regex is final on the same lexeme), so it is global
    too. On json.lark the 417 lexer states are 123 global ones, sql_select.lark 1671 -> 308.
    """
    gid: dict[Hashable, int] = {}
    for lex in lexers:
        lex.glob = np.array([gid.setdefault(k, len(gid)) for k in lex.keys], dtype=np.int32)
    gtrans = np.full((len(gid), 256), -1, dtype=np.int32)
    gfinal = np.zeros(len(gid), dtype=bool)
    for lex in lexers:
        g = lex.glob
        gtrans[g] = np.where(lex.trans >= 0, g[lex.trans], -1)
        gfinal[g] = lex.accept >= 0
    return gtrans, gfinal


def global_accept(lexers: Sequence[LexerDFA], n: int) -> np.ndarray:
    """[G] the terminal each global state's lexeme becomes (-1: none).

    It is the same in every lexer holding the state: resolution ranks the final components by
    Lark's key (priority, width, length, name) and ``unless`` retypes to a literal that is itself
    final, neither of which depends on the other members. Checked here all the same, because the
    crossing-token split is shared between lexers on this basis."""
    acc = np.full(n, -2, dtype=np.int32)
    for lex in lexers:
        seen = acc[lex.glob]
        if ((seen != -2) & (seen != lex.accept)).any():
            raise AssertionError("a global lexer state resolves to different terminals in two lexers")
        acc[lex.glob] = lex.accept
    return acc


