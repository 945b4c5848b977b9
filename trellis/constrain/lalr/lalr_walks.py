"""The LALR engine (``engine="lalr"``), vocabulary stage: XGrammar's context-independent split over
the global lexer states.

Per global lexer state the whole vocabulary is walked once (``walk_table``, with
``walks.walk_tokens``); the tokens that stay inside one lexeme are context-independent, the
crossing ones keep their rests (``Rests``) for the LALR stack to decide (``cfg.py``).
``state_table`` cuts a global walk down to one lexer's view and ``continuation`` walks the
crossing rests on from the lexers that can follow.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from trellis.constrain.lalr.lexer import LexerDFA
from trellis.constrain.vocab.walks import TokenMatrix, WalkMemo, dead_first_bits, walk_buckets, walk_live

@dataclass(eq=False)
class WalkTable:
    """The vocabulary walked from one global lexer state (the context-independent split).

    ``inside``: (global end state, word indices, words) — tokens that stay inside the current
    lexeme, as the nonzero words of their packed row (``TokenMatrix.sparse_ids``);
    ``first_dead``: packed tokens whose first byte cannot extend the lexeme; ``cross[T]``: tokens
    whose lexeme ends, complete, as terminal ``T`` before a later byte, with their rests (``Rests``,
    interned: equal sets of different states are one object, also on disk). Every other token is
    rejected in this state whatever the stack.
    """

    inside: list[tuple[int, np.ndarray, np.ndarray]]
    first_dead: np.ndarray | None
    cross: dict[int, "Rests"]

def _grouped(keys: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(key, indices into ``keys``) per distinct key, ascending, indices in their original order:
    one stable sort, not a pass over ``keys`` per key."""
    if not len(keys):
        return []
    small = keys.min() >= np.iinfo(np.int16).min and keys.max() <= np.iinfo(np.int16).max
    order = np.argsort(keys.astype(np.int16) if small else keys, kind="stable")  # int16: radix sort
    k = keys[order]
    cuts = [0, *(np.flatnonzero(k[1:] != k[:-1]) + 1).tolist(), len(k)]
    return [(int(k[a]), order[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]

def walk_table(gtrans: np.ndarray, gfinal: np.ndarray, gaccept: np.ndarray, g: int, tm: TokenMatrix,
               pool: dict[bytes, "Rests"], memo: WalkMemo | None = None) -> WalkTable:
    """Walk the vocabulary from global state ``g``; crossing tokens are split by terminal
    (``gaccept``: the terminal of each global state) and interned in ``pool``."""
    ids, end, bpos, bst, bbyte = walk_live(gtrans, g, tm, memo)
    ok = np.flatnonzero(end >= 0)
    inside = [(u, *tm.sparse_ids(ids[ok[ix]])) for u, ix in _grouped(end[ok])]
    first_dead = dead_first_bits(gtrans, g, tm) if gfinal[g] else None
    sel = np.flatnonzero(bpos >= 1)
    terms = gaccept[bst[sel]]
    keep = terms >= 0
    sel, terms = sel[keep], terms[keep]
    # Narrow dtypes: the crossing arrays are most of a table on disk (~137k entries per state
    # that can begin a whitespace lexeme on Gemma's vocabulary).
    return WalkTable(inside, first_dead, split_crossing(ids[sel].astype(np.int32), bpos[sel].astype(np.int16),
                                                        bbyte[sel], terms, pool))

def state_table(lex: LexerDFA, d: int, w: WalkTable, local: np.ndarray, vclass: Sequence[int]) -> StateTable:
    """Rename ``w`` (the walk of ``lex``'s state ``d``) into ``lex``; ``local``: [G] global -> local.
    End states of one viability class (``vclass``: local state -> class) are merged into one group."""
    by_class: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    for u, words, vals in w.inside:
        by_class.setdefault(vclass[int(local[u])], []).append((words, vals))
    inside = [(u, *(ps[0] if len(ps) == 1 else merge_sparse(ps))) for u, ps in by_class.items()]
    group0 = w.first_dead if lex.accept[d] >= 0 else None
    return StateTable(inside, group0, w.cross)

def merge_sparse(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The union of sparse packed rows (word indices, word values) as one, word indices distinct."""
    words = np.concatenate([p[0] for p in parts])
    vals = np.concatenate([p[1] for p in parts])
    order = np.argsort(words, kind="stable")
    words, vals = words[order], vals[order]
    heads = np.flatnonzero(np.concatenate([[True], words[1:] != words[:-1]]))
    return words[heads], np.bitwise_or.reduceat(vals, heads)

@dataclass(eq=False)
class Rests:
    """Boundary-crossing tokens, where their rests begin and each rest's first byte, so that a
    next lexer walks only the rests its start state can begin (after a whitespace lexeme that is
    ~137k Gemma tokens, of which a JSON value lexer can begin a few thousand).

    ``by_start`` holds the ``Continuation`` (global states) by the next lexer's whole start
    signature (the global states its start enters on the rests' first bytes): precomputed with
    the tables for every lexer that can follow, and pickled with them. ``after[lexer]`` is the
    same in that lexer's own state numbering, and ``walked`` each first-byte bucket's walk by the
    global state the bucket enters (lexers that begin some rests alike walk them once): both
    rebuilt on demand, never pickled.
    """

    ids: np.ndarray  # [C] int32
    pos: np.ndarray  # [C] int16
    first: np.ndarray  # [C] uint8
    after: dict[int, "Continuation"] = field(default_factory=dict)
    by_start: dict[bytes, "Continuation"] = field(default_factory=dict)
    walked: dict = field(default_factory=dict)  # (global state after the first byte, byte) -> walk slice
    _by_first: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    _firsts: np.ndarray | None = None

    def by_first(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rests in first-byte order, [257] bucket offsets, the distinct first bytes)."""
        if self._by_first is None:
            counts = np.bincount(self.first, minlength=256)
            lo = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            self._by_first = (np.argsort(self.first, kind="stable"), lo, np.flatnonzero(counts))
        return self._by_first

    def firsts(self) -> np.ndarray:
        """The distinct bytes the rests begin with."""
        if self._firsts is None:
            self._firsts = np.flatnonzero(np.bincount(self.first, minlength=256))
        return self._firsts

    def __getstate__(self) -> dict:
        return {"ids": self.ids, "pos": self.pos, "first": self.first, "by_start": dict(self.by_start),  # a copy: tables are pickled on a thread
                "_firsts": self.firsts()}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["ids"], state["pos"], state["first"], by_start=state["by_start"],  # type: ignore[misc]
                      _firsts=state["_firsts"])

def split_crossing(ids: np.ndarray, pos: np.ndarray, first: np.ndarray, terms: np.ndarray,
                   pool: dict[bytes, Rests]) -> dict[int, Rests]:
    """Crossing tokens (``ids``, rest offsets ``pos``, the rests' first bytes) by the terminal
    ``terms`` their lexeme becomes, each set interned in ``pool``."""
    if not len(terms):
        return {}
    counts = np.bincount(terms)  # few distinct terminals, one dominant (whitespace): no sort
    out = {}
    for t in np.flatnonzero(counts).tolist():
        if counts[t] == len(terms):
            out[t] = _intern(Rests(ids, pos, first), pool)
            break
        k = np.flatnonzero(terms == t)
        out[t] = _intern(Rests(ids[k], pos[k], first[k]), pool)
    return out

def _intern(r: Rests, pool: dict[bytes, Rests]) -> Rests:
    """An equal ``Rests`` already in ``pool``, else ``r`` (then its continuations are shared).
    Different global states often cross with the same tokens at the same bytes: a whitespace
    lexeme begun in each lexer's start state or continued inside one is crossed by the same ~137k
    Gemma tokens, whose rests would otherwise be walked once per state."""
    # A sample of every 64th entry keys the pool (hashing all ~137k was ~1 ms per state); equality
    # is then checked in full.
    key = hashlib.sha1(r.ids[::64].tobytes() + r.pos[::64].tobytes() + len(r.ids).to_bytes(8, "little")).digest()
    hit = pool.get(key)
    if hit is None or not (np.array_equal(hit.ids, r.ids) and np.array_equal(hit.pos, r.pos)):
        hit = pool[key] = r
    return hit

@dataclass(eq=False)
class StateTable:
    """A ``WalkTable`` seen from one lexer state: local end states, and crossing tokens grouped
    by the terminal their lexeme becomes in this lexer.

    ``inside``: (end state, sparse packed tokens); ``group0``: packed tokens whose first byte ends the
    current (complete) lexeme; ``cross[T]``: the tokens whose lexeme ends as ``T`` before a later
    byte, with their rests (shared by every lexer state of the same global state).
    """

    inside: list[tuple[int, np.ndarray, np.ndarray]]
    group0: np.ndarray | None
    cross: dict[int, Rests]

@dataclass(eq=False)
class Continuation:
    """Rests of boundary-crossing tokens walked from a lexer's start state.

    ``groups``: (end state, token ids) of rests that end inside that next lexeme; ``cross[T]``:
    the rests whose lexeme ends again, as ``T`` (with the rests after that boundary). The others
    are rejected.
    """

    groups: list[tuple[int, np.ndarray]]
    cross: dict[int, Rests]
    # Lexer-local views only (``CFGConstraint._continuation``): per group, its ids packed into one
    # bitset row where they are many (> words/2), else None. OR-ing a 32 KiB row costs ~3 us; packing
    # ~90k ids (the tokens " name" after a space, python_call.lark) was ~0.6 ms of every such mask.
    packed: list[np.ndarray | None] | None = None

def start_successors(lex: LexerDFA) -> np.ndarray:
    """[256] int64: the global state ``lex``'s start state enters on each byte (-1: none)."""
    row = lex.trans[0]
    return np.where(row >= 0, lex.glob[np.maximum(row, 0)], -1).astype(np.int64)

def continuation(rests: Rests, succ: np.ndarray, tm: TokenMatrix, gt256: np.ndarray,
                 gaccept: np.ndarray, pool: dict[bytes, Rests]) -> Continuation:
    """Walk ``tokens[ids[i]][pos[i]:]`` from a next lexer's start state, in global lexer states:
    ``succ`` is its ``start_successors``, ``gt256`` ``scaled(gtrans)``, ``gaccept`` the terminal
    of each global state (``global_accept``). One numpy pass over the rests whose first byte the
    lexer can begin with (the others die at once), by first-byte bucket: a bucket walked for
    another lexer that enters the same global state on that byte is reused (``Rests.walked``).
    ``groups`` end states are global; the rests that cross again are interned in ``pool``.

    The rests are read straight from the token matrix (byte ``pos + j`` of each token's column):
    joining ~100k rests in Python made a first visit cost 0.3-0.6 s."""
    order, lo, firsts = rests.by_first()
    bs = firsts[succ[firsts] >= 0]
    if not len(bs):
        return Continuation([], {})

    def items(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # positions in ``order``
        k = order[p]
        ids, pos = rests.ids[k], rests.pos[k].astype(np.int64)
        return k, tm.lengths[ids] - pos, pos * tm.mat_t.shape[1] + tm.rank[ids]

    k, end, bpos, bst, bbyte = walk_buckets(gt256, succ[bs], bs, lo, items, tm, rests.walked)
    ids, pos = rests.ids[k], rests.pos[k].astype(np.int64)
    ok = np.flatnonzero(end >= 0)
    groups = [(u, ids[ok[ix]]) for u, ix in _grouped(end[ok])]
    again = bpos >= 1
    again[again] = gaccept[bst[again]] >= 0
    terms = gaccept[bst[again]]
    ids2, pos2, first2 = ids[again], (pos[again] + bpos[again]).astype(np.int16), bbyte[again]
    cross = {t: _intern(Rests(ids2[ix], pos2[ix], first2[ix]), pool) for t, ix in _grouped(terms)}
    return Continuation(groups, cross)
