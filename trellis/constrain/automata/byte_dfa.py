"""Byte DFAs, the automaton type of every regex and terminal, and their algebra.

Stage: the ``ByteDFA`` type (trimmed: every state can still reach an accepting state), literal
chains and the literal left from a state (``literal_at``), byte classes, trimming, and the products built on
finished DFAs: ``restrict_first_char``, ``difference`` (by a key trie or the general product)
and ``intersects``. Patterns are turned into DFAs by ``regex.py``; determinising and minimising
is ``dfa_minimise.py``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from trellis.constrain.errors import GrammarError
from trellis.constrain.automata.utf8 import utf8_dawg

# The C kernel of ``_minus_words`` (``_dfac.c``, built by setup.py beside ``dfa_minimise``'s), or None
# (``TRELLIS_DFA_KERNEL=numpy`` forces Python, as it does there).
try:
    from trellis.constrain.automata import _dfac
except ImportError:  # pragma: no cover - depends on the install
    _dfac = None
if os.environ.get("TRELLIS_DFA_KERNEL", "").lower() == "numpy":
    _dfac = None


@dataclass(frozen=True, eq=False)
class ByteDFA:
    """A trimmed byte DFA: ``trans`` int32 [S, 256] (-1 = dead), ``final`` bool [S]; start state 0.

    Every state can reach an accepting state (dead states are pruned at construction).
    """

    trans: np.ndarray  # [S, 256] int32
    final: np.ndarray  # [S] bool
    # The text of a ``literal_dfa`` (its only string; state q is ``literal[q:]`` from the end),
    # None for every other DFA: lets the literal's users (``literal_at``, the Earley
    # scan tables, ``intersects``) skip scanning the [S, 256] table of a JSON key.
    literal: bytes | None = None
    # For a DFA that ``difference`` cut from ``base`` by a trie of words (a schema object's "other
    # keys" regex minus its declared keys): how it sits inside ``base``, as the construction knows
    # it, so ``cut_walk.Simulation`` need not rediscover it (None for every other DFA).
    cut: "Cut | None" = None

    @property
    def num_states(self) -> int:
        return int(self.trans.shape[0])

    def matches(self, data: bytes) -> bool:
        s = 0
        for b in data:
            s = int(self.trans[s, b])
            if s < 0:
                return False
        return bool(self.final[s])


@dataclass(frozen=True, eq=False)
class Cut:
    """How a DFA cut from ``base`` by a trie of words (``_minus_words``) sits inside it: state
    ``s`` simulates ``base`` state ``origin[s]`` (int64 [S]); the states from ``inner`` on are
    ``base``'s own (copies entered on a byte that leaves the trie: no word is reachable from
    them), those before it the product's, numbered parent before child (a tree)."""

    base: "ByteDFA"
    origin: np.ndarray
    inner: int


# Literal DFAs by their text, shared by every grammar (read-only arrays, as regex.DFA_MEMO's;
# what is derived from a DFA is cached on the object): JSON Schema grammars repeat their
# punctuation and many keys ("name", "type", ...), and each chain was a [n + 1, 256] table built
# again. Bounded by the tables' bytes (~1 KB a byte of text: a long enum constant is a big table).
LITERAL_MEMO: dict[bytes, "ByteDFA"] = {}
LITERAL_MEMO_BYTES = 64 * 2**20
_literal_bytes = 0


def literal_dfa(data: bytes) -> ByteDFA:
    """The chain DFA matching exactly ``data`` (non-empty); what interegular would build for
    ``re.escape(text)``, without the ~2 ms of parsing and determinising per literal. Memoised
    (``LITERAL_MEMO``): equal texts give one object, its arrays read-only."""
    global _literal_bytes
    hit = LITERAL_MEMO.get(data)
    if hit is None:
        hit = _literal_dfa(data)
        hit.trans.setflags(write=False)  # shared from now on
        hit.final.setflags(write=False)
        size = hit.trans.nbytes
        if _literal_bytes + size > LITERAL_MEMO_BYTES:
            LITERAL_MEMO.clear()
            _literal_bytes = 0
        LITERAL_MEMO[bytes(data)] = hit
        _literal_bytes += size
    return hit


def _literal_dfa(data: bytes) -> ByteDFA:
    n = len(data)
    trans = np.full((n + 1, 256), -1, dtype=np.int32)
    trans[np.arange(n), np.frombuffer(data, dtype=np.uint8)] = np.arange(1, n + 1, dtype=np.int32)
    final = np.zeros(n + 1, dtype=bool)
    final[n] = True
    return ByteDFA(trans, final, literal=bytes(data))


def trim(trans: np.ndarray, final: np.ndarray, *, name: str = "regex", pattern: str = "",
         allow_empty: bool = True) -> ByteDFA:
    """Remove states that cannot reach an accepting state; keep state 0 as start."""
    n = trans.shape[0]
    live = final.copy()
    while True:
        succ_live = np.zeros(n, dtype=bool)
        valid = trans >= 0
        succ_live = (valid & live[np.where(valid, trans, 0)]).any(axis=1)
        new = live | succ_live
        if (new == live).all():
            break
        live = new
    if not live[0]:
        raise GrammarError(f"{name}: the regex /{pattern}/ matches nothing")
    if final[0] and not allow_empty:
        raise GrammarError(f"{name}: the regex /{pattern}/ matches the empty string")
    keep = np.flatnonzero(live)  # 0 stays first
    remap = np.full(n, -1, dtype=np.int32)
    remap[keep] = np.arange(len(keep), dtype=np.int32)
    t = trans[keep]
    t = np.where(t >= 0, remap[np.where(t >= 0, t, 0)], -1).astype(np.int32)
    return ByteDFA(np.ascontiguousarray(t), final[keep].copy())


def restrict_first_char(dfa: ByteDFA, allowed: tuple) -> ByteDFA | None:
    """The DFA of the strings of ``dfa`` whose first character is in ``allowed`` (code point
    ranges), or None when there is none: a product of ``dfa`` with the UTF-8 automaton of
    ``allowed`` over the first character, then ``dfa`` itself."""
    nodes = utf8_dawg(tuple(allowed))
    n = dfa.num_states
    ids: dict[tuple[int, int], int] = {(0, 0): n}  # (dawg node, dfa state) mid first character
    order = [(0, 0)]
    rows: list[np.ndarray] = []
    i = 0
    while i < len(order):
        node, q = order[i]
        i += 1
        row = np.full(256, -1, dtype=np.int32)
        src = dfa.trans[q]
        for lo, hi, child in nodes[node]:
            for b in range(lo, hi + 1):
                q2 = int(src[b])
                if q2 < 0:
                    continue
                if child < 0:
                    row[b] = q2
                else:
                    key = (child, q2)
                    j = ids.get(key)
                    if j is None:
                        j = ids[key] = n + len(order)
                        order.append(key)
                    row[b] = j
        rows.append(row)
    # states: dfa's own 0..n-1, then the pairs; the first pair becomes the start
    trans = np.vstack([dfa.trans, np.stack(rows)])
    final = np.concatenate([dfa.final, np.zeros(len(rows), dtype=bool)])
    perm = np.concatenate([[n], np.arange(n), np.arange(n + 1, n + len(rows))])
    inv = np.empty_like(perm)
    inv[perm] = np.arange(len(perm))
    t = trans[perm]
    t = np.where(t >= 0, inv[np.maximum(t, 0)], -1).astype(np.int32)
    f = final[perm]
    try:
        return trim(t, f, name="guarded terminal")
    except GrammarError:
        return None


def one_byte_ending(dfa: ByteDFA, allowed: tuple) -> ByteDFA | None:
    """The DFA of the one-character strings of ``dfa`` whose character is in ``allowed`` (ASCII
    ranges only), or None when there is none: a scan that must read the document's last character
    (``FollowGuard.last``)."""
    row = np.full(256, -1, dtype=np.int32)
    for lo, hi in allowed:
        if hi >= 0x80:
            raise ValueError("one_byte_ending takes ASCII characters")
        for b in range(lo, hi + 1):
            q = int(dfa.trans[0, b])
            if q >= 0 and dfa.final[q]:
                row[b] = 1
    if not (row >= 0).any():
        return None
    return ByteDFA(np.stack([row, np.full(256, -1, dtype=np.int32)]), np.array([False, True]))


def _chain_words(dfa: ByteDFA) -> list[bytes] | None:
    """The strings of a DFA that is one chain from state 0 (a literal: no branch, no loop), by
    ``literal_at``; None otherwise."""
    lit = literal_at(dfa, 0)
    if lit is None:
        return None
    return ([b""] if dfa.final[0] else []) + [lit.text[:j] for j in lit.ends]


def word_trie(words: list[bytes]) -> tuple[list[dict[int, int]], list[bool]]:
    """The trie of ``words``: each node's children by byte (node 0 the root, a child numbered
    after its parent) and whether a word ends at it."""
    children: list[dict[int, int]] = [{}]
    end = [False]
    for w in words:
        node = 0
        for b in w:
            nxt = children[node].get(b)
            if nxt is None:
                nxt = children[node][b] = len(children)
                children.append({})
                end.append(False)
            node = nxt
        end[node] = True
    return children, end


def _minus_words(a: ByteDFA, words: list[bytes]) -> ByteDFA | None:
    """L(a) minus a finite set of strings: the product of ``a`` with the words' trie, where a
    state that has left the trie is ``a``'s own state; trimmed (states that cannot reach
    acceptance dropped) and restricted to the states reachable from the start. A schema object's
    "other keys" regex minus its declared keys: the general product (one ``np.unique`` per state
    over k+1 DFAs) took ~10 ms per object with a few dozen keys.

    The product is a tree (one ``a`` state per trie node: the path to it is fixed), so liveness
    is one pass over it in reverse breadth-first order and reachability one search over ``a``'s
    successor sets, in Python on ``a``'s rows as lists (cached on ``a``): the 28 cuts met along
    50 median maskbench schemas' documents, 547 -> 160 us each with ``trim`` (numpy fixpoints
    before; timeit, same outputs). In C where ``_dfac`` is built (``minus_words``: the same
    DFA, state for state; tests/constrain/test_dfa_kernel.py)."""
    children, end = word_trie(words)
    if _dfac is not None:
        return _minus_words_c(a, children, end)
    rows_a, succ_a, live_a = _row_lists(a)
    fin_a = a.final.tolist()
    ids = {(0, 0): 0}
    order = [(0, 0)]
    kids: list[list[tuple[int, int]]] = []  # (byte, product child) of each product state
    i = 0
    while i < len(order):
        qa, node = order[i]
        i += 1
        mine = []
        row = rows_a[qa]
        for b, child in children[node].items():
            q2 = row[b]
            if q2 >= 0:
                j = ids.get((q2, child))
                if j is None:
                    j = ids[(q2, child)] = len(order)
                    order.append((q2, child))
                mine.append((b, j))
        kids.append(mine)
    p = len(order)
    # a's states entered from the product (a valid byte the trie does not take), then closed
    exits: list[list[int]] = []
    seen_a: set[int] = set()
    for qa, node in order:
        ch = children[node]
        count = succ_a[qa]  # target -> how many bytes lead there
        if ch:
            count = dict(count)
            row = rows_a[qa]
            for b in ch:
                if row[b] >= 0:
                    count[row[b]] -= 1
        out = [q2 for q2, c in count.items() if c]
        exits.append(out)
        seen_a.update(out)
    agenda = list(seen_a)
    while agenda:
        for q2 in succ_a[agenda.pop()]:
            if q2 not in seen_a:
                seen_a.add(q2)
                agenda.append(q2)
    finals = [bool(fin_a[qa]) and not end[node] for qa, node in order]
    live = [False] * p
    for k in range(p - 1, -1, -1):  # children come after their parent
        live[k] = finals[k] or any(live_a[q2] for q2 in exits[k]) or any(live[j] for _, j in kids[k])
    if not live[0]:
        return None
    # unreachable product states cannot exist (each was found from the start); keep the live ones
    n = len(fin_a)
    keep = [k for k in range(p) if live[k]] + [p + q for q in sorted(seen_a) if live_a[q]]
    remap = np.full(p + n, -1, dtype=np.int32)
    remap[np.array(keep)] = np.arange(len(keep), dtype=np.int32)
    shifted = np.where(a.trans >= 0, a.trans + p, -1).astype(np.int32)
    rows = shifted[[qa for qa, _ in order]]
    for k, mine in enumerate(kids):
        for b, j in mine:
            rows[k, b] = j
    trans = np.concatenate([rows, shifted])[keep]
    t = np.where(trans >= 0, remap[np.maximum(trans, 0)], -1).astype(np.int32)
    f = np.concatenate([np.array(finals, dtype=bool), a.final])[keep]
    inner = sum(live)  # the kept product states come first, then a's own (numbered p + q in keep)
    origin = np.array([qa for (qa, _), ok in zip(order, live) if ok] + [x - p for x in keep[inner:]], dtype=np.int64)
    return ByteDFA(np.ascontiguousarray(t), f, cut=Cut(a, origin, inner))


def _minus_words_c(a: ByteDFA, children: list[dict[int, int]], end: list[bool]) -> ByteDFA | None:
    """``_minus_words`` by ``_dfac.minus_words`` (the trie flattened: each node's children in order)."""
    live = a.__dict__.get("_live_bytes")
    if live is None:
        live = a.__dict__["_live_bytes"] = bytes(_row_lists(a)[2])
    lo, kb, kn = [0], [], []
    for ch in children:
        kb += ch.keys()
        kn += ch.values()
        lo.append(len(kb))
    out = _dfac.minus_words(np.ascontiguousarray(a.trans, dtype=np.int32), np.ascontiguousarray(a.final, dtype=bool),
                            live, np.array(lo, dtype=np.int32), np.array(kb, dtype=np.int32),
                            np.array(kn, dtype=np.int32), bytes(end))
    if out is None:
        return None
    trans, final, origin, inner = out
    k = len(final)
    return ByteDFA(np.frombuffer(trans, dtype=np.int32).reshape(k, 256), np.frombuffer(final, dtype=bool),
                   cut=Cut(a, np.frombuffer(origin, dtype=np.int64).copy(), inner))


def _row_lists(a: ByteDFA) -> tuple[list[list[int]], list[dict[int, int]], list[bool]]:
    """``a``'s rows as lists, each state's successors (with how many bytes lead to each) and
    whether it can reach acceptance (cached on ``a``: one "other keys" DFA is cut by every
    object's keys)."""
    hit = a.__dict__.get("_row_lists")
    if hit is None:
        rows = a.trans.tolist()
        succ = []
        for r in rows:
            c: dict[int, int] = {}
            for q in r:
                if q >= 0:
                    c[q] = c.get(q, 0) + 1
            succ.append(c)
        live = a.final.tolist()
        changed = True
        while changed:
            changed = False
            for q, nx in enumerate(succ):
                if not live[q] and any(live[x] for x in nx):
                    live[q] = changed = True
        hit = a.__dict__["_row_lists"] = (rows, succ, live)
    return hit


def difference(a: ByteDFA, subtract: list[ByteDFA], *, name: str = "terminal") -> ByteDFA | None:
    """The DFA of L(a) minus the union of L(b) for b in ``subtract`` (product construction over
    the bytes ``a`` takes, trimmed), or None when nothing is left."""
    words = [_chain_words(b) for b in subtract]
    if all(w is not None for w in words):
        return _minus_words(a, [x for w in words for x in w])  # type: ignore[union-attr]
    k = len(subtract)
    start = (0,) * (k + 1)
    ids: dict[tuple[int, ...], int] = {start: 0}
    order = [start]
    rows: list[np.ndarray] = []
    finals: list[bool] = []
    dead = np.full(256, -1, dtype=np.int64)
    i = 0
    while i < len(order):
        st = order[i]
        i += 1
        qa = st[0]
        ra = a.trans[qa].astype(np.int64)
        cols = np.flatnonzero(ra >= 0)
        row = np.full(256, -1, dtype=np.int32)
        if len(cols):
            combo = np.stack([ra] + [subtract[j].trans[q].astype(np.int64) if q >= 0 else dead
                                     for j, q in enumerate(st[1:])])[:, cols]
            uniq, inv = np.unique(combo, axis=1, return_inverse=True)
            targets = np.empty(uniq.shape[1], dtype=np.int32)
            for c in range(uniq.shape[1]):
                key = tuple(int(x) for x in uniq[:, c])
                t = ids.get(key)
                if t is None:
                    t = ids[key] = len(order)
                    order.append(key)
                targets[c] = t
            row[cols] = targets[inv.reshape(-1)]
        rows.append(row)
        finals.append(bool(a.final[qa]) and not any(q >= 0 and bool(subtract[j].final[q])
                                                     for j, q in enumerate(st[1:])))
    trans, final = np.stack(rows), np.array(finals, dtype=bool)
    if not final.any():
        return None
    return trim(trans, final, name=name)


def intersects(a: ByteDFA, b: ByteDFA) -> bool:
    """Whether some string is in both languages (a search over the product's reachable pairs;
    a literal's one string is run through the other DFA)."""
    if b.literal is not None or a.literal is not None:
        lit, other = (b.literal, a) if b.literal is not None else (a.literal, b)
        return other.matches(lit)  # type: ignore[arg-type]
    seen = {(0, 0)}
    todo = [(0, 0)]
    while todo:
        qa, qb = todo.pop()
        if a.final[qa] and b.final[qb]:
            return True
        ra, rb = a.trans[qa], b.trans[qb]
        both = np.flatnonzero((ra >= 0) & (rb >= 0))
        for pair in set(zip(ra[both].tolist(), rb[both].tolist())):
            if pair not in seen:
                seen.add(pair)
                todo.append(pair)
    return False


# ----------------------------------------------------------------------------- literals left in a DFA


# Literals longer than this are walked by numpy (a chain that long is a padded or generated
# terminal, not a keyword; bisecting each of its prefixes would cost more than the walk).
MAX_LITERAL = 256

class Literal(NamedTuple):
    """The only path left from a DFA state: its bytes and the lengths after which it is final.

    A named tuple, not a frozen dataclass: walk keys hold them (a case-insensitive keyword's ~30
    paths, ``literal_walk.words_at``) and are hashed at every memo lookup, a dataclass's
    ``__hash__`` in Python each time (sql_select.lark: 54k calls, ~3% of its fresh masks, cProfile)."""

    text: bytes
    ends: tuple[int, ...]  # 1 <= j <= len(text), ascending

_CHAINS: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, dict]] = {}

def literal_at(dfa: ByteDFA, q: int) -> Literal | None:
    """The literal from state ``q`` of ``dfa``, or None when some reachable state branches or
    loops (memoised per DFA and state)."""
    if dfa.literal is not None:  # a literal_dfa: state q is the rest of its text (~1 vs ~10 us)
        rest = dfa.literal[q:]
        return Literal(rest, (len(rest),)) if 0 < len(rest) <= MAX_LITERAL else None
    trans, deg, byte, memo = chain_tables(dfa)
    if q in memo:
        return memo[q]
    out = bytearray()
    ends: list[int] = []
    s = q
    lit: Literal | None = None
    while len(out) <= MAX_LITERAL:
        d = int(deg[s])
        if d == 0:
            lit = Literal(bytes(out), tuple(ends))
            break
        if d > 1:
            break
        b = int(byte[s])
        out.append(b)
        s = int(trans[s, b])
        if dfa.final[s]:
            ends.append(len(out))
    if lit is not None and not lit.text:
        lit = None  # a final state with no way on: nothing to walk
    memo[q] = lit
    return lit

def chain_tables(dfa: ByteDFA) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """(trans, out-degree per state, the one outgoing byte where the degree is 1, memo) of a DFA,
    cached by its table's identity."""
    trans = dfa.trans
    hit = _CHAINS.get(id(trans))
    if hit is None or hit[0] is not trans:
        live = trans >= 0
        if len(_CHAINS) >= 4096:
            _CHAINS.clear()
        hit = _CHAINS[id(trans)] = (trans, live.sum(axis=1), live.argmax(axis=1), {})
    return hit
