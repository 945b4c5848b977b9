"""Whole-vocabulary walks over a byte trie of the tokens: prefix steps shared, vectorised.

``rest_walk.walk`` over ``RestSet.vocabulary`` steps every token's bytes on their own: 1.97M byte
steps on Gemma 3's vocabulary for a state most tokens survive in (a JSON string's interior, a
comment, free text). Tokens that share a prefix share those steps in a trie: 588k nodes on Gemma
(XGrammar's and llguidance's token trie; Dong et al. 2024, "XGrammar", Sec. 3.2). ``TokenTrie``
stores the nodes level by level in lexicographic order, each with its parent, so a level is
stepped with two gathers (the parents' states, then the transitions), and the tokens at or below
a node are one contiguous run of the lexicographic order, so a crossing's tokens are a range
concatenation: one numpy step per level and no Python loop per node.

``walk_vocabulary`` returns exactly what ``rest_walk.walk`` returns for the whole vocabulary (the
same ``inside`` flags and the same crossings, as a ``RestSet`` of leftovers), so the scannerless
engine uses whichever is cheaper: the trie when many tokens start in the state, the flat walk for
the few tokens that start a literal.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trellis.constrain.vocab import rest_walk
from trellis.constrain.vocab.rest_walk import (RestSet, Walk, scaled_dfa, with_crossings, c_bool, c_table, concat_ranges,
                                              drop_inside, rest_set_of_bytes)
from trellis.constrain.vocab.walks import TokenMatrix


@dataclass(eq=False)
class TokenTrie:
    """The valid tokens of a ``TokenMatrix`` as a trie; level k holds the nodes at depth k + 1.

    Tokens are numbered in lexicographic order of their bytes (``lex[i]``: the rest index, i.e.
    position in ``tm.order``, of the i-th). Per level, per node: the byte on its edge, its parent
    (index in level k - 1) and the lexicographic run ``[tlo, thi)`` of the tokens at or below it;
    per level, the tokens that end there and their nodes (tokens with equal bytes, such as a piece
    and its byte-fallback twin, share a node)."""

    lex: np.ndarray
    byte: list[np.ndarray]
    parent: list[np.ndarray]
    tlo: list[np.ndarray]
    thi: list[np.ndarray]
    end_node: list[np.ndarray]  # per level: the node each token ending there ends at
    end_tok: list[np.ndarray]  # per level: those tokens' rest indices

    @property
    def nodes(self) -> int:
        return sum(len(b) for b in self.byte)

    @classmethod
    def of(cls, tm: TokenMatrix) -> "TokenTrie":
        hit = tm.__dict__.get("_trie")
        if hit is None:
            hit = tm.__dict__["_trie"] = cls._build(tm)
        return hit

    @classmethod
    def _build(cls, tm: TokenMatrix) -> "TokenTrie":
        n = len(tm.order)
        lmax = tm.mat_t.shape[0]
        # Lexicographic order by a stable sort of the 0-padded rows: rows equal up to padding
        # differ only in trailing NULs, and ``tm.order`` already puts the shorter (smaller) first.
        by_row = np.ascontiguousarray(tm.mat_t.T)  # [N, Lmax]: row gathers are memcpys
        rows = by_row.view(f"S{lmax}").ravel() if n and lmax else np.zeros(n, "S1")
        lex = np.argsort(rows, kind="stable").astype(np.int64)
        mat = by_row[lex]  # [N, Lmax] bytes in lexicographic order
        ln = tm.lengths[tm.order].astype(np.int64)[lex]
        # lcp[i]: common prefix length of lexicographic tokens i - 1 and i (lcp[0] = 0).
        lcp = np.zeros(n, dtype=np.int64)
        live = np.arange(1, n, dtype=np.int64)  # pairs (i - 1, i) still equal so far
        for j in range(lmax):
            live = live[(mat[live, j] == mat[live - 1, j]) & (ln[live] > j) & (ln[live - 1] > j)]
            if not len(live):
                break
            lcp[live] += 1
        byte, tlo, thi, parent, end_node, end_tok = [], [], [], [], [], []
        cand = np.arange(n, dtype=np.int64)  # tokens longer than k, in lexicographic order
        for k in range(lmax):
            ending = cand[ln[cand] == k + 1]
            cand = cand[ln[cand] > k]
            if not len(cand):
                break
            # A depth-(k+1) node's tokens are one contiguous run of ``cand`` (a token with the
            # node's prefix is long enough); a new run starts where a token shares at most k
            # bytes with its lexicographic predecessor.
            first = np.flatnonzero(lcp[cand] <= k)
            starts = cand[first]
            ends = cand[np.append(first[1:], len(cand)) - 1] + 1
            byte.append(mat[starts, k].astype(np.int64))
            tlo.append(starts)
            thi.append(ends)
            end_node.append(np.searchsorted(starts, ending, side="right") - 1)
            end_tok.append(lex[ending])
            parent.append(np.searchsorted(tlo[k - 1], starts, side="right") - 1 if k else
                          np.zeros(len(starts), dtype=np.int64))
        return cls(lex, byte, parent, tlo, thi, end_node, end_tok)

    def preorder(self) -> tuple[np.ndarray, ...]:
        """The nodes in depth-first preorder, for the C kernel: (byte uint8, depth int32, skip int32
        (the first node after the subtree), tlo, thi, end_lo, end_tok (int64; the tokens ending at
        node i are ``end_tok[end_lo[i]:end_lo[i + 1]]``), levels). A node's tokens are a run of the
        lexicographic order that holds its descendants' runs, so preorder is the order of (run
        start, depth) and a subtree ends at the first node whose run starts at or after its end."""
        hit = self.__dict__.get("_preorder")
        if hit is None:
            depth = np.concatenate([np.full(len(b), k + 1, dtype=np.int32) for k, b in enumerate(self.byte)])
            tlo = np.concatenate(self.tlo)
            order = np.lexsort((depth, tlo))
            at = np.empty(len(order), dtype=np.int64)  # level-major index -> preorder index
            at[order] = np.arange(len(order), dtype=np.int64)
            tlo = np.ascontiguousarray(tlo[order])
            thi = np.ascontiguousarray(np.concatenate(self.thi)[order])
            skip = np.searchsorted(tlo, thi, side="left").astype(np.int32)
            offsets = np.cumsum([0] + [len(b) for b in self.byte])
            node = np.concatenate([at[offsets[k] + e] for k, e in enumerate(self.end_node)])
            tok = np.concatenate(self.end_tok)
            by_node = np.argsort(node, kind="stable")
            end_lo = np.searchsorted(node[by_node], np.arange(len(order) + 1)).astype(np.int64)
            hit = self.__dict__["_preorder"] = (
                np.ascontiguousarray(np.concatenate(self.byte)[order].astype(np.uint8)),
                np.ascontiguousarray(depth[order]), skip, tlo, thi, end_lo,
                np.ascontiguousarray(tok[by_node].astype(np.int64)), len(self.byte))
        return hit


# Whether ``walk_vocabulary`` walks the trie and makes its crossings' leftovers in one C call
# (``_walkc.walk_trie_leftovers``) rather than taking the walk's runs back to Python, spreading them
# out, dropping the tokens inside and calling the generic ``rest_walk.leftovers`` (the same arrays,
# element for element). False: that path (``benchmarks/ab_masks.py --switch trieleft``).
TRIE_LEFTOVERS = True


@dataclass(frozen=True, eq=False)
class TrieCut:
    """Tokens a trie walk need not visit (``slices.trie_cut``): ``known`` ([N] bool over
    ``RestSet.vocabulary``) stay inside, and ``nodes`` (uint8 per node of the trie in preorder)
    marks the nodes all of whose tokens are known: ``walk_vocabulary`` jumps over their subtrees
    and marks ``known`` inside instead."""

    nodes: np.ndarray
    known: np.ndarray


def walk_vocabulary(trans: np.ndarray, final: np.ndarray, q: int, rs: RestSet, tm: TokenMatrix,
                    follow: np.ndarray | None = None, cut: TrieCut | None = None) -> Walk:
    """``rest_walk.walk(trans, final, q, rs, tm, follow)`` for ``rs = RestSet.vocabulary(tm)``.

    In C where the kernel is built (``walk_vocabulary_numpy``'s result, element for element): a
    depth-first walk of the trie that jumps over a dead node's subtree, and over a subtree ``cut``
    marks (``slices.trie_cut``: tokens known to stay inside from ``q``; the same result)."""
    walkc = rest_walk.walkc
    if walkc is None:
        return walk_vocabulary_numpy(trans, final, q, rs, tm, follow)
    trie = TokenTrie.of(tm)
    inside = np.zeros(len(rs), dtype=bool)
    if not trie.byte:
        none = np.zeros(0, dtype=np.int64)
        return Walk(inside, None, none, none)
    byte, depth, skip, tlo, thi, end_lo, end_tok, levels = trie.preorder()
    if TRIE_LEFTOVERS:  # the walk, its crossings less the inside tokens, and their leftovers: one C call
        ci, tid, base, length, lo257, pos = walkc.walk_trie_leftovers(
            c_table(trans), c_bool(final), int(q), byte, depth, skip, tlo, thi, end_lo, end_tok,
            None if follow is None else c_bool(follow), inside, levels, None if cut is None else cut.nodes,
            None if cut is None else c_bool(cut.known), trie.lex, rs.tid, rs.base, rs.length, rs.lo,
            tm.mat_t.reshape(-1), tm.mat_t.shape[1])
        if not ci:
            none = np.zeros(0, dtype=np.int64)
            return Walk(inside, None, none, none)
        sub = rest_set_of_bytes(tid, base, length, lo257)
        return Walk(inside, sub, np.frombuffer(ci, np.int64), np.frombuffer(pos, np.int64))
    a, b, c = walkc.walk_trie(c_table(trans), c_bool(final), int(q), byte, depth, skip, tlo, thi, end_lo, end_tok,
                              None if follow is None else c_bool(follow), inside, levels,
                              None if cut is None else cut.nodes)
    if cut is not None:  # the tokens under the subtrees it jumped over, and the others it knows
        inside |= cut.known
    lo, hi = np.frombuffer(a, dtype=np.int64), np.frombuffer(b, dtype=np.int64)
    ci, cj = drop_inside(inside, trie.lex[concat_ranges(lo, hi)], np.repeat(np.frombuffer(c, dtype=np.int64), hi - lo))
    return with_crossings(inside, ci, cj, rs, tm)


def walk_vocabulary_numpy(trans: np.ndarray, final: np.ndarray, q: int, rs: RestSet, tm: TokenMatrix,
                          follow: np.ndarray | None = None) -> Walk:
    """``rest_walk.walk_numpy(trans, final, q, rs, tm, follow)`` for ``rs = RestSet.vocabulary(tm)``.

    Every node of a level is stepped (dead ones sit in the sink state): two gathers per node and
    no compaction, which beats following only the live frontier when most tokens live on."""
    trie = TokenTrie.of(tm)
    n = len(rs)
    inside = np.zeros(n, dtype=bool)
    none = np.zeros(0, dtype=np.int64)
    if not trie.byte:
        return Walk(inside, None, none, none)
    t_sc, fin, sink = scaled_dfa(trans, final)
    st = t_sc[(np.int64(q) << 8) + trie.byte[0]]
    cross_lo: list[np.ndarray] = []
    cross_hi: list[np.ndarray] = []
    cross_j: list[np.ndarray] = []
    for k in range(len(trie.byte)):
        if len(trie.end_node[k]):  # tokens that end here and are still in the terminal
            inside[trie.end_tok[k]] = st[trie.end_node[k]] != sink
        if k + 1 >= len(trie.byte):
            break
        ps = st[trie.parent[k + 1]]
        b = trie.byte[k + 1]
        f = fin[ps]  # the terminal can end after these k + 1 bytes, before the child's byte
        if follow is not None:
            f &= follow[b]
        hit = np.flatnonzero(f)
        if len(hit):
            cross_lo.append(trie.tlo[k + 1][hit])
            cross_hi.append(trie.thi[k + 1][hit])
            cross_j.append(np.full(len(hit), k + 1, dtype=np.int64))
        st = t_sc[ps + b]
        if k % 4 == 3 and not (st != sink).any():
            break
    if not cross_lo:
        return Walk(inside, None, none, none)
    lo, hi = np.concatenate(cross_lo), np.concatenate(cross_hi)
    ci, cj = drop_inside(inside, trie.lex[concat_ranges(lo, hi)], np.repeat(np.concatenate(cross_j), hi - lo))
    return with_crossings(inside, ci, cj, rs, tm)
