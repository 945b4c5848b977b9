"""Vocabulary walks of a cut terminal, derived from the walk of the terminal it was cut from.

A JSON Schema object that allows other keys has a key terminal "any string except the declared
keys" (``regex.difference``: the string DFA times the keys' trie, ``GrammarIR.lexical_priority``),
and a follow guard restricts a terminal's first character (``regex.restrict_first_char``). Such a
*cut* DFA C simulates its terminal's DFA B: every state s of C has an origin o(s) in B, every
transition of C is B's transition from o(s) (or is missing), and C's final states are B's minus
some. Each object's key terminal is a different DFA, so its walks (2.6 ms over Gemma's
vocabulary from the state after ``"``) were never shared, although they differ from the string's
walk (shared by every schema, ``walk_cache.py``) only for the few tokens that spell a declared key.

``patch`` makes that exact. A state is *tainted* when a *special* place is reachable from it:
a byte B takes from o(s) that C does not (a word removed), or a state whose finality differs.
From an untainted state C's sub-automaton is B's from o(s), so the walks are equal. From a
tainted state q, a token's walk differs from B's walk from o(q) only if it passes a special place;
the byte strings that lead from q to one (``special_paths``, bounded) name those tokens (their
prefixes, by bisection over the sorted vocabulary). Those tokens are walked in C alone, and B's
walk is patched: their bits and crossings are replaced. Since C's language from q is a subset of
B's from o(q), C's answers can only remove: a patch that would add a crossing the base walk does
not list (a token that stays inside B, whose crossings ``drop_inside`` dropped, but dies in C)
falls back to a full walk, as do states with too many special paths (a follow guard's start).

Measured on maskbench (Gemma's vocabulary): the key walk of an open object took ~2.6 ms per
object and key prefix; Github_hard o12291's fresh masks 249 -> 144 ms with the patch (commit
c951e9b), 281 -> 156 ms for its whole request in ``benchmarks/bench_fresh.py``. Where every special
path ends in a removed byte (a key after a declared key's last character), the patch is a function
of the base walk and the paths, memoised on the base walk (``_removal_key``): shared by every open
object of every schema. ``ab_masks.py --switch removals --carry --reps 2`` (100 schemas): masks
1,178.5 -> 1,040.7 ms, o12291 70.0 -> 50.8 ms.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trellis.constrain.automata.byte_dfa import ByteDFA, Cut
from trellis.constrain.vocab.literal_walk import SortedVocab
from trellis.constrain.vocab.rest_walk import RestSet, Walk, c_bool, c_table, member, walk
from trellis.constrain.vocab.walks import TokenMatrix, walkc

# Bounds past which a tainted state is walked in full instead of patched: the special paths
# enumerated, the states visited while enumerating them, and the tokens they select (a patch is
# a Python bisection per path plus a walk of the selected tokens; a follow guard that removes
# most first bytes selects most of the vocabulary and is cheaper walked whole).
MAX_PATHS = 1024
MAX_NODES = 8192
MAX_AFFECTED = 1 << 14


@dataclass(eq=False)
class Simulation:
    """How cut DFA ``cut`` sits inside its terminal's DFA ``base`` (module docstring)."""

    cut: ByteDFA
    base: ByteDFA
    origin: np.ndarray  # [S_cut] base state of each cut state
    special_final: np.ndarray  # [S_cut] finality differs from the origin's
    removed: np.ndarray  # [S_cut, 256] base takes the byte from the origin, the cut does not
    tainted: np.ndarray  # [S_cut] a special place is reachable (in >= 1 byte)

    @classmethod
    def of(cls, cut: ByteDFA, base: ByteDFA) -> "Simulation | None":
        """The simulation of ``base`` by ``cut`` from start states 0, or None when ``cut`` does
        not simulate ``base`` (a transition ``base`` lacks, or a state with two origins)."""
        if cut.cut is not None and cut.cut.base is base:
            return cls._of_trie(cut, cut.cut)
        n = cut.num_states
        origin = np.full(n, -1, dtype=np.int64)
        origin[0] = 0
        frontier = np.array([0], dtype=np.int64)
        while len(frontier):
            rows, brows = cut.trans[frontier], base.trans[origin[frontier]]
            live = rows >= 0
            if (brows[live] < 0).any():
                return None
            t, bt = rows[live].astype(np.int64), brows[live].astype(np.int64)
            known = origin[t] >= 0
            if (origin[t[known]] != bt[known]).any():
                return None
            new, first = np.unique(t[~known], return_index=True)
            origin[new] = bt[~known][first]
            if (origin[t[~known]] != bt[~known]).any():
                return None
            frontier = new
        # States unreachable from the start (restrict_first_char keeps the base's start) have no
        # origin; no scan is ever in them, and ``patch`` declines them.
        reach = origin >= 0
        o = np.where(reach, origin, 0)
        removed = (base.trans[o] >= 0) & (cut.trans < 0) & reach[:, None]
        special_final = (cut.final != base.final[o]) & reach
        # tainted: can reach a special place in >= 1 byte (edges as unique (source, target) pairs)
        src, byte = np.nonzero(cut.trans >= 0)
        codes = np.unique(src.astype(np.int64) * n + cut.trans[src, byte])
        ps, pt = codes // n, codes % n
        tainted = removed.any(axis=1)
        tainted[ps[special_final[pt]]] = True
        while True:
            more = tainted.copy()
            more[ps[tainted[pt]]] = True
            if (more == tainted).all():
                break
            tainted = more
        return cls(cut, base, origin, special_final, removed, tainted)

    @classmethod
    def _of_trie(cls, cut: ByteDFA, how: Cut) -> "Simulation":
        """``of`` for a DFA cut by a trie of words, from what its construction recorded
        (``byte_dfa.Cut``): the origins are known, special places lie in the product's tree (the
        states before ``inner``; the rest are the base's own), and taint climbs the tree from
        child to parent. The general search above costs ~10 numpy calls per byte of the longest
        key and a unique over all [S, 256] edges: ~0.2-0.3 ms per open object with a few keys."""
        base, origin, k = how.base, how.origin, how.inner
        n = cut.num_states
        removed = np.zeros((n, 256), dtype=bool)
        removed[:k] = (base.trans[origin[:k]] >= 0) & (cut.trans[:k] < 0)
        special_final = np.zeros(n, dtype=bool)
        special_final[:k] = cut.final[:k] != base.final[origin[:k]]
        sub = cut.trans[:k]
        src, byte = np.nonzero((sub >= 0) & (sub < k))
        parent = np.full(k, -1, dtype=np.int64)
        parent[sub[src, byte]] = src
        tainted = np.zeros(n, dtype=bool)
        tainted[:k] = removed[:k].any(axis=1)
        tainted[parent[special_final[:k] & (parent >= 0)]] = True
        up, t = parent.tolist(), tainted[:k].tolist()
        for c in range(k - 1, 0, -1):  # a child is numbered after its parent
            if t[c]:
                t[up[c]] = True
        tainted[:k] = t
        return cls(cut, base, origin, special_final, removed, tainted)

    def special_paths(self, q: int, max_len: int) -> list[bytes] | None:
        """The byte strings (at most ``max_len`` long) that lead from ``q`` to a special place,
        each cut at the first one; None past the bounds (``MAX_PATHS``, ``MAX_NODES``). In C
        where ``_walkc`` is built (the same search, order and bounds), over ``_sparse``'s lists as
        arrays made in C once (``_walkc.special_ways``): o78130's 40 searches took 26 -> 13 ms,
        o9908's four on a 4,096-state cut 25 -> 5 ms (most of it the listing)."""
        if walkc is not None:
            ways = self.__dict__.get("_ways_c")
            if ways is None:
                ways = self.__dict__["_ways_c"] = walkc.special_ways(
                    c_table(self.cut.trans), c_bool(self.removed), c_bool(self.tainted), c_bool(self.special_final))
            return walkc.special_paths(*ways, q, max_len, MAX_PATHS, MAX_NODES)
        gone, ways = self._sparse()
        paths: list[bytes] = []
        stack = [(q, b"")]
        nodes = 0
        while stack:
            s, p = stack.pop()
            nodes += 1
            if nodes > MAX_NODES:
                return None
            paths.extend(p + bytes((b,)) for b in gone.get(s, ()))
            deeper = len(p) + 1 < max_len
            for b, t, special in ways.get(s, ()):
                if special:
                    paths.append(p + bytes((b,)))
                elif deeper:
                    stack.append((t, p + bytes((b,))))
            if len(paths) > MAX_PATHS or nodes + len(stack) > MAX_NODES:
                return None  # (every state on the stack will be counted: past the bound either way)
        return paths

    def _sparse(self) -> tuple[dict[int, list[int]], dict[int, list[tuple[int, int, bool]]]]:
        """Per tainted state: its removed bytes, and its ways to a special final state or to a
        tainted one (byte, target, whether the target is special final): what ``special_paths``
        follows, listed once (a numpy row scan per visited state was ~0.3 ms per open object)."""
        hit = self.__dict__.get("_ways")
        if hit is None:
            ts = np.flatnonzero(self.tainted)
            rows = self.cut.trans[ts]
            gone: dict[int, list[int]] = {}
            i, b = np.nonzero(self.removed[ts])
            for s, bb in zip(ts[i].tolist(), b.tolist()):
                gone.setdefault(s, []).append(bb)
            ok = rows >= 0
            tgt = np.where(ok, rows, 0)
            useful = ok & (self.tainted[tgt] | self.special_final[tgt])
            i, b = np.nonzero(useful)
            t = rows[i, b]
            ways: dict[int, list[tuple[int, int, bool]]] = {}
            for s, bb, tt, sf in zip(ts[i].tolist(), b.tolist(), t.tolist(), self.special_final[t].tolist()):
                ways.setdefault(s, []).append((bb, tt, sf))
            hit = self.__dict__["_ways"] = (gone, ways)
        return hit


def affected_rests(paths: list[bytes], tm: TokenMatrix) -> np.ndarray:
    """Sorted indices in ``RestSet.vocabulary(tm)`` of the tokens that start with some path (the
    ranges of the sorted vocabulary in one C call where ``_walkc`` is built)."""
    sv = SortedVocab.of(tm)
    if walkc is not None:
        r = np.frombuffer(walkc.prefix_ranges(sv.blob, sv.offs, paths), dtype=np.int64).reshape(-1, 2)
        counts = r[:, 1] - r[:, 0]
        ends = np.cumsum(counts)
        total = int(ends[-1]) if len(ends) else 0
        if not total:
            return np.zeros(0, dtype=np.int64)
        # position j of range i: r[i, 0] + j, all ranges back to back
        starts = np.repeat(r[:, 0] - (ends - counts), counts)
        return np.unique(sv.rest[starts + np.arange(total)])
    runs = []
    for p in paths:
        bounds = sv.prefix_bounds(p) if p else [[0, 0, len(sv.keys)]]
        if len(bounds) >= max(len(p), 1):  # some token starts with all of p: they are [lo, hi)
            lo, _, hi = bounds[-1]
            runs.append(sv.rest[lo:hi])
    return np.unique(np.concatenate(runs)) if runs else np.zeros(0, dtype=np.int64)


def _codes(src: np.ndarray, j: np.ndarray, width: int) -> np.ndarray:
    return src * width + j


def patch(sim: Simulation, q: int, base_entry: tuple[np.ndarray, Walk], tm: TokenMatrix,
          follow: np.ndarray | None) -> tuple[np.ndarray, Walk] | None:
    """The vocabulary walk of the cut DFA from ``q`` as (packed inside bits, walk without its
    ``inside`` array), from ``base_entry`` (the same for the base DFA from ``origin[q]``), or
    None when the patch is out of bounds or could not be exact (module docstring)."""
    if sim.origin[q] < 0:
        return None
    if not sim.tainted[q]:
        return base_entry
    paths = sim.special_paths(q, tm.max_len)
    if paths is None:
        return None
    packed, w = base_entry
    key = _removal_key(sim, q, paths, follow) if REMOVAL_MEMO else None
    memo = w.__dict__.setdefault("_removals", {}) if key is not None else None
    if memo is not None:
        hit = memo.get(key)
        if hit is not None and hit[0] is packed:
            return base_entry if hit[1] is _BASE else hit[1]
    out = _patch(sim, q, paths, base_entry, tm, follow)
    if memo is not None:
        if len(memo) >= MAX_REMOVALS:
            memo.clear()
        memo[key] = (packed, _BASE if out is base_entry else out)
    return out


# A patch's result where every special path ends in a removed byte, memoised on the base walk by
# (paths, the cut state's finality, followers): ``_removal_key``. At most this many per base walk
# (each holds a mask row: 32 KB on Gemma's vocabulary, so <= 2 MB per shared walk; the one-quote
# path of every declared key is one entry, the key sets after an object's opening quote one each).
MAX_REMOVALS = 64
# False: every patch computed (``benchmarks/ab_masks.py --switch removals``).
REMOVAL_MEMO = True
_BASE = object()  # (memo value: the base entry itself, whichever tuple holds it)


def _removal_key(sim: Simulation, q: int, paths: list[bytes], follow: np.ndarray | None) -> tuple | None:
    """What ``_patch``'s result depends on besides the base entry, when every special path from
    ``q`` ends in a byte the cut removed (else None: a path ends at a state whose finality
    differs, past which the cut's own states decide). Along a path the cut's states are the
    base's (no special place before its end: ``special_paths`` cuts each path at the first), so
    an affected token runs as in the base walk from ``origin[q]`` up to the removed byte and dies
    there: the result is a function of the base walk, the paths and the followers. An open
    object's key after a declared key's last character (``"name`` with ``"`` removed) is the
    usual case: one path, the same base walk (a string's interior) in every object and schema
    (Github_hard o12291: 63 of its 98 patches)."""
    if sum(map(len, paths)) > 64:
        return None
    trans, removed = sim.cut.trans, sim.removed
    for p in paths:
        s = q
        for b in p[:-1]:
            s = int(trans[s, b])
        if not removed[s, p[-1]]:
            return None
    return (tuple(sorted(paths)), bool(sim.cut.final[q]), None if follow is None else follow.tobytes())


def _patch(sim: Simulation, q: int, paths: list[bytes], base_entry: tuple[np.ndarray, Walk], tm: TokenMatrix,
           follow: np.ndarray | None) -> tuple[np.ndarray, Walk] | None:
    """``patch`` past its memo."""
    aff = affected_rests(paths, tm)
    if not len(aff):
        return base_entry
    if len(aff) > MAX_AFFECTED:
        return None
    packed, w = base_entry
    rs = RestSet.vocabulary(tm)
    stride = tm.mat_t.shape[1]
    width = tm.max_len + 1
    sub, pos = RestSet.of(tm, rs.tid[aff], rs.base[aff], rs.length[aff], distinct=True)
    back = np.empty(len(sub), dtype=np.int64)
    back[pos] = aff  # sub index -> vocabulary rest index
    w2 = walk(sim.cut.trans, sim.cut.final, q, sub, tm, follow)
    # the cut's crossings of the affected tokens, as (rest, split) codes
    if w2.cross is not None:
        j2 = (w2.cross.base[w2.inv] - sub.base[w2.src]) // stride
        cut_codes = _codes(back[w2.src], j2, width)
    else:
        cut_codes = np.zeros(0, dtype=np.int64)
    if w.cross is not None:
        jb = (w.cross.base[w.inv] - rs.base[w.src]) // stride
        base_codes = _codes(w.src, jb, width)
    else:
        base_codes = np.zeros(0, dtype=np.int64)
    if not member(cut_codes, np.sort(base_codes)).all():
        return None  # a crossing the base walk dropped (or never had): walk in full
    dead = back[~w2.inside]  # affected tokens that do not stay inside the cut DFA
    if len(dead):
        packed = packed & ~tm.pack_ids(rs.tid[dead])
    if w.cross is None:
        return packed, w
    keep = ~member(w.src, aff) | member(base_codes, np.sort(cut_codes))  # (aff: sorted, distinct)
    if keep.all():
        return packed, w
    none = np.zeros(0, dtype=bool)
    return packed, Walk(none, w.cross, w.src[keep], w.inv[keep])
