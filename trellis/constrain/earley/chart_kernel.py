"""The chart's C kernels (``_statec.c``) and their Python forms: which form a chart state takes,
the C inner loops of ``earley.Earley`` (``step``, ``close``, ``walk``, ``take_rests``: None where the
module is not built, or with ``TRELLIS_STATE_KERNEL=python``), and the flat step tables of a
terminal DFA (``scan_tables``). ``earley.py`` reads them once per recogniser (``Earley.__init__``),
so a test can make one recogniser of each form."""

from __future__ import annotations

import os
from array import array
from typing import Any, Iterable

import numpy as np

from trellis.constrain.automata.byte_dfa import ByteDFA

# A chart state: ``_statec.State`` where that C module is built (one object the cyclic collector
# never tracks: its scans in a C array), else the tuple ``(frozenset of (t, q, ESet), accepting)``.
# Both read alike: ``state[0]`` the scans (iterable, ``len``), ``state[1]`` accepting; both are
# immutable and hashable, equal when their scans and flag are (tests/constrain/test_chart_state.py).
# ``TRELLIS_STATE_KERNEL=python`` forces the tuple.
try:
    from trellis.constrain.earley._statec import State as NativeState, after as native_after, close as native_close, \
        close_kernel as native_close_kernel, next_kernel as native_next_kernel, step as native_step, \
        take_rests as native_take_rests, walk as native_walk
except ImportError:  # pragma: no cover - depends on the install
    NativeState = native_step = native_close = native_take_rests = native_walk = None
    native_after = native_close_kernel = native_next_kernel = None
if os.environ.get("TRELLIS_STATE_KERNEL", "").lower() == "python":
    NativeState = native_step = native_close = native_take_rests = native_walk = None
    native_after = native_close_kernel = native_next_kernel = None
ChartState = Any


def tuple_state(scans: Iterable[tuple[int, int, Any]], accepting: bool) -> tuple:
    """The Python form of a chart state (scans: (t, q, ESet))."""
    return (frozenset(scans), bool(accepting))


chart_state = NativeState if NativeState is not None else tuple_state
STATE_KERNEL = "c" if NativeState is not None else "python"


def scan_tables(dfa: ByteDFA) -> tuple[array, bytes, bytes]:
    """A DFA's tables for ``Earley.step``: the transitions as a flat ``array`` of int32 (state
    ``trans[(q << 8) | b]``, -1 for none), and per state whether it is final and whether any byte
    moves it on (``bytes`` of 0/1). Cached on the DFA: the string, number and key DFAs every schema
    shares (``regex.DFA_MEMO``) are tabled once per process, not once per grammar.

    Not lists: the collector does not track an ``array`` or ``bytes``, while a list of n * 256
    entries is one object it traverses entry by entry in every collection that reaches it. After
    200 fresh maskbench schemas, such lists held 5.2 of the 5.3 million references a full
    collection followed (``benchmarks/bench_gc.py``). An index into an ``array`` costs ~20 ns more
    than into a list (timeit, ~40 vs ~22 ns); a step makes one per scan. A 1,666-state table listed
    was also ~5 ms and ~15 MB every compile."""
    hit = dfa.__dict__.get("_scan_tables")
    if hit is not None:
        return hit
    if dfa.literal is not None:  # a JSON key's chain: n entries set, not n * 256 copied
        n = len(dfa.literal)
        flat = array("i", [-1]) * ((n + 1) << 8)
        for q, b in enumerate(dfa.literal):
            flat[(q << 8) | b] = q + 1
        hit = (flat, bytes(n) + b"\x01", b"\x01" * n + b"\x00")
    else:
        flat = array("i")  # (from the array's own bytes: no intermediate copy, 1.1 vs 2.0 ms cold for 1,666 states)
        flat.frombytes(np.ascontiguousarray(dfa.trans, dtype=np.int32).reshape(-1).view(np.uint8))
        hit = (flat, dfa.final.astype(np.uint8).tobytes(), (dfa.trans >= 0).any(axis=1).astype(np.uint8).tobytes())
    dfa.__dict__["_scan_tables"] = hit  # never mutated: step only reads them
    return hit


def agenda(kernel: frozenset, nxt: list, lhs_of: list, nullable: list,
           accept_item: int) -> tuple[set, dict, dict, frozenset, bool, frozenset]:
    """``Earley._close``'s closure of ``kernel`` (items with an origin set) in Python (``_statec.close``
    in C) over the recogniser's ``next_sym``, ``lhs`` and ``nullable``: the items, ``waiting`` and
    ``expects`` by symbol, the nonterminals predicted, whether ``accept_item`` completed, and the
    items still waiting for a symbol."""
    items = set(kernel)
    todo = list(items)
    waiting: dict[int, list] = {}
    expects: dict[int, list] = {}
    predicted: set[int] = set()
    accepting = False
    while todo:
        i, o = it = todo.pop()
        s = nxt[i]
        if s is None:
            if i == accept_item:
                accepting = True
            lhs = lhs_of[i]
            for j, o2 in o.waiting.get(lhs, ()):
                it = (j + 1, o2)
                if it not in items:
                    items.add(it)
                    todo.append(it)
            for j in o.static.waiting.get(lhs, ()):
                it = (j + 1, o)
                if it not in items:
                    items.add(it)
                    todo.append(it)
        elif s >= 0:
            if s in waiting:
                waiting[s].append(it)
            else:
                waiting[s] = [it]
            predicted.add(s)
            if nullable[s]:
                it = (i + 1, o)
                if it not in items:
                    items.add(it)
                    todo.append(it)
        else:
            s = -1 - s
            if s in expects:
                expects[s].append(it)
            else:
                expects[s] = [it]
    return (items, waiting, expects, frozenset(predicted), accepting,
            frozenset([it for it in items if nxt[it[0]] is not None]))


def grouped_walk(state: Any, rs: Any, live: np.ndarray, mat_t: np.ndarray, step: Any, charge: Any, take: Any,
                 group_small: int) -> np.ndarray:
    """The Python form of ``take_rests`` (``scannerless._chart_walk``): sorted indices of the rests
    of ``rs`` whose bytes the chart takes from ``state``, stepped a byte at a time and grouped by
    chart state, so rests that reach equal states share every later step (``step``: a memoised
    ``Earley.step``; ``live``: the bytes the chart takes from ``state``). A state left with at most
    ``group_small`` rests finishes them one by one (``take``: ``scannerless._take``); ``charge``
    counts the work (a group's ~15 numpy calls a byte)."""
    flat = mat_t.reshape(-1)
    stride = mat_t.shape[1]
    idx = np.flatnonzero(live[flat[rs.base]])
    groups: dict = {state: (idx, np.zeros(len(idx), dtype=np.int64))} if len(idx) else {}
    out: list[np.ndarray] = []
    while groups:
        nxt_groups: dict = {}
        for st, (r, k) in groups.items():
            charge(16 + (len(r) >> 4))
            if len(r) <= group_small:  # a few rests left in this state: finish in Python
                took = take(st, r.tolist(), rs.tid[r].tolist(), rs.length[r].tolist(), k.tolist())
                if took:
                    out.append(np.array(took, dtype=np.int64))
                continue
            done = rs.length[r] == k
            if done.any():
                out.append(r[done])
                r, k = r[~done], k[~done]
                if not len(r):
                    continue
            b = flat[rs.base[r] + k * stride]
            order = np.argsort(b, kind="stable")
            b, r, k = b[order], r[order], k[order] + 1
            cuts = np.flatnonzero(b[1:] != b[:-1]) + 1
            for lo, hi in zip([0] + cuts.tolist(), cuts.tolist() + [len(b)]):
                nxt = step(st, int(b[lo]))
                if nxt is None:
                    continue
                prev = nxt_groups.get(nxt)
                nxt_groups[nxt] = ((r[lo:hi], k[lo:hi]) if prev is None else
                                   (np.concatenate([prev[0], r[lo:hi]]), np.concatenate([prev[1], k[lo:hi]])))
        groups = nxt_groups
    return np.sort(np.concatenate(out)) if out else np.zeros(0, dtype=np.int64)


def take_each(walk: Any, toks: Any, state: Any, idx: Iterable[int], tids: list[int], lengths: list[int],
              done: list[int]) -> list[int]:
    """The rests ``idx`` (tokens ``tids``, the last ``lengths`` bytes of each) whose bytes after the
    first ``done[j]`` the chart takes whole from ``state`` (``walk``: ``Earley.walk``), in order:
    each distinct rest walked once (the form without ``_statec``; with it every chart walk is
    ``Earley.take_rests``)."""
    seen: dict[bytes, bool] = {}
    out = []
    for i, t, n, j in zip(idx, tids, lengths, done):
        tok = toks[t]
        rest = tok[len(tok) - n + j:]
        ok = seen.get(rest)
        if ok is None:
            ok = seen[rest] = walk(state, rest) is not None
        if ok:
            out.append(i)
    return out
