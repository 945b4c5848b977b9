"""Canonical shapes of sub-automata: what a vocabulary walk from one DFA state depends on.

``canonical(dfa, q)`` numbers the states reachable from ``q`` breadth-first (by byte) and returns
their tables as bytes (alike byte columns once: ``_bfs_shape``), so equal shapes of different
terminals (a schema's string fields, one string DFA under several names) share one walk (``scannerless.EarleyConstraint._shape``,
``walk_cache.py``); a literal chain or a few chains are keyed by their text instead, and a
sub-automaton over ``CANON_MAX`` states by a digest of its DFA's tables.

A state is keyed as the first state of its class of states alike up to the walk's depth: a walk
reads no token further than its length, so two states that keep alive and accept the same byte
strings of up to the longest token's length walk alike, whatever lies deeper. In a length-bounded
string (``maxLength: 128``: ~1,700 states) every position with 48 or more characters left is one
class on Gemma's vocabulary (48-byte tokens), so its walks are made once instead of once per
position (sp_120's 128-character field: ~0.85 ms a position before).
"""

from __future__ import annotations

import hashlib
import struct
from typing import Hashable

import numpy as np

from trellis.constrain.automata.byte_dfa import ByteDFA
from trellis.constrain.automata.dfa_minimise import dfac
from trellis.constrain.automata.byte_dfa import literal_at
from trellis.constrain.vocab.literal_walk import words_at
from trellis.constrain.vocab.rest_walk import c_bool, c_table

CANON_MAX = 256
# Walk a state as the first state of its class up to the walk's depth (``depth_representative``);
# False: as itself (``benchmarks/ab_masks.py --switch depth``).
DEPTH_CLASSES = True


def canonical(dfa: ByteDFA, q: int, depth: int | None = None) -> tuple[Hashable, bool]:
    """The sub-automaton of ``dfa`` reachable from ``q``, states numbered in breadth-first order
    of first appearance (by byte), as bytes; ``("dfa", content digest, q)`` when it has over
    ``CANON_MAX`` states (then the walk is shared only by DFAs with the very same tables). With
    ``depth`` (the longest byte string a walk reads), that of the first state of ``q``'s class of
    states that behave alike on every byte string of up to ``depth`` bytes (``depth_classes``):
    the walk is the same from each. With it, whether its accepting states are all dead ends
    (known only for the bytes form; within ``depth`` bytes, the same for the whole class)."""
    lit = literal_at(dfa, q)
    words = None if lit is not None else words_at(dfa, q)  # a few chains: a string enum's values
    if lit is not None or words is not None:  # the chains themselves (0.2-0.5 ms -> ~1-10 us)
        return (("lit", lit.text, lit.ends) if lit is not None else ("lit", words)), False
    if depth is not None:
        q = depth_representative(dfa, q, depth)
    # Every schema builds its own DFA objects for the same terminals (a string, a number): the
    # shape is memoised by DFA content, not identity (~45 us a state otherwise; fresh masks over
    # 40 maskbench schemas 166 -> 152 ms, commit 79da505). The digest lives on the DFA object.
    digest = digest_of(dfa)
    key = (digest, q)
    hit = _SHAPES.get(key)
    if hit is None:
        global _SHAPES_BYTES
        canon = _bfs_shape(dfa, q)
        hit = (canon, _ends_dead(canon)) if canon is not None else (("dfa", digest, q), False)
        size = len(canon) + 100 if canon is not None else 200
        if _SHAPES_BYTES + size > SHAPES_CACHE_BYTES:
            _SHAPES.clear()
            _SHAPES_BYTES = 0
        _SHAPES[key] = hit
        _SHAPES_BYTES += size
    return hit


def digest_of(dfa: ByteDFA) -> bytes:
    """``content_digest(dfa)``, kept on the DFA object."""
    digest = dfa.__dict__.get("_digest")
    if digest is None:
        digest = dfa.__dict__["_digest"] = content_digest(dfa)
    return digest


def content_digest(dfa: ByteDFA) -> bytes:
    """A digest of ``dfa``'s tables, taken over their alike byte columns kept once
    (``column_classes``: the same tables exactly, ~1/13 of the bytes for a JSON string's 20 byte
    classes; a 1,666-state length-bounded string's 1.7 MB took ~2.3 ms to hash whole)."""
    cmap, table = column_classes(dfa.trans)
    h = hashlib.blake2b(b"columns", digest_size=16)
    for part in (cmap, table, np.ascontiguousarray(dfa.final, np.bool_).tobytes()):
        h.update(part)
    return h.digest()


def column_classes(trans: np.ndarray) -> tuple[bytes, bytes]:
    """(classmap [256] uint8, table [n, nc] int32) as bytes: ``trans`` with each class of alike byte
    columns kept once, classes numbered by their first byte, so ``trans[:, b] ==
    table[:, classmap[b]]`` (C: ``_dfac.column_classes``; numpy otherwise, the same bytes)."""
    if dfac is not None:
        return dfac.column_classes(c_table(trans))
    t = np.ascontiguousarray(trans, dtype=np.int32)
    _, first, inv = np.unique(np.ascontiguousarray(t.T), axis=0, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(first))
    return rank[inv.reshape(-1)].astype(np.uint8).tobytes(), np.ascontiguousarray(t[:, np.sort(first)]).tobytes()


def depth_representative(dfa: ByteDFA, q: int, depth: int) -> int:
    """The first state of ``q``'s class of states alike up to ``depth`` bytes, in a DFA of more
    states than ``depth`` (only a longer chain has states alike there: a length-bounded string's
    positions with ``depth`` or more characters left); else ``q``. Without the C kernel: ``q``."""
    if not DEPTH_CLASSES or dfac is None or dfa.num_states <= depth:
        return q
    name = f"_depth_first_{depth}"
    first = dfa.__dict__.get(name)
    if first is None:
        cls = depth_classes(dfa, depth)
        first = dfa.__dict__[name] = np.unique(cls, return_index=True)[1][cls]  # (classes are 0..k-1)
    return int(first[q])


def depth_classes(dfa: ByteDFA, depth: int) -> np.ndarray:
    """[S] int32: each state's class of behaviour on byte strings of up to ``depth`` bytes (which
    keep the DFA alive, where it accepts), numbered by first state (C: ``_dfac.depth_classes``,
    Moore's refinement by worklist, shared with ``dfa_minimise.minimal``; ~0.7 ms for a
    128-character string's 1,666 states at depth 48)."""
    return np.frombuffer(dfac.depth_classes(c_table(dfa.trans), np.ascontiguousarray(dfa.final, np.bool_), depth),
                         dtype=np.int32)


# Shapes by (DFA content digest, state), bounded in bytes: a shape is ~4 bytes per byte class and
# state of its sub-automaton (~1 KB per state in the earlier [n, 256] form: a 210-state
# chunked-string DFA made ~200 shapes of up to 210 KB each).
SHAPES_CACHE_BYTES = 64 * 2**20
_SHAPES: dict[tuple[bytes, int], tuple[Hashable, bool]] = {}
_SHAPES_BYTES = 0


def clear_shapes() -> None:
    """Forget the shape memo (``compile.clear_caches``)."""
    global _SHAPES_BYTES
    _SHAPES.clear()
    _SHAPES_BYTES = 0


def _ends_dead(canon: bytes) -> bool:
    """Whether no accepting state of a ``_bfs_shape`` sub-automaton has a way on."""
    n, nc = struct.unpack_from("<ii", canon, 1)  # header, class map, [n, nc] table, flags
    sub = np.frombuffer(canon, dtype=np.int32, count=n * nc, offset=9 + 256).reshape(n, nc)
    fin = np.frombuffer(canon, dtype=bool, offset=9 + 256 + n * nc * 4)
    return not bool((fin & (sub >= 0).any(axis=1)).any())


def _bfs_shape(dfa: ByteDFA, q: int) -> bytes | None:
    """``canonical``'s breadth-first form, or None over ``CANON_MAX`` states: "C", n and nc, the
    class map, the [n, nc] table of alike byte columns once (``column_classes``), the final flags
    (~20 KB for a 256-state string shape instead of the [n, 256] table's ~256 KB, which every walk
    key's hash, comparison and disk digest read: ab_masks' masks 2,304 -> 2,198 ms)."""
    trans = dfa.trans
    if dfac is not None:  # the same bytes in one C call (_dfac.bfs_shape): the 8 slowest shapes of
        # o13020, o10012 and sp_120 (106-246 states), warm: 0.05-0.11 ms, against 0.16-0.32 ms for
        # the C order + numpy bytes before it (in a document, cold: 0.25-0.6 ms)
        return dfac.bfs_shape(c_table(trans), c_bool(dfa.final), q, CANON_MAX)
    order = [q]
    index = {q: 0}
    i = 0
    while i < len(order):
        row = trans[order[i]]
        for t in dict.fromkeys(row[row >= 0].tolist()):
            if t not in index:
                if len(order) >= CANON_MAX:
                    return None
                index[t] = len(order)
                order.append(t)
        i += 1
    return _shape_bytes(dfa, np.array(order))


def _shape_bytes(dfa: ByteDFA, order: np.ndarray) -> bytes:
    """The sub-automaton on ``order``'s states, renumbered by position, and their final flags."""
    trans = dfa.trans
    remap = np.full(trans.shape[0] + 1, -1, dtype=np.int32)
    remap[order] = np.arange(len(order), dtype=np.int32)
    sub = remap[trans[order]]  # -1 (dead) maps through remap[-1] = -1
    fin = dfa.final[order].tobytes()
    cmap, table = column_classes(sub)
    return b"C" + struct.pack("<ii", len(order), len(table) // (4 * len(order))) + cmap + table + fin
