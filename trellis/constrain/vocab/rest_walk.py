"""Sets of token suffixes walked through one terminal DFA at once, with numpy.

The scannerless engine decides a token by following its bytes through terminal DFAs: inside one
terminal as long as it can, and, wherever that terminal could end inside the token, on from the
boundary after it with the rest of the token. ``RestSet`` is a set of such byte strings (whole
tokens, or suffixes ``token[off:]``), bucketed by first byte; ``walk(dfa, q, rests)`` runs the DFA
from state ``q`` over all of them at once, one byte column per numpy step, touching only the rests
whose first byte has a transition (so a literal's walk costs the few tokens that start with it,
XGrammar's "cost proportional to the tokens still alive"). It reports which rests stay inside the
terminal to their end, and the *crossings*: (rest, j) where the terminal can end after ``j`` bytes
with bytes left over, as a new ``RestSet`` of the leftovers. None of this depends on the parse
stack, so walks are cached by (DFA state, rest set) and shared by every chart state scanning there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

import numpy as np

from trellis.constrain.vocab.walks import TokenMatrix, c_int64, walkc



@dataclass(eq=False)
class RestSet:
    """Byte strings ``tokens[tid[i]][off[i]:]`` (all non-empty), sorted by first byte."""

    tid: np.ndarray  # [n] int64 token ids
    base: np.ndarray  # [n] int64 flat index of the first byte in ``tm.mat_t``
    length: np.ndarray  # [n] int32 bytes left
    lo: np.ndarray  # [257] int64: the rests starting with byte b are [lo[b], lo[b + 1])
    distinct: bool = False  # every rest is from a different token (then splits of them never coincide)
    # What the set is a function of, when that is shareable (``scannerless._walk``): the shapes of
    # the walks that split it off the vocabulary; None: known only by identity.
    key: Hashable = None

    def __len__(self) -> int:
        return len(self.tid)

    @property
    def firsts(self) -> int:
        """The first bytes present, as a 256-bit int (bit b: some rest starts with b)."""
        f = self.__dict__.get("_firsts")
        if f is None:
            f = self.__dict__["_firsts"] = int.from_bytes(
                np.packbits(np.diff(self.lo) > 0, bitorder="little").tobytes(), "little")
        return f

    @classmethod
    def vocabulary(cls, tm: TokenMatrix) -> "RestSet":
        """Every valid token of ``tm`` from its first byte (``tm.order`` is already by first byte);
        one per token matrix (read-only: 0.7 ms a constraint on Gemma's vocabulary otherwise)."""
        hit = tm.__dict__.get("_vocab_rests")
        if hit is None:
            order = tm.order
            hit = cls(order, tm.rank[order].copy(), tm.lengths[order].astype(np.int32), tm.first_lo, True)
            for a in (hit.tid, hit.base, hit.length):
                a.setflags(write=False)
            tm.__dict__["_vocab_rests"] = hit
        return hit

    def subset(self, tm: TokenMatrix, index: np.ndarray) -> "RestSet":
        """The rests at the sorted indices ``index`` (still in first-byte order: only ``lo`` is
        counted again)."""
        first = tm.mat_t.reshape(-1)[self.base[index]]
        return RestSet(self.tid[index], self.base[index], self.length[index],
                       np.searchsorted(first, np.arange(257)).astype(np.int64), self.distinct)

    @classmethod
    def of(cls, tm: TokenMatrix, tid: np.ndarray, base: np.ndarray, length: np.ndarray, *,
           distinct: bool = False) -> tuple["RestSet", np.ndarray]:
        """The distinct rests among (tid, base, length) and, per input, its index in the set.

        Distinct: one rest ``token[off:]`` reached along several splits of the token is walked
        once (a run of n spaces under ``%ignore WS`` splits 2**n ways, but has n rests).
        ``distinct``: the splits come from rests of different tokens, so no two coincide."""
        if distinct:
            first = tm.mat_t.reshape(-1)[base]
            order = np.argsort(first, kind="stable")
            pos = np.empty(len(order), dtype=np.int64)
            pos[order] = np.arange(len(order), dtype=np.int64)
            lo = np.searchsorted(first[order], np.arange(257)).astype(np.int64)
            return cls(tid[order], base[order], length[order], lo), pos
        ubase, first_at, inv = np.unique(base, return_index=True, return_inverse=True)
        first = tm.mat_t.reshape(-1)[ubase]
        order = np.argsort(first, kind="stable")
        pos = np.empty(len(order), dtype=np.int64)
        pos[order] = np.arange(len(order), dtype=np.int64)
        lo = np.searchsorted(first[order], np.arange(257)).astype(np.int64)
        pick = first_at[order]
        return cls(tid[pick], ubase[order], length[pick], lo), pos[inv.reshape(-1)]


@dataclass(eq=False)
class Walk:
    """One DFA state walked over one ``RestSet``: ``inside[i]`` the DFA survives all of rest i;
    ``cross`` the distinct leftovers after each place the terminal can end early; crossing k
    came from rest ``src[k]`` and left rest ``inv[k]`` of ``cross``. Rests that stay inside have
    no crossings (``drop_inside``)."""

    inside: np.ndarray  # [n] bool
    cross: RestSet | None
    src: np.ndarray  # [k] int64
    inv: np.ndarray  # [k] int64

    def sources(self, allowed: np.ndarray) -> np.ndarray:
        """Indices of the rests of the walked set that some allowed leftover continues
        (``allowed``: sorted indices into ``cross``)."""
        if 8 * len(allowed) >= len(self.inv):
            mask = np.zeros(len(self.cross), dtype=bool)  # type: ignore[arg-type]
            mask[allowed] = True
            return self.src[mask[self.inv]]
        # Few allowed leftovers (the usual case): gather their crossings from a CSR index
        # (crossings grouped by leftover) instead of testing every crossing.
        by_rest, bounds = self._index()
        return by_rest[concat_ranges(bounds[allowed], bounds[allowed + 1])]

    def _index(self) -> tuple[np.ndarray, np.ndarray]:
        """(walked rest of each crossing, grouped by leftover, stably; per leftover a its run
        ``[bounds[a], bounds[a + 1])``), built once per walk: a counting sort in C where the
        kernel is built, else a stable argsort."""
        csr = self.__dict__.get("_csr")
        if csr is None:
            n = len(self.cross)  # type: ignore[arg-type]
            if walkc is None:
                order = np.argsort(self.inv, kind="stable")
                bounds = np.searchsorted(self.inv[order], np.arange(n + 1))
            else:
                o, b = walkc.csr(c_int64(self.inv), n)
                order, bounds = np.frombuffer(o, dtype=np.int64), np.frombuffer(b, dtype=np.int64)
            csr = self.__dict__["_csr"] = (self.src[order], bounds)
        return csr

    def mark_sources(self, allowed: np.ndarray, out: np.ndarray, tid: np.ndarray | None = None) -> None:
        """``out[self.sources(allowed)] = True`` (``out`` bool [n]); with ``tid``, the tokens
        ``tid[self.sources(allowed)]`` set in ``out``, a packed int32 bitmask row. One C loop over
        the allowed leftovers' crossings (``_walkc.gather``) where the kernel is built."""
        if walkc is None:
            src = self.sources(allowed)
            if tid is None:
                out[src] = True
            else:
                ids = tid[src]
                np.bitwise_or.at(out.view(np.uint32), ids >> 5, np.left_shift(1, ids & 31).astype(np.uint32))
            return
        allowed = c_int64(allowed)
        if "_csr" not in self.__dict__ and 8 * len(allowed) >= len(self.inv):  # as in sources: no index
            walkc.gather_dense(c_int64(self.src), c_int64(self.inv), allowed, len(self.cross), tid, out)  # type: ignore[arg-type]
            return
        by_rest, bounds = self._index()
        if tid is None:
            walkc.gather(by_rest, bounds, allowed, None, out)
            return
        # The token ids of the crossings in CSR order, looked up once per walk and token-id array:
        # a tid[x] read per crossing per mask was ~17% of sql_select.lark's fresh documents
        # (cProfile of its six documents; %ignore WS: ~94k space-led tokens cross into a NAME).
        hit = self.__dict__.get("_csr_tok")
        if hit is None or hit[0] is not tid:
            hit = self.__dict__["_csr_tok"] = (tid, np.ascontiguousarray(tid[by_rest], dtype=np.int64))
        walkc.gather_ids(hit[1], bounds, allowed, out)


def member(x: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """``np.isin(x, pool)`` for a sorted ``pool``: one binary search per element (``np.isin``
    sorts both sides: three calls were ~30% of ``cut_walk.patch``, the largest Python item of
    bench_fresh's slowest fresh masks, at open objects' key positions; cProfile)."""
    if not len(pool):
        return np.zeros(len(x), dtype=bool)
    i = np.searchsorted(pool, x)
    i[i == len(pool)] = 0
    return pool[i] == x


def drop_inside(inside: np.ndarray, ci: np.ndarray, cj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The crossings (rest ``ci[k]``, split ``cj[k]``) of rests that do not stay inside.

    Every user of a walk allows the rests that stay inside the terminal outright (a live state of
    a trimmed DFA is a viable prefix), so how else such a rest could split never changes a mask.
    Where terminals abut (``WORD WORD``, ``(_anything _SEPARATOR?)+`` in composition_csv.lark)
    every all-letter token splits at every letter, and its leftovers split again: dropping those
    took a fresh mask there from 0.6-2 s to ms (profile in the commit message)."""
    keep = ~inside[ci]
    return ci[keep], cj[keep]


def concat_ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(lo[i], hi[i])`` (empty runs allowed), with no Python loop:
    offsets within each run plus its start."""
    sizes = hi - lo
    total = int(sizes.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    return np.arange(total, dtype=np.int64) + np.repeat(lo - np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes)


def _starts(rs: RestSet, live: np.ndarray) -> np.ndarray:
    """Indices of the rests whose first byte is in ``live`` (the bucket ranges, concatenated)."""
    return concat_ranges(rs.lo[:-1][live], rs.lo[1:][live])


_SCALED: dict[int, tuple[np.ndarray, np.ndarray, np.int64, np.ndarray]] = {}


def scaled_dfa(trans: np.ndarray, final: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.int64]:
    """(flat table with states scaled by 256 and a sink state S for missing transitions, so one
    step is ``t[state + byte]`` with no branch; final per scaled state; the sink's scaled id),
    memoised per DFA. The entry holds ``trans`` itself, so its id cannot be reused by another
    array while the entry lives (a stale table for a new DFA at a recycled address)."""
    hit = _SCALED.get(id(trans))
    if hit is None or hit[3] is not trans:
        s = trans.shape[0]
        t = np.vstack([np.where(trans >= 0, trans, s), np.full((1, 256), s)]).astype(np.int64) << 8
        fin = np.zeros((s + 1) << 8, dtype=bool)
        fin[np.flatnonzero(final) << 8] = True
        if len(_SCALED) >= 4096:
            _SCALED.clear()
        hit = _SCALED[id(trans)] = (t.reshape(-1), fin, np.int64(s << 8), trans)
    return hit[0], hit[1], hit[2]


def walk(trans: np.ndarray, final: np.ndarray, q: int, rs: RestSet, tm: TokenMatrix,
         follow: np.ndarray | None = None) -> Walk:
    """Run DFA (``trans`` [S, 256], -1 dead; ``final`` [S]) from ``q`` over every rest of ``rs``
    (``walk_numpy``'s contract), in C where the kernel is built: each rest walked on its own to
    its end or death, instead of one numpy step per byte column over every running rest."""
    if walkc is None:
        return walk_numpy(trans, final, q, rs, tm, follow)
    inside = np.zeros(len(rs), dtype=bool)
    stride = tm.mat_t.shape[1]
    a, b = walkc.walk_rests(c_table(trans), c_bool(final), int(q), rows(tm), tm.mat_t.shape[0], stride,
                             rs.base, rs.length, rs.lo, None if follow is None else c_bool(follow), inside)
    ci, cj = np.frombuffer(a, dtype=np.int64), np.frombuffer(b, dtype=np.int64)
    return with_crossings(inside, ci, cj, rs, tm)


def with_crossings(inside: np.ndarray, ci: np.ndarray, cj: np.ndarray, rs: RestSet, tm: TokenMatrix) -> Walk:
    """The ``Walk`` of crossings (rest ``ci[k]`` ends the terminal after ``cj[k]`` bytes) of rests
    that do not stay inside."""
    if not len(ci):
        none = np.zeros(0, dtype=np.int64)
        return Walk(inside, None, none, none)
    sub, inv = leftovers(tm, rs, ci, cj, rs.distinct)
    return Walk(inside, sub, ci, inv)


def leftovers(tm: TokenMatrix, rs: RestSet, ci: np.ndarray, cj: np.ndarray, distinct: bool) -> tuple[RestSet, np.ndarray]:
    """The rest set of the leftovers after the crossings (rest ``ci[k]`` of ``rs`` split after
    ``cj[k]`` bytes) and each crossing's index in it: ``RestSet.of`` over them, in one C call
    where the kernel is built (the same arrays, element for element: test_walk_kernel.py)."""
    if walkc is None:
        stride = tm.mat_t.shape[1]
        return RestSet.of(tm, rs.tid[ci], rs.base[ci] + cj * stride, (rs.length[ci] - cj).astype(np.int32),
                          distinct=distinct)
    tid, base, length, lo, pos = walkc.leftovers(rs.tid, rs.base, rs.length, tm.mat_t.reshape(-1),
                                                 tm.mat_t.shape[1], c_int64(ci), c_int64(cj), distinct)
    return rest_set_of_bytes(tid, base, length, lo), np.frombuffer(pos, np.int64)


def rest_set_of_bytes(tid: bytes, base: bytes, length: bytes, lo: bytes) -> RestSet:
    """The ``RestSet`` a C kernel returned as bytes (int64 tid, base and lo; int32 length):
    read-only views, no copy."""
    i64 = np.int64
    return RestSet(np.frombuffer(tid, i64), np.frombuffer(base, i64), np.frombuffer(length, np.int32),
                   np.frombuffer(lo, i64))


def rows(tm: TokenMatrix) -> np.ndarray:
    """The token matrix row-major ([N, Lmax]: a token's bytes contiguous), for the C kernel."""
    hit = tm.__dict__.get("_rows")
    if hit is None:
        hit = tm.__dict__["_rows"] = np.ascontiguousarray(tm.mat_t.T)
    return hit


def c_table(trans: np.ndarray) -> np.ndarray:
    return trans if trans.dtype == np.int32 and trans.flags.c_contiguous else np.ascontiguousarray(trans, np.int32)


def c_bool(a: np.ndarray) -> np.ndarray:
    return a if a.dtype == np.bool_ and a.flags.c_contiguous else np.ascontiguousarray(a, dtype=np.bool_)


def walk_numpy(trans: np.ndarray, final: np.ndarray, q: int, rs: RestSet, tm: TokenMatrix,
               follow: np.ndarray | None = None) -> Walk:
    """Run DFA (``trans`` [S, 256], -1 dead; ``final`` [S]) from ``q`` over every rest of ``rs``.

    ``follow`` ([256] bool): only splits whose next byte is in it are reported as crossings (the
    bytes that can start whatever may follow this terminal; None: any byte).

    The rests are ordered by length, longest first, so the ones still running at byte k are a
    prefix of the arrays (no compaction per byte), and a dead rest sits in a sink state until
    more than half are dead (then the arrays are compacted once)."""
    n = len(rs)
    inside = np.zeros(n, dtype=bool)
    row = trans[q]
    idx = _starts(rs, row >= 0)
    none = np.zeros(0, dtype=np.int64)
    if not len(idx):
        return Walk(inside, None, none, none)
    t_sc, fin, sink = scaled_dfa(trans, final)
    flat = tm.mat_t.reshape(-1)
    stride = tm.mat_t.shape[1]
    length = rs.length[idx]
    order = np.argsort(-length, kind="stable")
    idx, length = idx[order], length[order]
    base = rs.base[idx]
    st = t_sc[(np.int64(q) << 8) + flat[base]]
    cnt = np.searchsorted(-length, -np.arange(int(length[0]) + 1), side="left")  # cnt[k]: length > k
    alive = len(idx)
    cross_i: list[np.ndarray] = []
    cross_j: list[np.ndarray] = []
    for k in range(1, int(length[0]) + 1):
        m = int(cnt[k])
        ended = st[m:int(cnt[k - 1])]
        if len(ended):
            inside[idx[m:m + len(ended)]] = ended != sink
        if not m:
            break
        st = st[:m]
        nxt = flat[base[:m] + k * stride]
        f = fin[st]
        if follow is not None:
            f &= follow[nxt]
        hit = np.flatnonzero(f)
        if len(hit):
            cross_i.append(idx[hit])
            cross_j.append(np.full(len(hit), k, dtype=np.int64))
        st = t_sc[st + nxt]
        if 2 * alive < m or k % 4 == 0:
            live = st != sink
            alive = int(live.sum())
            if 2 * alive < m:  # compact: drop the dead, keep the longest-first order
                keep = np.flatnonzero(live)
                st, idx, base, length = st[keep], idx[keep], base[keep], length[keep]
                if not alive:
                    break
                cnt = np.searchsorted(-length, -np.arange(int(cnt.shape[0])), side="left")
    if not cross_i:
        return Walk(inside, None, none, none)
    ci, cj = drop_inside(inside, np.concatenate(cross_i), np.concatenate(cross_j))
    return with_crossings(inside, ci, cj, rs, tm)
