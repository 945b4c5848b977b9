"""NFA -> minimal byte DFA: determinising and minimising.

Stage: the subset construction (and its shortcut for NFAs that are deterministic already), then
trimming and minimisation (bottom-up for acyclic DFAs, else Moore refinement on hashed
signatures, checked as a bisimulation). ``regex.py`` feeds it the NFAs of ``regex_compile.py``;
``lookaround.py`` its own. The subset construction and ``minimal`` run in C where ``_dfac.c`` is
built (same tables; the code here is the fallback and the reference).
"""

from __future__ import annotations

import os

import numpy as np

from trellis.constrain.automata.byte_dfa import ByteDFA, trim
from trellis.constrain.errors import GrammarError
from trellis.constrain.automata.regex_compile import RegexTooLarge

# ``dfac``: the C kernels of ``subset_construction`` and ``minimal`` (setup.py builds them; an install
# without a compiler runs the Python/numpy code below, which gives the same tables state for state:
# tests/constrain/test_dfa_kernel.py), or None. ``TRELLIS_DFA_KERNEL=numpy`` forces the fallback.
try:
    from trellis.constrain.automata import _dfac as dfac
except ImportError:  # pragma: no cover - depends on the install
    dfac = None
if os.environ.get("TRELLIS_DFA_KERNEL", "").lower() == "numpy":
    dfac = None
KERNEL = "c" if dfac is not None else "numpy"

# Subset states past which a regex is refused by name rather than determinised for minutes. The
# largest real terminal seen is ~20k states (``[a-zA-Z_]\w{0,63}`` with Unicode ``\w``: 0.7 s);
# random nestings of overlapping Unicode classes reach millions (one took 141 s for 88k states).
MAX_DFA_STATES = 100_000
# Edge events (two per edge of each member of each subset) past which a regex is refused by name:
# the subset construction's work, which an NFA of optional items makes quadratic per subset
# (``/(a?){2,300}b/i``: 302 subsets, 18M events, 2.0 s; ``{2,200}``: 5M). ~110 ns an event in C
# on a 2-core VM (qsort per subset): the default bounds a terminal's determinisation near 1 s.
# ``TRELLIS_COMPILE_WORK`` sets it (issue 58: no grammar may hold its caller).
COMPILE_WORK = int(os.environ.get("TRELLIS_COMPILE_WORK", "10000000"))


def determinise(edges: list[list[tuple[int, int, int]]], finals: set[int], start: int, *,
                name: str, pattern: str) -> ByteDFA:
    """The minimal DFA of an NFA: ``subset_construction``, then ``minimal``."""
    return minimal(*subset_construction(edges, finals, start), name=name, pattern=pattern)


def determinised(edges: list[list[tuple[int, int, int]]], finals: set[int],
                 start: int) -> tuple[np.ndarray, np.ndarray]:
    """``subset_construction``'s tables; without the C kernel an NFA that is deterministic already
    (``already_deterministic``) skips the Python subsets. With it, the C construction takes those
    too: the same tables, 3x faster than the Python check (1,188 such NFAs of bench_fresh's schema
    regexes: 232 -> 78 ms)."""
    if dfac is None:
        det = already_deterministic(edges, finals, start)
        if det is not None:
            return det
    return subset_construction(edges, finals, start)


def subset_construction(edges: list[list[tuple[int, int, int]]], finals: set[int],
             start: int) -> tuple[np.ndarray, np.ndarray]:
    """Subset construction: (trans [S, 256], final [S]), states numbered breadth-first, each
    state's successors in byte order of first appearance; in C where the kernel is built (same
    tables; ``_dfac.c``)."""
    if dfac is not None:
        out = dfac.subset_construction(edges, finals, start, MAX_DFA_STATES, COMPILE_WORK)
        if out is None:
            raise RegexTooLarge(f"its DFA passes {MAX_DFA_STATES:,} states")
        if out is False:
            raise _too_much_work()
        tb, fb, n = out
        return np.frombuffer(tb, dtype=np.int32).reshape(n, 256), np.frombuffer(fb, dtype=bool)
    return subset_construction_numpy(edges, finals, start)


def _too_much_work() -> RegexTooLarge:
    return RegexTooLarge(f"determinising it takes over {COMPILE_WORK:,} steps (bounded repeats of optional "
                         "items, or of items that overlap, blow up the subsets; TRELLIS_COMPILE_WORK raises the bound)")


def subset_construction_numpy(edges: list[list[tuple[int, int, int]]], finals: set[int],
                              start: int) -> tuple[np.ndarray, np.ndarray]:
    """``subset_construction`` in Python (the reference the C kernel is tested against)."""
    key0 = frozenset([start])
    ids: dict[frozenset[int], int] = {key0: 0}
    order = [key0]
    # Rows are built as runs of bytes every edge treats alike (target, run length): the NFAs hold
    # byte ranges (a linear pattern's states a few each), and 256 Python steps per state, then a
    # list-of-lists -> array conversion, were most of determinising flexible-whitespace chains.
    runs_to: list[int] = []
    runs_len: list[int] = []

    def target(k: frozenset[int]) -> int:
        j = ids.get(k)
        if j is None:
            if len(order) >= MAX_DFA_STATES:
                raise RegexTooLarge(f"its DFA passes {MAX_DFA_STATES:,} states")
            j = ids[k] = len(order)
            order.append(k)
        return j

    i = work = 0
    while i < len(order):
        cur = order[i]
        i += 1
        work += len(cur) + 2 * sum(len(edges[node]) for node in cur)
        if work > COMPILE_WORK:
            raise _too_much_work()
        # Sweep the edges' endpoints once (O(E log E) a state): Unicode classes give states
        # hundreds of edges, where testing every edge at every cut was quadratic.
        events = sorted([(lo, 1, dst) for node in cur for lo, _, dst in edges[node]]
                        + [(hi + 1, -1, dst) for node in cur for _, hi, dst in edges[node]])
        active: dict[int, int] = {}
        pos = 0
        k = 0
        while k < len(events):
            at = events[k][0]
            if at > pos:
                runs_to.append(target(frozenset(active)) if active else -1)
                runs_len.append(at - pos)
                pos = at
            while k < len(events) and events[k][0] == at:
                _, d, dst = events[k]
                c = active.get(dst, 0) + d
                if c:
                    active[dst] = c
                else:
                    del active[dst]
                k += 1
        if pos < 256:
            runs_to.append(-1)
            runs_len.append(256 - pos)
    return _run_table(runs_to, runs_len), np.array([bool(k & finals) for k in order], dtype=bool)


def _run_table(runs_to: list[int], runs_len: list[int]) -> np.ndarray:
    """[S, 256] int32 transitions from each row's byte runs (target, length), rows back to back."""
    return np.repeat(np.array(runs_to, dtype=np.int32), runs_len).reshape(-1, 256)


def already_deterministic(edges: list[list[tuple[int, int, int]]], finals: set[int],
                           start: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The NFA as a DFA table when no state has two edges on one byte, else None: what
    ``subset_construction`` would build (states numbered in the same breadth-first, byte-ascending
    order, each subset a single state), without its per-state Python work. Linear patterns whose
    items cannot overlap are such NFAs (``[ \t\n\r]{0,64},[ \t\n\r]{0,64}``: 130 states)."""
    srt = []
    for es in edges:
        es = sorted(es)
        if any(b[0] <= a[1] for a, b in zip(es, es[1:])):
            return None
        srt.append(es)
    num = {start: 0}
    order = [start]
    for u in order:  # grows while read: breadth-first
        for _, _, dst in srt[u]:
            if dst not in num:
                num[dst] = len(order)
                order.append(dst)
    runs_to: list[int] = []
    runs_len: list[int] = []
    for u in order:
        pos = 0
        for lo, hi, dst in srt[u]:
            if lo > pos:
                runs_to.append(-1)
                runs_len.append(lo - pos)
            runs_to.append(num[dst])
            runs_len.append(hi + 1 - lo)
            pos = hi + 1
        if pos < 256:
            runs_to.append(-1)
            runs_len.append(256 - pos)
    return _run_table(runs_to, runs_len), np.array([u in finals for u in order], dtype=bool)


def minimal(trans: np.ndarray, final: np.ndarray, *, name: str, pattern: str) -> ByteDFA:
    """Trimmed minimal DFA of ``trans`` (every state reachable from 0): ``minimal_acyclic`` where
    the DFA has no cycle, else ``minimise(trim(...))``; in C where the kernel is built (``_dfac.c``:
    the 1,654 terminal DFAs of 400 maskbench schemas 1,004 -> 84 ms, commit 0bbad7b)."""
    if dfac is not None:
        out = dfac.minimal(np.ascontiguousarray(trans, dtype=np.int32), np.ascontiguousarray(final, dtype=bool))
        if out is None:
            raise GrammarError(f"{name}: the regex /{pattern}/ matches nothing")
        tb, fb, k = out
        return ByteDFA(np.frombuffer(tb, dtype=np.int32).reshape(k, 256), np.frombuffer(fb, dtype=bool))
    return minimal_numpy(trans, final, name=name, pattern=pattern)


def minimal_numpy(trans: np.ndarray, final: np.ndarray, *, name: str, pattern: str) -> ByteDFA:
    """``minimal`` in numpy (the reference the C kernel is tested against)."""
    fast = minimal_acyclic(trans, final, name=name, pattern=pattern)
    return fast if fast is not None else minimise(trim(trans, final, name=name, pattern=pattern))


def minimal_acyclic(trans: np.ndarray, final: np.ndarray, *, name: str, pattern: str) -> ByteDFA | None:
    """``minimise(trim(trans, final))`` in one pass when the DFA (all states reachable from 0)
    has no cycle, else None. Bottom-up (Revuz): in reverse topological order a state is dead if
    it is not final and has no live successor, else its class is given by its finality and its
    successors' classes, which are final by then. Bounded repeats (``[ \t\n\r]{0,64}`` in every
    flexible-whitespace punctuation terminal) are such chains: trimming and Moore refinement
    propagate one step per round there, ~130 rounds each."""
    n = trans.shape[0]
    first, _ = unique_rows(trans.T)
    tc = trans[:, np.sort(first)].tolist()  # one column per byte class
    succ = [sorted({x for x in row if x >= 0}) for row in tc]
    indeg = [0] * n
    for ss in succ:
        for x in ss:
            indeg[x] += 1
    topo = [u for u in range(n) if indeg[u] == 0]
    for u in topo:  # Kahn's algorithm; topo grows while it is read
        for x in succ[u]:
            indeg[x] -= 1
            if indeg[x] == 0:
                topo.append(x)
    if len(topo) < n:
        return None  # a cycle: Moore refinement
    cls = [-1] * n
    ids: dict[tuple, int] = {}
    for u in reversed(topo):
        sig = (bool(final[u]), *[cls[x] if x >= 0 else -1 for x in tc[u]])
        if sig[0] or any(c >= 0 for c in sig[1:]):
            cls[u] = ids.setdefault(sig, len(ids))
    if cls[0] < 0:
        raise GrammarError(f"{name}: the regex /{pattern}/ matches nothing")
    c = np.array(cls, dtype=np.int64)
    live = np.flatnonzero(c >= 0)
    _, rep = np.unique(c[live], return_index=True)
    reps = live[np.sort(rep)]  # classes numbered by first state, as minimise(): the start stays 0
    renum = np.full(len(ids), -1, dtype=np.int64)
    renum[c[reps]] = np.arange(len(reps))
    rows = trans[reps]
    succ_cls = c[np.maximum(rows, 0)]
    mapped = np.where((rows >= 0) & (succ_cls >= 0), renum[succ_cls], -1)  # dead successors: -1
    return ByteDFA(np.ascontiguousarray(mapped.astype(np.int32)), final[reps].copy())


def minimise(dfa: ByteDFA, max_rounds: int = 200) -> ByteDFA:
    """The minimal DFA of a trimmed ``dfa`` (Moore's partition refinement, vectorised over
    byte classes); ``dfa`` itself if refinement needs more than ``max_rounds`` rounds.

    UTF-8 expansion leaves equivalent copies behind: json.lark's STRING interior was four
    states (one per way of arriving), each walked over the whole vocabulary at compile time."""
    t, f = dfa.trans, dfa.final
    n = len(f)
    if n <= 1:
        return dfa
    first, _ = unique_rows(t.T)
    tc = t[:, np.sort(first)]  # one column per byte class: bytes of a class move every state alike
    cls = refine_hashed(tc, f, max_rounds)
    if cls is None:  # a hash collision (never seen): the exact, slower refinement
        cls = refine_exact(tc, f, max_rounds)
    if cls is None:
        return dfa
    k = int(cls.max()) + 1
    if k == n:
        return dfa
    _, rep = np.unique(cls, return_index=True)
    order = np.argsort(rep, kind="stable")  # classes numbered by first state: the start stays 0
    renum = np.empty(k, dtype=np.int64)
    renum[order] = np.arange(k)
    reps = rep[order]
    rows = t[reps]
    trans = np.where(rows >= 0, renum[cls[np.maximum(rows, 0)]], -1).astype(np.int32)
    return ByteDFA(np.ascontiguousarray(trans), f[reps].copy())


def unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of each distinct row's first occurrence, [rows] distinct-row id) of a 2-D array.
    Rows are compared as raw bytes (one np.void each), in no particular order of ids: np.unique
    with ``axis=0`` sorts rows field by field, 1.7 s over the 48 flexible-schema lexer builds
    where this takes milliseconds."""
    a = np.ascontiguousarray(a)
    v = a.view(np.dtype((np.void, a.dtype.itemsize * a.shape[1]))).reshape(-1)
    _, first, inv = np.unique(v, return_index=True, return_inverse=True)
    return first, inv.reshape(-1)


def refine_exact(tc: np.ndarray, f: np.ndarray, max_rounds: int) -> np.ndarray | None:
    """Moore refinement with exact row signatures (np.unique over rows); None past max_rounds."""
    cls = f.astype(np.int64)
    k = len(np.unique(cls))
    for _ in range(max_rounds):
        sig = np.concatenate([cls[:, None], np.where(tc >= 0, cls[np.maximum(tc, 0)], -1)], axis=1)
        _, new = np.unique(sig, axis=0, return_inverse=True)
        cls = new.reshape(-1).astype(np.int64)
        k2 = int(cls.max()) + 1
        if k2 == k:
            return cls
        k = k2
    return None


def refine_hashed(tc: np.ndarray, f: np.ndarray, max_rounds: int,
                   weights: np.ndarray | None = None) -> np.ndarray | None:
    """Moore refinement with each row's signature hashed to one uint64, so a round is a 1-D
    np.unique instead of a row sort (flexible-whitespace schema terminals such as
    ``[ \t\n\r]{0,64},[ \t\n\r]{0,64}`` are chains that need ~130 rounds: 38 -> 4 ms). A
    collision could only merge states; the result is used only if it is a bisimulation (every
    state agrees with its class's first state on finality and on every successor's class), which
    makes merging exact. None past max_rounds or on a failed check."""
    n, c = tc.shape
    succ = np.where(tc >= 0, tc, n)  # n: the missing transition, a class of its own
    w = weights if weights is not None else (
        np.random.default_rng(0x7E11).integers(1, 1 << 62, size=c + 1, dtype=np.uint64) | np.uint64(1))
    cls = f.astype(np.int64)
    k = len(np.unique(cls))
    with np.errstate(over="ignore"):
        for _ in range(max_rounds):
            ext = np.append(cls, -1).astype(np.uint64)
            h = ext[:n] * w[0] + (ext[succ] * w[1:]).sum(axis=1, dtype=np.uint64)
            _, new = np.unique(h, return_inverse=True)
            new = new.reshape(-1).astype(np.int64)
            k2 = int(new.max()) + 1
            cls = new
            if k2 == k:
                break
            k = k2
        else:
            return None
    _, rep = np.unique(cls, return_index=True)
    ext = np.append(cls, -1)
    head = rep[cls]  # each state's class representative
    if not (f == f[head]).all() or not (ext[succ] == ext[succ[head]]).all():
        return None
    return cls


def byte_classes(trans: np.ndarray) -> np.ndarray:
    """[256] int: bytes with identical columns in ``trans`` [S, 256] get one class id, so from any
    state they lead to the same state (and a search over bytes needs one byte per class)."""
    return unique_rows(trans.T)[1].astype(np.int64)


def shortest(dfa: ByteDFA) -> ByteDFA:
    """The DFA of the strings of ``dfa`` that no shorter string of it begins: every accepting
    state loses its way on (xgrammar's ``lazy``: an occurrence commits to its earliest end). Each
    state still reaches acceptance (a shortest path to an accepting state passes no other), so
    nothing dies; states reached only through an accepting one are dropped by ``minimal``."""
    return minimal(_finals_end(dfa), dfa.final.copy(), name="lazy terminal", pattern="")


def _finals_end(dfa: ByteDFA) -> np.ndarray:
    """``dfa``'s transitions with every accepting state made a dead end: a string ends at the
    first accepting state it reaches (``shortest``; ``char_budget`` past its budget)."""
    trans = dfa.trans.copy()
    trans[dfa.final] = -1
    return trans


# States a character-budgeted terminal's automaton may have (``char_budget``): ~1 KB a state in
# the [S, 256] table; xgrammar's ``[^]*`` with max_chars=2048 needs ~10,000.
MAX_BUDGET_STATES = 50_000


def char_budget(dfa: ByteDFA, limit: int, *, name: str) -> ByteDFA:
    """The DFA of xgrammar's ``max_chars=limit`` on ``dfa``'s language L (a code point is counted at
    each byte that is not a UTF-8 continuation byte): the strings of L of at most ``limit`` code
    points, and a longer string of L only if no prefix of it with ``limit`` or more code points
    is in L (the budget is spent where the body cannot end, so it ends at its first way to end
    after: xgrammar's "earliest valid boundary"). States: (state of ``dfa``, code points read)
    up to the budget, then ``dfa``'s states again with their accepting states made dead ends.
    ``GrammarError`` naming ``name`` past ``MAX_BUDGET_STATES``."""
    n = dfa.num_states
    if n * (limit + 2) > MAX_BUDGET_STATES:
        raise GrammarError(f"{name}: max_chars={limit} over a body whose automaton has {n} state(s) needs "
                           f"~{n * (limit + 2):,} states (trellis' limit: {MAX_BUDGET_STATES:,})")
    lead = np.ones(256, dtype=bool)
    lead[0x80:0xC0] = False  # continuation bytes do not start a code point
    over = (limit + 1) * n  # state q of dfa past the budget: over + q
    trans = np.full(((limit + 2) * n, 256), -1, dtype=np.int32)
    final = np.zeros((limit + 2) * n, dtype=bool)
    nxt = dfa.trans
    ok = nxt >= 0
    spent = ok & lead & ~dfa.final[:, None]  # the budget spent: on only where the body could not end
    for c in range(limit + 1):
        # a continuation byte stays in layer c; a lead byte moves to c + 1, or past the budget
        stay = np.where(ok & ~lead, c * n + nxt, -1)
        move = np.where(ok & lead, (c + 1) * n + nxt, -1) if c < limit else np.where(spent, over + nxt, -1)
        trans[c * n:(c + 1) * n] = np.where(lead, move, stay)
        final[c * n:(c + 1) * n] = dfa.final
    tail = _finals_end(dfa)  # past the budget: the first way to end is the end
    trans[over:] = np.where(tail >= 0, over + tail, -1)
    final[over:] = dfa.final
    return minimal(trans, final, name=name, pattern=f"max_chars={limit}")
