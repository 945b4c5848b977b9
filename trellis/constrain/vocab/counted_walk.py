"""Vocabulary walks of a length-bounded terminal's positions, read off one counting walk.

Why: a JSON Schema string with a length bound (``minLength: 30``, ``maxLength: 64``, a pattern
``[0-9a-f]{32}``) is a terminal ``PREFIX (?:BODY){lo,hi} TAIL`` (``"`` ... ``"``), whose DFA is a
chain: one state per (characters read, place inside a character). Every position inside the value
is a new DFA state, so a new grammar paid a whole-vocabulary walk per position (1-5 ms on Gemma's
262k tokens for a printable class; 25 of them along one 30-character value). ``alike_patch``
patches a position from an earlier one where the two part only on the tokens holding a quote; a
fixed-length string's positions part on every character, and nothing was shared.

What: a state of the chain is (phase ``k`` of BODY's automaton, count ``c0`` of characters read).
A token walked from phase ``k`` through the *counting* automaton (``BODY*`` then TAIL, with the
count in the state, up to the longest token) ends in one of: inside BODY having started ``n``
characters, inside or at the end of TAIL after ``n`` characters, or crossing (the terminal ended
after its TAIL, the token goes on) after ``n`` characters. From ``(k, c0)`` the chain's walk keeps
exactly: the tokens inside BODY with ``c0 + n <= hi``, and the tokens in or past TAIL with
``lo <= c0 + n <= hi``. So one walk of the counting automaton from ``k`` (``_walkc.walk_ends``,
shared by every bound, every terminal with that BODY and TAIL, and every schema) and a threshold
per position give every position's walk: its packed tokens from per-count prefix unions, its
crossings a subset of the shared crossings (the same leftover set for every position, so the
walks over the leftovers after the closing quote are shared too).

Exactness: the split of the regex text into PREFIX, BODY, bounds and TAIL is only a guess; what
is used is the counting automaton's DFA (``_chain``), which is paired state by state with the
terminal's own DFA (``_walkc.pair_map``: a bisimulation, so each terminal state accepts exactly
what its paired chain state accepts). A terminal whose DFA does not pair, or a state not inside
BODY (the opening quote, the tail), is walked the ordinary way. ``tests/constrain/
test_counted_walk.py`` compares every position's walk with the full walk.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

import numpy as np

from trellis.constrain.automata.byte_dfa import ByteDFA
from trellis.constrain.automata.regex import regex_to_byte_dfa
from trellis.constrain.automata.regex_ir import JSON_UNIT, regex_atom
from trellis.constrain.vocab.dfa_shapes import content_digest
from trellis.constrain.vocab.rest_walk import RestSet, Walk, c_bool, c_table, leftovers, rows
from trellis.constrain.vocab.walk_cache import key_digest
from trellis.constrain.vocab.walks import TokenMatrix, walkc

# PREFIX, BODY, {lo} or {lo,hi}, TAIL as the JSON Schema translator writes a bounded string or a
# counted pattern (``\u0022`` is its quote); other shapes are not tried.
_FORM = re.compile(r'(?P<pre>\\u0022|"|)(?P<body>.+)\{(?P<lo>\d+)(?:,(?P<hi>\d+))?\}(?P<tail>\\u0022|")', re.S)
# False: every position walked the ordinary way (an A/B switch: ``benchmarks/ab_masks.py --switch counted``).
ENABLED = True
# Bounds beyond this are not tried (the chain DFA would be large; the translator chunks at 128).
MAX_HI = 4096
# Memo of counting walks and of the walks thresholded from them, by key (``_unit``, ``walk``):
# module-level so that bench_fresh.py restores it with the other shared memos. Bounded by entries
# (a threshold's entry holds a 32 KB packed row on Gemma).
MEMO: dict = {}
MEMO_MAX = 1024
_LOCK = threading.Lock()


@dataclass(eq=False)
class Chain:
    """A terminal's DFA paired with its counting form: ``where[s]`` = (phase, count) of the
    terminal's state ``s`` inside BODY, -1 elsewhere (as ``phase * (hi + 1) + count``)."""

    body: ByteDFA
    body_key: bytes
    tail: bytes
    lo: int
    hi: int
    where: np.ndarray  # [states] int64
    phase_of: np.ndarray  # [body states] phase index (-1: final)


@dataclass(eq=False)
class _Unit:
    """The counting walk from one phase over the vocabulary (module docstring)."""

    le: list  # le[m]: packed tokens inside BODY having started at most m characters
    tail_ids: np.ndarray  # tokens that end inside or at the end of TAIL
    tail_n: np.ndarray  # their counts
    cross: RestSet | None  # leftovers of every crossing token
    ci: np.ndarray  # crossing rests (indices into the vocabulary rest set), ascending
    cn: np.ndarray  # their counts
    inv: np.ndarray  # their leftovers' indices in ``cross``


def chain_of(dfa: ByteDFA, pattern: str) -> Chain | None:
    """The counting form of a terminal DFA compiled from ``pattern``, or None (memoised on the DFA,
    which is shared by every grammar with that regex)."""
    if not ENABLED:
        return None
    hit = dfa.__dict__.get("_chain", False)
    if hit is False:
        hit = dfa.__dict__["_chain"] = _analyse(dfa, pattern) if walkc is not None else None
    return hit


def _analyse(dfa: ByteDFA, pattern: str) -> Chain | None:
    m = _FORM.fullmatch(pattern)
    if m is None:
        return None
    lo = int(m.group("lo"))
    hi = lo if m.group("hi") is None else int(m.group("hi"))
    if hi < lo or hi < 1 or hi > MAX_HI:
        return None
    try:
        body = regex_to_byte_dfa(f"(?:{m.group('body')})", name="counted body")
    except Exception:  # a guessed split that is no regex (GrammarError, re.error...): not a chain
        return None
    pre = b'"' if m.group("pre") else b""
    tail = b'"'
    trans, final = body.trans, body.final
    if final[0] or (final[:, None] & (trans >= 0)).any() or trans[0, tail[0]] >= 0:
        return None  # BODY takes "", or goes on after a character, or starts like TAIL
    phase_of = _phases(body)
    k_trans, k_final, start = _chain(body, phase_of, pre, tail, lo, hi)
    got = walkc.pair_map(c_table(dfa.trans), c_bool(dfa.final), 0, c_table(k_trans), c_bool(k_final), start)
    if got is None:
        return None
    pair = np.frombuffer(got, dtype=np.int32).astype(np.int64)
    nph = int((~final).sum())
    body_lo, body_hi = len(pre), len(pre) + (hi + 1) * nph
    inside = (pair >= body_lo) & (pair < body_hi)
    rel = pair - body_lo
    where = np.where(inside, (rel % nph) * (hi + 1) + rel // nph, -1)
    return Chain(body, content_digest(body), tail, lo, hi, where, phase_of)


def _chain(body: ByteDFA, phase_of: np.ndarray, pre: bytes, tail: bytes, lo: int, hi: int
           ) -> tuple[np.ndarray, np.ndarray, int]:
    """The DFA of ``pre (?:BODY){lo,hi} tail``, states: the prefix's, then (count c, phase k) at
    ``len(pre) + c * nph + k``, then the tail's, then the accepting end (start: 0)."""
    nph = int((phase_of >= 0).sum())
    p, t = len(pre), len(tail)
    n = p + (hi + 1) * nph + t
    trans = np.full((n, 256), -1, dtype=np.int32)
    for i, b in enumerate(pre):
        trans[i, b] = i + 1
    inc, tph = _phase_rows(body, phase_of)
    _body_rows(trans[p:p + hi * nph].reshape(hi, nph, 256), inc, tph, p, nph)  # none at c = hi
    first_tail = p + (hi + 1) * nph
    for cc in range(lo, hi + 1):
        trans[p + cc * nph, tail[0]] = first_tail
    for i in range(1, t):
        trans[first_tail + i - 1, tail[i]] = first_tail + i
    final = np.zeros(n, dtype=bool)
    final[n - 1] = True
    return trans, final, 0


def _phase_rows(body: ByteDFA, phase_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per phase and byte: the count's increment (1: a character completes, 0: it goes on, -1: no
    way on) and the phase after it."""
    live = phase_of >= 0
    tr = body.trans[live]  # [nph, 256]
    ok = tr >= 0
    done = ok & body.final[np.maximum(tr, 0)]
    inc = np.where(ok, done.astype(np.int64), -1)
    tph = np.where(ok & ~done, phase_of[np.maximum(tr, 0)], 0)
    return inc, tph


def _body_rows(block: np.ndarray, inc: np.ndarray, tph: np.ndarray, base: int, nph: int) -> None:
    """Fill ``block`` ([counts, nph, 256], state ``base + c * nph + k`` at [c, k]) with the body's
    ways on (``_phase_rows``): count c's rows are count 0's shifted by ``c * nph``."""
    row0 = np.where(inc >= 0, base + inc * nph + tph, -1).astype(np.int32)  # [nph, 256]
    block[:] = row0
    block += (np.arange(len(block), dtype=np.int32) * nph)[:, None, None]
    block[:, row0 < 0] = -1


def _counting(body: ByteDFA, phase_of: np.ndarray, tail: bytes, cap: int) -> tuple[np.ndarray, int, int]:
    """The counting automaton of ``BODY* tail`` with counts 0..cap: body states ``c * nph + k``,
    tail states ``tbase + c * (len(tail) - 1) + i - 1``, the end after ``c`` characters
    ``dbase + c`` (no way on). Returns (trans, tbase, dbase)."""
    nph = int((phase_of >= 0).sum())
    t = len(tail)
    tbase = (cap + 1) * nph
    dbase = tbase + (cap + 1) * (t - 1)
    n = dbase + cap + 1
    trans = np.full((n, 256), -1, dtype=np.int32)
    inc, tph = _phase_rows(body, phase_of)
    block = trans[:tbase].reshape(cap + 1, nph, 256)
    _body_rows(block, inc, tph, 0, nph)
    block[cap, inc == 1] = -1  # no count past the cap (no token is that long)
    for cc in range(cap + 1):
        nxt = tbase + cc * (t - 1) if t > 1 else dbase + cc
        trans[cc * nph, tail[0]] = nxt
        for i in range(1, t):
            trans[tbase + cc * (t - 1) + i - 1, tail[i]] = tbase + cc * (t - 1) + i if i + 1 < t else dbase + cc
    return trans, tbase, dbase


def _unit(ch: Chain, k: int, tm: TokenMatrix) -> _Unit:
    pre = tm.__dict__.get("_counted_units", {}).get((ch.body_key, ch.tail, k))  # (``prebuild``)
    if pre is not None:
        return pre
    key = ("unit", id(tm), ch.body_key, ch.tail, k)
    hit = MEMO.get(key)
    if hit is not None:
        return hit[1]
    unit = _counting_walk(ch.body, ch.body_key, ch.phase_of, ch.tail, k, tm)
    _put(key, (tm, unit))
    return unit


def _phases(body: ByteDFA) -> np.ndarray:
    """[body states] the phase index of each state that is inside a character (-1: final)."""
    final = body.final
    phase_of = np.full(len(final), -1, dtype=np.int64)
    phase_of[~final] = np.arange(int((~final).sum()))
    return phase_of


def prebuild(tm: TokenMatrix) -> None:
    """The counting walk of a JSON string's character (``regex_ir.JSON_UNIT``, every
    ``minLength``/``maxLength`` string the schema translator writes) before its closing quote, from
    a character's start, built now and kept on the token matrix (``tables.prepare``: on disk with
    the other per-vocabulary tables), so that the first bounded string of a process does not pay
    it in a mask (~6-7 ms on Gemma: bench_fresh's sp_106, its position 18). Other bodies and
    phases are built at their first position (``_unit``)."""
    if walkc is None or not ENABLED:
        return
    units = tm.__dict__.setdefault("_counted_units", {})
    body = regex_to_byte_dfa(f"(?:{regex_atom(JSON_UNIT)})", name="counted body")
    key = (content_digest(body), b'"', 0)
    if key not in units:
        units[key] = _counting_walk(body, key[0], _phases(body), b'"', 0, tm)


def _counting_walk(body: ByteDFA, body_key: bytes, phase_of: np.ndarray, tail: bytes, k: int,
                   tm: TokenMatrix) -> _Unit:
    """The counting walk from phase ``k`` over ``tm``'s vocabulary (module docstring)."""
    cap = int(tm.mat_t.shape[0])
    trans, tbase, dbase = _counting(body, phase_of, tail, cap)
    nph = int((phase_of >= 0).sum())
    rs = RestSet.vocabulary(tm)
    n = len(rs)
    ends = np.full(n, -1, dtype=np.int32)
    stops = np.full(n, -1, dtype=np.int32)
    walkc.walk_ends(trans, k, rows(tm), tm.mat_t.shape[0], tm.mat_t.shape[1], rs.base, rs.length, rs.lo, ends, stops)
    e = ends
    # le[m]: one C pass sets each token in the row of its count, then each row is OR-ed into the
    # next (numpy's mask, divide, radix sort and 49 packs: ~6 of the JSON string unit's ~11 ms)
    le_rows = np.zeros((cap + 1, tm.words), dtype=np.int32)
    walkc.count_rows(e, rs.tid, nph, tbase, cap, le_rows)
    le_rows.setflags(write=False)  # shared by every walk read off it
    le = list(le_rows)
    in_tail = e >= tbase
    et = e[in_tail].astype(np.int64)
    tail_n = np.where(et >= dbase, et - dbase, (et - tbase) // max(len(tail) - 1, 1))
    # a crossing token died right after the end state (which has no way on), past its first byte
    ci = np.flatnonzero((e <= -2 - dbase) & (stops >= 1))
    cn = (-2 - e[ci]).astype(np.int64) - dbase
    cross, inv = None, np.zeros(0, dtype=np.int64)
    if len(ci):
        cross, inv = leftovers(tm, rs, ci, stops[ci].astype(np.int64), rs.distinct)
        cross.key = key_digest((("counted", body_key, tail, k, cap), "counted"))
    return _Unit(le, rs.tid[in_tail], tail_n, cross, ci, cn, inv)


def walk(ch: Chain, q: int, tm: TokenMatrix) -> tuple[np.ndarray, Walk] | None:
    """``vocab_walk.walk`` of the terminal's state ``q`` (no follow set: a chain's accepting state
    is a dead end, so the caller filters crossings by its followers), or None where ``q`` is not
    inside BODY. The first position asked for builds the counting walk (~6 ms for a JSON string's
    body on Gemma, ~1.5 ms for a hex class), once per process for every bound and schema. Waiting
    for a third position (each a 1-5 ms ordinary walk before it) made three slow masks of one
    (``ab_masks --carry``, waiting vs not: o10012 30.6 -> 14.7 ms, sp_120 62.0 -> 54.0, sp_106
    22.7 -> 25.5)."""
    w = int(ch.where[q])
    if w < 0:
        return None
    k, c0 = divmod(w, ch.hi + 1)
    cap = int(tm.mat_t.shape[0])
    r_lo, r_hi = max(ch.lo - c0, 0), min(ch.hi - c0, cap)
    key = ("walk", id(tm), ch.body_key, ch.tail, k, r_lo, r_hi)
    hit = MEMO.get(key)
    if hit is not None:
        return hit[1]
    u = _unit(ch, k, tm)
    packed = u.le[r_hi]
    sel = (u.tail_n >= r_lo) & (u.tail_n <= r_hi)
    if sel.any():
        packed = packed | tm.pack_ids(u.tail_ids[sel])
    keep = (u.cn >= r_lo) & (u.cn <= r_hi)
    empty = np.zeros(0, dtype=bool)
    if u.cross is None or not keep.any():
        none = np.zeros(0, dtype=np.int64)
        res = (packed, Walk(empty, None, none, none))
    else:
        res = (packed, Walk(empty, u.cross, u.ci[keep], u.inv[keep]))
    _put(key, (tm, res))
    return res


def _put(key: tuple, value: tuple) -> None:
    # (the token matrix is held in the value so that the id in the key is never reused)
    with _LOCK:
        if len(MEMO) >= MEMO_MAX:
            MEMO.clear()
        MEMO[key] = value
